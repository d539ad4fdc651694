"""Build the test bed's real programs from their Go modules into a cache outside the tree
(docs/testbed.md, "The programs").

Each Go module under ``hack/testbed/`` (``kube/``, ``kueue/``, ``helm/``, ...) pins programs
with ``tool`` lines and a committed ``go.sum``. A module's programs are built into
``$TRAINER_TESTBED_CACHE/bins/<module>-<key>/``, where the key hashes the module's go.mod,
go.sum and the Go version: a change to any of them builds anew; the same key is a few
seconds' check. A build goes into a temporary folder renamed into place only once every
program of the module built, so a cache folder is either whole or absent, never half-used.

    python3 hack/testbed/bins.py            # build what is missing, print where the programs are
    python3 hack/testbed/bins.py --check    # exit 1 (and say what) when something is not built
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULES = ("kube", "kueue", "upstream", "crds", "helm")
# The name each program gets in the cache, where the package path's last element is not it.
NAMES = {
    "go.etcd.io/etcd/server/v3": "etcd",
    "sigs.k8s.io/jobset": "jobset-manager",
    "sigs.k8s.io/kueue/cmd/kueue": "kueue-manager",
}
# Kubernetes' own build stamps its release into these variables (its hack/lib/version.sh); a
# plain `go build` leaves "v0.0.0-master+$Format:%H$", which /version then serves, and which
# Kueue refuses to start with ("Unable to setup server version fetcher ... could not parse
# pre-release/metadata"). Stamped from the pinned k8s.io/kubernetes version.
VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
HELM_MODULE = "helm.sh/helm/v3"
# Helm's Makefile stamps the Kubernetes version of its client libraries into these.
HELM_PACKAGES = (f"{HELM_MODULE}/pkg/chartutil", f"{HELM_MODULE}/pkg/lint/rules")


class BuildError(RuntimeError):
    """A program that did not build: the message names it, the step and its last output."""


def cache_root() -> Path:
    base = os.environ.get("TRAINER_TESTBED_CACHE")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "trainer-testbed"


def go_binary() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    fallback = Path("/usr/local/go/bin/go")
    return str(fallback) if fallback.is_file() else None


@dataclass(frozen=True)
class Module:
    """One pinning module: its folder, its tool packages and the versions it requires."""

    name: str
    folder: Path

    def tools(self) -> list[str]:
        return _block(self.folder / "go.mod", "tool")

    def requires(self) -> dict[str, str]:
        pairs = (line.split() for line in _block(self.folder / "go.mod", "require"))
        return {p[0]: p[1] for p in pairs if len(p) >= 2}

    def key(self, go_version: str) -> str:
        digest = hashlib.sha256(go_version.encode())
        for name in ("go.mod", "go.sum"):
            digest.update(b"\0" + (self.folder / name).read_bytes())
        flags = [f for tool in self.tools() for f in ldflags(tool, self.requires())]
        if flags:  # a change of how a program is linked builds anew, too
            digest.update(b"\0" + " ".join(flags).encode())
        return digest.hexdigest()[:16]


def _block(gomod: Path, directive: str) -> list[str]:
    """The entries of a go.mod directive, written either as one line or as a block."""
    entries: list[str] = []
    inside = False
    for raw in gomod.read_text().splitlines():
        line = raw.split("//", 1)[0].strip()
        if inside:
            if line == ")":
                inside = False
            elif line:
                entries.append(line)
        elif line == f"{directive} (":
            inside = True
        elif line.startswith(directive + " "):
            entries.append(line[len(directive) + 1 :].strip())
    return entries


def ldflags(package: str, requires: dict[str, str]) -> list[str]:
    """The ``-X`` settings a program of Kubernetes (VERSION_PACKAGES) or Helm (HELM_PACKAGES)
    is linked with."""
    if package.startswith(HELM_MODULE + "/"):
        return _helm_ldflags(requires)
    version = requires.get("k8s.io/kubernetes", "")
    if not package.startswith("k8s.io/kubernetes/") or not version.startswith("v"):
        return []
    major, minor = version[1:].split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return [f"-X {pkg}.{var}={value}" for pkg in VERSION_PACKAGES for var, value in values.items()]


def _helm_ldflags(requires: dict[str, str]) -> list[str]:
    """What Helm's own Makefile stamps: its release (``helm version`` says "v3.22" without it)
    and the Kubernetes minor of its client libraries, which ``helm template`` and ``helm lint``
    take as the cluster's version when there is no cluster (1.20 without it, which a chart's
    ``kubeVersion: >=1.31.0-0`` refuses)."""
    helm, client = requires.get(HELM_MODULE, ""), requires.get("k8s.io/client-go", "")
    if not helm.startswith("v") or not client.startswith("v0."):
        return []
    minor = client[1:].split(".")[1]
    flags = [f"-X {HELM_MODULE}/internal/version.version={helm}"]
    flags.append(f"-X {HELM_MODULE}/internal/version.gitTreeState=clean")
    for pkg in HELM_PACKAGES:
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
    return flags


def program_name(package: str) -> str:
    return NAMES.get(package, package.rsplit("/", 1)[-1])


def go_version(go: str) -> str:
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def module_dir(module: Module, go: str) -> Path:
    return cache_root() / "bins" / f"{module.name}-{module.key(go_version(go))}"


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # The pins are the committed go.mod and go.sum: nothing may change them during a build,
    # and the machine's own Go builds them (a toolchain line would download another).
    env["GOFLAGS"] = "-mod=readonly -trimpath"
    env["GOTOOLCHAIN"] = "local"
    env.setdefault("CGO_ENABLED", "0")
    return env


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def build_module(module: Module, go: str, say: Callable[[str], None]) -> Path:
    """The module's programs in the cache, built now if their folder is missing."""
    final = module_dir(module, go)
    if (final / ".complete").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    requires = module.requires()
    tools = module.tools()
    staging = Path(tempfile.mkdtemp(prefix=f".{module.name}-", dir=final.parent))
    try:
        say(f"[{module.name}] downloading modules (go mod download)")
        done = subprocess.run(
            [go, "mod", "download"], cwd=module.folder, env=_go_env(),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise BuildError(
                f"{module.name}: step 'go mod download' failed (exit {done.returncode}):\n"
                + _tail(done.stdout + done.stderr)
            )
        for i, package in enumerate(tools, 1):
            name = program_name(package)
            version = next((v for m, v in requires.items() if package.startswith(m)), "?")
            say(f"[{module.name} {i}/{len(tools)}] building {name} ({package} {version})")
            started = time.monotonic()
            flags = ldflags(package, requires)
            link = [f"-ldflags={' '.join(flags)}"] if flags else []
            done = subprocess.run(
                [go, "build", *link, "-o", str(staging / name), package],
                cwd=module.folder, env=_go_env(), capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                raise BuildError(
                    f"{name} ({package} {version}): step 'go build' failed "
                    f"(exit {done.returncode}); its last lines:\n"
                    + _tail(done.stdout + done.stderr)
                )
            say(
                f"[{module.name} {i}/{len(tools)}] built {name} "
                f"in {time.monotonic() - started:.0f} s"
            )
        (staging / ".complete").write_text(go_version(go) + "\n")
        if final.exists():  # a folder without .complete: a build that was interrupted
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    for old in final.parent.glob(f"{module.name}-*"):
        if old != final and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)  # an earlier pin's build
    return final


def programs(say: Callable[[str], None] = lambda _: None) -> dict[str, Path]:
    """Every program of the bed, by name, building what is missing; or those of the folder
    ``TRAINER_TESTBED_BINS`` names (programs built elsewhere, used as they are)."""
    given = os.environ.get("TRAINER_TESTBED_BINS")
    if given:
        return {p.name: p for p in Path(given).iterdir() if p.is_file()}
    go = go_binary()
    if go is None:
        raise BuildError("go: not found on PATH (the test bed builds its programs with Go)")
    found: dict[str, Path] = {}
    for name in MODULES:
        folder = build_module(Module(name, HERE / name), go, say)
        found.update({p.name: p for p in folder.iterdir() if not p.name.startswith(".")})
    return found


def built(name: str) -> Path | None:
    """Program ``name`` if it is already built (or in ``TRAINER_TESTBED_BINS``), building
    nothing: for tests outside the cluster tier that use a program where it is there and say
    why they skip where it is not (``make cluster-bins`` builds it)."""
    given = os.environ.get("TRAINER_TESTBED_BINS")
    if given:
        path = Path(given) / name
        return path if path.is_file() else None
    go = go_binary()
    if go is None:
        return None
    version = go_version(go)
    for module in MODULES:
        folder = cache_root() / "bins" / f"{module}-{Module(module, HERE / module).key(version)}"
        if (folder / ".complete").is_file() and (folder / name).is_file():
            return folder / name
    return None


def source_dir(module_path: str, module: str = "kube") -> Path:
    """A pinned module's source in the Go module cache (its released manifests are there)."""
    go = go_binary()
    if go is None:
        raise BuildError("go: not found on PATH")
    out = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module_path],
        cwd=HERE / module, env=_go_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0 or not out.stdout.strip():
        raise BuildError(f"{module_path}: not in the module cache: {_tail(out.stderr, 3)}")
    return Path(out.stdout.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a program is missing")
    args = parser.parse_args()
    go = go_binary()
    if go is None:
        print("cluster-bins: go not found; the test bed needs Go 1.26 to build", file=sys.stderr)
        return 1
    if args.check:
        missing = [
            n for n in MODULES if not (module_dir(Module(n, HERE / n), go) / ".complete").exists()
        ]
        for name in missing:
            print(f"cluster-bins: {name} is not built (make cluster-bins)", file=sys.stderr)
        return 1 if missing else 0
    started = time.monotonic()
    try:
        found = programs(lambda line: print(f"cluster-bins: {line}", file=sys.stderr, flush=True))
    except BuildError as exc:
        print(f"cluster-bins: error: {exc}", file=sys.stderr)
        return 1
    for name, path in sorted(found.items()):
        print(f"{name}\t{path}")
    print(f"cluster-bins: ready in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
