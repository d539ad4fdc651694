"""``trainer convert``: Training Operator v1 jobs -> TrainJob + TrainingRuntime (pure).

See :mod:`trainer.convert.v1` for the mapping and ``docs/convert.md`` for the user guide.
"""

from __future__ import annotations

from trainer.convert.v1 import RUNTIME_MODES, convert
from trainer.convert.v1job import Converted, ConvertError, ConvertWarning

__all__ = ["RUNTIME_MODES", "ConvertError", "ConvertWarning", "Converted", "convert"]
