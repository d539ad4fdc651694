"""The local plane's Node: what a kubelet on this host registers, and how kubectl prints it."""

from __future__ import annotations

import datetime as dt

from trainer.local.apiserver.http.table.printers import BUILTIN_PRINTERS
from trainer.local.executor.node import LEASE_NAMESPACE, lease_object, node_object
from trainer.local.executor.podfields import Node

STAMP = "2026-11-27T09:00:00Z"
NOW = dt.datetime(2026, 11, 27, 9, 5, tzinfo=dt.UTC)


def test_the_node_reports_this_hosts_capacity_as_allocatable_and_is_ready() -> None:
    node = node_object(Node(cpus=8, memory=32 * 2**30, ephemeral_storage=100 * 2**30), STAMP)
    status = node["status"]
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "33554432Ki",
        "ephemeral-storage": "104857600Ki",
        "pods": "110",
    }
    assert status["allocatable"] == status["capacity"]
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert [(c["status"], c["reason"]) for c in ready] == [("True", "KubeletReady")]
    assert node["metadata"]["name"] == "local"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "local"


def test_kubectl_get_nodes_prints_status_roles_age_and_version() -> None:
    columns, printer = BUILTIN_PRINTERS[("", "Node")]
    node = node_object(Node(cpus=2), STAMP)
    node["metadata"]["creationTimestamp"] = STAMP
    row = printer(node, NOW)
    names = [c["name"] for c in columns]
    assert dict(zip(names, row, strict=True))["Status"] == "Ready"
    assert row[:4] == ["local", "Ready", "<none>", "5m"]
    node["spec"]["unschedulable"] = True
    node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    node["status"]["conditions"][-1]["status"] = "False"
    assert printer(node, NOW)[1:3] == ["NotReady,SchedulingDisabled", "control-plane"]


def test_the_lease_is_held_by_the_node_in_kube_node_lease() -> None:
    lease = lease_object("local", "2026-11-27T09:00:00.000000Z")
    assert lease["metadata"] == {"name": "local", "namespace": LEASE_NAMESPACE}
    assert lease["spec"]["holderIdentity"] == "local"
    assert lease["spec"]["leaseDurationSeconds"] == 40
