"""The admission webhook under fuzzed input, split from test_webhook_fuzz.py so that the two
halves run on different pytest-xdist workers: random bytes and JSON, and AdmissionReview
envelopes of every shape, to every route. Same contract: a 200 AdmissionReview or a 4xx, never
a 500 or a logged error."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import strategies as st

from tests.unit import test_webhook_fuzz as fuzz
from tests.unit.test_webhook_fuzz import (
    ALL_PATHS,
    JSON,
    N_REVIEW,
    TEXTS,
    _run,
    dumps,
    realistic_trainjob,
    review,
    shaped,
)
from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob

# The module's fixtures, by the names the tests ask for.
runner = fuzz.runner
no_error_logs = fuzz.no_error_logs


def test_random_bytes_and_json(runner: asyncio.Runner) -> None:
    body = st.one_of(
        st.binary(max_size=64),
        JSON.map(dumps),
        st.text(max_size=40).map(str.encode),
        st.sampled_from([b"", b"{", b"[" * 3000, b"1" * 5000, b'"\\ud800"', b"NaN", b"{}"]),
    )
    assert _run(runner, st.tuples(st.just(ALL_PATHS), body), 1000) >= 4000


def test_admission_review_shaped(runner: asyncio.Runner) -> None:
    obj = st.one_of(JSON, st.just(None), shaped(TrainJob), realistic_trainjob())
    request = st.fixed_dictionaries(
        {},
        optional={
            "uid": st.one_of(TEXTS, st.integers(), st.none(), st.just("uid-1")),
            "operation": st.one_of(
                st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]), JSON
            ),
            "kind": st.one_of(
                JSON,
                st.builds(
                    lambda k: {"group": c.GROUP, "version": c.VERSION, "kind": k},
                    st.sampled_from(["TrainJob", "TrainingRuntime", "Pod", ""]),
                ),
            ),
            "namespace": st.one_of(st.just("default"), JSON),
            "name": st.one_of(st.just("job"), JSON),
            "object": obj,
            "oldObject": obj,
        },
    )
    envelope = st.one_of(
        st.builds(review, request),
        st.builds(review, JSON),
        st.builds(review, request, st.sampled_from(["admission.k8s.io/v1beta1", None, 1])),
        st.builds(lambda r, extra: {**review(r), **extra}, request, st.dictionaries(TEXTS, JSON)),
    )
    assert _run(runner, st.tuples(st.just(ALL_PATHS), envelope.map(dumps)), N_REVIEW) >= (
        4 * N_REVIEW
    )


# Long tests: make test starts the files marked slow first (pyproject.toml, markers).
pytestmark = pytest.mark.slow
