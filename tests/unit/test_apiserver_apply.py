"""Server-side apply and managed-fields tracking of the embedded API server."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.local.apiserver import apply as ssa
from trainer.local.apiserver.errors import APIError
from trainer.local.apiserver.resources import ResourceType
from trainer.machinery.merge_keys import CORE_MERGE_KEYS

Obj = dict[str, Any]

# libyaml's loader: PyYAML's pure-Python one takes seconds over this 10k-line file, at every
# collection of the suite.
_CRD = yaml.load(
    (Path(__file__).parents[2] / "manifests/local/jobset.x-k8s.io_jobsets.yaml").read_text(),
    Loader=yaml.CSafeLoader,
)
JOBSET = ResourceType(
    "jobset.x-k8s.io",
    "v1alpha2",
    "JobSet",
    "jobsets",
    True,
    status=True,
    builtin=False,
    schema=_CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
)
JS_API = "jobset.x-k8s.io/v1alpha2"

WIDGET = ResourceType(
    "example.com",
    "v1",
    "Widget",
    "widgets",
    True,
    builtin=False,
    schema=yaml.safe_load(
        """
type: object
properties:
  spec:
    type: object
    properties:
      config:
        type: object
        x-kubernetes-preserve-unknown-fields: true
      selector:
        type: object
        x-kubernetes-map-type: atomic
        additionalProperties: {type: string}
      tags:
        type: array
        x-kubernetes-list-type: set
        items: {type: string}
  status:
    type: object
    x-kubernetes-preserve-unknown-fields: true
"""
    ),
)
POD = ResourceType("", "v1", "Pod", "pods", True, status=True, merge_keys=CORE_MERGE_KEYS)
SERVICE = ResourceType("", "v1", "Service", "services", True, merge_keys=CORE_MERGE_KEYS)

T0, T1, T2 = "2024-05-01T10:00:00Z", "2024-05-01T10:00:05Z", "2024-05-01T10:00:09Z"


def jobset(spec: str = "", *, labels: str = "{app: demo}", **top: Any) -> Obj:
    """A JobSet apply configuration: ``spec`` YAML under spec, defaulting to one replicated job."""
    body = yaml.safe_load(spec) if spec else yaml.safe_load(NODE_JOB)
    obj: Obj = {
        "apiVersion": JS_API,
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "ns", "labels": yaml.safe_load(labels)},
        "spec": body,
        **top,
    }
    if obj["metadata"]["labels"] is None:
        del obj["metadata"]["labels"]
    return obj


NODE_JOB = """
suspend: true
replicatedJobs:
- name: node
  replicas: 1
  template:
    spec:
      parallelism: 2
      template:
        spec:
          containers:
          - name: node
            image: img
            ports: [{containerPort: 29500}]
"""


def stored(obj: Obj) -> Obj:
    """What the server stores after a write: system metadata added."""
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="uid-1", resourceVersion="7", creationTimestamp=T0, generation=1)
    return out


def entry(obj: Obj, manager: str, operation: str = "Apply", subresource: str = "") -> Obj | None:
    for e in obj["metadata"].get("managedFields") or []:
        if (e["manager"], e["operation"], e.get("subresource", "")) == (
            manager,
            operation,
            subresource,
        ):
            return dict(e)
    return None


def owned(obj: Obj, manager: str, operation: str = "Apply", subresource: str = "") -> set[str]:
    """The fields a manager owns, printed like Kubernetes prints paths."""
    e = entry(obj, manager, operation, subresource)
    if e is None:
        return set()
    out: set[str] = set()

    def walk(node: Obj, prefix: tuple[str, ...]) -> None:
        for key, sub in node.items():
            if key == ".":
                continue
            path = (*prefix, key)
            if not sub or "." in sub:
                out.add(ssa.path_string(path))
            walk(sub, path)

    walk(e["fieldsV1"], ())
    return out


def rj(obj: Obj, name: str) -> Obj:
    return next(j for j in obj["spec"]["replicatedJobs"] if j["name"] == name)


def pod_spec(obj: Obj, name: str = "node") -> Obj:
    spec: Obj = rj(obj, name)["template"]["spec"]["template"]["spec"]
    return spec


# --- create and the wire format ----------------------------------------------------------------


def test_create_by_apply_writes_the_object_and_exact_managed_fields() -> None:
    config = jobset(
        """
