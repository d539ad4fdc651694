"""machinery.requests: what goes on the wire for each API verb, built without a server."""

from __future__ import annotations

import pytest

from trainer.machinery import requests as rq
from trainer.machinery.gvr import GVR

JOBS = GVR("batch", "v1", "jobs", True, "Job")
NODES = GVR("", "v1", "nodes", False, "Node")
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a b", "namespace": "ns"}}


def test_get_names_the_object_and_its_subresource() -> None:
    req = rq.get(JOBS, "ns", "j", "status")
    assert (req.method, req.path, req.verb, req.resource) == (
        "GET",
        "/apis/batch/v1/namespaces/ns/jobs/j/status",
        "get",
        "jobs.batch/status",
    )
    assert rq.get(NODES, "ignored", "n").path == "/api/v1/nodes/n"


def test_a_list_page_sends_a_continue_token_without_resource_version() -> None:
    first = rq.list_page(JOBS, "ns", label_selector="a=b", limit=5, resource_version="7")
    assert first.query == (("labelSelector", "a=b"), ("limit", "5"), ("resourceVersion", "7"))
    later = rq.list_page(JOBS, None, limit=5, resource_version="7", continue_token="tok")
    assert later.query == (("limit", "5"), ("continue", "tok"))
    assert later.path == "/apis/batch/v1/jobs"


def test_writes_carry_their_content_type_and_options() -> None:
    apply = rq.apply(JOB, JOBS, "mgr", dry_run=True)
    assert apply.content_type == "application/apply-patch+yaml"
    assert apply.query == (("fieldManager", "mgr"), ("dryRun", "All"), ("force", "true"))
    assert apply.path == "/apis/batch/v1/namespaces/ns/jobs/a%20b"
    json_patch = rq.patch(JOBS, "ns", "j", [{"op": "remove", "path": "/x"}], rq.JSON_PATCH)
    assert (json_patch.method, json_patch.content_type) == ("PATCH", rq.JSON_PATCH)
    delete = rq.delete(JOBS, "ns", "j", "Foreground", {"uid": "u"})
    assert delete.body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u"},
    }
    assert rq.create(JOB, JOBS).path == "/apis/batch/v1/namespaces/ns/jobs"


def test_a_namespaced_object_without_namespace_is_refused_before_sending() -> None:
    with pytest.raises(ValueError, match=r"Job 'x': metadata\.namespace is unset"):
        rq.create({"metadata": {"name": "x"}}, JOBS)


def test_watch_query_spells_flags_as_kubernetes_reads_them() -> None:
    req = rq.watch(JOBS, "ns", "42", 60, False, label_selector="k")
    assert req.query == (
        ("watch", "true"),
        ("timeoutSeconds", "60"),
        ("allowWatchBookmarks", "false"),
        ("resourceVersion", "42"),
        ("labelSelector", "k"),
    )


def test_answers_become_errors_with_the_status_reason() -> None:
    err = rq.error_from(409, b'{"reason": "AlreadyExists", "message": "exists"}')
    assert (err.status, err.reason, err.is_already_exists, err.is_retryable) == (
        409,
        "AlreadyExists",
        True,
        False,
    )
    assert isinstance(rq.error_from(410, b"gone"), rq.Expired)
    assert rq.error_from(503, b"").is_retryable
    with pytest.raises(rq.Expired):
        rq.watch_event(b'{"type": "ERROR", "object": {"code": 410}}')
    assert rq.watch_event(b'{"type": "ADDED", "object": {}}')["type"] == "ADDED"
