"""What JobSet's own validating webhook enforces, built into the local API server so
violations show up locally as they would on a cluster (upstream:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go):

* on create: every generated name (Job, pod with the 5-character suffix, hostname,
  subdomain) is a DNS-1035 label of at most 63 characters; and the limits JobSet checks here
  rather than in its CRD, with JobSet's messages: ``managedBy`` is a domain-prefixed path of
  at most 63 bytes, each ``groupName`` a DNS-1035 label, and each failure-policy rule has a
  unique name of 1 to 128 characters matching ``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$``,
  known job failure reasons and target replicated jobs of this JobSet;
* on update: ``spec.replicatedJobs`` is immutable except, while the old or the new object is
  suspended, each pod template's labels, annotations, nodeSelector, tolerations and
  schedulingGates; ``managedBy`` never changes.
"""

from __future__ import annotations

import re
from typing import Any

from trainer.admission.patches import domain_prefixed_path_errors
from trainer.api.errors import FORBIDDEN, INVALID, TOO_LONG, FieldError
from trainer.api.jobset import JOB_FAILURE_REASONS, JobSetSpec
from trainer.api.jobset_mutable import mask_pod_templates
from trainer.api.names import is_dns1035_label
from trainer.runtime import naming

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_MANAGED_BY = 63
RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MIN_RULE_NAME, MAX_RULE_NAME = 1, 128
GROUP_NAME_TOO_LONG = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"


class Message(FieldError):
    """An error JobSet's webhook reports without a field path (Go's ``errors.New``)."""

    def __str__(self) -> str:
        return self.message


def _message(text: str) -> FieldError:
    return Message("", INVALID, text)


def validate_create(obj: dict[str, Any]) -> list[FieldError]:
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = JobSetSpec.from_wire(obj.get("spec") or {})
    except Exception:  # the CRD schema reports malformed specs
        return []
    errors = _managed_by(spec.managed_by) + _group_names(spec)
    for gen in naming.generated_names(name, spec):
        if gen.kind == "PersistentVolumeClaim":
            continue
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
    return errors + _failure_policy(spec)


def _managed_by(manager: str | None) -> list[FieldError]:
    if manager is None:
        return []
    errors = domain_prefixed_path_errors("spec.managedBy", manager)
    if len(manager.encode()) > MAX_MANAGED_BY:
        errors.append(
            FieldError("spec.managedBy", TOO_LONG, f"may not be more than {MAX_MANAGED_BY} bytes")
        )
    return errors


def _group_names(spec: JobSetSpec) -> list[FieldError]:
    return [
        _message(GROUP_NAME_TOO_LONG if "must be no more than 63" in text else text)
        for job in spec.replicated_jobs or []
        for text in is_dns1035_label(job.group_name)
    ]


def _failure_policy(spec: JobSetSpec) -> list[FieldError]:
    """JobSet's ``validateFailurePolicy``, message for message."""
    if spec.failure_policy is None:
        return []
    jobs = [job.name for job in spec.replicated_jobs or []]
    errors: list[FieldError] = []
    indices: dict[str, list[int]] = {}
    for i, rule in enumerate(spec.failure_policy.rules or []):
        size = len(rule.name.encode())
        if not MIN_RULE_NAME <= size <= MAX_RULE_NAME:
            errors.append(
                _message(
                    f"invalid failure policy rule name of length {size}, the rule name must be "
                    f"at least {MIN_RULE_NAME} characters long and at most {MAX_RULE_NAME} "
                    "characters long"
                )
            )
        indices.setdefault(rule.name, []).append(i)
        if not RULE_NAME.fullmatch(rule.name):
            errors.append(
                _message(
                    f"invalid failure policy rule name '{rule.name}', a failure policy rule name "
                    "must start with an alphabetic character, optionally followed by a string of "
                    "alphanumeric characters or '_,:', and must end with an alphanumeric "
                    "character or '_'"
                )
            )
        errors += [
            _message(
                f"invalid replicatedJob name '{target}' in failure policy does not appear in "
                ".spec.ReplicatedJobs"
            )
            for target in rule.target_replicated_jobs or []
            if target not in jobs
        ]
        errors += [
            _message(
                f"invalid job failure reason '{reason}' in failure policy is not a recognized "
                "job failure reason"
            )
            for reason in rule.on_job_failure_reasons or []
            if reason not in JOB_FAILURE_REASONS
        ]
    errors += [
        _message(
            f"rule names are not unique, rules with indices [{' '.join(map(str, where))}] all "
            f"have the same name '{rule_name}'"
        )
        for rule_name, where in indices.items()
        if len(where) > 1
    ]
    return errors


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
        errors.append(
            FieldError(
                "spec.replicatedJobs",
                FORBIDDEN,
                "field is immutable: only the pod templates' labels, annotations, nodeSelector, "
                "tolerations and schedulingGates may change, and only while the JobSet is "
                "suspended",
            )
        )
    return errors
