"""sshd ports for MPI pods that come without
:data:`~trainer.local.executor.policy.sshports.LOCAL_SSH`: the pods of a real JobSet controller, run
by ``trainer node`` (docs/local-plane.md, "A node of a real cluster").

On the plane, our JobSet controller gives every pod hostname of an MPI JobSet a host port of
its own and writes the map on the pods (:func:`~trainer.local.executor.policy.sshports.ssh_hosts`).
A real JobSet controller writes nothing of the kind, and a node's credentials may not read the
JobSet, so the node decides instead, from the pods it runs:

- A JobSet (by its pods' ``jobset.sigs.k8s.io/jobset-name`` label) is an MPI one once a pod of
  it that this node runs starts ``sshd``; sshd's container port is then that container's, as
  :func:`~trainer.local.executor.policy.sshports.sshd_port` finds it.
- Each hostname of that JobSet's pods on this node gets a host port, held while a pod of the
  JobSet is here; every pod of the JobSet gets the map in the node's copy of it (never written
  to the API: NodeRestriction lets a kubelet write a pod's status only).
- The launcher's ssh client knows the hostnames of the pods here when it starts. The MPI
  runtimes start it once the node pods are Ready (``dependsOn``), so it knows them all; an MPI
  JobSet whose pods are spread over several nodes cannot be run this way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from trainer.jobset import contract as jsc
from trainer.local.executor.policy.podfields import pod_hostname
from trainer.local.executor.policy.sshports import LOCAL_SSH, is_sshd, sshd_port
from trainer.local.executor.sandbox.ports import PortAllocator


def _group(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(namespace, JobSet name) of a JobSet's pod, else None."""
    meta = pod.get("metadata") or {}
    jobset = (meta.get("labels") or {}).get(jsc.LABEL_JOBSET_NAME)
    if not jobset:
        return None
    return str(meta.get("namespace") or "default"), str(jobset)


def _sshd_port(pods: Iterable[dict[str, Any]]) -> int | None:
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            if is_sshd(container):
                return sshd_port(container)
    return None


class NodeSSHPorts:
    """The host ports this node gave the pod hostnames of the MPI JobSets it runs."""

    def __init__(self, allocator: PortAllocator | None = None) -> None:
        self._allocator = allocator
        self._ports: dict[tuple[str, str, str], int] = {}  # (namespace, JobSet, hostname)
        self._mpi: set[tuple[str, str]] = set()  # JobSets a pod of which runs sshd here

    def overlay(self, pod: dict[str, Any], here: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """``pod`` with the :data:`LOCAL_SSH` map this node assigns, given the other pods
        ``here``; ``pod`` itself when it has a map already or is not an MPI JobSet's."""
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        group = _group(pod)
        if LOCAL_SSH in annotations or group is None:
            return pod
        if _sshd_port([pod]) is not None:
            self._mpi.add(group)
        if group not in self._mpi:  # no pass over the node's pods for other JobSets
            return pod
        own = pod_hostname(pod)
        pods = [p for p in here if _group(p) == group and pod_hostname(p) != own] + [pod]
        port = _sshd_port(pods)
        if port is None:
            return pod
        if self._allocator is None:
            self._allocator = PortAllocator()
        hosts: dict[str, int] = {}
        for peer in pods:
            key = (*group, pod_hostname(peer))
            if key not in self._ports:
                self._ports[key] = self._allocator.allocate("/".join(group))
            hosts[key[2]] = self._ports[key]
        value = json.dumps({"port": port, "hosts": hosts}, sort_keys=True)
        return {**pod, "metadata": {**meta, "annotations": {**annotations, LOCAL_SSH: value}}}

    def release(self, pod: dict[str, Any], here: Iterable[dict[str, Any]]) -> None:
        """Give back the ports of ``pod``'s JobSet once none of its pods is ``here``."""
        group = _group(pod)
        if group is None or group not in self._mpi or any(_group(p) == group for p in here):
            return
        self._mpi.discard(group)
        if self._allocator is None:
            return
        self._allocator.release("/".join(group))
        for key in [k for k in self._ports if k[:2] == group]:
            del self._ports[key]