suspend: true
replicatedJobs:
- name: node
  replicas: 1
  template:
    spec:
      parallelism: 2
      template:
        spec:
          nodeSelector: {pool: a100}
          containers:
          - name: node
            image: img
            ports: [{containerPort: 29500}]
"""
    )
    out = ssa.apply(JOBSET, None, config, "trainer", force=True, now=T0)
    assert {k: v for k, v in out.items() if k != "metadata"} == {
        k: v for k, v in config.items() if k != "metadata"
    }
    expected = [
        {
            "manager": "trainer",
            "operation": "Apply",
            "apiVersion": JS_API,
            "time": T0,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicatedJobs": {
                        'k:{"name":"node"}': {
                            ".": {},
                            "f:name": {},
                            "f:replicas": {},
                            "f:template": {
                                "f:spec": {
                                    "f:parallelism": {},
                                    "f:template": {
                                        "f:spec": {
                                            "f:containers": {
                                                'k:{"name":"node"}': {
                                                    ".": {},
                                                    "f:image": {},
                                                    "f:name": {},
                                                    "f:ports": {
                                                        'k:{"containerPort":29500,'
                                                        '"protocol":"TCP"}': {
                                                            ".": {},
                                                            "f:containerPort": {},
                                                        }
                                                    },
                                                }
                                            },
                                            "f:nodeSelector": {},  # an atomic map
                                        }
                                    },
                                }
                            },
                        }
                    },
                    "f:suspend": {},
                },
            },
        }
    ]
    # Same content and the same key order as Kubernetes serialises it.
    assert json.dumps(out["metadata"]["managedFields"]) == json.dumps(expected)
    assert out["metadata"]["name"] == "train" and out["metadata"]["labels"] == {"app": "demo"}
    assert "managedFields" not in config["metadata"]  # inputs are not modified


@pytest.mark.parametrize(
    "config",
    [
        jobset(),
        jobset(labels="{app: demo, team: ml}"),
        jobset(
            """
suspend: false
replicatedJobs:
- name: node
  replicas: 2
  template:
    spec:
      template:
        spec:
          nodeSelector: {a: "1"}
          tolerations: [{key: gpu, operator: Exists}]
          containers: [{name: node, image: img, env: [{name: A, value: "1"}]}]
- name: init
  replicas: 1
  template: {spec: {template: {spec: {containers: [{name: i, image: x}]}}}}
"""
        ),
    ],
    ids=["basic", "labels", "two-jobs"],
)
def test_reapplying_an_identical_config_changes_nothing(config: Obj) -> None:
    first = stored(ssa.apply(JOBSET, None, config, "trainer", force=True, now=T0))
    again = ssa.apply(JOBSET, first, config, "trainer", force=False, now=T1)
    assert again == first
    assert entry(again, "trainer")["time"] == T0  # type: ignore[index]


# --- field removal --------------------------------------------------------------------------


def _without_label(o: Obj) -> None:
    del o["metadata"]["labels"]["team"]


def _without_node_selector(o: Obj) -> None:
    del pod_spec(o)["nodeSelector"]


def _without_init_job(o: Obj) -> None:
    o["spec"]["replicatedJobs"] = [rj(o, "node")]


def _without_parallelism(o: Obj) -> None:
    del rj(o, "node")["template"]["spec"]["parallelism"]


def _without_env_var(o: Obj) -> None:
    pod_spec(o)["containers"][0]["env"] = [{"name": "A", "value": "1"}]


FULL = """
suspend: true
replicatedJobs:
- name: node
  replicas: 1
  template:
    spec:
      parallelism: 2
      template:
        spec:
          nodeSelector: {a: "1", b: "2"}
          containers:
          - name: node
            image: img
            env: [{name: A, value: "1"}, {name: B, value: "2"}]
