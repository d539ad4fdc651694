"""Generate ``trainer/local/apiserver/protobuf_schema.json``: how the local API server decodes
the built-in kinds' protobuf (``application/vnd.kubernetes.protobuf``) into their JSON form
(docs/local-plane.md, "Content types").

The schema is read from the pinned Kubernetes modules of the test bed (hack/testbed/kube):
each package's ``generated.proto`` gives the messages and field numbers (the field names are
the JSON names), and its ``types.go`` what protobuf does not say: which fields are inlined in
their parent's JSON (``json:",inline"``: a Volume's VolumeSource), which are pointers and which
``omitempty`` (gogo-protobuf writes every non-pointer scalar, zeros too; Go's JSON then leaves
out the ``omitempty`` ones). Run it again after the pins change:

    python3 hack/protobuf_schema.py
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "hack/testbed"))

from bins import source_dir  # noqa: E402

OUT = ROOT / "trainer/local/apiserver/protobuf_schema.json"
# (module, package folder, apiVersion of its kinds; "" for packages without kinds)
PACKAGES = (
    ("k8s.io/api", "core/v1", "v1"),
    ("k8s.io/api", "batch/v1", "batch/v1"),
    ("k8s.io/api", "events/v1", "events.k8s.io/v1"),
    ("k8s.io/api", "coordination/v1", "coordination.k8s.io/v1"),
    ("k8s.io/api", "policy/v1", "policy/v1"),
    ("k8s.io/api", "scheduling/v1", "scheduling.k8s.io/v1"),
    ("k8s.io/api", "authentication/v1", "authentication.k8s.io/v1"),
    ("k8s.io/api", "authorization/v1", "authorization.k8s.io/v1"),
    ("k8s.io/api", "apps/v1", "apps/v1"),
    ("k8s.io/api", "discovery/v1", "discovery.k8s.io/v1"),
    ("k8s.io/api", "rbac/v1", "rbac.authorization.k8s.io/v1"),
    ("k8s.io/api", "node/v1", "node.k8s.io/v1"),
    ("k8s.io/api", "storage/v1", "storage.k8s.io/v1"),
    ("k8s.io/api", "resource/v1", "resource.k8s.io/v1"),
    ("k8s.io/api", "admissionregistration/v1", "admissionregistration.k8s.io/v1"),
    ("k8s.io/apimachinery", "pkg/apis/meta/v1", ""),
    ("k8s.io/apimachinery", "pkg/runtime", ""),
)
META = "k8s.io.apimachinery.pkg.apis.meta.v1."
# Messages whose JSON form is a scalar (their MarshalJSON), by full name.
SPECIAL = {
    META + "Time": "time",
    META + "MicroTime": "microtime",
    META + "Duration": "duration",
    META + "FieldsV1": "fields",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "rawext",
}
SCALARS = {
    "string": "string",
    "bytes": "bytes",
    "bool": "bool",
    "int32": "int",
    "int64": "int",
    "double": "double",
    "float": "float",
}
FIELD = re.compile(r"^\s*(optional|repeated|required)?\s*([\w.]+)\s+(\w+)\s*=\s*(\d+)")
MAP = re.compile(r"^\s*map<\s*string\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)")
STRUCT = re.compile(r"^type (\w+) struct \{")
STRINGS = re.compile(r"^type (\w+) \[\]string\b")
GOFIELD = re.compile(r"^\t(\w*)\s*(\S*)\s*`([^`]*)`")


def _resolve(name: str, package: str) -> str:
    if name in SCALARS:
        return SCALARS[name]
    full = name[1:] if name.startswith(".") else f"{package}.{name}"
    return SPECIAL.get(full, full)


def parse_proto(path: Path) -> tuple[str, dict[str, dict[int, list[str]]]]:
    """The package name and each message's fields: number -> [name, shape, type], where
    shape is one (optional), list (repeated) or map (map<string, type>)."""
    package = ""
    messages: dict[str, dict[int, list[str]]] = {}
    current: dict[int, list[str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.split("//", 1)[0].rstrip()
        if line.startswith("package "):
            package = line.split()[1].rstrip(";")
        elif line.startswith("message "):
            current = messages.setdefault(f"{package}.{line.split()[1]}", {})
        elif line.startswith("}"):
            current = None
        elif current is not None:
            found = MAP.match(line)
            if found:
                value, name, number = found.groups()
                current[int(number)] = [name, "map", _resolve(value, package)]
                continue
            found = FIELD.match(line)
            if found:
                label, type_, name, number = found.groups()
                shape = "list" if label == "repeated" else "one"
                current[int(number)] = [name, shape, _resolve(type_, package)]
    return package, messages


GoField = tuple[str, bool, bool, bool]
"""A field's JSON name, and whether it is inlined, a pointer, omitempty."""


def parse_go(folder: Path) -> tuple[dict[tuple[str, int], GoField], set[str]]:
    """(struct, protobuf field number) -> its :data:`GoField`, from the Go types; and the
    types that are lists of strings in Go (``type ExtraValue []string``), which protobuf
    wraps in a message of ``items``."""
    out: dict[tuple[str, int], GoField] = {}
    strings: set[str] = set()
    for path in sorted(folder.glob("*.go")):
        if path.name.endswith("_test.go") or path.name.startswith("zz_"):
            continue
        struct = ""
        for line in path.read_text().splitlines():
            listed = STRINGS.match(line)
            if listed:
                strings.add(listed.group(1))
            found = STRUCT.match(line)
            if found:
                struct = found.group(1)
                continue
            if line.startswith("}"):
                struct = ""
                continue
            field = GOFIELD.match(line) if struct else None
            if field is None:
                continue
            _name, type_, tags = field.groups()
            proto = re.search(r'protobuf:"\w+,(\d+),', tags)
            if proto is None:
                continue
            json_tag = re.search(r'json:"([^"]*)"', tags)
            options = (json_tag.group(1) if json_tag else "").split(",")
            inline = "inline" in options[1:]
            out[(struct, int(proto.group(1)))] = (
                options[0],
                inline,
                type_.startswith("*"),
                "omitempty" in options[1:],
            )
    return out, strings


def build() -> dict[str, object]:
    messages: dict[str, dict[str, list[object]]] = {}
    kinds: dict[str, str] = {}
    for module, folder, api_version in PACKAGES:
        base = source_dir(module) / folder
        package, parsed = parse_proto(base / "generated.proto")
        go, strings = parse_go(base)
        wrapped = {f"{package}.{name}" for name in strings}
        for full, fields in parsed.items():
            short = full.rsplit(".", 1)[1]
            entry: dict[str, list[object]] = {}
            for number, (name, shape, type_) in sorted(fields.items()):
                json_name, inline, pointer, omitempty = go.get(
                    (short, number), (name, False, False, False)
                )
                flags = "i" * inline + "p" * pointer + "o" * omitempty
                shown = "strings" if type_ in wrapped else type_
                # The JSON name where Go's differs from protobuf's (BoundObjectReference's uID)
                entry[str(number)] = [json_name or name, shape, shown, flags]
            messages[full] = entry
            if api_version and fields.get(1, [""])[0] == "metadata" and not short.endswith("List"):
                kinds[f"{api_version} {short}"] = full
    return {"messages": messages, "kinds": dict(sorted(kinds.items()))}


def main() -> int:
    schema = build()
    OUT.write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(schema['kinds'])} kinds", file=sys.stderr)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
