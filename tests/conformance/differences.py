"""Where the local API server answers a probe differently from kube-apiserver, and why
(docs/local-plane.md, "Held to kube-apiserver"). A probe named here checks kube-apiserver's
answer on the bed (tests/cluster/test_api_probes.py, which prints this list) and the local
server's own, documented answer in the local tier."""

from __future__ import annotations

DIFFERENCES: dict[str, str] = {
    "test_protobuf_is_answered_to_who_accepts_it": (
        "the local API server answers JSON where kube-apiserver answers protobuf; every client "
        "that asks for protobuf also accepts JSON (client-go's typed clients, kubectl) and "
        "decodes an answer by its Content-Type, so encoding every built-in kind as protobuf "
        "would buy no client anything"
    ),
}