- name: init
  replicas: 1
  template: {spec: {template: {spec: {containers: [{name: i, image: x}]}}}}
"""


@pytest.mark.parametrize(
    ("drop", "gone", "path"),
    [
        (
            _without_label,
            lambda o: "team" not in o["metadata"]["labels"],
            ".metadata.labels.team",
        ),
        (
            _without_node_selector,
            lambda o: "nodeSelector" not in pod_spec(o),
            '.spec.replicatedJobs[name="node"].template.spec.template.spec.nodeSelector',
        ),
        (
            _without_init_job,
            lambda o: [j["name"] for j in o["spec"]["replicatedJobs"]] == ["node"],
            '.spec.replicatedJobs[name="init"]',
        ),
        (
            _without_parallelism,
            lambda o: "parallelism" not in rj(o, "node")["template"]["spec"],
            '.spec.replicatedJobs[name="node"].template.spec.parallelism',
        ),
        (
            _without_env_var,
            lambda o: pod_spec(o)["containers"][0]["env"] == [{"name": "A", "value": "1"}],
            '.spec.replicatedJobs[name="node"].template.spec.template.spec'
            '.containers[name="node"].env[name="B"]',
        ),
    ],
    ids=["label", "node-selector", "list-map-item", "nested-field", "env-entry"],
)
def test_fields_no_longer_applied_are_removed(
    drop: Callable[[Obj], None], gone: Callable[[Obj], bool], path: str
) -> None:
    config = jobset(FULL, labels="{app: demo, team: ml}")
    live = stored(ssa.apply(JOBSET, None, config, "trainer", force=True, now=T0))
    live["spec"]["successPolicy"] = {"operator": "All"}  # defaulted by a webhook: nobody owns it
    assert path in owned(live, "trainer")
    smaller = copy.deepcopy(config)
    drop(smaller)
    out = ssa.apply(JOBSET, live, smaller, "trainer", force=True, now=T1)
    assert gone(out)
    assert path not in owned(out, "trainer")
    assert out["spec"]["successPolicy"] == {"operator": "All"}
    meta = out["metadata"]
    assert (meta["name"], meta["namespace"], meta["uid"], meta["resourceVersion"]) == (
        "train",
        "ns",
        "uid-1",
        "7",
    )
    assert entry(out, "trainer")["time"] == T1  # type: ignore[index]


def test_dropping_every_label_removes_the_labels_map() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    out = ssa.apply(JOBSET, live, jobset(labels="null"), "trainer", force=True, now=T1)
    assert "labels" not in out["metadata"]
    assert out["metadata"]["name"] == "train"


# --- several managers ------------------------------------------------------------------------


def test_two_managers_share_a_field_with_the_same_value() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    shared = stored(ssa.apply(JOBSET, live, jobset("suspend: true"), "kueue", force=False, now=T1))
    for manager in ("trainer", "kueue"):
        assert {".spec.suspend", ".metadata.labels.app"} <= owned(shared, manager)
    # trainer stops applying both: kueue still owns them, so they stay.
    jobs_only = jobset(NODE_JOB.replace("suspend: true", ""), labels="null")
    out = ssa.apply(JOBSET, shared, jobs_only, "trainer", force=True, now=T2)
    assert out["spec"]["suspend"] is True and out["metadata"]["labels"] == {"app": "demo"}
    assert {".spec.suspend", ".metadata.labels.app"} & owned(out, "trainer") == set()
    assert {".spec.suspend", ".metadata.labels.app"} <= owned(out, "kueue")


@pytest.mark.parametrize(
    ("first", "second_spec", "message", "fields"),
    [
        (
            "apply",
            """
replicatedJobs:
- name: node
  replicas: 3
""",
            'Apply failed with 1 conflict: conflict with "trainer": '
            '.spec.replicatedJobs[name="node"].replicas',
            ['.spec.replicatedJobs[name="node"].replicas'],
        ),
        (
            "update",
            "suspend: false",
            f'Apply failed with 1 conflict: conflict with "trainer" using {JS_API}: .spec.suspend',
            [".spec.suspend"],
        ),
        (
            "apply",
            """
