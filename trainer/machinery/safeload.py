"""One safe reader for every YAML or JSON input: files given to the CLI, the controller's
configuration file, kubeconfigs and the local API server's request bodies.

PyYAML and :func:`json.loads` trust their input. Hostile input can make them expand YAML
aliases without limit (a 1 KB "billion laughs" document becomes gigabytes once serialised),
overflow the C stack (libyaml's composer recurses once per nesting level: 50,000 nested
``[`` crash the interpreter), raise ``RecursionError`` or ``ValueError`` (integers over 4,300
digits) from deep inside the parser, or hand back objects no Kubernetes client can encode
(``!!binary``, ``!!set``, dates, ``.inf``). Every reader of untrusted input goes through
this module instead, and every refusal is one :class:`InputError` naming the source, the
line and column where known, and the limit that was exceeded.

The rules, as kube-apiserver and kubectl apply them where they have an equivalent
(docs/input-limits.md lists them for users):

* Text is UTF-8 (a leading byte-order mark is skipped); other bytes are refused with their
  byte offset, and NUL bytes (UTF-16 text) are refused by name.
* Size: each caller passes its own bound (:class:`Limits`), checked before decoding.
* Nesting: at most ``max_depth`` collections deep. libyaml's composer recursion is made safe
  first: a cheap upper bound of the document's depth is computed from the text (flow
  brackets, and the indentation and indicator prefix of each line: a block collection always
  starts at or before the end of that prefix, and the columns of nested block collections
  grow at least every second level); only when that bound is large are the parser's events
  counted (no recursion) before composing.
* Aliases: the composed node graph is measured (each distinct node once, so measuring a
  bomb is cheap) and refused when aliases expand it beyond ``alias_ratio`` times its own
  node count (at least ``alias_floor`` nodes are always allowed) or beyond ``alias_cap``
  nodes; recursive aliases are refused.
* Numbers: integers must fit in 64 bits (Kubernetes' JSON numbers are int64 or float64) and
  floats must be finite.
* Duplicate mapping keys are errors, as kubectl's strict YAML decoding and kube-apiserver's
  strict field validation report them (a merge key ``<<`` may still be overridden).
* Only JSON-compatible values: unquoted timestamps stay strings (as with sigs.k8s.io/yaml),
  ``!!binary``, ``!!set``, ``!!omap`` and ``!!pairs`` are refused, and non-string scalar keys
  become their text (``1`` -> ``"1"``, ``true`` -> ``"true"``).

Text that starts with ``{`` is tried as JSON first (as apimachinery's YAML-or-JSON decoder
sniffs it), which is much faster than YAML for large JSON objects.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MIB = 1 << 20

# libyaml's composer is recursive in C: beyond a few thousand levels it overflows the stack.
# Documents whose cheap depth bound exceeds this are checked event by event first.
_C_SAFE_DEPTH = 1000

_MERGE_TAG = "tag:yaml.org,2002:merge"
_PREFIX = re.compile(r"^[ \t?:-]*", re.M)


@dataclass(frozen=True)
class Limits:
    """Bounds for one kind of input."""

    max_bytes: int = 16 * MIB
    max_depth: int = 100
    alias_ratio: int = 10
    alias_floor: int = 10_000
    alias_cap: int = 1_000_000


FILE_LIMITS = Limits()
"""Files given to the CLI with ``-f`` (and stdin)."""

CONFIG_LIMITS = Limits(max_bytes=4 * MIB)
"""Small configuration files: the controller's ``--config`` and kubeconfigs."""


class InputError(ValueError):
    """Input refused: ``source`` (a file name, ``<stdin>``, ``request body``), the 1-based
    ``line`` and ``column`` when known, and the ``message``."""

    def __init__(
        self, source: str, message: str, line: int | None = None, column: int | None = None
    ) -> None:
        self.source = source
        self.message = message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.line is not None and self.column is not None:
            where = f"line {self.line}, column {self.column}: "
        elif self.line is not None:
            where = f"line {self.line}: "
        return f"{self.source}: {where}{self.message}"


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB and n % MIB == 0 else f"{n:,} bytes"


# --- reading ------------------------------------------------------------------------------


def read_bytes(path: str | Path, limits: Limits = FILE_LIMITS, source: str | None = None) -> bytes:
    """The bytes of a file, at most ``limits.max_bytes`` of them; :class:`InputError` for a
    missing, unreadable or too large file, a directory or a symlink loop."""
    name = source or str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except OSError as exc:
        raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limits.max_bytes:
        raise InputError(name, f"larger than the {_size(limits.max_bytes)} limit")
    return data


