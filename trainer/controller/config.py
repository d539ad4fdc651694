"""The controller manager's Configuration file (docs/configuration.md): ``--config`` and
``--feature-gates``.

Upstream decodes ``config.trainer.kubeflow.org/v1alpha1`` ``Configuration`` strictly (unknown
fields, wrong types and a wrong apiVersion/kind are errors), fills Go defaults, then validates
with apimachinery field errors. This module does the same with a pydantic model
(``extra="forbid"``, strict types) and reports every problem as
``<file>:<line>: <field path>: <message>``, so a user sees which line of which file to fix.

Defaults are upstream's Go defaults. Without a config file those apply, and **leader election
is then off** (``leaderElection`` is unset); the shipped config
(``manifests/base/manager/controller_manager_config.yaml``) turns it on with the Lease
``trainer.kubeflow.org``, 15s / 10s / 2s.

Deliberate differences from upstream, each stricter or clearer, never looser:

- A ``leaderElection`` block without durations gets component-base's recommended 15s / 10s /
  2s, ``resourceLock: leases`` and ``resourceName: trainer.kubeflow.org`` (upstream passes Go
  zero durations to controller-runtime, which then refuses to start).
- With ``leaderElect: true`` the durations are checked the way client-go's
  ``NewLeaderElector`` checks them (positive, leaseDuration > renewDeadline > 1.2 *
  retryPeriod) when the file is loaded, not at start-up.
- ``featureGates`` keys must be known gates (component-base's "unrecognized feature gate").
- The Go-default-for-empty rule is kept: an empty ``bindAddress``, endpoint name or cert name is
  replaced by its default, as Go's ``SetDefaults_Configuration`` does for ``""``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from trainer.controller.config_model import (
    API_VERSION,
    CLUSTER_TRAINING_RUNTIME_GROUP_KIND,
    DEFAULT_LEASE_NAME,
    GROUP,
    KIND,
    TRAINING_RUNTIME_GROUP_KIND,
    TRAINJOB_GROUP_KIND,
    CertManagement,
    ClientConnection,
    Configuration,
    ControllerConfigurationSpec,
    ControllerHealth,
    ControllerMetrics,
    ControllerWebhook,
    Duration,
    LeaderElection,
    MetricsAuth,
    StatusServer,
    TLSOptions,
)
from trainer.controller.config_validation import FieldIssue, Loc, field_path, validate
from trainer.controller.config_values import (
    CIPHER_SUITES,
    FEATURE_GATES,
    TLS_VERSIONS,
    FeatureSpec,
    format_go_duration,
    parse_feature_gates,
    parse_go_duration,
)
from trainer.machinery.safeload import CONFIG_LIMITS, InputError, decode, load_yaml, read_bytes

__all__ = [
    "API_VERSION",
    "CIPHER_SUITES",
    "CLUSTER_TRAINING_RUNTIME_GROUP_KIND",
    "DEFAULT_LEASE_NAME",
    "FEATURE_GATES",
    "GROUP",
    "KIND",
    "TLS_VERSIONS",
    "TRAINING_RUNTIME_GROUP_KIND",
    "TRAINJOB_GROUP_KIND",
    "CertManagement",
    "ClientConnection",
    "ConfigError",
    "Configuration",
    "ControllerConfigurationSpec",
    "ControllerHealth",
    "ControllerMetrics",
    "ControllerWebhook",
    "Duration",
    "FeatureSpec",
    "FieldIssue",
    "LeaderElection",
    "MetricsAuth",
    "StatusServer",
    "TLSOptions",
    "field_path",
    "format_go_duration",
    "load_config",
    "parse_config",
    "parse_feature_gates",
    "parse_go_duration",
    "validate",
]


# --- loading ----------------------------------------------------------------------------------
class ConfigError(ValueError):
    """A configuration file that cannot be used. ``issues`` holds every problem; the message
    has one ``<file>:<line>: <field>: <message>`` line per problem."""

    def __init__(self, source: str, issues: list[tuple[int | None, str, str]]) -> None:
        self.source = source
        self.issues = issues
        lines = []
        for line, field, message in issues:
            where = f"{source}:{line}" if line else source
            lines.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")
        super().__init__("\n".join(lines))


_TYPE_NAMES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be a boolean (true or false)",
    "float_type": "must be a number",
    "dict_type": "must be a map",
    "model_type": "must be a map",
    "model_attributes_type": "must be a map",
    "list_type": "must be a list",
}


def _positions(node: yaml.Node, loc: Loc, out: dict[Loc, int], dups: list[tuple[Loc, int]]) -> None:
    """Record the 1-based line of every key/item below ``node`` (and duplicate keys)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*loc, key)
            if key in seen:
                dups.append((child, key_node.start_mark.line + 1))
            seen.add(key)
            out.setdefault(child, key_node.start_mark.line + 1)
            _positions(value_node, child, out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*loc, i)
            out.setdefault(child, item.start_mark.line + 1)
            _positions(item, child, out, dups)


