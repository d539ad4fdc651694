"""The install under ``manifests/`` and ``trainer manifests``: generated from the same templates,
valid for the minimum supported Kubernetes version, consistent with the controller's real
flags, ports and configuration, and accepted by an API server."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml
from typer.testing import CliRunner

from trainer.api.crds import schema_for_kind
from trainer.cli.main import app
from trainer.controller.config import parse_config
from trainer.deploy import generate, render
from trainer.deploy.render import install_objects, runtime_objects
from trainer.deploy.values import Values, load_values
from trainer.local.apiserver import APIServer
from trainer.machinery.openapi.validate import check

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MIN_KUBERNETES = render.MIN_KUBERNETES + ".0"
"""The oldest Kubernetes this install supports (docs/install.md): every built-in object must
validate against its schemas."""
OVERLAYS = ("standalone", "runtimes", "kueue")
CUSTOM_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime", "TrainJob")

Obj = dict[str, Any]


def kustomize(overlay: str) -> list[Obj]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "manifests" / "overlays" / overlay)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d is not None]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    return {overlay: kustomize(overlay) for overlay in OVERLAYS}


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    matches = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]


# --- generated and in sync -------------------------------------------------------------------
def test_the_kustomize_tree_is_what_the_templates_generate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert generate.main(["--root", str(ROOT), "--check"]) == 0, capsys.readouterr().out


def test_check_reports_a_runtime_missing_from_the_runtimes_base(tmp_path: Path) -> None:
    (tmp_path / "runtimes").mkdir()
    (tmp_path / "runtimes" / "new.yaml").write_text("kind: ClusterTrainingRuntime\n")
    assert generate.main(["--root", str(tmp_path), "--check"]) == 1
    assert generate.main(["--root", str(tmp_path)]) == 0
    base = tmp_path / "manifests/base/runtimes"
    assert (base / "new.yaml").read_text().endswith("kind: ClusterTrainingRuntime\n")
    assert yaml.safe_load((base / "kustomization.yaml").read_text())["resources"] == ["new.yaml"]
    (tmp_path / "runtimes" / "new.yaml").unlink()
    assert generate.main(["--root", str(tmp_path), "--check"]) == 1  # a stale copy is left
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert not (base / "new.yaml").exists()


def test_trainer_manifests_equals_the_standalone_overlay(rendered: dict[str, list[Obj]]) -> None:
    result = CliRunner().invoke(app, ["manifests"])
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load_all(result.stdout)) == rendered["standalone"]
    assert install_objects(Values()) == rendered["standalone"]


def test_trainer_manifests_runtimes_equals_the_runtimes_overlay(
    rendered: dict[str, list[Obj]],
) -> None:
    result = CliRunner().invoke(app, ["manifests", "--runtimes"])
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load_all(result.stdout)) == rendered["runtimes"] == runtime_objects()
    names = sorted(o["metadata"]["name"] for o in rendered["runtimes"])
    files = sorted(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in ROOT.glob("runtimes/*.yaml")
    )
    assert names == files
    for runtime in rendered["runtimes"]:
        assert (
            runtime["metadata"]["labels"]["trainer.kubeflow.org/webhook-validation"] == "disabled"
        )


def test_the_crds_are_the_generated_ones(rendered: dict[str, list[Obj]]) -> None:
    crds = [o for o in rendered["standalone"] if o["kind"] == "CustomResourceDefinition"]
    files = sorted((ROOT / "manifests/base/crds").glob("trainer.kubeflow.org_*.yaml"))
    assert crds == [yaml.safe_load(p.read_text()) for p in files]


# --- schemas -------------------------------------------------------------------------------
def test_every_object_validates_against_the_minimum_kubernetes_and_our_crds(
    rendered: dict[str, list[Obj]],
) -> None:
    checked = 0
    for overlay, objects in rendered.items():
        for obj in objects:
            where = f"{overlay}: {obj['kind']} {obj['metadata']['name']}"
            if obj["kind"] in CUSTOM_KINDS:
                unknown: list[str] = []
                _, errors = check(schema_for_kind(obj["kind"]), obj, unknown_fields=unknown)
                assert not errors, f"{where}: {errors}"
                assert not unknown, f"{where}: fields unknown to the CRD: {unknown}"
            else:
                try:
                    kubernetes_validate.validate(obj, MIN_KUBERNETES, strict=True)
                except kubernetes_validate.ValidationError as exc:
                    pytest.fail(f"{where}: {exc.message} at {list(exc.path)}")
            checked += 1
    assert checked == sum(len(v) for v in rendered.values()) > 30


def test_the_schema_check_catches_a_bad_deployment() -> None:
    deployment = find(install_objects(Values()), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, MIN_KUBERNETES, strict=True)


# --- the Deployment matches the controller ------------------------------------------------
def test_deployment_is_hardened_and_probed(rendered: dict[str, list[Obj]]) -> None:
    pod = find(rendered["standalone"], "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert set(container["resources"]) == {"requests", "limits"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "webhook": 9443,
        "metrics": 8443,
        "health": 8081,
        "status-server": 10443,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_deployment_args_are_real_controller_flags_and_the_config_agrees(
    rendered: dict[str, list[Obj]],
) -> None:
    objects = rendered["standalone"]
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = typer.main.get_command(app)
    controller = command.commands["controller"]  # type: ignore[attr-defined]
    ctx = controller.make_context("controller", list(container["args"]))  # parses, runs nothing
    config_path = Path(ctx.params["config"])
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = next(v for v in pod["volumes"] if v["name"] == mounts[str(config_path.parent)])
    config_map = find(objects, "ConfigMap", volume["configMap"]["name"])
    cfg = parse_config(config_map["data"][config_path.name], config_path.name)
    assert cfg.leader_elect and cfg.leader_election is not None
    assert cfg.leader_election.resource_name == "trainer.kubeflow.org"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert cfg.webhook.port == ports["webhook"]
    assert cfg.metrics.bind_address == f":{ports['metrics']}"
    assert cfg.health.health_probe_bind_address == f":{ports['health']}"
    assert cfg.status_server.port == ports["status-server"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/" + cfg.health.liveness_endpoint_name
    assert (
        container["readinessProbe"]["httpGet"]["path"] == "/" + cfg.health.readiness_endpoint_name
    )
    # The webhook Service and certificate names the controller uses are the installed ones.
    service = find(objects, "Service", cfg.cert_management.webhook_service_name)
    targets = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert targets["webhook"] == (443, "webhook")
    # Training pods are given https://<Service>.<namespace>.svc:<statusServer.port>.
    assert targets["status-server"] == (cfg.status_server.port, "status-server")
    # The certificate directory is writable despite the read-only root filesystem.
    assert "/tmp" in mounts


def test_webhook_configurations_match_the_webhook_server(rendered: dict[str, list[Obj]]) -> None:
    from webhooks.app import create_app  # noqa: PLC0415

    paths = {getattr(r, "path", "") for r in create_app(None).routes}  # type: ignore[arg-type]
    objects = rendered["standalone"]
    validating = find(objects, "ValidatingWebhookConfiguration", "validator.trainer.kubeflow.org")
    mutating = find(objects, "MutatingWebhookConfiguration", "defaulter.trainer.kubeflow.org")
    hooks = [*validating["webhooks"], *mutating["webhooks"]]
    assert len(hooks) == 4
    for hook in hooks:
        service = hook["clientConfig"]["service"]
        assert service["path"] in paths
        assert (service["name"], service["namespace"], service["port"]) == (
            "kubeflow-trainer-controller-manager",
            "kubeflow-system",
            443,
        )
        assert hook["failurePolicy"] == "Fail"
        assert 1 <= hook["timeoutSeconds"] <= 30
        runtime = "runtime" in hook["name"]
        assert ("objectSelector" in hook) == runtime, hook["name"]


def test_pdb_only_with_two_replicas() -> None:
    assert [o for o in install_objects(Values()) if o["kind"] == "PodDisruptionBudget"]
    single = install_objects(load_values(overrides={"replicas": 1}))
    assert not [o for o in single if o["kind"] == "PodDisruptionBudget"]


# --- trainer manifests parameters ---------------------------------------------------------------
def test_flags_and_values_reach_every_object(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "image: registry.example/trainer:v9\nreplicas: 3\n"
        "webhook: {failurePolicy: Ignore, timeoutSeconds: 5}\n"
        "featureGates: {TrainJobStatus: true}\n"
    )
    result = CliRunner().invoke(app, ["manifests", "-f", str(values), "--namespace", "ml-ops"])
    assert result.exit_code == 0, result.output
    objects = list(yaml.safe_load_all(result.stdout))
    for obj in objects:
        if obj["kind"] not in ("Namespace", "CustomResourceDefinition") and obj["metadata"].get(
            "namespace"
        ):
            assert obj["metadata"]["namespace"] == "ml-ops", obj["kind"]
    deployment = find(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        == "registry.example/trainer:v9"
    )
    binding = find(objects, "ClusterRoleBinding", "kubeflow-trainer-controller-manager")
    assert binding["subjects"][0]["namespace"] == "ml-ops"
    config = parse_config(
        find(objects, "ConfigMap", render.CONFIG_MAP)["data"]["controller_manager_config.yaml"]
    )
    assert config.feature_gates == {"TrainJobStatus": True}
    for hook in find(objects, "ValidatingWebhookConfiguration")["webhooks"]:
        assert hook["clientConfig"]["service"]["namespace"] == "ml-ops"
        assert (hook["failurePolicy"], hook["timeoutSeconds"]) == ("Ignore", 5)


@pytest.mark.parametrize(
    ("text", "args", "expected"),
    [
        ("replicas: 2\nreplica: 3\n", [], "unknown key 'replica'; accepted keys: featureGates"),
        (
            "webhook: {failure: Fail}\n",
            [],
            "unknown key 'webhook.failure'; accepted keys under webhook: failurePolicy, "
            "timeoutSeconds",
        ),
        ("resources: {limits: {gpu: '1'}}\n", [], "resources.limits: unknown resource 'gpu'"),
        ("featureGates: {Nope: true}\n", [], "featureGates: unknown feature gate 'Nope'"),
        ("- a\n", [], "must be a YAML map"),
        ("{}\n", ["--namespace", "Bad"], "--namespace: 'Bad' is not a namespace name"),
        ("{}\n", ["--replicas", "0"], "--replicas: Input should be greater than or equal to 1"),
    ],
)
def test_bad_values_exit_2_naming_the_key(
    tmp_path: Path, text: str, args: list[str], expected: str
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(text)
    result = CliRunner().invoke(app, ["manifests", "-f", str(values), *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert expected in result.stderr, result.stderr


# --- applied to an API server -----------------------------------------------------------------
def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def api_server() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    server = APIServer()
    loop.run_until_complete(server.start())
    import threading  # noqa: PLC0415

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    with tempfile.NamedTemporaryFile(suffix=".kubeconfig") as kubeconfig:
        server.write_kubeconfig(kubeconfig.name)
        try:
            yield kubeconfig.name
        finally:
            asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            loop.close()


def test_standalone_then_runtimes_apply_to_an_api_server(api_server: str) -> None:
    for overlay in ("standalone", "runtimes"):
        path = str(ROOT / "manifests" / "overlays" / overlay)
        result = kubectl(api_server, "apply", "--server-side", "-k", path)
        assert result.returncode == 0, result.stderr
    names = kubectl(api_server, "get", "clustertrainingruntimes", "-o", "name").stdout.split()
    assert len(names) == len(list(ROOT.glob("runtimes/*.yaml")))
    got = kubectl(
        api_server,
        "get",
        "-n",
        "kubeflow-system",
        "deploy,svc,cm,sa,role,rolebinding,pdb",
        "-o",
        "name",
    )
    assert got.returncode == 0, got.stderr
    assert "deployment.apps/kubeflow-trainer-controller-manager" in got.stdout.split()
    # Applying again changes nothing and still succeeds (an upgrade with the same manifests).
    again = kubectl(
        api_server, "apply", "--server-side", "-k", str(ROOT / "manifests/overlays/standalone")
    )
    assert again.returncode == 0, again.stderr


def test_the_sdk_finds_the_public_config_map_any_authenticated_user_may_read(
    api_server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Kubeflow SDK's TrainerClient reads ``kubeflow_trainer_version`` from ConfigMap
    ``kubeflow-trainer-public`` as a user with no role of its own; that user may read nothing
    else of the install namespace."""
    pytest.importorskip("kubeflow", reason="needs the Kubeflow SDK (installed by .[dev])")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kubeflow 0.5's pydantic models
        from kubeflow.common.types import KubernetesBackendConfig  # noqa: PLC0415
        from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend  # noqa: PLC0415

    applied = kubectl(
        api_server, "apply", "--server-side", "-k", str(ROOT / "manifests/overlays/standalone")
    )
    assert applied.returncode == 0, applied.stderr
    account = kubectl(api_server, "create", "serviceaccount", "reader", "-n", "default")
    assert account.returncode == 0, account.stderr
    token = kubectl(api_server, "create", "token", "reader", "-n", "default")
    assert token.returncode == 0, token.stderr
    config = yaml.safe_load(Path(api_server).read_text())
    for user in config["users"]:
        user["user"] = {"token": token.stdout.strip()}
    reader = tmp_path / "reader.kubeconfig"
    reader.write_text(yaml.safe_dump(config))

    caplog.set_level(logging.WARNING)
    KubernetesBackend(KubernetesBackendConfig(config_file=str(reader), namespace="default"))
    assert not [r for r in caplog.records if "version info is not available" in r.getMessage()]

    value = kubectl(
        str(reader),
        "get",
        "configmap",
        "kubeflow-trainer-public",
        "-n",
        "kubeflow-system",
        "-o",
        "jsonpath={.data.kubeflow_trainer_version}",
    )
    assert (value.returncode, value.stdout) == (0, "2.3.0"), value.stderr
    other = kubectl(
        str(reader), "get", "configmap", "-n", "kubeflow-system", "-o", "name"
    )  # a list is not that one ConfigMap
    assert other.returncode != 0 and "forbidden" in other.stderr.lower(), other.stderr
