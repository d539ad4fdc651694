"""Every case of our CRD validation table (tests/crd_cases) on a real kube-apiserver with only
our CRDs installed (no webhook, no controller): the same verdict as the table and as the local
API server, the same message as the local API server (which claims kube-apiserver's, word for
word; the errors of sibling fields may come in another order, since kube-apiserver walks Go
maps), the same warnings, and for an accepted write the same stored object (CRD defaults)
(docs/local-plane.md, "CRD validation").

All cases are sent at once, a few at a time, to both servers: one create with ``dryRun=All``
each, or for an update a real create of the old object, a dry-run update and a delete.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest

from tests.crd_cases import BY_ID, CASES
from tests.crd_wire import Answer, Endpoint, answers, local_api_server


def endpoint(server: Any) -> Endpoint:
    """The bed's kube-apiserver, as its administrator (the client certificate of its
    kubeconfig)."""
    context = ssl.create_default_context(cafile=str(server.pki.ca.cert))
    context.load_cert_chain(str(server.pki.admin.cert), str(server.pki.admin.key))
    return Endpoint(server.server, context)


async def both(real: Endpoint) -> tuple[dict[str, Answer], dict[str, Answer]]:
    async with local_api_server() as local:
        return await answers(real, CASES), await answers(local, CASES)


@pytest.fixture(scope="module")
def answered(crd_apiserver: Any) -> tuple[dict[str, Answer], dict[str, Answer]]:
    """Every case's answer from kube-apiserver and from the local API server."""
    return asyncio.run(both(endpoint(crd_apiserver)))


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_kube_apiserver_answers_as_the_local_api_server(
    answered: tuple[dict[str, Answer], dict[str, Answer]], case_id: str
) -> None:
    case = BY_ID[case_id]
    real, local = answered[0][case_id], answered[1][case_id]
    assert (real.code, local.code) == (case.code, case.code), (
        f"kube-apiserver: {real.code} {real.message}\nlocal: {local.code} {local.message}"
    )
    assert real.sorted_message() == local.sorted_message(), (
        f"\nkube-apiserver: {real.message}\nlocal:          {local.message}"
    )
    assert real.warnings == local.warnings
    assert real.stored == local.stored
