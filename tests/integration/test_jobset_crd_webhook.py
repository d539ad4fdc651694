"""The local plane's JobSet CRD and built-in JobSet webhook, as JobSet v0.12.0 has them: the
CRD's defaults are applied on create, and the limits JobSet checks in its validating webhook
rather than in its CRD (rule names, job failure reasons, managedBy, groupName, the subdomain,
success-policy targets, the coordinator, replicas times parallelism) are refused with 403 and
JobSet's own messages. A replicated job may depend on one listed after it: Trainer's MPI
runtimes put the launcher, which waits for the nodes, first."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from trainer.admission.jobset_rules import GROUP_NAME_TOO_LONG, SUBDOMAIN_TOO_LONG
from trainer.api import crds
from trainer.local.apiserver import APIServer
from trainer.machinery.names import is_dns1035_label, is_dns1123_subdomain

URL = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
DENIED = 'admission webhook "vjobset.kb.io" denied the request: '
POD = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
BASE: dict[str, Any] = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "metadata": {"name": "js"},
    "spec": {
        "replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": POD}}},
            {"name": "launcher", "template": {"spec": {"template": POD}}},
        ]
    },
}


@pytest.fixture
async def post() -> AsyncIterator[Any]:
    server = APIServer()
    await server.start()
    server.storage.create_direct(
        "apiextensions.k8s.io/v1", "CustomResourceDefinition", crds.jobset_crd()
    )
    connector = aiohttp.TCPConnector(ssl=server.client_ssl_context())
    async with aiohttp.ClientSession(connector=connector, headers=server.auth_headers()) as session:

        async def send(spec: dict[str, Any], name: str = "js") -> tuple[int, dict[str, Any]]:
            body = copy.deepcopy(BASE)
            body["metadata"]["name"] = name
            body["spec"].update(spec)
            async with session.post(server.url + URL, json=body) as resp:
                return resp.status, await resp.json()

        try:
            yield send
        finally:
            await server.stop()


async def test_the_crd_defaults_restart_strategy_and_claim_retention(post: Any) -> None:
    status, stored = await post(
        {
            "failurePolicy": {"maxRestarts": 2},
            "volumeClaimPolicies": [
                {"templates": [{"metadata": {"name": "data"}}], "retentionPolicy": {}}
            ],
        }
    )
    assert status == 201, stored
    assert stored["spec"]["failurePolicy"] == {"maxRestarts": 2, "restartStrategy": "Recreate"}
    assert stored["spec"]["volumeClaimPolicies"][0]["retentionPolicy"] == {"whenDeleted": "Delete"}


async def test_what_the_webhook_checks_passes_when_valid(post: Any) -> None:
    status, stored = await post(
        {
            "managedBy": "kueue.x-k8s.io/multikueue",
            "replicatedJobs": [
                {"name": "node", "groupName": "workers", "template": {"spec": {"template": POD}}}
            ],
            "failurePolicy": {
                "rules": [
                    {
                        "name": "Retry_on:deadline",
                        "action": "RestartJobSet",
                        "onJobFailureReasons": ["DeadlineExceeded", "PodFailurePolicy"],
                        "targetReplicatedJobs": ["node"],
                    }
                ]
            },
        }
    )
    assert status == 201, stored


def rule(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "action": "FailJobSet", **extra}


NAME_CHARS = (
    "a failure policy rule name must start with an alphabetic character, optionally followed "
    "by a string of alphanumeric characters or '_,:', and must end with an alphanumeric "
    "character or '_'"
)
REFUSED = [
    (
        {
            "replicatedJobs": [
                {"name": "n", "groupName": "g" * 64, "template": {"spec": {"template": POD}}}
            ]
        },
        [GROUP_NAME_TOO_LONG],
    ),
    (
        {
            "replicatedJobs": [
                {"name": "n", "groupName": "Group_1", "template": {"spec": {"template": POD}}}
            ]
        },
        [
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character (e.g. "
            "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        ],
    ),
    (
        {"managedBy": "example.com/" + "m" * 60},
        ["spec.managedBy: Too long: may not be more than 63 bytes"],
    ),
    (
        {"managedBy": "multikueue"},
        [
            'spec.managedBy: Invalid value: "multikueue": must be a domain-prefixed path '
            '(such as "acme.io/foo")'
        ],
    ),
    (
        {"failurePolicy": {"rules": [rule("r" * 129)]}},
        [
            "invalid failure policy rule name of length 129, the rule name must be at least 1 "
            "characters long and at most 128 characters long"
        ],
    ),
    (
        {"failurePolicy": {"rules": [rule("")]}},
        [
            "invalid failure policy rule name of length 0, the rule name must be at least 1 "
            "characters long and at most 128 characters long",
            f"invalid failure policy rule name '', {NAME_CHARS}",
        ],
    ),
    (
        {"failurePolicy": {"rules": [rule("1st-rule")]}},
        [f"invalid failure policy rule name '1st-rule', {NAME_CHARS}"],
    ),
    (
        {"failurePolicy": {"rules": [rule("r", onJobFailureReasons=["OOMKilled"])]}},
        [
            "invalid job failure reason 'OOMKilled' in failure policy is not a recognized job "
            "failure reason"
        ],
    ),
    (
        {"failurePolicy": {"rules": [rule("r", targetReplicatedJobs=["ghost"])]}},
        [
            "invalid replicatedJob name 'ghost' in failure policy does not appear in "
            ".spec.ReplicatedJobs"
        ],
    ),
    (
        {"failurePolicy": {"rules": [rule("same"), rule("other"), rule("same")]}},
        ["rule names are not unique, rules with indices [0 2] all have the same name 'same'"],
    ),
]


def rj(name: str, **extra: Any) -> dict[str, Any]:
    """A replicated job; ``job`` updates its Job template's spec."""
    spec = {"template": POD, **extra.pop("job", {})}
    return {"name": name, "template": {"spec": spec}, **extra}


