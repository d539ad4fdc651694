"""The TrainJobStatus plugin (docs/status-server.md): registered only with the gate; env, projected
volume and mount on the trainer containers only; the tls-config ConfigMap and its errors."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests import builders as b
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.plugins.registry import default_framework, framework_for, render
from trainer.plugins.trainjobstatus import token_audience
from trainer.runtime.info import BuildContext, BuildError, Observed

CA = b"-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n"
SECRET = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "kubeflow-trainer-webhook-cert", "namespace": "kubeflow-system"},
    "data": {"ca.crt": base64.b64encode(CA).decode(), "tls.crt": "eA==", "tls.key": "eA=="},
}
ON = {"TrainJobStatus": True}
AUDIENCE = "trainer.kubeflow.org/v1alpha1/namespaces/ns1/trainjobs/job/status"
NO_CA = "failed to find status server ca.crt in tls secret"


def runtime() -> ClusterTrainingRuntime:
    def job(name: str, ancestor: str, containers: list[str]) -> dict[str, Any]:
        return b.replicated_job(
            name,
            ancestor=ancestor,
            containers=[b.container(n) for n in containers],
            init_containers=[b.container("setup", "busybox")],
        )

    return b.cluster_runtime_model(
        "rt",
        replicated_jobs=[
            job("dataset-initializer", "dataset-initializer", ["dataset"]),
            job("node", "trainer", ["node", "sidecar"]),
        ],
    )


def trainjob() -> TrainJob:
    return b.trainjob_model(namespace="ns1", uid="u-1", runtime="rt")


def build(ctx: BuildContext, secret: Any = SECRET) -> list[dict[str, Any]]:
    return render(trainjob(), runtime(), observed=Observed(status_server_secret=secret), ctx=ctx)


def pod_spec(objects: list[dict[str, Any]], job: str) -> dict[str, Any]:
    jobset = next(o for o in objects if o["kind"] == "JobSet")
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == job)
    spec: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return spec


def test_registered_only_when_the_gate_is_on() -> None:
    assert "TrainJobStatus" not in default_framework().phases()["EnforcePodSpec"]
    assert "TrainJobStatus" not in framework_for(BuildContext()).phases()["Build"]
    off = framework_for(BuildContext(feature_gates={"TrainJobStatus": False})).phases()
    assert "TrainJobStatus" not in off["Build"]
    on = framework_for(BuildContext(feature_gates=ON)).phases()
    assert on["EnforcePodSpec"] == ["DataCache", "TrainJobStatus"]
    assert on["Build"][-1] == "JobSet" and "TrainJobStatus" in on["Build"]


def test_gate_off_adds_nothing_and_needs_no_secret() -> None:
    objects = build(BuildContext(), secret=None)
    assert not [o for o in objects if o["metadata"]["name"].endswith("-tls-config")]
    assert "volumes" not in pod_spec(objects, "node")


def test_trainer_containers_get_env_volume_and_mount() -> None:
    objects = build(BuildContext(feature_gates=ON, status_server_url="https://127.0.0.1:9/"))
    spec = pod_spec(objects, "node")
    url = (
        "https://127.0.0.1:9/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns1/trainjobs/job/status"
    )
    for ctr in spec["containers"]:
        env = {e["name"]: e["value"] for e in ctr["env"]}
        assert env == {
            "KUBEFLOW_TRAINER_SERVER_URL": url,
            "KUBEFLOW_TRAINER_SERVER_CA_CERT": "/var/run/secrets/kubeflow/trainer/ca.crt",
            "KUBEFLOW_TRAINER_SERVER_TOKEN": "/var/run/secrets/kubeflow/trainer/token",
        }
        assert ctr["volumeMounts"] == [
            {
                "name": "kubeflow-trainer-token",
                "mountPath": "/var/run/secrets/kubeflow/trainer",
                "readOnly": True,
            }
        ]
    assert "env" not in spec["initContainers"][0]
    assert "volumeMounts" not in spec["initContainers"][0]
    (volume,) = spec["volumes"]
    assert volume == {
        "name": "kubeflow-trainer-token",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": AUDIENCE,
                        "expirationSeconds": 3600,
                        "path": "token",
                    }
                },
                {
                    "configMap": {
                        "name": "job-tls-config",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
            ]
        },
    }
    # The initializer step is not the trainer: untouched.
    initializer = pod_spec(objects, "dataset-initializer")
    assert "volumes" not in initializer
    assert "env" not in initializer["containers"][0]


def test_default_url_is_the_webhook_service() -> None:
    spec = pod_spec(build(BuildContext(feature_gates=ON)), "node")
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
        "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns1/trainjobs/job/status"
    )


def test_tls_config_map_copies_ca_and_is_owned() -> None:
    objects = build(BuildContext(feature_gates=ON))
    names = [o["metadata"]["name"] for o in objects]
    assert names.index("job-tls-config") < names.index("job")  # before the JobSet
    cm = next(o for o in objects if o["metadata"]["name"] == "job-tls-config")
    assert cm["data"] == {"ca.crt": CA.decode()}
    assert cm["metadata"]["namespace"] == "ns1"
    (ref,) = cm["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "TrainJob",
        "job",
        "u-1",
        True,
    )


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        (
            None,
            'failed to look up status server tls secret: secrets "kubeflow-trainer-webhook-cert"'
            " not found",
        ),
        ({**SECRET, "data": {"tls.crt": "eA=="}}, NO_CA),
        ({**SECRET, "data": {"ca.crt": ""}}, NO_CA),
        ({**SECRET, "data": {"ca.crt": "%%%"}}, "ca.crt is not valid base64"),
    ],
)
def test_missing_secret_or_ca_is_a_build_error(secret: Any, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        build(BuildContext(feature_gates=ON), secret=secret)


def test_audience_names_the_status_endpoint() -> None:
    assert token_audience("ns1", "job") == AUDIENCE
