"""The built-in objects of a local plane, created through its API as any client creates
objects, with the administrator's credentials, once the server listens: the CRDs, the system
namespace and the ConfigMap the Kubeflow SDK reads, the built-in runtimes and the webhook
configurations (``trainer up``, ``trainer run``; the CRDs alone for ``trainer apiserver``).
Then the wait, through a watch, until the webhook's caBundle is in its configurations."""

from __future__ import annotations

import asyncio
from typing import Any

from trainer.api import constants as c
from trainer.api import crds
from trainer.kube import resources as r
from trainer.kube.informer import Informer
from trainer.kube.rest import APIError, Kube
from trainer.machinery.gvr import GVR
from trainer.runtime.builtin import builtin_runtime_documents

SYSTEM_NAMESPACE = "kubeflow-system"
VALIDATING = "validator.trainer.kubeflow.org"
MUTATING = "defaulter.trainer.kubeflow.org"
FIELD_MANAGER = "bootstrap"
"""The field manager of what the plane creates (what its managedFields have always named)."""


def webhook_configurations(port: int) -> list[dict[str, Any]]:
    """upstream's two webhook configurations, pointing at ``https://127.0.0.1:<port>``
    (the caBundle is injected by the webhook's certificate rotator)."""
    base = f"https://127.0.0.1:{port}"

    def hook(kind: str, plural: str, mutate: bool = False) -> dict[str, Any]:
        path = f"/{'mutate' if mutate else 'validate'}-trainer-kubeflow-org-v1alpha1-{kind}"
        out: dict[str, Any] = {
            "name": f"{'defaulter' if mutate else 'validator'}.{kind}.trainer.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": base + path},
            "rules": [
                {
                    "apiGroups": [c.GROUP],
                    "apiVersions": [c.VERSION],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [plural],
                }
            ],
        }
        if kind != "trainjob":
            out["objectSelector"] = {
                "matchExpressions": [
                    {
                        "key": c.LABEL_WEBHOOK_VALIDATION,
                        "operator": "NotIn",
                        "values": [c.WEBHOOK_VALIDATION_DISABLED],
                    }
                ]
            }
        return out

    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING},
            "webhooks": [
                hook("clustertrainingruntime", c.PLURAL_CLUSTER_TRAINING_RUNTIMES),
                hook("trainingruntime", c.PLURAL_TRAINING_RUNTIMES),
                hook("trainjob", c.PLURAL_TRAINJOBS),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING},
            "webhooks": [hook("trainjob", c.PLURAL_TRAINJOBS, mutate=True)],
        },
    ]


async def create_missing(kube: Kube, documents: list[dict[str, Any]], gvr: GVR) -> None:
    """Create each object unless one of its name exists already (a state file's)."""

    async def create(obj: dict[str, Any]) -> None:
        try:
            await kube.create(obj, gvr=gvr, field_manager=FIELD_MANAGER)
        except APIError as err:
            if not err.is_conflict:  # 409 AlreadyExists: kept as it is
                raise

    await asyncio.gather(*(create(obj) for obj in documents))


async def install_crds(kube: Kube, *, trainer: bool = True) -> None:
    """The Trainer and JobSet CRDs (JobSet's alone without ``trainer``), unless present."""
    documents = [*crds.trainer_crds(), crds.jobset_crd()] if trainer else [crds.jobset_crd()]
    await create_missing(kube, documents, r.CRDS)


async def install_basics(kube: Kube, *, trainer: bool = True) -> None:
    """CRDs, the system namespace and the built-in runtimes (labelled to skip the runtime
    webhooks, as the runtimes overlay does), unless already present (a state file). Without
    ``trainer`` only JobSet's CRD (the executor plays JobSet's controller): the rest is the
    production install's to create (``trainer up --without-controller``)."""
    await install_crds(kube, trainer=trainer)
    if not trainer:
        return
    await create_missing(
        kube,
        [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}],
        r.NAMESPACES,
    )
    # What the Kubeflow SDK reads to learn the Trainer version (upstream's overlay ships it).
    version = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": c.PUBLIC_CONFIG_MAP, "namespace": SYSTEM_NAMESPACE},
        "data": {c.PUBLIC_VERSION_KEY: c.TRAINER_RELEASE},
    }
    await create_missing(kube, [version], r.CONFIGMAPS)
    runtimes = []
    for doc in builtin_runtime_documents():
        runtime = dict(doc)
        meta = dict(runtime.get("metadata") or {})  # type: ignore[call-overload]
        meta["labels"] = {
            **meta.get("labels", {}),
            c.LABEL_WEBHOOK_VALIDATION: c.WEBHOOK_VALIDATION_DISABLED,
        }
        runtime["metadata"] = meta
        runtimes.append(runtime)
    await create_missing(kube, runtimes, r.CLUSTER_TRAINING_RUNTIMES)


async def register_webhook(kube: Kube, port: int) -> None:
    """The webhook configurations, pointing at ``port``: created, or replaced when a state
    file holds older ones (the webhook's port is new at every start)."""

    async def register(config: dict[str, Any]) -> None:
        validating = config["kind"] == r.VALIDATING_WEBHOOK_CONFIGURATIONS.kind
        gvr = (
            r.VALIDATING_WEBHOOK_CONFIGURATIONS if validating else r.MUTATING_WEBHOOK_CONFIGURATIONS
        )
        try:
            await kube.create(config, gvr=gvr, field_manager=FIELD_MANAGER)
            return
        except APIError as err:
            if not err.is_conflict:
                raise
        current = await kube.get(gvr, None, config["metadata"]["name"])
        meta = {**config["metadata"]}
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        await kube.replace({**config, "metadata": meta}, gvr=gvr, field_manager=FIELD_MANAGER)

    await asyncio.gather(*(register(config) for config in webhook_configurations(port)))


async def wait_webhook_ready(kube: Kube, timeout: float = 30.0) -> None:
    """Until the webhook's certificate rotator has injected its caBundle into every hook of
    both configurations: before that the API server cannot call the webhook. Watched
    through the API."""
    informers = {
        VALIDATING: Informer(kube, r.VALIDATING_WEBHOOK_CONFIGURATIONS),
        MUTATING: Informer(kube, r.MUTATING_WEBHOOK_CONFIGURATIONS),
    }
    changed = asyncio.Event()

    def on_change(_kind: str, _obj: dict[str, Any], _old: dict[str, Any] | None) -> None:
        changed.set()

    def injected() -> bool:
        for name, informer in informers.items():
            hooks = (informer.get(None, name) or {}).get("webhooks") or []
            if not hooks or not all(h.get("clientConfig", {}).get("caBundle") for h in hooks):
                return False
        return True

    for informer in informers.values():
        informer.add_handler(on_change)
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(informer.start() for informer in informers.values()))
            while not injected():
                changed.clear()
                await changed.wait()
    except TimeoutError:
        raise TimeoutError("the admission webhook did not become ready") from None
    finally:
        await asyncio.gather(*(informer.stop() for informer in informers.values()))
