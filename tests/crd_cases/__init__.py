"""The CRD validation cases: TrainJobs, TrainingRuntimes and ClusterTrainingRuntimes against our
CRDs' schemas and CEL rules, on create and on update (transition rules, ``oldSelf``, status
updates).

One table, read by the local tests (``trainer validate``'s :func:`check_object` in
tests/unit/test_api_validation.py, the local API server in
tests/integration/test_apiserver_crd_cases.py) and by the cluster tier, which sends every case
to a real kube-apiserver with only our CRDs installed (tests/cluster/test_crd_validation.py).
Each case holds the API server's answer: its HTTP status and, for a refusal, its message
(messages.yaml), kube-apiserver's word for word (docs/local-plane.md, "CRD validation"), and
the ``(path, text)`` of the errors :func:`check_object` reports.
"""

from __future__ import annotations

from .base import MESSAGES, Case
from .runtimes import RUNTIME_CASES
from .trainjobs import TRAINJOB_CASES

CASES: list[Case] = TRAINJOB_CASES + RUNTIME_CASES
BY_ID = {case.id: case for case in CASES}

__all__ = ["BY_ID", "CASES", "MESSAGES", "Case"]
