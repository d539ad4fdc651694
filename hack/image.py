"""Build the controller image without a container engine: ``make image`` (docs/install.md,
"Building the image without Docker").

The Dockerfile stays the one description of the image. This script reads it and carries out
the stages its target needs with Debian's tools instead of a daemon:

- the base image (``python:3.11.11-slim-bookworm``) becomes a root filesystem that mmdebstrap
  makes from Debian's packages: the same Debian release and Python minor version, taken from
  the ``FROM`` line, with Debian's build of Python instead of python.org's;
- the ``ENV``, ``WORKDIR``, ``COPY`` and ``RUN`` instructions of the build stages run in that
  filesystem, each ``RUN`` under bubblewrap (its own /dev, /proc and /tmp, the host's network),
  so the virtualenv comes from the Dockerfile's own ``pip install --constraint
  requirements.lock .``;
- each ``COPY`` of the target stage becomes a layer over the Debian one, and its ``ENV``,
  ``USER``, ``EXPOSE``, ``ENTRYPOINT``, ``CMD`` and ``LABEL`` the image's configuration; umoci
  writes the OCI image layout (``build/image``, tag ``trainer-py:<version>``).

An instruction or form outside that subset is refused with its line number, so the two builds
cannot drift apart silently. The build runs as root (mmdebstrap's root mode, bubblewrap's
mounts). It is skipped when nothing it reads changed since the last one (the Dockerfile, this
script, the files the stages copy): ``--force`` builds again, for instance to take Debian's
newest security updates.

    sudo python3 hack/image.py                      # build/image, tag trainer-py:0.1.0
    sudo python3 hack/image.py --target data-cache  # build/image-data-cache
    python3 hack/image.py --if-possible             # exit 0, saying why, where it cannot run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
PROGRAMS = ("mmdebstrap", "bwrap", "umoci", "tar")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
# What the substitute base holds besides Debian's essential packages: the interpreter, what the
# Dockerfile's RUN calls it by (`python`, `python -m venv` with ensurepip), the CA bundle and the
# C++ runtime python:*-slim ships (manylinux wheels may link libstdc++: google-re2 does).
BASE_PACKAGES = (
    "python{python}",
    "python3-venv",
    "python-is-python3",
    "ca-certificates",
    "libstdc++6",
)
# Left out of the base: documentation (but each package's copyright file), manuals, translations.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
)
# The build host's files a container runtime supplies at run time; the host's own must not ship.
CUSTOMIZE = (
    'rm -f "$1"/etc/resolv.conf "$1"/etc/hostname'
    ' "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old'
)
# The configuration of python:*-slim that the Dockerfile builds on: its PATH (Debian's with
# /usr/local/bin put first once more, which `ENV PATH=/opt/trainer/bin:$PATH` expands), its locale
# and its CMD (which an ENTRYPOINT resets). Its other variables describe python.org's build
# (PYTHON_VERSION, GPG_KEY, PYTHON_SHA256).
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}
BASE_CMD = ["python3"]
# docker build passes these from the caller's environment to RUN (its predefined build
# arguments); the CA bundle is how pip on a network with a TLS-inspecting proxy trusts it.
PASSED_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
BASE_IMAGE = re.compile(r"^python:(?P<python>3\.\d+)(?:\.\d+)?-slim-(?P<suite>[a-z]+)$")


class BuildError(Exception):
    """What stops the build, said in one line."""


# --- the Dockerfile ---------------------------------------------------------------------------


@dataclass
class Instruction:
    line: int
    keyword: str
    args: str

    def where(self) -> str:
        return f"Dockerfile:{self.line}: {self.keyword}"


@dataclass
class Stage:
    index: int
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.name or f"stage {self.index}"


@dataclass
class Config:
    """The image configuration a target stage declares (OCI image config, "config" object)."""

    env: dict[str, str]
    user: str = ""
    exposed_ports: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    workdir: str = ""

    def oci(self) -> dict[str, Any]:
        config: dict[str, Any] = {"Env": [f"{k}={v}" for k, v in self.env.items()]}
        if self.user:
            config["User"] = self.user
        if self.exposed_ports:
            config["ExposedPorts"] = {port: {} for port in self.exposed_ports}
        if self.entrypoint:
            config["Entrypoint"] = self.entrypoint
        if self.cmd:
            config["Cmd"] = self.cmd
        if self.labels:
            config["Labels"] = self.labels
        if self.workdir:
            config["WorkingDir"] = self.workdir
        return config


def parse(text: str) -> list[Stage]:
    """The stages of a Dockerfile: continuation lines joined, comments dropped."""
    stages: list[Stage] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        keyword, _, args = joined.partition(" ")
        instruction = Instruction(start, keyword.upper(), args.strip())
        if instruction.keyword == "FROM":
            words = instruction.args.split()
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append(Stage(len(stages), words[0], words[2]))
            elif len(words) == 1:
                stages.append(Stage(len(stages), words[0], None))
            else:
                raise BuildError(f"{instruction.where()} {instruction.args!r}: not supported")
            continue
        if not stages:
            raise BuildError(f"{instruction.where()} before the first FROM")
        stages[-1].instructions.append(instruction)
    return stages


def expand(value: str, env: dict[str, str]) -> str:
    """$NAME and ${NAME} from the stage's environment, as Docker substitutes them."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", lambda m: env.get(m.group(1) or m.group(2), ""), value)


