"""Watch caches of everything the dashboard shows, and who to tell when it changes.

:class:`ClusterCache` runs one :class:`trainer.kube.informer.Informer` (list, then watch: no
polling) per resource, in one namespace or all of them: TrainJobs, JobSets, the Jobs and pods
of JobSets (JobSet's ``jobset-name`` label, so unrelated pods of a cluster are not
cached), Events, TrainingRuntimes and ClusterTrainingRuntimes; and for the Nodes page, the
Nodes and the pods of every namespace that have not terminated (slimmed to what a node's
allocation reads, :func:`trainer.dashboard.policy.nodes.slim_pod`). Everything but TrainJobs is
optional: a user who may not list a resource sees its section empty, named in
:attr:`ClusterCache.unavailable`. A resource whose CRD is not installed (a 404 on list: the
Trainer CRDs before ``kubectl apply`` of the install, JobSets without JobSet) is listed again,
backing off, until it is served, and then shown; until the Trainer CRDs are all served the
pages say so (:attr:`ClusterCache.waiting`) rather than fail (docs/dashboard.md, "What it
watches").

Every change is mapped to the TrainJob it concerns (a JobSet through its controller owner, a
Job or pod through its JobSet label, an Event through its involved object) and added to the
dirty set of each :class:`Subscription` (one per open page stream), which a page drains at its
own pace: a burst of changes to one TrainJob is one update. TrainJob events also feed the
metric :class:`~trainer.dashboard.policy.history.History`. Node and all-namespace pod changes
wake only the Nodes page's subscriptions (a busy cluster's pods do not wake TrainJob pages).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from trainer.api import constants as c
from trainer.dashboard.policy import nodes, summary
from trainer.dashboard.policy.history import History
from trainer.dashboard.policy.runtimes import runtime_row
from trainer.jobset import contract as jsc
from trainer.kube import resources as r
from trainer.kube.informer import Backoff, Informer, key_of
from trainer.kube.resources import GVR
from trainer.kube.rest import APIError, Kube
from trainer.machinery.owners import controller_of

Obj = dict[str, Any]
Key = tuple[str, str]

PODS = GVR("", "v1", "pods", True, "Pod")
JOBS = GVR("batch", "v1", "jobs", True, "Job")
SYNC_TIMEOUT = 30.0
ALL_PODS = "pods in all namespaces"
"""How :attr:`ClusterCache.unavailable` names the pods a node's allocation is summed from."""
DISCOVERY_FIRST, DISCOVERY_CAP = 0.5, 10.0
"""A resource not served is listed again after 0.5 s, doubling to 10 s: an install applied
while the dashboard runs shows within seconds, and a cluster without the CRDs answers one 404
list per missing resource every 5-10 s (cheap: no storage is read for it)."""
NOT_SERVED = "not served: no CRD"
WAITING = "waiting for the Kubeflow Trainer CRDs to be installed"


def _discovery() -> Backoff:
    return Backoff(base=DISCOVERY_FIRST, cap=DISCOVERY_CAP)


class Subscription:
    """The TrainJobs that changed since the last :meth:`next` (and whether runtimes did)."""

    def __init__(self) -> None:
        self.dirty: set[Key] = set()
        self.runtimes = False
        self.wake = asyncio.Event()

    def mark(self, key: Key | None, runtimes: bool = False) -> None:
        if key is not None:
            self.dirty.add(key)
        self.runtimes = self.runtimes or runtimes
        self.wake.set()

    def take(self) -> tuple[set[Key], bool]:
        """What changed so far (possibly nothing), forgotten once taken."""
        self.wake.clear()
        dirty, runtimes = self.dirty, self.runtimes
        self.dirty, self.runtimes = set(), False
        return dirty, runtimes

    async def next(self) -> tuple[set[Key], bool]:
        """Wait for a change, then :meth:`take`."""
        await self.wake.wait()
        return self.take()


def _text_label(obj: Obj, label: str) -> str:
    return str((summary.meta(obj).get("labels") or {}).get(label) or "")


