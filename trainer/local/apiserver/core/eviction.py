"""The ``pods/{name}/eviction`` subresource: a voluntary eviction that honours the pod's
PodDisruptionBudget, as kube-apiserver's EvictionREST answers it
(https://github.com/kubernetes/kubernetes/blob/master/pkg/registry/core/pod/storage/eviction.go).

- A pod that is Succeeded, Failed, Pending or already being deleted is deleted at once: it
  disrupts nothing more (a pod that is not terminal is deleted on the resourceVersion read,
  so it cannot turn Ready in between).
- Otherwise the budgets covering the pod decide: none, the pod is deleted; more than one,
  500 ``This pod has more than one PodDisruptionBudget, which the eviction subresource does
  not support.``; one, the budget is checked and decremented: a status that lags its
  generation is 429 (``is still being processed``, retry after 10 s), ``disruptionsAllowed``
  0 is 429 ``Cannot evict pod as it would violate the pod's disruption budget.`` with the cause
  ``The disruption budget <name> needs <desired> healthy pods and has <current> currently``;
  otherwise ``disruptionsAllowed`` goes down by one and the pod is recorded in
  ``disruptedPods`` in one status write, then the pod is deleted. A pod that is not Ready is
  deleted without touching the budget when the budget's ``unhealthyPodEvictionPolicy`` is
  ``AlwaysAllow``, or (``IfHealthyBudget``, the default) while the budget has its desired
  healthy pods.
- Before a pod is deleted (not on a dry run) it gets the condition ``DisruptionTarget`` True,
  reason ``EvictionByEvictionAPI``, message ``Eviction API: evicting``, as with the
  PodDisruptionConditions feature (on since Kubernetes 1.26).

The Eviction's ``deleteOptions`` are the delete's (preconditions, propagation, dry run; the
request's ``dryRun`` and the body's must agree). An eviction answers ``201`` with a Success
``Status``. Admission webhooks are not called for evictions here. What the disruption
controller keeps in the budget's status is the executor's
(:mod:`trainer.local.executor.disruption`).
"""

from __future__ import annotations

import copy
from typing import Any

from trainer.local.apiserver import metadata
from trainer.local.apiserver.core.rules import WriteOptions
from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.errors import APIError, bad_request, conflict, forbidden
from trainer.local.apiserver.resources import ResourceType
from trainer.machinery import disruption as pdbs

API_VERSIONS = ("policy/v1", "policy/v1beta1")
"""The Eviction versions the subresource accepts (``AcceptsGroupVersion``)."""
PDB_KEY = ("policy", "poddisruptionbudgets")
MANAGER = "kube-apiserver"
"""The field manager of the writes an eviction makes (kube-apiserver's loopback client)."""
RETRIES = 20
"""``EvictionsRetry.Steps``: attempts when another write lands on the pod or the budget."""
MAX_DISRUPTED_PODS = 2000
"""``MaxDisruptedPodSize``: evictions the disruption controller has not confirmed yet."""
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)


def success() -> dict[str, Any]:
    """The answer to an eviction that was carried out (``metav1.Status`` Success, 201)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def still_processing(name: str) -> APIError:
    """``createTooManyRequestsError``: the budget's status is behind (429, retry in 10 s)."""
    return APIError(
        429,
        "TooManyRequests",
        VIOLATES,
        {
            "causes": [
                {
                    "reason": pdbs.DISRUPTION_BUDGET_CAUSE,
                    "message": f"The disruption budget {name} is still being processed by the "
                    "server.",
                }
            ],
            "retryAfterSeconds": 10,
        },
    )


def _budget_forbids(name: str, why: str) -> APIError:
    err = forbidden(f'poddisruptionbudget.policy "{name}" is forbidden: {why}')
    err.details = {"name": name, "group": "policy", "kind": "poddisruptionbudget"}
    return err


