"""Kubernetes protobuf request bodies (what kubectl 1.32's typed clients send)."""

from __future__ import annotations

import pytest

from trainer.local.apiserver import protobuf
from trainer.local.apiserver.errors import APIError


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(field: int, data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(raw)) + raw


def vi(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = ld(1, api_version) + ld(2, kind)
    return protobuf.MAGIC + ld(1, type_meta) + ld(2, raw) + ld(3, "") + ld(4, "")


def zero_time() -> bytes:
    return vi(1, protobuf.ZERO_TIME) + vi(2, 0)


def meta(name: str, namespace: str = "", **maps: dict[str, str]) -> bytes:
    out = ld(1, name) + ld(2, "") + ld(3, namespace) + ld(8, zero_time()) + vi(7, 0)
    for number, key in ((11, "labels"), (12, "annotations")):
        for k, v in (maps.get(key) or {}).items():
            out += ld(number, ld(1, k) + ld(2, v))
    return out


def test_namespace_as_kubectl_create_namespace_sends_it() -> None:
    body = envelope("v1", "Namespace", ld(1, meta("team-a")) + ld(2, b"") + ld(3, ld(1, "")))
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a", "generation": 0},
        "spec": {},
        "status": {},
    }


def test_configmap_and_secret_maps() -> None:
    cm = envelope(
        "v1",
        "ConfigMap",
        ld(1, meta("c", "ns", labels={"app": "x"}))
        + ld(2, ld(1, "a") + ld(2, "1"))
        + ld(3, ld(1, "bin") + ld(2, b"\x00\x01")),
    )
    decoded = protobuf.decode(cm)
    assert decoded["metadata"]["labels"] == {"app": "x"}
    assert decoded["data"] == {"a": "1"}
    assert decoded["binaryData"] == {"bin": "AAE="}
    secret = envelope(
        "v1", "Secret", ld(1, meta("s", "ns")) + ld(2, ld(1, "x") + ld(2, b"y")) + ld(3, "")
    )
    decoded = protobuf.decode(secret)
    assert decoded["data"] == {"x": "eQ=="}
    assert "type" not in decoded  # empty: the server defaults it to Opaque


def test_priority_class_negative_values_and_bools() -> None:
    pc = envelope(
        "scheduling.k8s.io/v1", "PriorityClass", ld(1, meta("low")) + vi(2, -5) + vi(3, 1)
    )
    decoded = protobuf.decode(pc)
    assert (decoded["value"], decoded["globalDefault"]) == (-5, True)


def test_token_request_as_kubectl_create_token_sends_it() -> None:
    # kubectl create token default --audience a --audience b --duration 10m
    #   --bound-object-kind Pod --bound-object-name p: empty strings written, the zero
    #   creationTimestamp and status.expirationTimestamp as empty messages.
    empty_meta = b"".join(ld(n, "") for n in (1, 2, 3, 4, 5, 6)) + vi(7, 0) + ld(8, b"")
    bound = ld(1, "Pod") + ld(2, "v1") + ld(3, "p") + ld(4, "")
    spec = ld(1, "a") + ld(1, "b") + ld(3, bound) + vi(4, 600)
    status = ld(1, "") + ld(2, b"")
    body = envelope(
        "authentication.k8s.io/v1", "TokenRequest", ld(1, empty_meta) + ld(2, spec) + ld(3, status)
    )
    assert protobuf.decode(body) == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"generation": 0},
        "spec": {
            "audiences": ["a", "b"],
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"},
            "expirationSeconds": 600,
        },
        "status": {},
    }
    # without --duration kubectl leaves expirationSeconds out (the server's default applies)
    bare = envelope("authentication.k8s.io/v1", "TokenRequest", ld(1, empty_meta) + ld(2, b""))
    assert protobuf.decode(bare)["spec"] == {}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{}", 400),
        (protobuf.MAGIC + b"\x0a\xff", 400),
        (envelope("apps/v1", "Deployment", b""), 415),
    ],
)
def test_rejected_bodies(body: bytes, code: int) -> None:
    with pytest.raises(APIError) as err:
        protobuf.decode(body)
    assert err.value.code == code
