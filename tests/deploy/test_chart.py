"""The Helm chart (manifests/charts/kubeflow-trainer; docs/install.md, "Installing with Helm").

One truth: ``helm template`` with default values renders the objects of ``trainer manifests``
(and, with ``runtimes.defaultEnabled``, of the runtimes overlay), object for object, but for
the differences tests/chart.py names; any other difference fails. Upstream v2.3.0's values keys
reach the objects they configure, a misspelt or mistyped value is refused naming its key, and
the chart installs, upgrades and uninstalls on the local API server.

The first tests need no helm (the chart's files, its values and their schema); the rest use
the pinned helm where it is built (``make cluster-bins``) and are skipped, saying so, where it
is not: the cluster tier (tests/cluster/test_helm.py) renders the same comparison wherever Go
is installed, so ``make test`` never leaves it out there.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # (kubernetes-validate's; no type information)
import pytest
import yaml

from tests.chart import (
    CHART,
    CONFIG_KEY,
    KEEP,
    NOT_BUILT,
    ROOT,
    Obj,
    by_key,
    differences,
    helm_binary,
    installed_runtimes,
    installer_keys,
    run_helm,
    template,
)
from trainer import __version__
from trainer.controller.config import parse_config

pytestmark = pytest.mark.slow

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
UPSTREAM_CHART = "charts/kubeflow-trainer"


def leaf_paths(value: Any, schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key path of a values map down to the keys the schema lists no keys under (labels,
    resources, security contexts: maps that are values themselves)."""
    if isinstance(value, dict) and "properties" in schema:
        return [
            p
            for k, v in value.items()
            for p in leaf_paths(v, schema["properties"].get(k, {}), f"{prefix}{k}.")
        ]
    return [prefix.rstrip(".")]


# --- the chart's files, values and schema (no helm) --------------------------------------------
def test_the_charts_version_and_app_version_are_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["name"] == "kubeflow-trainer"  # upstream's chart name
    assert chart["version"] == chart["appVersion"] == package == __version__


def test_the_chart_reads_the_crds_and_runtimes_of_manifests_base() -> None:
    # Links, not copies: the chart cannot carry other CRDs or runtimes than the kustomize tree.
    assert (CHART / "files/crds").resolve() == (ROOT / "manifests/base/crds").resolve()
    assert (CHART / "files/runtimes").resolve() == (ROOT / "manifests/base/runtimes").resolve()


def test_every_built_in_runtime_has_a_switch() -> None:
    source = (CHART / "templates/runtimes.yaml").read_text()
    switches = source.split('define "trainer.runtimeSwitches"')[1].split("{{- end }}")[0]
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in ROOT.glob("runtimes/*")]
    assert len(names) >= 12
    assert [n for n in names if f'"{n}"' not in switches] == []


def test_the_default_values_meet_the_schema_and_every_map_refuses_unknown_keys() -> None:
    jsonschema.validate(VALUES, SCHEMA)

    def walk(node: dict[str, Any], path: str) -> Iterator[str]:
        if "properties" in node and node.get("additionalProperties") is not False:
            yield path or "(top)"
        for name, child in node.get("properties", {}).items():
            yield from walk(child, f"{path}.{name}".lstrip("."))

    assert list(walk(SCHEMA, "")) == []


def test_every_values_key_is_in_the_schema_and_the_readme() -> None:
    readme = (CHART / "README.md").read_text()
    paths = leaf_paths(VALUES, SCHEMA)
    assert "runtimes.torchtuneDistributed.llama3_2_1B.enabled" in paths

    def in_schema(path: str) -> bool:
        node = SCHEMA
        for part in path.split("."):
            node = node.get("properties", {}).get(part)
            if node is None:
                return False
        return True

    assert [p for p in paths if not in_schema(p)] == []
    assert [p for p in paths if f"`{p}`" not in readme] == []


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"manager": {"replica": 3}}, "'replica'"),
        ({"manager": {"replicas": "two"}}, "replicas"),
        ({"runtimes": {"torchDistributed": {"enable": True}}}, "'enable'"),
        ({"manager": {"config": {"featureGates": {"NoSuchGate": True}}}}, "'NoSuchGate'"),
        ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
    ],
)
def test_the_schema_refuses_a_misspelt_or_mistyped_value(values: Obj, where: str) -> None:
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(values, SCHEMA)
    assert where in str(caught.value.message) or where in "/".join(map(str, caught.value.path))


