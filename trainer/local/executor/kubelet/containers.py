"""One container of a locally run pod: its process, started once per attempt, and its restarts
under the pod's ``restartPolicy``.

A container's process runs in its own process group with the environment, argv and working
directory :mod:`~trainer.local.executor.kubelet.policy.podenv` planned; stdout and stderr go,
merged, to its :class:`~trainer.local.executor.kubelet.logsink.LogSink`. When the main process
exits, what is left of its group is killed (as when a container's PID 1 exits), and the exit becomes
the container's ``terminated`` state. A container with memory or CPU limits runs in a cgroup of its
own where this host allows one (:mod:`~trainer.local.executor.sandbox.cgroups`): its process enters
it before the command runs, and the cgroup is removed (whatever is left in it killed) once the
process has exited; a process the kernel killed there for its memory makes the state ``OOMKilled``.
A container that cannot run on this host (no command, an executable that is not here) fails
the pod at once: no retry makes it appear. A container killed for failing its liveness probe
(:mod:`~trainer.local.executor.kubelet.probes`) restarts unless the pod's restartPolicy is Never,
whatever its exit code, as the kubelet restarts it.

The decisions are pure functions (:func:`should_restart`, :func:`terminated_state`) so that
they read, and are tested, apart from the processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from typing import Any

from trainer.kube.events import NORMAL, WARNING
from trainer.local.executor.kubelet.logsink import OutputPipe
from trainer.local.executor.kubelet.podhost import (
    BACKOFF_CAP,
    BACKOFF_START,
    GRACE_CAP,
    Container,
    RunningPod,
    container_entry,
    host_env_path,
    killpg,
)
from trainer.local.executor.kubelet.policy import incluster, podenv, termination
from trainer.local.executor.kubelet.policy.volumes import pod_dir
from trainer.local.executor.kubelet.probes import restarts_after_kill, run_probes
from trainer.local.executor.policy import sshports
from trainer.local.executor.policy.podfields import LOOPBACK, pod_hostname
from trainer.local.executor.sandbox import cgroups, uts
from trainer.local.executor.sandbox.ssh import host_names
from trainer.machinery.times import now

log = logging.getLogger(__name__)

BACKOFF_RESET_AFTER = 60.0
"""A container that ran this long restarts with the initial back-off again."""
CANNOT_RUN_EXIT = 127


def should_restart(
    *, code: int, policy: str, init: bool, sidecar: bool, killed_by_probe: bool = False
) -> bool:
    """Whether a container that exited with ``code`` is started again: a sidecar always; one
    the kubelet killed for its liveness probe unless the policy is Never, whatever its exit
    code; an init container after a failure unless the policy is Never; a regular container
    under Always, or OnFailure after a failure."""
    if sidecar:
        return True
    if killed_by_probe:
        return restarts_after_kill(policy, sidecar=sidecar)
    if init:
        return code != 0 and policy != "Never"
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def exited_for_good(c: Container, policy: str) -> bool:
    """Whether the regular container ``c`` has exited and will not be started again under the
    pod's restart ``policy`` (:func:`should_restart`)."""
    terminated = c.state.get("terminated")
    if terminated is None or c.proc is not None or c.stop_requested:
        return False
    return not should_restart(
        code=int(terminated.get("exitCode") or 0),
        policy=policy,
        init=c.init,
        sidecar=c.sidecar,
        killed_by_probe=c.killed_by_probe,
    )


def terminated_state(
    returncode: int,
    *,
    started_at: str,
    finished_at: str,
    container_id: str,
    message: str = "",
    oom_killed: bool = False,
) -> dict[str, Any]:
    """The ``terminated`` state of a process that exited with ``returncode`` (negative: killed
    by that signal, reported as exit code 128+N). ``message``: its termination message
    (:func:`trainer.local.executor.kubelet.policy.termination.message`), left out when empty, as the
    kubelet leaves it out. ``oom_killed``: the kernel killed a
    process of the container for going over its memory limit during the run; the reason is then
    ``OOMKilled`` whatever the exit code (137 when the killed process was the main one), as the
    container runtime reports it."""
    code = returncode if returncode >= 0 else 128 - returncode
    reason = "OOMKilled" if oom_killed else "Completed" if code == 0 else "Error"
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
        "containerID": container_id,
    }
    if returncode < 0:
        terminated["signal"] = -returncode
    if message:
        terminated["message"] = message
    return terminated