REFUSED += [
    (
        {"network": {"subdomain": "Bad_Sub"}},
        [*is_dns1123_subdomain("Bad_Sub"), *is_dns1035_label("Bad_Sub")],
    ),
    ({"network": {"subdomain": "s" * 64}}, [SUBDOMAIN_TOO_LONG]),
    (
        {"successPolicy": {"operator": "All", "targetReplicatedJobs": ["node", "ghost"]}},
        ["invalid replicatedJob name 'ghost' does not appear in .spec.ReplicatedJobs"],
    ),
    (
        {"replicatedJobs": [rj("node", replicas=65536, job={"parallelism": 65536})]},
        [
            "the product of replicas and parallelism must not exceed 2147483647 for "
            "replicatedJob 'node'"
        ],
    ),
    (
        # Trainer's launcher waits for its nodes: they must be listed before it.
        {
            "replicatedJobs": [
                rj("launcher", dependsOn=[{"name": "node", "status": "Ready"}]),
                rj("node"),
            ]
        },
        [
            "DependsOn can't be set for the first ReplicatedJob",
            "replicatedJob: launcher cannot depend on replicatedJob: node",
        ],
    ),
    (
        {
            "replicatedJobs": [
                rj("init"),
                rj("node", dependsOn=[{"name": "ghost", "status": "Complete"}]),
            ]
        },
        ["replicatedJob: node cannot depend on replicatedJob: ghost"],
    ),
    (
        {"coordinator": {"replicatedJob": "ghost"}},
        ["coordinator replicatedJob ghost does not exist"],
    ),
    (
        {"coordinator": {"replicatedJob": "node", "jobIndex": 1}},
        ["coordinator job index 1 is invalid for replicatedJob node"],
    ),
    (
        {
            "replicatedJobs": [rj("node", job={"completionMode": "NonIndexed"})],
            "coordinator": {"replicatedJob": "node"},
        },
        ["job for coordinator pod must be indexed completion mode"],
    ),
    (
        {
            "replicatedJobs": [rj("node", job={"completions": 2, "parallelism": 2})],
            "coordinator": {"replicatedJob": "node", "podIndex": 2},
        },
        ["coordinator pod index 2 is invalid for replicatedJob node job index 0"],
    ),
]


async def test_dependencies_subdomain_success_targets_and_coordinator_pass_when_valid(
    post: Any,
) -> None:
    status, stored = await post(
        {
            "replicatedJobs": [
                rj("node", replicas=2, job={"completions": 3, "parallelism": 3}),
                rj("launcher", dependsOn=[{"name": "node", "status": "Ready"}]),
            ],
            "network": {"subdomain": "workers"},
            "successPolicy": {"operator": "Any", "targetReplicatedJobs": ["node"]},
            "coordinator": {"replicatedJob": "node", "jobIndex": 1, "podIndex": 2},
        }
    )
    assert status == 201, stored


@pytest.mark.parametrize(("spec", "messages"), REFUSED)
async def test_jobset_webhook_limits_are_refused_with_jobsets_messages(
    post: Any, spec: dict[str, Any], messages: list[str]
) -> None:
    status, answer = await post(spec)
    assert status == 403, answer
    assert answer["reason"] == "Forbidden"
    assert answer["message"] == DENIED + "\n".join(messages)