def can_ignore_budget(pod: dict[str, Any]) -> bool:
    """``canIgnorePDB``: a terminal or Pending pod, or one already being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return phase in ("Succeeded", "Failed", "Pending") or deleting


def pins_resource_version(pod: dict[str, Any]) -> bool:
    """``shouldEnforceResourceVersion``: delete a pod that is not terminal (nor being
    deleted) only as it was read, so it cannot turn Ready in between."""
    phase = (pod.get("status") or {}).get("phase")
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    return not (phase in ("Succeeded", "Failed") or deleting)


def unready_may_go(pdb: dict[str, Any]) -> bool:
    """Whether a pod that is not Ready may be evicted without spending the budget: its
    ``unhealthyPodEvictionPolicy`` is AlwaysAllow, or the budget has its desired healthy pods
    (IfHealthyBudget)."""
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == pdbs.ALWAYS_ALLOW:
        return True
    status = pdb.get("status") or {}
    desired = int(status.get("desiredHealthy") or 0)
    return int(status.get("currentHealthy") or 0) >= desired > 0


def decremented(pdb: dict[str, Any], pod: str, now: str, *, dry_run: bool) -> dict[str, Any]:
    """``checkAndDecrement``: the budget once it allows evicting ``pod`` (one disruption fewer,
    the pod in ``disruptedPods`` at ``now``), or the APIError that refuses it."""
    meta = pdb.get("metadata") or {}
    name = str(meta.get("name") or "")
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        raise still_processing(name)
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise _budget_forbids(name, "pdb disruptions allowed is negative")
    if len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise _budget_forbids(
            name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )
    if allowed == 0:
        desired = int(status.get("desiredHealthy") or 0)
        current = int(status.get("currentHealthy") or 0)
        cause = (
            f"The disruption budget {name} needs {desired} healthy pods and has {current} currently"
        )
        raise APIError(
            429,
            "TooManyRequests",
            VIOLATES,
            {"causes": [{"reason": pdbs.DISRUPTION_BUDGET_CAUSE, "message": cause}]},
        )
    new = copy.deepcopy(pdb)
    new_status = new.setdefault("status", {})
    new_status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        pdbs.update_disruption_allowed_condition(new_status, now)
    if not dry_run:
        new_status["disruptedPods"] = {**(new_status.get("disruptedPods") or {}), pod: now}
    return new


def _eviction_options(
    body: Any, namespace: str, name: str, query: dict[str, str]
) -> dict[str, Any]:
    """The Eviction's deleteOptions, checked as kube-apiserver decodes the Eviction."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    version = body.get("apiVersion")
    if version and version not in API_VERSIONS:
        raise bad_request(
            f"the API version in the data ({version}) does not match the expected API version "
            "(policy/v1)"
        )
    kind = body.get("kind")
    if kind and kind != "Eviction":
        raise bad_request(f'no kind "{kind}" is registered for version "{version or "policy/v1"}"')
    meta = body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if meta.get("name") != name:
        raise bad_request("name in URL does not match name in Eviction object")
    options = metadata.delete_options(body.get("deleteOptions"), {})
    asked = ["All"] if query.get("dryRun") == "All" else []
    given = list(options.get("dryRun") or [])
    if given and asked and given != asked:
        raise APIError(
            500,
            "InternalError",
            "Internal error occurred: Non-matching dry-run options in request and content: "
            f"{_go_list(asked)} and {_go_list(given)}",
        )
    options["dryRun"] = given or asked
    return options


def _go_list(values: list[str]) -> str:
    return "[" + " ".join(values) + "]"


async def evict(
    storage: Storage, rt: ResourceType, namespace: str, name: str, body: Any, query: dict[str, str]
) -> tuple[dict[str, Any], int]:
    """Evict pod ``name``: the Status answered and its HTTP code (201, or 500 for a pod with
    several budgets); an APIError for a refusal."""
    options = _eviction_options(body, namespace, name, query)
    dry_run = "All" in options["dryRun"]
    preconditions = dict(options.get("preconditions") or {})
    own_rv = bool(preconditions.get("resourceVersion"))
    for attempt in range(RETRIES):
        pod = storage.get_or_404(rt, namespace, name)
        if not can_ignore_budget(pod):
            break
        pre = dict(preconditions)
        if pins_resource_version(pod) and not own_rv:
            pre["resourceVersion"] = pod["metadata"]["resourceVersion"]
        try:
            await _delete(storage, rt, namespace, name, options, pre, dry_run=dry_run)
        except APIError as err:
            if err.code != 409 or own_rv or attempt == RETRIES - 1:
                raise
            continue
        return success(), 201
    budgets = pdbs.budgets_of(_budgets(storage, namespace), pod)
    if len(budgets) > 1:
        # A Status returned, not an error: it has no reason (EvictionREST's rtStatus).
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": MULTIPLE,
            "code": 500,
        }, 500
    pin = False
    if budgets:
        budget = dict(budgets[0])
        if not pdbs.pod_ready(pod) and unready_may_go(budget):
            pin = True
        else:
            await _spend(storage, budget, name, dry_run=dry_run)
    pre = dict(preconditions)
    if pin:
        pre["resourceVersion"] = pod["metadata"]["resourceVersion"]
    try:
        await _delete(storage, rt, namespace, name, options, pre, dry_run=dry_run)
    except APIError as err:
        if err.code == 409 and pin and not own_rv:
            raise still_processing(str(budgets[0]["metadata"]["name"])) from None
        raise
    return success(), 201


