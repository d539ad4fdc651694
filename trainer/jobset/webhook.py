"""JobSet v0.12.0's own webhooks: what they do on create that its CRD does not, with JobSet's
messages and in its order, and what they refuse on update (upstream:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go).

Its defaulting webhook (:func:`default_create`) sets the success policy (``All``), the startup
policy (``AnyOrder``), each Job's ``completionMode`` (``Indexed``) and pod ``restartPolicy``
(``OnFailure``), DNS hostnames and not-ready addresses on, the names of unnamed failure-policy
rules (``failurePolicyRule<index>``) and the claims' retention (``Delete``).

Its validating webhook (:func:`create_errors`) checks that the feature gates off by default
(``InPlaceRestart``, ``RestartJob``) are not asked for; the first replicated job has no
``dependsOn`` and every other depends only on jobs listed before it (or itself), so a launcher
that waits for its nodes comes after them; a given ``network.subdomain`` is a DNS-1123
subdomain and a DNS-1035 label (it names the Service); ``managedBy`` is a domain-prefixed path
of at most 63 bytes; per replicated job, replicas times parallelism fits an int32, the
``groupName`` is a DNS-1035 label, and the last Job's name (and, for an Indexed Job with
``completions`` set, its last pod's name with the 5-character suffix) is a DNS-1035 label of at
most 63 characters; the success policy's and failure-policy rules' targets are replicated jobs
of the JobSet; each rule has a unique name of 1 to 128 characters matching
``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`` and known job failure reasons; the coordinator's
replicated job, Job index, Indexed completion with ``completions`` set, pod index, and its
address as a label value. :func:`validate_create` answers them as JobSet v0.12.0 does: a 422
Invalid of the JobSet whose errors without a field read ``<nil>: Internal error: ...`` (JobSet
wraps them so).

On update (:func:`validate_update`): ``spec.replicatedJobs`` is immutable except, while the old
or the new object is suspended, each pod template's labels, annotations, nodeSelector,
tolerations and schedulingGates; ``managedBy`` never changes.

The test bed's JobSet answered each case of tests/jobset_webhook_cases.py as these do
(docs/local-plane.md, "JobSet's admission checks").

Two users: the local API server, which runs these as JobSet's webhooks built in, so a JobSet is
defaulted and refused locally as on a cluster; and runtime admission, which warns about a
runtime whose JobSet template breaks these checks (upstream's runtime webhook accepts such a
runtime, but JobSet refuses every JobSet built from it). Pure: no I/O.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from trainer.jobset import contract as jsc
from trainer.jobset.contract import (
    JOB_FAILURE_REASONS,
    PREFIX,
    RESTART_JOB_ACTIONS,
    mask_pod_templates,
)
from trainer.jobset.types import JobSetSpec, ReplicatedJob
from trainer.machinery.errors import INTERNAL, INVALID, NIL_PATH, TOO_LONG, FieldError
from trainer.machinery.gofmt import go_quote
from trainer.machinery.names import (
    domain_prefixed_path_errors,
    is_dns1035_label,
    is_dns1123_subdomain,
    is_valid_label_value,
)

MAX_MANAGED_BY = 63
RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MIN_RULE_NAME, MAX_RULE_NAME = 1, 128
GROUP_NAME_TOO_LONG = ".spec.replicatedJob[].groupName is too long, must be less than 63 characters"
SUBDOMAIN_TOO_LONG = ".spec.network.subdomain is too long, must be less than 63 characters"
JOB_NAME_TOO_LONG = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
POD_NAME_TOO_LONG = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)
POD_SUFFIX = "-abcde"  # the Job controller's random suffix, as JobSet counts it
MAX_INT32 = 2**31 - 1
IN_PLACE = "InPlaceRestart"
IN_PLACE_GATE = (
    "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature gate is disabled"
)
RESTART_JOB_GATE = (
    "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not allowed when "
    "RestartJob feature gate is disabled"
)
COORDINATOR_LABEL = PREFIX + "coordinator"
MAX_CLAIM = 63
CLAIM_NOT_UNIQUE = "names must be unique for VolumeClaimPolicies template"
CLAIM_TOO_LONG = "VolumeClaimPolicies template name is too long"
DEFAULT_RULE_NAME = "failurePolicyRule{}"


class Message(FieldError):
    """An error JobSet's webhook makes without a field (Go's ``fmt.Errorf``): its text alone.
    (JobSet's answer wraps it as an internal error of no field: :func:`as_reported`.)"""

    def __str__(self) -> str:
        return self.message


def _message(text: str) -> FieldError:
    return Message("", INVALID, text)


def default_create(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of the JobSet ``obj`` (wire data) as JobSet's defaulting webhook leaves it: its
    defaults, and the empty objects its answer adds by writing the JobSet out as Go's JSON of
    JobSet's types (a template's ``metadata``, a container's ``resources``), as the test bed
    stores them."""
    original = obj
    obj = copy.deepcopy(obj)
    try:
        spec = obj.setdefault("spec", {})
        spec.setdefault("successPolicy", {"operator": "All"})
        spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
        for job in spec.get("replicatedJobs") or []:
            job_template = job.setdefault("template", {})
            job_template.setdefault("metadata", {})  # an empty struct Go's JSON writes out
            job_spec = job_template.setdefault("spec", {})
            job_spec.setdefault("completionMode", "Indexed")
            pod = job_spec.setdefault("template", {})
            pod.setdefault("metadata", {})
            pod_spec = pod.setdefault("spec", {})
            if not pod_spec.get("restartPolicy"):
                pod_spec["restartPolicy"] = "OnFailure"
            for kind in ("initContainers", "containers", "ephemeralContainers"):
                for container in pod_spec.get(kind) or []:
                    container.setdefault("resources", {})
        network = spec.setdefault("network", {})
        network.setdefault("enableDNSHostnames", True)
        network.setdefault("publishNotReadyAddresses", True)
        for i, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
            if not rule.get("name"):
                rule["name"] = DEFAULT_RULE_NAME.format(i)
        for policy in spec.get("volumeClaimPolicies") or []:
            if policy.get("retentionPolicy") is None:
                policy["retentionPolicy"] = {"whenDeleted": "Delete"}
            for claim in policy.get("templates") or []:
                claim.setdefault("spec", {}).setdefault("resources", {})
                claim.setdefault("status", {})
    except (AttributeError, TypeError):
        # A field of the wrong type (a list for spec, a string for a job): nothing defaulted,
        # and the schema's validation refuses the object, naming the field.
        return copy.deepcopy(original)
    return obj


def managed_by_errors(manager: str | None) -> list[FieldError]:
    if manager is None:
        return []
    errors = domain_prefixed_path_errors("spec.managedBy", manager)
    if len(manager.encode()) > MAX_MANAGED_BY:
        errors.append(
            FieldError("spec.managedBy", TOO_LONG, f"may not be more than {MAX_MANAGED_BY} bytes")
        )
    return errors


def failure_policy_errors(spec: JobSetSpec) -> list[FieldError]:
    """JobSet's ``validateFailurePolicy``, message for message."""
    if spec.failure_policy is None:
        return []
    jobs = [job.name for job in spec.replicated_jobs or []]
    rules = spec.failure_policy.rules or []
    if any(rule.action in RESTART_JOB_ACTIONS for rule in rules):
        return [_message(RESTART_JOB_GATE)]  # JobSet checks nothing more of the policy then
    errors: list[FieldError] = []
    indices: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
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


def create_errors(name: str | None, spec: JobSetSpec) -> list[FieldError]:
    """JobSet's ``ValidateCreate``, error for error and in its order, of a JobSet its
    defaulting webhook has seen (:func:`default_create`). ``name`` None: a runtime's template,
    whose JobSet has no name yet, so the checks of the names made from it are left out."""
    jobs = spec.replicated_jobs or []
    errors: list[FieldError] = []
    if spec.failure_policy is not None and spec.failure_policy.restart_strategy == IN_PLACE:
        errors.append(_message(IN_PLACE_GATE))
    if jobs and jobs[0].depends_on is not None:
        errors.append(_message("DependsOn can't be set for the first ReplicatedJob"))
    subdomain = spec.network.subdomain if spec.network is not None else None
    if subdomain:
        path = "spec.network.subdomain"
        errors += [
            FieldError(path, INVALID, text, subdomain) for text in is_dns1123_subdomain(subdomain)
        ]
        errors += [
            FieldError(path, INVALID, _too_long(text, SUBDOMAIN_TOO_LONG), subdomain)
            for text in is_dns1035_label(subdomain)
        ]
    errors += managed_by_errors(spec.managed_by)
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        seen.add(job.name)
        errors += _replicated_job_errors(name, i, job, seen)
    targets = spec.success_policy.target_replicated_jobs if spec.success_policy else None
    errors += [
        _message(f"invalid replicatedJob name '{target}' does not appear in .spec.ReplicatedJobs")
        for target in targets or []
        if target not in seen
    ]
    errors += failure_policy_errors(spec)
    if spec.coordinator is not None:
        problem = coordinator_problem(spec)
        errors += [_message(problem)] if problem else []
        problem = "" if name is None else coordinator_label_problem(name, spec)
        errors += [_message(problem)] if problem else []
    return errors + claim_errors(name, spec)


def _too_long(text: str, instead: str) -> str:
    """JobSet's own words for a DNS-1035 label over 63 characters."""
    return instead if "must be no more than 63" in text else text


def _replicated_job_errors(
    name: str | None, i: int, job: ReplicatedJob, seen: set[str]
) -> list[FieldError]:
    errors: list[FieldError] = []
    template = job.template.spec
    parallelism = template.parallelism if template is not None else None
    if (1 if parallelism is None else parallelism) * job.replicas > MAX_INT32:
        errors.append(
            _message(
                f"the product of replicas and parallelism must not exceed {MAX_INT32} for "
                f"replicatedJob '{job.name}'"
            )
        )
    path = f"spec.replicatedJobs[{i}]"
    errors += [
        FieldError(
            f"{path}.groupName", INVALID, _too_long(text, GROUP_NAME_TOO_LONG), job.group_name
        )
        for text in is_dns1035_label(job.group_name)
    ]
    if name is not None:
        # The last Job's name is the longest; JobSet names it as the bad value of both checks.
        last_job = jsc.job_name(name, job.name, job.replicas - 1)
        errors += [
            FieldError(f"{path}.name", INVALID, _too_long(text, JOB_NAME_TOO_LONG), last_job)
            for text in is_dns1035_label(last_job)
        ]
        mode = template.completion_mode if template is not None else None
        completions = template.completions if template is not None else None
        # Only an Indexed Job with completions set has pod names JobSet can count.
        if mode in (None, "Indexed") and completions is not None:
            last_pod = jsc.pod_hostname(name, job.name, job.replicas - 1, completions - 1)
            last_pod += POD_SUFFIX
            errors += [
                FieldError(f"{path}.name", INVALID, _too_long(text, POD_NAME_TOO_LONG), last_job)
                for text in is_dns1035_label(last_pod)
            ]
    # A job waits only for jobs listed before it (or itself, which JobSet lets pass).
    errors += [
        _message(f"replicatedJob: {job.name} cannot depend on replicatedJob: {dep.name}")
        for dep in job.depends_on or []
        if dep.name not in seen
    ]
    return errors


def claim_errors(name: str | None, spec: JobSetSpec) -> list[FieldError]:
    """JobSet's ``validateVolumeClaimPolicies``, but for its comparison with a claim that
    already exists (the local plane makes no claims for JobSets). JobSet names each template
    ``template[j]`` (sic)."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    jobs = spec.replicated_jobs or []
    for i, policy in enumerate(spec.volume_claim_policies or []):
        for j, template in enumerate(policy.templates or []):
            claim = (template.metadata.name if template.metadata else None) or ""
            path = f"spec.volumeClaimPolicies[{i}].template[{j}].name"
            if claim in seen:
                errors.append(FieldError(path, INVALID, CLAIM_NOT_UNIQUE, claim))
            errors += [
                FieldError(path, INVALID, text, claim) for text in is_dns1123_subdomain(claim)
            ]
            if name is not None and len(jsc.claim_name(claim, name)) > MAX_CLAIM:
                errors.append(FieldError(path, INVALID, CLAIM_TOO_LONG, claim))
            errors += _claim_use_errors(jobs, claim)
            seen.add(claim)
    return errors


def _claim_use_errors(jobs: list[ReplicatedJob], claim: str) -> list[FieldError]:
    errors: list[FieldError] = []
    mounted = False
    for i, job in enumerate(jobs):
        pod = job.template.spec.template.spec if job.template.spec is not None else None
        if pod is None:
            continue
        path = f"spec.replicatedJobs[{i}].template.spec.template.spec.volumes"
        errors += [
            FieldError(
                f"{path}[{k}].name",
                INVALID,
                f"volume name conflicts with VolumeClaimPolicy template name: {claim}",
                volume.name,
            )
            for k, volume in enumerate(pod.volumes or [])
            if volume.name == claim
        ]
        containers = [*(pod.init_containers or []), *(pod.containers or [])]
        mounted = mounted or any(
            mount.name == claim for c in containers for mount in c.volume_mounts or []
        )
    if not mounted:
        # JobSet shows every replicated job as the bad value (Go's JSON of its types); the
        # local plane shows "array" (docs/local-plane.md, "JobSet's admission checks").
        errors.append(
            FieldError(
                "spec.replicatedJobs",
                INVALID,
                f"replicatedJob containers don't have a matching volumeMount: {claim} from "
                "VolumeClaimPolicies",
                [job.to_wire() for job in jobs],
            )
        )
    return errors


def coordinator_problem(spec: JobSetSpec) -> str:
    """Why the coordinator cannot be the pod it names ("" when it can, or none is set), as
    JobSet's ``validateCoordinator`` says it: its Job must be Indexed (the defaulting webhook
    makes an unset mode Indexed) with ``completions`` set."""
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
    completions = template.completions if template is not None else None
    if mode not in (None, "Indexed") or completions is None:
        return (
            "job for coordinator pod must be indexed completion mode, and completions number "
            "must be set"
        )
    if not 0 <= pod_index < completions:
        return (
            f"coordinator pod index {pod_index} is invalid for replicatedJob "
            f"{coordinator.replicated_job} job index {job_index}"
        )
    return ""


def coordinator_label_problem(name: str, spec: JobSetSpec) -> str:
    """Why the coordinator's address cannot be the value of the label JobSet puts it in ("" when
    it can): ``<jobset>-<rjob>-<job>-<pod>.<subdomain>``, long names make it too long."""
    coordinator = spec.coordinator
    if coordinator is None:
        return ""
    subdomain = jsc.subdomain(name, spec.network.subdomain if spec.network is not None else None)
    value = jsc.pod_dns_name(
        name,
        coordinator.replicated_job,
        coordinator.job_index or 0,
        coordinator.pod_index or 0,
        subdomain,
    )
    problems = is_valid_label_value(value)
    if not problems:
        return ""
    return (
        f"spec will lead to invalid label value {go_quote(value)} for coordinator label "
        f"{go_quote(COORDINATOR_LABEL)} (long JobSet / ReplicatedJob / SubDomain name?): "
        + ", ".join(problems)
    )


def template_warnings(spec: JobSetSpec | None) -> list[str]:
    """Runtime admission's warnings for a runtime's JobSet template (as JobSet's defaulting
    webhook will leave it)."""
    if spec is None:
        return []
    defaulted = JobSetSpec.from_wire(default_create({"spec": spec.to_wire()})["spec"])
    return [
        f"spec.template.spec: JobSet's webhook will refuse every JobSet built from this runtime: "
        f"{error}"
        for error in create_errors(None, defaulted)
    ]


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