suspend: false
replicatedJobs:
- name: node
  replicas: 3
""",
            'Apply failed with 2 conflicts: conflicts with "trainer":\n'
            "- .spec.suspend\n"
            '- .spec.replicatedJobs[name="node"].replicas',
            [".spec.suspend", '.spec.replicatedJobs[name="node"].replicas'],
        ),
    ],
    ids=["apply-manager", "update-manager", "two-conflicts"],
)
def test_conflicts_without_force(
    first: str, second_spec: str, message: str, fields: list[str]
) -> None:
    if first == "apply":
        live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    else:
        live = stored(jobset())
        ssa.track_update(JOBSET, None, live, "trainer", now=T0)
    config = jobset(second_spec, labels="null")
    with pytest.raises(APIError) as err:
        ssa.apply(JOBSET, live, config, "kueue", force=False, now=T1)
    assert (err.value.code, err.value.reason, err.value.message) == (409, "Conflict", message)
    manager = '"trainer"' if first == "apply" else f'"trainer" using {JS_API}'
    assert err.value.details["causes"] == [
        {"reason": "FieldManagerConflict", "message": f"conflict with {manager}", "field": f}
        for f in fields
    ]
    # With force the applier takes the fields over.
    out = ssa.apply(JOBSET, live, config, "kueue", force=True, now=T1)
    for f in fields:
        assert f in owned(out, "kueue")
        assert f not in owned(out, "trainer", "Apply" if first == "apply" else "Update")


def test_force_moves_ownership_and_drops_an_emptied_manager() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset("suspend: true", labels="null"), "a", force=True))
    assert owned(live, "a") == {".spec.suspend"}
    out = ssa.apply(JOBSET, live, jobset("suspend: false", labels="null"), "b", force=True, now=T1)
    assert out["spec"]["suspend"] is False
    assert entry(out, "a") is None
    assert owned(out, "b") == {".spec.suspend"}


def test_updates_then_a_forced_apply_takes_over() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    patched = copy.deepcopy(live)
    patched["spec"]["suspend"] = False
    pod_spec(patched)["nodeSelector"] = {"pool": "a"}
    ssa.track_update(JOBSET, live, patched, "kueue", now=T1)
    assert owned(patched, "kueue", "Update") == {
        ".spec.suspend",
        '.spec.replicatedJobs[name="node"].template.spec.template.spec.nodeSelector',
    }
    assert ".spec.suspend" not in owned(patched, "trainer")
    patched = stored(patched)
    with pytest.raises(APIError) as err:
        ssa.apply(JOBSET, patched, jobset(), "trainer", force=False, now=T2)
    assert err.value.message == (
        f'Apply failed with 1 conflict: conflict with "kueue" using {JS_API}: .spec.suspend'
    )
    out = ssa.apply(JOBSET, patched, jobset(), "trainer", force=True, now=T2)
    assert out["spec"]["suspend"] is True
    assert ".spec.suspend" in owned(out, "trainer")
    assert ".spec.suspend" not in owned(out, "kueue", "Update")
    assert pod_spec(out)["nodeSelector"] == {"pool": "a"}  # still owned by kueue


def test_list_map_items_merge_by_key_across_managers() -> None:
    trainer = jobset()
    live = stored(ssa.apply(JOBSET, None, trainer, "trainer", force=True, now=T0))
    init = jobset(
        """
replicatedJobs:
- name: init
  replicas: 1
  template: {spec: {template: {spec: {containers: [{name: i, image: x}]}}}}
- name: node
  template:
    spec:
      template:
        spec:
          containers: [{name: sidecar, image: s}]
