"""The executor's roles that ``trainer up --without`` switches off, so that the real programs
(JobSet's controller, kube-controller-manager's Job controller, kube-scheduler, KWOK as the
kubelet) play them against the local API server instead (docs/local-plane.md, "Running the
real programs against the plane")."""

from __future__ import annotations

from collections.abc import Iterable

from trainer.jobset import contract as jsc

JOBSET_CONTROLLER = jsc.CONTROLLER_NAME
JOB_CONTROLLER = "job-controller"
SCHEDULER = "scheduler"
KUBELET = "kubelet"
ROLES = (JOBSET_CONTROLLER, JOB_CONTROLLER, SCHEDULER, KUBELET)
"""In the order a TrainJob's pods pass through them; kube-controller-manager's names for its
controllers (``jobset-controller`` is JobSet's own manager's)."""


class RoleError(ValueError):
    """A role name the executor does not have; the message lists those it has."""


def parse_roles(values: Iterable[str]) -> frozenset[str]:
    """The roles named in ``values``, each a name or a comma-separated list of names."""
    found: set[str] = set()
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            if name not in ROLES:
                raise RoleError(
                    f"unknown role {name!r}: the executor's roles are {', '.join(ROLES)}"
                )
            found.add(name)
    return frozenset(found)
