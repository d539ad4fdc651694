"""The controller's RBAC is exactly what its code uses.

The whole controller process (watch caches, leader election, the webhook with self-managed
certificates, reconcilers) runs against the embedded API server through its own client, whose
User-Agent marks its requests in the server's request log. A representative set of flows
touches every kind it manages: a torch TrainJob, an MPI TrainJob (Secret and hostfile
ConfigMap), coscheduling and Volcano PodGroups (the Volcano validator lists PriorityClasses),
a deadline that deletes a JobSet, a TTL that deletes a TrainJob, an update the webhook checks
against the live JobSet, and TrainJobs naming missing runtimes (the webhook's live reads).
Then, in both directions:

- every request the controller made is allowed by the installed ClusterRole and Role (an RBAC
  evaluator: ClusterRole rules in every namespace, Role rules only in the install namespace,
  ``resourceNames`` only for requests that name an object; a server-side apply that created its
  object is authorized as ``create`` as well, as kube-apiserver does);
- every permission granted was used, except the few in :data:`NOT_IN_THE_LOG`, each with the
  reason it is needed though this run does not make the request.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.integration.harness import Plane, local_plane
from tests.integration.test_controller_flows import gang_runtime, install_podgroup_crds
from tests.integration.test_controller_process import config, free_port
from tests.integration.test_webhook_cluster import configurations
from trainer.cli.process import ProcessOptions, ProcessState, run_controller
from trainer.deploy.render import install_objects
from trainer.deploy.values import Values
from trainer.kube import resources as r
from trainer.kube.client import new_api_client
from trainer.kube.rest import APIError
from trainer.local.apiserver.hooks import RequestRecord

AGENT = "trainer-rbac-probe"
NAMESPACE = "kubeflow-system"
NAME = "kubeflow-trainer-controller-manager"

Permission = tuple[str, str, str, str]
"""(apiGroup, resource[/subresource], verb, resourceName or "")."""

NOT_IN_THE_LOG: dict[Permission, str] = {
    ("authentication.k8s.io", "tokenreviews", "create", ""): (
        "the status server's TokenReview of a training pod's token (TrainJobStatus gate, off "
        "here; tests/integration/test_status_server.py makes that request) and metrics.auth's"
    ),
    ("authorization.k8s.io", "subjectaccessreviews", "create", ""): (
        "metrics.auth.enabled (off here): may the scraper get /metrics "
        "(tests/integration/test_controller_process.py makes that request)"
    ),
    ("trainer.kubeflow.org", "trainjobs/finalizers", "update", ""): (
        "not a request: the OwnerReferencesPermissionEnforcement admission plugin requires it to "
        "set blockOwnerDeletion on owner references to a TrainJob (every object we create)"
    ),
    ("", "configmaps", "delete", ""): (
        "objects applied for a TrainJob deleted during the reconcile are deleted again "
        "(Reconciler._delete_written; tests/integration/test_controller_flows.py)"
    ),
    ("", "secrets", "delete", ""): "as configmaps delete (the MPI SSH Secret)",
    ("scheduling.x-k8s.io", "podgroups", "delete", ""): "as configmaps delete (the PodGroup)",
    ("scheduling.volcano.sh", "podgroups", "delete", ""): "as configmaps delete (the PodGroup)",
    ("", "secrets", "update", "kubeflow-trainer-webhook-cert"): (
        "certificate rotation replaces the Secret (90 days before expiry, or when it holds no "
        "usable certificate); a fresh install creates it instead"
    ),
}


@dataclass(frozen=True)
class Rule:
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]
    namespace: str | None  # None: a ClusterRole rule (every namespace and cluster scope)

    def allows(self, group: str, resource: str, verb: str, namespace: str, name: str) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        if group not in self.groups or resource not in self.resources or verb not in self.verbs:
            return False
        if not self.names:
            return True
        # resourceNames only match requests that name an object (never create, list, watch).
        return verb not in ("create", "list", "watch", "deletecollection") and name in self.names

    def permissions(self) -> set[Permission]:
        return {
            (g, r, v, n)
            for g in self.groups
            for r in self.resources
            for v in self.verbs
            for n in (self.names or {""})
        }


def controller_rules() -> list[Rule]:
    objects = install_objects(Values())
    rules = []
    for obj in objects:
        if obj["kind"] not in ("ClusterRole", "Role") or obj["metadata"]["name"] != NAME:
            continue
        scope = obj["metadata"].get("namespace") if obj["kind"] == "Role" else None
        for rule in obj["rules"]:
            assert "*" not in [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
            rules.append(
                Rule(
                    frozenset(rule["apiGroups"]),
                    frozenset(rule["resources"]),
                    frozenset(rule["verbs"]),
                    frozenset(rule.get("resourceNames") or ()),
                    scope,
                )
            )
    assert {r.namespace for r in rules} == {None, NAMESPACE}
    return rules


def _unrouted(record: RequestRecord) -> tuple[str, str, str, str, str]:
    """A request the server answered 404 without routing it (a resource it does not serve,
    such as PodGroups before their CRD exists): authorized from its path, as kube-apiserver
    authorizes before routing."""
    parts = record.path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"a non-resource request: {record}")
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    assert rest, f"a discovery request: {record}"
    name = rest[1] if len(rest) > 1 else ""
    resource = "/".join([rest[0], *rest[2:3]])
    verb = record.verb if name or record.verb != "get" else "list"
    return group, resource, verb, namespace, name


def requested(record: RequestRecord) -> list[tuple[str, str, str, str, str]]:
    """(group, resource, verb, namespace, name) authorizations one request needed."""
    if not record.resource:
        return [_unrouted(record)]
    base = (record.group, record.resource, record.verb, record.namespace, record.name)
    if record.verb == "patch" and record.code == 201:
        # A server-side apply that created the object is authorized as create too.
        return [base, (record.group, record.resource, "create", record.namespace, "")]
    if record.verb == "create":
        return [(record.group, record.resource, "create", record.namespace, "")]
    return [base]


def trainjob(name: str, runtime: str, kind: str = "ClusterTrainingRuntime", **spec: Any) -> Any:
    return b.trainjob(name, runtime=runtime, runtime_kind=kind, **spec)


@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    async with local_plane() as p:
        p.server.storage.create_unadmitted("v1", "Namespace", {"metadata": {"name": NAMESPACE}})
        p.server.storage.create_unadmitted(
            "scheduling.k8s.io/v1", "PriorityClass", {"metadata": {"name": "high"}, "value": 1000}
        )
        yield p


async def run_flows(plane: Plane) -> None:
    kube = plane.kube

    def condition(name: str, type_: str) -> Any:
        status = (plane.trainjob("default", name) or {}).get("status") or {}
        return next(
            (
                c
                for c in status.get("conditions") or []
                if c["type"] == type_ and c["status"] == "True"
            ),
            None,
        )

    for scheduler in ("coscheduling", "volcano"):
        await kube.create(yaml.safe_load(gang_runtime(scheduler)))
    await kube.create(trainjob("torch", "torch-distributed", trainer={"numNodes": 2}))
    await kube.create(trainjob("mpi", "deepspeed-distributed", trainer={"numNodes": 2}))
    await kube.create(trainjob("cosched", "gang-coscheduling"))
    await kube.create(trainjob("volcano", "gang-volcano"))
    await kube.create(trainjob("deadline", "torch-distributed", activeDeadlineSeconds=1))
    await kube.create(trainjob("held", "torch-distributed", suspend=True))
    # Failed by its deadline, then deleted by its TTL after finishing.
    expiring = trainjob("ttl", "torch-distributed", activeDeadlineSeconds=1)
    expiring["spec"]["ttlSecondsAfterFinished"] = 0
    await kube.create(expiring)
    for name in ("torch", "mpi", "cosched", "volcano", "held"):
        await plane.until(functools.partial(plane.jobset, "default", name), what=f"JobSet {name}")
    await plane.until(lambda: condition("deadline", "Failed"), timeout=20, what="deadline")
    await plane.until(lambda: plane.jobset("default", "deadline") is None, what="JobSet deleted")
    await plane.until(lambda: plane.trainjob("default", "ttl") is None, timeout=20, what="TTL")
    # An update: the webhook reads the live JobSet to check runtimePatches.
    await kube.patch(r.TRAINJOBS, "default", "held", {"spec": {"suspend": False}})
    await plane.until(lambda: condition("held", "Suspended") is None, what="resumed")
    # Runtimes the webhook's cache does not hold are read from the API (here: missing ones).
    for kind in ("ClusterTrainingRuntime", "TrainingRuntime"):
        with pytest.raises(APIError) as err:
            await kube.create(trainjob(f"no-{kind.lower()}", "missing", kind))
        assert err.value.status == 403


async def test_rbac_is_exactly_what_the_controller_requests(
    plane: Plane, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    await install_podgroup_crds(plane)  # before the start: the PodGroup caches watch at once
    port = free_port()
    for cfg in configurations(port):
        plane.server.storage.create_unadmitted(cfg["apiVersion"], cfg["kind"], cfg)
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        plane.server.write_kubeconfig(kubeconfig.name)
        api = await new_api_client(kubeconfig.name, qps_user_agent=AGENT)
    settings = config(port, leader=True)
    assert settings.leader_election is not None
    settings.leader_election.resource_namespace = ""  # the pod's namespace, as installed
    stop, ready, state = asyncio.Event(), asyncio.Event(), ProcessState()
    task = asyncio.create_task(
        run_controller(
            api,
            settings,
            stop,
            options=ProcessOptions(webhook=True, webhook_extra_hosts=("127.0.0.1",)),
            ready=ready,
            state=state,
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 30)
        await asyncio.wait_for(state.webhook_serving.wait(), 30)
        await run_flows(plane)
        # A renewal of the Lease (an update) within a few retry periods.
        await plane.until(
            lambda: any(
                r.resource == "leases" and r.verb == "update" and r.user_agent.startswith(AGENT)
                for r in plane.server.storage.hooks.log
            ),
            what="lease renewal",
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await api.close()

    # A watch is logged when it ends: the server notices the closed stream at its next
    # bookmark (every second). Wait until every watch cache's stream is logged: each cache
    # lists first, so every resource the controller listed (bar the Volcano validator's
    # PriorityClass lookup, which is not a cache) must show a watch.
    def ours(verb: str) -> set[tuple[str, str]]:
        return {
            (r.group, r.resource)
            for r in plane.server.storage.hooks.log
            if r.verb == verb and r.user_agent.startswith(AGENT)
        }

    logged = asyncio.Event()
    plane.server.storage.hooks.on_request.append(lambda _rec: logged.set())

    async def all_watches_logged() -> None:
        while not ours("list") - {("scheduling.k8s.io", "priorityclasses")} <= ours("watch"):
            logged.clear()
            await logged.wait()

    await asyncio.wait_for(all_watches_logged(), 10)

    rules = controller_rules()
    records = [r for r in plane.server.storage.hooks.log if r.user_agent.startswith(AGENT)]
    assert records, "no request carried the controller's User-Agent"
    denied = sorted(
        {
            need
            for record in records
            for need in requested(record)
            if not any(rule.allows(*need) for rule in rules)
        }
    )
    assert not denied, f"requests the installed RBAC would deny: {denied}"

    used: set[Permission] = set()
    for record in records:
        for group, resource, verb, namespace, name in requested(record):
            for rule in rules:
                if rule.allows(group, resource, verb, namespace, name):
                    used.add((group, resource, verb, name if rule.names else ""))
    granted = set().union(*(rule.permissions() for rule in rules))
    unused = granted - used
    assert unused == set(NOT_IN_THE_LOG), (
        f"granted but never requested (remove, or document in NOT_IN_THE_LOG): "
        f"{sorted(unused - set(NOT_IN_THE_LOG))}; documented but requested after all: "
        f"{sorted(set(NOT_IN_THE_LOG) - unused)}"
    )
