"""The data cache's credential (docs/data-cache.md, "Security"), without a server: signing and
checking calls (good, missing, wrong, malformed, stale, replayed; the MAC compared in constant
time), the server's proof, reading the credential file, where the cache listens by default,
and the Secret, volume and env the DataCache plugin adds to a cache runtime only."""

from __future__ import annotations

import base64
import hmac
from pathlib import Path
from typing import Any

import pytest

from tests import builders as b
from trainer.api.v1alpha1 import TrainJob
from trainer.cli.render import to_yaml_stream
from trainer.datacache import auth
from trainer.datacache import config as cfg
from trainer.plugins import datacache as plugin
from trainer.plugins.registry import default_framework, render
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.credentials import generate_credential
from trainer.runtime.info import BuildContext, BuildError, Observed, SSHKeyPair

KEY = b"k" * 43
OTHER = b"o" * 43
NOW = 1_800_000_000.0
REQUEST = b'{"table": "sales/tx", "start": 0, "stop": 10}'


def verifier(clock: list[float] | None = None) -> auth.Verifier:
    now = clock if clock is not None else [NOW]
    return auth.Verifier(KEY, clock=lambda: now[0])


# --- signing and checking ---------------------------------------------------------------------


def test_a_signed_call_passes_and_is_answered_with_a_proof_only_the_key_makes() -> None:
    call = auth.sign(KEY, "DoGet", REQUEST, now=NOW)
    answer = verifier().check("DoGet", REQUEST, call)
    assert auth.proves(KEY, call, answer)
    assert not auth.proves(OTHER, call, answer)
    assert not auth.proves(KEY, auth.sign(KEY, "DoGet", REQUEST, now=NOW), answer)  # other call
    assert not auth.proves(KEY, call, None) and not auth.proves(KEY, call, "0" * 64)
    assert KEY.decode() not in call  # the credential itself never goes on the wire


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "this call carries no data-cache credential (header x-data-cache-auth)"),
        ("", "this call carries no data-cache credential"),
        ("Bearer k", "the x-data-cache-auth header is malformed"),
        ("v2 1 2 3", "the x-data-cache-auth header is malformed"),
        ("v1 soon n m", "the x-data-cache-auth header is malformed"),
    ],
)
def test_a_call_without_a_credential_is_refused_saying_why(
    header: str | None, message: str
) -> None:
    with pytest.raises(auth.Unauthenticated, match=message.replace("(", r"\(").replace(")", r"\)")):
        verifier().check("ListFlights", b"", header)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(auth.sign(OTHER, "DoGet", REQUEST, now=NOW), id="another-credential"),
        pytest.param(auth.sign(KEY, "DoGet", b'{"stop": 1000}', now=NOW), id="another-request"),
        pytest.param(auth.sign(KEY, "DoAction", REQUEST, now=NOW), id="another-method"),
    ],
)
def test_a_call_signed_with_another_credential_or_for_another_request_is_refused(
    call: str,
) -> None:
    with pytest.raises(auth.Unauthenticated, match="the call's data-cache credential is wrong"):
        verifier().check("DoGet", REQUEST, call)


def test_the_mac_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    good = auth.sign(KEY, "DoGet", REQUEST, now=NOW)
    bad = auth.sign(OTHER, "DoGet", REQUEST, now=NOW)
    verifier().check("DoGet", REQUEST, good)
    with pytest.raises(auth.Unauthenticated):
        verifier().check("DoGet", REQUEST, bad)
    sent = [call.rpartition(" ")[2].encode() for call in (good, bad)]
    assert [given for _, given in compared] == sent


