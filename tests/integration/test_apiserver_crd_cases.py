"""The local API server answers every case of the CRD validation table (tests/crd_cases) as
the table says: the HTTP status and, for a refusal, kube-apiserver's message word for word
(tests/crd_cases/messages.yaml). The cluster tier sends the same cases to a real
kube-apiserver (tests/cluster/test_crd_validation.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.crd_cases import BY_ID, CASES, MESSAGES
from tests.crd_wire import Answer, answers, local_api_server


async def _answers() -> dict[str, Answer]:
    async with local_api_server() as endpoint:
        return await answers(endpoint, CASES)


@pytest.fixture(scope="module")
def answered() -> dict[str, Answer]:
    return asyncio.run(_answers())


def test_every_refusal_has_its_message_and_no_more() -> None:
    assert set(MESSAGES) == {case.id for case in CASES if not case.ok}


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_the_local_api_server_answers_as_kube_apiserver(
    answered: dict[str, Answer], case_id: str
) -> None:
    case = BY_ID[case_id]
    answer = answered[case_id]
    assert (answer.code, answer.message) == (case.code, case.message)
