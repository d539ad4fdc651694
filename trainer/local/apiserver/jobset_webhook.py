"""What JobSet's own webhooks do, built into the local API server so a JobSet is defaulted and
refused locally as on a cluster (upstream:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go; the
checks and their order in :mod:`trainer.admission.jobset_rules`):

* on create: the defaulting webhook's defaults (:func:`default_create`), then the validating
  webhook's checks, answered as JobSet v0.12.0 answers them: a 422 Invalid of the JobSet whose
  errors without a field read ``<nil>: Internal error: ...`` (JobSet wraps them so);
* on update: ``spec.replicatedJobs`` is immutable except, while the old or the new object is
  suspended, each pod template's labels, annotations, nodeSelector, tolerations and
  schedulingGates; ``managedBy`` never changes.

docs/local-plane.md, "JobSet's admission checks": the test bed's JobSet answered each case of
tests/jobset_webhook_cases.py as this module does.
"""

from __future__ import annotations

from typing import Any

from trainer.admission.jobset_rules import Message, create_errors, default_create
from trainer.api.jobset import JobSetSpec
from trainer.api.jobset_contract import mask_pod_templates
from trainer.machinery.errors import INTERNAL, INVALID, NIL_PATH, FieldError

__all__ = ["default_create", "validate_create", "validate_update"]


def validate_create(obj: dict[str, Any]) -> list[FieldError]:
    """The validating webhook's errors for a defaulted JobSet, as JobSet reports them."""
    name = (obj.get("metadata") or {}).get("name", "")
    try:
        spec = JobSetSpec.from_wire(obj.get("spec") or {})
    except Exception:  # the CRD schema reports malformed specs
        return []
    return [
        FieldError(NIL_PATH, INTERNAL, error.message) if isinstance(error, Message) else error
        for error in create_errors(name, spec)
    ]


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
