"""The Helm chart on the bed (docs/install.md, "Installing with Helm"; docs/testbed.md).

The bed already runs our product, installed from the kustomize overlays, in kubeflow-system, and
the chart's objects have the same names (one truth: tests/deploy/test_chart.py), so a second
install beside it cannot exist. The test therefore moves the bed's install to Helm as an admin
switching from kustomize would (docs/install.md, "Switching from kustomize to Helm"): `helm
install --take-ownership` into kubeflow-system with `--create-namespace --set
runtimes.defaultEnabled=true`, whose post-install hook Job (run on the session's node agent,
tests/cluster/nodeagent.py) applies the built-in runtimes. TrainJobs admitted right after the
takeover run on while the controller is switched to one run from the release's own Deployment,
ServiceAccount and RBAC (as every controller of the bed is run: hack/testbed/addons.py) and then
rolled by `helm upgrade` to a changed value; upstream's example runs to Complete on KWOK nodes;
`helm uninstall` (its pre-delete hook deleting the runtimes) leaves nothing of ours but the CRDs
(kept by their resource policy) and the two objects the controller writes itself. The tier runs
this file last (tests/cluster/conftest.py): the kustomize install is put back only when a later
test uses the bed. Last, the CRDs deleted, one `helm install` as on a new cluster, which the
local plane also does (tests/deploy/test_chart_lifecycle.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import addons
import bed as beds
import bins
import pytest
import trainer_install
import yaml

from tests.chart import CHART, LOADER, differences, key, run_helm, template
from tests.cluster.conftest import ROOT
from tests.cluster.kwokpods import pod_annotations, trainjob
from tests.cluster.nodeagent import MARK, NODE, Agent
from trainer.deploy.installer import FIELD_MANAGER

NS = trainer_install.NAMESPACE
RELEASE = "kubeflow-trainer"
PENDING = "testbed.kubeflow.org/no-kubelet"
INSTALLER = "kubeflow-trainer-runtimes-installer"
INSTALLED = "trainer.kubeflow.org/managed-by=runtimes-installer"
# The installer's hook Jobs run on the node agent: on a KWOK node their pods would only
# pretend to run.
ON_THE_AGENT = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},
    "tolerations": [{"key": MARK, "operator": "Exists", "effect": "NoSchedule"}],
}
UPSTREAM_EXAMPLE = ROOT.parent / "shared/upstream-release/examples/yaml__01-multi-node.yaml"
# What the controller writes at run time, not Helm: its certificate Secret and its Lease.
WRITTEN_BY_THE_CONTROLLER = {
    ("Secret", "kubeflow-trainer-webhook-cert"),
    ("Lease", "trainer.kubeflow.org"),
}


def helm_path() -> Path:
    if bins.go_binary() is None:
        pytest.skip("Go is not installed: the cluster tier builds helm and the rest with it")
    return bins.programs()["helm"]


def test_helm_template_is_trainer_manifests_and_the_runtimes_overlay() -> None:
    """The render comparison of tests/deploy/test_chart.py, wherever Go is (the cluster tier
    builds helm first, so `make test` runs it even where tests/deploy found no helm yet)."""
    helm = helm_path()
    assert differences(template(helm)) == []
    on = ["--set", "runtimes.defaultEnabled=true"]
    assert differences(template(helm, *on), runtimes=True) == []


def helm_on(bed: beds.Bed, *args: str) -> str:
    started = time.monotonic()
    done = run_helm(helm_path(), *args, kubeconfig=bed.kubeconfig, timeout=180)
    print(f"helm {args[0]}: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"
    return done.stdout


def release_objects(bed: beds.Bed) -> list[dict[str, Any]]:
    manifest = helm_on(bed, "get", "manifest", RELEASE, "-n", NS)
    return [d for d in yaml.load_all(manifest, Loader=LOADER) if d]


def stop(bed: beds.Bed, name: str) -> None:
    """A controller replica gone, as its pod would go: out of the Service, then stopped."""
    proc = bed.procs.pop(name, None)
    if proc is not None:
        proc.stop()
    service = f"{trainer_install.SERVICE}-{name}"
    bed.kubectl("delete", "endpointslice", service, "-n", NS, "--ignore-not-found")


def bed_replicas(bed: beds.Bed) -> list[str]:
    return [n for n in bed.procs if n == "trainer" or n.startswith("trainer-")]


TRAINJOBS = ("multi-node-example", "across-upgrade")


def jobset_uid(bed: beds.Bed, namespace: str, name: str, timeout: float = 30) -> str:
    """The uid of the TrainJob's JobSet, once the controller has made it."""
    deadline = time.monotonic() + timeout
    while True:
        got = bed.kubectl("get", "jobset", name, "-n", namespace, "-o", "json", check=False)
        if got.returncode == 0:
            return str(yaml.safe_load(got.stdout)["metadata"]["uid"])
        assert time.monotonic() < deadline, f"no JobSet for TrainJob {namespace}/{name}"
        time.sleep(0.2)


