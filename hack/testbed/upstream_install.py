"""Upstream's Kubeflow Trainer v2.3.0 on the bed, installed as its install guide says
(docs/side-by-side.md).

Its released ``manifests/overlays/manager`` and ``manifests/overlays/runtimes`` are read from
the pinned module (``hack/testbed/upstream``), less the overlay's ``third-party/jobset`` line
(JobSet v0.12.0 is installed on the bed already, from its own module, as that line's comment
tells a cluster that has it) and applied with ``kubectl apply --server-side``. Its controller
Deployment's container, ``trainer-controller-manager`` built from the same module, runs as a
process the way :mod:`addons` runs every controller: its ServiceAccount's token and RBAC, its
ConfigMap as its config file, its cert-controller managing the webhook Secret and caBundles.

Upstream's objects carry the same names as ours (same Namespace, ServiceAccount, Service,
webhook configurations, CRDs), so either install replaces the other: :func:`switch` is that
replacement, as an admin moving from one to the other would do it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trainer_install
from addons import (
    config_map_data,
    deployment,
    render_kustomize,
    route_service,
    run_controller_pod,
    serving,
    write_config,
)
from bed import Bed
from bins import source_dir
from netns import POD_ADDRESS
from procs import Proc

MODULE = "github.com/kubeflow/trainer/v2"
NAMESPACE = "kubeflow-system"
LEASE = "trainer.kubeflow.org"
SERVICE = "kubeflow-trainer-controller-manager"
SECRET = "kubeflow-trainer-webhook-cert"
PROC = "upstream"


def _overlays(bed: Bed) -> Path:
    """A writable copy of the released manifests (the module cache is read-only), with the
    manager overlay's third-party JobSet line dropped."""
    dest = bed.root / "upstream-manifests"
    if not dest.exists():
        source = source_dir(MODULE, module="upstream") / "manifests"
        for part in ("base", "overlays"):
            shutil.copytree(source / part, dest / part)
        for path in [dest, *dest.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        kustomization = dest / "overlays/manager/kustomization.yaml"
        lines = kustomization.read_text().splitlines(keepends=True)
        kustomization.write_text("".join(ln for ln in lines if "third-party/jobset" not in ln))
    return dest


def manifests(bed: Bed) -> list[dict[str, Any]]:
    return render_kustomize(_overlays(bed) / "overlays/manager")


def runtimes(bed: Bed) -> list[dict[str, Any]]:
    return render_kustomize(_overlays(bed) / "overlays/runtimes")


def install_manifests(bed: Bed) -> list[dict[str, Any]]:
    """Everything of the manager overlay but its Deployment. Its Secret is the empty one its
    secretGenerator makes, which cert-controller fills: it is created only when missing, as a
    fresh install would find it (an existing Secret of another type could not be changed)."""
    objects = manifests(bed)
    have_secret = bed.kubectl("get", "secret", SECRET, "-n", NAMESPACE, check=False).returncode == 0
    bed.apply(
        [
            o
            for o in objects
            if o["kind"] != "Deployment" and not (o["kind"] == "Secret" and have_secret)
        ],
        manager="kubectl",
    )
    bed.wait_crds_established()
    return objects


def start_controller(bed: Bed, objects: list[dict[str, Any]], name: str = PROC) -> Proc:
    """One replica of upstream's controller Deployment, as a process."""
    config = config_map_data(objects, "kubeflow-trainer-config")
    container = deployment(objects)["spec"]["template"]["spec"]["containers"][0]
    args = [a for a in container.get("args", []) if not a.startswith("--config=")]

    def argv(folder: Path, ports: dict[str, int]) -> list[str]:
        config["webhook"] = {**config.get("webhook", {}), "port": ports["webhook"]}
        config["webhook"]["host"] = POD_ADDRESS
        config["metrics"] = {**config.get("metrics", {})}
        config["metrics"]["bindAddress"] = f"127.0.0.1:{ports['metrics']}"
        config["health"] = {**config.get("health", {})}
        config["health"]["healthProbeBindAddress"] = f"127.0.0.1:{ports['health']}"
        config["statusServer"] = {**config.get("statusServer", {}), "port": ports["status"]}
        path = write_config(folder, config)
        return [str(bed.bins["trainer-controller-manager"]), f"--config={path}", *args]

    proc = run_controller_pod(
        bed, name, NAMESPACE, objects, argv, ("webhook", "metrics", "health", "status")
    )
    route_service(bed, NAMESPACE, SERVICE, proc.ports["webhook"], "webhook-server", replica=name)
    serving(bed, proc, NAMESPACE, SECRET, 60, 0.2)
    return proc


def install_upstream(bed: Bed, with_runtimes: bool = True) -> Proc:
    objects = install_manifests(bed)
    proc = start_controller(bed, objects)
    trainer_install.wait_webhook(bed, proc)
    if with_runtimes:
        bed.apply(runtimes(bed), manager="kubectl")
    return proc


def identities(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objects}


def switch(bed: Bed, to: str, say: Callable[[str], None] = lambda _: None) -> Proc:
    """Replace the running controller's install by the other's ("ours" or "upstream"), as an
    admin moving between the two would: stop its controller, apply the other's manifests over
    the same names, delete what only the old install had, start the new controller. The
    webhook Secret is deleted so the new controller makes its own certificate, as on a fresh
    install. TrainJobs and runtimes stay."""
    if to not in ("ours", "upstream"):
        raise ValueError(f"controller: {to!r}; accepted: ours, upstream")
    old_name, new_name = ("upstream", "trainer") if to == "ours" else ("trainer", "upstream")
    for name in [n for n in bed.procs if n == old_name or n.startswith(old_name + "-")]:
        bed.procs.pop(name).stop()
        bed.kubectl(
            "delete", "endpointslice", f"{SERVICE}-{name}", "-n", NAMESPACE, "--ignore-not-found"
        )
    if to == "ours":
        old, old_runtimes = manifests(bed), runtimes(bed)
        new = trainer_install.manifests()
        new_runtimes = render_kustomize(trainer_install.ROOT / "manifests/overlays/runtimes")
    else:
        old = trainer_install.manifests()
        old_runtimes = render_kustomize(trainer_install.ROOT / "manifests/overlays/runtimes")
        new, new_runtimes = manifests(bed), runtimes(bed)
    # Every replica of the old controller has exited; upstream's does not release the Lease
    # when it stops (ours does), so the new one would wait out its 15 s. An admin switching
    # installs need not wait either: nothing holds the Lease any more.
    bed.kubectl("delete", "lease", LEASE, "-n", NAMESPACE, "--ignore-not-found")
    bed.kubectl("delete", "secret", SECRET, "-n", NAMESPACE, "--ignore-not-found")
    say(f"switching the bed's Kubeflow Trainer to {to}'s install")
    if to == "ours":
        proc = trainer_install.install_trainer(bed, name=new_name)
    else:
        proc = install_upstream(bed, with_runtimes=False)
        bed.apply(new_runtimes, manager="kubectl")
    gone = (identities(old) | identities(old_runtimes)) - identities(new) - identities(new_runtimes)
    for kind, namespace, name in sorted(gone):
        where = ["-n", namespace] if namespace else []
        bed.kubectl("delete", kind, name, *where, "--ignore-not-found", "--wait=false")
    say(f"{to}'s controller serves")
    return proc
