"""The operations docs name everything they claim to cover: every Configuration field, every
``trainer controller`` flag, every feature gate, every ``trainer manifests`` value and every
metric; and their links between pages resolve."""

from __future__ import annotations

import re
from pathlib import Path

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
