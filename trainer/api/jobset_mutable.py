"""The JobSet fields that stay mutable while a JobSet is suspended.

JobSet's validating webhook makes ``spec.replicatedJobs`` immutable, except that while the old
or the new object is suspended each pod template's labels, annotations, nodeSelector,
tolerations and schedulingGates may change: the fields a queueing system (Kueue) sets when it
admits a workload onto a flavor (upstream: ``jobset_webhook.go`` ``ValidateUpdate``,
https://github.com/kubernetes-sigs/jobset/blob/main/pkg/webhooks/jobset_webhook.go).

Two layers need the same mask: the local API server enforces the rule as JobSet's webhook
would, and the controller uses it to tell an update JobSet will accept from one that needs
the JobSet recreated. :func:`mask_pod_templates` removes those fields, so two lists of
replicated jobs that differ only in them compare equal.
"""

from __future__ import annotations

from typing import Any, Final

MUTABLE_POD_METADATA: Final = ("labels", "annotations")
"""Pod-template ``metadata`` fields that may change while suspended."""

MUTABLE_POD_SPEC: Final = ("nodeSelector", "tolerations", "schedulingGates")
"""Pod-template ``spec`` fields that may change while suspended."""


def mask_pod_templates(replicated_jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``replicated_jobs`` (wire data) without the fields that stay mutable while suspended.

    The input is not modified; every map on the path to a pod template is copied."""
    out = []
    for original in replicated_jobs:
        job = dict(original)
        tmpl = dict(job.get("template") or {})
        jspec = dict(tmpl.get("spec") or {})
        pod = dict(jspec.get("template") or {})
        pod["metadata"] = {
            k: v for k, v in (pod.get("metadata") or {}).items() if k not in MUTABLE_POD_METADATA
        }
        pod["spec"] = {
            k: v for k, v in (pod.get("spec") or {}).items() if k not in MUTABLE_POD_SPEC
        }
        jspec["template"] = pod
        tmpl["spec"] = jspec
        job["template"] = tmpl
        out.append(job)
    return out
