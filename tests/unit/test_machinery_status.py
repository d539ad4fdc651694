"""machinery.status: one reason per HTTP code and one Status body, as every layer sends them."""

from __future__ import annotations

import json

from trainer.local.apiserver.errors import APIError, not_found
from trainer.machinery import status
from trainer.statusserver.server import status_body


def test_reasons_of_the_codes_the_layers_answer() -> None:
    assert status.reason_for(404) == "NotFound"
    assert status.reason_for(409) == "Conflict"
    assert status.reason_for(413) == "RequestEntityTooLarge"
    assert status.reason_for(422) == "Invalid"
    assert status.reason_for(504) == "Timeout"


def test_unknown_code_gets_the_default() -> None:
    assert status.reason_for(418) == "Unknown"
    assert status.reason_for(418, "") == ""


def test_failure_body_field_order_and_details() -> None:
    body = status.failure(422, "Invalid", "bad", {"name": "x", "kind": "trainjobs"})
    assert json.dumps(body) == (
        '{"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", '
        '"message": "bad", "reason": "Invalid", "code": 422, '
        '"details": {"name": "x", "kind": "trainjobs"}}'
    )
    assert "details" not in status.failure(500, "InternalError", "boom")


def test_local_apiserver_and_status_server_send_the_same_shape() -> None:
    local = APIError(413, status.reason_for(413), "too large").status()
    assert local == status_body(413, "too large")
    assert not_found("trainjobs", "trainer.kubeflow.org", "a").status()["details"] == {
        "name": "a",
        "kind": "trainjobs",
        "group": "trainer.kubeflow.org",
    }
