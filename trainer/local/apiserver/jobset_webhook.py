"""What JobSet's own validating webhook enforces, built into the local API server so
violations show up locally as they would on a cluster (upstream:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go):

* on create: every generated name (Job, pod with the 5-character suffix, hostname,
  subdomain) is a DNS-1035 label of at most 63 characters; and the limits JobSet checks here
  rather than in its CRD (``managedBy``, ``groupName``, failure-policy rules), with JobSet's
  messages, from :mod:`trainer.admission.jobset_rules`, and its checks of the subdomain, the
  success policy's targets and the coordinator;
* on update: ``spec.replicatedJobs`` is immutable except, while the old or the new object is
  suspended, each pod template's labels, annotations, nodeSelector, tolerations and
  schedulingGates; ``managedBy`` never changes.
"""

from __future__ import annotations

import re
from typing import Any

from trainer.admission.jobset_rules import (
    failure_policy_errors,
    group_name_errors,
    managed_by_errors,
    structure_errors,
)
from trainer.api.jobset import JobSetSpec
from trainer.api.jobset_contract import mask_pod_templates
from trainer.machinery.errors import INVALID, FieldError
from trainer.runtime import naming

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def validate_create(obj: dict[str, Any]) -> list[FieldError]:
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = JobSetSpec.from_wire(obj.get("spec") or {})
    except Exception:  # the CRD schema reports malformed specs
        return []
    errors = managed_by_errors(spec.managed_by) + group_name_errors(spec)
    explicit_subdomain = bool(spec.network and spec.network.subdomain)
    for gen in naming.generated_names(name, spec):
        if gen.kind in ("PersistentVolumeClaim", "Volume"):
            continue  # not JobSet's to check (the Job API refuses a volume name over 63)
        if gen.kind == "subdomain" and explicit_subdomain:
            continue  # a given subdomain is checked with JobSet's messages (structure_errors)
        if len(gen.name) > naming.MAX_NAME or not DNS1035.match(gen.name):
            where = (
                f"spec.replicatedJobs[{gen.replicated_job}]"
                if gen.replicated_job
                else "spec.network.subdomain"
            )
            errors.append(
                FieldError(
                    where if gen.kind == "subdomain" else "metadata.name",
                    INVALID,
                    f"generated {gen.kind} name {gen.name!r} ({len(gen.name)} characters) must be "
                    "a valid DNS-1035 label of at most 63 characters",
                    name,
                )
            )
    return errors + failure_policy_errors(spec) + structure_errors(spec)


def validate_update(obj: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    spec, old_spec = obj.get("spec") or {}, old.get("spec") or {}
    errors = []
    if spec.get("managedBy") != old_spec.get("managedBy"):
        errors.append(
            FieldError("spec.managedBy", INVALID, "field is immutable", spec.get("managedBy"))
        )
    new_jobs, old_jobs = spec.get("replicatedJobs") or [], old_spec.get("replicatedJobs") or []
    if new_jobs == old_jobs:
        return errors
    suspended = bool(spec.get("suspend")) or bool(old_spec.get("suspend"))
    if not suspended or mask_pod_templates(new_jobs) != mask_pod_templates(old_jobs):
        # JobSet's ValidateImmutableField error: only the pod templates' labels, annotations,
        # nodeSelector, tolerations and schedulingGates may change, while suspended.
        errors.append(FieldError("spec.replicatedJobs", INVALID, "field is immutable", new_jobs))
    return errors
