"""The ``grpc`` probe of a locally run container, as the kubelet runs it: a
``grpc.health.v1.Health/Check`` call with the probe's ``service`` (default ``""``) to the
container's port on this host, passing when the answer is ``SERVING``
(https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/#define-a-grpc-liveness-probe).
The port is a number (Kubernetes allows no port name here), mapped through the pod's port map
like every other probe's.

grpcio and grpcio-health-checking come with the ``datacache`` extra and are imported on the
first gRPC probe; without them the probe fails (the container never turns ready) and the
executor says once which extra to install. The call runs in a worker thread (grpcio's
synchronous client), with the probe's timeout as its deadline and no HTTP proxy.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from types import ModuleType
from typing import Any

MISSING_GRPC = (
    "gRPC probes need grpcio and grpcio-health-checking (the 'datacache' extra: "
    "pip install 'kubeflow-trainer-py[datacache]'); the probe fails until they are installed"
)


def grpc_modules() -> tuple[ModuleType, ModuleType, ModuleType] | None:
    """``(grpc, health_pb2, health_pb2_grpc)``, or None when they are not installed. gRPC's
    core logs only errors in this process (unless GRPC_VERBOSITY says otherwise): a probe's
    channel seeing a server stop is not news for the ``trainer run`` output."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        return (
            importlib.import_module("grpc"),
            importlib.import_module("grpc_health.v1.health_pb2"),
            importlib.import_module("grpc_health.v1.health_pb2_grpc"),
        )
    except ImportError:
        return None


def check_health(target: str, service: str, timeout: float) -> bool:
    """One Health/Check call to ``target``; True when SERVING (:func:`probe_health`)."""
    return probe_health(target, service, timeout)[0]


def probe_health(target: str, service: str, timeout: float, address: str = "") -> tuple[bool, str]:
    """One Health/Check call to ``target`` (``127.0.0.1:PORT``, or ``unix:PATH`` into a pod's
    network sandbox): whether it answered SERVING, and what the kubelet's gRPC prober says
    (``address`` is the one it names, ``target`` by default). Raises ImportError when grpcio
    is not installed."""
    modules = grpc_modules()
    if modules is None:
        raise ImportError(MISSING_GRPC)
    grpc, health_pb2, health_pb2_grpc = modules
    options: list[tuple[str, Any]] = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(target, options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return False, _rpc_failure(grpc, exc, address or target, timeout)
    if reply.status == health_pb2.HealthCheckResponse.SERVING:
        return True, "service healthy"
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return False, f'service unhealthy (responded with "{name}")'


def _rpc_failure(grpc: ModuleType, exc: Any, address: str, timeout: float) -> str:
    """The kubelet's words for a failed call (pkg/probe/grpc/grpc.go): a server it could not
    reach within the timeout (its dial blocks until then), one without the health service, a
    call over time, or the RPC error."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    within = f"{timeout:g}s"
    if code == grpc.StatusCode.UNAVAILABLE:
        return (
            f'timeout: failed to connect service "{address}" within {within}: context '
            "deadline exceeded"
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return (
            "error: this server does not implement the grpc health protocol "
            f"(grpc.health.v1.Health): {details}"
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"timeout: health rpc did not complete within {within}"
    name = code.name.title().replace("_", "") if code is not None else "Unknown"
    return f"error: health rpc probe failed: rpc error: code = {name} desc = {details}"


async def grpc_check(
    target: str, service: str, timeout: float, address: str = ""
) -> tuple[bool, str]:
    """:func:`probe_health` off the event loop."""
    return await asyncio.to_thread(probe_health, target, service, timeout, address)