def wait_complete(bed: beds.Bed, namespace: str, name: str, timeout: int = 60) -> None:
    bed.kubectl(
        "wait", f"trainjob/{name}", "-n", namespace, "--for=condition=Complete",
        f"--timeout={timeout}s", timeout=timeout + 10,
    )  # fmt: skip


def example(namespace: str) -> dict[str, Any]:
    """Upstream's multi-node example (where ../shared holds upstream's release; else one of
    its shape: torch-distributed, three nodes), with the bed's KWOK timing added as a runtime
    patch, as for every TrainJob of the tier (tests/cluster/kwokpods.py): its pods run 2 s,
    not KWOK's default random 2 to 10 s."""
    doc = trainjob("multi-node-example", num_nodes=3, annotations=pod_annotations(run_for="2s"))
    if UPSTREAM_EXAMPLE.is_file():
        upstream: dict[str, Any] = yaml.safe_load(UPSTREAM_EXAMPLE.read_text())
        upstream["spec"]["runtimePatches"] = doc["spec"]["runtimePatches"]
        doc = upstream
    doc["metadata"]["namespace"] = namespace
    return doc


@pytest.fixture
def helm_install(bed: beds.Bed, request: pytest.FixtureRequest) -> Iterator[beds.Bed]:
    """The bed, whose Kubeflow Trainer the test moves to a Helm release and uninstalls. The
    kustomize install and its controller are put back afterwards (about 7 s), whatever the test
    did, when a later test of the session uses the bed: the tier runs this file last
    (tests/cluster/conftest.py), so there none does."""
    try:
        yield bed
    finally:
        for name in bed_replicas(bed):
            stop(bed, name)
        run_helm(helm_path(), "uninstall", RELEASE, "-n", NS, kubeconfig=bed.kubeconfig)
        items = request.session.items
        later = items[items.index(request.node) + 1 :]
        if any("bed" in getattr(item, "fixturenames", ()) for item in later):
            trainer_install.install_trainer(bed)


def installed_runtimes(bed: beds.Bed) -> set[str]:
    """The ClusterTrainingRuntimes the chart's installer labelled."""
    out = bed.kubectl("get", "clustertrainingruntimes", "-l", INSTALLED, "-o", "json").stdout
    return {o["metadata"]["name"] for o in yaml.safe_load(out)["items"]}


def installer_runs(bed: beds.Bed, step: str) -> int:
    """How many pods of installer Job ``step`` the node agent started (its kubelet's Started
    events stay after Helm deletes the succeeded Job and its pods)."""
    events = bed.get_json("events", "-n", NS, "--field-selector", "reason=Started")["items"]
    return sum(
        1
        for e in events
        if e["involvedObject"]["name"].startswith(f"{INSTALLER}-{step}-")
        and e["source"] == {"component": "kubelet", "host": NODE}
    )