""",
        labels="null",
    )
    both = stored(ssa.apply(JOBSET, live, init, "other", force=False, now=T1))
    # a new item lands where the configuration puts it (before the shared "node")
    assert [j["name"] for j in both["spec"]["replicatedJobs"]] == ["init", "node"]
    assert [c["name"] for c in pod_spec(both)["containers"]] == ["node", "sidecar"]
    assert '.spec.replicatedJobs[name="init"]' in owned(both, "other")
    assert '.spec.replicatedJobs[name="init"]' not in owned(both, "trainer")
    # trainer re-applies its own config: the other manager's items stay.
    again = ssa.apply(JOBSET, both, trainer, "trainer", force=False, now=T2)
    assert again == both
    # the other manager withdraws: only its own items go.
    out = ssa.apply(JOBSET, both, jobset("{}", labels="null"), "other", force=False, now=T2)
    assert [j["name"] for j in out["spec"]["replicatedJobs"]] == ["node"]
    assert [c["name"] for c in pod_spec(out)["containers"]] == ["node"]
    assert entry(out, "other") is None


def test_set_lists_union_by_value() -> None:
    def widget(tags: list[str], finalizers: list[str]) -> Obj:
        return {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "finalizers": finalizers},
            "spec": {"tags": tags},
        }

    live = stored(ssa.apply(WIDGET, None, widget(["a"], ["x/a"]), "one", force=True, now=T0))
    both = stored(ssa.apply(WIDGET, live, widget(["b", "a"], ["x/b"]), "two", force=False))
    assert both["spec"]["tags"] == ["b", "a"]
    assert both["metadata"]["finalizers"] == ["x/a", "x/b"]
    assert owned(both, "two") == {
        '.spec.tags[="a"]',
        '.spec.tags[="b"]',
        '.metadata.finalizers[="x/b"]',
    }
    out = ssa.apply(WIDGET, both, widget([], []), "one", force=False, now=T1)
    assert out["spec"]["tags"] == ["b", "a"]  # "a" is still applied by "two"
    assert out["metadata"]["finalizers"] == ["x/b"]
    assert entry(out, "one") is None


def test_atomic_lists_are_replaced_wholesale_and_conflict_as_one_field() -> None:
    def tolerations(items: str) -> Obj:
        return jobset(
            f"""
replicatedJobs:
- name: node
  template: {{spec: {{template: {{spec: {{tolerations: {items}}}}}}}}}
