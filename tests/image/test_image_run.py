"""The controller image, built without a container engine (``make image``, hack/image.py) and
started the way a kubelet starts the Deployment's pod: as UID/GID 65532 in a rootless crun
sandbox (a user namespace mapping only that user), on a read-only root with /tmp as the only
writable place, no capabilities, and the Deployment's own arguments, configuration file,
environment and service-account token (docs/install.md, "Building the image without Docker").

``make image-check`` runs this file on its own (``make test`` runs it after the unit tests):
the build takes about two minutes from nothing and is skipped when its inputs are unchanged.
Where the tools are missing, the user is not root or the kernel refuses user namespaces, every
test is skipped with the reason."""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from trainer.deploy.render import install_objects
from trainer.deploy.values import DEFAULT_IMAGE, Values

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "build" / "image"
USER = 65532
RUNTIME = ("umoci", "crun", "setpriv", "unshare")
NAMESPACE = "kubeflow-system"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def _image_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_image", ROOT / "hack/image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hack_image"] = module
    spec.loader.exec_module(module)
    return module


image = _image_module()


def why_not_here() -> str | None:
    """Why the image cannot be built and started on this machine, or None."""
    missing = list(image.missing_prerequisites())
    missing += [f"{p} is not installed" for p in RUNTIME if shutil.which(p) is None]
    if missing:
        return "; ".join(missing)
    probe = subprocess.run(
        [*as_user(), "unshare", "--user", "--map-current-user", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"the kernel refuses an unprivileged user namespace: {probe.stderr.strip()}"
    return None


def as_user() -> list[str]:
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups"]


@pytest.fixture(scope="module")
def layout() -> Path:
    reason = why_not_here()
    if reason:
        pytest.skip(f"the image is not built and started here: {reason}")
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack/image.py")],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    return LAYOUT


@dataclass
class Sandbox:
    """An unpacked copy of the image and the crun that starts it as USER."""

    bundle: Path
    state: Path
    config: dict[str, Any]
    runs: int = 0

    @property
    def rootfs(self) -> Path:
        return self.bundle / "rootfs"

    def scratch(self, name: str) -> Path:
        """A directory USER can read, for files bound into the sandbox."""
        path = self.bundle.parent / name
        path.mkdir(mode=0o755)
        return path

    def mountpoint(self, path: str) -> None:
        """Make a mount target in the image's filesystem, as a runtime does as root before it
        hands the root over read-only."""
        (self.rootfs / path.lstrip("/")).mkdir(parents=True, exist_ok=True)

    def argv(
        self,
        name: str,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        mounts: list[dict[str, Any]] | None = None,
        hostname: str = "trainer-image-test",
    ) -> list[str]:
        """The command that runs ``args`` in the image (with the image's user, environment
        and working directory, as umoci put them in config.json)."""
        config = json.loads(json.dumps(self.config))
        process = config["process"]
        process["terminal"] = False
        process["args"] = args
        process["env"] = [*process["env"], *(f"{k}={v}" for k, v in (env or {}).items())]
        # The Deployment's container: no capabilities, no privilege escalation, read-only root.
        process["capabilities"] = {kind: [] for kind in process["capabilities"]}
        process["noNewPrivileges"] = True
        config["root"]["readonly"] = True
        config["hostname"] = hostname
        kept = []
        for mount in config["mounts"]:
            # sysfs, cgroupfs and mqueue need namespaces a rootless sandbox sharing the host's
            # network does not own; devpts' gid=5 is not mapped in it.
            if mount["destination"] in ("/sys", "/sys/fs/cgroup", "/dev/mqueue"):
                continue
            if mount["destination"] == "/dev/pts":
                mount["options"] = [o for o in mount["options"] if not o.startswith("gid=")]
            kept.append(mount)
        tmp: dict[str, Any] = {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}
        tmp["options"] = ["nosuid", "nodev", "mode=1777", "size=65536k"]  # the emptyDir
        config["mounts"] = [*kept, tmp, *(mounts or [])]
        linux = config["linux"]
        linux.pop("resources", None)  # no cgroup: the sandbox is rootless
        # No network namespace: the host's loopback is where the API server listens.
        linux["namespaces"] = [{"type": t} for t in ("user", "mount", "pid", "ipc", "uts")]
        linux["uidMappings"] = [{"containerID": USER, "hostID": USER, "size": 1}]
        linux["gidMappings"] = [{"containerID": USER, "hostID": USER, "size": 1}]
        self.runs += 1
        path = self.state.parent / f"config-{self.runs}.json"
        path.write_text(json.dumps(config))
        path.chmod(0o644)
        run = ["run", "--bundle", str(self.bundle), "--config", str(path), name]
        return [*self.prefix(), *self.crun(), *run]

    def crun(self) -> list[str]:
        # Without newuidmap on PATH crun writes its one-user mapping itself (newuidmap would
        # look USER up in /etc/passwd, where it has no entry).
        crun = [shutil.which("crun") or "crun", "--cgroup-manager=disabled", f"--root={self.state}"]
        return ["env", "-i", "PATH=/nonexistent", *crun]

    def prefix(self) -> list[str]:
        """setpriv to USER; where cgroup v1 and v2 are mounted together (hybrid) and v2 has
        controllers, crun 1.8 refuses to start even with cgroups disabled, so its mount
        namespace does without the v2 hierarchy."""
        unified = Path("/sys/fs/cgroup/unified")
        if not os.path.ismount(unified):
            return as_user()
        script = f'umount {unified} && exec "$@"'
        unshare = ["unshare", "--mount", "--propagation=private"]
        return [*unshare, "sh", "-c", script, "sh", *as_user()]

    def run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        name = f"check-{self.runs + 1}"
        return subprocess.run(
            self.argv(name, args, **kwargs),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def state_of(self, name: str) -> dict[str, Any]:
        out = subprocess.run(
            [*self.prefix(), *self.crun(), "state", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        data: dict[str, Any] = json.loads(out)
        return data


@pytest.fixture(scope="module")
def sandbox(layout: Path) -> Iterator[Sandbox]:
    # Under /tmp with mode 0755: USER has to reach the bundle (pytest's tmp_path is 0700).
    top = Path(tempfile.mkdtemp(prefix="trainer-image-"))
    try:
        top.chmod(0o755)
        bundle = top / "bundle"
        tag = image.read_image(layout)["ref"]
        subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], check=True)
        bundle.chmod(0o755)
        state = top / "crun"
        state.mkdir()
        os.chown(state, USER, USER)
        config = json.loads((bundle / "config.json").read_text())
        yield Sandbox(bundle, state, config)
    finally:
        shutil.rmtree(top, ignore_errors=True)


# --- the image as built -----------------------------------------------------------------------


def test_the_config_is_the_dockerfiles_final_stage(layout: Path) -> None:
    written = image.read_image(layout)
    assert written["ref"] == DEFAULT_IMAGE  # what the Deployment runs
    config = written["config"]["config"]
    final = image.parse((ROOT / "Dockerfile").read_text())[-1]
    assert config == image.config_of(final).oci()
    # And what that is, spelled out (tests/deploy/test_image.py checks the Dockerfile says so).
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["trainer", "controller"]
    assert "Cmd" not in config
    assert set(config["ExposedPorts"]) == {"8081/tcp", "8443/tcp", "9443/tcp", "10443/tcp"}
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/trainer/bin:/usr/local/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == env["PYTHONUNBUFFERED"] == "1"
    assert env["HOME"] == "/tmp"
    deployment = next(o for o in install_objects(Values()) if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == USER
    assert written["config"]["architecture"] == "amd64" and written["config"]["os"] == "linux"


def runtime_closure() -> dict[str, str]:
    """Every distribution ``pip install .`` brings in (pyproject's dependencies and theirs,
    no extras), at the version this test environment has: the locked one
    (tests/deploy/test_lock.py checks that)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    todo = [(Requirement(r), "") for r in pyproject["project"]["dependencies"]]
    found: dict[str, str] = {}
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        dist = metadata.distribution(name)
        extras = sorted(requirement.extras)
        if name in found and not extras:
            continue
        found[name] = dist.version
        for child in dist.requires or []:
            for wanted in ["", *extras]:
                todo.append((Requirement(child), wanted))
    return found


def image_distributions(site: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for info in site.glob("*.dist-info"):
        dist = metadata.PathDistribution(info)
        out[canonicalize_name(dist.metadata["Name"])] = dist.version
    return out


def test_opt_trainer_holds_the_locked_runtime_dependencies_compiled(sandbox: Sandbox) -> None:
    venv = sandbox.rootfs / "opt/trainer"
    site = venv / "lib/python3.11/site-packages"
    installed = image_distributions(site)
    assert (
        installed.pop("kubeflow-trainer-py")
        == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    )
    assert installed == runtime_closure()
    assert "pip" not in installed and not (venv / "bin/pip").exists()
    # compileall ran: every module has its bytecode, so a read-only root costs no start-up.
    sources = [p for p in site.rglob("*.py") if "__pycache__" not in p.parts]
    assert len(sources) > 1000
    stale = [
        p for p in sources if not list(p.parent.glob(f"__pycache__/{p.stem}.cpython-311*.pyc"))
    ]
    assert stale[:5] == []
    assert (venv / "bin/trainer").read_text().splitlines()[0] == "#!/opt/trainer/bin/python"
    interpreter = os.readlink(venv / "bin/python")  # the base's, named by an absolute link
    assert (sandbox.rootfs / interpreter.lstrip("/")).exists()
    assert "home = /usr/bin" in (venv / "pyvenv.cfg").read_text()
    # Nothing of the build stage but the virtualenv: no sources, no build tools' caches.
    assert not (sandbox.rootfs / "src").exists()
    assert not (sandbox.rootfs / "root/.cache").exists()
    assert not (sandbox.rootfs / "etc/resolv.conf").exists()


# --- the image started ------------------------------------------------------------------------


def test_trainer_version_and_controller_help(sandbox: Sandbox) -> None:
    host = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", "version"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    version = sandbox.run(["trainer", "version"])
    assert version.returncode == 0, version.stderr
    assert version.stdout == host.stdout
    assert version.stdout.startswith("trainer 0.1.0 ")
    # The image's own entrypoint with one argument, as `docker run IMAGE --help` runs it.
    help_ = sandbox.run([*sandbox.config["process"]["args"], "--help"])
    assert help_.returncode == 0, help_.stderr
    assert "Usage: trainer controller [OPTIONS]" in help_.stdout
    assert "--kubeconfig" in help_.stdout and "--feature-gates" in help_.stdout


LOAD_EVERY_LIBRARY = """
import ctypes, json, pathlib
failed = {}
for path in sorted(pathlib.Path("/opt/trainer").rglob("*.so*")):
    if path.is_file():
        try:
            ctypes.CDLL(str(path))
        except OSError as exc:
            failed[str(path)] = str(exc)
print(json.dumps(failed))
"""


def test_every_shared_library_in_opt_trainer_loads(sandbox: Sandbox) -> None:
    """The wheels' compiled modules find every system library they link (manylinux wheels
    may link libstdc++, which Debian's essential set lacks)."""
    result = sandbox.run(["python", "-c", LOAD_EVERY_LIBRARY])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {}


PROBE = """
import json, os, sys, trainer
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
       "trainer": trainer.__file__, "executable": sys.executable,
       "dont_write_bytecode": sys.flags.dont_write_bytecode, "cwd": os.getcwd()}
for path in ("/opt/trainer/x", "/x", "/tmp/x"):
    try:
        open(path, "w").close()
        out[path] = "written"
    except OSError as exc:
        out[path] = exc.strerror
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
out["CapEff"] = status["CapEff"].strip()
out["NoNewPrivs"] = status["NoNewPrivs"].strip()
print(json.dumps(out))
"""


def test_runs_as_65532_on_a_read_only_root_without_capabilities(sandbox: Sandbox) -> None:
    result = sandbox.run(["python", "-c", PROBE])
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert (seen["uid"], seen["gid"], seen["groups"]) == (USER, USER, [])
    assert seen["trainer"] == "/opt/trainer/lib/python3.11/site-packages/trainer/__init__.py"
    assert seen["executable"] == "/opt/trainer/bin/python"
    assert seen["dont_write_bytecode"] == 1 and seen["cwd"] == "/"
    assert seen["/opt/trainer/x"] == seen["/x"] == "Read-only file system"
    assert seen["/tmp/x"] == "written"
    assert seen["CapEff"] == "0000000000000000" and seen["NoNewPrivs"] == "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[Path]:
    """``trainer apiserver`` from this checkout, on the host's loopback; its kubeconfig."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli.main", "apiserver", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("kubeconfig written"):
                break
        else:
            raise AssertionError("trainer apiserver exited before serving")
        yield kubeconfig
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def in_cluster_files(kubeconfig: Path, directory: Path) -> dict[str, str]:
    """What a kubelet gives the controller's pod: the service account's token, the cluster CA
    and namespace in a directory, the API server's address in the environment."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = kubectl(kubeconfig, "-n", NAMESPACE, "create", "token", deployment()["sa"]).strip()
    directory.mkdir(mode=0o755)
    (directory / "token").write_text(token)
    (directory / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    (directory / "namespace").write_text(NAMESPACE)
    for path in directory.iterdir():
        path.chmod(0o644)
    host, _, port = cluster["server"].removeprefix("https://").rpartition(":")
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def deployment() -> dict[str, Any]:
    objects = install_objects(Values())
    deploy = next(o for o in objects if o["kind"] == "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    container = pod["containers"][0]
    config_map = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"]["name"] == pod["volumes"][0]["configMap"]["name"]
    )
    return {
        "objects": objects,
        "sa": pod["serviceAccountName"],
        "args": container["args"],
        "env": container["env"],
        "config_dir": container["volumeMounts"][0]["mountPath"],
        "config": config_map["data"],
    }


def wait_for(check: Any, what: str, proc: subprocess.Popen[str], log: Path, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the controller exited {proc.returncode}:\n{log.read_text()}")
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout} s; the controller's log:\n{log.read_text()}")


TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: from-the-image, namespace: default}
spec:
  runtimeRef: {name: torch-distributed}
"""


def test_the_controller_runs_against_the_local_plane(
    sandbox: Sandbox, apiserver: Path, tmp_path: Path
) -> None:
    install = deployment()
    # The install without its webhook configurations (the API server could not call the
    # webhook Service: there is no cluster network), and the runtime the TrainJob names.
    objects = [o for o in install["objects"] if o["kind"] not in WEBHOOK_KINDS]
    kubectl(apiserver, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))
    kubectl(
        apiserver, "apply", "--server-side", "-f", str(ROOT / "runtimes/torch-distributed.yaml")
    )

    files = sandbox.scratch("controller")
    secrets = files / "serviceaccount"
    env = in_cluster_files(apiserver, secrets)
    for variable in install["env"]:  # POD_NAMESPACE, from the pod's namespace
        assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        env[variable["name"]] = NAMESPACE
    # The shipped configuration, on ports of its own: the sandbox shares the host's network.
    config = yaml.safe_load(install["config"]["controller_manager_config.yaml"])
    health = free_port()
    config["webhook"].update({"port": free_port(), "host": "127.0.0.1"})
    config["metrics"]["bindAddress"] = f"127.0.0.1:{free_port()}"
    config["health"]["healthProbeBindAddress"] = f"127.0.0.1:{health}"
    config_dir = files / "config"
    config_dir.mkdir(mode=0o755)
    (config_dir / "controller_manager_config.yaml").write_text(yaml.safe_dump(config))
    (config_dir / "controller_manager_config.yaml").chmod(0o644)
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    sandbox.mountpoint("/run/secrets/kubernetes.io/serviceaccount")  # /var/run -> /run
    sandbox.mountpoint(install["config_dir"])
    mounts = [
        {"destination": install["config_dir"], "type": "bind", "source": str(config_dir)},
        {"destination": token_dir, "type": "bind", "source": str(secrets)},
    ]
    for mount in mounts:
        mount["options"] = ["bind", "ro", "nosuid", "nodev"]

    pod = "kubeflow-trainer-controller-manager-7d9f8-abcde"
    name = "controller"
    log = tmp_path / "controller.log"
    argv = sandbox.argv(
        name,
        [*sandbox.config["process"]["args"], *install["args"]],
        env=env,
        mounts=mounts,
        hostname=pod,
    )
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{health}/readyz"
        wait_for(
            lambda: urllib.request.urlopen(url, timeout=2).status == 200,
            "ready",
            proc,
            log,
            90,
        )
        # The container's process, seen from the host: USER, not root.
        pid = sandbox.state_of(name)["pid"]
        status_text = Path(f"/proc/{pid}/status").read_text()
        status = dict(line.split(":", 1) for line in status_text.splitlines())
        assert status["Uid"].split()[:2] == [str(USER)] * 2
        # It leads (the Lease holder is the pod's hostname), and has written its webhook
        # certificate Secret.
        lease = json.loads(
            kubectl(
                apiserver, "-n", NAMESPACE, "get", "lease", "trainer.kubeflow.org", "-o", "json"
            )
        )
        assert lease["spec"]["holderIdentity"].startswith(pod)
        certificate = config["certManagement"]["webhookSecretName"]
        kubectl(apiserver, "-n", NAMESPACE, "get", "secret", certificate)
        # It reconciles: a TrainJob gets its JobSet.
        kubectl(apiserver, "apply", "-f", "-", stdin=TRAINJOB)
        jobset = wait_for(
            lambda: json.loads(
                kubectl(apiserver, "-n", "default", "get", "jobset", "from-the-image", "-o", "json")
            ),
            "a JobSet for the TrainJob",
            proc,
            log,
            60,
        )
        owner = jobset["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == (
            "TrainJob",
            "from-the-image",
            True,
        )
        # SIGTERM, as the kubelet stops a pod: the controller (PID 1 of its sandbox) exits 0.
        subprocess.run([*sandbox.prefix(), *sandbox.crun(), "kill", name, "TERM"], check=True)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run(
            [*sandbox.prefix(), *sandbox.crun(), "delete", "--force", name],
            capture_output=True,
            check=False,
        )
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(line["msg"] == "started leading" for line in lines)
