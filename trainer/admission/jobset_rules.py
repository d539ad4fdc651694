"""What JobSet v0.12.0's validating webhook checks on create that its CRD does not, with
JobSet's messages (upstream:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go):
``managedBy`` is a domain-prefixed path of at most 63 bytes, each ``groupName`` a DNS-1035
label, and each failure-policy rule has a unique name of 1 to 128 characters matching
``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$``, known job failure reasons and target replicated
jobs of the JobSet; a given ``network.subdomain`` a DNS-1123 subdomain and a DNS-1035 label
(it names the Service); success-policy targets among the replicated jobs; the coordinator's
replicated job, Job index, Indexed completion and pod index; replicas times parallelism within
an int32; the first replicated job without ``dependsOn``, and every other depending only on
jobs listed before it (upstream Trainer's runtimes list ``node`` before the ``launcher`` that
waits for it).

Two users: the local plane's built-in JobSet webhook refuses a JobSet with these errors, and
runtime admission warns about a runtime whose JobSet template breaks them (upstream's runtime
webhook accepts such a runtime, but JobSet refuses every JobSet built from it). Pure: no I/O.
"""

from __future__ import annotations

import re

from trainer.admission.patches import domain_prefixed_path_errors
from trainer.api.jobset import JobSetSpec
from trainer.api.jobset_contract import JOB_FAILURE_REASONS
from trainer.machinery.errors import INVALID, TOO_LONG, FieldError
from trainer.machinery.names import is_dns1035_label, is_dns1123_subdomain

MAX_MANAGED_BY = 63
RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MIN_RULE_NAME, MAX_RULE_NAME = 1, 128
GROUP_NAME_TOO_LONG = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
SUBDOMAIN_TOO_LONG = ".spec.network.subdomain is too long, must be less than 63 characters"
MAX_INT32 = 2**31 - 1


class Message(FieldError):
    """An error JobSet's webhook reports without a field path (Go's ``errors.New``)."""

    def __str__(self) -> str:
        return self.message


def _message(text: str) -> FieldError:
    return Message("", INVALID, text)


def managed_by_errors(manager: str | None) -> list[FieldError]:
    if manager is None:
        return []
    errors = domain_prefixed_path_errors("spec.managedBy", manager)
    if len(manager.encode()) > MAX_MANAGED_BY:
        errors.append(
            FieldError("spec.managedBy", TOO_LONG, f"may not be more than {MAX_MANAGED_BY} bytes")
        )
    return errors


def group_name_errors(spec: JobSetSpec) -> list[FieldError]:
    return [
        _message(GROUP_NAME_TOO_LONG if "must be no more than 63" in text else text)
        for job in spec.replicated_jobs or []
        for text in is_dns1035_label(job.group_name)
    ]


def failure_policy_errors(spec: JobSetSpec) -> list[FieldError]:
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


def structure_errors(spec: JobSetSpec) -> list[FieldError]:
    """JobSet's create checks of ``dependsOn``, the subdomain, sizes, the success policy's
    targets and the coordinator, message for message."""
    jobs = spec.replicated_jobs or []
    errors: list[FieldError] = []
    if jobs and jobs[0].depends_on is not None:
        errors.append(_message("DependsOn can't be set for the first ReplicatedJob"))
    subdomain = spec.network.subdomain if spec.network is not None else None
    if subdomain:
        errors += [_message(text) for text in is_dns1123_subdomain(subdomain)]
        errors += [
            _message(SUBDOMAIN_TOO_LONG if "must be no more than 63" in text else text)
            for text in is_dns1035_label(subdomain)
        ]
    seen: set[str] = set()
    for job in jobs:
        seen.add(job.name)
        parallelism = 1 if job.template.spec is None else job.template.spec.parallelism
        if (1 if parallelism is None else parallelism) * job.replicas > MAX_INT32:
            errors.append(
                _message(
                    f"the product of replicas and parallelism must not exceed {MAX_INT32} for "
                    f"replicatedJob '{job.name}'"
                )
            )
        # A job waits only for jobs listed before it (or itself, which JobSet lets pass).
        errors += [
            _message(f"replicatedJob: {job.name} cannot depend on replicatedJob: {dep.name}")
            for dep in job.depends_on or []
            if dep.name not in seen
        ]
    targets = spec.success_policy.target_replicated_jobs if spec.success_policy else None
    errors += [
        _message(f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs")
        for target in targets or []
        if target not in seen
    ]
    problem = coordinator_problem(spec)
    return errors + ([_message(problem)] if problem else [])


def coordinator_problem(spec: JobSetSpec) -> str:
    """Why the coordinator cannot be the pod it names ("" when it can, or none is set). Unset
    ``completionMode`` counts as Indexed and unset ``completions`` as the Job's default
    (``parallelism``, else 1), as JobSet's defaulting webhook and the Job API set them first."""
    coordinator = spec.coordinator
    if coordinator is None:
        return ""
    job = next(
        (j for j in spec.replicated_jobs or [] if j.name == coordinator.replicated_job), None
    )
    if job is None:
        return f"coordinator replicatedJob {coordinator.replicated_job} does not exist"
    job_index, pod_index = coordinator.job_index or 0, coordinator.pod_index or 0
    if not 0 <= job_index < job.replicas:
        return f"coordinator job index {job_index} is invalid for replicatedJob {job.name}"
    template = job.template.spec
    mode = template.completion_mode if template is not None else None
    if mode not in (None, "Indexed"):
        return "job for coordinator pod must be indexed completion mode"
    completions = template.completions if template is not None else None
    if completions is None:
        completions = template.parallelism if template is not None else None
    if not 0 <= pod_index < (1 if completions is None else completions):
        return (
            f"coordinator pod index {pod_index} is invalid for replicatedJob "
            f"{coordinator.replicated_job} job index {job_index}"
        )
    return ""


def template_warnings(spec: JobSetSpec | None) -> list[str]:
    """Runtime admission's warnings for a runtime's JobSet template."""
    if spec is None:
        return []
    errors = managed_by_errors(spec.managed_by) + group_name_errors(spec)
    return [
        f"spec.template.spec: JobSet's webhook will refuse every JobSet built from this runtime: "
        f"{error}"
        for error in errors + failure_policy_errors(spec) + structure_errors(spec)
    ]
