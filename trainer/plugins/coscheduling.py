"""The CoScheduling plugin: gang scheduling with the scheduler-plugins coscheduling plugin
(upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/coscheduling),
active when the runtime sets ``podGroupPolicy.coscheduling``.

EnforcePodGroupPolicy labels every pod ``scheduling.x-k8s.io/pod-group: <trainjob>`` (the
JobSet builder copies ``info.pod_labels`` onto every replicated job's pod template), so the
scheduler places the pods as one gang. Build returns a ``scheduling.x-k8s.io/v1alpha1``
PodGroup named like the TrainJob with ``minMember``, ``minResources`` and
``scheduleTimeoutSeconds``, but only when no PodGroup exists yet or the TrainJob is suspended.
Watch: the PodGroups of that kind (see :func:`trainer.runtime.podgroup.pod_group_watch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import CoschedulingPodGroupPolicySource
from trainer.runtime.info import BuildContext, Info
from trainer.runtime.podgroup import gang_spec, pod_group, pod_group_watch, should_apply
from trainer.runtime.watch import Kind, Watch

POD_GROUPS = Kind("scheduling.x-k8s.io", "v1alpha1", "podgroups", c.KIND_POD_GROUP)


def policy(info: Info) -> CoschedulingPodGroupPolicySource | None:
    """The runtime's coscheduling policy, or None when this plugin is inactive."""
    pgp = info.pod_group_policy
    return pgp.coscheduling if pgp is not None else None


class CoschedulingPlugin:
    name = "CoScheduling"

    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        return pod_group_watch("coscheduling-podgroups", POD_GROUPS)

    def enforce_pod_group_policy(self, info: Info) -> None:
        if policy(info) is None:
            return
        info.pod_labels[c.LABEL_COSCHEDULING_POD_GROUP] = info.name

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        pol = policy(info)
        if pol is None or not should_apply(info):
            return []
        spec = gang_spec(info)
        spec["scheduleTimeoutSeconds"] = pol.schedule_timeout_seconds
        return [pod_group(info, c.COSCHEDULING_API_VERSION, spec)]
