"""The bed's controllers, installed together (docs/testbed.md): JobSet and our product start
side by side once JobSet's CRD is served (our controller watches JobSets from its start), then
Kueue, which must come after our CRDs (it sets up its trainjob integration for the CRDs served
when it starts)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

import addons
import trainer_install
import upstream_install
from bed import Bed
from procs import wait_for

PARTS = ("jobset", "trainer", "kueue")
CONTROLLERS = ("ours", "upstream")
JOBSET_CRD = "crd/jobsets.jobset.x-k8s.io"


def install_parts(
    bed: Bed, parts: Collection[str], say: Callable[[str], None], controller: str = "ours"
) -> None:
    """``controller`` chooses whose Kubeflow Trainer the "trainer" part installs: this
    repository's, or upstream's v2.3.0 release (:mod:`upstream_install`)."""
    if controller not in CONTROLLERS:
        raise ValueError(f"controller: {controller!r}; accepted: {', '.join(CONTROLLERS)}")
    with ThreadPoolExecutor(max_workers=1) as pool:
        jobset = None
        if "jobset" in parts:
            say("installing JobSet v0.12.0 from its released manifests")
            jobset = pool.submit(addons.install_jobset, bed)
        if "trainer" in parts:
            if jobset is not None:
                wait_for(
                    "JobSet's CRD served",
                    lambda: (
                        jobset.done() or bed.kubectl("get", JOBSET_CRD, check=False).returncode == 0
                    ),
                    60,
                )
            if controller == "upstream":
                say("installing upstream's Kubeflow Trainer v2.3.0 from its released manifests")
                upstream_install.install_upstream(bed)
            else:
                say("installing Kubeflow Trainer (this repository's manifests) as an admin would")
                trainer_install.install_trainer(bed)
        if jobset is not None:
            jobset.result()
    if "kueue" in parts:
        say("installing Kueue from its released manifests")
        addons.install_kueue(bed)
