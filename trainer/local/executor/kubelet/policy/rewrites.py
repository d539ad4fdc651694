"""Mapping "inside a pod on a cluster" to "a process on this host": pod DNS names, ports and
mount paths rewritten in env values, command and args.

Rewrites (applied once, in a single left-to-right pass, to env values, command and args)
    - Pod DNS: ``<host>.<subdomain>`` and ``<host>.<subdomain>.<ns>[.svc[.cluster.local]]`` (and
      the headless Service ``<subdomain>.<ns>.svc[.cluster.local]``) -> ``127.0.0.1``.
    - Ports: the JobSet controller records ``{"<containerPort>": <hostPort>}`` in the pod
      annotation ``trainer.kubeflow.org/local-ports`` (:data:`LOCAL_PORTS`). Rewritten:
      ``:<port>``, ``port=<port>`` (``--master_port=29500``), an env value that is exactly a
      mapped port, an argument that is exactly a mapped port and follows an option whose name
      ends in ``port`` (``--master-port 29500``), and ``$(VAR)`` references to a variable whose
      value is exactly a mapped port. So jobs running at once never collide on 29500.
    - Mount paths: each volumeMount's ``mountPath`` used as a path prefix (``/workspace``,
      ``/workspace/model``, ``file:///workspace``; not ``/workspace2`` or ``/a/workspace``) ->
      the directory that backs it on this host (``subPath`` / ``subPathExpr`` appended), longest
      mount path first. A ``workingDir`` inside a mount becomes the process's cwd; any other
      working directory is replaced by the directory ``trainer run`` started in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from trainer.local.executor.policy.podfields import (
    DNS_LABEL,
    LOCAL_PORTS,
    LOOPBACK,
    PORT_OPTION,
    expand,
    pod_hostname,
)
from trainer.local.executor.policy.sshports import own_port

# Private-use characters stand in for "$(VAR) of an exact mapped port" during rewriting; they
# match none of the rewrite patterns and are swapped for the host port afterwards.
_HOLE_OPEN, _HOLE_CLOSE = "\ue000", "\ue001"
_HOLE = re.compile(f"{_HOLE_OPEN}([0-9]+){_HOLE_CLOSE}")


def parse_ports(pod: dict[str, Any]) -> dict[int, int]:
    """The pod's port map (:data:`LOCAL_PORTS`, plus its own sshd port from
    :data:`~trainer.local.executor.policy.sshports.LOCAL_SSH`); an absent or malformed annotation
    maps none."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOCAL_PORTS)
    ports: dict[int, int] = {}
    if raw:
        try:
            decoded = json.loads(raw)
            ports = {int(k): int(v) for k, v in dict(decoded).items()}
        except (ValueError, TypeError):
            ports = {}
    return {**ports, **own_port(pod, pod_hostname(pod))}


def _norm_mount(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p)


class Rewriter:
    """Rewrites pod DNS names, mapped ports and mount paths in strings, in one pass (a
    replacement is never rewritten again), remembering what it changed for a log line."""

    def __init__(
        self,
        *,
        subdomain: str = "",
        namespace: str = "",
        ports: Mapping[int, int] | None = None,
        mounts: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.ports = dict(ports or {})
        self.mounts = {_norm_mount(m): host for m, host in mounts if _norm_mount(m) != "/"}
        self.rewrites: dict[str, str] = {}
        alternatives: list[str] = []
        if subdomain:
            sub, ns = re.escape(subdomain), re.escape(namespace)
            suffix = rf"(?:\.{ns}(?:\.svc(?:\.cluster\.local)?)?)?" if namespace else ""
            service = rf"|{sub}\.{ns}\.svc(?:\.cluster\.local)?" if namespace else ""
            alternatives.append(
                rf"(?P<dns>(?<![\w.-])(?i:{DNS_LABEL}\.{sub}{suffix}{service})"
                rf"(?![\w-]|\.[A-Za-z0-9]))"
            )
        if self.mounts:
            paths = "|".join(re.escape(m) for m in sorted(self.mounts, key=len, reverse=True))
            alternatives.append(rf"(?P<mount>(?<![\w.-])(?:{paths})(?![\w.-]))")
        if self.ports:
            numbers = "|".join(str(p) for p in sorted(self.ports, reverse=True))
            alternatives.append(rf"(?:(?<=:)|(?<=(?i:port)=))(?P<port>{numbers})(?!\d)")
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None

    def _replace(self, m: re.Match[str]) -> str:
        groups = m.groupdict()
        if groups.get("dns") is not None:
            new = LOOPBACK
        elif groups.get("mount") is not None:
            new = self.mounts[m["mount"]]
        else:
            new = str(self.ports[int(m["port"])])
            self.rewrites[f":{m['port']}"] = f":{new}"
            return new
        self.rewrites[m[0]] = new
        return new

    def text(self, value: str) -> str:
        """``value`` with DNS names, ``:port`` / ``port=`` and mount paths rewritten."""
        if self._pattern is None:
            return value
        return self._pattern.sub(self._replace, value)

    def exact_port(self, value: str) -> str | None:
        """The host port when ``value`` is exactly a mapped port, else None."""
        if value.isdigit() and int(value) in self.ports:
            new = str(self.ports[int(value)])
            self.rewrites[value] = new
            return new
        return None

    def value(self, value: str) -> str:
        """An env value: an exact mapped port, else :meth:`text`."""
        exact = self.exact_port(value)
        return exact if exact is not None else self.text(value)

    def render(self, template: str, env: Mapping[str, str]) -> str:
        """``$(VAR)``-expand ``template`` with ``env`` and rewrite it once. A reference to a
        variable holding exactly a mapped port becomes the host port whatever surrounds it."""
        holes: list[str] = []

        def lookup(name: str) -> str | None:
            value = env.get(name)
            if value is None:
                return None
            exact = self.exact_port(value)
            if exact is None:
                return value
            holes.append(exact)
            return f"{_HOLE_OPEN}{len(holes) - 1}{_HOLE_CLOSE}"

        rewritten = self.text(expand(template, lookup))
        return _HOLE.sub(lambda m: holes[int(m[1])], rewritten) if holes else rewritten

    def argv(self, templates: list[str], env: Mapping[str, str]) -> list[str]:
        """:meth:`render` every argument; an argument that is exactly a mapped port after an
        option named ``...port`` (``--master_port 29500``) is mapped too."""
        out: list[str] = []
        for i, template in enumerate(templates):
            rendered = self.render(template, env)
            if i > 0 and PORT_OPTION.match(templates[i - 1]):
                rendered = self.exact_port(rendered) or rendered
            out.append(rendered)
        return out

    def map_path(self, path: str) -> str | None:
        """The host path for a path inside a mount (longest mount first), else None."""
        norm = _norm_mount(path)
        for mount in sorted(self.mounts, key=len, reverse=True):
            if norm == mount or norm.startswith(mount + "/"):
                return self.mounts[mount] + norm[len(mount) :]
        return None
