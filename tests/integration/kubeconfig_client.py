"""An aiohttp session for an API server, configured from the kubeconfig it wrote: its URL,
and, when the kubeconfig has them, the CA (``certificate-authority-data`` or
``certificate-authority``), a client certificate and a bearer token (``token`` or
``tokenFile``). Plain ``http://`` servers without credentials work too."""

from __future__ import annotations

import base64
import ssl
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import yaml


def _current(config: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return dict(entry.get(section[:-1]) or {})
    return {}


def _data_or_file(entry: dict[str, Any], key: str, tmp: Path) -> str | None:
    data = entry.get(f"{key}-data")
    if data:
        out = tmp / key
        out.write_bytes(base64.b64decode(data))
        return str(out)
    path = entry.get(key)
    return str(path) if path else None


def session_from_kubeconfig(path: Path, **kw: Any) -> aiohttp.ClientSession:
    """A session whose requests go to the kubeconfig's current cluster as its user; extra
    keyword arguments are passed to :class:`aiohttp.TCPConnector`."""
    config = yaml.safe_load(path.read_text())
    context = _current(config, "contexts", config["current-context"])
    cluster = _current(config, "clusters", context["cluster"])
    user = _current(config, "users", context.get("user", ""))
    headers = {"Accept": "application/json"}
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    server = str(cluster["server"])
    ssl_arg: ssl.SSLContext | bool = True
    if server.startswith("https://"):
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            ca = _data_or_file(cluster, "certificate-authority", tmp)
            ctx = ssl.create_default_context(cafile=ca)
            if cluster.get("insecure-skip-tls-verify"):
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            cert = _data_or_file(user, "client-certificate", tmp)
            key = _data_or_file(user, "client-key", tmp)
            if cert:
                ctx.load_cert_chain(cert, key)
        ssl_arg = ctx
    connector = aiohttp.TCPConnector(ssl=ssl_arg, **kw)
    return aiohttp.ClientSession(base_url=server, headers=headers, connector=connector)
