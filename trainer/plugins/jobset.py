"""The JobSet plugin: turns the working JobSet spec into the JobSet (upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/jobset).

PreBuild sets ``parallelism = completions = pod-set count`` on every replicated job.
Build forces ``replicas: 1`` on the initializer and trainer steps, adds the scheduler plugins'
pod labels and annotations, copies ``suspend`` and writes the JobSet named like the TrainJob
with a controller ownerReference. A running JobSet (neither it nor the TrainJob suspended) is
never rebuilt.
"""

from __future__ import annotations

from typing import Any

from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet
from trainer.machinery.models.core import ObjectMeta
from trainer.runtime.info import BuildContext, Info
from trainer.runtime.merge import merge_string_maps
from trainer.runtime.objects import owner_reference
from trainer.runtime.podsets import FORCED_SINGLE_REPLICA


def jobset_is_running(info: Info) -> bool:
    """True when the JobSet exists and neither it nor the TrainJob is suspended."""
    existing = info.observed.jobset
    if existing is None:
        return False
    trainjob_suspended = bool(info.trainjob.spec and info.trainjob.spec.suspend)
    jobset_suspended = bool(existing.spec and existing.spec.suspend)
    return not trainjob_suspended and not jobset_suspended


class JobSetPlugin:
    name = "JobSet"

    def pre_build(self, info: Info) -> None:
        for ps in info.pod_sets:
            tmpl = ps.job.template
            spec = tmpl.spec
            if spec is None:
                ps.pod_spec  # noqa: B018 - creates the Job spec and pod template
                spec = tmpl.spec
            assert spec is not None
            spec.parallelism = ps.count
            spec.completions = ps.count

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        if jobset_is_running(info):
            return []
        spec = info.spec
        for ps in info.pod_sets:
            if ps.ancestor in FORCED_SINGLE_REPLICA:
                ps.job.replicas = 1
            if info.pod_labels or info.pod_annotations:
                ps.pod_spec  # noqa: B018 - ensures the pod template exists
                pod_tmpl = ps.job.template.spec.template  # type: ignore[union-attr]
                meta = pod_tmpl.metadata or ObjectMeta()
                if info.pod_labels:
                    meta.labels = merge_string_maps(meta.labels, info.pod_labels)
                if info.pod_annotations:
                    meta.annotations = merge_string_maps(meta.annotations, info.pod_annotations)
                pod_tmpl.metadata = meta
        spec.suspend = bool(info.trainjob.spec and info.trainjob.spec.suspend)
        if not ctx.objects:
            return []
        meta = ObjectMeta(name=info.name, namespace=info.namespace)
        if info.labels:
            meta.labels = dict(info.labels)
        if info.annotations:
            meta.annotations = dict(info.annotations)
        meta.owner_references = [owner_reference(info.trainjob)]
        jobset = JobSet(api_version=jsc.API_VERSION, kind=jsc.KIND, metadata=meta, spec=spec)
        return [jobset.to_wire()]
