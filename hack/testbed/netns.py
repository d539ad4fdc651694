"""The bed's own network namespace (docs/testbed.md, "Its network").

kube-apiserver calls webhooks and aggregated APIs at their EndpointSlices' addresses, and an
EndpointSlice may not hold a loopback address. So the bed runs in a network namespace of its
own, made for it, whose loopback interface also carries ``POD_ADDRESS`` (192.0.2.1, a
documentation address): the controllers' webhooks listen there; the addresses of
``AGENT_POD_CIDR`` are routed to it too, for the node agent's pods. A veth pair (``bed0``, with
198.51.100.1/24 and a default route to a gateway that does not exist, and its peer) stands for
a host's network interface: the node agent's pod sandboxes get theirs from it through pasta,
which OpenMPI's daemons need (docs/testbed.md, "Its network"). Nothing leaves the namespace
(the peer leads nowhere; KWOK's pod addresses are never dialled).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

POD_ADDRESS = "192.0.2.1"
AGENT_POD_CIDR = "192.0.2.128/25"
"""Routed to loopback: the pod network of the bed's node agent (``trainer node --pod-cidr``)."""
_SETUP = (
    f"set -e; ip link set lo up; ip addr add {POD_ADDRESS}/32 dev lo; "
    f"ip route add local {AGENT_POD_CIDR} dev lo; "
    "ip link add bed0 type veth peer name bed1; ip addr add 198.51.100.1/24 dev bed0; "
    "ip link set bed1 up; ip link set bed0 up; ip route add default via 198.51.100.254; "
    'exec "$@"'
)


def inside() -> bool:
    """Whether this process runs in a namespace set up as the bed needs."""
    argv = ["ip", "-o", "addr", "show", "dev", "lo"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    return f" {POD_ADDRESS}/32 " in out.stdout


def wrap(argv: Sequence[str]) -> list[str]:
    """``argv`` run in a new network namespace (and, without root, a user namespace too)."""
    if os.geteuid() == 0:
        prefix = ["unshare", "--net"]
    else:
        prefix = ["unshare", "--user", "--map-root-user", "--net"]
    return [*prefix, "/bin/sh", "-c", _SETUP, "sh", *argv]


def enter_argv(pid: int, argv: Sequence[str]) -> list[str]:
    """``argv`` run in the network namespace of process ``pid`` (``hack/cluster.py exec``)."""
    if os.geteuid() == 0:
        return ["nsenter", f"--target={pid}", "--net", "--", *argv]
    return ["nsenter", f"--target={pid}", "--user", "--net", "--preserve-credentials", "--", *argv]


def main(argv: Sequence[str]) -> int:
    """``netns.py -- COMMAND...``: COMMAND in a new namespace set up for the bed (make
    cluster-test runs pytest so)."""
    command = list(argv[1:] if argv and argv[0] == "--" else argv)
    if not command:
        print("usage: netns.py -- COMMAND...", file=sys.stderr)
        return 2
    if inside():
        return subprocess.call(command)
    return subprocess.call(wrap(command))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
