"""Controller status writes leave ``status.trainerStatus`` to the status server: it is not
compared and never sent, so a stale cached copy cannot overwrite a newer report."""

from __future__ import annotations

from typing import Any

from trainer.api.v1alpha1 import TrainJob
from trainer.controller.reconcile import Reconciler


class FakeKube:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_status(self, _gvr: Any, _ns: Any, _name: str, patch: dict[str, Any]) -> Any:
        self.patches.append(patch)
        return {"metadata": {"name": "job", "namespace": "ns"}, **patch}


class FakeInformer:
    def record_write(self, _obj: Any) -> None:
        pass


class FakeCaches:
    trainjobs = FakeInformer()


STALE = {"progressPercentage": 10, "lastUpdatedTime": "2026-01-01T00:00:00Z"}


def reconciler(kube: FakeKube) -> Reconciler:
    rec = Reconciler.__new__(Reconciler)
    rec.kube = kube  # type: ignore[assignment]
    rec.caches = FakeCaches()  # type: ignore[assignment]

    async def no_events(*_a: Any) -> None:
        return None

    rec._transition_events = no_events  # type: ignore[method-assign,assignment]
    return rec


async def test_status_patch_never_carries_trainer_status() -> None:
    kube = FakeKube()
    data = {
        "metadata": {"name": "job", "namespace": "ns"},
        "status": {"state": "Pending", "trainerStatus": STALE},
    }
    job = TrainJob.from_wire(data)
    desired = {"state": "Running", "trainerStatus": STALE}
    assert await reconciler(kube)._write_status(job, data, desired)
    assert kube.patches == [{"status": {"state": "Running"}}]


async def test_only_a_trainer_status_difference_writes_nothing() -> None:
    kube = FakeKube()
    data = {"metadata": {"name": "job", "namespace": "ns"}, "status": {"state": "Running"}}
    job = TrainJob.from_wire(data)
    desired = {"state": "Running", "trainerStatus": STALE}
    assert await reconciler(kube)._write_status(job, data, desired)
    assert kube.patches == []
