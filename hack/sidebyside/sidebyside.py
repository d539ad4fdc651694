"""Upstream's Kubeflow Trainer v2.3.0 controller and ours, one after the other on the same bed,
given the same corpus; what each wrote, compared (docs/side-by-side.md).

The corpus's ClusterTrainingRuntimes are created once under names of their own (``sbs-``
and the runtime's name), so both controllers read the same runtimes, whatever each install's
runtimes overlay holds; its TrainingRuntimes and TrainJobs go into a namespace per controller.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from objects import (
    Allowed,
    Difference,
    allowed_from,
    classify,
    diff,
    follow_verdicts,
    short,
)
from phase import Phase, run_phase

from trainer.kube.rest import Kube

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SHARED = ROOT.parent / "shared/upstream-release"
DIFFERENCES = HERE / "differences.yaml"
PREFIX = "sbs-"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


def extensions(doc: dict[str, Any]) -> list[str]:
    """Our additive API fields (README, "Additive API fields") the document uses: upstream's
    CRDs do not hold them, so the comparison leaves such documents out and names them."""
    spec = doc.get("spec") or {}
    policy = spec.get("mlPolicy") or {}
    found = [f"spec.mlPolicy.{k}" for k in ("tensorflow", "paddle") if k in policy]
    if "elasticPolicy" in (policy.get("torch") or {}):
        found.append("spec.mlPolicy.torch.elasticPolicy")
    if (policy.get("mpi") or {}).get("mpiImplementation") == "MPICH":
        found.append("spec.mlPolicy.mpi.mpiImplementation: MPICH")
    found += [f"spec.{k}" for k in ("ttlSecondsAfterFinished", "runPolicy") if k in spec]
    return found


@dataclass
class Corpus:
    """Cluster runtimes, namespaced runtimes and TrainJobs, as written by their authors."""

    cluster_runtimes: list[dict[str, Any]] = field(default_factory=list)
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    trainjobs: list[dict[str, Any]] = field(default_factory=list)
    support: list[dict[str, Any]] = field(default_factory=list)
    """Objects the TrainJobs' pods refer to, created in each run's namespace."""
    left_out: dict[str, list[str]] = field(default_factory=dict)
    """``Kind/name`` -> the additive fields that kept it out (:func:`extensions`)."""

    def add(self, docs: Iterable[dict[str, Any]]) -> None:
        names = {j["metadata"]["name"] for j in self.trainjobs}
        docs = list(docs)
        out = {r["metadata"]["name"] for r in docs if extensions(r)} | {
            k.split("/", 1)[1] for k in self.left_out if not k.startswith("TrainJob/")
        }
        for original in docs:
            d = copy.deepcopy(original)
            used = extensions(d)
            ref = ((d.get("spec") or {}).get("runtimeRef") or {}).get("name")
            if d.get("kind") == "TrainJob" and ref in out:
                used.append(f"runtime {ref}")
            if used:
                self.left_out[f"{d.get('kind')}/{d['metadata']['name']}"] = used
                continue
            d["metadata"].pop("namespace", None)
            if d.get("kind") == "ClusterTrainingRuntime":
                self.cluster_runtimes.append(d)
            elif d.get("kind") == "TrainingRuntime":
                self.runtimes.append(d)
            elif d.get("kind") == "TrainJob":
                name = d["metadata"]["name"]
                while name in names:  # upstream's two Flux examples share a name
                    name += "-2"
                d["metadata"]["name"] = name
                names.add(name)
                self.trainjobs.append(d)

    def prepared(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """The corpus with its cluster runtimes renamed ``sbs-<name>`` (each once) and the
        TrainJobs that name them pointed at the new names."""
        cluster: dict[str, dict[str, Any]] = {}
        for original in self.cluster_runtimes:
            r = copy.deepcopy(original)
            r["metadata"]["name"] = PREFIX + r["metadata"]["name"]
            cluster.setdefault(r["metadata"]["name"], r)
        jobs = []
        for job in self.trainjobs:
            j = copy.deepcopy(job)
            ref = (j.get("spec") or {}).get("runtimeRef") or {}
            if ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime" and ref.get(
                "name"
            ):
                ref["name"] = PREFIX + ref["name"]
            jobs.append(j)
        return list(cluster.values()), copy.deepcopy(self.runtimes), jobs


def release_corpus() -> Corpus:
    """Every runtime and TrainJob of upstream's v2.3.0 release (../shared/upstream-release)
    and of examples/, with our built-in runtimes that upstream does not ship (our examples
    name them)."""
    corpus = Corpus()
    for path in sorted((SHARED / "runtimes").glob("*.yaml")):
        corpus.add(documents(path))
    shipped = {r["metadata"]["name"] for r in corpus.cluster_runtimes}
    for path in sorted((ROOT / "manifests/base/runtimes").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        corpus.add(d for d in documents(path) if d["metadata"]["name"] not in shipped)
    for path in sorted((SHARED / "examples").glob("*.yaml")):
        corpus.add(documents(path))
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        corpus.add(documents(path))
    return corpus


def load_allowed(path: Path = DIFFERENCES) -> list[Allowed]:
    data = yaml.safe_load(path.read_text()) or {}
    return allowed_from(list(data.get("differences") or []))


@dataclass
class Outcome:
    upstream: Phase
    ours: Phase
    differences: list[Difference]
    covered: dict[str, list[Difference]]
    unexplained: list[Difference]
    left_out: dict[str, list[str]]


async def run_both(
    kube: Kube,
    switch: Callable[[str], object],
    corpus: Corpus,
    label: str,
    settle: float,
    say: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """Upstream's controller first, then ours (``switch`` installs the named one), each in
    namespace ``sbs-<label>-<controller>``; the bed is left with ours running."""
    cluster, runtimes, jobs = corpus.prepared()
    phases: dict[str, Phase] = {}
    settled: frozenset[str] | None = None
    for controller in ("upstream", "ours"):
        switch(controller)
        phases[controller] = await run_phase(
            kube, controller, f"{PREFIX}{label}-{controller}", cluster, runtimes, jobs, settle,
            say, support=corpus.support, settled_elsewhere=settled,
        )  # fmt: skip
        names = {j["metadata"]["name"] for j in jobs}
        settled = frozenset(names - set(phases[controller].unsettled))
    verdicts_a = {f"Verdict/{k}": {"verdict": v} for k, v in phases["upstream"].verdicts.items()}
    verdicts_b = {f"Verdict/{k}": {"verdict": v} for k, v in phases["ours"].verdicts.items()}
    found = diff(
        {**verdicts_a, **phases["upstream"].objects}, {**verdicts_b, **phases["ours"].objects}
    )
    covered, unexplained = classify(found, load_allowed())
    unexplained = follow_verdicts(covered, unexplained)
    # A TrainJob a side left unsettled (its phase ran out of time) has a status of a moment,
    # not of an end (taken at another moment on the other side): its status differences are
    # not counted, and the report names them.
    unsettled = set(phases["upstream"].unsettled) | set(phases["ours"].unsettled)
    moment = {f"TrainJob/{name}" for name in unsettled}
    covered["unsettled"] = [
        d for d in unexplained if d.object in moment and (d.path or "").startswith("status")
    ]
    unexplained = [d for d in unexplained if d not in covered["unsettled"]]
    return Outcome(phases["upstream"], phases["ours"], found, covered, unexplained, corpus.left_out)


def report_lines(outcome: Outcome, limit: int = 200) -> list[str]:
    lines = [
        f"left out (they use our additive fields): {name} ({', '.join(why)})"
        for name, why in sorted(outcome.left_out.items())
    ]
    for phase in (outcome.upstream, outcome.ours):
        admitted = sum(v == "admitted" for v in phase.verdicts.values())
        lines.append(
            f"{phase.controller}: {admitted}/{len(phase.verdicts)} admitted, "
            f"{len(phase.objects)} objects recorded, {len(phase.unsettled)} unsettled, "
            f"{phase.seconds:.0f} s"
            + (f"; unsettled: {', '.join(phase.unsettled)}" if phase.unsettled else "")
        )
    for entry, found in outcome.covered.items():
        if found:
            lines.append(f"listed {entry}: {len(found)} (e.g. {found[0].object} {found[0].path})")
    lines.append(f"unexplained differences: {len(outcome.unexplained)}")
    for d in outcome.unexplained[:limit]:
        lines.append(
            f"  {d.object} {d.path or '(whole object)'} [{d.change}]: upstream "
            f"{short(d.upstream)} / ours {short(d.ours)}"
        )
    return lines
