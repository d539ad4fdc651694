"""Pods' names inside the network sandbox (docs/local-plane.md, "The network sandbox"): a pod's
hosts file resolves its DNS names to the pods' address and that address back to its name, the
IPv4 form and the form a dual-stack socket reports a peer in (torch's TCPStore server looks
that one up, and printed ``[c10d] The hostname of the client socket cannot be retrieved.
err=-3`` for each connection when the lookup went to a DNS server the sandbox cannot reach)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from tests.integration.test_sandbox import POD, need_sandbox
from trainer.local.executor.kubelet.containers import reverse_name
from trainer.local.executor.sandbox import sandbox, ssh, uts

LOOKUPS = """
import json, socket, sys
out = {}
for name in sys.argv[1:]:
    out[name] = sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET)})
for address in ("127.0.0.1", "::ffff:127.0.0.1"):
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    where = (address, 80, 0, 0) if family == socket.AF_INET6 else (address, 80)
    try:
        out[address] = socket.getnameinfo(where, socket.NI_NAMEREQD)[0]
    except OSError as exc:
        out[address] = f"error {exc.errno}"
print(json.dumps(out))
"""


def test_the_hosts_file_names_the_pods_address_both_ways(tmp_path: Path) -> None:
    names = ssh.host_names("job-node-0-1", "job", "team")
    base = tmp_path / "base"
    base.write_text("127.0.0.1\tlocalhost\n", encoding="utf-8")
    hosts = tmp_path / "etc-hosts"
    reverse = reverse_name(names, "team", subdomain=True)
    uts.write_hosts(str(hosts), names, base=str(base), reverse=reverse)
    lines = [line.split() for line in hosts.read_text(encoding="utf-8").splitlines()]
    assert ["127.0.0.1", "localhost"] in lines
    assert ["127.0.0.1", *names] in lines
    assert [uts.V4_MAPPED_LOOPBACK, "job-node-0-1.job.team.svc.cluster.local"] in lines


def test_a_pod_without_a_subdomain_is_named_by_its_address() -> None:
    assert reverse_name(["p-0"], "ns", subdomain=False) == "127-0-0-1.ns.pod.cluster.local"


async def test_inside_the_sandbox_the_pods_names_resolve_both_ways(tmp_path: Path) -> None:
    need_sandbox()
    why = uts.available()
    if why:
        pytest.skip(f"processes cannot get a hosts file of their own here: {why}")
    names = ssh.host_names("p-0", "js", "ns")
    hosts = tmp_path / "etc-hosts"
    uts.write_hosts(str(hosts), names, reverse=reverse_name(names, "ns", subdomain=True))
    boxes = sandbox.Sandboxes(tmp_path / "sandboxes")
    box = await boxes.acquire(POD)
    try:
        exe, argv = uts.command(
            "p-0",
            sys.executable,
            [sys.executable, "-I", "-c", LOOKUPS, *names],
            str(hosts),
            box.fds,
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            executable=exe,
            pass_fds=[fd for fd in box.fds if fd >= 0],
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await boxes.release(POD)
    found = json.loads(out)
    assert {name: found[name] for name in names} == {name: ["127.0.0.1"] for name in names}
    assert found["127.0.0.1"] == "localhost"
    assert found["::ffff:127.0.0.1"] == "p-0.js.ns.svc.cluster.local"
