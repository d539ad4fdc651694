"""The real programs against the local plane (docs/local-plane.md, "Running the real programs
against the plane"): ``trainer up`` with the executor's roles switched off (``--without``), and
KWOK (the bed's stages), JobSet v0.12.0's controller with its webhooks, kube-scheduler and
kube-controller-manager's Job and garbage-collector controllers started against its
kubeconfig, each a process whose log is kept in the folder.

    python3 hack/testbed/realclients.py     # start them, print where the logs are, wait for ^C
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from addons import render_kustomize
from bed import KWOK_NODE, kubectl, node_object, write_kwok_stages
from bins import cache_root, go_binary, source_dir
from procs import BedError, Proc, free_port, http_ok, https_ok, start, tail, wait_for

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("jobset-controller", "job-controller", "scheduler", "kubelet")
KCM_CONTROLLERS = "job-controller,garbage-collector-controller"
# klog's error lines (E0102 15:04:05.000000 ...) and controller-runtime's (zap's "ERROR")
ERROR_LINE = re.compile(r"^E\d{4} |\tERROR\t|\"level\":\"error\"")
# Error lines that are no failed request: kube-scheduler's and kube-controller-manager's note
# that no static manifest is configured, and their exit when stopped without leader election.
NOT_REQUESTS = ("The manifest file is empty", "finished without leader elect")


def missing_reason() -> str | None:
    """Why the real programs cannot run here, or None."""
    if os.environ.get("TRAINER_TESTBED_BINS"):
        return None
    if go_binary() is None:
        return "Go is not installed: the real programs are built with it (make cluster-bins)"
    built = list((cache_root() / "bins").glob("kube-*/.complete"))
    if not built:
        return "the real programs are not built: run make cluster-bins"
    return None


def binaries() -> dict[str, Path]:
    """The kube module's programs, without building (:func:`missing_reason` says when absent)."""
    given = os.environ.get("TRAINER_TESTBED_BINS")
    if given:
        return {p.name: p for p in Path(given).iterdir() if p.is_file()}
    from bins import HERE, Module, module_dir  # noqa: PLC0415 - needs Go, checked first

    go = go_binary()
    assert go is not None
    folder = module_dir(Module("kube", HERE / "kube"), go)
    if not (folder / ".complete").is_file():
        raise BedError(f"{folder}: not built (make cluster-bins)")
    return {p.name: p for p in folder.iterdir() if not p.name.startswith(".")}


@dataclass
class Plane:
    """``trainer up`` and the programs started against it."""

    root: Path
    kubeconfig: Path
    procs: dict[str, Proc] = field(default_factory=dict)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return kubectl(self.kubeconfig, *args, input=input, check=check, timeout=timeout)

    def errors(self, name: str) -> list[str]:
        """The error lines of a program's log, in order (its first failing request first)."""
        log = self.procs[name].log
        text = log.read_text(errors="replace") if log.exists() else ""
        return [
            line
            for line in text.splitlines()
            if ERROR_LINE.search(line) and not any(n in line for n in NOT_REQUESTS)
        ]

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        self.procs.clear()


def start_up(plane: Plane, without: Sequence[str]) -> None:
    """``trainer up --without ...``, until it says it is ready."""
    argv = [
        sys.executable, "-m", "trainer.cli.main", "up", f"--kubeconfig={plane.kubeconfig}",
        "--no-dashboard", *(f"--without={role}" for role in without),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = start("trainer-up", argv, plane.root / "logs/trainer-up.log", env)
    plane.procs["trainer-up"] = proc
    ready = "local control plane ready"
    wait_for("its ready line", lambda: ready in proc.log.read_text(errors="replace"), 60, proc)


def start_program(
    plane: Plane,
    name: str,
    build: Callable[[dict[str, int]], list[str]],
    ports: Sequence[str],
    ready: Callable[[dict[str, int]], bool],
) -> Proc:
    chosen = {p: free_port() for p in ports}
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    proc = start(name, build(chosen), plane.root / f"logs/{name}.log", env)
    proc.ports = chosen
    plane.procs[name] = proc
    wait_for("ready", lambda: ready(chosen), 60, proc, 0.2)
    return proc


def start_kwok(plane: Plane, bins: dict[str, Path]) -> Proc:
    config = write_kwok_stages(plane.root)

    def build(ports: dict[str, int]) -> list[str]:
        return [
            str(bins["kwok"]), f"--kubeconfig={plane.kubeconfig}", f"--config={config}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_NODE}=fake",
            "--cidr=10.244.0.1/16", "--node-ip=10.244.0.1",
            f"--server-address=127.0.0.1:{ports['server']}", "--node-lease-duration-seconds=40",
        ]  # fmt: skip

    return start_program(
        plane,
        "kwok",
        build,
        ("server",),
        lambda ports: http_ok(f"http://127.0.0.1:{ports['server']}/healthz"),
    )


def start_component(plane: Plane, bins: dict[str, Path], name: str, *extra: str) -> Proc:
    """kube-scheduler or kube-controller-manager on the plane's kubeconfig (the plane's
    administrator); no authentication or authorization kubeconfig: their /healthz is open."""

    def build(ports: dict[str, int]) -> list[str]:
        return [
            str(bins[name]), f"--kubeconfig={plane.kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={ports['secure']}", "--v=2", *extra,
        ]  # fmt: skip

    return start_program(
        plane,
        name,
        build,
        ("secure",),
        lambda ports: https_ok(f"https://127.0.0.1:{ports['secure']}/healthz"),
    )


def jobset_webhooks(port: int, ca: bytes) -> list[dict[str, Any]]:
    """JobSet's released webhook configurations (config/default: its names and its pods'
    objectSelector), calling ``https://127.0.0.1:<port>`` with ``ca``."""
    objects = render_kustomize(source_dir("sigs.k8s.io/jobset") / "config/default")
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    out = [o for o in objects if o["kind"] in kinds]
    for doc in out:
        doc["metadata"].pop("annotations", None)  # cert-manager's CA injection
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca).decode(),
            }
    return out