class InstallerPods:
    """A watch of the installer's pods from the test's start: the status each had, so that a
    failed attempt's termination message (its last log lines) is known after Helm deleted the
    Job and its pods."""

    def __init__(self, bed: beds.Bed, path: Path) -> None:
        self.path = path
        self.bed = bed
        self.proc = subprocess.Popen(
            ["kubectl", f"--kubeconfig={bed.kubeconfig}", "get", "pods", "-n", NS, "-l",
             "app.kubernetes.io/component=runtimes-installer", "--watch", "-o", "json"],
            stdout=path.open("w"), stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def failures(self) -> list[str]:
        text, seen, decoder, at = self.path.read_text(), [], json.JSONDecoder(), 0
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at >= len(text):
                break
            try:
                pod, at = decoder.raw_decode(text, at)
            except json.JSONDecodeError:  # the watch's last object, half written
                break
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                ended = (status.get("state") or {}).get("terminated") or {}
                line = f"{pod['metadata']['name']}: exit {ended.get('exitCode')}: "
                if ended.get("exitCode") and line + str(ended.get("message")) not in seen:
                    seen.append(line + str(ended.get("message")))
        return seen

    def explain(self) -> str:
        """The installer's events and every failed attempt's message, for an assertion."""
        events = self.bed.get_json("events", "-n", NS)["items"]
        return "\n".join(
            [
                f"{e['involvedObject']['name']}: {e['reason']}: {e.get('message', '')}"
                for e in events
                if e["involvedObject"]["name"].startswith(INSTALLER)
            ]
            + self.failures()
        )

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def pods(bed: beds.Bed, tmp_path: Path) -> Iterator[InstallerPods]:
    watch = InstallerPods(bed, tmp_path / "installer-pods.json")
    try:
        yield watch
    finally:
        watch.stop()


def applied_by_the_installer(bed: beds.Bed, name: str) -> bool:
    meta = bed.get_json("clustertrainingruntime", name, "--show-managed-fields")["metadata"]
    return any(f.get("manager") == FIELD_MANAGER for f in meta.get("managedFields") or [])


def test_install_upgrade_and_uninstall_with_helm(
    helm_install: beds.Bed, agent: Agent, pods: InstallerPods, namespace: str, tmp_path: Path
) -> None:
    bed = helm_install
    started = time.monotonic()
    lint = run_helm(
        helm_path(), "lint", "--strict", str(CHART), "--set", "runtimes.defaultEnabled=true"
    )
    assert lint.returncode == 0 and "0 chart(s) failed" in lint.stdout, lint.stdout + lint.stderr

    # 1. helm install, taking over the objects the kustomize install made (same names). The
    # bed runs no kubelet: the Deployment's pods must not land on a KWOK node, where they would
    # be Running at an address nobody listens on and join the webhook Service's endpoints; a
    # node selector no node matches keeps them Pending (the bed runs their container itself).
    values = tmp_path / "bed.yaml"
    values.write_text(yaml.safe_dump({"manager": {"nodeSelector": {PENDING: "true"}},
                                      "runtimes": {"installer": ON_THE_AGENT}}))  # fmt: skip
    out = helm_on(
        bed, "install", RELEASE, str(CHART), "--namespace", NS, "--create-namespace",
        "--set", "runtimes.defaultEnabled=true", "--take-ownership", "-f", str(values),
    )  # fmt: skip
    assert "STATUS: deployed" in out and "applied by the hook Job" in out
    objects = release_objects(bed)
    meta = bed.get_json("deployment", "kubeflow-trainer-controller-manager", "-n", NS)["metadata"]
    assert meta["annotations"]["meta.helm.sh/release-name"] == RELEASE
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    # The runtimes, taken over from the kustomize install by the post-install hook Job, whose
    # pod ran on the node agent with the installer's ServiceAccount (its log is there).
    every = {yaml.safe_load(p.read_text())["metadata"]["name"] for p in ROOT.glob("runtimes/*")}
    assert installed_runtimes(bed) == every
    assert installer_runs(bed, "install") == 1, pods.explain()
    assert all(applied_by_the_installer(bed, name) for name in every)

    # 2. The kustomize install's controller still serves (taking the objects over kept the
    # caBundle it injected) and admits upstream's example and a TrainJob whose pods run 20 s
    # (the switch, helm upgrade's hook Job and the new replica outlasted 8 s in CI);
    # both are still running as the controller is switched, then rolled by the upgrade.
    replicas = bed_replicas(bed)
    assert replicas, "the bed's controller is not running"
    trainer_install.wait_webhook(bed, bed.procs[replicas[0]], timeout=10)
    bed.apply([example(namespace)])
    running = trainjob("across-upgrade", annotations=pod_annotations(run_for="20s"))
    running["metadata"]["namespace"] = namespace
    bed.apply([running])
    uids = {name: jobset_uid(bed, namespace, name) for name in TRAINJOBS}

    # 3. The controller as the release's Deployment runs it (its ServiceAccount's token and
    # RBAC, its ConfigMap), in place of the kustomize install's.
    for name in replicas:
        stop(bed, name)
    first = trainer_install.start_controller(bed, objects, name="trainer-helm")
    addons.serving(bed, first, NS, "kubeflow-trainer-webhook-cert", 60, 0.2)
    trainer_install.wait_webhook(bed, first)
    print(f"installed and serving: {time.monotonic() - started:.1f} s")

    # 4. helm upgrade to a changed value: the Deployment's pod template changes, so a new
    # replica starts and the old one goes (maxSurge 1, maxUnavailable 0).
    out = helm_on(
        bed, "upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "manager.logLevel=debug",
    )  # fmt: skip
    assert "REVISION: 2" in out
    deploy = bed.get_json("deployment", "kubeflow-trainer-controller-manager", "-n", NS)
    assert deploy["metadata"]["generation"] == 2
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--zap-log-level=debug" in args
    assert installed_runtimes(bed) == every  # the post-upgrade hook applied them again
    assert installer_runs(bed, "install") == 2, pods.explain()
    second = trainer_install.start_controller(bed, release_objects(bed), name="trainer-helm-2")
    assert "--zap-log-level=debug" in second.argv
    addons.serving(bed, second, NS, "kubeflow-trainer-webhook-cert", 60, 0.2)
    state = bed.get_json("trainjob", "across-upgrade", "-n", namespace).get("status") or {}
    assert state.get("state") != "Complete", "the TrainJob ended before the roll: run it longer"
    stop(bed, "trainer-helm")
    print(f"upgraded and rolled: {time.monotonic() - started:.1f} s")

    # Upstream's example runs to Complete on KWOK nodes, and neither TrainJob lost its JobSet.
    for name in TRAINJOBS:
        wait_complete(bed, namespace, name)
        print(f"{name} Complete: {time.monotonic() - started:.1f} s")
        assert jobset_uid(bed, namespace, name) == uids[name]
    print(f"both TrainJobs Complete: {time.monotonic() - started:.1f} s")

    # 5. helm uninstall: nothing of the release is left but the CRDs, nor any of its runtimes.
    # The replica goes first: stopped after helm deleted the Role, it would be refused
    # releasing its Lease (on a cluster that can happen, harmlessly: the Lease expires in 15 s),
    # and the session's RBAC check counts every refusal.
    stop(bed, "trainer-helm-2")
    out = helm_on(bed, "uninstall", RELEASE, "--namespace", NS)
    assert "[CustomResourceDefinition] trainjobs.trainer.kubeflow.org" in out
    left = []
    for obj in objects:
        kind, namespace_of, name = key(obj)
        where = ["-n", namespace_of] if namespace_of else []
        got = bed.kubectl("get", kind, name, *where, "--ignore-not-found", "-o", "name")
        if got.stdout.strip():
            left.append((kind, name))
    crds = [o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert sorted(left) == [("CustomResourceDefinition", name) for name in sorted(crds)]
    # The pre-delete hook deleted the installer's runtimes (other tests' own runtimes stay).
    assert installed_runtimes(bed) == set()
    assert installer_runs(bed, "uninstall") == 1, pods.explain()
    remaining = bed.kubectl("get", "secret,lease,configmap,serviceaccount", "-n", NS, "-o", "json")
    ours = {
        (o["kind"], o["metadata"]["name"])
        for o in yaml.safe_load(remaining.stdout)["items"]
        if "trainer" in o["metadata"]["name"]
    }
    assert ours == WRITTEN_BY_THE_CONTROLLER
    # The TrainJobs stayed with their CRD.
    assert bed.get_json("trainjob", "across-upgrade", "-n", namespace)["metadata"]["uid"]
    print(f"install, upgrade and uninstall on the bed: {time.monotonic() - started:.1f} s")

    # 6. One `helm install` on a cluster without the Trainer CRDs, as on a new cluster: Helm
    # creates the CRDs from the chart's templates and its post-install Job applies the runtimes
    # (waiting, if need be, until kube-apiserver serves their API). No controller runs: the
    # built-in runtimes skip the webhooks (their webhook-validation label).
    bed.kubectl("delete", "crd", *crds, "--wait=true", "--timeout=90s", timeout=100)
    out = helm_on(
        bed, "install", RELEASE, str(CHART), "--namespace", NS,
        "--set", "runtimes.defaultEnabled=true", "-f", str(values),
    )  # fmt: skip
    assert "STATUS: deployed" in out
    assert installed_runtimes(bed) == every
    assert installer_runs(bed, "install") == 3, pods.explain()
    helm_on(bed, "uninstall", RELEASE, "--namespace", NS)
    assert installed_runtimes(bed) == set()
    print(f"and a first install on a cluster without the CRDs: {time.monotonic() - started:.1f} s")
