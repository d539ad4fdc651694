"""The name budget of a rendered JobSet (JobSet's webhook checks it:
https://github.com/kubernetes-sigs/jobset/blob/v0.12.0/pkg/webhooks/jobset_webhook.go).

JobSet's webhook rejects a JobSet whose generated names are not DNS-1035 labels of at most 63
characters: the longest Job name ``<jobset>-<rjob>-<replicas-1>``, the longest pod name
``<jobset>-<rjob>-<replicas-1>-<completions-1>-abcde`` (the Job controller's 5-character
random suffix), the pod hostname (the pod name without the suffix), the subdomain / Service
name, and PVC names ``<claim>-<jobset>``. Upstream admits a TrainJob whose name breaks these
and fails later inside JobSet (trainer#2735); admission uses this module to say so up front.

Pod volume names must be DNS-1123 labels of at most 63 characters too (the Job API refuses the
Job otherwise); a volume a plugin names after the JobSet (``<jobset>-...``, such as Flux's
``<jobset>-flux-entrypoint``) grows with the TrainJob name and is counted as well.
"""

from __future__ import annotations

from typing import NamedTuple

from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSetSpec

MAX_NAME = 63
POD_SUFFIX = "-abcde"


class GeneratedName(NamedTuple):
    """One name the JobSet will generate, and where it comes from."""

    kind: str  # "Job", "Pod", "hostname", "subdomain", "PersistentVolumeClaim", "Volume"
    name: str
    replicated_job: str | None = None

    @property
    def too_long(self) -> bool:
        return len(self.name) > MAX_NAME


def generated_names(jobset_name: str, spec: JobSetSpec) -> list[GeneratedName]:
    """The longest name of each kind per replicated job, the pod volumes named after the
    JobSet, plus subdomain and PVC names."""
    out: list[GeneratedName] = []
    for job in spec.replicated_jobs or []:
        last_job = max(job.replicas - 1, 0)
        job_name = jsc.job_name(jobset_name, job.name, last_job)
        out.append(GeneratedName("Job", job_name, job.name))
        job_spec = job.template.spec
        pod = job_spec.template.spec if job_spec is not None else None
        for volume in (pod.volumes if pod is not None else None) or []:
            if volume.name.startswith(f"{jobset_name}-"):
                out.append(GeneratedName("Volume", volume.name, job.name))
        completions = job_spec.completions if job_spec else None
        if completions is None and job_spec is not None:
            completions = job_spec.parallelism
        if completions is not None:
            hostname = jsc.pod_hostname(jobset_name, job.name, last_job, max(completions - 1, 0))
            out.append(GeneratedName("hostname", hostname, job.name))
            out.append(GeneratedName("Pod", hostname + POD_SUFFIX, job.name))
    subdomain = jsc.subdomain(jobset_name, spec.network.subdomain if spec.network else None)
    out.append(GeneratedName("subdomain", subdomain))
    for policy in spec.volume_claim_policies or []:
        for tmpl in policy.templates or []:
            claim = tmpl.metadata.name if tmpl.metadata else None
            if claim:
                out.append(
                    GeneratedName("PersistentVolumeClaim", jsc.claim_name(claim, jobset_name))
                )
    return out


def max_name_length(
    jobset_name: str, spec: JobSetSpec, names: list[GeneratedName] | None = None
) -> int:
    """The longest JobSet (TrainJob) name whose generated names all fit in 63 characters
    (``names``: :func:`generated_names` of the same arguments, when already computed)."""
    budget = MAX_NAME
    for gen in generated_names(jobset_name, spec) if names is None else names:
        if gen.kind == "subdomain" and spec.network is not None and spec.network.subdomain:
            continue  # a fixed subdomain does not grow with the name
        overhead = len(gen.name) - len(jobset_name)
        budget = min(budget, MAX_NAME - overhead)
    return budget


def too_long(
    jobset_name: str, spec: JobSetSpec, names: list[GeneratedName] | None = None
) -> list[GeneratedName]:
    """The generated names longer than 63 characters, longest first (``names``: as in
    :func:`max_name_length`)."""
    return sorted(
        (g for g in (generated_names(jobset_name, spec) if names is None else names) if g.too_long),
        key=lambda g: -len(g.name),
    )
