"""A Service's EndpointSlice, as the EndpointSlice controller writes it
(https://kubernetes.io/docs/concepts/services-networking/endpoint-slices/): the pods its
selector matches that have an address, each with ``ready`` / ``serving`` / ``terminating``
conditions, its node and a ``targetRef``; the Service's ports with each ``targetPort``
resolved against the pods' named container ports. The local API server reads these to call a
webhook registered by ``clientConfig.service``
(:mod:`trainer.local.apiserver.core.services`; docs/local-plane.md, "Workloads and
Services"). Pure: objects in, the slice out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainer.api import jobset_contract as jc
from trainer.local.executor.controllers.policy.batch import pod_phase, pod_ready
from trainer.machinery.labels import ENDPOINTSLICE_CONTROLLER as CONTROLLER
from trainer.machinery.labels import ENDPOINTSLICE_MANAGED_BY as MANAGED_BY
from trainer.machinery.labels import SERVICE_NAME


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def in_endpoints(pod: Mapping[str, Any]) -> bool:
    """``ShouldPodBeInEndpoints``: it has an address and has not finished."""
    return bool((pod.get("status") or {}).get("podIP")) and pod_phase(dict(pod)) not in (
        "Succeeded",
        "Failed",
    )


def target_port(service_port: Mapping[str, Any], pod: Mapping[str, Any]) -> int | None:
    """The container port a Service port sends to on ``pod``: a number as is, a name looked up
    among the pod's container ports, absent the Service port itself."""
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    text = str(target or "")
    if text.isdigit():
        return int(text)
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == text and port.get("containerPort") is not None:
                return int(port["containerPort"])
    return None


def endpoint_slice(service: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The slice of ``service`` over the ``pods`` its selector matched."""
    meta = _meta(service)
    members = sorted((p for p in pods if in_endpoints(p)), key=lambda p: _meta(p).get("name", ""))
    ports: list[dict[str, Any]] = []
    for sp in (service.get("spec") or {}).get("ports") or []:
        number = next((n for p in members if (n := target_port(sp, p)) is not None), None)
        entry: dict[str, Any] = {"name": sp.get("name", ""), "protocol": sp.get("protocol", "TCP")}
        if number is not None:
            entry["port"] = number
        if sp.get("appProtocol"):
            entry["appProtocol"] = sp["appProtocol"]
        ports.append(entry)
    endpoints = []
    for pod in members:
        pm = _meta(pod)
        terminating = bool(pm.get("deletionTimestamp"))
        ready = pod_ready(dict(pod))
        entry = {
            "addresses": [str((pod.get("status") or {})["podIP"])],
            "conditions": {
                "ready": ready and not terminating,
                "serving": ready,
                "terminating": terminating,
            },
            "targetRef": {
                "kind": "Pod",
                "namespace": pm.get("namespace", ""),
                "name": pm.get("name", ""),
                "uid": pm.get("uid", ""),
            },
        }
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            entry["nodeName"] = node
        endpoints.append(entry)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": f"{meta.get('name', '')}-",
            "namespace": meta.get("namespace", ""),
            "labels": {SERVICE_NAME: meta.get("name", ""), MANAGED_BY: CONTROLLER},
            "ownerReferences": [
                jc.owner_reference(
                    str(meta.get("name", "")),
                    str(meta.get("uid", "")),
                    api_version="v1",
                    kind="Service",
                )
            ],
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": ports,
    }


def differs(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return any(current.get(k) != wanted.get(k) for k in ("addressType", "endpoints", "ports"))
