"""What the local kubelet warns about: only what the user can act on, saying how
(docs/local-plane.md, "The network sandbox"). A pod's image is not pulled, which needs nothing
done while its command runs here: no warning, and a command this host lacks fails its
container with what to install. A sandbox without egress says how to give it one."""

from __future__ import annotations

import logging

import pytest

from tests.integration.test_kubelet import PY, Env, env, pod, status_of
from trainer.local.executor.sandbox import sandbox

__all__ = ["env"]  # the fixture, used by name


async def test_an_image_that_is_not_pulled_is_no_warning(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trainer.local.executor")
    await env.create(pod("quiet", [PY, "-c", "print('hi')"]), "pods")
    assert (await env.finished("quiet"))["status"]["phase"] == "Succeeded"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    assert any("is not pulled" in r.getMessage() for r in caplog.records)  # at debug


async def test_a_command_this_host_lacks_says_what_to_install(env: Env) -> None:
    await env.create(pod("missing", ["no-such-tool-here", "--help"]), "pods")
    p = await env.finished("missing")
    message = status_of(p)["state"]["terminated"]["message"]
    assert "no-such-tool-here" in message and "install it here" in message


def test_no_egress_says_how_to_get_it() -> None:
    line = sandbox.no_egress(sandbox.PASTA_MISSING)
    assert "apt-get install passt" in line and "make install" in line
    assert "fix what pasta reports" in sandbox.no_egress("pasta failed: no /dev/net/tun")
