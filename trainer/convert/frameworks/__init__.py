"""One module per v1 framework: each turns a :class:`~trainer.convert.v1job.V1Job` into a
:class:`~trainer.convert.v1job.Plan` (replicated jobs, ML policy, trainer) with v1's env.

PyTorch and XGBoost share the Master + Workers shape (:mod:`.leader_worker`). Adding a kind is
a :data:`~trainer.convert.v1job.KINDS` entry and a builder here.
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.convert.frameworks.jax import convert_jax
from trainer.convert.frameworks.mpi import convert_mpi
from trainer.convert.frameworks.paddle import convert_paddle
from trainer.convert.frameworks.pytorch import convert_pytorch
from trainer.convert.frameworks.tensorflow import convert_tensorflow
from trainer.convert.frameworks.xgboost import convert_xgboost
from trainer.convert.v1job import Plan, V1Job

BUILDERS: dict[str, Callable[[V1Job], Plan]] = {
    "PyTorchJob": convert_pytorch,
    "XGBoostJob": convert_xgboost,
    "TFJob": convert_tensorflow,
    "PaddleJob": convert_paddle,
    "JAXJob": convert_jax,
    "MPIJob": convert_mpi,
}
