"""``trainer convert``: Training Operator v1 jobs -> TrainJob + TrainingRuntime (pure).

See :mod:`trainer.convert.v1` for the mapping and ``docs/convert.md`` for the user guide.
"""

from __future__ import annotations

from trainer.convert.v1 import Converted, ConvertError, ConvertWarning, convert

__all__ = ["ConvertError", "ConvertWarning", "Converted", "convert"]
