"""Kubernetes protobuf request bodies (what kubectl 1.32's typed clients send)."""

from __future__ import annotations

import pytest

from trainer.local.apiserver import protobuf
from trainer.local.apiserver.errors import APIError


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def ld(field: int, data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return varint(field << 3 | 2) + varint(len(raw)) + raw


def vi(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = ld(1, api_version) + ld(2, kind)
    return protobuf.MAGIC + ld(1, type_meta) + ld(2, raw) + ld(3, "") + ld(4, "")


def zero_time() -> bytes:
    return vi(1, protobuf.ZERO_TIME) + vi(2, 0)


def meta(name: str, namespace: str = "", **maps: dict[str, str]) -> bytes:
    out = ld(1, name) + ld(2, "") + ld(3, namespace) + ld(8, zero_time()) + vi(7, 0)
    for number, key in ((11, "labels"), (12, "annotations")):
        for k, v in (maps.get(key) or {}).items():
            out += ld(number, ld(1, k) + ld(2, v))
    return out


def test_namespace_as_kubectl_create_namespace_sends_it() -> None:
    body = envelope("v1", "Namespace", ld(1, meta("team-a")) + ld(2, b"") + ld(3, ld(1, "")))
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a"},  # generation 0 is omitempty
        "spec": {},
        "status": {},
    }


def test_configmap_and_secret_maps() -> None:
    cm = envelope(
        "v1",
        "ConfigMap",
        ld(1, meta("c", "ns", labels={"app": "x"}))
        + ld(2, ld(1, "a") + ld(2, "1"))
        + ld(3, ld(1, "bin") + ld(2, b"\x00\x01")),
    )
    decoded = protobuf.decode(cm)
    assert decoded["metadata"]["labels"] == {"app": "x"}
    assert decoded["data"] == {"a": "1"}
    assert decoded["binaryData"] == {"bin": "AAE="}
    secret = envelope(
        "v1", "Secret", ld(1, meta("s", "ns")) + ld(2, ld(1, "x") + ld(2, b"y")) + ld(3, "")
    )
    decoded = protobuf.decode(secret)
    assert decoded["data"] == {"x": "eQ=="}
    assert "type" not in decoded  # empty: the server defaults it to Opaque


def test_priority_class_negative_values_and_bools() -> None:
    pc = envelope(
        "scheduling.k8s.io/v1", "PriorityClass", ld(1, meta("low")) + vi(2, -5) + vi(3, 1)
    )
    decoded = protobuf.decode(pc)
    assert (decoded["value"], decoded["globalDefault"]) == (-5, True)


def test_token_request_as_kubectl_create_token_sends_it() -> None:
    # kubectl create token default --audience a --audience b --duration 10m
    #   --bound-object-kind Pod --bound-object-name p: empty strings written, the zero
    #   creationTimestamp and status.expirationTimestamp as empty messages.
    empty_meta = b"".join(ld(n, "") for n in (1, 2, 3, 4, 5, 6)) + vi(7, 0) + ld(8, b"")
    bound = ld(1, "Pod") + ld(2, "v1") + ld(3, "p") + ld(4, "")
    spec = ld(1, "a") + ld(1, "b") + ld(3, bound) + vi(4, 600)
    status = ld(1, "") + ld(2, b"")
    body = envelope(
        "authentication.k8s.io/v1", "TokenRequest", ld(1, empty_meta) + ld(2, spec) + ld(3, status)
    )
    assert protobuf.decode(body) == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {},
        "spec": {
            "audiences": ["a", "b"],
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"},
            "expirationSeconds": 600,
        },
        "status": {},
    }
    # without --duration kubectl leaves expirationSeconds out (the server's default applies)
    bare = envelope("authentication.k8s.io/v1", "TokenRequest", ld(1, empty_meta) + ld(2, b""))
    assert protobuf.decode(bare)["spec"] == {}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{}", 400),
        (protobuf.MAGIC + b"\x0a\xff", 400),
        (envelope("trainer.kubeflow.org/v1alpha1", "TrainJob", b""), 415),
    ],
)
def test_rejected_bodies(body: bytes, code: int) -> None:
    with pytest.raises(APIError) as err:
        protobuf.decode(body)
    assert err.value.code == code
    if code == 415:  # a kind this server has no protobuf schema of: it names what it decodes
        assert "accepted media types include: application/json, application/yaml" in str(err.value)


# --- what kube-scheduler and kube-controller-manager send (--kube-api-content-type's default) ---


def micro_time(seconds: int, nanos: int) -> bytes:
    return vi(1, seconds) + vi(2, nanos)


def test_binding_as_kube_scheduler_posts_it() -> None:
    # POST /api/v1/namespaces/ns/pods/p/binding: the pod's name, uid and the node
    target = ld(1, "Node") + ld(2, "") + ld(3, "kwok-node-0") + ld(4, "") + ld(5, "")
    body = envelope("v1", "Binding", ld(1, meta("p", "ns") + ld(5, "u-1")) + ld(2, target))
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "target": {"kind": "Node", "name": "kwok-node-0"},
    }


