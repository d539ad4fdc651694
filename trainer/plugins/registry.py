"""The plugins of the build, in their declared order, and :func:`render`: the pure function
from a TrainJob and its runtime to every object the controller applies.

This is the framework's entry point: admission and the controller import this module and no
other of ``trainer.plugins`` (an import-linter contract), and reach every plugin through the
framework's phases. Adding a plugin is its module and one line in :func:`default_plugins`
(docs/extending.md)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.jobset import contract as jsc
from trainer.machinery.quantity import QuantityError
from trainer.plugins.coscheduling import CoschedulingPlugin
from trainer.plugins.datacache import DataCachePlugin
from trainer.plugins.flux import FluxPlugin
from trainer.plugins.jax import JAXPlugin
from trainer.plugins.jobset import JobSetPlugin
from trainer.plugins.mpi import MPIPlugin
from trainer.plugins.paddle import PaddlePlugin
from trainer.plugins.status import JobSetStatusPlugin
from trainer.plugins.tensorflow import TensorFlowPlugin
from trainer.plugins.torch import TorchPlugin
from trainer.plugins.trainjobstatus import TrainJobStatusPlugin
from trainer.plugins.volcano import VolcanoPlugin
from trainer.plugins.xgboost import XGBoostPlugin
from trainer.runtime.assemble import new_info
from trainer.runtime.framework import Framework, Plugin
from trainer.runtime.info import BuildContext, BuildError, Observed, Runtime
from trainer.runtime.snapshot import build_snapshot, snapshot_name


def default_plugins(*, trainjob_status: bool = False) -> list[Plugin]:
    """Every plugin, in the order they run within each phase. ``trainjob_status``: the
    TrainJobStatus plugin too (feature gate ``TrainJobStatus``)."""
    return [
        # EnforcePodSpec, ReservedEnvs and ValidateRuntime (first there: its runtime warning
        # comes before MPI's).
        DataCachePlugin(),
        # EnforceMLPolicy (the node counts they read were set when the Info was assembled:
        # trainer.runtime.podsets)
        TorchPlugin(),
        MPIPlugin(),
        JAXPlugin(),
        XGBoostPlugin(),
        TensorFlowPlugin(),
        PaddlePlugin(),
        FluxPlugin(),
        # EnforcePodGroupPolicy (and Build: the PodGroup)
        CoschedulingPlugin(),
        VolcanoPlugin(),
        # EnforcePodSpec, after DataCache
        *([TrainJobStatusPlugin()] if trainjob_status else []),
        # PreBuild and Build; the JobSet goes last.
        JobSetPlugin(),
        # Status
        JobSetStatusPlugin(),
    ]


@functools.cache
def default_framework(*, trainjob_status: bool = False) -> Framework:
    """The framework of the default plugins, built once per set of gates (plugins keep no
    per-build state)."""
    return Framework(default_plugins(trainjob_status=trainjob_status))


def framework_for(ctx: BuildContext) -> Framework:
    """The default framework with the plugins the context's feature gates enable."""
    return default_framework(
        trainjob_status=bool(ctx.feature_gates.get(c.FEATURE_TRAINJOB_STATUS, False))
    )


def render(
    trainjob: TrainJob,
    runtime: Runtime,
    *,
    observed: Observed | None = None,
    ctx: BuildContext | None = None,
    framework: Framework | None = None,
    plugins: Sequence[Plugin] | None = None,
) -> list[dict[str, Any]]:
    """Every object to apply for ``trainjob``, in apply order: the runtime snapshot (unless
    one exists), the side objects, then the JobSet. Pure: same input, same output."""
    observed = observed or Observed()
    ctx = ctx or BuildContext()
    if framework is None:
        framework = Framework(list(plugins)) if plugins is not None else framework_for(ctx)
    try:
        info = new_info(trainjob, runtime, observed)
        objects = framework.run(info, ctx)
    except QuantityError as exc:
        raise BuildError(f"invalid resource quantity: {exc}") from None
    name = info.name
    out: list[dict[str, Any]] = []
    if snapshot_name(name) not in observed.config_maps:
        out.append(build_snapshot(trainjob, runtime))
    # The JobSet goes last: everything its pods mount exists before they start.
    out.extend(o for o in objects if o.get("kind") != jsc.KIND)
    out.extend(o for o in objects if o.get("kind") == jsc.KIND)
    return out
