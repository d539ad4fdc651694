"""The data cache's pure parts: row splits, settings from env, rank discovery, the
controller's DATA_CACHE_PEERS, and the local executor's per-JobSet port map (no pyarrow)."""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from trainer.api.load import parse_object
from trainer.api.v1alpha1 import TrainingRuntime, TrainJob
from trainer.datacache import config as cfg
from trainer.datacache.sharding import RowRange, part_of, pieces, split
from trainer.local.executor.controllers.policy.jobset import declared_ports
from trainer.plugins.registry import render
from trainer.runtime.info import BuildContext

ROOT = Path(__file__).resolve().parents[2]


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_split_is_disjoint_covers_every_row_once_and_is_even(rows: int, holders: int) -> None:
    parts = split(rows, holders)
    assert len(parts) == holders
    assert parts[0].start == 0 and parts[-1].stop == rows
    assert all(a.stop == b.start for a, b in itertools.pairwise(parts))
    lengths = [p.length for p in parts]
    assert sum(lengths) == rows and max(lengths) - min(lengths) <= 1


@given(st.integers(0, 5_000), st.integers(1, 9), st.integers(1, 9))
def test_shards_cut_from_parts_cover_each_row_once(rows: int, pods: int, world: int) -> None:
    parts = split(rows, pods)
    seen: list[int] = []
    for shard in split(rows, world):
        for k, piece in pieces(parts, shard):
            assert parts[k].start <= piece.start and piece.stop <= parts[k].stop
            seen.extend(range(piece.start, piece.stop))
    assert seen == list(range(rows))


def test_split_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="holders must be at least 1"):
        split(10, 0)
    with pytest.raises(ValueError, match=r"outside 0\.\.2"):
        part_of(10, 3, 3)
    assert RowRange(0, 5).intersect(RowRange(5, 9)) is None


ENV = {"STORAGE_URI": "cache://sales/transactions", "METADATA_LOC": "/data/t.parquet"}


def test_config_from_env() -> None:
    config = cfg.from_env(
        {**ENV, "JOB_COMPLETION_INDEX": "1", "DATA_CACHE_PEERS": "a.s:50051, b.s:50051"}
    )
    assert (config.schema, config.table, config.name) == (
        "sales",
        "transactions",
        "sales/transactions",
    )
    assert config.source == Path("/data/t.parquet")
    assert (config.index, config.size, config.peers) == (1, 2, ("a.s:50051", "b.s:50051"))
    assert not config.shared_address
    shared = cfg.from_env({**ENV, "DATA_CACHE_PEERS": "127.0.0.1:2000,127.0.0.1:2000"})
    assert shared.shared_address
    assert cfg.from_env({**ENV, "METADATA_LOC": "file:///data/a%20b.csv"}).source == Path(
        "/data/a b.csv"
    )
    assert cfg.from_env(ENV, source="x.csv", index=0, port=0, fmt="CSV").format == "csv"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"METADATA_LOC": "/d"}, "STORAGE_URI is not set"),
        ({**ENV, "STORAGE_URI": "s3://bucket/t"}, "must be cache://<schema>/<table>"),
        ({**ENV, "STORAGE_URI": "cache://only-table"}, "must be cache://<schema>/<table>"),
        ({"STORAGE_URI": "cache://a/b"}, "METADATA_LOC is not set"),
        ({**ENV, "METADATA_LOC": "s3://bucket/t.parquet"}, "scheme s3:// is not supported"),
        ({**ENV, "METADATA_LOC": "file://host/t.csv"}, "a file:// URI names no host"),
        ({**ENV, "DATA_CACHE_FORMAT": "orc"}, "DATA_CACHE_FORMAT='orc': must be one of"),
        ({**ENV, "JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX='x'"),
        ({**ENV, "JOB_COMPLETION_INDEX": "1"}, "the cache has 1 pod"),
        ({**ENV, "DATA_CACHE_PEERS": "a.s:50051,b.s"}, "'b.s' is not host:port"),
    ],
)
def test_config_errors_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(cfg.ConfigError, match=message.replace("(", r"\(").replace("*", r"\*")):
        cfg.from_env(env)