def test_events_k8s_io_event_with_micro_time() -> None:
    # kube-scheduler's "Scheduled" event (events.k8s.io/v1): eventTime is a MicroTime,
    # written with six decimals; deprecatedCount 0 is omitempty
    regarding = ld(1, "Pod") + ld(2, "ns") + ld(3, "p") + ld(4, "u-1") + ld(5, "v1")
    raw = (
        ld(1, meta("p.1", "ns"))
        + ld(2, micro_time(1_700_000_000, 123_456_789))
        + ld(4, "default-scheduler")
        + ld(5, "default-scheduler-host")
        + ld(6, "Binding")
        + ld(7, "Scheduled")
        + ld(8, regarding)
        + ld(10, "Successfully assigned ns/p to kwok-node-0")
        + ld(11, "Normal")
        + ld(12, ld(1, "") + ld(2, ""))
        + ld(13, zero_time())
        + ld(14, zero_time())
        + vi(15, 0)
    )
    decoded = protobuf.decode(envelope("events.k8s.io/v1", "Event", raw))
    assert decoded["eventTime"] == "2023-11-14T22:13:20.123456Z"
    assert decoded["regarding"] == {
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "uid": "u-1",
        "apiVersion": "v1",
    }
    assert decoded["deprecatedSource"] == {}
    assert "deprecatedCount" not in decoded and "deprecatedFirstTimestamp" not in decoded
    assert (decoded["reason"], decoded["type"], decoded["action"]) == (
        "Scheduled",
        "Normal",
        "Binding",
    )


def test_pod_as_the_job_controller_creates_it() -> None:
    # Inlined structs (a Volume's VolumeSource) are their parent's fields in JSON; resources are
    # maps of Quantity; a probe's port an IntOrString; pointers keep their zero values
    volume = ld(1, "data") + ld(2, ld(2, ld(1, "") + ld(2, ld(1, "1Gi"))))
    resources = ld(1, ld(1, "nvidia.com/gpu") + ld(2, ld(1, "1"))) + ld(
        2, ld(1, "cpu") + ld(2, ld(1, "500m"))
    )
    probe = ld(1, ld(3, ld(1, vi(1, 0) + vi(2, 29500)))) + vi(2, 0)
    container = (
        ld(1, "node")
        + ld(2, "torch")
        + ld(3, "torchrun")
        + ld(3, "train.py")
        + ld(8, resources)
        + ld(10, probe)
        + vi(16, 0)  # stdin false: omitempty
    )
    spec = (
        ld(1, volume)
        + ld(2, container)
        + ld(3, "Never")
        + vi(4, 0)  # terminationGracePeriodSeconds 0: a pointer, kept
        + ld(7, ld(1, "kubernetes.io/hostname") + ld(2, "kwok-node-0"))
    )
    owner = ld(1, "Job") + ld(3, "j") + ld(4, "u-j") + ld(5, "batch/v1") + vi(6, 1) + vi(7, 1)
    tracking = "batch.kubernetes.io/job-tracking"
    pod_meta = ld(2, "j-") + ld(3, "ns") + ld(13, owner) + ld(14, tracking)
    decoded = protobuf.decode(envelope("v1", "Pod", ld(1, pod_meta) + ld(2, spec)))
    assert decoded["metadata"] == {
        "generateName": "j-",
        "namespace": "ns",
        "ownerReferences": [
            {
                "kind": "Job",
                "name": "j",
                "uid": "u-j",
                "apiVersion": "batch/v1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "finalizers": ["batch.kubernetes.io/job-tracking"],
    }
    assert decoded["spec"]["volumes"] == [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}]
    assert decoded["spec"]["terminationGracePeriodSeconds"] == 0
    assert decoded["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "kwok-node-0"}
    (c,) = decoded["spec"]["containers"]
    assert c["command"] == ["torchrun", "train.py"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "500m"}}
    assert c["livenessProbe"] == {"tcpSocket": {"port": 29500}}
    assert "stdin" not in c


def test_job_status_and_delete_options() -> None:
    # PUT jobs/status: the counters are not omitempty in Go's JSON only where they are pointers
    status = (
        vi(4, 0)  # active 0: omitempty
        + vi(5, 2)  # succeeded
        + vi(9, 0)  # ready 0: a pointer, kept
        + ld(8, ld(1, "uid-1") + ld(1, "uid-2"))
    )
    decoded = protobuf.decode(envelope("batch/v1", "Job", ld(1, meta("j", "ns")) + ld(3, status)))
    assert decoded["status"] == {
        "succeeded": 2,
        "ready": 0,
        "uncountedTerminatedPods": {"succeeded": ["uid-1", "uid-2"]},
    }
    # a typed client's DELETE body: DeleteOptions in the client's own group and version
    options = protobuf.decode(envelope("v1", "DeleteOptions", vi(1, 0) + ld(4, "Background")))
    assert options == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Background",
    }


def test_packed_and_unpacked_repeated_ints() -> None:
    # podFailurePolicy onExitCodes.values: []int32, unpacked by gogo-protobuf; packed accepted
    def job(values: bytes) -> dict[str, object]:
        requirement = ld(2, "In") + values
        rule = ld(1, "FailJob") + ld(2, requirement)
        spec = ld(11, ld(1, rule))
        decoded = protobuf.decode(envelope("batch/v1", "Job", ld(1, meta("j")) + ld(2, spec)))
        policy: dict[str, object] = decoded["spec"]["podFailurePolicy"]
        return policy

    unpacked = job(vi(3, 1) + vi(3, 42))
    packed = job(ld(3, varint(1) + varint(42)))
    assert unpacked == packed
    on_exit = {"operator": "In", "values": [1, 42]}
    assert unpacked == {"rules": [{"action": "FailJob", "onExitCodes": on_exit}]}