def read_stream(stream: IO[bytes], source: str, limits: Limits = FILE_LIMITS) -> bytes:
    """At most ``limits.max_bytes`` bytes of an open stream (stdin)."""
    data = stream.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise InputError(source, f"larger than the {_size(limits.max_bytes)} limit")
    return data


def decode(data: bytes | str, source: str, limits: Limits = FILE_LIMITS) -> str:
    """UTF-8 text without a byte-order mark; :class:`InputError` for other encodings."""
    if isinstance(data, str):
        text = data
        if len(text) > limits.max_bytes:
            raise InputError(source, f"larger than the {_size(limits.max_bytes)} limit")
    else:
        if len(data) > limits.max_bytes:
            raise InputError(source, f"larger than the {_size(limits.max_bytes)} limit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            hint = ""
            if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
                hint = " (UTF-16 text: save it as UTF-8)"
            raise InputError(
                source,
                f"not UTF-8: byte 0x{data[exc.start]:02x} at byte offset {exc.start} cannot "
                f"be decoded{hint}",
                data.count(b"\n", 0, exc.start) + 1,
            ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError(
            source,
            f"contains a NUL byte at offset {nul} (UTF-16 or binary data? only UTF-8 text is read)",
            text.count("\n", 0, nul) + 1,
        )
    return text


# --- YAML ---------------------------------------------------------------------------------


def _mark_error(source: str, message: str, mark: Any) -> InputError:
    if mark is None:
        return InputError(source, message)
    return InputError(source, message, mark.line + 1, mark.column + 1)


class _Constructor(SafeConstructor):
    """SafeConstructor that builds only what a Kubernetes object can hold."""

    allow_duplicate_keys = False

    def construct_yaml_int(self, node: ScalarNode) -> int:
        if len(node.value) > 40:
            raise ConstructorError(
                None,
                None,
                f"integer of {len(node.value)} characters is out of range "
                f"(integers are 64-bit: {INT64_MIN} to {INT64_MAX})",
                node.start_mark,
            )
        value = super().construct_yaml_int(node)
        if not INT64_MIN <= value <= INT64_MAX:
            raise ConstructorError(
                None,
                None,
                f"integer {node.value} is out of range (integers are 64-bit: "
                f"{INT64_MIN} to {INT64_MAX})",
                node.start_mark,
            )
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = super().construct_yaml_float(node)
        if not math.isfinite(value):
            raise ConstructorError(
                None,
                None,
                f"{node.value} is not a finite number (Kubernetes objects are JSON)",
                node.start_mark,
            )
        return value

    def construct_unsupported(self, node: Node) -> Any:
        raise ConstructorError(
            None,
            None,
            f"the YAML tag {node.tag} is not supported: Kubernetes objects hold only JSON values",
            node.start_mark,
        )

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, MappingNode):
            raise ConstructorError(
                None, None, f"expected a mapping, found {node.id}", node.start_mark
            )
        own = sum(1 for key, _ in node.value if key.tag != _MERGE_TAG)
        self.flatten_mapping(node)
        first_own = len(node.value) - own
        mapping: dict[Any, Any] = {}
        own_keys: set[str] | None = set() if first_own else None
        for i, (key_node, value_node) in enumerate(node.value):
            key = self.construct_object(key_node, deep=deep)
            if type(key) is not str:
                key = _key_text(key, key_node)
            if i >= first_own and not self.allow_duplicate_keys:
                seen = key in own_keys if own_keys is not None else key in mapping
                if seen:
                    raise ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f'duplicate key "{key}"',
                        key_node.start_mark,
                    )
                if own_keys is not None:
                    own_keys.add(key)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


