"""The TrainJobStatus plugin (docs/status-server.md; alpha, feature gate ``TrainJobStatus``, off
by default).

Registered only when the gate is on; it then acts on every TrainJob, whatever its mlPolicy.

EnforcePodSpec: every regular container of the trainer pod set learns where and how to report
progress: ``KUBEFLOW_TRAINER_SERVER_URL`` (the status server's endpoint of this TrainJob),
``KUBEFLOW_TRAINER_SERVER_CA_CERT`` and ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (files of the
read-only projected volume ``kubeflow-trainer-token``: a service-account token whose audience
names this TrainJob's status endpoint, and the CA that signed the server's certificate).

Build: the ConfigMap ``<job>-tls-config`` holding ``ca.crt``, copied from the webhook
certificate Secret the controller observed (passed in, so the build stays pure).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.machinery.models.core import Volume, VolumeMount
from trainer.runtime import apply
from trainer.runtime.info import BuildContext, BuildError, Info, Observed, Runtime
from trainer.runtime.objects import object_meta
from trainer.runtime.watch import SECRETS, Obj, Store, TrainJobsMatching, Watch


def _every(_obj: Obj, _trainjob: Obj, _runtime: Obj | None) -> bool:
    return True


def _the_secret(store: Store, trainjob: TrainJob, runtime: Runtime) -> Obj | None:
    """The one Secret the watch selects (by namespace and name)."""
    return next(iter(store.list()), None)


STATUS_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def default_base_url(
    service: str = c.DEFAULT_WEBHOOK_SERVICE_NAME,
    namespace: str = c.DEFAULT_OPERATOR_NAMESPACE,
    port: int = c.DEFAULT_STATUS_SERVER_PORT,
) -> str:
    """Upstream's status server address: the webhook Service's cluster DNS name."""
    return f"https://{service}.{namespace}.svc:{port}"


def status_path(namespace: str, name: str) -> str:
    return STATUS_PATH.format(namespace=namespace, name=name)


def token_audience(namespace: str, name: str) -> str:
    """The audience of a TrainJob's token: only its own status endpoint accepts it."""
    return f"{c.GROUP}/{c.VERSION}/namespaces/{namespace}/trainjobs/{name}/status"


def tls_config_name(job: str) -> str:
    return job + c.TLS_CONFIG_SUFFIX


def ca_cert_from_secret(secret: Any, secret_name: str) -> str:
    """``ca.crt`` of the webhook certificate Secret (wire form: base64 ``data``), with
    upstream's error messages when the Secret or the key is missing."""
    if secret is None:
        raise BuildError(
            f'failed to look up status server tls secret: secrets "{secret_name}" not found'
        )
    raw = (secret.get("data") or {}).get(c.STATUS_SERVER_CA_KEY)
    if raw is None:
        string_data = (secret.get("stringData") or {}).get(c.STATUS_SERVER_CA_KEY)
        if string_data:
            return str(string_data)
        raise BuildError("failed to find status server ca.crt in tls secret")
    try:
        decoded = base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise BuildError(
            f"status server tls secret {secret_name}: ca.crt is not valid base64"
        ) from None
    if not decoded:
        raise BuildError("failed to find status server ca.crt in tls secret")
    return decoded.decode("utf-8", errors="replace")


class TrainJobStatusPlugin:
    name = "TrainJobStatus"

    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        """The webhook certificate Secret (that one object): a new or rotated CA makes every
        TrainJob's tls-config (and a build that failed for want of the Secret) due again."""
        return [
            Watch(
                "status-server-ca",
                SECRETS,
                TrainJobsMatching(_every, same_namespace=False),
                _the_secret,
                into="status_server_secret",
                namespace=ctx.status_server_secret_namespace,
                field_selector=f"metadata.name={ctx.status_server_secret_name}",
            )
        ]

    def enforce_pod_spec(self, info: Info, ctx: BuildContext) -> None:
        trainer = info.trainer_pod_set()
        if trainer is None:
            return
        namespace, name = info.namespace, info.name
        base = (ctx.status_server_url or default_base_url()).rstrip("/")
        mount = c.STATUS_SERVER_MOUNT_PATH
        envs = [
            apply.env(c.ENV_STATUS_SERVER_URL, base + status_path(namespace, name)),
            apply.env(c.ENV_STATUS_SERVER_CA_CERT, f"{mount}/{c.STATUS_SERVER_CA_KEY}"),
            apply.env(c.ENV_STATUS_SERVER_TOKEN, f"{mount}/{c.STATUS_SERVER_TOKEN_PATH}"),
        ]
        pod = trainer.pod_spec
        volume = {
            "name": c.STATUS_SERVER_VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": token_audience(namespace, name),
                            "expirationSeconds": c.STATUS_SERVER_TOKEN_EXPIRATION_SECONDS,
                            "path": c.STATUS_SERVER_TOKEN_PATH,
                        }
                    },
                    {
                        "configMap": {
                            "name": tls_config_name(name),
                            "items": [
                                {"key": c.STATUS_SERVER_CA_KEY, "path": c.STATUS_SERVER_CA_KEY}
                            ],
                        }
                    },
                ]
            },
        }
        apply.upsert_volume(pod, Volume.from_wire(volume))
        for ctr in pod.containers or []:
            apply.upsert_env(ctr, envs)
            apply.upsert_volume_mount(
                ctr, VolumeMount(name=c.STATUS_SERVER_VOLUME, mount_path=mount, read_only=True)
            )

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        if info.trainer_pod_set() is None:
            return []
        return [tls_config_map(info, info.observed, ctx)]


def tls_config_map(info: Info, observed: Observed, ctx: BuildContext) -> dict[str, Any]:
    ca = ca_cert_from_secret(observed.status_server_secret, ctx.status_server_secret_name)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(info.trainjob, tls_config_name(info.name)),
        "data": {c.STATUS_SERVER_CA_KEY: ca},
    }
