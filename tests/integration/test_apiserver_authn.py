"""The local API server as an attacker on the same machine meets it (docs/local-plane.md,
"Security of the local control plane"): no token, a wrong token, a service-account token
without RBAC, a cross-site ``text/plain`` POST, a foreign ``Host`` (DNS rebinding), token
minting without credentials, plain HTTP to the TLS port, and the kubeconfig's mode; and the
clients that must keep working with the written kubeconfig and no extra flags (kubectl,
kubernetes_asyncio, the ``kubernetes`` client the Kubeflow SDK uses, ``trainer apiserver
--token``)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import ssl
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio import client as kclient

from trainer.kube.client import new_api_client
from trainer.local.apiserver import APIServer

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

NS = "default"
RBAC = "rbac.authorization.k8s.io"
PODS = f"/api/v1/namespaces/{NS}/pods"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
TOKEN = f"/api/v1/namespaces/{NS}/serviceaccounts/default/token"
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "evil"},
    "spec": {"containers": [{"name": "c", "image": "x", "command": ["touch", "/tmp/pwned"]}]},
}


@dataclass
class Env:
    server: APIServer
    http: aiohttp.ClientSession
    kubeconfig: Path

    def url(self, path: str) -> str:
        return self.server.url + path

    async def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        content_type: str | None = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One request; ``token`` None sends no Authorization header."""
        sent: dict[str, str] = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            if content_type is not None:
                sent["Content-Type"] = content_type
        async with self.http.request(method, self.url(path), data=data, headers=sent) as resp:
            raw = await resp.read()
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw.decode(errors="replace")

    async def admin(self, method: str, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call(method, path, token=self.server.token, body=body, **kw)

    async def sa_token(self, sa: str = "default", namespace: str = NS) -> str:
        status, answer = await self.admin(
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
            {"spec": {"expirationSeconds": 600}},
        )
        assert status == 201, answer
        return str(answer["status"]["token"])


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    server = APIServer()
    await server.start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(str(kubeconfig))
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    try:
        async with aiohttp.ClientSession(connector=connector) as http:
            yield Env(server, http, kubeconfig)
    finally:
        await server.stop()


def assert_status(status: int, body: Any, code: int, reason: str) -> None:
    assert status == code, body
    assert isinstance(body, dict) and body.get("kind") == "Status", body
    assert body["code"] == code and body["reason"] == reason, body


def pods(env: Env) -> list[str]:
    return [p["metadata"]["name"] for p in env.server.storage.objects("v1", "pods")]


# --- authentication ---------------------------------------------------------------------------

ANONYMOUS_REQUESTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", PODS, None),
    ("GET", f"{SECRETS}/any", None),
    ("GET", "/api/v1/secrets", None),
    ("GET", f"{PODS}?watch=true", None),
    ("POST", PODS, POD),
    ("PUT", "/api/v1/namespaces/default", {"metadata": {"name": "default"}}),
    ("DELETE", "/api/v1/namespaces/kube-system", None),
    ("POST", TOKEN, {"spec": {}}),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {"spec": {"token": "x"}}),
    ("GET", "/api", None),
    ("GET", "/apis", None),
    ("GET", "/version", None),
    ("GET", "/openapi/v2", None),
    ("GET", "/healthzz", None),  # not a probe, only a prefix of one
]


@pytest.mark.parametrize(("method", "path", "body"), ANONYMOUS_REQUESTS)
async def test_no_token_is_401_everywhere(
    env: Env, method: str, path: str, body: dict[str, Any] | None
) -> None:
    status, answer = await env.call(method, path, body=body)
    assert_status(status, answer, 401, "Unauthorized")
    assert pods(env) == []


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer wrong",
        "Bearer ",
        "Bearer",
        "Basic dXNlcjpwYXNz",
        "{token}x",  # the right token with a suffix
        "Bearer {prefix}",  # a prefix of the right token
        "Bearer {token}x",
        "bearer.{token}",
    ],
)
async def test_a_wrong_token_is_401(env: Env, authorization: str) -> None:
    token = env.server.token
    header = authorization.format(token=token, prefix=token[:-1])
    for method, path, body in (("GET", SECRETS, None), ("POST", PODS, POD)):
        status, answer = await env.call(method, path, body=body, headers={"Authorization": header})
        assert_status(status, answer, 401, "Unauthorized")
    assert pods(env) == []


@pytest.mark.parametrize("path", ["/healthz", "/livez", "/readyz"])
async def test_health_probes_need_no_token(env: Env, path: str) -> None:
    status, body = await env.call("GET", path)
    assert (status, body) == (200, "ok")


