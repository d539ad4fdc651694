"""How the local API server writes an AdmissionReview for a webhook and reports a failed call
(trainer.local.apiserver.core.admission): as kube-apiserver, compact UTF-8 JSON, and a failed call's
reason quoting the webhook's Status message when it sent one."""

from __future__ import annotations

import json

from trainer.local.apiserver.core.admission import encode_review, http_error


def test_reviews_are_compact_utf8() -> None:
    review = {"request": {"uid": "u", "object": {"data": {"k": "é <tag> & ✓"}}}}
    body = encode_review(review)
    assert body == '{"request":{"uid":"u","object":{"data":{"k":"é <tag> & ✓"}}}}'.encode()
    assert json.loads(body) == review


def test_a_lone_surrogate_is_escaped_instead_of_failing() -> None:
    review = {"request": {"uid": "u", "object": {"v": "\ud800"}}}
    body = encode_review(review)
    assert b"\\ud800" in body
    assert json.loads(body) == review


def test_a_failed_call_quotes_the_webhooks_status_message() -> None:
    status = {"kind": "Status", "code": 413, "message": "request body of 9 MiB is too large"}
    assert http_error(413, json.dumps(status).encode()) == (
        "the server responded with HTTP 413: request body of 9 MiB is too large"
    )
    assert http_error(502, b"<html>bad gateway</html>") == "the server responded with HTTP 502"
    assert http_error(500, b'["not", "a", "status"]') == "the server responded with HTTP 500"
    assert len(http_error(500, json.dumps({"message": "x" * 5000}).encode())) < 600