def _owner(obj: Obj, kind: str) -> str | None:
    ref = controller_of(obj, kind)
    return str(ref.get("name") or "") if ref is not None else None


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts in ``command``) as ``|`` blocks, as people write them."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not value.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(obj: Obj | None) -> str:
    """An object as YAML (managedFields are already dropped by the informer)."""
    if obj is None:
        return ""
    return yaml.dump(
        obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


class ClusterCache:
    """Everything one dashboard watches, in ``namespace`` (None: every namespace)."""

    def __init__(self, kube: Kube, namespace: str | None) -> None:
        self.kube = kube
        self.namespace = namespace
        selector = jsc.LABEL_JOBSET_NAME
        # The resources of CRDs, which may be installed after the dashboard starts (under
        # `trainer up --without-controller` Trainer's are applied to the running plane:
        # docs/local-plane.md, "Without the built-in controller").
        self.trainjobs = self._crd_informer(r.TRAINJOBS, namespace)
        self.jobsets = self._crd_informer(r.JOBSETS, namespace)
        self.jobs = Informer(kube, JOBS, namespace, selector)
        self.pods = Informer(kube, PODS, namespace, selector)
        self.events = Informer(kube, r.EVENTS, namespace)
        self.cluster_runtimes = self._crd_informer(r.CLUSTER_TRAINING_RUNTIMES, None)
        self.runtimes = self._crd_informer(r.TRAINING_RUNTIMES, namespace)
        self.trainer_informers = (self.trainjobs, self.cluster_runtimes, self.runtimes)
        """Kubeflow Trainer's resources: until each is served the cache is :attr:`waiting`."""
        self.nodes = Informer(kube, r.NODES, optional=True)
        # Every namespace's, whatever the dashboard's namespace: a node's allocation counts
        # every pod bound to it (kubectl describe node's field selector).
        self.node_pods = Informer(
            kube,
            PODS,
            None,
            field_selector=nodes.NOT_TERMINATED,
            transform=nodes.slim_pod,
            optional=True,
        )
        self.history = History()
        self.refused: dict[str, str] = {}
        """Resources not watched (resource -> why: the API server's refusal of a list)."""
        self._subs: set[Subscription] = set()
        self._node_subs: set[Subscription] = set()
        self._status_handlers: list[Callable[[], None]] = []
        self.trainjobs.add_handler(self._on_trainjob)
        self.jobsets.add_handler(self._on_jobset)
        self.jobs.add_handler(lambda _t, o, _old: self._notify(self._of_labelled(o)))
        self.pods.add_handler(self._on_pod)
        self.deleted_pods: dict[Key, Obj] = {}
        """Pods of a JobSet deleted while their JobSet stays (the Job controller deletes the
        pods of a Job that reached its backoff limit), as last seen: listed, marked deleted,
        with the log the local plane keeps of them, until their JobSet goes."""
        self.events.add_handler(lambda _t, o, _old: self._notify(self._of_event(o)))
        for runtimes in (self.cluster_runtimes, self.runtimes):
            runtimes.add_handler(lambda _t, _o, _old: self._notify(None, runtimes=True))
        for inf in (self.nodes, self.node_pods):
            inf.add_handler(lambda _t, _o, _old: self._notify_nodes())
        for inf in self.informers:
            inf.add_served_handler(lambda _served: self._status_changed())

    def _crd_informer(self, gvr: GVR, namespace: str | None) -> Informer:
        return Informer(self.kube, gvr, namespace, optional=True, discovery_backoff=_discovery())

    @property
    def informers(self) -> list[Informer]:
        return [
            self.trainjobs,
            self.jobsets,
            self.jobs,
            self.pods,
            self.events,
            self.cluster_runtimes,
            self.runtimes,
            self.nodes,
            self.node_pods,
        ]

    def name_of(self, inf: Informer) -> str:
        """What :attr:`unavailable` and the warnings call ``inf``'s objects."""
        return ALL_PODS if inf is self.node_pods else inf.gvr.resource

    @property
    def waiting(self) -> str | None:
        """What the pages say while some of Trainer's CRDs are not served (None once all
        are): their resources are watched all the same and shown once served."""
        # A CRD's name is its resource's (trainjobs.trainer.kubeflow.org).
        missing = [inf.gvr.resource for inf in self.trainer_informers if not inf.served]
        return f"{WAITING} ({', '.join(missing)} not served yet)" if missing else None

    @property
    def unavailable(self) -> dict[str, str]:
        """Resources not shown (resource -> why): those :attr:`refused`, and the others not
        served now (Trainer's are :attr:`waiting` for instead)."""
        unserved = {
            self.name_of(inf): NOT_SERVED
            for inf in self.informers
            if not inf.served and inf not in self.trainer_informers
        }
        return {**unserved, **self.refused}

    def status(self) -> Obj:
        """What every page says about the cache as a whole (it changes when a CRD is
        installed or removed: :meth:`add_status_handler`)."""
        return {"waiting": self.waiting, "unavailable": self.unavailable}

    def add_status_handler(self, handler: Callable[[], None]) -> None:
        """Call ``handler()`` after each change of what a resource being served changes
        (:meth:`status`, and the objects then listed); every subscription is woken too."""
        self._status_handlers.append(handler)

    def _status_changed(self) -> None:
        for sub in (*self._subs, *self._node_subs):
            sub.mark(None)
        for handler in list(self._status_handlers):
            handler()

    async def start(self, timeout: float = SYNC_TIMEOUT) -> None:
        """Start the watches of every resource the user may list (the others are named in
        :attr:`refused` and their sections stay empty); return once each listed once, or found
        not served (TimeoutError otherwise). TrainJobs are not optional: a refusal to list them
        is raised (a 404 is not: the cache is then :attr:`waiting` for their CRD)."""
        await asyncio.gather(*(self._probe(inf) for inf in self.informers))
        watched = [inf for inf in self.informers if self.name_of(inf) not in self.refused]
        await asyncio.gather(*(inf.start(timeout) for inf in watched))
        for job in self.trainjobs.list():
            self.history.record(key_of(job), summary.trainer_status(job))

    async def stop(self) -> None:
        await asyncio.gather(*(inf.stop() for inf in self.informers))

    async def _probe(self, inf: Informer) -> None:
        """Whether ``inf``'s resource can be listed: a refusal (401, 403) is recorded in
        :attr:`refused` and not retried for ever (for TrainJobs, raised). A resource of a CRD
        not installed (404) is watched anyway: its informer lists it again until it is served.
        """
        try:
            await self.kube.list(
                inf.gvr,
                inf.namespace,
                label_selector=inf.label_selector,
                field_selector=inf.field_selector,
                limit=1,
            )
        except APIError as err:
            if err.is_not_found and inf.optional:
                return
            if err.status in (401, 403, 404) and inf is not self.trainjobs:
                self.refused[self.name_of(inf)] = f"{err.status} {err.reason}"
            else:
                raise

    # --- change notification ------------------------------------------------------------
    @contextlib.contextmanager
    def subscribe(self, *, nodes: bool = False) -> Iterator[Subscription]:
        """A subscription to TrainJob and runtime changes, or with ``nodes`` to node changes
        (Nodes, and pods of every namespace), which mark no TrainJob and only wake it."""
        sub = Subscription()
        subs = self._node_subs if nodes else self._subs
        subs.add(sub)
        try:
            yield sub
        finally:
            subs.discard(sub)

    def _notify_nodes(self) -> None:
        for sub in self._node_subs:
            sub.mark(None)

    def _notify(self, key: Key | None, runtimes: bool = False) -> None:
        if key is None and not runtimes:
            return
        for sub in self._subs:
            sub.mark(key, runtimes)

    def _on_trainjob(self, kind: str, obj: Obj, _old: Obj | None) -> None:
        key = key_of(obj)
        if kind == "DELETED":
            self.history.forget(key)
        else:
            self.history.record(key, summary.trainer_status(obj), seen=time.time())
        self._notify(key)

    def _on_pod(self, kind: str, obj: Obj, _old: Obj | None) -> None:
        key = key_of(obj)
        self.deleted_pods.pop(key, None)  # a new pod of that name is its own
        jobset = _text_label(obj, jsc.LABEL_JOBSET_NAME)
        if kind == "DELETED" and jobset:
            owner = self.jobsets.get(key[0], jobset)
            if owner is not None and not summary.meta(owner).get("deletionTimestamp"):
                self.deleted_pods[key] = obj
        self._notify(self._of_labelled(obj))

    def _on_jobset(self, kind: str, obj: Obj, _old: Obj | None) -> None:
        if kind == "DELETED":
            namespace, name = key_of(obj)
            for key in [k for k in self.deleted_pods if k[0] == namespace]:
                if _text_label(self.deleted_pods[key], jsc.LABEL_JOBSET_NAME) == name:
                    del self.deleted_pods[key]
        self._notify(self._of_jobset(obj))

    def _of_jobset(self, obj: Obj) -> Key | None:
        owner = _owner(obj, c.KIND_TRAINJOB)
        return (key_of(obj)[0], owner) if owner else None

    def _jobset_trainjob(self, namespace: str, jobset: str) -> Key:
        cached = self.jobsets.get(namespace, jobset)
        owner = _owner(cached, c.KIND_TRAINJOB) if cached is not None else None
        return namespace, owner or jobset  # the controller names the JobSet after the TrainJob

    def _of_labelled(self, obj: Obj) -> Key | None:
        labels = summary.meta(obj).get("labels") or {}
        jobset = labels.get(jsc.LABEL_JOBSET_NAME)
        return self._jobset_trainjob(key_of(obj)[0], str(jobset)) if jobset else None

    def _of_event(self, event: Obj) -> Key | None:
        inv = event.get("involvedObject") or event.get("regarding") or {}
        if not isinstance(inv, dict):
            return None
        namespace = str(inv.get("namespace") or key_of(event)[0])
        name, kind = str(inv.get("name") or ""), inv.get("kind")
        if kind == c.KIND_TRAINJOB:
            return namespace, name
        if kind == jsc.KIND:
            return self._jobset_trainjob(namespace, name)
        source = {"Job": self.jobs, "Pod": self.pods}.get(str(kind))
        obj = source.get(namespace, name) if source is not None else None
        return self._of_labelled(obj) if obj is not None else None

    # --- reading --------------------------------------------------------------------------
    def runtime_of(self, job: Obj) -> Obj | None:
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        name = str(ref.get("name") or "")
        if ref.get("kind") == c.KIND_TRAINING_RUNTIME:
            return self.runtimes.get(key_of(job)[0], name)
        return self.cluster_runtimes.get(None, name)

    def rows(self) -> list[Obj]:
        return [summary.row(job, self.runtime_of(job)) for job in self.trainjobs.list()]

    def row(self, key: Key) -> Obj | None:
        job = self.trainjobs.get(*key)
        return summary.row(job, self.runtime_of(job)) if job is not None else None

    def owned(self, namespace: str, name: str) -> tuple[Obj | None, list[Obj], list[Obj]]:
        """The TrainJob's JobSet, its Jobs and their pods."""
        jobset = self.jobsets.get(namespace, name)
        if jobset is not None and _owner(jobset, c.KIND_TRAINJOB) != name:
            jobset = None
        uid = str(summary.meta(jobset).get("uid") or "") if jobset else ""
        jobs = self.jobs.by_owner_uid(uid) if uid else []
        pods: list[Obj] = []
        for job in jobs:
            pods += self.pods.by_owner_uid(str(summary.meta(job).get("uid") or ""))
        return jobset, jobs, pods

    def detail(self, namespace: str, name: str) -> Obj | None:
        """Everything the page of one TrainJob shows, or None when it does not exist."""
        job = self.trainjobs.get(namespace, name)
        if job is None:
            return None
        jobset, jobs, pods = self.owned(namespace, name)
        involved = {(c.KIND_TRAINJOB, name)}
        if jobset is not None:
            involved.add((jsc.KIND, name))
        involved |= {("Job", str(summary.meta(j).get("name"))) for j in jobs}
        gone = self.deleted_of(namespace, name) if jobset is not None else []
        involved |= {("Pod", str(summary.meta(p).get("name"))) for p in [*pods, *gone]}
        events = [
            e
            for e in self.events.list(namespace)
            if (
                str((e.get("involvedObject") or {}).get("kind")),
                str((e.get("involvedObject") or {}).get("name")),
            )
            in involved
        ]
        return {
            "row": summary.row(job, self.runtime_of(job)),
            "conditions": summary.conditions(job),
            "steps": summary.steps(job, jobs),
            "pods": summary.pods(pods, deleted=gone),
            "events": summary.events(events),
            "charts": self.history.charts((namespace, name)),
            "trainjobYaml": to_yaml(job),
            "jobsetYaml": to_yaml(jobset),
        }

    def runtime_rows(self) -> list[Obj]:
        items = self.cluster_runtimes.list() + self.runtimes.list()
        return [runtime_row(x) for x in items]

    def deleted_of(self, namespace: str, jobset: str) -> list[Obj]:
        """The deleted pods of a JobSet that are still listed (:attr:`deleted_pods`)."""
        return [
            p
            for (ns, _), p in self.deleted_pods.items()
            if ns == namespace and _text_label(p, jsc.LABEL_JOBSET_NAME) == jobset
        ]

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.pods.get(namespace, name)

    def deleted_pod(self, namespace: str, name: str) -> Obj | None:
        """A deleted pod still listed, unless a live pod has its name."""
        return None if self.pods.get(namespace, name) else self.deleted_pods.get((namespace, name))

    def nodes_view(self) -> Obj:
        """The Nodes page (:func:`trainer.dashboard.policy.nodes.view`); allocation is unknown
        when the pods of every namespace cannot be listed."""
        known = ALL_PODS not in self.refused and self.node_pods.served
        pods = self.node_pods.list() if known else []
        return nodes.view(self.nodes.list(), pods, pods_known=known)