@pytest.mark.parametrize(
    "path",
    [
        "/healthz/../api/v1/secrets",
        "/healthz/%2e%2e/api/v1/secrets",
        "/readyz/..%2Fapi%2Fv1%2Fsecrets",
        "/livez/../../api/v1/namespaces/default/secrets",
        "//api/v1/secrets",
    ],
)
async def test_probe_look_alike_paths_open_nothing(env: Env, path: str) -> None:
    # Sent raw: HTTP clients would normalise these paths before sending.
    await env.admin("POST", SECRETS, {"metadata": {"name": "ssh"}, "stringData": {"k": "KEY"}})
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", env.server.port, ssl=env.server.client_ssl_context(),
        server_hostname="127.0.0.1",
    )  # fmt: skip
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{env.server.port}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    status = int(answer.split(b" ", 2)[1])
    assert status in (401, 404), answer
    assert b"KEY" not in answer and b"S0VZ" not in answer and b'"ssh"' not in answer


async def test_the_plane_token_is_the_administrator(env: Env) -> None:
    status, review = await env.admin(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert status == 201
    assert review["status"]["userInfo"]["username"] == "trainer-local-admin"
    assert "system:masters" in review["status"]["userInfo"]["groups"]
    status, _ = await env.admin("GET", SECRETS)
    assert status == 200


# --- service-account tokens and RBAC ----------------------------------------------------------


async def test_a_service_account_token_is_that_account(env: Env) -> None:
    token = await env.sa_token()
    status, review = await env.call(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        token=token,
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    assert status == 201
    assert review["status"]["userInfo"]["username"] == "system:serviceaccount:default:default"
    assert review["status"]["userInfo"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:default",
        "system:authenticated",
    ]
    # Discovery is open to every authenticated user (kube-apiserver's system:discovery).
    status, _ = await env.call("GET", "/api", token=token)
    assert status == 200


async def test_a_service_account_without_rbac_is_403_on_secrets_and_pods(env: Env) -> None:
    status, _ = await env.admin(
        "POST", SECRETS, {"metadata": {"name": "ssh"}, "stringData": {"id_rsa": "KEY"}}
    )
    assert status == 201
    token = await env.sa_token()
    status, answer = await env.call("GET", f"{SECRETS}/ssh", token=token)
    assert_status(status, answer, 403, "Forbidden")
    assert answer["message"] == (
        'secrets "ssh" is forbidden: User "system:serviceaccount:default:default" cannot get '
        'resource "secrets" in API group "" in the namespace "default"'
    )
    assert "KEY" not in json.dumps(answer) and "S0VZ" not in json.dumps(answer)
    status, answer = await env.call("GET", "/api/v1/secrets", token=token)
    assert_status(status, answer, 403, "Forbidden")
    assert "at the cluster scope" in answer["message"]
    status, answer = await env.call("POST", PODS, token=token, body=POD)
    assert_status(status, answer, 403, "Forbidden")
    assert 'cannot create resource "pods"' in answer["message"]
    assert pods(env) == []


async def test_rbac_grants_exactly_what_it_names(env: Env) -> None:
    token = await env.sa_token()
    rbac = f"/apis/{RBAC}/v1"
    role = {
        "metadata": {"name": "read-secrets"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}],
    }
    binding = {
        "metadata": {"name": "read-secrets"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "read-secrets",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}],
    }
    assert (await env.admin("POST", f"{rbac}/namespaces/{NS}/roles", role))[0] == 201
    assert (await env.admin("POST", f"{rbac}/namespaces/{NS}/rolebindings", binding))[0] == 201
    assert (await env.call("GET", SECRETS, token=token))[0] == 200
    # Not granted: another namespace, writes, pods, minting tokens.
    assert (await env.call("GET", "/api/v1/namespaces/kube-system/secrets", token=token))[0] == 403
    assert (await env.call("POST", SECRETS, token=token, body={"metadata": {"name": "s"}}))[
        0
    ] == 403
    assert (await env.call("POST", PODS, token=token, body=POD))[0] == 403
    assert (await env.call("POST", TOKEN, token=token, body={"spec": {}}))[0] == 403
    assert pods(env) == []


async def test_token_minting_needs_credentials_and_rbac(env: Env) -> None:
    status, answer = await env.call("POST", TOKEN, body={"spec": {}})
    assert_status(status, answer, 401, "Unauthorized")
    token = await env.sa_token()
    status, answer = await env.call(
        "POST", "/api/v1/namespaces/kube-system/serviceaccounts/default/token", token=token,
        body={"spec": {}},
    )  # fmt: skip
    assert_status(status, answer, 403, "Forbidden")
    assert 'cannot create resource "serviceaccounts/token"' in answer["message"]
    # TokenReview is as closed: a pod's token cannot probe other tokens.
    status, answer = await env.call(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        token=token,
        body={"spec": {"token": token}},
    )
    assert_status(status, answer, 403, "Forbidden")


