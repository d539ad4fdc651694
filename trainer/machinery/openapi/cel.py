"""``x-kubernetes-validations``: walking a structural schema and running its CEL rules.

:func:`validate_rules` walks an object (and, on an update, the old object) along its schema and
runs each node's rules with ``self`` bound to the value at that node and, for a transition rule
(one that references ``oldSelf``), ``oldSelf`` bound to the old value at the same node, as
kube-apiserver does
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules).
Old values are correlated by property name, map key and ``x-kubernetes-list-type: map`` keys;
``optionalOldSelf`` binds ``oldSelf`` to an optional, so the rule also runs on create.

On an update, rules that do not reference ``oldSelf`` are not evaluated on a node whose value
equals the old one: kube-apiserver's CRD validation ratcheting (on by default since 1.30,
https://github.com/kubernetes/enhancements/tree/master/keps/sig-api-machinery/4008-crd-ratcheting)
ignores their failures there, and skipping them saves a status patch from re-checking the
whole spec (docs/local-plane.md, "Throughput"). Transition rules always run. Each rule sees
only what it reads of its node (:func:`.readset.project`), and a :class:`.memo.RuleMemo`
remembers outcomes by those projected values.

The parts live in sibling modules, re-exported here under the names callers import:

* :mod:`.cel_values` - JSON values as CEL values typed by the schema, and CEL equality;
* :mod:`.cel_library` - the operators and Kubernetes CEL library functions rules call;
* :mod:`.cel_compile` - compiling a rule once per text, and running it without raising;
* :mod:`.cel_failures` - a failed rule as the :class:`FieldError` a user sees.

Every failure (a syntax error, a missing key, a type mismatch) becomes a :class:`FieldError`;
nothing here raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from celpy import celtypes

from trainer.machinery.errors import INVALID, NIL_PATH, FieldError, join_path

from .cel_compile import (
    CompiledRule,
    compile_rule,
    compile_rules,
    evaluate,
    evaluate_rule,
    exception_text,
)
from .cel_failures import failure, message_from_expression
from .cel_values import OptionalValue, UnorderedList, cel_equal, to_cel
from .defaults import (
    ABSENT,
    Schema,
    child_path,
    child_schema,
    list_map_key_values,
    map_key_identity,
    sub_schema,
)
from .memo import Outcome, RuleMemo, value_key
from .readset import escape_property_name as _escape_property_name
from .readset import merge, project

__all__ = [
    "CompiledRule",
    "OptionalValue",
    "UnorderedList",
    "cel_equal",
    "compile_rule",
    "compile_rules",
    "escape_property_name",
    "evaluate",
    "evaluate_rule",
    "has_rules",
    "to_cel",
    "validate_rules",
]

escape_property_name: Final = _escape_property_name
"""The CEL name of an object property (defined with the read sets, which match on it)."""


def has_rules(schema: Any) -> bool:
    """Whether any node of the schema carries ``x-kubernetes-validations``."""
    if isinstance(schema, Mapping):
        if schema.get("x-kubernetes-validations"):
            return True
        return any(has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_rules(v) for v in schema)
    return False


def validate_rules(
    schema: Schema, obj: Any, old: Any = ABSENT, *, path: str = "", memo: RuleMemo | None = None
) -> list[FieldError]:
    """Evaluate every ``x-kubernetes-validations`` rule of the schema on ``obj``.

    ``old`` is the previous object of an update (``ABSENT`` on create); transition rules run
    only where the node exists in both, unless the rule sets ``optionalOldSelf``. Old values are
    correlated by property name, map key and ``x-kubernetes-list-type: map`` keys; items of
    other lists have no old value. ``memo`` (for this schema only) remembers rule outcomes.
    """
    errors: list[FieldError] = []
    _walk(schema, obj, old, path, errors, resource=True, memo=memo)
    return errors


def _walk(
    schema: Schema,
    value: Any,
    old: Any,
    path: str,
    errors: list[FieldError],
    *,
    resource: bool,
    unchanged: bool = False,
    memo: RuleMemo | None = None,
) -> None:
    """``unchanged``: an ancestor object equals its old value, so this node does too
    (ratcheting)."""
    if value is None:
        return
    if memo is not None and not memo.node_fact(schema, has_rules):
        return  # no rule at or below this node
    if not unchanged and old is not ABSENT and old is not None:
        unchanged = bool(value == old)
    rules = schema.get("x-kubernetes-validations")
    if isinstance(rules, list) and rules:
        _run_rules(
            schema,
            rules,
            value=value,
            old=old,
            path=path,
            errors=errors,
            resource=resource,
            ratchet=unchanged,
            memo=memo,
        )
    if isinstance(value, Mapping):
        for key, item in value.items():
            sub, is_prop = child_schema(schema, key)
            if sub is None:
                continue
            old_item = old.get(key, ABSENT) if isinstance(old, Mapping) else ABSENT
            _walk(
                sub,
                item,
                old_item,
                child_path(path, key, is_prop),
                errors,
                resource=False,
                unchanged=unchanged,
                memo=memo,
            )
    elif isinstance(value, list):
        items = sub_schema(schema.get("items"))
        if items is None:
            return
        old_items = _correlatable(schema, old)
        for i, item in enumerate(value):
            old_value: Any = ABSENT
            if old_items and isinstance(item, Mapping):
                identity = map_key_identity(list_map_key_values(schema, item))
                old_value = old_items.get(identity, ABSENT)
            # Items are not ratcheted through their list: only map-list items are correlated
            # with an old item (and compared with it), as kube-apiserver correlates them.
            _walk(items, item, old_value, join_path(path, i), errors, resource=False, memo=memo)


def _correlatable(schema: Schema, old: Any) -> dict[Any, Any]:
    """Old items of an ``x-kubernetes-list-type: map`` list by their keys; else nothing."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return {}
    out: dict[Any, Any] = {}
    for item in old:
        if isinstance(item, Mapping):
            out.setdefault(map_key_identity(list_map_key_values(schema, item)), item)
    return out


