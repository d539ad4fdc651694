"""The operations docs name everything they claim to cover: every Configuration field, every
``trainer controller`` flag, every feature gate, every ``trainer manifests`` value and every
metric; and their links between pages resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel

from trainer.cli.main import app
from trainer.controller.config import FEATURE_GATES, Configuration
from trainer.deploy.values import Values
from trainer.observability.metrics import Metrics

DOCS = Path(__file__).resolve().parents[2] / "docs"
WRITTEN_ELSEWHERE = {"kueue.md"}  # another page of the set, written separately


def field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        if name in ("api_version", "kind"):
            continue
        path = prefix + (info.alias or name)
        annotation = info.annotation
        nested = [
            t
            for t in (annotation, *getattr(annotation, "__args__", ()))
            if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if nested:
            out += field_paths(nested[0], path + ".")
        else:
            out.append(path)
    return out


def test_configuration_md_covers_every_field_flag_gate_and_value() -> None:
    text = (DOCS / "configuration.md").read_text()
    fields = field_paths(Configuration)
    assert "leaderElection.leaseDuration" in fields and "tls.minVersion" in fields
    missing = [f for f in fields if f"`{f}`" not in text]
    assert missing == [], f"Configuration fields not documented: {missing}"
    command = typer.main.get_command(app).commands["controller"]  # type: ignore[attr-defined]
    flags = [o for p in command.params for o in p.opts if o.startswith("--") and o != "--help"]
    assert "--feature-gates" in flags
    assert [f for f in flags if f"`{f}" not in text] == []
    assert [g for g in FEATURE_GATES if f"`{g}`" not in text] == []
    values = field_paths(Values)
    assert [v for v in values if f"`{v}`" not in text] == []


def test_metrics_md_lists_exactly_the_registered_metrics() -> None:
    text = (DOCS / "metrics.md").read_text()
    registered = set()
    for family in Metrics().registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        registered.add(name)
    documented = set(re.findall(r"`(trainer_[a-z_]+)`", text))
    assert registered == documented


def test_links_between_pages_resolve() -> None:
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if target in WRITTEN_ELSEWHERE:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


def test_install_md_names_the_supported_versions() -> None:
    from trainer.deploy.render import JOBSET_VERSION, MIN_KUBERNETES  # noqa: PLC0415

    text = (DOCS / "install.md").read_text()
    assert f"Kubernetes {MIN_KUBERNETES} or later" in text
    assert f"JobSet {JOBSET_VERSION}" in text
    assert f"releases/download/{JOBSET_VERSION}/manifests.yaml" in text


# --- The repository explains itself ------------------------------------------------------------

ROOT = DOCS.parent
SCANNED_DIRS = ("trainer", "webhooks", "hack", "tests")
SCANNED_FILES = ("Makefile", "pyproject.toml", "Dockerfile")
# How a comment cites a document that is not in the repository: design notes, specs and issue
# lists the project was written from, and the project's own issue tracker. Cite docs/, an
# upstream link, or say the reason instead (docs/design.md).
OUTSIDE_CITATION = re.compile(
    r"\bDESIGN\b"
    r"|\busers\.md\b|\bjobset-kueue\b|\btrainer-v2\.3\.md\b|\bapiserver\.md\b|/work/shared"
    r"|\bspec/[\w.-]+\.md\b"
    r"|\bspec (?:sections? )?\d+\.\d+|\bspec section \d"
    r"|\([ABC]\.\d+[^)]*\)|\bsection [ABC]\b"
    r"|(?<![\w/#])[Ii]ssue \d+\b"
)
THIS_FILE = Path(__file__).resolve()


@pytest.mark.parametrize(
    "comment",
    [
        '"""One reconcile of a TrainJob (DESIGN section 3, spec 2.1):',
        "# Names follow DESIGN.md section 6",
        "(spec section 2.7): what goes into",
        "modes so ssh and sshd accept the key, users.md #29)",
        "(jobset-kueue A.6, A.7)",
        "# Resume merges the pod template's mutable fields into the Job (A.5).",
        "see spec/apiserver.md section 5.",
        "Targets (issue 3): >= 2,000 renders/s",
        '(spec 2.8 "Flux", 2.12)',
    ],
)
def test_the_citation_check_finds_each_form(comment: str) -> None:
    assert OUTSIDE_CITATION.search(comment)


@pytest.mark.parametrize(
    "comment",
    [
        "(upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins)",
        '(docs/design.md, "One reconcile")',
        "kubeflow/trainer#3712, issue #3686",
        'spec = obj.get("spec") or {}',
        "Python 3.11 (spec changes in /status are ignored)",
    ],
)
def test_the_citation_check_leaves_what_is_in_the_repository(comment: str) -> None:
    assert not OUTSIDE_CITATION.search(comment)


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).exists()]
    files += [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for top in SCANNED_DIRS:
        files += sorted((ROOT / top).rglob("*.py"))
    return [f for f in files if f.resolve() != THIS_FILE and "__pycache__" not in f.parts]


def test_no_comment_cites_a_document_outside_the_repository() -> None:
    found = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = OUTSIDE_CITATION.search(line)
            if match:
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}")
    assert len(scanned_files()) > 300
    assert found == [], "cite docs/, an upstream link or the reason instead:\n" + "\n".join(found)


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_points_at_a_file(page: Path) -> None:
    missing = []
    for target in MARKDOWN_LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            missing.append(target)
    assert missing == [], f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_design_md_names_every_import_contract() -> None:
    import tomllib  # noqa: PLC0415

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = [c["name"] for c in config["tool"]["importlinter"]["contracts"]]
    text = (DOCS / "design.md").read_text()
    assert len(names) >= 10
    assert [n for n in names if n not in text] == []