async def test_a_token_for_another_audience_is_not_an_api_credential(env: Env) -> None:
    # e.g. the status server's audience: valid there, not a credential for the API server
    status, answer = await env.admin(
        "POST", TOKEN, {"spec": {"audiences": ["status.example"], "expirationSeconds": 600}}
    )
    assert status == 201
    token = answer["status"]["token"]
    status, answer = await env.call("GET", "/api", token=token)
    assert_status(status, answer, 401, "Unauthorized")
    # ... while the administrator can still review it for its own audience (status server).
    status, review = await env.admin(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"spec": {"token": token, "audiences": ["status.example"]}},
    )
    assert status == 201 and review["status"]["authenticated"] is True


async def test_a_deleted_service_account_token_stops_working(env: Env) -> None:
    status, _ = await env.admin("POST", f"/api/v1/namespaces/{NS}/serviceaccounts",
                                {"metadata": {"name": "temp"}})  # fmt: skip
    assert status == 201
    token = await env.sa_token("temp")
    assert (await env.call("GET", "/api", token=token))[0] == 200
    status, _ = await env.admin("DELETE", f"/api/v1/namespaces/{NS}/serviceaccounts/temp")
    assert status == 200
    status, answer = await env.call("GET", "/api", token=token)
    assert_status(status, answer, 401, "Unauthorized")


async def test_impersonation_is_for_those_rbac_allows(env: Env) -> None:
    as_sa = {"Impersonate-User": "system:serviceaccount:default:default"}
    status, answer = await env.admin("GET", SECRETS, headers=as_sa)
    assert_status(status, answer, 403, "Forbidden")  # the administrator acting as the SA
    token = await env.sa_token()
    status, answer = await env.call(
        "GET", SECRETS, token=token, headers={"Impersonate-User": "trainer-local-admin"}
    )
    assert_status(status, answer, 403, "Forbidden")
    assert 'cannot impersonate resource "users"' in answer["message"]
    status, answer = await env.call(
        "GET", SECRETS, token=token, headers={"Impersonate-Group": "system:masters"}
    )
    assert_status(status, answer, 400, "BadRequest")


# --- content types (cross-site requests) ------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        None,  # a Blob body without a type: no Content-Type header at all
    ],
)
async def test_a_pod_posted_as_a_browser_can_post_it_is_415_and_nothing_runs(
    env: Env, content_type: str | None
) -> None:
    rv = env.server.storage.store.rv
    status, answer = await env.admin("POST", PODS, POD, content_type=content_type)
    assert_status(status, answer, 415, "UnsupportedMediaType")
    # Nothing stored, so the executor (which runs stored pods) has nothing to run.
    assert pods(env) == []
    assert env.server.storage.store.rv == rv
    assert [(r.verb, r.resource, r.code) for r in env.server.storage.hooks.writes()] == [
        ("create", "pods", 415)
    ]


async def test_accepted_content_types_per_verb(env: Env) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    path = f"/api/v1/namespaces/{NS}/configmaps"
    assert (await env.admin("POST", path, cm, content_type="application/json"))[0] == 201
    yaml_body = yaml.safe_dump({**cm, "metadata": {"name": "cm2"}}).encode()
    assert (await env.admin("POST", path, yaml_body, content_type="application/yaml"))[0] == 201
    patch = {"data": {"a": "b"}}
    for media, code in (
        ("application/merge-patch+json", 200),
        ("application/strategic-merge-patch+json", 200),
        ("application/json", 415),  # kube-apiserver takes only patch types on PATCH
        ("text/plain", 415),
    ):
        status, answer = await env.admin("PATCH", f"{path}/cm", patch, content_type=media)
        assert status == code, (media, answer)
    status, answer = await env.admin(
        "PATCH", f"{path}/cm", [{"op": "add", "path": "/data/c", "value": "d"}],
        content_type="application/json-patch+json",
    )  # fmt: skip
    assert status == 200 and answer["data"] == {"a": "b", "c": "d"}
    status, answer = await env.admin(
        "DELETE", f"{path}/cm", {"propagationPolicy": "Background"}, content_type="text/plain"
    )
    assert_status(status, answer, 415, "UnsupportedMediaType")
    assert (await env.admin("DELETE", f"{path}/cm"))[0] == 200


# --- Host and Origin (DNS rebinding, cross-site) ----------------------------------------------