async def run_container(pod: RunningPod, c: Container) -> bool:
    """Run a container until it is done under the restart policy; True when it succeeded."""
    backoff = BACKOFF_START
    loop = asyncio.get_running_loop()
    while True:
        if pod.terminating.is_set() or c.stop_requested:
            return c.succeeded
        began = loop.time()
        code = await exec_once(pod, c)
        if code is None:  # cannot run on this host: no retry makes it appear
            pod.failed = True
            return False
        if pod.terminating.is_set() or c.stop_requested:
            return code == 0
        if not should_restart(
            code=code,
            policy=pod.policy,
            init=c.init,
            sidecar=c.sidecar,
            killed_by_probe=c.killed_by_probe,
        ):
            return code == 0
        if loop.time() - began > BACKOFF_RESET_AFTER:
            backoff = BACKOFF_START
        c.last_state = c.state
        c.restart_count += 1
        c.state = {
            "waiting": {
                "reason": "CrashLoopBackOff",
                "message": f"back-off {backoff:g}s restarting failed container={c.name} "
                f"pod={pod.name}_{pod.namespace}({pod.uid})",
            }
        }
        pod.event(
            WARNING,
            "BackOff",
            f"Back-off restarting failed container {c.name} in pod {pod.name}",
        )
        await pod.sync_status()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pod.terminating.wait(), backoff)
        if pod.terminating.is_set():
            return False
        backoff = min(backoff * 2, BACKOFF_CAP)


async def cannot_run(pod: RunningPod, c: Container, message: str) -> None:
    """Report a container that cannot be started here (exit code 127, the message also in its
    log and an Event)."""
    log.warning("pod %s: container %s: %s", pod.key, c.name, message)
    stamp = now()
    c.state = {
        "terminated": {
            "exitCode": CANNOT_RUN_EXIT,
            "reason": "ContainerCannotRun",
            "message": message,
            "startedAt": stamp,
            "finishedAt": stamp,
        }
    }
    c.ready = False
    pod.event(WARNING, "Failed", f"Error: {message}")
    sink = pod.sinks[c.name]
    await sink.line(f"[local kubelet] {message}")
    await sink.flush()
    await pod.sync_status()


def _mpi_peers(pod: RunningPod) -> list[tuple[str, list[str]]]:
    """For a pod that runs sshd (an MPI node pod), the other pods of its JobSet by their
    ``<host>.<subdomain>`` DNS names at 127.0.0.1, as the JobSet's headless Service makes
    them resolve on a cluster: MPICH's ``hydra_pmi_proxy`` connects back to the launcher by
    that name (docs/local-plane.md, "MPICH"). Only node pods: a launcher's MPI (Hydra, PRRTE)
    takes a host at a loopback address for itself and would start its ranks there instead of
    over ssh. The short hostnames stay unresolvable, as on a cluster."""
    spec = pod.pod.get("spec") or {}
    subdomain = str(spec.get("subdomain") or "")
    parsed = sshports.parse(pod.pod)
    if not subdomain or parsed is None:
        return []
    if not sshports.runs_sshd(pod.pod):
        return []
    own = pod_hostname(pod.pod)
    names = [
        name
        for peer in sorted(parsed[1])
        if peer != own
        for name in host_names(peer, subdomain, pod.namespace)[1:]
    ]
    return [(LOOPBACK, names)] if names else []