def _key_text(key: Any, node: Node) -> str:
    """A scalar key as JSON text, the way sigs.k8s.io/yaml converts it."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(key)
    raise ConstructorError(
        None, None, "mapping keys must be strings (or numbers or booleans)", node.start_mark
    )


_Constructor.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)  # type: ignore[type-var]
_Constructor.add_constructor("tag:yaml.org,2002:float", _Constructor.construct_yaml_float)  # type: ignore[type-var]
_Constructor.add_constructor("tag:yaml.org,2002:timestamp", SafeConstructor.construct_yaml_str)  # type: ignore[type-var]
for _tag in ("binary", "set", "omap", "pairs"):
    _Constructor.add_constructor(f"tag:yaml.org,2002:{_tag}", _Constructor.construct_unsupported)  # type: ignore[type-var]

_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)

if _CParser is not None:

    class _Loader(_CParser, _Constructor, Resolver):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _Constructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML built without libyaml

    class _Loader(  # type: ignore[no-redef]
        yaml.reader.Reader,
        yaml.scanner.Scanner,
        yaml.parser.Parser,
        yaml.composer.Composer,
        _Constructor,
        Resolver,
    ):
        def __init__(self, stream: str) -> None:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)


def _depth_bound(text: str) -> int:
    """An upper bound of the nesting depth of every YAML document in ``text``."""
    prefix = max(map(len, _PREFIX.findall(text)), default=0)
    return 2 * (prefix + 1) + text.count("[") + text.count("{") + 1


def _check_event_depth(text: str, source: str, limits: Limits) -> None:
    """Count collection start/end events (the parser does not recurse) and refuse at once
    when nesting exceeds the limit, before anything is composed.

    The libyaml in PyYAML 6.0.4's wheels refuses more than 1,000 nesting levels in its
    scanner, which reads ahead of the events (a flow collection may be a simple key), so it
    can refuse before the count reaches the limit. That refusal is replaced by
    this reader's own, found by counting again with PyYAML's pure-Python parser: its scanner
    reads at most 1,024 characters ahead, so it stops just past the limit."""
    if _CParser is None:
        _count_event_depth(yaml.SafeLoader(text), source, limits)
        return
    try:
        _count_event_depth(_CParser(text), source, limits)
    except yaml.MarkedYAMLError as exc:
        if not _is_nesting_refusal(exc):
            raise
        _count_event_depth(yaml.SafeLoader(text), source, limits)
        raise  # deeper than libyaml allows but within this reader's limit


def _is_nesting_refusal(exc: yaml.MarkedYAMLError) -> bool:
    return "maximum nesting depth" in (exc.problem or "")


def _count_event_depth(parser: Any, source: str, limits: Limits) -> None:
    depth = 0
    try:
        while parser.check_event():
            event = parser.get_event()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > limits.max_depth:
                    raise _mark_error(
                        source,
                        f"nested deeper than the limit of {limits.max_depth} levels",
                        event.start_mark,
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    finally:
        parser.dispose()


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    return [n for pair in node.value for n in pair]


def _measure(root: Node, source: str, limits: Limits) -> None:
    """Refuse alias expansion beyond the limits, recursive aliases and deep nesting, on the
    composed node graph (each distinct node is visited once)."""
    if isinstance(root, ScalarNode):
        return
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, height)
    active: set[int] = {id(root)}
    stack: list[tuple[Node, Iterator[Node], list[int]]] = [(root, iter(_children(root)), [1, 0])]
    own = 1
    while stack:
        node, children, acc = stack[-1]
        for child in children:
            cid = id(child)
            known = done.get(cid)
            if known is not None:
                acc[0] += known[0]
                acc[1] = max(acc[1], known[1])
                continue
            if cid in active:
                raise _mark_error(source, "an alias refers to its own anchor", child.start_mark)
            own += 1
            if isinstance(child, ScalarNode):
                acc[0] += 1
                continue
            if len(stack) >= limits.max_depth:
                raise _mark_error(
                    source,
                    f"nested deeper than the limit of {limits.max_depth} levels",
                    child.start_mark,
                )
            active.add(cid)
            stack.append((child, iter(_children(child)), [1, 0]))
            break
        else:
            stack.pop()
            active.discard(id(node))
            count, height = acc[0], acc[1] + 1
            if height > limits.max_depth:
                raise _mark_error(
                    source,
                    f"aliases nest this document deeper than the limit of {limits.max_depth} "
                    "levels",
                    node.start_mark,
                )
            if count > limits.alias_cap:
                raise _alias_error(source, node, limits, count, own)
            done[id(node)] = (count, height)
            if stack:
                parent = stack[-1][2]
                parent[0] += count
                parent[1] = max(parent[1], height)
    total = done[id(root)][0]
    if total > max(limits.alias_ratio * own, limits.alias_floor):
        raise _alias_error(source, root, limits, total, own)


def _alias_error(source: str, node: Node, limits: Limits, count: int, own: int) -> InputError:
    bound = min(max(limits.alias_ratio * own, limits.alias_floor), limits.alias_cap)
    return _mark_error(
        source,
        f"YAML aliases expand this document to more than {min(count, limits.alias_cap + 1):,} "
        f"nodes; the limit is {bound:,} ({limits.alias_ratio} times its own {own:,} nodes, "
        f"at least {limits.alias_floor:,}, at most {limits.alias_cap:,})",
        node.start_mark,
    )


def _yaml_documents(
    text: str, source: str, limits: Limits, allow_duplicate_keys: bool = False
) -> list[Any]:
    bound = _depth_bound(text)
    if bound > _C_SAFE_DEPTH:
        _check_event_depth(text, source, limits)
    measure = "&" in text or bound > limits.max_depth
    loader = _Loader(text)
    loader.allow_duplicate_keys = allow_duplicate_keys
    try:
        docs: list[Any] = []
        while loader.check_node():
            node = loader.get_node()
            if measure and node is not None:
                _measure(node, source, limits)
            docs.append(loader.construct_document(node))
        return docs
    finally:
        loader.dispose()


def _parse_yaml(
    text: str, source: str, limits: Limits, allow_duplicate_keys: bool = False
) -> list[Any]:
    try:
        return _yaml_documents(text, source, limits, allow_duplicate_keys)
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or str(exc)
        if _is_nesting_refusal(exc):
            problem = f"nested deeper than the limit of {limits.max_depth} levels"
        elif exc.context and exc.context not in problem and "duplicate" not in problem:
            problem = f"{problem} ({exc.context})"
        if not isinstance(exc, ConstructorError):
            problem = f"YAML syntax error: {problem}"
        raise _mark_error(source, problem, exc.problem_mark or exc.context_mark) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError(
            source,
            f"control character 0x{char:02x} at offset {exc.position} is not allowed in YAML",
            text.count("\n", 0, exc.position) + 1,
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(source, f"invalid YAML: {exc}") from None
    except RecursionError:
        raise InputError(
            source, f"nested deeper than the limit of {limits.max_depth} levels"
        ) from None


# --- JSON ---------------------------------------------------------------------------------


class _NumberError(ValueError):
    """A number that no Kubernetes object can hold, found while decoding JSON."""


def _no_constant(name: str) -> Any:
    raise _NumberError(f"{name} is not a JSON number")


def _json_int(text: str) -> int:
    value = int(text) if len(text) <= 20 else INT64_MAX + 1
    if not INT64_MIN <= value <= INT64_MAX:
        shown = text if len(text) <= 30 else f"{text[:20]}... ({len(text)} digits)"
        raise _NumberError(
            f"integer {shown} is out of range (integers are 64-bit: {INT64_MIN} to {INT64_MAX})"
        )
    return value


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NumberError(f"{text[:30]} is not a finite number")
    return value


_DECODER = json.JSONDecoder(
    parse_constant=_no_constant, parse_int=_json_int, parse_float=_json_float
)


def _check_json_depth(value: Any, source: str, limits: Limits) -> None:
    """The nesting depth of decoded JSON, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limits.max_depth:
            raise InputError(source, f"nested deeper than the limit of {limits.max_depth} levels")
        members = item.values() if type(item) is dict else item
        stack.extend((m, depth + 1) for m in members if type(m) is dict or type(m) is list)