def start_jobset(plane: Plane, bins: dict[str, Path]) -> Proc:
    """JobSet v0.12.0's controller with its webhook server on our certificate (its internal
    certificate management off: no Secret, no cert-controller), then its webhook
    configurations pointing at it."""
    from trainer.machinery.certgen import generate_bundle  # noqa: PLC0415

    folder = plane.root / "jobset"
    certs = folder / "certs"
    certs.mkdir(parents=True)
    bundle = generate_bundle(["127.0.0.1", "localhost"], datetime.now(UTC))
    (certs / "tls.crt").write_bytes(bundle.cert)
    (certs / "tls.key").write_bytes(bundle.key)

    def build(ports: dict[str, int]) -> list[str]:
        config = {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": ports["webhook"], "host": "127.0.0.1", "certDir": str(certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        }
        path = folder / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return [
            str(bins["jobset-manager"]), f"--config={path}", "--zap-log-level=2",
            "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
        ]  # fmt: skip

    proc = start_program(
        plane,
        "jobset",
        build,
        ("webhook", "health"),
        lambda ports: http_ok(f"http://127.0.0.1:{ports['health']}/readyz"),
    )
    hooks = jobset_webhooks(proc.ports["webhook"], bundle.ca_cert)
    plane.kubectl("create", "-f", "-", input=yaml.safe_dump_all(hooks))
    return proc


def add_nodes(plane: Plane, count: int, gpus: int) -> list[str]:
    """KWOK nodes, until KWOK has made them Ready (kubectl wait: a watch)."""
    names = [f"kwok-node-{i}" for i in range(count)]
    plane.kubectl(
        "create", "-f", "-", input=yaml.safe_dump_all([node_object(n, gpus) for n in names])
    )
    plane.kubectl(
        "wait", "--for=condition=Ready", *(f"node/{n}" for n in names), "--timeout=30s",
        timeout=40,
    )  # fmt: skip
    return names


def start_plane(
    root: Path, with_kcm: bool = True, say: Callable[[str], None] = lambda _: None
) -> Plane:
    """``trainer up`` without the roles the real programs play, and the programs."""
    bins = binaries()
    plane = Plane(root=root, kubeconfig=root / "kubeconfig")
    without = ROLES if with_kcm else tuple(r for r in ROLES if r != "job-controller")
    try:
        say(f"starting trainer up --without {','.join(without)}")
        start_up(plane, without)
        say("starting KWOK, kube-scheduler, JobSet's controller")
        start_kwok(plane, bins)
        start_component(plane, bins, "kube-scheduler")
        start_jobset(plane, bins)
        if with_kcm:
            say(f"starting kube-controller-manager --controllers={KCM_CONTROLLERS}")
            start_component(
                plane, bins, "kube-controller-manager", f"--controllers={KCM_CONTROLLERS}"
            )
    except BaseException:
        plane.stop()
        raise
    return plane


def main() -> int:
    reason = missing_reason()
    if reason:
        print(f"realclients: {reason}", file=sys.stderr)
        return 1
    root = Path(tempfile.mkdtemp(prefix="trainer-realclients-"))
    plane = start_plane(root, say=lambda line: print(f"realclients: {line}", file=sys.stderr))
    try:
        add_nodes(plane, 2, 8)
        print(f"KUBECONFIG={plane.kubeconfig}; logs in {root / 'logs'}; ^C stops")
        plane.procs["trainer-up"].popen.wait()
    except KeyboardInterrupt:
        pass
    finally:
        plane.stop()
        for name in ("kube-scheduler", "kube-controller-manager", "jobset", "kwok"):
            print(f"--- {name}\n{tail(root / f'logs/{name}.log', 5)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