def env_pairs(instruction: Instruction, env: dict[str, str]) -> dict[str, str]:
    out = {}
    for word in shlex.split(instruction.args):
        name, sep, value = word.partition("=")
        if not sep:
            raise BuildError(f"{instruction.where()}: only the NAME=value form is supported")
        out[name] = expand(value, env)
    return out


def command(instruction: Instruction) -> list[str]:
    """The exec form (a JSON array) as it is; the shell form through /bin/sh -c."""
    if instruction.args.startswith("["):
        value = json.loads(instruction.args)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BuildError(f"{instruction.where()}: not a JSON array of strings")
        return [str(v) for v in value]
    return ["/bin/sh", "-c", instruction.args]


@dataclass
class Copy:
    sources: list[str]
    dest: str
    stage: str | None


def copy_args(instruction: Instruction, env: dict[str, str]) -> Copy:
    words = [expand(w, env) for w in shlex.split(instruction.args)]
    stage = None
    while words and words[0].startswith("--"):
        flag = words.pop(0)
        if flag.startswith("--from="):
            stage = flag.removeprefix("--from=")
        else:
            raise BuildError(f"{instruction.where()} {flag}: not supported")
    if len(words) < 2:
        raise BuildError(f"{instruction.where()}: needs a source and a destination")
    return Copy(words[:-1], words[-1], stage)


def config_of(stage: Stage) -> Config:
    """The configuration the stage declares over the base's (BASE_ENV, BASE_CMD)."""
    config = Config(env=dict(BASE_ENV), cmd=list(BASE_CMD))
    for instruction in stage.instructions:
        match instruction.keyword:
            case "ENV":
                config.env.update(env_pairs(instruction, config.env))
            case "USER":
                config.user = expand(instruction.args, config.env)
            case "EXPOSE":
                for port in instruction.args.split():
                    config.exposed_ports.append(port if "/" in port else f"{port}/tcp")
            case "ENTRYPOINT":
                config.entrypoint = command(instruction)
                config.cmd = []  # Docker resets a CMD inherited from the base
            case "CMD":
                config.cmd = command(instruction)
            case "LABEL":
                config.labels.update(env_pairs(instruction, config.env))
            case "WORKDIR":
                config.workdir = str(Path(config.workdir or "/") / expand(instruction.args, {}))
            case "COPY" | "RUN":
                pass
            case _:
                raise BuildError(f"{instruction.where()}: not supported by hack/image.py")
    return config


def needed(stages: list[Stage], target: Stage) -> list[Stage]:
    """The stages the target copies from, in Dockerfile order (one level: builds copy nothing
    from other stages in this Dockerfile; a deeper chain is refused)."""
    names = {s.label: s for s in stages}
    out = []
    for instruction in target.instructions:
        if instruction.keyword != "COPY":
            continue
        source = copy_args(instruction, {}).stage
        if source is None:
            continue
        if source not in names:
            raise BuildError(f"{instruction.where()}: no stage named {source!r}")
        stage = names[source]
        for inner in stage.instructions:
            if inner.keyword == "COPY" and copy_args(inner, {}).stage is not None:
                raise BuildError(f"{inner.where()}: a build stage copying from another stage")
        if stage not in out:
            out.append(stage)
    return sorted(out, key=lambda s: s.index)