async def test_a_foreign_host_is_refused(env: Env) -> None:
    port = env.server.port
    for host in (
        "attacker.example",
        f"attacker.example:{port}",
        f"localhost.attacker.example:{port}",
        f"127.0.0.1:{port + 1}",
        f"127.0.0.2:{port}",
        "0.0.0.0",
    ):
        for method, path, body in (
            ("GET", SECRETS, None),
            ("POST", PODS, POD),
            ("GET", "/healthz", None),
        ):
            status, answer = await env.admin(method, path, body, headers={"Host": host})
            assert_status(status, answer, 403, "Forbidden")
            assert "Host header" in answer["message"]
    assert pods(env) == []
    for host in ("127.0.0.1", f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}",
                 f"[::1]:{port}", "[::1]"):  # fmt: skip
        status, _ = await env.admin("GET", SECRETS, headers={"Host": host})
        assert status == 200, host


async def test_a_foreign_origin_is_refused(env: Env) -> None:
    port = env.server.port
    for origin in ("https://attacker.example", f"http://127.0.0.1:{port}", "null"):
        status, answer = await env.admin("POST", PODS, POD, headers={"Origin": origin})
        assert_status(status, answer, 403, "Forbidden")
    assert pods(env) == []
    status, _ = await env.admin("GET", SECRETS, headers={"Origin": f"https://127.0.0.1:{port}"})
    assert status == 200


# --- TLS ---------------------------------------------------------------------------------------


async def test_plain_http_to_the_tls_port_gets_nothing(env: Env) -> None:
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(aiohttp.ClientError):
            async with plain.get(
                f"http://127.0.0.1:{env.server.port}/api/v1/secrets",
                headers=env.server.auth_headers(),
                timeout=aiohttp.ClientTimeout(total=10),
            ) as resp:
                await resp.read()


async def test_a_client_that_does_not_trust_the_ca_fails_the_handshake(env: Env) -> None:
    async with aiohttp.ClientSession() as default_trust:  # the system's CAs
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with default_trust.get(env.url("/healthz")) as resp:
                await resp.read()
    other = APIServer()  # another plane's CA does not vouch for this server
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=other.client_ssl_context())
    ) as wrong_ca:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with wrong_ca.get(env.url("/healthz")) as resp:
                await resp.read()


async def test_the_certificate_names_every_loopback_address(env: Env) -> None:
    ctx = env.server.client_ssl_context()
    for host in ("127.0.0.1", "localhost"):
        _, writer = await asyncio.open_connection(
            "127.0.0.1", env.server.port, ssl=ctx, server_hostname=host
        )
        cert = writer.get_extra_info("peercert")
        assert ("DNS", "localhost") in cert["subjectAltName"]
        assert ("IP Address", "127.0.0.1") in cert["subjectAltName"]
        writer.close()
        await writer.wait_closed()
    assert ssl.TLSVersion.TLSv1_2 <= ctx.minimum_version


# --- the kubeconfig ---------------------------------------------------------------------------


def test_the_kubeconfig_is_private_and_complete(tmp_path: Path) -> None:
    server = APIServer()
    path = tmp_path / "kubeconfig"
    path.write_text("old")
    path.chmod(0o644)
    old_umask = os.umask(0)  # even with a permissive umask
    try:
        server.write_kubeconfig(str(path))
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["kubeconfig"]  # no temporary file left behind
    config = yaml.safe_load(path.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"].startswith("https://127.0.0.1:")
    assert base64.b64decode(cluster["certificate-authority-data"]) == server.tls.ca_pem
    assert config["users"][0]["user"] == {"token": server.token}
    assert len(server.token) >= 32 and APIServer().token != server.token


async def test_kubernetes_clients_work_with_the_kubeconfig_alone(env: Env) -> None:
    api = await new_api_client(str(env.kubeconfig))  # the controller's client
    try:
        core: Any = kclient.CoreV1Api(api)
        assert "default" in [n.metadata.name for n in (await core.list_namespace()).items]
    finally:
        await api.close()
    kubernetes = pytest.importorskip("kubernetes")  # the Kubeflow SDK's client (sync)

    def sync_list() -> list[str]:
        client = kubernetes.config.new_client_from_config(config_file=str(env.kubeconfig))
        try:
            core = kubernetes.client.CoreV1Api(client)
            return [n.metadata.name for n in core.list_namespace().items]
        finally:
            client.close()

    assert "default" in await asyncio.to_thread(sync_list)


async def kubectl(env: Env, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        *args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(env.kubeconfig.parent),
            "KUBECONFIG": str(env.kubeconfig),
        },
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
    return proc.returncode or 0, out.decode(), err.decode()


@needs_kubectl
async def test_kubectl_works_with_the_written_kubeconfig_and_no_flags(env: Env) -> None:
    code, out, err = await kubectl(env, "get", "--raw", "/api")
    assert code == 0, err
    assert json.loads(out)["kind"] == "APIVersions"
    code, out, err = await kubectl(env, "auth", "whoami", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["status"]["userInfo"]["username"] == "trainer-local-admin"
    manifest = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "applied"}, "data": {"k": "v"}})  # fmt: skip
    code, out, err = await kubectl(env, "apply", "-f", "-", stdin=manifest)
    assert code == 0, err
    assert "configmap/applied created" in out
    code, out, err = await kubectl(env, "get", "pods")
    assert code == 0, err
    code, out, err = await kubectl(
        env, "auth", "can-i", "get", "secrets", "--as", "system:serviceaccount:default:default"
    )
    assert (code, out.strip()) == (1, "no")