def _line_of(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _accepted(loc: Loc) -> list[str]:
    """Field names accepted in the object at ``loc`` (for "unknown field" messages)."""
    model: type[BaseModel] = Configuration
    for part in loc:
        target: type[BaseModel] | None = None
        for name, info in model.model_fields.items():
            if part in (info.alias, name):
                candidates = (info.annotation, *get_args(info.annotation))
                for candidate in candidates:
                    if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                        target = candidate
                break
        if target is None:
            return []
        model = target
    return sorted(info.alias or name for name, info in model.model_fields.items())


def _describe(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type"))
    loc = tuple(error.get("loc") or ())
    if kind == "extra_forbidden":
        accepted = _accepted(loc[:-1])
        hint = f"; accepted fields: {', '.join(accepted)}" if accepted else ""
        return f"unknown field {str(loc[-1])!r}{hint}"
    if kind in _TYPE_NAMES:
        value = error.get("input")
        return f"{_TYPE_NAMES[kind]}, got {type(value).__name__} {value!r}"
    if kind == "value_error":
        ctx = error.get("ctx") or {}
        return str(ctx.get("error") or error.get("msg"))
    return str(error.get("msg"))


_COMPOSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_config(text: str, source: str = "<config>") -> Configuration:
    """A validated :class:`Configuration` from YAML ``text``; ``source`` names the file in
    errors. Raises :class:`ConfigError` listing every problem with its line."""
    try:
        # The bounded reader first (UTF-8, size, depth, aliases, numbers); duplicates are
        # reported below with their field path.
        data = load_yaml(text, source, CONFIG_LIMITS, allow_duplicate_keys=True)
        root = yaml.compose(text, Loader=_COMPOSER)  # safe now: depth and size are bounded
    except InputError as exc:
        problem = exc.message.removeprefix("YAML syntax error: ")
        raise ConfigError(source, [(exc.line, "", f"invalid YAML: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [(None, "", f"invalid YAML: {exc}")]) from exc
    if not isinstance(data, dict) or root is None:
        raise ConfigError(
            source,
            [(1, "", f"must be a YAML map with apiVersion: {API_VERSION} and kind: {KIND}")],
        )
    lines: dict[Loc, int] = {}
    dups: list[tuple[Loc, int]] = []
    _positions(root, (), lines, dups)
    issues: list[tuple[int | None, str, str]] = [
        (line, field_path(loc), "duplicate field") for loc, line in dups
    ]
    for required, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if required not in data:
            issues.append((1, required, f"required: must be {expected}"))
    try:
        cfg = Configuration.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            issues.append((_line_of(loc, lines), field_path(loc), _describe(error)))
        raise ConfigError(source, issues) from None
    for issue in validate(cfg):
        issues.append((_line_of(issue.loc, lines), issue.field, issue.message))
    if issues:
        # In file order, so the message reads top to bottom like the file.
        issues.sort(key=lambda issue: issue[0] if issue[0] is not None else 1 << 30)
        raise ConfigError(source, issues)
    return cfg


def load_config(path: str | Path | None) -> Configuration:
    """The Configuration in ``path`` (``--config``), or Go's defaults when ``path`` is None or
    empty (leader election then off). Raises :class:`ConfigError` naming the file, the line and
    the field of each problem."""
    if not path:
        return Configuration()
    source = str(path)
    try:
        text = decode(read_bytes(path, CONFIG_LIMITS, source), source, CONFIG_LIMITS)
    except InputError as exc:
        if exc.message.startswith("cannot read: "):
            message = "cannot read config file: " + exc.message.removeprefix("cannot read: ")
        else:
            message = f"config file {exc.message}"
        raise ConfigError(source, [(exc.line, "", message)]) from None
    return parse_config(text, source)
