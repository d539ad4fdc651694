"""Controllers installed on the bed from their released manifests, run as their Deployments
run them (docs/testbed.md, "Controllers as their Deployments run them").

A controller's manifests are applied whole with ``kubectl apply --server-side``, except its
Deployment: no kubelet runs containers on the bed, and a pod on a KWOK node would get an
address nothing listens on. The Deployment's container is run as a process instead, the way
its kubelet would run it: its ServiceAccount's token, the cluster CA and its namespace mounted
at ``/var/run/secrets/kubernetes.io/serviceaccount`` (in a mount namespace of its own), its
ConfigMap and certificate Secret as files, ``KUBERNETES_SERVICE_HOST``/``PORT`` set. Only what
loopback forces changes: the ports it listens on (one machine holds every controller) and an
EndpointSlice that routes its webhook Service to the bed's pod address (:mod:`netns`), which
kube-apiserver calls with ``--enable-aggregator-routing``.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from bed import Bed
from bins import source_dir
from netns import POD_ADDRESS
from procs import BedError, Proc, free_port, http_ok, https_ok, start, wait_for

SA_MOUNT = "/run/secrets/kubernetes.io/serviceaccount"  # /var/run is /run on the bed's machines


def render_kustomize(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize folder``'s objects, each a copy of its own (the caller may change
    them). The render (about 2 s for an install) is done once per folder and process: the
    manifests do not change while the bed runs."""
    return copy.deepcopy(_rendered(str(folder)))


@functools.cache
def _rendered(folder: str) -> list[dict[str, Any]]:
    argv = ["kubectl", "kustomize", folder]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise BedError(f"kubectl kustomize {folder}: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def service_account_files(bed: Bed, namespace: str, name: str, folder: Path) -> Path:
    """What a kubelet mounts for a pod of this ServiceAccount: a bound token, ca.crt, namespace."""
    folder.mkdir(parents=True, exist_ok=True)
    token = bed.kubectl("create", "token", name, "-n", namespace, "--duration=6h").stdout.strip()
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_bytes(bed.pki.ca.cert.read_bytes())
    (folder / "namespace").write_text(namespace)
    for f in folder.iterdir():
        f.chmod(0o644)
    return folder


WEBHOOK_DIR = "/tmp/k8s-webhook-server"  # controller-runtime's default certificate folder's parent


def pod_argv(sa_dir: Path, webhook_dir: Path, hostname: str, argv: Sequence[str]) -> list[str]:
    """``argv`` in mount and UTS namespaces of its own, as in a pod: the ServiceAccount folder
    mounted where in-cluster clients read it, ``webhook_dir`` as ``/tmp/k8s-webhook-server``
    (where JobSet's certificate rotator waits for its Secret's files: a path it does not let
    one change) and the pod's name as its hostname (leader-election identities start with it)."""
    script = (
        'set -e; hostname "$3"; mount -t tmpfs testbed /run; mkdir -p ' + SA_MOUNT + "; "
        'mount --bind "$1" ' + SA_MOUNT + "; mkdir -p " + WEBHOOK_DIR + "; "
        'mount --bind "$2" ' + WEBHOOK_DIR + '; shift 3; exec "$@"'
    )
    namespaces = ["--mount", "--uts", "--propagation", "private"]
    if os.geteuid() != 0:
        namespaces = ["--user", "--map-root-user", *namespaces]
    return [
        "unshare",
        *namespaces,
        "/bin/sh",
        "-c",
        script,
        "sh",
        str(sa_dir),
        str(webhook_dir),
        hostname,
        *argv,
    ]


def forget_mountpoint() -> None:
    """Remove the empty mount point ``pod_argv`` made on the host, when nobody else uses it."""
    with contextlib.suppress(OSError):
        os.rmdir(WEBHOOK_DIR)


def pod_env(bed: Bed, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": "/tmp",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(bed.port),
    }
    env.update(extra or {})
    return env


def route_service(
    bed: Bed,
    namespace: str,
    service: str,
    port: int,
    port_name: str = "",
    replica: str = "testbed",
    ready: bool = True,
) -> None:
    """An EndpointSlice that sends the Service's traffic (from kube-apiserver) to the bed's
    pod address, where the controller listens (:mod:`netns`): one per replica, each with its
    port; ``ready=False`` takes a stopped replica out, as the endpoints controller would."""
    slice_port: dict[str, Any] = {"port": port, "protocol": "TCP"}
    if port_name:
        slice_port["name"] = port_name
    bed.apply(
        [
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{service}-{replica}",
                    "namespace": namespace,
                    "labels": {
                        "kubernetes.io/service-name": service,
                        "endpointslice.kubernetes.io/managed-by": "testbed.kubeflow.org",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [POD_ADDRESS], "conditions": {"ready": ready}}],
                "ports": [slice_port],
            }
        ]
    )


