"""Every case of the JobSet admission table (tests/jobset_webhook_cases.py) sent to the local API
server, which applies JobSet's webhooks itself: each is answered with the table's verdict and
message, the ones the real JobSet v0.12.0 gives on the test bed
(tests/cluster/test_jobset_webhook.py; docs/local-plane.md, "JobSet's admission checks")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.jobset_webhook_cases import BY_ID, CASES
from tests.jobset_webhook_wire import Answer, Endpoint, answers
from trainer.api import crds
from trainer.local.apiserver import APIServer


@contextlib.asynccontextmanager
async def local_jobset_server() -> AsyncIterator[Endpoint]:
    """The local API server with JobSet's CRD installed, in this event loop."""
    server = APIServer()
    server.storage.create_unadmitted(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crds.jobset_crd()
    )
    await server.start()
    try:
        yield Endpoint(server.url, server.client_ssl_context(), "default", server.auth_headers())
    finally:
        await server.stop()


async def local_answers() -> dict[str, Answer]:
    async with local_jobset_server() as endpoint:
        return await answers(endpoint)


@pytest.fixture(scope="module")
def answered() -> dict[str, Answer]:
    return asyncio.run(local_answers())


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_the_local_api_server_answers_as_jobset_does(
    answered: dict[str, Answer], case_id: str
) -> None:
    case, answer = BY_ID[case_id], answered[case_id]
    if case.local_message:
        print(f"{case_id}: a listed difference: {case.why}\n  JobSet: {case.message}")
    assert (answer.code, answer.message) == (case.code, case.local_message or case.message)
