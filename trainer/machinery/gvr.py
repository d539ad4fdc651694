"""A served API resource (group, version, plural) and the REST paths that reach it.

A :class:`GVR` is what a REST path is built from; the kind and scope ride along so a list can
stamp ``apiVersion``/``kind`` on its items and a cluster-scoped resource never gets a namespace
segment. Which resources a program uses is its own business (the controller's are in
``trainer/kube/resources.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")


def _segment(text: str) -> str:
    """``text`` as one path segment: percent-encoded unless it is made of unreserved characters
    only, as every Kubernetes name is (``quote`` was a measurable part of each request's cost)."""
    return text if _UNRESERVED.fullmatch(text) else quote(text, safe="")


@dataclass(frozen=True)
class GVR:
    """One served resource: ``group`` is ``""`` for the core API (``/api/v1``)."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, else ``<group>/<version>``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """``plural`` or ``plural.group``: the name in RBAC rules and error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The REST path of the collection (``name`` None) or of one object.

        A namespaced resource without ``namespace`` gives the all-namespaces collection; the
        namespace of a cluster-scoped resource is ignored. ``subresource`` needs a name.
        """
        parts = ["/api/" + self.version if not self.group else f"/apis/{self.group}/{self.version}"]
        if self.namespaced and namespace:
            parts.append("namespaces/" + _segment(namespace))
        parts.append(self.plural)
        if name is not None:
            if not name:
                raise ValueError(f"{self.resource}: an empty object name has no path")
            parts.append(_segment(name))
            if subresource:
                parts.append(subresource)
        elif subresource:
            raise ValueError(f"{self.resource}: subresource {subresource!r} needs an object name")
        return "/".join(parts)