def test_rank_and_endpoint_from_env() -> None:
    client = pytest.importorskip(
        "trainer.datacache.client", reason="the datacache extra (pyarrow) is not installed"
    )
    assert client.rank_from_env({"RANK": "3", "WORLD_SIZE": "4"}) == (3, 4)
    assert client.rank_from_env({"PET_NODE_RANK": "1", "PET_NNODES": "2"}) == (1, 2)
    assert client.rank_from_env({}) == (0, 1)
    with pytest.raises(client.CacheClientError, match=r"RANK=4 is outside 0\.\.3"):
        client.rank_from_env({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(client.CacheClientError, match="DATA_CACHE_ENDPOINT is not set"):
        client.endpoint_from_env({})


CACHE_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: three-cache-pods, namespace: default}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      successPolicy: {operator: All, targetReplicatedJobs: [node]}
      replicatedJobs:
        - name: cache-initializer
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: cache-initializer}
            spec:
              parallelism: 3
              completions: 3
              template:
                spec:
                  containers:
                    - name: cache-initializer
                      image: trainer-py-data-cache:0.1.0
                      ports: [{containerPort: 50051}]
        - name: node
          dependsOn: [{name: cache-initializer, status: Ready}]
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers: [{name: node, image: python:3.11}]
"""


def _containers(jobset: dict[str, Any], job: str) -> list[dict[str, Any]]:
    rjob = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == job)
    return list(rjob["template"]["spec"]["template"]["spec"]["containers"])


def test_cache_pods_get_every_peer_and_trainers_get_pod_0() -> None:
    runtime = parse_object(yaml.safe_load(CACHE_RUNTIME))
    assert isinstance(runtime, TrainingRuntime)
    job = TrainJob.model_validate(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "sales", "namespace": "default"},
            "spec": {
                "runtimeRef": {"name": "three-cache-pods", "kind": "TrainingRuntime"},
                "initializer": {"dataset": {"storageUri": "cache://s/t"}},
                "trainer": {"numNodes": 2},
            },
        }
    )
    jobset = render(job, runtime, ctx=BuildContext(credential_gen=lambda: "c" * 43))[-1]
    cache_env = {
        e["name"]: e.get("value") for e in _containers(jobset, "cache-initializer")[0]["env"]
    }
    assert cache_env["DATA_CACHE_PEERS"] == ",".join(
        f"sales-cache-initializer-0-{i}.sales:50051" for i in range(3)
    )
    assert cache_env["STORAGE_URI"] == "cache://s/t"
    node_env = {e["name"]: e.get("value") for e in _containers(jobset, "node")[0]["env"]}
    assert node_env["DATA_CACHE_ENDPOINT"] == "sales-cache-initializer-0-0.sales:50051"
    assert "DATA_CACHE_PEERS" not in node_env


def test_the_local_jobset_controller_maps_every_declared_port() -> None:
    jobset = {
        "spec": {
            "replicatedJobs": [
                {
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {
                                    "containers": [
                                        {
                                            "ports": [
                                                {"containerPort": 50051},
                                                {"containerPort": "bad"},
                                            ]
                                        }
                                    ]
                                }
                            }
                        }
                    }
                },
                {
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"initContainers": [{"ports": [{"containerPort": 8080}]}]}
                            }
                        }
                    }
                },
            ]
        }
    }
    assert declared_ports(jobset) == [8080, 29500, 50051]
    assert declared_ports({}) == [29500]


def test_the_built_in_runtime_runs_the_cache_with_a_grpc_probe() -> None:
    runtime = yaml.safe_load((ROOT / "runtimes/torch-distributed-with-cache.yaml").read_text())
    cache = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    container = cache["template"]["spec"]["containers"][0]
    assert container["command"] == ["trainer", "data-cache", "serve"]
    assert container["readinessProbe"]["grpc"] == {"port": 50051}
    assert cache["backoffLimit"] == 0 and cache["template"]["spec"]["restartPolicy"] == "Never"


def test_a_grpc_probe_without_grpcio_fails_and_says_which_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trainer.local.executor.kubelet import grpc_probe  # noqa: PLC0415

    monkeypatch.setattr(grpc_probe, "grpc_modules", lambda: None)
    with pytest.raises(ImportError, match=r"the 'datacache' extra: pip install"):
        grpc_probe.check_health("127.0.0.1:50051", "", 1.0)


def test_the_dockerfile_builds_the_image_the_runtime_names() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    runtime = yaml.safe_load((ROOT / "runtimes/torch-distributed-with-cache.yaml").read_text())
    cache = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    image = cache["template"]["spec"]["containers"][0]["image"]
    assert f"docker build --target data-cache -t {image} ." in dockerfile
    stage = dockerfile.split("AS data-cache\n", 1)[1].split("\nFROM ", 1)[0]
    assert 'ENTRYPOINT ["trainer", "data-cache", "serve"]' in stage
    assert "USER 65532:65532" in stage and "EXPOSE 50051" in stage


def test_serve_without_the_extra_says_which_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner  # noqa: PLC0415

    from trainer.cli.main import app  # noqa: PLC0415

    real = importlib.import_module

    def no_pyarrow(name: str) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real(name)

    monkeypatch.setattr(importlib, "import_module", no_pyarrow)
    result = CliRunner().invoke(
        app,
        ["data-cache", "serve", "--source", "/d.csv", "--table", "cache://a/b"],
    )
    assert result.exit_code == 1
    assert "error: the data cache needs pyarrow, which is not installed" in result.output
    assert "pip install 'kubeflow-trainer-py[datacache]'" in result.output