""",
            labels="null",
        )

    path = '.spec.replicatedJobs[name="node"].template.spec.template.spec.tolerations'
    two = "[{key: a, operator: Exists}, {key: b, operator: Exists}]"
    live = stored(ssa.apply(JOBSET, None, tolerations(two), "one", force=True, now=T0))
    assert {p for p in owned(live, "one") if "tolerations" in p} == {path}  # one leaf
    same = ssa.apply(JOBSET, live, tolerations(two), "two", force=False, now=T1)
    assert path in owned(same, "two") and path in owned(same, "one")
    with pytest.raises(APIError) as err:
        ssa.apply(JOBSET, live, tolerations("[{key: c, operator: Exists}]"), "two", force=False)
    assert err.value.details["causes"][0]["field"] == path
    out = ssa.apply(JOBSET, live, tolerations("[{key: c, operator: Exists}]"), "one", force=False)
    assert pod_spec(out)["tolerations"] == [{"key": "c", "operator": "Exists"}]


# --- the JobSet / Kueue scenario --------------------------------------------------------------


def _trainer_jobset(node_selector: dict[str, str] | None) -> Obj:
    config = jobset(FULL)
    if node_selector is None:
        del pod_spec(config)["nodeSelector"]
    else:
        pod_spec(config)["nodeSelector"] = node_selector
    return config


def test_kueue_node_selector_disappears_when_the_patch_is_cleared() -> None:
    # Kueue's runtimePatch put {a: "1"} into what trainer applies; JobSet's webhook defaulted
    # other fields.
    live = stored(ssa.apply(JOBSET, None, _trainer_jobset({"a": "1"}), "trainer", force=True))
    live["spec"]["startupPolicy"] = {"startupPolicyOrder": "AnyOrder"}
    out = ssa.apply(JOBSET, live, _trainer_jobset(None), "trainer", force=True, now=T1)
    assert "nodeSelector" not in pod_spec(out)
    assert out["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert not any("nodeSelector" in p for p in owned(out, "trainer"))
    # and a JSON merge patch could not have done it: the rest of the pod spec is intact.
    assert pod_spec(out)["containers"][0]["image"] == "img"


def test_an_update_managers_sibling_field_is_kept() -> None:
    live = stored(ssa.apply(JOBSET, None, _trainer_jobset({"a": "1"}), "trainer", force=True))
    patched = copy.deepcopy(live)
    pod_spec(patched)["containers"][0]["env"].append({"name": "C", "value": "3"})
    ssa.track_update(JOBSET, live, patched, "kueue", now=T1)
    out = ssa.apply(JOBSET, stored(patched), _trainer_jobset(None), "trainer", force=True, now=T2)
    assert "nodeSelector" not in pod_spec(out)
    assert [e["name"] for e in pod_spec(out)["containers"][0]["env"]] == ["A", "B", "C"]
    pod = '.spec.replicatedJobs[name="node"].template.spec.template.spec'
    env = f'{pod}.containers[name="node"].env'
    assert f'{env}[name="C"]' in owned(out, "kueue", "Update")


def test_atomic_maps_are_owned_and_replaced_as_one_field() -> None:
    """PodSpec.nodeSelector is ``x-kubernetes-map-type: atomic`` (as in Kubernetes and in
    upstream's CRDs): one leaf, replaced wholesale; an Update changing one key takes it over."""
    node_selector = '.spec.replicatedJobs[name="node"].template.spec.template.spec.nodeSelector'
    live = stored(
        ssa.apply(JOBSET, None, _trainer_jobset({"a": "1", "b": "2"}), "trainer", force=True)
    )
    assert {p for p in owned(live, "trainer") if "nodeSelector" in p} == {node_selector}
    out = stored(ssa.apply(JOBSET, live, _trainer_jobset({"a": "1"}), "trainer", force=True))
    assert pod_spec(out)["nodeSelector"] == {"a": "1"}
    patched = copy.deepcopy(out)
    pod_spec(patched)["nodeSelector"]["b"] = "2"
    ssa.track_update(JOBSET, out, patched, "kueue", now=T1)
    assert node_selector in owned(patched, "kueue", "Update")
    assert node_selector not in owned(patched, "trainer")
    kept = ssa.apply(JOBSET, stored(patched), _trainer_jobset(None), "trainer", force=True, now=T2)
    assert pod_spec(kept)["nodeSelector"] == {"a": "1", "b": "2"}  # kueue's now


# --- track_update -------------------------------------------------------------------------


def test_create_by_update_owns_every_field_but_server_metadata() -> None:
    obj = stored(jobset("suspend: true"))
    obj["metadata"]["generateName"] = "train-"
    ssa.track_update(JOBSET, None, obj, "kubectl-create", now=T0)
    (e,) = obj["metadata"]["managedFields"]
    assert {k: v for k, v in e.items() if k != "fieldsV1"} == {
        "manager": "kubectl-create",
        "operation": "Update",
        "apiVersion": JS_API,
        "time": T0,
        "fieldsType": "FieldsV1",
    }
    assert e["fieldsV1"] == {
        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
        "f:spec": {".": {}, "f:suspend": {}},
    }


def test_an_update_takes_changed_fields_and_keeps_time_when_nothing_changed() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    new = copy.deepcopy(live)
    new["metadata"]["resourceVersion"] = "8"
    ssa.track_update(JOBSET, live, new, "kubectl", now=T1)
    assert new["metadata"]["managedFields"] == live["metadata"]["managedFields"]
    new["spec"]["suspend"] = False
    del new["metadata"]["labels"]
    ssa.track_update(JOBSET, live, new, "kubectl", now=T1)
    assert owned(new, "kubectl", "Update") == {".spec.suspend"}
    assert ".spec.suspend" not in owned(new, "trainer")
    assert not any("labels" in p for p in owned(new, "trainer"))
    assert [e["manager"] for e in new["metadata"]["managedFields"]] == ["trainer", "kubectl"]
    # a later update by the same manager keeps one entry and unions its fields
    newer = copy.deepcopy(new)
    newer["spec"]["suspend"] = True
    pod_spec(newer)["containers"][0]["image"] = "img:2"
    ssa.track_update(JOBSET, new, newer, "kubectl", now=T2)
    assert len([e for e in newer["metadata"]["managedFields"] if e["manager"] == "kubectl"]) == 1
    assert entry(newer, "kubectl", "Update")["time"] == T2  # type: ignore[index]
    assert ".spec.suspend" in owned(newer, "kubectl", "Update")


@pytest.mark.parametrize(
    ("sent", "expected_managers"),
    [
        (None, ["trainer"]),
        ([], []),
        ([{}], []),
        ("not-a-list", ["trainer"]),
        (
            [
                {
                    "manager": "restored",
                    "operation": "Update",
                    "apiVersion": JS_API,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:suspend": {}}},
                }
            ],
            ["restored"],
        ),
    ],
    ids=["absent", "empty", "reset-entry", "invalid", "client-list"],
)
def test_managed_fields_sent_by_the_client(sent: Any, expected_managers: list[str]) -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    new = copy.deepcopy(live)
    if sent is None:
        del new["metadata"]["managedFields"]
    else:
        new["metadata"]["managedFields"] = sent
    ssa.track_update(JOBSET, live, new, "kubectl", now=T1)
    managers = [e["manager"] for e in new["metadata"].get("managedFields") or []]
    assert managers == expected_managers


def test_subresource_writes_do_not_rewrite_managed_fields() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    new = copy.deepcopy(live)
    new["metadata"]["managedFields"] = []
    new["status"] = {"restarts": 1}
    ssa.track_update(JOBSET, live, new, "jobset", subresource="status", now=T1)
    assert owned(new, "jobset", "Update", "status") == {".status", ".status.restarts"}
    assert entry(new, "jobset", "Update", "status")["subresource"] == "status"  # type: ignore[index]
    assert entry(new, "trainer") is not None


# --- status ---------------------------------------------------------------------------------


def test_the_main_resource_ignores_status_and_status_ignores_spec() -> None:
    live = stored(ssa.apply(JOBSET, None, jobset(), "trainer", force=True, now=T0))
    live["status"] = {"restarts": 0}
    with_status = jobset(status={"restarts": 5})
    out = ssa.apply(JOBSET, live, with_status, "trainer", force=False, now=T1)
    assert out == live
    status_config = {**jobset("suspend: false"), "status": {"restarts": 2}}
    out = ssa.apply(JOBSET, live, status_config, "ctrl", force=False, subresource="status", now=T1)
    assert out["status"] == {"restarts": 2} and out["spec"]["suspend"] is True
    assert owned(out, "ctrl", "Apply", "status") == {".status.restarts"}
    e = entry(out, "ctrl", "Apply", "status")
    assert e is not None and e["subresource"] == "status"


# --- built-in kinds and schema-less parts ------------------------------------------------------


def test_builtin_lists_merge_by_their_strategic_keys() -> None:
    def pod(containers: list[Obj]) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": containers},
        }

    live = stored(
        ssa.apply(
            POD,
            None,
            pod([{"name": "a", "image": "x", "ports": [{"containerPort": 80}], "args": ["1"]}]),
            "one",
            force=True,
            now=T0,
        )
    )
    assert owned(live, "one") == {
        '.spec.containers[name="a"]',
        '.spec.containers[name="a"].name',
        '.spec.containers[name="a"].image',
        '.spec.containers[name="a"].args',
        '.spec.containers[name="a"].ports[containerPort=80,protocol="TCP"]',
        '.spec.containers[name="a"].ports[containerPort=80,protocol="TCP"].containerPort',
    }
    udp = {"containerPort": 80, "protocol": "UDP"}
    out = ssa.apply(
        POD, live, pod([{"name": "a", "ports": [udp]}, {"name": "b"}]), "two", force=False
    )
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "x", "ports": [{"containerPort": 80}, udp], "args": ["1"]},
        {"name": "b"},
    ]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"ports": [{"port": 80}, {"port": 80, "protocol": "UDP"}]},
    }
    svc = ssa.apply(SERVICE, None, service, "one", force=True)
    assert '.spec.ports[port=80,protocol="UDP"]' in owned(svc, "one")


