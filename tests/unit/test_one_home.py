"""The JobSet contract is spelled once: in ``trainer/jobset/contract.py`` (docs/design.md).

Scans the product sources (``trainer/`` and ``webhooks/``) with ``ast`` (so comments and
docstrings, which may name a label to explain it, do not count) and fails with ``file:line``
for each place that spells a rule of the contract itself instead of asking the contract:

- a string containing JobSet's label prefix ``jobset.sigs.k8s.io/`` or its API group
  ``jobset.x-k8s.io``;
- a string equal to one of the contract's distinctive names (condition reasons, the controller
  name, failure-policy actions) or to the Trainer's ``BuildFailed`` condition outside
  ``trainer/api/constants.py``;
- an f-string of the Job / pod name rule: ``{jobset}-{rjob}-{index}``, with the index written
  as a field or a number (``{name}-{job}-0-0.{sub}``);
- an ownerReference literal: a dict with ``"controller": True`` and a ``blockOwnerDeletion``
  key, or a call with ``block_owner_deletion=`` (its home is ``trainer/machinery/owners.py``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from trainer.api import constants as c
from trainer.jobset import contract as jsc

ROOT = Path(__file__).resolve().parents[2]
HOME = Path("trainer/jobset/contract.py")
OWNERS = Path("trainer/machinery/owners.py")  # the home of the ownerReference literal
TRAINER_NAMES = Path("trainer/api/constants.py")  # the home of the Trainer's own BuildFailed

# Files allowed to spell the contract (none: the local executor's rewrite onto the shared
# client, cache and work queue is merged). The test fails on a stale entry.
ALLOWED: frozenset[Path] = frozenset()

SPELLED_INSIDE = ("jobset.sigs.k8s.io/", "jobset.x-k8s.io")
DISTINCTIVE = frozenset(
    {
        jsc.MANAGED_BY_JOBSET,
        jsc.CONTROLLER_NAME,
        jsc.STARTUP_POLICY_COMPLETED,
        jsc.REASON_ALL_JOBS_COMPLETED,
        jsc.REASON_FAILED_JOBS,
        jsc.REASON_REACHED_MAX_RESTARTS,
        jsc.REASON_SUSPENDED,
        jsc.REASON_RESUMED,
        *jsc.FAILURE_ACTIONS,
    }
)
# An f-string with its fields as "{}": the Job name rule, index a field or a number.
NAME_RULE = re.compile(r"\{\}-\{\}-(\{\}|[0-9]+)")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of ``tree`` (documentation may name a label)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _shape(node: ast.JoinedStr) -> str:
    return "".join(
        v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
        for v in node.values
    )


def violations(source: str, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, what)`` for each place in ``source`` that spells the JobSet contract."""
    tree = ast.parse(source, str(path))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
            for needle in SPELLED_INSIDE:
                if needle in text:
                    yield node.lineno, f"{needle!r} in {text!r}"
            if text in DISTINCTIVE:
                yield node.lineno, f"JobSet's {text!r}"
            if text == c.COND_BUILD_FAILED and path != TRAINER_NAMES:
                yield node.lineno, f"{text!r} (the Trainer's condition: trainer.api.constants)"
        elif isinstance(node, ast.JoinedStr) and NAME_RULE.search(_shape(node)):
            yield node.lineno, f"the Job/pod name rule in f-string {_shape(node)!r}"
        elif isinstance(node, ast.Dict):
            keys = {
                k.value: v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant)
            }
            controller = keys.get("controller")
            if (
                "blockOwnerDeletion" in keys
                and isinstance(controller, ast.Constant)
                and controller.value is True
            ):
                yield node.lineno, "an ownerReference literal"
        elif isinstance(node, ast.Call) and any(
            k.arg == "block_owner_deletion" for k in node.keywords
        ):
            yield node.lineno, "an ownerReference built by hand"


def _product() -> Iterator[Path]:
    for top in ("trainer", "webhooks"):
        yield from sorted((ROOT / top).rglob("*.py"))


def _scan() -> dict[Path, list[str]]:
    found: dict[Path, list[str]] = {}
    for file in _product():
        rel = file.relative_to(ROOT)
        if rel in (HOME, OWNERS):
            continue
        found_here = sorted(violations(file.read_text(), rel))
        hits = [f"{rel}:{line}: {what}" for line, what in found_here]
        if hits:
            found[rel] = hits
    return found


def test_the_jobset_contract_is_spelled_only_in_its_home() -> None:
    found = _scan()
    offending = [hit for rel, hits in found.items() if rel not in ALLOWED for hit in hits]
    assert not offending, (
        "spelled outside trainer/jobset/contract.py (use the contract):\n" + "\n".join(offending)
    )
    stale = sorted(str(p) for p in ALLOWED if p not in found)
    assert not stale, f"allow-listed but clean, remove from ALLOWED: {stale}"


def test_the_scan_sees_each_way_of_spelling_it() -> None:
    snippet = '''
"""A docstring may say jobset.sigs.k8s.io/jobset-name."""
LABEL = "jobset.sigs.k8s.io/jobset-name"
GROUP = "jobset.x-k8s.io"
def f(js, rjob, i, sub):
    """Docstrings are skipped: jobset.x-k8s.io."""
    a = f"{js}-{rjob}-{i}"
    b = f"{js['name']}-{rjob.get('name')}-{i}-{0}.{sub}"
    d = f"{js}-{rjob}-0-0.{js}"
    e = {"apiVersion": "v1", "controller": True, "blockOwnerDeletion": True}
    g = Ref(controller=True, block_owner_deletion=True)
    return "FailedJobs", "BuildFailed", "jobset-controller"
'''
    lines = sorted(line for line, _ in violations(snippet, Path("trainer/x.py")))
    assert lines == [3, 4, 7, 8, 9, 10, 11, 12, 12, 12]


def test_the_scan_leaves_unrelated_strings_alone() -> None:
    snippet = """
schema = {"controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"}}
pod = f"{job}-{suffix}"
when = f"{year}{month}-{day}"
reason, kind, cond = "Completed", "JobSet", "Failed"
"""
    assert list(violations(snippet, Path("trainer/x.py"))) == []
    assert list(violations('X = "BuildFailed"\n', TRAINER_NAMES)) == []
