"""Structural-schema (CRD ``openAPIV3Schema``) validation, defaulting and pruning, with CEL.

Pure functions, no I/O: shared by ``trainer validate`` and the embedded API server.

* :func:`validate` - every schema and ``x-kubernetes-validations`` error of an object;
* :func:`apply_defaults` - a copy with the schema's defaults filled in;
* :func:`prune` - a copy without unknown fields, and the paths removed;
* :func:`check` - prune, default and validate, as the apiserver does on a write.
"""

from __future__ import annotations

from .cel import CompiledRule, compile_rule, compile_rules, evaluate_rule, to_cel, validate_rules
from .defaults import ABSENT, apply_defaults, defaults_are_pruned, prune
from .memo import RuleMemo
from .validate import BLOCKED_RULES_MESSAGE, check, validate

__all__ = [
    "ABSENT",
    "BLOCKED_RULES_MESSAGE",
    "CompiledRule",
    "RuleMemo",
    "apply_defaults",
    "check",
    "compile_rule",
    "compile_rules",
    "defaults_are_pruned",
    "evaluate_rule",
    "prune",
    "to_cel",
    "validate",
    "validate_rules",
]