def test_a_replayed_or_stale_call_is_refused_and_old_nonces_are_forgotten() -> None:
    clock = [NOW]
    check = verifier(clock)
    call = auth.sign(KEY, "DoGet", REQUEST, now=NOW)
    check.check("DoGet", REQUEST, call)
    with pytest.raises(auth.Unauthenticated, match="already made once: a replay is refused"):
        check.check("DoGet", REQUEST, call)
    with pytest.raises(auth.Unauthenticated, match=r"signed 301 s before the cache's clock"):
        check.check("DoGet", REQUEST, auth.sign(KEY, "DoGet", REQUEST, now=NOW - 301))
    with pytest.raises(auth.Unauthenticated, match=r"signed 400 s after the cache's clock"):
        check.check("DoGet", REQUEST, auth.sign(KEY, "DoGet", REQUEST, now=NOW + 400))
    clock[0] = NOW + 2 * auth.WINDOW + 1
    check.check("DoGet", REQUEST, auth.sign(KEY, "DoGet", REQUEST, now=clock[0]))
    assert len(check._seen) == 1  # the first nonce, too old to pass the window, is forgotten


def test_a_verifier_needs_a_real_credential() -> None:
    with pytest.raises(auth.CredentialError, match="needs 16 bytes"):
        auth.Verifier(b"short")


# --- the credential file ----------------------------------------------------------------------


def test_the_credential_is_read_from_the_file_the_env_names(tmp_path: Path) -> None:
    path = tmp_path / "credential"
    path.write_bytes(KEY + b"\n")
    assert auth.read_credential(path) == KEY
    assert auth.credential_from_env({auth.ENV_CREDENTIAL_FILE: str(path)}) == KEY
    with pytest.raises(auth.CredentialError, match="DATA_CACHE_CREDENTIAL_FILE is not set"):
        auth.credential_from_env({})
    with pytest.raises(auth.CredentialError, match="No such file or directory"):
        auth.read_credential(tmp_path / "missing")
    path.write_text("  short \n")
    with pytest.raises(auth.CredentialError, match="holds 5 bytes; at least 16 are needed"):
        auth.read_credential(path)
    path.write_bytes(b"x" * 5000)
    with pytest.raises(auth.CredentialError, match="longer than 4096 bytes"):
        auth.read_credential(path)


def test_generated_credentials_are_43_random_url_safe_characters() -> None:
    made = {generate_credential() for _ in range(20)}
    assert len(made) == 20
    assert all(len(c) == 43 and c.isascii() and " " not in c for c in made)


# --- where the cache listens ------------------------------------------------------------------


def with_peers(*peers: str, index: int = 0) -> cfg.CacheConfig:
    return cfg.CacheConfig("s", "t", Path("/d"), None, index, peers)


@pytest.mark.parametrize(
    ("config", "host"),
    [
        pytest.param(with_peers(), "127.0.0.1", id="run-by-hand"),
        pytest.param(with_peers("127.0.0.1:2000", "127.0.0.1:2000"), "127.0.0.1", id="local"),
        pytest.param(with_peers("localhost:2000"), "127.0.0.1", id="localhost"),
        pytest.param(with_peers("[::1]:2000"), "::1", id="ipv6-loopback"),
        pytest.param(with_peers("j-cache-0-0.j:50051"), "0.0.0.0", id="cluster"),
        pytest.param(
            with_peers("127.0.0.1:1", "j-cache-0-1.j:50051", index=1), "0.0.0.0", id="own-entry"
        ),
    ],
)
def test_the_cache_listens_on_loopback_unless_it_runs_in_a_pod_of_a_cluster(
    config: cfg.CacheConfig, host: str
) -> None:
    assert cfg.default_host(config) == host


# --- the plugin -------------------------------------------------------------------------------


def cache_trainjob(name: str = "sales", runtime: str = "torch-distributed-with-cache") -> TrainJob:
    return b.trainjob_model(
        name,
        namespace="team",
        uid="uid-1",
        runtime=runtime,
        runtime_kind="ClusterTrainingRuntime",
        num_nodes=2,
        initializer={"dataset": {"storageUri": "cache://sales/tx"}},
    )


def never() -> str:
    raise AssertionError("the credential was generated again")


def pods(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        r["name"]: r["template"]["spec"]["template"]["spec"]
        for r in jobset["spec"]["replicatedJobs"]
    }