# --- rendered by helm ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def helm() -> Path:
    found = helm_binary()
    if found is None:
        print(f"SKIPPED: {NOT_BUILT}")
        pytest.skip(NOT_BUILT)
    return found


def test_helm_template_with_default_values_is_trainer_manifests(helm: Path) -> None:
    objects = template(helm)
    assert differences(objects) == []
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 3 and all(c["metadata"]["annotations"][KEEP] == "keep" for c in crds)
    assert not [o for o in objects if o["kind"] == "ClusterTrainingRuntime"]


def test_runtimes_default_enabled_adds_the_runtimes_overlay(helm: Path) -> None:
    objects = template(helm, "--set", "runtimes.defaultEnabled=true")
    assert differences(objects, runtimes=True) == []
    # Through the installer's ConfigMap, not as objects of the release (Helm could not create
    # them before their CRD): tests/deploy/test_chart_lifecycle.py.
    assert not [o for o in objects if o["kind"] == "ClusterTrainingRuntime"]
    assert installer_keys() <= set(by_key(objects))


def test_the_packaged_chart_is_the_same_chart(helm: Path, tmp_path: Path) -> None:
    done = run_helm(helm, "package", str(CHART), "-d", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (archive,) = tmp_path.glob("kubeflow-trainer-*.tgz")
    assert archive.name == f"kubeflow-trainer-{__version__}.tgz"
    assert differences(template(helm, chart=archive)) == []


def test_the_comparison_catches_a_difference(helm: Path) -> None:
    changed = differences(template(helm, "--set", "manager.replicas=3"))
    assert len(changed) == 1 and "Deployment" in changed[0]
    assert differences(template(helm, "--set", "crds.enabled=false")) != []


def test_each_runtime_switch_installs_its_runtime_only(helm: Path) -> None:
    switches = {
        "runtimes.torchDistributed.enabled": "torch-distributed",
        "runtimes.deepspeedDistributed.enabled": "deepspeed-distributed",
        "runtimes.mlxDistributed.enabled": "mlx-distributed",
        "runtimes.jaxDistributed.enabled": "jax-distributed",
        "runtimes.xgboostDistributed.enabled": "xgboost-distributed",
        "runtimes.torchtuneDistributed.llama3_2_1B.enabled": "torchtune-llama3.2-1b",
        "runtimes.torchtuneDistributed.llama3_2_3B.enabled": "torchtune-llama3.2-3b",
        "runtimes.torchtuneDistributed.qwen2_5_1_5B.enabled": "torchtune-qwen2.5-1.5b",
        "dataCache.runtimes.torchDistributedWithCache.enabled": "torch-distributed-with-cache",
        "runtimes.paddleDistributed.enabled": "paddle-distributed",
        "runtimes.tensorflowDistributed.enabled": "tensorflow-distributed",
        "runtimes.torchLocalCpu.enabled": "torch-local-cpu",
    }
    args = ["-s", "templates/runtimes.yaml"]
    args += ["--set", "crds.enabled=false"]  # not shown; skips reading 2.3 MB of CRDs
    for switch, name in switches.items():
        objects = installed_runtimes(template(helm, "--set", f"{switch}=true", *args))
        assert [o["metadata"]["name"] for o in objects] == [name], switch


def test_runtime_images_run_policy_and_labels_follow_the_values(helm: Path) -> None:
    values = [
        "runtimes.defaultEnabled=true",
        "runtimes.deepspeedDistributed.image.registry=registry.example.com",
        "runtimes.deepspeedDistributed.image.tag=v2.3.0",
        "runtimes.torchtuneDistributed.image.repository=mirror/torchtune",
        "dataCache.cacheImage.registry=registry.example.com",
        "runtimes.runPolicy.ttlSecondsAfterFinished=600",
        "commonLabels.team=ml",
    ]
    args = ["-s", "templates/runtimes.yaml"]
    rendered = template(helm, *args, *(a for v in values for a in ("--set", v)))
    objects = by_key(installed_runtimes(rendered))

    def images(name: str) -> set[str]:
        jobs = objects[("ClusterTrainingRuntime", "", name)]["spec"]["template"]["spec"]
        return {
            c["image"]
            for job in jobs["replicatedJobs"]
            for c in job["template"]["spec"]["template"]["spec"]["containers"]
        }

    assert images("deepspeed-distributed") == {
        "registry.example.com/kubeflow/trainer/deepspeed-runtime:v2.3.0"
    }
    assert "ghcr.io/mirror/torchtune" in images("torchtune-llama3.2-1b")
    assert "ghcr.io/kubeflow/trainer/model-initializer" in images("torchtune-llama3.2-1b")
    assert f"registry.example.com/trainer-py-data-cache:{__version__}" in images(
        "torch-distributed-with-cache"
    )
    assert images("mlx-distributed") == {"ghcr.io/kubeflow/trainer/mlx-runtime"}
    for runtime in objects.values():
        assert runtime["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 600
        labels = runtime["metadata"]["labels"]
        assert labels["team"] == "ml"
        assert labels["trainer.kubeflow.org/webhook-validation"] == "disabled"


UPSTREAM_STYLE = """
# A values file written for upstream's chart: its keys, none of this project's own.
image:
  registry: registry.example.com
  repository: ml/trainer-py
  tag: "0.1.0-rc1"
  pullPolicy: Always
  pullSecrets:
    - name: regcred
commonLabels:
  team: ml
manager:
  replicas: 3
  selectorLabels: {tier: control}
  podAnnotations: {prometheus.io/scrape: "true"}
  labels: {owner: platform}
  nodeSelector: {node-role.kubernetes.io/control-plane: ""}
  tolerations:
    - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]
  env: [{name: HTTPS_PROXY, value: "http://proxy:3128"}]
  envFrom: [{configMapRef: {name: proxy-env}}]
  volumes: [{name: extra, emptyDir: {}}]
  volumeMounts: [{name: extra, mountPath: /extra}]
  resources:
    limits: {cpu: "2", memory: 2Gi}
  securityContext:
    allowPrivilegeEscalation: false
    runAsNonRoot: true
    capabilities: {drop: [ALL]}
    seccompProfile: {type: RuntimeDefault}
  config:
    health:
      healthProbeBindAddress: ":9081"
      readinessEndpointName: ready
      livenessEndpointName: live
    metrics: {bindAddress: ":9443", secureServing: false}
    webhook: {port: 10250, host: ""}
    leaderElection:
      leaderElect: true
      resourceName: my-trainer-lock
      resourceNamespace: ""
      leaseDuration: 30s
      renewDeadline: 20s
      retryPeriod: 5s
    controller:
      groupKindConcurrency: {trainJob: 8, trainingRuntime: 1, clusterTrainingRuntime: 1}
    certManagement:
      enable: true
      webhookServiceName: my-trainer-webhook
      webhookSecretName: my-trainer-cert
    clientConnection: {qps: 0.5, burst: 10}
    statusServer: {port: 10444, qps: 7, burst: 14}
    featureGates: {TrainJobStatus: true}
webhook:
  failurePolicy: Ignore
jobset:
  install: false
"""


def test_upstream_values_keys_reach_the_objects(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(UPSTREAM_STYLE)
    objects = by_key(template(helm, "-f", str(values)))
    ns = "kubeflow-system"
    deploy = objects[("Deployment", ns, "kubeflow-trainer-controller-manager")]
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/ml/trainer-py:0.1.0-rc1"
    assert container["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert deploy["spec"]["replicas"] == 3
    assert deploy["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/component": "controller-manager",
        "tier": "control",
    }
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["tier"] == "control" and pod_labels["owner"] == "platform"
    assert deploy["metadata"]["labels"]["owner"] == "platform"
    assert deploy["spec"]["template"]["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert pod["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane"
    assert list(pod["affinity"]) == ["nodeAffinity"]  # replaces the default anti-affinity
    assert container["env"][1:] == [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]
    assert container["envFrom"] == [{"configMapRef": {"name": "proxy-env"}}]
    assert {"name": "extra", "emptyDir": {}} in pod["volumes"]
    assert {"name": "extra", "mountPath": "/extra"} in container["volumeMounts"]
    # Helm merges a values file's map into the chart's: the requests stay.
    assert container["resources"] == {
        "limits": {"cpu": "2", "memory": "2Gi"},
        "requests": {"cpu": "100m", "memory": "256Mi"},
    }
    assert container["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # The Configuration the controller loads, and the ports, probes, Service and RBAC it needs.
    config = objects[("ConfigMap", ns, "kubeflow-trainer-config")]["data"][CONFIG_KEY]
    cfg = parse_config(config, CONFIG_KEY)
    assert cfg.webhook.port == 10250 and cfg.metrics.bind_address == ":9443"
    assert cfg.metrics.secure_serving is False
    assert cfg.health.health_probe_bind_address == ":9081"
    assert cfg.leader_election is not None
    assert cfg.leader_election.resource_name == "my-trainer-lock"
    assert cfg.leader_election.lease_duration == 30.0  # seconds
    assert cfg.controller.group_kind_concurrency["TrainJob.trainer.kubeflow.org"] == 8
    assert cfg.cert_management.webhook_service_name == "my-trainer-webhook"
    assert cfg.cert_management.webhook_secret_name == "my-trainer-cert"
    assert cfg.client_connection.qps == 0.5 and cfg.client_connection.burst == 10
    assert (cfg.status_server.port, cfg.status_server.qps) == (10444, 7)
    assert cfg.feature_gates == {"TrainJobStatus": True}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": 10250, "metrics": 9443, "health": 9081, "status-server": 10444}
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/live"
    service = objects[("Service", ns, "my-trainer-webhook")]
    assert service["spec"]["selector"]["tier"] == "control"
    served = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert served["status-server"] == (10444, "status-server")  # the URL pods are given
    role = objects[("Role", ns, "kubeflow-trainer-controller-manager")]
    named = {
        r["resources"][0]: r.get("resourceNames") for r in role["rules"] if "resourceNames" in r
    }
    assert named == {"leases": ["my-trainer-lock"], "secrets": ["my-trainer-cert"]}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (config_object,) = [o for k, o in objects.items() if k[0] == kind]
        for hook in config_object["webhooks"]:
            assert hook["failurePolicy"] == "Ignore"
            assert hook["clientConfig"]["service"]["name"] == "my-trainer-webhook"
    for obj in objects.values():
        assert obj["metadata"]["labels"]["team"] == "ml", obj["kind"]
    assert ("PodDisruptionBudget", ns, "kubeflow-trainer-controller-manager") in objects


def test_one_replica_has_no_disruption_budget_and_own_certificates_are_mounted(
    helm: Path,
) -> None:
    objects = template(
        helm, "--set", "manager.replicas=1", "--set", "manager.config.certManagement.enable=false"
    )
    assert not [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    (deploy,) = [o for o in objects if o["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    assert {"name": "webhook-cert", "secret": {"secretName": "kubeflow-trainer-webhook-cert"}} in (
        pod["volumes"]
    )
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/tmp/k8s-webhook-server/serving-certs"]["readOnly"] is True


def test_upstreams_own_values_file_renders_unchanged(helm: Path) -> None:
    """Upstream v2.3.0's chart's values.yaml, from the module the bed pins
    (hack/testbed/upstream), where Go has downloaded it: every key is accepted."""
    try:
        source = _upstream_chart()
    except Exception as exc:  # any reason the module is not there
        pytest.skip(f"upstream v2.3.0's module is not in the Go module cache: {exc}")
    objects = template(helm, "-f", str(source / "values.yaml"))
    (deploy,) = [o for o in objects if o["kind"] == "Deployment"]
    image = deploy["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"ghcr.io/kubeflow/trainer/trainer-controller-manager:{__version__}"


def _upstream_chart() -> Path:
    import bins  # noqa: PLC0415 - tests.chart put hack/testbed on the path

    path = bins.source_dir("github.com/kubeflow/trainer/v2", module="upstream") / UPSTREAM_CHART
    if not (path / "values.yaml").is_file():
        raise FileNotFoundError(path / "values.yaml")
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "manager.replica=3"], "at '/manager': additional properties 'replica'"),
        (["--set", "manager.replicas=two"], "at '/manager/replicas': got string, want integer"),
        (
            ["--set", "runtimes.torchDistributed.enable=true"],
            "at '/runtimes/torchDistributed': additional properties 'enable'",
        ),
        (["--set", "manager.config.webhook.port=70000"], "at '/manager/config/webhook/port'"),
        (["--set", "image.pullPolicy=Sometimes"], "at '/image/pullPolicy'"),
        (["--set", "fullnameOverride=trainer"], "fullnameOverride: must be empty"),
        (
            ["--set", "manager.config.leaderElection.resourceNamespace=other"],
            "manager.config.leaderElection.resourceNamespace",
        ),
    ],
)
def test_helm_refuses_a_bad_value_naming_its_key(helm: Path, args: list[str], message: str) -> None:
    done = run_helm(helm, "template", "kubeflow-trainer", str(CHART), *args)
    assert done.returncode == 1 and done.stdout == ""
    assert message in done.stderr, done.stderr


def test_helm_lint_passes_with_defaults_and_with_every_runtime(helm: Path) -> None:
    for args in ([], ["--set", "runtimes.defaultEnabled=true"]):
        done = run_helm(helm, "lint", "--strict", str(CHART), *args)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


def notes(helm: Path, *args: str) -> str:
    """The install's notes as rendered for these values (``helm template`` leaves NOTES.txt
    out: a copy of the chart renders them into a ConfigMap instead)."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "kubeflow-trainer"
        shutil.copytree(CHART, copy, symlinks=True)
        for link in ("crds", "runtimes"):  # the copy's relative links would point nowhere
            (copy / "files" / link).unlink()
            (copy / "files" / link).symlink_to((CHART / "files" / link).resolve())
        (copy / "templates/notes-probe.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
            'data:\n  notes: {{ include "trainer.notes" . | toJson }}\n'
        )
        (rendered,) = template(helm, "-s", "templates/notes-probe.yaml", *args, chart=copy)
    text: str = rendered["data"]["notes"]
    return text


def test_the_notes_name_the_runtimes_installed_and_what_is_ignored(helm: Path) -> None:
    some = notes(helm, "--set", "runtimes.torchDistributed.enabled=true")
    assert (
        "Built-in ClusterTrainingRuntimes, applied by the hook Job "
        "kubeflow-trainer-runtimes-installer-install: torch-distributed." in some
    )
    assert "WARNING" not in some
    ignored = notes(
        helm, "--set", "jobset.install=true", "--set", "dataCache.enabled=true",
        "--set", "runtimes.installer.image.repository=mirror/alpine",
        # Honoured, so not named: where the installer's pods run.
        "--set", "runtimes.installer.nodeSelector.pool=cpu",
    )  # fmt: skip
    assert re.findall(r"WARNING: (\S+) is ignored", ignored) == [
        "jobset.install=true",
        "dataCache.lws.install=true",
        "runtimes.installer.image",
    ]
    assert "WARNING" not in notes(helm)


def test_the_installer_jobs_follow_the_installer_values(helm: Path) -> None:
    values = [
        "runtimes.torchDistributed.enabled=true",
        "runtimes.installer.nodeSelector.pool=cpu",
        "runtimes.installer.tolerations[0].key=dedicated",
        "runtimes.installer.tolerations[0].operator=Exists",
        "runtimes.installer.resources.limits.memory=256Mi",
        "runtimes.installer.imagePullSecrets[0].name=installer-cred",
        "image.pullSecrets[0].name=regcred",
        "image.registry=registry.example.com",
    ]
    args = ["-s", "templates/runtimes-installer.yaml"]
    objects = by_key(template(helm, *args, *(a for v in values for a in ("--set", v))))
    ns = "kubeflow-system"
    install = objects[("Job", ns, "kubeflow-trainer-runtimes-installer-install")]
    remove = objects[("Job", ns, "kubeflow-trainer-runtimes-installer-uninstall")]
    assert install["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    assert remove["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    for job in (install, remove):
        pod = job["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "kubeflow-trainer-runtimes-installer"
        assert pod["nodeSelector"] == {"pool": "cpu"}
        assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "installer-cred"}]
        (container,) = pod["containers"]
        assert container["image"] == f"registry.example.com/trainer-py:{__version__}"
        assert container["resources"] == {"limits": {"memory": "256Mi"}}
        assert container["command"][:3] == ["trainer", "runtimes", container["command"][2]]
    assert install["spec"]["template"]["spec"]["containers"][0]["command"][2:] == [
        "install", "--prune", "--file", "/etc/kubeflow-trainer/runtimes/runtimes.yaml"
    ]  # fmt: skip
    rules = objects[("ClusterRole", "", "kubeflow-trainer-runtimes-installer")]["rules"]
    assert rules == [
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["clustertrainingruntimes"],
            "verbs": ["create", "delete", "get", "list", "patch"],
        }
    ]
    # No runtime wanted on a first install: no installer at all.
    assert not installer_keys() & set(by_key(template(helm, "--set", "crds.enabled=false")))
