"""Rendering the install from the jinja2 templates in ``trainer/deploy/templates``.

Pure: values in, Kubernetes objects out (templates and CRDs come from the package, nothing
touches a cluster). The CRDs are generated from the API models by ``trainer.api.crds`` and the
built-in runtimes come from ``trainer.runtime.builtin``: the same sources as ``manifests/base/crds``
and ``manifests/base/runtimes``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jinja2
import yaml

from trainer import __version__
from trainer.api import constants as c
from trainer.api import crds
from trainer.deploy.values import Values
from trainer.machinery import yamlout
from trainer.runtime.builtin import builtin_runtime_documents

NAME = "kubeflow-trainer-controller-manager"
CONFIG_MAP = "kubeflow-trainer-config"
SECRET_NAME = "kubeflow-trainer-webhook-cert"
LEASE_NAME = "trainer.kubeflow.org"
JOBSET_VERSION = "v0.12.0"
"""The JobSet release to install before this (upstream Trainer v2.3's chart depends on it)."""
MIN_KUBERNETES = "1.31"
"""The oldest Kubernetes the install supports (its objects are validated against 1.31)."""
WEBHOOK_VALIDATION_LABEL = "trainer.kubeflow.org/webhook-validation"

COMPONENTS = ("rbac", "manager", "public", "webhook")
"""The kustomize base directories rendered from templates, in install order (after the
Namespace and the CRDs)."""

Obj = dict[str, Any]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("trainer.deploy", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


def _block(value: Any) -> str:
    """A YAML block for a template slot (indented by the template)."""
    return yamlout.dump(value).rstrip("\n")


def context(values: Values) -> dict[str, Any]:
    """The variables every template sees."""
    labels = {"app.kubernetes.io/name": "kubeflow-trainer", "app.kubernetes.io/part-of": "trainer"}
    selector = {"app.kubernetes.io/component": "controller-manager"}
    ctx: dict[str, Any] = {
        "name": NAME,
        "namespace": yamlout.scalar(values.namespace),
        "config_map": CONFIG_MAP,
        "secret_name": SECRET_NAME,
        "lease_name": LEASE_NAME,
        "labels": _block(labels),
        "selector": _block(selector),
        "image": yamlout.scalar(values.image),
        "image_pull_policy": values.image_pull_policy,
        "replicas": values.replicas,
        "log_level": values.log_level,
        "resources": _block(values.resources.model_dump()),
        "node_selector": _block(values.node_selector) if values.node_selector else "",
        "tolerations": _block(values.tolerations) if values.tolerations else "",
        "priority_class_name": yamlout.scalar(values.priority_class_name),
        "trainjob_concurrency": values.trainjob_concurrency,
        "feature_gates": _block(values.feature_gates) if values.feature_gates else "",
        "failure_policy": values.webhook.failure_policy,
        "timeout_seconds": values.webhook.timeout_seconds,
        "version": __version__,
        "public_config_map": c.PUBLIC_CONFIG_MAP,
        "public_version_key": c.PUBLIC_VERSION_KEY,
        "trainer_release": yamlout.scalar(c.TRAINER_RELEASE),
    }
    ctx["config"] = _ENV.get_template("controller_manager_config.yaml.j2").render(ctx).rstrip()
    return ctx


def render_template(name: str, values: Values) -> list[Obj]:
    """The objects of template ``<name>.yaml.j2``."""
    text = _ENV.get_template(f"{name}.yaml.j2").render(context(values))
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def controller_config(values: Values) -> str:
    """The Configuration file the Deployment mounts (``--config``)."""
    return str(context(values)["config"]) + "\n"


def install_objects(values: Values) -> list[Obj]:
    """The whole install but JobSet and the runtimes, in apply order: the Namespace, the CRDs,
    RBAC, the manager (configuration, Service, Deployment, PodDisruptionBudget) and the webhook
    configurations."""
    objects = render_template("namespace", values)
    objects += crds.trainer_crds()
    for component in COMPONENTS:
        objects += render_template(component, values)
    return objects


def runtime_objects() -> list[Obj]:
    """The built-in ClusterTrainingRuntimes, labelled to skip the runtime webhooks (they are
    validated when this project is tested, and they can then be applied before the webhook
    serves)."""
    out = []
    for doc in builtin_runtime_documents():
        obj: Obj = dict(doc)
        meta = dict(obj.get("metadata") or {})
        meta["labels"] = {**(meta.get("labels") or {}), WEBHOOK_VALIDATION_LABEL: "disabled"}
        obj["metadata"] = meta
        out.append(obj)
    return out


def to_stream(objects: Iterable[Obj]) -> str:
    """One YAML stream (``---`` between documents) that kubectl reads back as written."""
    return yamlout.dump_all(objects, allow_unicode=True)