def test_trainer_apiserver_token_works_with_kubectl(tmp_path: Path) -> None:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli.main", "apiserver", "--port", "0",
         "--kubeconfig", str(kubeconfig), "--token", "T0k3n-for-the-test"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        printed = []
        for line in proc.stdout:
            printed.append(line)
            if line.startswith("kubeconfig written"):
                break
        else:
            raise AssertionError("apiserver exited before serving: " + "".join(printed))
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["users"][0]["user"] == {"token": "T0k3n-for-the-test"}
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        base = [KUBECTL, "--kubeconfig", str(kubeconfig)]
        done = subprocess.run(
            [*base, "get", "--raw", "/api"], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        done = subprocess.run(
            [*base, "--token", "wrong", "get", "pods"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert done.returncode == 1 and "You must be logged in" in done.stderr
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_trainer_apiserver_without_token_makes_one_and_never_prints_it(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli.main", "apiserver", "--port", "0",
         "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    printed = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            printed.append(line)
            if line.startswith("kubeconfig written"):
                break
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=10)
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    assert len(token) >= 32
    assert token not in "".join(printed) + rest
    assert "administrator's bearer token" in "".join(printed) + rest


def test_trainer_apiserver_refuses_an_unusable_token(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", "apiserver", "--kubeconfig",
         str(tmp_path / "kc"), "--token", "two words"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --token: the token must be non-empty printable text without spaces"
    )
    assert "Traceback" not in done.stderr


# --- a running `trainer up` ------------------------------------------------------------------


@needs_kubectl
async def test_a_running_trainer_up_is_closed_to_anonymous_and_cross_site_requests(
    tmp_path: Path,
) -> None:
    from tests.e2e.test_up import start_up, stop_up  # noqa: PLC0415

    kubeconfig = tmp_path / "kubeconfig"
    proc = await start_up(tmp_path, kubeconfig, tmp_path / "state.db")
    try:
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        config = yaml.safe_load(kubeconfig.read_text())
        url = config["clusters"][0]["cluster"]["server"]
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
        ctx = ssl.create_default_context(cadata=ca.decode())
        port = int(url.rsplit(":", 1)[1])
        marker = tmp_path / "pwned"
        pod = {
            **POD,
            "spec": {
                "containers": [{"name": "c", "image": "x", "command": ["touch", str(marker)]}]
            },
        }
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as http:
            attempts: list[tuple[str, dict[str, str]]] = [
                ("none", {"Content-Type": "application/json"}),
                ("text/plain, as a web page would", {"Content-Type": "text/plain"}),
                ("wrong token", {"Authorization": "Bearer x", "Content-Type": "application/json"}),
                (
                    "rebound Host",
                    {"Host": f"attacker.example:{port}", "Content-Type": "text/plain"},
                ),
            ]
            for what, headers in attempts:
                async with http.post(f"{url}{PODS}", data=json.dumps(pod), headers=headers) as resp:
                    assert resp.status in (401, 403), what
                async with http.get(f"{url}/api/v1/secrets", headers=headers) as resp:
                    assert resp.status in (401, 403), what
                    assert (await resp.json())["kind"] == "Status"
        listed = subprocess.run(
            [KUBECTL or "kubectl", "--kubeconfig", str(kubeconfig), "get", "pods", "-A", "-o",
             "name"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert listed.stdout.strip() == ""  # no pod was created, so nothing ran
        assert not marker.exists()
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    out = await stop_up(proc)  # what it printed after "ready"
    assert f"kubeconfig: {kubeconfig}" in out
    assert "the administrator's bearer token (file mode 0600)" in out
    assert config["users"][0]["user"]["token"] not in out