def test_preserve_unknown_fields_are_granular_maps_and_atomic_lists() -> None:
    def widget(config: Obj, selector: Obj | None = None) -> Obj:
        spec: Obj = {"config": config}
        if selector is not None:
            spec["selector"] = selector
        return {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": spec,
        }

    live = stored(
        ssa.apply(WIDGET, None, widget({"a": {"x": 1}, "l": [1, 2]}, {"k": "v"}), "one", force=True)
    )
    assert owned(live, "one") == {
        ".spec.config.a",
        ".spec.config.a.x",
        ".spec.config.l",
        ".spec.selector",
    }
    out = ssa.apply(WIDGET, live, widget({"a": {"y": 2}}), "two", force=False)
    assert out["spec"]["config"] == {"a": {"x": 1, "y": 2}, "l": [1, 2]}
    with pytest.raises(APIError):
        ssa.apply(WIDGET, live, widget({"l": [3]}), "two", force=False)
    with pytest.raises(APIError):
        ssa.apply(WIDGET, live, widget({}, {"k": "v", "k2": "w"}), "two", force=False)
    out = ssa.apply(WIDGET, live, widget({}, {"k2": "w"}), "one", force=False)
    assert out["spec"]["selector"] == {"k2": "w"}  # an atomic map is replaced wholesale
    assert "config" not in out["spec"]