def reverse_name(names: list[str], namespace: str, *, subdomain: bool) -> str:
    """The name the pods' address resolves back to, as cluster DNS answers for a pod's IP:
    ``<hostname>.<subdomain>.<namespace>.svc.cluster.local`` for a pod with a subdomain (the
    last of ``names``), else the pod's A record ``127-0-0-1.<namespace>.pod.cluster.local``.
    The pods of a sandbox share one address, so from a pod it names the pod itself, whichever
    peer connected (docs/local-plane.md, "The network sandbox")."""
    if subdomain:
        return names[-1]
    return f"{LOOPBACK.replace('.', '-')}.{namespace}.pod.cluster.local"


async def _hosts_file(pod: RunningPod) -> str | None:
    """The pod's ``/etc/hosts`` (this host's plus the pod's own names at 127.0.0.1, as the
    kubelet writes a pod's, and an MPI node pod's peers: :func:`_mpi_peers`), written into the
    pod's directory; None when it cannot be."""
    spec = pod.pod.get("spec") or {}
    subdomain = str(spec.get("subdomain") or "")
    names = host_names(pod_hostname(pod.pod), subdomain, pod.namespace)
    path = pod_dir(pod.host.state_dir, pod.pod) / "etc-hosts"
    peers = _mpi_peers(pod)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        uts.write_hosts(
            str(path),
            names,
            extra=peers,
            reverse=reverse_name(names, pod.namespace, subdomain=bool(subdomain)),
        )
    except OSError as exc:
        log.warning("pod %s: no hosts file of its own: %s", pod.key, exc)
        return None
    return str(path)


async def _make_cgroup(pod: RunningPod, c: Container) -> cgroups.ContainerCgroup | None:
    """The cgroup that holds the container's limits for one run; None when it has none, or
    when this host cannot hold them (said once, as a warning)."""
    limits = cgroups.limits_of(c.spec)
    if not limits.controllers():
        return None
    found = await asyncio.to_thread(cgroups.layout)
    unenforced = found.unenforced(limits)
    if unenforced:
        pod.host.warn_once("limits", f"{unenforced}; containers run without them")
    if not any(name in found.roots for name in limits.controllers()):
        return None
    try:
        return await asyncio.to_thread(cgroups.create, found, pod.uid, c.name, limits)
    except (OSError, ValueError) as exc:
        pod.host.warn_once(
            f"cgroup:{pod.uid}:{c.name}",
            f"pod {pod.key}: container {c.name} runs without its limits: {exc}",
        )
        return None


async def _remove_cgroup(pod: RunningPod, c: Container, cgroup: cgroups.ContainerCgroup) -> None:
    """Remove a run's cgroup once its process group is gone; one a process will not leave is
    left to the next kubelet start's sweep (:func:`cgroups.remove_stale`)."""
    try:
        removed = await asyncio.shield(asyncio.to_thread(cgroup.remove))
    except OSError as exc:
        log.warning("pod %s: container %s: cgroup not removed: %s", pod.key, c.name, exc)
        return
    if not removed:
        log.warning(
            "pod %s: container %s: a process stays in its cgroup %s", pod.key, c.name, cgroup.dirs
        )


