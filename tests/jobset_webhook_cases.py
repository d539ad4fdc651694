"""JobSet's admission checks as one table: each case a JobSet create (sent with ``dryRun=All``),
or an update of an existing JobSet, and the answer the API server gives: allowed, or refused
with its message word for word.

The table is the single truth, read by two tests: the cluster tier sends every case to the test
bed's kube-apiserver, where JobSet v0.12.0's own webhooks (``mjobset.kb.io`` defaulting,
``vjobset.kb.io`` validating) and its CRD answer (tests/cluster/test_jobset_webhook.py); the
integration tier sends the same cases to the local API server, which applies those checks
itself (tests/integration/test_jobset_webhook_cases.py). A case the real webhook answers
differently from the local plane is a local-plane bug (docs/local-plane.md, "JobSet's admission
checks").

An update case creates its old JobSet for real, sends it back edited with ``dryRun=All``
and deletes the old one. Old JobSets carry a ``managedBy`` of no controller, so JobSet's
controller on the bed leaves them alone (no Jobs, no pods) for the moment they exist.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CREATED, UPDATED, INVALID = 201, 200, 422
DENIED = 'admission webhook "vjobset.kb.io" denied the request: '
GROUP_VERSION = "jobset.x-k8s.io/v1alpha2"
ELSEWHERE = "example.com/elsewhere"  # a managedBy no controller on the bed answers to

DNS1035 = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
RULE_NAME_CHARS = (
    "a failure policy rule name must start with an alphabetic character, optionally followed by "
    "a string of alphanumeric characters or '_,:', and must end with an alphanumeric character "
    "or '_'"
)
JOB_NAME_TOO_LONG = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
POD_NAME_TOO_LONG = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)


@dataclass(frozen=True)
class Case:
    """One JobSet sent to the API server, the HTTP status of the answer and, for a refusal, its
    message. An update (``change`` set) creates ``obj``, then sends what the server stored,
    edited by ``change``, back over it, as a client's read, edit and write."""

    id: str
    obj: dict[str, Any]
    code: int
    message: str = ""
    change: Callable[[dict[str, Any]], None] | None = None
    # A listed difference: the local plane's message where it differs from JobSet's on
    # purpose, and why a user is better served by it.
    local_message: str = ""
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.code < 300