def test_a_cache_trainjob_gets_its_credential_secret_mounted_in_cache_and_trainer_pods() -> None:
    rt = builtin_runtimes()["torch-distributed-with-cache"]
    objects = render(cache_trainjob(), rt, ctx=BuildContext(credential_gen=KEY.decode))
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "sales-data-cache-auth"
    assert secret["metadata"]["namespace"] == "team"
    assert secret["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-name": "sales"}
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TrainJob", "sales", True)
    assert (secret["type"], secret["immutable"]) == ("Opaque", True)
    assert base64.b64decode(secret["data"]["credential"]) == KEY
    assert [o["kind"] for o in objects][-1] == "JobSet"  # the Secret exists before the pods
    for pod in pods(objects[-1]).values():
        assert pod["volumes"] == [
            {
                "name": "data-cache-auth",
                "secret": {
                    "secretName": "sales-data-cache-auth",
                    "items": [{"key": "credential", "path": "credential"}],
                    "defaultMode": 0o444,
                },
            }
        ]
        (ctr,) = pod["containers"]
        assert ctr["volumeMounts"] == [
            {
                "name": "data-cache-auth",
                "mountPath": "/var/run/secrets/trainer.kubeflow.org/data-cache",
                "readOnly": True,
            }
        ]
        env = {e["name"]: e.get("value") for e in ctr["env"]}
        assert env["DATA_CACHE_CREDENTIAL_FILE"] == (
            "/var/run/secrets/trainer.kubeflow.org/data-cache/credential"
        )
    assert auth.ENV_CREDENTIAL_FILE == "DATA_CACHE_CREDENTIAL_FILE"


def test_an_existing_credential_is_reused_never_rotated() -> None:
    rt = builtin_runtimes()["torch-distributed-with-cache"]
    observed = Observed(secrets={"sales-data-cache-auth": {"data": {"credential": "eA=="}}})
    objects = render(
        cache_trainjob(), rt, observed=observed, ctx=BuildContext(credential_gen=never)
    )
    assert [o["kind"] for o in objects] == ["ConfigMap", "JobSet"]
    assert "data-cache-auth" in to_yaml_stream(objects[-1:])  # still mounted


def test_a_build_without_a_credential_generator_says_so() -> None:
    rt = builtin_runtimes()["torch-distributed-with-cache"]
    with pytest.raises(BuildError, match="the data cache needs a credential generator"):
        render(cache_trainjob(), rt, ctx=BuildContext())
    spec_only = render(cache_trainjob(), rt, ctx=BuildContext(objects=False))
    assert "Secret" not in [o["kind"] for o in spec_only]


@pytest.mark.parametrize(
    "name", sorted(n for n in builtin_runtimes() if n != "torch-distributed-with-cache")
)
def test_runtimes_without_a_cache_get_nothing_of_it(name: str) -> None:
    rt = builtin_runtimes()[name]
    job = cache_trainjob("plain", runtime=name).model_copy(deep=True)
    assert job.spec is not None
    job.spec.initializer = None
    keys = SSHKeyPair(private_pem=b"key", public_authorized_key=b"pub")
    ctx = BuildContext(ssh_keygen=lambda: keys, credential_gen=never)
    rendered = to_yaml_stream(render(job, rt, ctx=ctx))
    assert "data-cache" not in rendered and "DATA_CACHE" not in rendered


def test_the_plugin_watches_the_secrets_it_creates() -> None:
    watches = {w.name: w for w in default_framework().watches(BuildContext())}
    watch = watches["data-cache-auth"]
    assert watch is plugin.AUTH_WATCH and watch.into == "secrets"

    class Store:
        def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
            return (
                {"kind": "Secret"}
                if (namespace, name) == ("team", "sales-data-cache-auth")
                else None
            )

        def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
            return []

    rt = builtin_runtimes()["torch-distributed-with-cache"]
    assert watch.collect(Store(), cache_trainjob(), rt) == {
        "sales-data-cache-auth": {"kind": "Secret"}
    }
    assert watch.collect(Store(), cache_trainjob("other"), rt) == {}