async def exec_once(pod: RunningPod, c: Container) -> int | None:
    """Run the container's process once; its exit code (128+N for signal N), or None when it
    could not be started."""
    host = pod.host
    plan = c.plan
    assert plan is not None
    image = f"image {plan.image!r}" if plan.image else "no image"
    if not plan.argv:
        await cannot_run(
            pod,
            c,
            f"container {c.name!r} has neither command nor args: the local executor runs "
            f"the container's command on this host and cannot use the entrypoint of "
            f"{image}; set command",
        )
        return None
    env = plan.process_env(host.base_env)
    command = " ".join(plan.argv)
    exe = podenv.find_executable(plan.argv[0], plan.cwd, host_env_path(env))
    if exe is None:
        await cannot_run(
            pod,
            c,
            f'exec: "{plan.argv[0]}": executable file not found in $PATH (command: '
            f"{command}); the local executor runs commands with this host's tools, not "
            f"those of {image}: install it here or change the command",
        )
        return None
    message_file = termination.host_file(host.state_dir, pod.pod, c.name)
    try:
        await asyncio.to_thread(termination.prepare, message_file)
    except OSError as exc:
        log.warning("pod %s: container %s: no termination message file: %s", pod.key, c.name, exc)
    for mounted in plan.rewriter.mounts.values():
        if not os.path.exists(mounted) and host.owns(mounted):
            with contextlib.suppress(OSError):
                os.makedirs(mounted, exist_ok=True)
    if plan.cwd != str(host.workdir) and host.owns(plan.cwd):
        with contextlib.suppress(OSError):
            os.makedirs(plan.cwd, exist_ok=True)
    cgroup = await _make_cgroup(pod, c)
    executable, argv, keep, joins = await container_entry(
        pod,
        exe,
        plan.argv,
        hosts=await _hosts_file(pod),
        cgroups=cgroup.procs if cgroup else (),
        binds=incluster.bind_for(plan.rewriter.mounts),
    )
    output = OutputPipe()  # not PIPE: the exit is seen when the main process exits
    try:
        proc = await asyncio.create_subprocess_exec(
            argv[0],
            *argv[1:],
            executable=executable,
            cwd=plan.cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output.write_fd,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            pass_fds=keep,
        )
    except BaseException as exc:
        output.close()
        if cgroup is not None:
            await _remove_cgroup(pod, c, cgroup)
        if not isinstance(exc, OSError):
            raise
        await cannot_run(pod, c, f"cannot start {command!r} in {plan.cwd}: {exc.strerror or exc}")
        return None
    output.started()
    if cgroup is not None and not joins:
        # Started without the entry script (no namespaces here): moved in once started, so the
        # first moments of the process, before this write, run outside its limits.
        try:
            cgroup.join(proc.pid)
        except OSError as exc:
            log.warning("pod %s: container %s runs without its limits: %s", pod.key, c.name, exc)
    c.proc = proc
    c.killed_by_probe = False
    host.track_group(proc.pid)
    pod.event(NORMAL, "Started", f"Started container {c.name} (host process {proc.pid})")
    if pod.terminating.is_set() or c.stop_requested:
        killpg(proc.pid, signal.SIGTERM)
    started_at = now()
    c.container_id = f"local://{proc.pid}"
    c.state = {"running": {"startedAt": started_at}}
    has_startup = bool(c.spec.get("startupProbe"))
    c.started = not has_startup
    c.ready = c.started and not c.spec.get("readinessProbe")
    if c.started:
        c.started_event.set()
    if not c.init:
        pod.phase = "Running"
    loop = asyncio.get_running_loop()
    sink = pod.sinks[c.name]
    sink.new_run()
    reader = loop.create_task(output.read_into(sink))
    probed = has_startup or c.spec.get("readinessProbe") or c.spec.get("livenessProbe")
    probes = loop.create_task(run_probes(pod, c, loop.time())) if probed else None
    await pod.sync_status()
    returncode: int | None = None
    oom_killed = False
    try:
        returncode = await proc.wait()
    finally:
        killpg(proc.pid, signal.SIGKILL)  # what is left of the group dies with PID 1
        host.untrack_group(proc.pid)
        if probes is not None:
            probes.cancel()
        if cgroup is not None:
            oom_killed = returncode is not None and cgroup.oom_killed(returncode)
            await _remove_cgroup(pod, c, cgroup)
    try:
        await asyncio.wait_for(asyncio.shield(reader), GRACE_CAP)
    except TimeoutError:
        reader.cancel()
    output.close()
    c.proc = None
    finished_at = now()
    code = returncode if returncode >= 0 else 128 - returncode
    terminated = terminated_state(
        returncode,
        started_at=started_at,
        finished_at=finished_at,
        container_id=c.container_id,
        message=termination.message(
            c.spec,
            exit_code=code,
            file_text=await asyncio.to_thread(termination.read_file, message_file),
            log_tail=sink.termination_message(),
        ),
        oom_killed=oom_killed,
    )
    c.state = {"terminated": terminated}
    c.ready = False
    await sink.flush()
    await pod.sync_status()
    return int(terminated["exitCode"])
