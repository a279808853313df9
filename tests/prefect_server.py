"""A real Prefect server (``prefect server start``) on 127.0.0.1 for the end-to-end tests, and
the helpers they start and stop its processes with. One for the session, started only by the
modules that ask for it (tests/test_deployments_e2e.py, tests/test_packaging.py): each test
uses work pools and stage names of its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

PREFECT = str(Path(sys.executable).with_name("prefect"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(what: str, check: Callable[[], Any], *, timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if result := check():
                return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def _stop(proc: subprocess.Popen[bytes], first: signal.Signals, *, grace: float) -> None:
    """Stop one process we started: ``first``, then SIGKILL to its session if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, first)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    # Flow-run subprocesses a worker started live in its process group; none may outlive it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _start(
    args: list[str], env: dict[str, str], log: Any, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """A process of this test, in its own session (stopped by :func:`_stop`), logging to ``log``."""
    return subprocess.Popen(
        args, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A real Prefect server for the session (its API, the env its clients and workers run with,
    its PREFECT_HOME): the e2e and the wheel's tests share it (about 10 s to start and stop)."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PREFECT_")  # nothing from the test harness or a user profile
    }
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_LOGGING_LEVEL="WARNING",
        PREFECT_CLOUD_ENABLE_ORCHESTRATION_TELEMETRY="false",
        # Workers poll every 15 s by default; the test waits for several polls.
        PREFECT_WORKER_QUERY_SECONDS="2",
        PREFECT_WORKER_PREFETCH_SECONDS="5",
    )
    log = open(home / "server.log", "wb")  # noqa: SIM115 - closed in the finally below
    proc = _start(
        [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui"], env, log
    )
    try:
        _wait_for(
            "the Prefect server",
            lambda: (
                (proc.poll() is None and httpx.get(f"{api}/health", timeout=5).status_code == 200)
                or _server_died(proc, home)
            ),
            timeout=150,
        )
        yield {"api": api, "env": env, "home": home, "proc": proc}
    finally:
        _stop(proc, signal.SIGTERM, grace=30)
        log.close()


def _server_died(proc: subprocess.Popen[bytes], home: Path) -> bool:
    if proc.poll() is not None:
        tail = (home / "server.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"prefect server exited with {proc.returncode}:\n{tail}")
    return False