def sync_secret(
    bed: Bed, namespace: str, name: str, dest: Path, proc: Proc, timeout: float
) -> None:
    """Write the Secret's keys into ``dest`` once the controller has stored its certificate,
    as the kubelet projects a Secret volume."""

    def written() -> bool:
        done = bed.kubectl("get", "secret", name, "-n", namespace, "-o", "json", check=False)
        if done.returncode != 0:
            return False
        data = yaml.safe_load(done.stdout).get("data") or {}
        if not data.get("tls.crt"):
            return False
        dest.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            (dest / key).write_bytes(base64.b64decode(value))
        return True

    wait_for(f"its certificate in Secret {namespace}/{name}", written, timeout, proc, 0.3)


def deployment(objects: list[dict[str, Any]]) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == "Deployment"]
    if len(found) != 1:
        raise BedError(f"expected one Deployment in the manifests, found {len(found)}")
    return found[0]


def config_map_data(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for o in objects:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name:
            loaded: dict[str, Any] = yaml.safe_load(next(iter(o["data"].values())))
            return loaded
    raise BedError(f"ConfigMap {name} not in the manifests")


def run_controller_pod(
    bed: Bed,
    name: str,
    namespace: str,
    objects: list[dict[str, Any]],
    argv: Callable[[Path, dict[str, int]], list[str]],
    ports: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> Proc:
    folder = bed.root / name
    webhook_dir = folder / "k8s-webhook-server"
    webhook_dir.mkdir(parents=True, exist_ok=True)
    sa_name = deployment(objects)["spec"]["template"]["spec"]["serviceAccountName"]
    sa_dir = service_account_files(bed, namespace, sa_name, folder / "serviceaccount")
    chosen = {p: free_port() for p in ports}
    full = pod_argv(sa_dir, webhook_dir, name, argv(folder, chosen))
    proc = start(name, full, bed.root / f"logs/{name}.log", pod_env(bed, env))
    proc.ports = chosen
    bed.procs[name] = proc
    if forget_mountpoint not in bed.on_stop:
        bed.on_stop.append(forget_mountpoint)
    return proc


def apply_released(bed: Bed, folder: Path) -> tuple[list[dict[str, Any]], str]:
    """A controller's released kustomization applied whole but for its Deployment (run as a
    process instead); returns its objects and its namespace."""
    objects = render_kustomize(folder)
    namespace = str(deployment(objects)["metadata"]["namespace"])
    bed.apply([o for o in objects if o["kind"] != "Deployment"])
    return objects, namespace


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    """The ConfigMap's config file as the pod would see it, with the bed's ports."""
    path = folder / "controller_manager_config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def serving(
    bed: Bed, proc: Proc, namespace: str, secret: str, timeout: float, interval: float
) -> None:
    """Until the controller stored its webhook certificate (then projected as its Secret
    volume would be) and its readiness probe passes."""
    certs = bed.root / proc.name / "k8s-webhook-server/serving-certs"
    sync_secret(bed, namespace, secret, certs, proc, timeout)
    health = f"http://127.0.0.1:{proc.ports['health']}/readyz"
    wait_for("/readyz", lambda: http_ok(health), timeout, proc, interval)


def install_jobset(bed: Bed, timeout: float = 60) -> Proc:
    """JobSet v0.12.0's config/default, its controller and webhooks working."""
    objects, namespace = apply_released(bed, source_dir("sigs.k8s.io/jobset") / "config/default")
    config = config_map_data(objects, "jobset-manager-config")

    def argv(folder: Path, ports: dict[str, int]) -> list[str]:
        config["webhook"] = {"port": ports["webhook"], "host": POD_ADDRESS}
        config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"}
        path = write_config(folder, config)
        return [
            str(bed.bins["jobset-manager"]), f"--config={path}", "--zap-log-level=2",
            f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
            f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
        ]  # fmt: skip

    proc = run_controller_pod(
        bed, "jobset", namespace, objects, argv, ("webhook", "health", "metrics")
    )
    route_service(bed, namespace, "jobset-webhook-service", proc.ports["webhook"])
    serving(bed, proc, namespace, "jobset-webhook-server-cert", timeout, 0.2)
    probe = _probe_jobset()
    wait_for(
        "its webhook, called by kube-apiserver",
        lambda: bed.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
        .returncode
        == 0,
        timeout, proc, 0.3,
    )  # fmt: skip
    return proc


def _probe_jobset() -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "testbed-probe", "namespace": "default"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "probe",
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "restartPolicy": "Never",
                                        "containers": [{"name": "c", "image": "busybox"}],
                                    }
                                }
                            }
                        },
                    }
                ]
            },
        }
    )


