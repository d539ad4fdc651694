"""End to end: the Kubeflow Python SDK (``kubeflow`` 0.5, ``TrainerClient`` with its Kubernetes
backend) driving the local control plane through the kubeconfig ``start_local_plane`` writes,
as a user's notebook drives a cluster.

The SDK is synchronous (the ``kubernetes`` client, with worker threads for ``async_req``), while
the plane serves from this test's event loop: every SDK call runs in a worker thread
(``asyncio.to_thread``) so the loop keeps serving it.

What the SDK relies on and the plane provides: list/get of ClusterTrainingRuntimes and
TrainingRuntimes (the built-in runtimes carry the ``trainer.kubeflow.org/framework`` label and
an ancestor-labelled ``node`` container), TrainJob create/get/list/delete, a pod list with a
set-based label selector (``jobset.sigs.k8s.io/replicatedjob-name in (...)``) and
``pods/log``. A ``CustomTrainer`` function becomes a ``bash -c`` command that writes the
function to ``<file>.py`` in the working directory and runs it with ``torchrun`` (the torch
runtimes): both exist on this host, so nothing is installed (no ``packages_to_install``).

SDK 0.5 derives ``Running`` only for a TrainJob without conditions; this controller keeps its
Pending/Running state in ``status.state`` (not in conditions) so that inference still works.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import time
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from tests.e2e.test_run import until
from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane

if TYPE_CHECKING:
    from kubeflow.trainer import TrainerClient

# The SDK is imported by the tests that use it, not at collection (it takes seconds, and every
# pytest-xdist worker collects every module).
HAVE_SDK = importlib.util.find_spec("kubeflow") is not None


def sdk_module() -> Any:
    # kubeflow 0.5 declares pydantic models with class-based Config (deprecated in pydantic 2):
    # not this project's warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module("kubeflow.trainer")


pytestmark = pytest.mark.skipif(
    not HAVE_SDK, reason="needs the Kubeflow SDK (pip install -e '.[dev]' installs kubeflow)"
)

T = TypeVar("T")


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(work_dir=tmp_path, state_dir=tmp_path / "state")
    try:
        yield p
    finally:
        await p.close()


def kubeconfig(tmp_path: Path) -> Path:
    """The kubeconfig start_local_plane wrote into its state directory."""
    path = tmp_path / "state" / "kubeconfig"
    assert path.exists()
    return path


async def sdk(call: Callable[[], T]) -> T:
    """Run a (blocking) SDK call off the event loop that serves the plane."""
    return await asyncio.to_thread(call)


async def client_for(tmp_path: Path) -> TrainerClient:
    kf = sdk_module()
    config = kf.KubernetesBackendConfig(config_file=str(kubeconfig(tmp_path)), namespace="default")
    client: TrainerClient = await sdk(lambda: kf.TrainerClient(backend_config=config))
    return client


def greet(greeting: str) -> None:
    """The training function the SDK ships into the TrainJob's command (its source, run as a
    script by torchrun on every node)."""
    import os  # noqa: PLC0415 - the function runs on its own, with only its own imports

    print(f"{greeting} from node rank {os.environ['PET_NODE_RANK']}", flush=True)


def tick(count: int) -> None:
    """A training function that logs for a while (count lines, 0.3 s apart)."""
    import time  # noqa: PLC0415 - the function runs on its own, with only its own imports

    for i in range(count):
        print(f"tick {i}", flush=True)
        time.sleep(0.3)


async def test_the_sdk_lists_the_builtin_runtimes(plane: LocalPlane, tmp_path: Path) -> None:
    client = await client_for(tmp_path)
    runtimes = {rt.name: rt for rt in await sdk(client.list_runtimes)}
    assert {"torch-distributed", "torch-local-cpu"} <= runtimes.keys()
    local = runtimes["torch-local-cpu"]
    assert local.kind.value == c.KIND_CLUSTER_TRAINING_RUNTIME
    assert local.trainer.framework == "torch"
    assert local.trainer.num_nodes == 1
    assert local.trainer.command[:2] == ("bash", "-c")
    assert "torchrun" in local.trainer.command[2]
    # get_runtime falls back from the (absent) namespaced runtime to the cluster one.
    got = await sdk(lambda: client.get_runtime("torch-distributed"))
    assert got.trainer.framework == "torch"


async def test_the_sdk_trains_a_function_waits_and_reads_its_logs(
    plane: LocalPlane, tmp_path: Path
) -> None:
    client = await client_for(tmp_path)
    trainer = sdk_module().CustomTrainer(func=greet, func_args={"greeting": "hello"}, num_nodes=2)
    name = await sdk(lambda: client.train(runtime="torch-local-cpu", trainer=trainer))

    job = await sdk(
        lambda: client.wait_for_job_status(
            name, status={"Complete"}, timeout=50, polling_interval=1
        )
    )
    assert job.status == "Complete"
    assert job.num_nodes == 2
    assert sorted((s.name, s.status) for s in job.steps) == [
        ("node-0", "Succeeded"),
        ("node-1", "Succeeded"),
    ]
    assert name in [j.name for j in await sdk(client.list_jobs)]

    def logs(step: str) -> Callable[[], list[str]]:
        return lambda: list(client.get_job_logs(name, step=step))

    for step in ("node-0", "node-1"):
        lines = await sdk(logs(step))
        assert f"hello from node rank {step[-1]}" in lines, lines

    await sdk(lambda: client.delete_job(name))
    await until(
        plane,
        lambda: (
            plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, "default", name)
            is None
        ),
        timeout=30,
    )


async def test_the_sdk_follows_the_logs_of_a_running_job(plane: LocalPlane, tmp_path: Path) -> None:
    client = await client_for(tmp_path)
    name = await sdk(
        lambda: client.train(
            runtime="torch-local-cpu", trainer=sdk_module().CustomTrainer(tick, {"count": 10})
        )
    )

    def follow() -> list[str]:
        deadline = time.monotonic() + 30
        while not any(
            s.name == "node-0" and s.status == "Running" for s in client.get_job(name).steps
        ):
            assert time.monotonic() < deadline, "node-0 never ran"
            time.sleep(0.2)
        # Streams until the pod ends: every line, although the function was still running.
        return list(client.get_job_logs(name, follow=True))

    assert await sdk(follow) == [f"tick {i}" for i in range(10)]