def base_of(stage: Stage) -> tuple[str, str]:
    """The Debian suite and Python version standing in for the stage's FROM image."""
    match = BASE_IMAGE.match(stage.base)
    if not match:
        raise BuildError(
            f"{stage.label}: FROM {stage.base}: only python:X.Y[.Z]-slim-SUITE has a "
            "Debian stand-in"
        )
    return match["suite"], match["python"]


# --- running it -------------------------------------------------------------------------------


STARTED = time.monotonic()


def say(message: str) -> None:
    print(f"image: [{time.monotonic() - STARTED:5.1f} s] {message}", flush=True)


def run(argv: list[str], *, only: tuple[str, ...] = (), **kwargs: Any) -> None:
    """Run a program; with ``only``, show just its lines with those prefixes (all of its
    output when it fails)."""
    if not only:
        result = subprocess.run(argv, check=False, **kwargs)
        if result.returncode != 0:
            raise BuildError(f"{shlex.join(argv[:3])} ... exited {result.returncode}")
        return
    lines = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(only):
                print(f"image:   {line.rstrip()}", flush=True)
    if proc.returncode != 0:
        sys.stdout.write("".join(lines[-200:]))
        raise BuildError(f"{shlex.join(argv[:3])} ... exited {proc.returncode}")


def missing_prerequisites() -> list[str]:
    """Why the build cannot run here (empty when it can)."""
    missing = [f"{p} is not installed" for p in PROGRAMS if shutil.which(p) is None]
    if os.geteuid() != 0:
        missing.append("it runs as root (mmdebstrap's root mode, bubblewrap's mounts)")
    return missing


def source_date_epoch() -> int:
    """The time the image says it was made: SOURCE_DATE_EPOCH, else the last commit's."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    git = shutil.which("git")
    if git:
        result = subprocess.run(
            [git, "-C", str(ROOT), "log", "-1", "--format=%ct"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0 and result.stdout.strip().isdigit():
            return int(result.stdout.strip())
    return int(time.time())


def debian_base(out: Path, suite: str, python: str, mirror: str, security: str) -> None:
    """The root filesystem standing in for python:X.Y-slim-SUITE, as a tarball."""
    packages = ",".join(p.format(python=python) for p in BASE_PACKAGES)
    argv = [
        "mmdebstrap",
        "--mode=root",
        "--variant=essential",
        f"--include={packages}",
        # usr-is-merged rather than usrmerge (and the Perl it needs) for the merged /usr.
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        *(f"--dpkgopt={option}" for option in DPKG_EXCLUDES),
        f"--customize-hook={CUSTOMIZE}",
        suite,
        str(out),
        f"deb {mirror} {suite} main",
        f"deb {mirror} {suite}-updates main",
        f"deb {security} {suite}-security main",
    ]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(source_date_epoch())}
    run(argv, only=("I: success", "W:", "E:"), env=env)


def base_layer(tarball: Path, out: Path) -> None:
    """mmdebstrap's tarball without the device nodes under /dev: the runtime makes /dev."""
    with (
        tarfile.open(tarball, "r|") as src,
        tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as dst,
    ):
        for member in src:
            name = member.name.removeprefix("./")
            if name.startswith("dev/") and name != "dev/":
                continue
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)


def extract(tarball: Path, rootfs: Path, python: str) -> None:
    rootfs.mkdir(parents=True)
    run(["tar", "--extract", "--same-owner", "--file", str(tarball), "--directory", str(rootfs)])
    interpreter = (rootfs / "usr/bin/python").resolve()
    if interpreter.name != f"python{python}":
        raise BuildError(f"the Debian base's python is {interpreter.name}, not python{python}")


def inside(rootfs: Path, path: str) -> Path:
    """A path of the image's filesystem, in the directory holding it."""
    return rootfs / path.lstrip("/")


