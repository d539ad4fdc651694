"""The Volcano plugin: gang scheduling with Volcano, active when the runtime sets
``podGroupPolicy.volcano`` (upstream's volcano plugin is one of
https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins).

EnforcePodGroupPolicy annotates every pod ``scheduling.k8s.io/group-name: <trainjob>`` (the
JobSet builder copies ``info.pod_annotations`` onto every replicated job's pod template).
Build returns a ``scheduling.volcano.sh/v1beta1`` PodGroup named like the TrainJob, only when
no PodGroup exists yet or the TrainJob is suspended, with:

- ``minMember`` and ``minResources`` (see :mod:`trainer.runtime.podgroup`);
- ``queue`` from the JobSet annotation ``scheduling.volcano.sh/queue-name`` (the runtime
  template's metadata, overridden by runtimePatches in order);
- ``priorityClassName`` from the pod templates, the last replicated job (in runtime order) that
  sets one winning;
- ``networkTopology {mode, highestTierAllowed}`` when the policy configures it.

Empty fields are left out. :func:`validate` holds the admission checks (queue name not empty,
PriorityClass exists) as a pure function; the webhook passes in the PriorityClass names.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob, VolcanoPodGroupPolicySource
from trainer.machinery.errors import INVALID, FieldError
from trainer.machinery.models.core import PodSpec
from trainer.runtime.info import BuildContext, Info, PodSet
from trainer.runtime.podgroup import gang_spec, pod_group, pod_group_watch, should_apply
from trainer.runtime.validation import ClusterView, Verdict
from trainer.runtime.watch import Kind, Watch

POD_GROUPS = Kind("scheduling.volcano.sh", "v1beta1", "podgroups", c.KIND_POD_GROUP)

SYSTEM_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
"""Built into every cluster: never looked up."""

QUEUE_PATH = f"spec.annotations[{c.ANNOTATION_VOLCANO_QUEUE}]"
PRIORITY_CLASS_PATH = "spec.templateSpec.priorityClassName"
MSG_EMPTY_QUEUE = "Volcano queue name must not be empty"


def policy(info: Info) -> VolcanoPodGroupPolicySource | None:
    """The runtime's Volcano policy, or None when this plugin is inactive."""
    pgp = info.pod_group_policy
    return pgp.volcano if pgp is not None else None


def _template_pod_spec(ps: PodSet) -> PodSpec | None:
    """The pod spec of ``ps`` without creating one (``PodSet.pod_spec`` would)."""
    job_spec = ps.job.template.spec
    return job_spec.template.spec if job_spec is not None else None


def priority_class_names(info: Info) -> list[str]:
    """Non-empty ``priorityClassName`` of each pod template, in runtime job order."""
    names: list[str] = []
    for ps in info.pod_sets:
        pod = _template_pod_spec(ps)
        if pod is not None and pod.priority_class_name:
            names.append(pod.priority_class_name)
    return names


def priority_class_name(info: Info) -> str | None:
    """The PodGroup's priority class: the last one set, in runtime job order."""
    names = priority_class_names(info)
    return names[-1] if names else None


def queue(info: Info) -> str | None:
    """The JobSet's ``scheduling.volcano.sh/queue-name`` annotation (None when absent)."""
    return info.annotations.get(c.ANNOTATION_VOLCANO_QUEUE)


class VolcanoPlugin:
    name = "Volcano"

    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        return pod_group_watch("volcano-podgroups", POD_GROUPS)

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        """:func:`validate`: the queue always; PriorityClasses only when the caller knows
        which exist (``view.priority_classes`` is None when it does not)."""
        if view.priority_classes is not None:
            return Verdict([], validate(info, view.priority_classes))
        errors = validate(info, frozenset())
        return Verdict([], [e for e in errors if e.path != PRIORITY_CLASS_PATH])

    def enforce_pod_group_policy(self, info: Info) -> None:
        if policy(info) is None:
            return
        info.pod_annotations[c.ANNOTATION_VOLCANO_GROUP_NAME] = info.name

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        pol = policy(info)
        if pol is None or not should_apply(info):
            return []
        spec = gang_spec(info)
        if q := queue(info):
            spec["queue"] = q
        if pc := priority_class_name(info):
            spec["priorityClassName"] = pc
        nt = pol.network_topology
        if nt is not None:
            spec["networkTopology"] = {
                "mode": nt.mode,
                "highestTierAllowed": nt.highest_tier_allowed,
            }
        return [pod_group(info, c.VOLCANO_API_VERSION, spec)]


def validate(info: Info, priority_classes: Collection[str]) -> list[FieldError]:
    """Admission checks for a TrainJob on a Volcano runtime (none when Volcano is not
    configured), on the pre-plugin ``info``:

    - a queue annotation that is present but empty is Invalid (absent is fine: Volcano then
      uses its default queue);
    - every pod template's ``priorityClassName`` must name an existing PriorityClass
      (``priority_classes``), except the two built-in system classes. The message carries the
      NotFound text upstream's failed lookup would, so clients see the same string. One error
      per unknown name, however many jobs use it.
    """
    if policy(info) is None:
        return []
    errors: list[FieldError] = []
    q = queue(info)
    if q == "":
        errors.append(FieldError(QUEUE_PATH, INVALID, MSG_EMPTY_QUEUE, q))
    known = set(priority_classes) | SYSTEM_PRIORITY_CLASSES
    reported: set[str] = set()
    for name in priority_class_names(info):
        if name in known or name in reported:
            continue
        reported.add(name)
        message = (
            f'PriorityClass "{name}" doesn\'t exist: '
            f'priorityclasses.scheduling.k8s.io "{name}" not found'
        )
        errors.append(FieldError(PRIORITY_CLASS_PATH, INVALID, message, name))
    return errors
