"""The client side of the webhook benchmarks (hack/bench/webhook.py and webhook_large.py): a
realistic TrainJob AdmissionReview and a minimal HTTP/1.1 keep-alive client over asyncio TLS
streams, much cheaper than a full HTTP client, so that the server, not the client, is what
saturates. Shared by both benchmarks, which must send the same requests the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl

HOST = "127.0.0.1"


def review_body(uid: str = "bench") -> bytes:
    """A realistic TrainJob AdmissionReview (about 2 KB): torch, 4 nodes, env, resources, a
    Kueue runtimePatch, metadata as the API server sends it."""
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "bench-job",
            "namespace": "team-a",
            "uid": "8a9c7f1e-0000-4000-8000-000000000001",
            "generation": 1,
            "creationTimestamp": "2026-11-22T10:00:00Z",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "team": "a"},
            "annotations": {"example.com/owner": "alice"},
        },
        "spec": {
            "runtimeRef": {
                "name": "torch-distributed",
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
            },
            "trainer": {
                "numNodes": 4,
                "image": "ghcr.io/example/train:1.0",
                "command": ["torchrun", "train.py"],
                "args": ["--epochs", "3", "--lr", "0.001"],
                "env": [
                    {"name": "WANDB_PROJECT", "value": "bench"},
                    {"name": "HF_HOME", "value": "/cache/hf"},
                ],
                "resourcesPerNode": {
                    "requests": {"cpu": "4", "memory": "16Gi"},
                    "limits": {"cpu": "4", "memory": "16Gi"},
                },
            },
            "runtimePatches": [
                {
                    "manager": "kueue.x-k8s.io/manager",
                    "time": "2026-11-22T10:00:00Z",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {
                                                "template": {
                                                    "spec": {
                                                        "nodeSelector": {"pool": "gpu-a"},
                                                        "tolerations": [
                                                            {
                                                                "key": "gpu",
                                                                "operator": "Exists",
                                                                "effect": "NoSchedule",
                                                            }
                                                        ],
                                                    }
                                                }
                                            }
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
            "suspend": True,
            "managedBy": "trainer.kubeflow.org/trainjob-controller",
        },
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {
                "group": "trainer.kubeflow.org",
                "version": "v1alpha1",
                "resource": "trainjobs",
            },
            "requestKind": {
                "group": "trainer.kubeflow.org",
                "version": "v1alpha1",
                "kind": "TrainJob",
            },
            "name": "bench-job",
            "namespace": "team-a",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": trainjob,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return json.dumps(review).encode()


class Connection:
    """One keep-alive HTTPS connection speaking just enough HTTP/1.1."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int, ctx: ssl.SSLContext) -> Connection:
        reader, writer = await asyncio.open_connection(
            HOST, port, ssl=ctx, server_hostname="localhost"
        )
        return cls(reader, writer)

    async def post(self, request: bytes) -> tuple[int, bytes]:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()


def http_request(path: str, body: bytes) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def expect_allowed(status: int, body: bytes) -> bool:
    return status == 200 and b'"allowed": true' in body