def copy_in(copy: Copy, cwd: str, rootfs: Path, context: Path) -> None:
    """COPY from the build context, with Docker's rules: a directory's contents go into the
    destination, several sources or a trailing slash make the destination a directory, and
    everything is owned by root."""
    dest = copy.dest if copy.dest.startswith("/") else str(Path(cwd) / copy.dest)
    to_dir = copy.dest.endswith("/") or len(copy.sources) > 1
    for source in copy.sources:
        src = (context / source).resolve()
        if not src.is_relative_to(context) or not src.exists():
            raise BuildError(f"COPY {source}: not in the build context")
        target = inside(rootfs, dest)
        if src.is_dir():
            shutil.copytree(src, target, symlinks=True, dirs_exist_ok=True)
        else:
            if to_dir:
                target.mkdir(parents=True, exist_ok=True)
                target = target / src.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
        for path in [target, *walk(target)]:
            os.lchown(path, 0, 0)


def walk(path: Path) -> Iterator[Path]:
    if path.is_dir() and not path.is_symlink():
        for child in sorted(path.iterdir()):
            yield child
            yield from walk(child)


def host_ca_bundle() -> str | None:
    """The CA bundle pip trusts on this host, when one is configured (PIP_CERT, then pip's
    own configuration), so pip in the build trusts the same network."""
    for name in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return os.environ[name]
    result = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.cert"],
        capture_output=True,
        text=True,
        check=False,
    )
    path = result.stdout.strip()
    return path if result.returncode == 0 and Path(path).is_file() else None


