"""Shared fixtures. Prefect is quiet and local in every test process."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import pytest

from sensors import LocalHost
from sensors._base.probe import split_sections
from tests.sshd import ssh_spec, sshd_private, sshd_server  # noqa: F401  (shared fixtures)

#: The modules that take a minute or more (a real Prefect server, a wheel installed into a
#: fresh venv, a fuzz run, a bench, real timeouts): under make test's workers they are handed
#: out first, slowest first, so that none of them starts last and keeps one worker busy
#: after the others are done.
_SLOW_FIRST = (
    "test_deployments_e2e.py",
    "test_packaging.py",
    "test_false_complete_routes.py",
    "test_false_complete.py",
    "test_bounded.py",
    "test_bench_fleet.py",
    "test_fuzz.py",
    "test_jsonl_rewrite.py",
    "test_prefect.py",
    "test_signals.py",
    "test_span.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):  # not a pytest-xdist worker: the usual order
        return
    rank = {name: i for i, name in enumerate(_SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected


@pytest.fixture(params=["local", "ssh"])
def host(request):
    """The monitored host: every test that takes it runs locally and over SSH to a real
    sshd on 127.0.0.1, so the two hosts cannot drift apart."""
    if request.param == "local":
        yield LocalHost()
        return
    from sensors._config.stage import SSHSpec
    from sensors._hosts.ssh import SSHHost

    spec = request.getfixturevalue("ssh_spec")
    ssh = SSHHost(SSHSpec(**spec))
    yield ssh
    ssh.close()


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test API for the whole session (startup 15-45 s here), started only for
    the modules that ask for it. One, not one per module: a harness nested inside another
    leaves Prefect's events worker bound to the first, and no event arrives. (Under make
    test's pytest-xdist workers, a session is a worker: each worker that runs such a module
    starts one of its own.)"""
    import inspect

    from prefect.testing.utilities import prefect_test_harness

    # The timeout is a parameter since Prefect 3.1 (make test-compat runs the oldest).
    takes = "server_startup_timeout" in inspect.signature(prefect_test_harness).parameters
    with prefect_test_harness(**({"server_startup_timeout": 90} if takes else {})):
        yield


from tests.postgres import postgres_server, postgres_url  # noqa: E402, F401  (shared fixtures)
from tests.prefect_server import prefect_server  # noqa: E402, F401  (a shared fixture)


@pytest.fixture(autouse=True)
def _state_store_per_test(tmp_path_factory, monkeypatch):
    """Each test its own state store (the CLI and Prefect tasks keep one by default): no
    test restores another's memory, and nothing is written to ~/.local/state."""
    monkeypatch.setenv("CROSSCHECK_STATE", str(tmp_path_factory.mktemp("state") / "state.db"))


_NONCE = re.compile(rb"^N=([0-9a-f]+)$", re.MULTILINE)


@pytest.fixture
def answers(host) -> Iterator[list[dict[str, bytes]]]:
    """Each probe's answer on ``host``, in order: its sections by name, split as a check
    splits them (``host.run_script`` wrapped for the test)."""
    recorded: list[dict[str, bytes]] = []
    run_script = host.run_script

    def recording(script: bytes, *, timeout: float) -> bytes:
        out = run_script(script, timeout=timeout)
        nonce = _NONCE.search(script)
        assert nonce is not None, "a probe script sets its nonce"
        recorded.append(split_sections(out, nonce.group(1).decode()))
        return out

    host.run_script = recording
    yield recorded
    del host.run_script


@pytest.fixture
def hosts(tmp_path):
    """Two test hosts for a stage over several hosts: each an sshd on 127.0.0.1 in a mount
    namespace of its own, with its own fake GPUs (tests/test_span.py, ``_Host``)."""
    from tests.test_span import _Host, _needs_sshd_root

    _needs_sshd_root()
    made = []
    try:
        for k in range(2):
            made.append(_Host(tmp_path, k))
        yield made
    finally:
        for host in made:
            host.sshd.cleanup()
