"""A Kubernetes cluster on loopback from the real programs (docs/testbed.md).

etcd, kube-apiserver (TLS, Node and RBAC authorization, the default admission plugins,
service-account tokens, the aggregation layer), kube-controller-manager (its default
controllers), kube-scheduler and KWOK (fake nodes whose pods go through their lifecycle
without containers) start from the programs :mod:`bins` builds. JobSet v0.12.0 and Kueue are
installed from their released manifests (:mod:`addons`). Everything lives in one folder that
:meth:`Bed.stop` removes with every process it started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from bins import programs, source_dir
from pki import ClusterPKI, Pair, make_pki
from procs import BedError, Proc, http_ok, https_ok, start, start_with_port, wait_for

HERE = Path(__file__).resolve().parent
SERVICE_CIDR = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"
# The annotation that makes KWOK manage a node (kwokctl's convention).
KWOK_NODE = "kwok.x-k8s.io/node"


def kubectl(
    kubeconfig: Path, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """kubectl against ``kubeconfig``; :class:`BedError` naming the command when it fails and
    ``check``."""
    done = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        input=input, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if check and done.returncode != 0:
        raise BedError(f"kubectl {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done


def kubeconfig_text(server: str, ca: Path, user: dict[str, str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "testbed", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "user"}}],
            "current-context": "testbed",
        }
    )


def write_kubeconfig(path: Path, server: str, ca: Path, pair: Pair) -> Path:
    path.write_text(
        kubeconfig_text(
            server, ca, {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
        )
    )
    path.chmod(0o600)
    return path


@dataclass
class Bed:
    """A running cluster: its folder, admin kubeconfig, processes and logs."""

    root: Path
    bins: dict[str, Path]
    pki: ClusterPKI
    server: str = ""
    kubeconfig: Path = Path()
    procs: dict[str, Proc] = field(default_factory=dict)
    say: Callable[[str], None] = lambda _: None
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    apiserver_args: list[str] = field(default_factory=list)
    """More kube-apiserver flags (the cluster benchmark's audit log)."""
    client_qps: int = 0
    """kube-controller-manager's and kube-scheduler's client QPS (burst twice that); 0 keeps
    their defaults (20 and 50), which a cluster of a thousand nodes raises."""

    @property
    def port(self) -> int:
        return int(self.server.rsplit(":", 1)[1])

    def logs(self) -> dict[str, Path]:
        return {name: proc.log for name, proc in self.procs.items()}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfig, *args, input=input, check=check, timeout=timeout)

    def wait_crds_established(self, timeout: float = 60) -> None:
        """Until every CRD is Established. ``kubectl wait`` fails at once, rather than waiting,
        on a CRD created so recently that it has no ``status.conditions`` yet (".status.
        conditions accessor error: <nil>"), so that answer is asked again until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            done = self.kubectl(
                "wait", "--for=condition=Established", "crd", "--all", f"--timeout={left}s",
                check=False, timeout=left + 10,
            )  # fmt: skip
            if done.returncode == 0:
                return
            if "accessor error" not in done.stderr or time.monotonic() >= deadline:
                raise BedError(f"CRDs not Established within {timeout} s: {done.stderr.strip()}")

    def get_json(self, *args: str) -> dict[str, Any]:
        out = self.kubectl("get", *args, "-o", "json")
        data: dict[str, Any] = json.loads(out.stdout)
        return data

    def apply(self, objects: Sequence[dict[str, Any]], manager: str = "testbed") -> None:
        text = yaml.safe_dump_all(list(objects))
        self.kubectl("apply", "--server-side", f"--field-manager={manager}", "-f", "-", input=text)

    def alive(self) -> dict[str, bool]:
        return {name: proc.alive() for name, proc in self.procs.items()}

    def stop(self, keep: bool = False) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        self.procs.clear()
        for hook in self.on_stop:
            hook()
        if not keep:
            shutil.rmtree(self.root, ignore_errors=True)


def _etcd(bed: Bed) -> None:
    data = bed.root / "etcd"

    def build(ports: dict[str, int]) -> tuple[list[str], None]:
        client = f"http://127.0.0.1:{ports['client']}"
        peer = f"http://127.0.0.1:{ports['peer']}"
        return [
            str(bed.bins["etcd"]), "--name=testbed", f"--data-dir={data}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}", f"--listen-metrics-urls=http://127.0.0.1:{ports['metrics']}",
            # A bed lives for one test run: its writes need not survive a power cut.
            "--unsafe-no-fsync", "--log-level=warn",
        ], None  # fmt: skip

    def ready(proc: Proc) -> None:
        url = f"http://127.0.0.1:{proc.ports['metrics']}/health"
        wait_for("etcd health", lambda: http_ok(url), 30, proc)

    bed.procs["etcd"] = start_with_port(
        "etcd", build, ("client", "peer", "metrics"), bed.root / "logs/etcd.log", ready
    )


def _apiserver(bed: Bed) -> None:
    pki = bed.pki
    etcd = bed.procs["etcd"].ports["client"]

    def build(ports: dict[str, int]) -> tuple[list[str], None]:
        return [
            str(bed.bins["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{etcd}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['secure']}",
            "--advertise-address=127.0.0.1",
            # The kubernetes Service's endpoints would be 127.0.0.1, which Endpoints refuse; pods
            # of the bed reach the server through KUBERNETES_SERVICE_HOST instead.
            "--endpoint-reconciler-type=none",
            f"--tls-cert-file={pki.apiserver.cert}", f"--tls-private-key-file={pki.apiserver.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Webhooks and aggregated APIs are called at their EndpointSlices' addresses (here
            # 127.0.0.1), not at Service IPs, which only a kube-proxy would route.
            "--enable-aggregator-routing=true",
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
            f"--proxy-client-key-file={pki.front_proxy_client.key}",
            "--allow-privileged=true", "--profiling=false", "--v=1", *bed.apiserver_args,
        ], None  # fmt: skip

    def ready(proc: Proc) -> None:
        url = f"https://127.0.0.1:{proc.ports['secure']}/readyz"
        admin = (bed.pki.admin.cert, bed.pki.admin.key)
        wait_for("/readyz", lambda: https_ok(url, admin, bed.pki.ca.cert), 60, proc, 0.2)

    proc = start_with_port(
        "kube-apiserver", build, ("secure",), bed.root / "logs/kube-apiserver.log", ready
    )
    bed.procs["kube-apiserver"] = proc
    bed.server = f"https://127.0.0.1:{proc.ports['secure']}"
    bed.kubeconfig = write_kubeconfig(
        bed.root / "admin.kubeconfig", bed.server, pki.ca.cert, pki.admin
    )


def _component(bed: Bed, name: str, pair: Pair, extra: Callable[[Path], list[str]]) -> None:
    kubeconfig = write_kubeconfig(
        bed.root / f"{name}.kubeconfig", bed.server, bed.pki.ca.cert, pair
    )

    qps = (
        [f"--kube-api-qps={bed.client_qps}", f"--kube-api-burst={2 * bed.client_qps}"]
        if bed.client_qps
        else []
    )

    def build(ports: dict[str, int]) -> tuple[list[str], None]:
        return [
            str(bed.bins[name]), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={ports['secure']}",
            "--leader-elect=false", "--v=1", *extra(kubeconfig), *qps,
        ], None  # fmt: skip

    def ready(proc: Proc) -> None:
        url = f"https://127.0.0.1:{proc.ports['secure']}/healthz"
        wait_for("/healthz", lambda: https_ok(url), 60, proc, 0.2)

    bed.procs[name] = start_with_port(
        name, build, ("secure",), bed.root / f"logs/{name}.log", ready
    )


def _controller_manager(bed: Bed) -> None:
    pki = bed.pki
    _component(
        bed,
        "kube-controller-manager",
        pki.controller_manager,
        lambda _: [
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca.cert}",
            f"--cluster-signing-cert-file={pki.ca.cert}",
            f"--cluster-signing-key-file={pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*",
        ],
    )


def _scheduler(bed: Bed) -> None:
    _component(bed, "kube-scheduler", bed.pki.scheduler, lambda _: [])


def kwok_stages(bed: Bed) -> Path:
    """KWOK's own node and general pod stages, from its module, and the bed's failure stage."""
    return write_kwok_stages(bed.root)


def write_kwok_stages(folder: Path) -> Path:
    """:func:`kwok_stages` into ``folder`` (KWOK against the local plane: realclients.py)."""
    stages = source_dir("sigs.k8s.io/kwok") / "kustomize/stage"
    files = [
        stages / "node/fast/node-initialize.yaml",
        stages / "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    ]
    files += sorted((stages / "pod/general").glob("pod-*.yaml"))
    files.append(HERE / "kwok-stages.yaml")
    out = folder / "kwok-stages.yaml"
    out.write_text("\n---\n".join(f.read_text() for f in files))
    return out


def _kwok(bed: Bed) -> None:
    kubeconfig = write_kubeconfig(
        bed.root / "kwok.kubeconfig", bed.server, bed.pki.ca.cert, bed.pki.kwok
    )
    config = kwok_stages(bed)

    def build(ports: dict[str, int]) -> tuple[list[str], None]:
        return [
            str(bed.bins["kwok"]), f"--kubeconfig={kubeconfig}", f"--config={config}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_NODE}=fake",
            # Pod IPs are labels only: no traffic is ever sent to them.
            "--cidr=10.244.0.1/16", "--node-ip=10.244.0.1",
            f"--server-address=127.0.0.1:{ports['server']}", "--node-lease-duration-seconds=40",
        ], None  # fmt: skip

    def ready(proc: Proc) -> None:
        url = f"http://127.0.0.1:{proc.ports['server']}/healthz"
        wait_for("/healthz", lambda: http_ok(url), 30, proc, 0.2)

    bed.procs["kwok"] = start_with_port(
        "kwok", build, ("server",), bed.root / "logs/kwok.log", ready
    )


def node_object(name: str, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **({"nvidia.com/gpu.present": "true"} if gpus else {}),
                **(labels or {}),
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def add_nodes(
    bed: Bed, count: int, gpus: int, prefix: str = "kwok-node-", timeout: float = 30
) -> list[str]:
    names = [f"{prefix}{i}" for i in range(count)]
    text = yaml.safe_dump_all([node_object(n, gpus) for n in names])
    bed.kubectl("create", "-f", "-", input=text)

    def all_ready() -> bool:
        nodes = bed.get_json("nodes", "-l", "type=kwok")["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            for c in n.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        }
        return set(names) <= ready

    wait_for(f"{count} KWOK nodes Ready", all_ready, timeout, bed.procs["kwok"], 0.3)
    return names


def start_bed(
    nodes: int = 4,
    gpus_per_node: int = 8,
    root: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
    apiserver_args: Sequence[str] = (),
    client_qps: int = 0,
) -> Bed:
    """Start the core cluster (no JobSet, Kueue or Trainer yet) and return it, ready."""
    started = time.monotonic()
    bins = programs(say)
    folder = root or Path(tempfile.mkdtemp(prefix="trainer-testbed-"))
    folder.chmod(0o700)
    bed = Bed(root=folder, bins=bins, pki=make_pki(folder / "pki"), say=say)
    bed.apiserver_args = list(apiserver_args)
    bed.client_qps = client_qps
    try:
        say("starting etcd")
        _etcd(bed)
        say("starting kube-apiserver")
        _apiserver(bed)
        say("starting kube-controller-manager, kube-scheduler and KWOK")
        _controller_manager(bed)
        _scheduler(bed)
        _kwok(bed)
        add_nodes(bed, nodes, gpus_per_node, timeout=30 + nodes / 20)
        wait_for(
            "the default ServiceAccount (kube-controller-manager's serviceaccount controller)",
            lambda: bed.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
            30, bed.procs["kube-controller-manager"], 0.3,
        )  # fmt: skip
    except BaseException:
        bed.stop(keep=bool(os.environ.get("TRAINER_TESTBED_KEEP")))
        raise
    say(f"core cluster ready in {time.monotonic() - started:.1f} s")
    return bed


def start_api_only(root: Path | None = None, say: Callable[[str], None] = lambda _: None) -> Bed:
    """etcd and kube-apiserver alone: for tests of what the API server itself decides (our CRDs'
    schemas and rules), where no controller, webhook or node may add to its verdict."""
    started = time.monotonic()
    folder = root or Path(tempfile.mkdtemp(prefix="trainer-apiserver-"))
    folder.chmod(0o700)
    bed = Bed(root=folder, bins=programs(say), pki=make_pki(folder / "pki"), say=say)
    try:
        _etcd(bed)
        _apiserver(bed)
    except BaseException:
        bed.stop(keep=bool(os.environ.get("TRAINER_TESTBED_KEEP")))
        raise
    say(f"etcd and kube-apiserver ready in {time.monotonic() - started:.1f} s")
    return bed


__all__ = [
    "Bed",
    "BedError",
    "add_nodes",
    "start",
    "start_api_only",
    "start_bed",
    "write_kubeconfig",
]
