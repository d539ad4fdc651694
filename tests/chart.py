"""The Helm chart under test (manifests/charts/kubeflow-trainer) and the pinned helm that renders
it (hack/testbed/helm; docs/install.md, "Installing with Helm"), shared by tests/deploy and the
cluster tier. helm runs with its cache, configuration and data folders in a temporary folder
of its own, so a test neither reads nor writes the user's Helm repositories or plugins.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from trainer.controller.config import parse_config
from trainer.deploy.render import CONFIG_MAP, install_objects, runtime_objects
from trainer.deploy.values import Values

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "manifests/charts/kubeflow-trainer"
CONFIG_KEY = "controller_manager_config.yaml"
KEEP = "helm.sh/resource-policy"

sys.path.insert(0, str(ROOT / "hack/testbed"))

import bins  # noqa: E402

Obj = dict[str, Any]
# libyaml's loader where PyYAML has it: the CRDs alone are 2.3 MB of YAML.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Key = tuple[str, str, str]


def helm_binary() -> Path | None:
    """The pinned helm, if `make cluster-bins` (or the cluster tier) built it."""
    return bins.built("helm")


NOT_BUILT = (
    "helm is not built: `make cluster-bins` builds the pinned helm (hack/testbed/helm) with Go; "
    "the cluster tier (tests/cluster/test_helm.py) runs this comparison wherever Go is installed"
)


def helm_env(kubeconfig: str | Path | None = None) -> dict[str, str]:
    home = Path(tempfile.gettempdir()) / f"trainer-helm-{os.getuid()}"
    env = dict(os.environ)
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config")):
        env[var] = str(home / sub)
    env["HELM_DATA_HOME"] = str(home / "data")
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run_helm(
    helm: Path, *args: str, kubeconfig: str | Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """helm ARGS; its stderr without the loader's notes on the chart's two links into
    manifests/base (files/crds, files/runtimes), which it follows."""
    done = subprocess.run(
        [str(helm), *args],
        capture_output=True, text=True, timeout=timeout, check=False, env=helm_env(kubeconfig),
    )  # fmt: skip
    done.stderr = "".join(
        line for line in done.stderr.splitlines(keepends=True) if "found symbolic link" not in line
    )
    return done


def template(helm: Path, *args: str, chart: Path = CHART) -> list[Obj]:
    """``helm template`` of the chart as release kubeflow-trainer in kubeflow-system."""
    done = run_helm(
        helm, "template", "kubeflow-trainer", str(chart), "-n", "kubeflow-system", *args
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.load_all(done.stdout, Loader=LOADER) if d]


def key(obj: Obj) -> Key:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def by_key(objects: list[Obj]) -> dict[Key, Obj]:
    keyed = {key(o): o for o in objects}
    assert len(keyed) == len(objects), "an object is rendered twice"
    return keyed


RUNTIMES_CONFIG_MAP = "kubeflow-trainer-runtimes"
INSTALLER = "kubeflow-trainer-runtimes-installer"


def installed_runtimes(objects: list[Obj]) -> list[Obj]:
    """The ClusterTrainingRuntimes the chart's installer Job would apply: those of its
    ConfigMap's stream (none without the ConfigMap)."""
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == RUNTIMES_CONFIG_MAP:
            return [d for d in yaml.load_all(obj["data"]["runtimes.yaml"], Loader=LOADER) if d]
    return []


def installer_keys() -> set[Key]:
    """The installer's objects: its ConfigMap, ServiceAccount, ClusterRole and binding, and
    its two hook Jobs."""
    ns = "kubeflow-system"
    return {
        ("ConfigMap", ns, RUNTIMES_CONFIG_MAP),
        ("ServiceAccount", ns, INSTALLER),
        ("ClusterRole", "", INSTALLER),
        ("ClusterRoleBinding", "", INSTALLER),
        ("Job", ns, f"{INSTALLER}-install"),
        ("Job", ns, f"{INSTALLER}-uninstall"),
    }


def differences(chart: list[Obj], runtimes: bool = False) -> list[str]:
    """Every difference between the chart's objects and ``trainer manifests`` (plus the
    runtimes overlay's objects with ``runtimes``: compared with those the chart's installer
    applies, its own objects left out), but for the three the chart makes by design:

    - no Namespace: ``helm install --create-namespace`` creates the release namespace (Helm
      refuses to install an object it did not create, and it would own the namespace);
    - the CRDs carry ``helm.sh/resource-policy: keep`` (crds.keep), so ``helm uninstall``
      leaves them and every TrainJob;
    - the Configuration file spells out every field of upstream's chart: it is compared as
      the Configuration the controller loads from it (its own parser), not as text.
    """
    want = [o for o in install_objects(Values()) if o["kind"] != "Namespace"]
    if runtimes:
        want += runtime_objects()
        chart = [o for o in chart if key(o) not in installer_keys()] + installed_runtimes(chart)
    have, expected = by_key(chart), by_key(want)
    found = [f"only in the chart: {k}" for k in sorted(set(have) - set(expected))]
    found += [f"only in trainer manifests: {k}" for k in sorted(set(expected) - set(have))]
    for k in sorted(set(have) & set(expected)):
        a, b = _comparable(have[k]), _comparable(expected[k])
        if a != b:
            found.append(f"{k}: chart {yaml.safe_dump(a)[:3000]}\n!= trainer manifests {b}")
    return found


def _comparable(obj: Obj) -> Obj:
    out = dict(obj)
    meta = dict(out["metadata"])
    if out["kind"] == "CustomResourceDefinition":
        annotations = dict(meta.get("annotations") or {})
        assert annotations.pop(KEEP, "keep") == "keep"
        meta["annotations"] = annotations
    out["metadata"] = meta
    if out["kind"] == "ConfigMap" and meta["name"] == CONFIG_MAP:
        data = dict(out["data"])
        data[CONFIG_KEY] = parse_config(data[CONFIG_KEY], CONFIG_KEY).model_dump()
        out["data"] = data
    return out