def run_step(instruction: Instruction, rootfs: Path, cwd: str, env: dict[str, str]) -> None:
    """RUN under bubblewrap: the stage's filesystem as /, fresh /dev, /proc and /tmp, the
    host's network and name resolution, the stage's environment and nothing else."""
    argv = ["bwrap", "--bind", str(rootfs), "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--tmpfs", "/tmp", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--die-with-parent"]
    for name in ("/etc/resolv.conf", "/etc/hosts"):
        if Path(name).exists():
            argv += ["--ro-bind", name, name]
    run_env = {"HOME": "/root", **env}
    run_env.update({k: os.environ[k] for k in PASSED_ENV if k in os.environ})
    ca = host_ca_bundle()
    if ca and "PIP_CERT" not in run_env:
        argv += ["--ro-bind", ca, "/tmp/build-ca-bundle.pem"]
        run_env["PIP_CERT"] = "/tmp/build-ca-bundle.pem"
    argv += ["--chdir", cwd, "--clearenv"]
    for name, value in run_env.items():
        argv += ["--setenv", name, value]
    argv += ["--", *command(instruction)]
    run(argv)


def build_stage(stage: Stage, base: Path, work: Path, context: Path, python: str) -> Path:
    """Carry out a build stage in a copy of the Debian base; its root filesystem."""
    rootfs = work / f"stage-{stage.index}"
    extract(base, rootfs, python)
    env = dict(BASE_ENV)
    cwd = "/"
    for instruction in stage.instructions:
        say(f"[{stage.label}] {instruction.keyword} {instruction.args}")
        match instruction.keyword:
            case "ENV":
                env.update(env_pairs(instruction, env))
            case "WORKDIR":
                cwd = str(Path(cwd) / expand(instruction.args, env))
                inside(rootfs, cwd).mkdir(parents=True, exist_ok=True)
            case "COPY":
                copy_in(copy_args(instruction, env), cwd, rootfs, context)
            case "RUN":
                run_step(instruction, rootfs, cwd, env)
            case _:
                raise BuildError(f"{instruction.where()}: not supported in a build stage")
    return rootfs


def write_layer(out: Path, entries: list[tuple[Path, str]]) -> None:
    """A layer holding each host path at its image path, every file owned by root."""

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for src, arcname in entries:
            tar.add(src, arcname=arcname, recursive=False, filter=as_root)
            for path in walk(src):
                tar.add(
                    path,
                    arcname=f"{arcname}/{path.relative_to(src)}",
                    recursive=False,
                    filter=as_root,
                )


def copy_layer(
    instruction: Instruction, env: dict[str, str], built: dict[str, Path], context: Path, out: Path
) -> None:
    """A layer for one COPY of the target stage."""
    copy = copy_args(instruction, env)
    if len(copy.sources) != 1 or copy.dest.endswith("/") or not copy.dest.startswith("/"):
        raise BuildError(f"{instruction.where()}: only COPY SRC /ABSOLUTE/DEST in the target")
    if copy.stage is not None:
        src = inside(built[copy.stage], copy.sources[0])
    else:
        src = (context / copy.sources[0]).resolve()
        if not src.is_relative_to(context):
            raise BuildError(f"{instruction.where()}: not in the build context")
    if not src.exists():
        raise BuildError(f"{instruction.where()}: {copy.sources[0]} does not exist")
    write_layer(out, [(src, copy.dest.lstrip("/"))])


# --- the OCI layout ---------------------------------------------------------------------------


def umoci(*args: str) -> None:
    run(["umoci", *args])


def oci_config_args(config: Config) -> list[str]:
    args = []
    for name, value in config.env.items():
        args.append(f"--config.env={name}={value}")
    if config.user:
        args.append(f"--config.user={config.user}")
    args += [f"--config.exposedports={port}" for port in config.exposed_ports]
    args += [f"--config.entrypoint={word}" for word in config.entrypoint]
    args += [f"--config.cmd={word}" for word in config.cmd]
    args += [f"--config.label={name}={value}" for name, value in config.labels.items()]
    if config.workdir:
        args.append(f"--config.workingdir={config.workdir}")
    return args


def read_image(layout: Path) -> dict[str, Any]:
    """The manifest and configuration of the layout's one image."""
    index = json.loads((layout / "index.json").read_text())

    def blob(digest: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((layout / "blobs" / digest.replace(":", "/")).read_text())
        return data

    descriptor = index["manifests"][0]
    manifest = blob(descriptor["digest"])
    return {
        "ref": descriptor.get("annotations", {}).get("org.opencontainers.image.ref.name"),
        "digest": descriptor["digest"],
        "manifest": manifest,
        "config": blob(manifest["config"]["digest"]),
    }


# --- the cache --------------------------------------------------------------------------------


def context_sources(stages: list[Stage]) -> list[str]:
    sources = []
    for stage in stages:
        for instruction in stage.instructions:
            if instruction.keyword == "COPY":
                copy = copy_args(instruction, {})
                if copy.stage is None:
                    sources += copy.sources
    return sorted(set(sources))


def inputs_digest(dockerfile: Path, stages: list[Stage], context: Path, settings: list[str]) -> str:
    """What the image is made from: this script, the Dockerfile, the settings and every file
    the stages copy from the context (bytecode caches aside)."""
    digest = hashlib.sha256()
    files = [Path(__file__).resolve(), dockerfile.resolve()]
    for source in context_sources(stages):
        path = context / source
        files += [path, *walk(path)] if path.is_dir() else [path]
    for setting in settings:
        digest.update(setting.encode() + b"\0")
    for path in files:
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        digest.update(
            str(path.relative_to(context) if path.is_relative_to(context) else path.name).encode()
            + b"\0"
        )
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(oct(path.stat().st_mode & 0o7777).encode() + path.read_bytes())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def report(summary: dict[str, Any]) -> None:
    layers = summary["layers"]
    compressed = sum(layer["compressed"] for layer in layers)
    unpacked = sum(layer["unpacked"] for layer in layers)
    say(f"{summary['layout']} (OCI layout), tag {summary['tag']}, manifest {summary['digest']}")
    for layer in layers:
        say(
            f"  layer {megabytes(layer['compressed'])} compressed, "
            f"{megabytes(layer['unpacked'])} unpacked: {layer['created_by']}"
        )
    say(f"size: {megabytes(compressed)} compressed, {megabytes(unpacked)} unpacked")


# --- main -------------------------------------------------------------------------------------


def default_tag(target: Stage, stages: list[Stage]) -> str:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    final = target is stages[-1]
    return f"trainer-py:{version}" if final else f"trainer-py-{target.label}:{version}"


def build(args: argparse.Namespace) -> int:
    stages = parse(args.dockerfile.read_text())
    if args.target:
        matches = [s for s in stages if s.name == args.target]
        if not matches:
            raise BuildError(f"no stage named {args.target!r}")
        target = matches[0]
    else:
        target = stages[-1]
    builds = needed(stages, target)
    config = config_of(target)
    suite, python = base_of(target)
    for stage in builds:
        if base_of(stage) != (suite, python):
            raise BuildError(f"{stage.label} is FROM {stage.base}, the target {target.base}")
    tag = args.tag or default_tag(target, stages)
    out: Path = args.out or ROOT / "build" / (
        "image" if target is stages[-1] else f"image-{target.label}"
    )
    summary_path = out.with_name(out.name + ".json")
    context = args.dockerfile.resolve().parent
    settings = [target.label, tag, args.mirror, args.security_mirror]
    inputs = inputs_digest(args.dockerfile, [*builds, target], context, settings)
    if not args.force and summary_path.exists() and (out / "index.json").exists():
        summary = json.loads(summary_path.read_text())
        if summary.get("inputs") == inputs:
            say(
                f"up to date (built in {summary['seconds']} s from the same inputs; --force builds)"
            )
            report(summary)
            return 0
    missing = missing_prerequisites()
    if missing:
        message = "cannot build here: " + "; ".join(missing)
        if args.if_possible:
            say(message)
            return 0
        raise BuildError(message)

    started = time.monotonic()
    work = out.with_name(out.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        packages = [p.format(python=python) for p in BASE_PACKAGES]
        say(f"[base] mmdebstrap {suite} with python{python} for FROM {target.base}")
        debian_base(work / "debian.tar", suite, python, args.mirror, args.security_mirror)
        layers = [
            (
                work / "layer-0.tar",
                f"FROM {target.base}: Debian {suite} (mmdebstrap, {', '.join(packages)})",
            )
        ]
        base_layer(work / "debian.tar", layers[0][0])
        built = {
            stage.label: build_stage(stage, layers[0][0], work, context, python) for stage in builds
        }
        env = dict(BASE_ENV)
        for instruction in target.instructions:
            if instruction.keyword == "ENV":
                env.update(env_pairs(instruction, env))
            elif instruction.keyword == "COPY":
                say(f"[{target.label}] {instruction.keyword} {instruction.args}")
                layer = work / f"layer-{len(layers)}.tar"
                copy_layer(instruction, env, built, context, layer)
                layers.append((layer, f"{instruction.keyword} {instruction.args}"))
            elif instruction.keyword == "RUN":
                raise BuildError(f"{instruction.where()}: RUN in the target stage is not supported")
        say(f"[oci] umoci: {len(layers)} layers, config from the Dockerfile ({target.label})")
        created = datetime.fromtimestamp(source_date_epoch(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        staging = out.with_name(out.name + ".new")
        shutil.rmtree(staging, ignore_errors=True)
        image = f"{staging}:{tag}"
        umoci("init", "--layout", str(staging))
        umoci("new", "--image", image)
        for layer, created_by in layers:
            umoci(
                "raw",
                "add-layer",
                "--image",
                image,
                f"--history.created={created}",
                f"--history.created_by={created_by}",
                str(layer),
            )
        declared = "; ".join(
            f"{i.keyword} {i.args}" for i in target.instructions if i.keyword not in ("COPY", "RUN")
        )
        umoci(
            "config",
            "--image",
            image,
            f"--created={created}",
            f"--history.created={created}",
            f"--history.created_by={declared}",
            *oci_config_args(config),
        )
        umoci("gc", "--layout", str(staging))
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
        written = read_image(out)
        summary = {
            "inputs": inputs,
            "layout": str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out),
            "tag": tag,
            "digest": written["digest"],
            "layers": [
                {
                    "created_by": created_by,
                    "compressed": descriptor["size"],
                    "unpacked": layer.stat().st_size,
                }
                for (layer, created_by), descriptor in zip(
                    layers, written["manifest"]["layers"], strict=True
                )
            ],
        }
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    summary["seconds"] = round(time.monotonic() - started)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    say(f"built in {summary['seconds']} s")
    report(summary)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dockerfile", type=Path, default=DOCKERFILE)
    parser.add_argument("--target", help="a named stage (default: the last one)")
    parser.add_argument("--out", type=Path, help="the OCI layout (default: build/image)")
    parser.add_argument("--tag", help="default: trainer-py:<version from pyproject.toml>")
    parser.add_argument("--mirror", default=DEBIAN_MIRROR)
    parser.add_argument("--security-mirror", default=DEBIAN_SECURITY_MIRROR)
    parser.add_argument("--force", action="store_true", help="build even when up to date")
    parser.add_argument("--keep-work", action="store_true", help="keep the stages' files")
    parser.add_argument(
        "--if-possible", action="store_true", help="exit 0, saying why, where it cannot run"
    )
    args = parser.parse_args(argv)
    try:
        return build(args)
    except BuildError as exc:
        print(f"image: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
