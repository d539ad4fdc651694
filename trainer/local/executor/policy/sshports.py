"""The ssh port map of a local JobSet's MPI pods, pure: which containers run sshd, on which
container port, and the host port each pod hostname of the JobSet gets. The JobSet controller
writes the map on the pods (:func:`ssh_hosts`, :data:`LOCAL_SSH`); the kubelet reads it
(:func:`own_port`, :func:`parse`) and sets sshd and the ssh client up with it
(:mod:`~trainer.local.executor.sandbox.ssh`).

On a cluster every MPI "node" pod runs sshd on the same port (2222 in mpi-operator's images)
at an address of its own. Locally all pods share one address, so:

Ports (:func:`ssh_hosts`, used by the JobSet controller)
    When a replicated job of a JobSet runs ``sshd`` (its container's command or, without one,
    its args start with an executable named ``sshd``), every pod hostname of the JobSet gets a
    host port of its own, recorded in the pod annotation :data:`LOCAL_SSH` as
    ``{"port": <sshd's container port>, "hosts": {"<hostname>": <host port>}}``. The container
    port is the sshd container's readinessProbe ``tcpSocket`` port, else its first
    ``containerPort``, else 22. :func:`own_port` maps that container port to the pod's own
    host port, so readiness probes and ``-p 2222`` style arguments follow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from trainer.jobset import contract as jsc

LOCAL_SSH = "trainer.kubeflow.org/local-ssh"
"""Pod annotation: JSON ``{"port": <container port>, "hosts": {"<hostname>": <host port>}}``."""
DEFAULT_PORT = 22
SSHD = "sshd"


def argv_of(container: Mapping[str, Any]) -> list[str]:
    return [str(a) for a in (container.get("command") or container.get("args") or [])]


def is_sshd(container: Mapping[str, Any]) -> bool:
    argv = argv_of(container)
    return bool(argv) and PurePosixPath(argv[0]).name == SSHD


def runs_sshd(pod: Mapping[str, Any]) -> bool:
    """Whether one of the pod's containers runs sshd (an MPI node pod)."""
    return any(is_sshd(ctr) for ctr in (pod.get("spec") or {}).get("containers") or [])


def sshd_port(container: Mapping[str, Any]) -> int:
    """sshd's container port: readinessProbe tcpSocket port, first containerPort, else 22."""
    port = ((container.get("readinessProbe") or {}).get("tcpSocket") or {}).get("port")
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    for p in container.get("ports") or []:
        if isinstance(p.get("containerPort"), int):
            return int(p["containerPort"])
    return DEFAULT_PORT


def _pod_spec(rjob: Mapping[str, Any]) -> dict[str, Any]:
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    return dict((job_spec.get("template") or {}).get("spec") or {})


def ssh_hosts(js: Mapping[str, Any]) -> tuple[int, list[str]] | None:
    """sshd's container port and every pod hostname of the JobSet, or None when no replicated
    job runs sshd."""
    name = str((js.get("metadata") or {}).get("name") or "")
    rjobs = (js.get("spec") or {}).get("replicatedJobs") or []
    port: int | None = None
    for rjob in rjobs:
        for ctr in _pod_spec(rjob).get("containers") or []:
            if port is None and is_sshd(ctr):
                port = sshd_port(ctr)
    if port is None:
        return None
    hosts = []
    for rjob in rjobs:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        pods = int(job_spec.get("completions") or job_spec.get("parallelism") or 1)
        for index in range(int(rjob.get("replicas", 1))):
            hosts += [jsc.pod_hostname(name, str(rjob.get("name")), index, i) for i in range(pods)]
    return port, hosts


def parse(pod: Mapping[str, Any]) -> tuple[int, dict[str, int]] | None:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOCAL_SSH)
    if not raw:
        return None
    try:
        decoded = json.loads(raw)
        return int(decoded["port"]), {str(h): int(p) for h, p in dict(decoded["hosts"]).items()}
    except (ValueError, TypeError, KeyError):
        return None


def own_port(pod: Mapping[str, Any], hostname: str) -> dict[int, int]:
    """``{sshd's container port: this pod's host port}``, or nothing."""
    parsed = parse(pod)
    if parsed is None or hostname not in parsed[1]:
        return {}
    return {parsed[0]: parsed[1][hostname]}
