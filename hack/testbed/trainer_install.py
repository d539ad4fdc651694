"""Our product on the bed, as an admin installs it (docs/testbed.md, "Our install").

The standalone overlay and the runtimes overlay are applied with ``kubectl apply
--server-side`` as docs/install.md says; the controller Deployment's container (``trainer
controller`` with the Deployment's arguments, its ServiceAccount's token and RBAC, the
ConfigMap as its config file) runs as a process beside the others (:mod:`addons`), so every
request it makes is authorised by the manifests' RBAC alone. Its webhook manages its own
certificate (Secret, caBundle injection) and kube-apiserver calls it.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from addons import (
    config_map_data,
    deployment,
    render_kustomize,
    route_service,
    run_controller_pod,
    write_config,
)
from bed import Bed
from netns import POD_ADDRESS
from procs import Proc, http_ok, wait_for

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "kubeflow-system"
SERVICE = "kubeflow-trainer-controller-manager"
CONFIG = "kubeflow-trainer-config"
CONFIG_FILE = "controller_manager_config.yaml"


def manifests() -> list[dict[str, Any]]:
    return render_kustomize(ROOT / "manifests/overlays/standalone")


def with_short_lease(objects: list[dict[str, Any]], config: str = CONFIG) -> list[dict[str, Any]]:
    """The manifests with the controller's Lease at 5 s (renewed within 4 s, tried every 1 s)
    instead of the install's 15 s, as an admin may set them (docs/high-availability.md): a
    test that waits out a killed leader's Lease waits 5 s. The ConfigMap is named ``config``
    (the Deployment's volume follows it), so a second install's replicas can read it beside
    the first's."""
    out = copy.deepcopy(objects)
    for obj in out:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == CONFIG:
            settings = yaml.safe_load(obj["data"][CONFIG_FILE])
            settings["leaderElection"].update(
                leaseDuration="5s", renewDeadline="4s", retryPeriod="1s"
            )
            obj["data"][CONFIG_FILE] = yaml.safe_dump(settings)
            obj["metadata"]["name"] = config
    for volume in deployment(out)["spec"]["template"]["spec"].get("volumes", []):
        if (volume.get("configMap") or {}).get("name") == CONFIG:
            volume["configMap"]["name"] = config
    return out


def install_manifests(bed: Bed) -> list[dict[str, Any]]:
    """Everything of the standalone overlay but the Deployment, then the runtimes overlay once
    the webhook serves (the runtimes are admitted through it)."""
    objects = manifests()
    bed.apply([o for o in objects if o["kind"] != "Deployment"], manager="kubectl")
    bed.wait_crds_established()
    return objects


def _container_args(objects: list[dict[str, Any]]) -> list[str]:
    container = deployment(objects)["spec"]["template"]["spec"]["containers"][0]
    return [a for a in container.get("args", []) if not a.startswith("--config=")]


def start_controller(bed: Bed, objects: list[dict[str, Any]], name: str = "trainer") -> Proc:
    """One replica of the controller Deployment, as a process."""
    config = config_map_data(objects, CONFIG)
    python = os.environ.get("TRAINER_TESTBED_PYTHON", sys.executable)

    def argv(folder: Path, ports: dict[str, int]) -> list[str]:
        config["webhook"] = {
            **config.get("webhook", {}),
            "port": ports["webhook"],
            "host": POD_ADDRESS,
        }
        config["metrics"] = {
            **config.get("metrics", {}),
            "bindAddress": f"127.0.0.1:{ports['metrics']}",
        }
        config["health"] = {
            **config.get("health", {}),
            "healthProbeBindAddress": f"127.0.0.1:{ports['health']}",
        }
        path = write_config(folder, config)
        # The image's entrypoint is `trainer controller` (Dockerfile).
        return [
            python,
            "-m",
            "trainer.cli.main",
            "controller",
            f"--config={path}",
            *_container_args(objects),
        ]

    proc = run_controller_pod(
        bed, name, NAMESPACE, objects, argv, ("webhook", "metrics", "health"),
        env={"POD_NAMESPACE": NAMESPACE, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    route_service(bed, NAMESPACE, SERVICE, proc.ports["webhook"], "webhook", replica=name)
    health = f"http://127.0.0.1:{proc.ports['health']}/healthz"
    wait_for("/healthz", lambda: http_ok(health), 60, proc, 0.2)
    return proc


def wait_webhook(bed: Bed, proc: Proc, timeout: float = 60) -> None:
    """Until kube-apiserver gets our webhook's verdict on a TrainJob (the caBundle injected)."""
    probe = yaml.safe_dump(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "testbed-probe", "namespace": "default"},
            "spec": {"runtimeRef": {"name": "testbed-no-such-runtime"}},
        }
    )

    def answered() -> bool:
        done = bed.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
        return (
            "testbed-no-such-runtime" in done.stderr and "failed calling webhook" not in done.stderr
        )

    wait_for("its webhook, called by kube-apiserver", answered, timeout, proc, 0.3)


def install_trainer(bed: Bed, name: str = "trainer") -> Proc:
    objects = install_manifests(bed)
    proc = start_controller(bed, objects, name)
    wait_webhook(bed, proc)
    runtimes = render_kustomize(ROOT / "manifests/overlays/runtimes")
    bed.apply(runtimes, manager="kubectl")
    return proc