def _run_rules(
    schema: Schema,
    rules: Iterable[Any],
    *,
    value: Any,
    old: Any,
    path: str,
    errors: list[FieldError],
    resource: bool,
    ratchet: bool = False,
    memo: RuleMemo | None = None,
) -> None:
    """Evaluate ``rules`` at one node; with ``ratchet`` (the node is unchanged by an update)
    only the transition rules."""
    has_old = old is not ABSENT and old is not None
    for spec in rules:
        if not isinstance(spec, Mapping):
            continue
        rule = spec.get("rule")
        # kube-apiserver prints a rule's compile or evaluation error with the node's schema
        # type as the value, at <nil> for the root.
        where, type_name = path or NIL_PATH, str(schema.get("type") or "")
        if not isinstance(rule, str):
            errors.append(FieldError(where, INVALID, "rule compile error: no rule", type_name))
            continue
        compiled = compile_rule(rule)
        if compiled.error:
            message = f"rule compile error: {compiled.error}"
            errors.append(FieldError(where, INVALID, message, type_name))
            continue
        if ratchet and not compiled.transition:
            continue  # unchanged: kube-apiserver would ignore its failure (ratcheting)
        optional_old = spec.get("optionalOldSelf") is True
        if compiled.transition and not has_old and not optional_old:
            continue  # a transition rule runs only on update, where the node existed
        kind, text = _outcome(
            schema,
            spec,
            compiled,
            value=value,
            old=old if has_old and compiled.transition else ABSENT,
            optional_old=optional_old,
            resource=resource,
            memo=memo,
        )
        if kind == "ok":
            continue
        if kind == "error":
            errors.append(FieldError(where, INVALID, text or "", type_name))
            continue
        errors.append(failure(schema, spec, rule=rule, value=value, path=path, message=text))


def _outcome(
    schema: Schema,
    spec: Mapping[str, Any],
    compiled: CompiledRule,
    *,
    value: Any,
    old: Any,
    optional_old: bool,
    resource: bool,
    memo: RuleMemo | None,
) -> Outcome:
    """The outcome of one rule on the values it reads, from ``memo`` when it is there."""
    expression = spec.get("messageExpression")
    message = None
    if isinstance(expression, str) and expression.strip():
        message = compile_rule(expression)
    reads_self, reads_old = compiled.reads_self, compiled.reads_old
    if message is not None and message.program is not None:
        reads_self = merge(reads_self, message.reads_self)
        reads_old = merge(reads_old, message.reads_old)
    self_value = project(value, reads_self)
    old_value = project(old, reads_old) if old is not ABSENT else ABSENT
    key: tuple[Any, ...] | None = None
    if memo is not None:
        self_key = value_key(self_value, memo.max_key_bytes)
        old_key = b"" if old_value is ABSENT else value_key(old_value, memo.max_key_bytes)
        if self_key is not None and old_key is not None:
            # The node and the entry both: one entry object may sit in two nodes of a schema
            # built in code (or copied with its aliases), typed differently.
            place = (id(schema), id(spec))
            key = (place, compiled.rule, expression, optional_old, resource, self_key, old_key)
            found = memo.get(key)
            if found is not None:
                return found
    outcome = _evaluate_outcome(
        schema,
        compiled,
        message,
        value=self_value,
        old=old_value,
        optional_old=optional_old,
        resource=resource,
    )
    if memo is not None and key is not None:
        memo.put(key, outcome, keep=(schema, spec))
    return outcome


def _evaluate_outcome(
    schema: Schema,
    compiled: CompiledRule,
    message: CompiledRule | None,
    *,
    value: Any,
    old: Any,
    optional_old: bool,
    resource: bool,
) -> Outcome:
    rule = compiled.rule
    try:
        activation: dict[str, Any] = {"self": to_cel(value, schema, resource=resource)}
        if compiled.transition:
            has_old = old is not ABSENT
            old_cel = to_cel(old, schema, resource=resource) if has_old else None
            activation["oldSelf"] = OptionalValue(has_old, old_cel) if optional_old else old_cel
    except (TypeError, ValueError, OverflowError) as exc:
        return "error", f"rule evaluation error: {exception_text(exc)}"
    result, error = evaluate(compiled, activation)
    if error:
        return "error", f"rule evaluation error: {error} evaluating rule: {rule.strip()}"
    if not isinstance(result, bool | celtypes.BoolType):
        return "error", f"rule evaluation error: rule did not evaluate to a bool: {rule.strip()}"
    if result:
        return "ok", None
    return "failed", message_from_expression(message, activation)