# --- what an object without managed fields and bad configurations do ------------------------


def test_an_object_without_managed_fields_belongs_to_before_first_apply() -> None:
    live = stored(jobset())
    with pytest.raises(APIError) as err:
        ssa.apply(JOBSET, live, jobset("suspend: false", labels="null"), "kueue", force=False)
    assert err.value.message == (
        f'Apply failed with 1 conflict: conflict with "before-first-apply" using {JS_API}: '
        ".spec.suspend"
    )
    out = ssa.apply(
        JOBSET, live, jobset("suspend: true", labels="null"), "kueue", force=False, now=T1
    )
    assert [e["manager"] for e in out["metadata"]["managedFields"]] == [
        "kueue",
        "before-first-apply",
    ]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {**jobset(), "metadata": {"name": "train", "managedFields": []}},
            "metadata.managedFields must be nil",
        ),
        ({**jobset(), "kind": "Job"}, f"invalid object type: {JS_API}, Kind=Job"),
        ({**jobset(), "apiVersion": "v1"}, "invalid object type: /v1, Kind=JobSet"),
    ],
    ids=["managed-fields", "kind", "version"],
)
def test_bad_configurations_are_400(config: Obj, message: str) -> None:
    with pytest.raises(APIError) as err:
        ssa.apply(JOBSET, None, config, "trainer", force=True)
    assert (err.value.code, err.value.reason, err.value.message) == (400, "BadRequest", message)


def test_entries_are_ordered_like_kubernetes() -> None:
    obj = stored(jobset())
    ssa.track_update(JOBSET, None, obj, "zeta", now=T0)
    obj = stored(ssa.apply(JOBSET, obj, jobset("suspend: true"), "beta", force=True, now=T2))
    new = copy.deepcopy(obj)
    new["spec"]["suspend"] = False
    ssa.track_update(JOBSET, obj, new, "alpha", now=T1)
    # Apply before Update, then by time.
    assert [(e["operation"], e["manager"]) for e in new["metadata"]["managedFields"]] == [
        ("Apply", "beta"),
        ("Update", "zeta"),
        ("Update", "alpha"),
    ]
    assert owned(new, "beta") == {".metadata.labels.app"}


def test_the_request_log_is_bounded() -> None:
    """A long-running local API server keeps the newest requests, not every request."""
    from trainer.local.apiserver.hooks import Hooks, RequestRecord  # noqa: PLC0415

    hooks = Hooks(log_limit=10)
    for i in range(25):
        hooks.record(RequestRecord("get", "", "configmaps", "default", f"cm-{i}", 200))
    assert 5 <= len(hooks.log) <= 10
    assert hooks.log[-1].name == "cm-24"
    assert [r.name for r in hooks.log] == [f"cm-{i}" for i in range(25 - len(hooks.log), 25)]
