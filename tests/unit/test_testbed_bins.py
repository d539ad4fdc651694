"""hack/testbed/bins.py, with a stand-in ``go`` that records its calls: each program built once
per pin, a cache folder whole or absent, a failed build named with its step and last lines
(docs/testbed.md, "Building the programs")."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack/testbed"))

import bins

FAKE_GO = """#!/bin/sh
echo "$*" >> "{calls}"
case "$1" in
  version) echo "go version go1.26.8 linux/amd64" ;;
  mod) exit 0 ;;
  build)
    case "$4" in
      *broken*) echo "building $4" >&2; echo "./main.go:3: undefined: Nope" >&2; exit 1 ;;
    esac
    printf 'program %s\\n' "$4" > "$3" ;;
esac
"""

GOMOD = """module example.local/bed

go 1.26.0

tool (
	go.etcd.io/etcd/server/v3
	example.com/cmd/{second}
)

require example.com v1.2.3 // pinned
"""


@pytest.fixture
def go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    calls = tmp_path / "calls"
    script = tmp_path / "go"
    script.write_text(FAKE_GO.format(calls=calls))
    script.chmod(0o755)
    monkeypatch.setenv("TRAINER_TESTBED_CACHE", str(tmp_path / "cache"))
    return str(script), calls


def module(tmp_path: Path, second: str = "tool-b", sums: str = "h1:one") -> bins.Module:
    folder = tmp_path / "mod"
    folder.mkdir(exist_ok=True)
    (folder / "go.mod").write_text(GOMOD.format(second=second))
    (folder / "go.sum").write_text(sums + "\n")
    return bins.Module("kube", folder)


def builds(calls: Path) -> list[str]:
    if not calls.exists():
        return []
    return [line for line in calls.read_text().splitlines() if line.startswith("build")]


def test_each_program_is_built_once_per_pin_with_progress(
    go: tuple[str, Path], tmp_path: Path
) -> None:
    binary, calls = go
    said: list[str] = []
    folder = bins.build_module(module(tmp_path), binary, said.append)
    assert sorted(p.name for p in folder.iterdir()) == [".complete", "etcd", "tool-b"]
    assert "go.etcd.io/etcd/server/v3" in (folder / "etcd").read_text()
    assert "[kube 1/2] building etcd (go.etcd.io/etcd/server/v3 ?)" in said
    assert "[kube 2/2] building tool-b (example.com/cmd/tool-b v1.2.3)" in said
    assert len(builds(calls)) == 2
    again = bins.build_module(module(tmp_path), binary, said.append)
    assert again == folder and len(builds(calls)) == 2  # the second run builds nothing


def test_a_folder_left_half_built_is_built_again(go: tuple[str, Path], tmp_path: Path) -> None:
    binary, calls = go
    mod = module(tmp_path)
    half = bins.module_dir(mod, binary)
    half.mkdir(parents=True)
    (half / "etcd").write_text("truncated")
    folder = bins.build_module(mod, binary, lambda _: None)
    assert folder == half and (folder / ".complete").exists()
    assert "go.etcd.io" in (folder / "etcd").read_text()
    assert len(builds(calls)) == 2


def test_a_new_pin_builds_anew_and_drops_the_old_build(
    go: tuple[str, Path], tmp_path: Path
) -> None:
    binary, _ = go
    old = bins.build_module(module(tmp_path, sums="h1:one"), binary, lambda _: None)
    new = bins.build_module(module(tmp_path, sums="h1:two"), binary, lambda _: None)
    assert new != old and (new / ".complete").exists() and not old.exists()


def test_a_failed_build_names_the_program_step_and_output_and_leaves_nothing(
    go: tuple[str, Path], tmp_path: Path
) -> None:
    binary, _ = go
    mod = module(tmp_path, second="broken")
    with pytest.raises(bins.BuildError) as caught:
        bins.build_module(mod, binary, lambda _: None)
    message = str(caught.value)
    assert message.startswith("broken (example.com/cmd/broken v1.2.3): step 'go build' failed")
    assert "./main.go:3: undefined: Nope" in message
    cache = bins.module_dir(mod, binary).parent
    assert list(cache.iterdir()) == []  # neither the module's folder nor a staging folder


def test_go_mod_blocks_and_single_lines_are_both_read(tmp_path: Path) -> None:
    gomod = tmp_path / "go.mod"
    gomod.write_text("module m\n\ntool a/b/c\n\nrequire (\n\tx.io/y v1.0.0 // indirect\n)\n")
    mod = bins.Module("m", tmp_path)
    assert mod.tools() == ["a/b/c"]
    assert mod.requires() == {"x.io/y": "v1.0.0"}


def test_helm_is_stamped_with_its_release_and_its_client_libraries_kubernetes() -> None:
    # Unstamped, `helm version` says "v3.22" and `helm template` takes the cluster for 1.20,
    # which the chart's kubeVersion (>=1.31) refuses.
    requires = {"helm.sh/helm/v3": "v3.22.0", "k8s.io/client-go": "v0.37.0"}
    flags = bins.ldflags("helm.sh/helm/v3/cmd/helm", requires)
    assert "-X helm.sh/helm/v3/internal/version.version=v3.22.0" in flags
    assert "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37" in flags
    assert "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" in flags
    assert bins.ldflags("sigs.k8s.io/kwok/cmd/kwok", requires) == []


def test_the_pinned_helm_module_is_one_of_the_bed_modules() -> None:
    mod = bins.Module("helm", bins.HERE / "helm")
    assert "helm" in bins.MODULES
    assert mod.tools() == ["helm.sh/helm/v3/cmd/helm"]
    assert mod.requires()["helm.sh/helm/v3"] == "v3.22.0"


def test_built_finds_a_built_program_and_builds_nothing(
    go: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary, calls = go
    monkeypatch.setattr(bins, "go_binary", lambda: binary)
    monkeypatch.setattr(bins, "HERE", tmp_path)
    monkeypatch.setattr(bins, "MODULES", ("kube",))
    mod = module(tmp_path)
    (tmp_path / "kube").symlink_to(mod.folder)
    assert bins.built("etcd") is None  # not built yet: nothing is built to find it
    assert builds(calls) == []
    folder = bins.build_module(bins.Module("kube", tmp_path / "kube"), binary, lambda _: None)
    assert bins.built("etcd") == folder / "etcd"
    assert bins.built("kubectl") is None
    given = tmp_path / "given"
    given.mkdir()
    (given / "helm").write_text("elsewhere")
    monkeypatch.setenv("TRAINER_TESTBED_BINS", str(given))
    assert bins.built("helm") == given / "helm"
    assert bins.built("etcd") is None