def _parse_json(text: str, source: str, limits: Limits) -> Any:
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise InputError(source, exc.msg, exc.lineno, exc.colno) from None
    except _NumberError as exc:
        raise InputError(source, str(exc)) from None
    except RecursionError:
        raise InputError(
            source, f"nested deeper than the limit of {limits.max_depth} levels"
        ) from None
    if type(value) in (dict, list) and text.count("[") + text.count("{") > limits.max_depth:
        _check_json_depth(value, source, limits)
    return value


# --- entry points -------------------------------------------------------------------------


def load_yaml_documents(
    data: bytes | str,
    source: str,
    limits: Limits = FILE_LIMITS,
    *,
    allow_duplicate_keys: bool = False,
) -> list[Any]:
    """Every document of a YAML (or JSON) stream, empty documents included as ``None``.

    ``allow_duplicate_keys`` keeps the last value of a repeated key, for callers that report
    duplicates themselves (with the field path)."""
    text = decode(data, source, limits)
    if text.lstrip()[:1] == "{":
        try:
            return [_parse_json(text, source, limits)]
        except InputError as exc:
            if exc.line is None:  # a limit, not a syntax error: YAML would refuse it too
                raise
    return _parse_yaml(text, source, limits, allow_duplicate_keys)


def load_yaml(
    data: bytes | str,
    source: str,
    limits: Limits = FILE_LIMITS,
    *,
    allow_duplicate_keys: bool = False,
) -> Any:
    """The one document of a YAML (or JSON) text; ``None`` when it is empty."""
    docs = load_yaml_documents(data, source, limits, allow_duplicate_keys=allow_duplicate_keys)
    if len(docs) > 1:
        raise InputError(source, f"expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def load_json(data: bytes | str, source: str, limits: Limits = FILE_LIMITS) -> Any:
    """A JSON value, with the same limits as YAML."""
    return _parse_json(decode(data, source, limits), source, limits)