def install_kueue(bed: Bed, timeout: float = 90) -> Proc:
    """Kueue v0.17.0's config/default, its controller, webhooks and visibility API working.

    Install it after the Trainer CRDs: Kueue sets up a job integration at its start only when
    the job's API is served; otherwise it logs "No matching API in the server for job
    framework, deferring setting up controller" and polls for the API with a back-off that
    grows to two minutes. With the TrainJob CRD served, this waits until Kueue's trainjob
    controller has started."""
    source = source_dir("sigs.k8s.io/kueue", module="kueue")
    objects, namespace = apply_released(bed, source / "config/default")
    config = config_map_data(objects, "kueue-manager-config")

    def argv(folder: Path, ports: dict[str, int]) -> list[str]:
        config["webhook"] = {"port": ports["webhook"], "host": POD_ADDRESS}
        config["health"] = {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"}
        config["metrics"] = {"bindAddress": f"127.0.0.1:{ports['metrics']}"}
        path = write_config(folder, config)
        return [
            str(bed.bins["kueue-manager"]), f"--config={path}", "--zap-log-level=2",
            f"--visibility-server-port={ports['visibility']}",
        ]  # fmt: skip

    proc = run_controller_pod(
        bed, "kueue", namespace, objects, argv, ("webhook", "health", "metrics", "visibility")
    )
    route_service(bed, namespace, "kueue-webhook-service", proc.ports["webhook"])
    route_service(bed, namespace, "kueue-visibility-server", proc.ports["visibility"], "https")
    serving(bed, proc, namespace, "kueue-webhook-server-cert", timeout, 0.3)
    probe = yaml.safe_dump(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "testbed-probe"},
        }
    )
    wait_for(
        "its webhooks, called by kube-apiserver",
        lambda: bed.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
        .returncode
        == 0,
        timeout, proc, 0.3,
    )  # fmt: skip
    # The visibility API is aggregated: until kube-apiserver reaches it, discovery (kubectl
    # api-resources) reports the group as unavailable.
    services = [f"apiservice/{o['metadata']['name']}" for o in objects if o["kind"] == "APIService"]
    bed.kubectl(
        "wait", "--for=condition=Available", *services, f"--timeout={int(timeout)}s",
        timeout=timeout + 10,
    )  # fmt: skip
    if bed.kubectl("get", "crd", "trainjobs.trainer.kubeflow.org", check=False).returncode == 0:
        wait_for(
            "its trainer.kubeflow.org/trainjob controller (Kueue's log)",
            lambda: _trainjob_controller_started(proc.log), timeout, proc, 0.3,
        )  # fmt: skip
    return proc


def _trainjob_controller_started(log: Path) -> bool:
    for line in log.read_text(errors="replace").splitlines():
        if '"jobFrameworkName":"trainer.kubeflow.org/trainjob"' in line and "deferring" in line:
            raise BedError(
                "Kueue started before the TrainJob CRD was served and deferred its trainjob "
                "integration: install Kueue after Trainer"
            )
        if '"logger":"trainjob"' in line and '"msg":"Starting Controller"' in line:
            return True
    return False


PODGROUP_CRDS = (
    ("sigs.k8s.io/scheduler-plugins", "config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"),
    ("volcano.sh/volcano", "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml"),
)


def install_podgroup_crds(bed: Bed) -> None:
    """The PodGroup CRDs of scheduler-plugins' coscheduling and of Volcano, from their pinned
    modules (hack/testbed/crds): a runtime's podGroupPolicy makes the controller write them.
    Their schedulers are not run: KWOK's pods are bound by kube-scheduler."""
    files = [str(source_dir(m, module="crds") / f) for m, f in PODGROUP_CRDS]
    bed.kubectl("apply", "--server-side", *[a for f in files for a in ("-f", f)])
    bed.wait_crds_established()


def remove_kueue(bed: Bed) -> None:
    """Stop Kueue and remove what would make the API server call it: its webhook
    configurations (failurePolicy Fail) and its aggregated APIServices. Its CRDs and objects
    stay; nothing calls Kueue for them once nobody reads them."""
    proc = bed.procs.pop("kueue", None)
    if proc is not None:
        proc.stop()
    for kind, name in (
        ("mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration"),
        ("validatingwebhookconfiguration", "kueue-validating-webhook-configuration"),
        ("apiservice", "v1beta1.visibility.kueue.x-k8s.io"),
        ("apiservice", "v1beta2.visibility.kueue.x-k8s.io"),
    ):
        bed.kubectl("delete", kind, name, "--ignore-not-found", check=False)


__all__ = [
    "https_ok", "install_jobset", "install_kueue", "remove_kueue", "route_service",
    "run_controller_pod",
]  # fmt: skip