def _budgets(storage: Storage, namespace: str) -> list[dict[str, Any]]:
    return list(storage.store.items(PDB_KEY, namespace))


async def _spend(storage: Storage, budget: dict[str, Any], pod: str, *, dry_run: bool) -> None:
    """Decrement the budget for ``pod`` (one status write), retried on a fresh read when
    another write lands on it meanwhile."""
    rt = storage.registry.by_key(*PDB_KEY)
    assert rt is not None  # a budget was read, so the kind is served
    meta = budget["metadata"]
    for attempt in range(RETRIES):
        new = decremented(budget, pod, storage.now(), dry_run=dry_run)
        if dry_run:
            return
        try:
            await storage.update(
                rt,
                meta["namespace"],
                meta["name"],
                new,
                WriteOptions(manager=MANAGER),
                subresource="status",
            )
            return
        except APIError as err:
            if err.code != 409:
                raise
            if attempt == RETRIES - 1:
                raise APIError(
                    504,
                    "Timeout",
                    f'couldn\'t update PodDisruptionBudget "{meta["name"]}" due to conflicts',
                    {"retryAfterSeconds": 10},
                ) from None
            budget = storage.get_or_404(rt, meta["namespace"], meta["name"])


async def _delete(
    storage: Storage,
    rt: ResourceType,
    namespace: str,
    name: str,
    options: dict[str, Any],
    preconditions: dict[str, Any],
    *,
    dry_run: bool,
) -> None:
    """``addConditionAndDeletePod``: mark the pod ``DisruptionTarget`` (not on a dry run),
    then delete it with the eviction's options."""
    if not dry_run:
        pod = storage.get_or_404(rt, namespace, name)
        meta = pod["metadata"]
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != meta.get("uid"):
            raise conflict(
                "Pod",
                "",
                name,
                f"the UID in the precondition ({uid}) does not match the UID in record "
                f"({meta.get('uid')}). The object might have been deleted and then recreated",
            )
        if rv and rv != meta.get("resourceVersion"):
            raise conflict(
                "Pod",
                "",
                name,
                f"the ResourceVersion in the precondition ({rv}) does not match the "
                f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might "
                "have been modified",
            )
        marked = await storage.update(
            rt,
            namespace,
            name,
            _disruption_target(pod, storage.now()),
            WriteOptions(manager=MANAGER),
            subresource="status",
        )
        if rv:
            preconditions = {
                **preconditions,
                "resourceVersion": marked["metadata"]["resourceVersion"],
            }
    await storage.delete(
        rt,
        namespace,
        name,
        policy=options.get("propagationPolicy"),
        preconditions=preconditions,
        dry_run=dry_run,
    )


def _disruption_target(pod: dict[str, Any], now: str) -> dict[str, Any]:
    """The pod with ``DisruptionTarget`` True (``podutil.UpdatePodCondition``: the transition
    time kept when the status does not change)."""
    new = copy.deepcopy(pod)
    status = new.setdefault("status", {})
    conditions = list(status.get("conditions") or [])
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now,
        "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting",
    }
    for i, old in enumerate(conditions):
        if old.get("type") == "DisruptionTarget":
            if old.get("status") == "True":
                condition["lastTransitionTime"] = old.get("lastTransitionTime") or now
            conditions[i] = condition
            break
    else:
        conditions.append(condition)
    status["conditions"] = conditions
    return new
