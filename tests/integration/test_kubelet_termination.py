"""Termination messages as ``kubectl get pod -o yaml`` shows them: the file at
``terminationMessagePath`` (the local kubelet maps the path to a file of the pod's own
directory), at most 4096 bytes, else with ``FallbackToLogsOnError`` the log's last 80 lines
(at most 2048 bytes) of a failed run; ``lastState`` after an in-place restart
(docs/local-plane.md, "Termination messages")."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_kubelet import PY, Env, env, pod, status_of

__all__ = ["env"]  # the fixture, used by name


async def test_a_message_written_to_the_default_path_is_the_terminated_message(
    env: Env,
) -> None:
    # A shell command that names the path writes the pod's own file; a program reads its host
    # path from the environment. Both are kept on success too, as the kubelet keeps them.
    script = "printf 'saved model to /out\\n' > /dev/termination-log; echo done"
    await env.create(pod("msg", ["/bin/sh", "-c", script]), "pods")
    p = await env.finished("msg")
    terminated = status_of(p)["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["reason"] == "Completed"
    assert terminated["message"] == "saved model to /out\n"
    assert terminated["containerID"] == status_of(p)["containerID"]
    assert terminated["startedAt"] <= terminated["finishedAt"]
    assert not Path("/dev/termination-log").exists()  # this host's /dev is untouched

    code = (
        "import os, sys; "
        "open(os.environ['TRAINER_LOCAL_TERMINATION_LOG'], 'w').write('x' * 5000); sys.exit(4)"
    )
    await env.create(
        pod(
            "big",
            [PY, "-c", code],
            container={"terminationMessagePolicy": "FallbackToLogsOnError"},
        ),
        "pods",
    )
    p = await env.finished("big")
    terminated = status_of(p)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (4, "Error")
    assert terminated["message"] == "x" * 4096  # the file wins over the logs, cut at 4096


async def test_a_custom_path_inside_a_volume_and_the_log_fallback(env: Env) -> None:
    script = "echo 'bad input: shard 3' > /tmp/why; exit 1"
    await env.create(
        pod(
            "custom",
            ["/bin/sh", "-c", script],
            container={
                "terminationMessagePath": "/tmp/why",
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
            },
            volumes=[{"name": "tmp", "emptyDir": {}}],
        ),
        "pods",
    )
    p = await env.finished("custom")
    assert status_of(p)["state"]["terminated"]["message"] == "bad input: shard 3\n"

    # No file written: with FallbackToLogsOnError the last 80 lines, cut to 2048 bytes.
    code = "import sys\nfor i in range(100): print(f'line {i:03d}')\nsys.exit(2)"
    await env.create(
        pod(
            "tail",
            [PY, "-c", code],
            container={"terminationMessagePolicy": "FallbackToLogsOnError"},
        ),
        "pods",
    )
    p = await env.finished("tail")
    message = status_of(p)["state"]["terminated"]["message"]
    assert message == "".join(f"line {i:03d}\n" for i in range(20, 100))
    # With the default policy (File) a failure without a file has no message.
    await env.create(pod("quiet", [PY, "-c", "print('oops'); raise SystemExit(3)"]), "pods")
    p = await env.finished("quiet")
    assert "message" not in status_of(p)["state"]["terminated"]


async def test_last_state_keeps_the_failed_runs_message_after_an_in_place_restart(
    env: Env, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-once"
    code = (
        "import os, sys\n"
        f"m = {str(marker)!r}\n"
        "if os.path.exists(m): print('second run'); sys.exit(0)\n"
        "open(m, 'w').close(); print('Traceback: no such file train.py'); sys.exit(2)\n"
    )
    await env.create(
        pod(
            "again",
            [PY, "-c", code],
            restartPolicy="OnFailure",
            container={"terminationMessagePolicy": "FallbackToLogsOnError"},
        ),
        "pods",
    )
    p = await env.finished("again")
    main = status_of(p)
    assert p["status"]["phase"] == "Succeeded"
    assert main["restartCount"] == 1
    last = main["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (2, "Error")
    assert last["message"] == "Traceback: no such file train.py\n"
    assert last["containerID"] and last["containerID"] != main["containerID"]
    now = main["state"]["terminated"]
    assert (now["exitCode"], now["reason"]) == (0, "Completed")
    assert "message" not in now  # a new, empty file and a success: no message
