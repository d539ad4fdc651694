"""Table responses of the embedded API server: what ``kubectl get`` prints."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
import yaml

from tests import builders as b
from trainer.api import crds
from trainer.local.apiserver import APIServer
from trainer.local.apiserver.core import crd
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.http import table
from trainer.local.apiserver.resources import ResourceType

NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def ago(**kw: float) -> str:
    return (NOW - dt.timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def server() -> APIServer:
    s = APIServer()
    s.storage.hooks.clock.set(NOW)
    return s


def trainjob_type() -> ResourceType:
    (rt,) = crd.resource_types(crds.trainjob_crd())
    return rt


def cells(tbl: dict[str, Any]) -> list[list[Any]]:
    return [row["cells"] for row in tbl["rows"]]


def names(tbl: dict[str, Any]) -> list[str]:
    return [c["name"] for c in tbl["columnDefinitions"]]


def trainjob(name: str, **status: Any) -> dict[str, Any]:
    data = b.trainjob(name, namespace="ml", num_nodes=3, status=status)
    data["metadata"]["creationTimestamp"] = ago(minutes=5)
    return data


# --- custom resources ------------------------------------------------------------------------


def test_trainjob_printer_columns(server: APIServer) -> None:
    rt = trainjob_type()
    done = trainjob(
        "done",
        state="Complete",
        conditions=[
            {"type": "Suspended", "status": "False"},
            {"type": "Complete", "status": "True"},
        ],
    )
    running = trainjob("running")
    running["spec"] = {"runtimeRef": {"name": "torch-distributed"}}
    body = {"kind": "TrainJobList", "metadata": {"resourceVersion": "42"}, "items": [done, running]}

    tbl = table.to_table(server.storage, rt, body, is_list=True, include_object="")

    assert tbl["kind"] == "Table" and tbl["apiVersion"] == "meta.k8s.io/v1"
    assert tbl["metadata"] == {"resourceVersion": "42"}
    assert names(tbl) == ["Name", "State", "Runtime", "Nodes", "Age"]
    assert [c["type"] for c in tbl["columnDefinitions"]] == [
        "string",
        "string",
        "string",
        "integer",
        "date",
    ]
    assert tbl["columnDefinitions"][0]["format"] == "name"
    assert cells(tbl) == [
        ["done", "Complete", "torch-distributed", 3, "5m"],
        ["running", None, "torch-distributed", None, "5m"],
    ]


def test_crd_without_columns_prints_name_and_age(server: APIServer) -> None:
    rt = ResourceType("example.com", "v1", "Widget", "widgets", True, builtin=False, schema={})
    obj = {"metadata": {"name": "w", "creationTimestamp": ago(hours=3, minutes=5)}}

    tbl = table.to_table(server.storage, rt, obj, is_list=False, include_object="None")

    assert names(tbl) == ["Name", "Age"]
    assert tbl["columnDefinitions"][1]["type"] == "date"
    assert tbl["rows"] == [{"cells": ["w", "3h5m"]}]


def test_column_attributes_come_from_the_crd(server: APIServer) -> None:
    rt = ResourceType(
        "example.com",
        "v1",
        "Widget",
        "widgets",
        True,
        builtin=False,
        columns=[
            {"name": "Size", "type": "number", "jsonPath": ".spec.size", "priority": 1},
            {"name": "Ok", "type": "boolean", "jsonPath": ".status.ok", "description": "d"},
            {"name": "Tags", "type": "string", "jsonPath": ".spec.tags", "format": "x"},
            {"name": "Broken", "type": "string", "jsonPath": ".spec[?("},
        ],
    )
    obj = {"metadata": {"name": "w"}, "spec": {"size": 2, "tags": ["a"]}, "status": {"ok": True}}

    tbl = table.to_table(server.storage, rt, obj, is_list=False, include_object="None")

    size, ok, tags = tbl["columnDefinitions"][1:4]
    assert (size["priority"], ok["description"], tags["format"]) == (1, "d", "x")
    assert cells(tbl) == [["w", 2.0, True, '["a"]', None]]


@pytest.mark.parametrize(
    ("type_", "value", "cell"),
    [
        ("string", "x", "x"),
        ("string", 3, "3"),
        ("string", False, "false"),
        ("string", {"a": 1}, '{"a":1}'),
        ("integer", 3, 3),
        ("integer", 3.7, 3),
        ("integer", "3", None),
        ("integer", True, None),
        ("number", 2, 2.0),
        ("number", "2", None),
        ("boolean", True, True),
        ("boolean", "true", None),
        ("date", ago(seconds=30), "30s"),
        ("date", ago(minutes=7, seconds=3), "7m3s"),
        ("date", ago(days=3, hours=4), "3d4h"),
        ("date", "yesterday", "<invalid>"),
        ("date", 5, None),
        ("unknown", "x", None),
        ("string", None, None),
    ],
)
def test_custom_cell_types(type_: str, value: Any, cell: Any) -> None:
    assert table.custom_cell(type_, value, NOW) == cell


# --- rows' objects, list metadata, errors ----------------------------------------------------


def test_include_object(server: APIServer) -> None:
    rt = trainjob_type()
    obj = trainjob("x")

    meta = table.to_table(server.storage, rt, obj, is_list=False, include_object="Metadata")
    full = table.to_table(server.storage, rt, obj, is_list=False, include_object="Object")
    none = table.to_table(server.storage, rt, obj, is_list=False, include_object="None")

    assert meta["rows"][0]["object"] == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }
    assert full["rows"][0]["object"] == obj
    assert "object" not in none["rows"][0]
    with pytest.raises(APIError) as err:
        table.to_table(server.storage, rt, obj, is_list=False, include_object="Everything")
    assert err.value.code == 400
    assert "includeObject" in err.value.message


def test_list_paging_metadata_is_kept(server: APIServer) -> None:
    rt = server.storage.resource("v1", "ConfigMap")
    body = {
        "metadata": {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 4},
        "items": [],
    }
    tbl = table.to_table(server.storage, rt, body, is_list=True, include_object="Metadata")
    assert tbl["metadata"] == {"resourceVersion": "9", "continue": "abc", "remainingItemCount": 4}
    assert tbl["rows"] == []


def test_single_object_table_carries_its_resource_version(server: APIServer) -> None:
    rt = server.storage.resource("v1", "ConfigMap")
    obj = {"metadata": {"name": "c", "resourceVersion": "17"}, "data": {"a": "1"}}
    tbl = table.to_table(server.storage, rt, obj, is_list=False, include_object="")
    assert tbl["metadata"] == {"resourceVersion": "17"}


def test_watch_events_are_one_row_tables(server: APIServer) -> None:
    rt = trainjob_type()
    obj = trainjob("x", state="Failed", conditions=[{"type": "Failed", "status": "True"}])
    line = table.watch_line(server.storage, rt, "MODIFIED", obj, include_object="Metadata")

    event = json.loads(line)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert event["type"] == "MODIFIED"
    assert event["object"]["kind"] == "Table"
    assert cells(event["object"]) == [["x", "Failed", "torch-distributed", 3, "5m"]]

    bookmark = {"kind": "TrainJob", "metadata": {"resourceVersion": "12"}}
    marked = table.event_table(server.storage, rt, "BOOKMARK", bookmark, include_object="Metadata")
    assert (marked["kind"], marked["rows"], marked["metadata"]) == (
        "Table",
        [],
        {"resourceVersion": "12"},
    )
    status = {"kind": "Status", "code": 410}
    assert table.event_table(server.storage, rt, "ERROR", status, include_object="") is status


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True),
        ("application/json", False),
        ("", False),
    ],
)
def test_wants_table(accept: str, wanted: bool) -> None:
    assert table.wants_table(accept) is wanted


# --- built-in kinds --------------------------------------------------------------------------


def pod(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "creationTimestamp": ago(hours=1)},
        "spec": {"containers": [{"name": "a"}, {"name": "b"}], **spec},
        "status": status,
    }


RUNNING = {"running": {"startedAt": ago(hours=1)}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod({"phase": "Pending"}), ["p", "0/2", "Pending", "0", "60m"]),
        (
            pod(
                {
                    "phase": "Running",
                    "podIP": "10.0.0.7",
                    "containerStatuses": [
                        {"name": "a", "ready": True, "state": RUNNING, "restartCount": 0},
                        {"name": "b", "ready": True, "state": RUNNING, "restartCount": 0},
                    ],
                },
                nodeName="local",
            ),
            ["p", "2/2", "Running", "0", "60m", "10.0.0.7", "local"],
        ),
        (
            pod(
                {
                    "phase": "Running",
                    "containerStatuses": [
                        {"name": "a", "ready": True, "state": RUNNING, "restartCount": 0},
                        {
                            "name": "b",
                            "ready": False,
                            "restartCount": 3,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {
                                "terminated": {"exitCode": 1, "finishedAt": ago(minutes=2)}
                            },
                        },
                    ],
                }
            ),
            ["p", "1/2", "CrashLoopBackOff", "3 (2m ago)", "60m"],
        ),
        (
            pod(
                {
                    "phase": "Failed",
                    "containerStatuses": [
                        {"name": "a", "state": {"terminated": {"exitCode": 2}}},
                        {
                            "name": "b",
                            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                        },
                    ],
                }
            ),
            ["p", "0/2", "ExitCode:2", "0", "60m"],
        ),
        (
            pod(
                {
                    "phase": "Pending",
                    "initContainerStatuses": [
                        {"name": "init", "state": {"terminated": {"exitCode": 0}}},
                        {"name": "fetch", "state": {"running": {}}},
                    ],
                },
                initContainers=[{"name": "init"}, {"name": "fetch"}],
            ),
            ["p", "0/2", "Init:1/2", "0", "60m"],
        ),
        (
            pod(
                {
                    "phase": "Pending",
                    "conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
                    ],
                }
            ),
            ["p", "0/2", "SchedulingGated", "0", "60m"],
        ),
    ],
)
def test_pod_columns(server: APIServer, obj: dict[str, Any], expected: list[Any]) -> None:
    rt = server.storage.resource("v1", "Pod")
    tbl = table.to_table(server.storage, rt, obj, is_list=False, include_object="None")
    assert names(tbl)[:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert [c["priority"] for c in tbl["columnDefinitions"]] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    row = cells(tbl)[0]
    assert len(row) == len(tbl["columnDefinitions"])
    assert row[: len(expected)] == expected


def test_terminating_pod(server: APIServer) -> None:
    obj = pod({"phase": "Running"})
    obj["metadata"]["deletionTimestamp"] = ago(seconds=1)
    tbl = table.to_table(
        server.storage, server.storage.resource("v1", "Pod"), obj, is_list=False, include_object=""
    )
    assert cells(tbl)[0][2] == "Terminating"


@pytest.mark.parametrize(
    ("spec", "status", "expected"),
    [
        (
            {"completions": 2},
            {
                "succeeded": 2,
                "startTime": ago(minutes=9),
                "completionTime": ago(minutes=5),
                "conditions": [{"type": "Complete", "status": "True"}],
            },
            ["Complete", "2/2", "4m", "60m"],
        ),
        ({"parallelism": 3}, {"startTime": ago(seconds=40)}, ["Running", "0/1 of 3", "40s", "60m"]),
        ({}, {"conditions": [{"type": "Failed", "status": "True"}]}, ["Failed", "0/1", "", "60m"]),
        (
            {"completions": 1},
            {"conditions": [{"type": "Suspended", "status": "True"}]},
            ["Suspended", "0/1", "", "60m"],
        ),
    ],
)
def test_job_columns(
    server: APIServer, spec: dict[str, Any], status: dict[str, Any], expected: list[Any]
) -> None:
    rt = server.storage.resource("batch/v1", "Job")
    spec["template"] = {"spec": {"containers": [{"name": "node", "image": "python:3.11"}]}}
    spec["selector"] = {"matchLabels": {"job": "j"}}
    obj = {
        "metadata": {"name": "j", "creationTimestamp": ago(hours=1)},
        "spec": spec,
        "status": status,
    }
    tbl = table.to_table(server.storage, rt, obj, is_list=False, include_object="None")
    assert names(tbl) == [
        "Name",
        "Status",
        "Completions",
        "Duration",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ]
    assert cells(tbl) == [["j", *expected, "node", "python:3.11", "job=j"]]


def test_namespace_configmap_secret_columns(server: APIServer) -> None:
    def one(api_version: str, kind: str, obj: dict[str, Any]) -> tuple[list[str], list[Any]]:
        obj["metadata"] = {"name": "o", "creationTimestamp": ago(days=40)}
        tbl = table.to_table(
            server.storage,
            server.storage.resource(api_version, kind),
            obj,
            is_list=False,
            include_object="",
        )
        return names(tbl), cells(tbl)[0]

    assert one("v1", "Namespace", {"status": {"phase": "Active"}}) == (
        ["Name", "Status", "Age"],
        ["o", "Active", "40d"],
    )
    assert one("v1", "ConfigMap", {"data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}) == (
        ["Name", "Data", "Age"],
        ["o", 3, "40d"],
    )
    assert one("v1", "Secret", {"type": "Opaque", "data": {"a": "MQ=="}}) == (
        ["Name", "Type", "Data", "Age"],
        ["o", "Opaque", 1, "40d"],
    )
    assert one("v1", "Service", {"spec": {"clusterIP": "10.0.0.1", "ports": [{"port": 80}]}}) == (
        ["Name", "Type", "Cluster-IP", "External-IP", "Port(s)", "Age", "Selector"],
        ["o", "ClusterIP", "10.0.0.1", "<none>", "80/TCP", "40d", "<none>"],
    )
    assert one("apiextensions.k8s.io/v1", "CustomResourceDefinition", {}) == (
        ["Name", "Created At"],
        ["o", ago(days=40)],
    )
    # kinds without a printer: Name and Age
    assert one("v1", "LimitRange", {})[0] == ["Name", "Created At"]
    assert one("coordination.k8s.io/v1", "Lease", {"spec": {"holderIdentity": "me"}}) == (
        ["Name", "Holder", "Age"],
        ["o", "me", "40d"],
    )


def test_event_columns(server: APIServer) -> None:
    event = {
        "metadata": {"name": "e1"},
        "type": "Warning",
        "reason": "BackOff",
        "message": " restarting \n",
        "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
        "firstTimestamp": ago(minutes=30),
        "lastTimestamp": ago(seconds=10),
        "count": 4,
        "source": {"component": "kubelet", "host": "local"},
    }
    tbl = table.to_table(
        server.storage,
        server.storage.resource("v1", "Event"),
        event,
        is_list=False,
        include_object="",
    )
    visible = [c["name"] for c in tbl["columnDefinitions"] if c["priority"] == 0]
    assert visible == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert cells(tbl) == [
        [
            "10s",
            "Warning",
            "BackOff",
            "pod/p",
            "spec.containers{a}",
            "kubelet, local",
            "restarting",
            "30m",
            4,
            "e1",
        ]
    ]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (125, "2m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (7 * 3600 + 59 * 60, "7h59m"),
        (8 * 3600 + 59 * 60, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (7 * 86400 + 3600, "7d1h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (731 * 86400, "2y1d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: int, text: str) -> None:
    assert table.human_duration(dt.timedelta(seconds=seconds)) == text


def test_ages_follow_the_server_clock(server: APIServer) -> None:
    rt = server.storage.resource("v1", "ConfigMap")
    obj = yaml.safe_load(f"metadata: {{name: c, creationTimestamp: '{ago(seconds=5)}'}}")
    assert (
        cells(table.to_table(server.storage, rt, obj, is_list=False, include_object=""))[0][-1]
        == "5s"
    )
    server.storage.hooks.clock.advance(3600)
    assert (
        cells(table.to_table(server.storage, rt, obj, is_list=False, include_object=""))[0][-1]
        == "60m"
    )
    obj["metadata"].pop("creationTimestamp")
    assert cells(table.to_table(server.storage, rt, obj, is_list=False, include_object=""))[0][
        -1
    ] == ("<unknown>")