# --- builders -----------------------------------------------------------------------------
POD: dict[str, Any] = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def rj(name: str, *, job: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A replicated job; ``job`` adds to its Job template's spec."""
    return {"name": name, "template": {"spec": {"template": POD, **(job or {})}}, **extra}


def jobset(*jobs: dict[str, Any], name: str = "js", **spec: Any) -> dict[str, Any]:
    """A JobSet of ``jobs`` (one replicated job ``node`` when none is given)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"replicatedJobs": list(jobs) or [rj("node")], **spec},
    }


def refused(*errors: str, name: str = "js") -> str:
    """The message of a refusal by JobSet's validating webhook: a 422 Invalid of the JobSet
    (``apierrors.NewInvalid``), its errors aggregated as ``[a, b]`` (bare when one)."""
    shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'{DENIED}JobSet.jobset.x-k8s.io "{name}" is invalid: {shown}'


def plain(text: str) -> str:
    """An error JobSet makes without a field (Go's ``fmt.Errorf``): v0.12.0 wraps it as an
    internal error of no field (``field.InternalError(nil, err)``)."""
    return f"<nil>: Internal error: {text}"


def crd_refused(*errors: str, name: str = "js") -> str:
    """The message of a refusal by JobSet's CRD (schema or CEL rule), from kube-apiserver."""
    shown = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'JobSet.jobset.x-k8s.io "{name}" is invalid: {shown}'


def go_jobs(*, replicas: int = 1, pod_labels: dict[str, str] | None = None) -> str:
    """How JobSet prints the replicated jobs of a defaulted ``jobset()`` as a bad value: Go's
    JSON of its types, fields in their declared order, empty structs written out."""
    pod_meta = {"labels": pod_labels} if pod_labels else {}
    container = {"name": "c", "image": "busybox", "resources": {}}
    pod = {"metadata": pod_meta, "spec": {"containers": [container], "restartPolicy": "OnFailure"}}
    job = {"metadata": {}, "spec": {"template": pod, "completionMode": "Indexed"}}
    jobs = [{"name": "node", "groupName": "default", "template": job, "replicas": replicas}]
    return json.dumps(jobs, separators=(",", ":"))


ARRAY = '"array"'  # how the local plane shows a list as the bad value: its type
WHY_ARRAY = (
    "JobSet prints every replicated job as the bad value, in Go's JSON of its types (each "
    "Kubernetes type's own field order, empty structs written out: hundreds of characters for a "
    'real JobSet); the local plane names the value\'s type, "array", and the rest of the '
    "message is JobSet's"
)
LABELS = {"kueue.x-k8s.io/podset": "main"}
IMMUTABLE = "field is immutable"


def rule(name: str, action: str = "FailJobSet", **extra: Any) -> dict[str, Any]:
    return {"name": name, "action": action, **extra}


def update(
    id: str,
    old: dict[str, Any],
    change: Callable[[dict[str, Any]], None],
    code: int,
    *errors: str,
    by_crd: bool = False,
    local: str = "",
    why: str = "",
) -> Case:
    """An update case of JobSet ``id``: ``old``, left alone by JobSet's controller, edited by
    ``change``; refused with ``errors`` by JobSet's webhook (``by_crd``: its CRD), with the
    error ``local`` instead from the local plane when that is a listed difference (``why``)."""
    old = copy.deepcopy(old)
    old["metadata"]["name"] = id
    old["spec"]["managedBy"] = ELSEWHERE
    message = (crd_refused if by_crd else refused)(*errors, name=id) if errors else ""
    local_message = refused(local, name=id) if local else ""
    return Case(id, old, code, message, change, local_message, why)


def _pod_of(obj: dict[str, Any], index: int = 0) -> dict[str, Any]:
    template: dict[str, Any] = obj["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]
    return template


def _set_pod_labels(obj: dict[str, Any]) -> None:
    _pod_of(obj).setdefault("metadata", {})["labels"] = dict(LABELS)


def _set_replicas(obj: dict[str, Any]) -> None:
    obj["spec"]["replicatedJobs"][0]["replicas"] = 2


def _suspend(obj: dict[str, Any]) -> None:
    obj["spec"]["suspend"] = True


def _set_managed_by(obj: dict[str, Any]) -> None:
    obj["spec"]["managedBy"] = "example.com/other"


def _set_success_policy(obj: dict[str, Any]) -> None:
    obj["spec"]["successPolicy"] = {"operator": "Any"}


def mounting(claim: str) -> dict[str, Any]:
    """A replicated job ``node`` whose container mounts ``claim``."""
    job = rj("node")
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": claim, "mountPath": "/data"}]
    job["template"]["spec"]["template"] = pod
    return job


def claims(*names: str) -> dict[str, Any]:
    """A volume claim policy of templates ``names``."""
    return {
        "templates": [
            {"metadata": {"name": n}, "spec": {"accessModes": ["ReadWriteOnce"]}} for n in names
        ]
    }


NOT_MOUNTED = (
    "replicatedJob containers don't have a matching volumeMount: data from VolumeClaimPolicies"
)
LONG_CLAIM = "c" * 61  # its claim "<claim>-js" is 64 characters long
RUNNING = jobset()
SUSPENDED = jobset(suspend=True)
LAUNCHER_WAITS = [{"name": "node", "status": "Ready"}]
# JobSet names at the edge of the budget of one replicated job "node" of one Job: the Job is
# "<name>-node-0" (7 characters more than the name); with 2 completions, its last pod is
# "<name>-node-0-1-abcde" (15 more).
LONGEST = "j" * 56
TOO_LONG = "j" * 57
POD_BUDGET = "p" * 48
POD_TOO_LONG = "p" * 49
TWO_PODS = {"completions": 2, "parallelism": 2}


def _cases() -> list[Case]:
    cases = [
        # --- valid JobSets --------------------------------------------------------------------
        Case("valid-one-replicated-job", jobset(), CREATED),
        Case(
            "valid-node-then-launcher",
            jobset(rj("node"), rj("launcher", dependsOn=LAUNCHER_WAITS)),
            CREATED,
        ),
        Case(
            "valid-everything-checked",
            jobset(
                rj("node", replicas=2, groupName="workers", job={**TWO_PODS, "completions": 3}),
                rj("launcher", dependsOn=LAUNCHER_WAITS),
                network={"subdomain": "workers"},
                managedBy="kueue.x-k8s.io/multikueue",
                successPolicy={"operator": "Any", "targetReplicatedJobs": ["node"]},
                failurePolicy={
                    "maxRestarts": 2,
                    "rules": [
                        rule(
                            "Retry_on:deadline",
                            "RestartJobSet",
                            onJobFailureReasons=["DeadlineExceeded", "PodFailurePolicy"],
                            targetReplicatedJobs=["node"],
                        )
                    ],
                },
                coordinator={"replicatedJob": "node", "jobIndex": 1, "podIndex": 2},
            ),
            CREATED,
        ),
        # --- dependsOn: the first replicated job waits for none; the others only for jobs
        # listed before them (or themselves)
        Case(
            "depends-on-launcher-first",
            jobset(rj("launcher", dependsOn=LAUNCHER_WAITS), rj("node")),
            INVALID,
            refused(
                plain("DependsOn can't be set for the first ReplicatedJob"),
                plain("replicatedJob: launcher cannot depend on replicatedJob: node"),
            ),
        ),
        Case(
            "depends-on-first-on-itself",
            jobset(rj("node", dependsOn=[{"name": "node", "status": "Complete"}])),
            INVALID,
            refused(plain("DependsOn can't be set for the first ReplicatedJob")),
        ),
        Case(
            "depends-on-a-later-job",
            jobset(
                rj("init"),
                rj("node", dependsOn=[{"name": "launcher", "status": "Ready"}]),
                rj("launcher"),
            ),
            INVALID,
            refused(plain("replicatedJob: node cannot depend on replicatedJob: launcher")),
        ),
        Case(
            "depends-on-a-missing-job",
            jobset(rj("init"), rj("node", dependsOn=[{"name": "ghost", "status": "Complete"}])),
            INVALID,
            refused(plain("replicatedJob: node cannot depend on replicatedJob: ghost")),
        ),
        Case(
            "depends-on-itself-second",
            jobset(rj("init"), rj("node", dependsOn=[{"name": "node", "status": "Ready"}])),
            CREATED,
        ),
        Case(
            "depends-on-with-in-order-startup",
            jobset(
                rj("node"),
                rj("launcher", dependsOn=LAUNCHER_WAITS),
                startupPolicy={"startupPolicyOrder": "InOrder"},
            ),
            INVALID,
            crd_refused(
                "spec: Invalid value: StartupPolicy and DependsOn APIs are mutually exclusive"
            ),
        ),
        # --- names and their budget -------------------------------------------------------
        Case("job-name-at-63", jobset(name=LONGEST), CREATED),
        Case(
            "job-name-over-63",
            jobset(name=TOO_LONG),
            INVALID,
            refused(
                f'spec.replicatedJobs[0].name: Invalid value: "{TOO_LONG}-node-0": '
                f"{JOB_NAME_TOO_LONG}",
                name=TOO_LONG,
            ),
        ),
        Case("pod-name-at-63", jobset(rj("node", job=TWO_PODS), name=POD_BUDGET), CREATED),
        Case(
            "pod-name-over-63",
            jobset(rj("node", job=TWO_PODS), name=POD_TOO_LONG),
            INVALID,
            refused(
                f'spec.replicatedJobs[0].name: Invalid value: "{POD_TOO_LONG}-node-0": '
                f"{POD_NAME_TOO_LONG}",
                name=POD_TOO_LONG,
            ),
        ),
        Case(
            # JobSet counts pod names only where completions is set.
            "pod-name-over-63-parallelism-only",
            jobset(rj("node", job={"parallelism": 2}), name=POD_TOO_LONG),
            CREATED,
        ),
        Case(
            "job-name-not-a-dns-label",
            jobset(name="my.js"),
            INVALID,
            refused(
                f'spec.replicatedJobs[0].name: Invalid value: "my.js-node-0": {DNS1035}',
                name="my.js",
            ),
        ),
        Case(
            "group-name-not-a-dns-label",
            jobset(rj("node", groupName="Group_1")),
            INVALID,
            refused(f'spec.replicatedJobs[0].groupName: Invalid value: "Group_1": {DNS1035}'),
        ),
        Case(
            "subdomain-not-a-dns-name",
            jobset(network={"subdomain": "Bad_Sub"}),
            INVALID,
            refused(
                f'spec.network.subdomain: Invalid value: "Bad_Sub": {DNS1123_SUBDOMAIN}',
                f'spec.network.subdomain: Invalid value: "Bad_Sub": {DNS1035}',
            ),
        ),
        Case(
            "subdomain-over-63",
            jobset(network={"subdomain": "s" * 64}),
            INVALID,
            refused(
                f'spec.network.subdomain: Invalid value: "{"s" * 64}": .spec.network.subdomain '
                "is too long, must be less than 63 characters"
            ),
        ),
        Case(
            "managed-by-not-a-domain-path",
            jobset(managedBy="multikueue"),
            INVALID,
            refused(
                'spec.managedBy: Invalid value: "multikueue": must be a domain-prefixed path '
                '(such as "acme.io/foo")'
            ),
        ),
        Case(
            "managed-by-over-63",
            jobset(managedBy="example.com/" + "m" * 60),
            INVALID,
            refused("spec.managedBy: Too long: may not be more than 63 bytes"),
        ),
        Case(
            "replicas-times-parallelism-over-int32",
            jobset(rj("node", replicas=65536, job={"parallelism": 65536})),
            INVALID,
            refused(
                plain(
                    "the product of replicas and parallelism must not exceed 2147483647 for "
                    "replicatedJob 'node'"
                )
            ),
        ),
        # --- failure policy ---------------------------------------------------------------
        Case(
            # JobSet's defaulting webhook names an unnamed rule failurePolicyRule<index>.
            "failure-rule-without-name",
            jobset(failurePolicy={"rules": [rule("")]}),
            CREATED,
        ),
        Case(
            "failure-rule-name-over-128",
            jobset(failurePolicy={"rules": [rule("r" * 129)]}),
            INVALID,
            refused(
                plain(
                    "invalid failure policy rule name of length 129, the rule name must be at "
                    "least 1 characters long and at most 128 characters long"
                )
            ),
        ),
        Case(
            "failure-rule-name-characters",
            jobset(failurePolicy={"rules": [rule("1st-rule")]}),
            INVALID,
            refused(plain(f"invalid failure policy rule name '1st-rule', {RULE_NAME_CHARS}")),
        ),
        Case(
            "failure-rule-names-repeated",
            jobset(failurePolicy={"rules": [rule("same"), rule("other"), rule("same")]}),
            INVALID,
            refused(
                plain(
                    "rule names are not unique, rules with indices [0 2] all have the same name "
                    "'same'"
                )
            ),
        ),
        Case(
            "failure-rule-target-missing",
            jobset(failurePolicy={"rules": [rule("r", targetReplicatedJobs=["ghost"])]}),
            INVALID,
            refused(
                plain(
                    "invalid replicatedJob name 'ghost' in failure policy does not appear in "
                    ".spec.ReplicatedJobs"
                )
            ),
        ),
        Case(
            "failure-rule-reason-unknown",
            jobset(failurePolicy={"rules": [rule("r", onJobFailureReasons=["OOMKilled"])]}),
            INVALID,
            refused(
                plain(
                    "invalid job failure reason 'OOMKilled' in failure policy is not a "
                    "recognized job failure reason"
                )
            ),
        ),
        Case(
            "failure-rule-restart-job",
            jobset(failurePolicy={"rules": [rule("r", "RestartJob")]}),
            INVALID,
            refused(
                plain(
                    "RestartJob and RestartJobAndIgnoreMaxRestarts failure policy actions are not "
                    "allowed when RestartJob feature gate is disabled"
                )
            ),
        ),
        Case(
            "failure-policy-in-place-restart",
            jobset(failurePolicy={"restartStrategy": "InPlaceRestart"}),
            INVALID,
            refused(
                plain(
                    "InPlaceRestart restart strategy cannot be set when InPlaceRestart feature "
                    "gate is disabled"
                )
            ),
        ),
        # --- success policy ---------------------------------------------------------------
        Case(
            "success-target-missing",
            jobset(successPolicy={"operator": "All", "targetReplicatedJobs": ["node", "ghost"]}),
            INVALID,
            refused(
                plain("invalid replicatedJob name 'ghost' does not appear in .spec.ReplicatedJobs")
            ),
        ),
        Case(
            "success-operator-unknown",
            jobset(successPolicy={"operator": "Most"}),
            INVALID,
            crd_refused(
                'spec.successPolicy.operator: Unsupported value: "Most": supported values: '
                '"All", "Any"',
                "<nil>: Invalid value: null: some validation rules were not checked because the "
                "object was invalid; correct the existing errors to complete validation",
            ),
        ),
        # --- volume claim policies -----------------------------------------------------------
        Case(
            "claim-mounted",
            jobset(mounting("data"), volumeClaimPolicies=[claims("data")]),
            CREATED,
        ),
        Case(
            "claim-name-over-63",
            jobset(mounting(LONG_CLAIM), volumeClaimPolicies=[claims(LONG_CLAIM)]),
            INVALID,
            refused(
                f'spec.volumeClaimPolicies[0].template[0].name: Invalid value: "{LONG_CLAIM}": '
                "VolumeClaimPolicies template name is too long"
            ),
        ),
        Case(
            "claim-not-mounted",
            jobset(volumeClaimPolicies=[claims("data")]),
            INVALID,
            refused(f"spec.replicatedJobs: Invalid value: {go_jobs()}: {NOT_MOUNTED}"),
            local_message=refused(f"spec.replicatedJobs: Invalid value: {ARRAY}: {NOT_MOUNTED}"),
            why=WHY_ARRAY,
        ),
        # --- coordinator ------------------------------------------------------------------
        Case(
            "coordinator-job-missing",
            jobset(coordinator={"replicatedJob": "ghost"}),
            INVALID,
            refused(plain("coordinator replicatedJob ghost does not exist")),
        ),
        Case(
            "coordinator-job-index",
            jobset(coordinator={"replicatedJob": "node", "jobIndex": 1}),
            INVALID,
            refused(plain("coordinator job index 1 is invalid for replicatedJob node")),
        ),
        Case(
            "coordinator-without-completions",
            jobset(rj("node", job={"parallelism": 2}), coordinator={"replicatedJob": "node"}),
            INVALID,
            refused(
                plain(
                    "job for coordinator pod must be indexed completion mode, and completions "
                    "number must be set"
                )
            ),
        ),
        Case(
            "coordinator-pod-index",
            jobset(rj("node", job=TWO_PODS), coordinator={"replicatedJob": "node", "podIndex": 2}),
            INVALID,
            refused(plain("coordinator pod index 2 is invalid for replicatedJob node job index 0")),
        ),
    ]
    # --- updates: replicatedJobs and managedBy are immutable; while suspended (before or
    # after), each pod template's labels, annotations, nodeSelector, tolerations and
    # schedulingGates may change
    cases += [
        update("update-suspend", RUNNING, _suspend, UPDATED),
        update("update-pod-labels-while-suspended", SUSPENDED, _set_pod_labels, UPDATED),
        update(
            "update-pod-labels-while-running",
            RUNNING,
            _set_pod_labels,
            INVALID,
            f"spec.replicatedJobs: Invalid value: {go_jobs(pod_labels=LABELS)}: {IMMUTABLE}",
            local=f"spec.replicatedJobs: Invalid value: {ARRAY}: {IMMUTABLE}",
            why=WHY_ARRAY,
        ),
        update(
            "update-replicas-while-suspended",
            SUSPENDED,
            _set_replicas,
            INVALID,
            f"spec.replicatedJobs: Invalid value: {go_jobs(replicas=2)}: {IMMUTABLE}",
            local=f"spec.replicatedJobs: Invalid value: {ARRAY}: {IMMUTABLE}",
            why=WHY_ARRAY,
        ),
        update(
            "update-managed-by",
            SUSPENDED,
            _set_managed_by,
            INVALID,
            'spec.managedBy: Invalid value: "example.com/other": field is immutable',
        ),
        update(
            "update-success-policy",
            SUSPENDED,
            _set_success_policy,
            INVALID,
            "spec.successPolicy: Invalid value: Value is immutable",
            by_crd=True,
        ),
    ]
    return cases


CASES = _cases()
BY_ID = {case.id: case for case in CASES}
