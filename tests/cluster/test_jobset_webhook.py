"""JobSet's own webhook as the judge: every case of the JobSet admission table
(tests/jobset_webhook_cases.py) sent to the bed's kube-apiserver, where JobSet v0.12.0's
webhooks and CRD answer, gets the table's verdict and message; and a JobSet the real webhooks
accept is stored as the local API server stores it (JobSet's defaults). The integration tier
holds the local API server to the same table (docs/local-plane.md, "JobSet's admission
checks")."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_jobset_webhook_cases import local_jobset_server
from tests.jobset_webhook_cases import BY_ID, CASES
from tests.jobset_webhook_wire import Answer, Endpoint, answers


def bed_endpoint(bed: Any, namespace: str) -> Endpoint:
    """The bed's kube-apiserver, as its administrator (the client certificate of its
    kubeconfig)."""
    context = ssl.create_default_context(cafile=str(bed.pki.ca.cert))
    context.load_cert_chain(str(bed.pki.admin.cert), str(bed.pki.admin.key))
    return Endpoint(bed.server, context, namespace)


async def both(real: Endpoint) -> tuple[dict[str, Answer], dict[str, Answer]]:
    async with local_jobset_server() as local:
        return await answers(real), await answers(local)


@pytest.fixture(scope="module")
def answered(bed: Any) -> Iterator[tuple[dict[str, Answer], dict[str, Answer]]]:
    """Every case's answer from the bed and from the local API server."""
    namespace = f"jsw-{uuid.uuid4().hex[:8]}"
    bed.kubectl("create", "namespace", namespace)
    try:
        yield asyncio.run(both(bed_endpoint(bed, namespace)))
    finally:
        bed.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_jobsets_webhook_answers_as_the_table_says(
    answered: tuple[dict[str, Answer], dict[str, Answer]], case_id: str
) -> None:
    case, real = BY_ID[case_id], answered[0][case_id]
    assert (real.code, real.message) == (case.code, case.message)


def spec_of(answer: Answer) -> dict[str, Any]:
    assert answer.stored is not None
    spec: dict[str, Any] = answer.stored["spec"]
    return spec


@pytest.mark.parametrize("case_id", [case.id for case in CASES if case.ok])
def test_an_accepted_jobset_is_stored_as_the_local_api_server_stores_it(
    answered: tuple[dict[str, Answer], dict[str, Answer]], case_id: str
) -> None:
    real, local = answered[0][case_id], answered[1][case_id]
    assert real.ok and local.ok
    assert spec_of(real) == spec_of(local)
