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

#: The work units that take longest, longest first (summed test durations of a four-worker
#: run, ``--durations=0``): under make test's workers they are handed out first, so that none
#: of them starts last and keeps one worker busy after the others are done. A unit of several
#: modules (``_SHARED_UNITS``) starts where its first module stands here.
_SLOW_FIRST = (
    "test_deployments_e2e.py",  # with test_packaging: the Prefect server's unit, ~390 s
    "test_packaging.py",
    "test_prefect.py",  # the test harness's unit (six modules), ~255 s
    "test_span.py",
    "test_false_complete_routes.py",
    "test_user_43.py",
    "test_user_35.py",
    "test_user_44.py",
    "test_scenarios_35.py",
    "test_supervisors.py",
    "test_seeds_35.py",
    "test_false_complete.py",
    "test_fuzz.py",
    "test_jsonl_rewrite.py",
    "test_serve.py",
    "test_see_the_end.py",
    "test_run_binding.py",
    "test_cli_output.py",
    "test_store.py",
    "test_state.py",
    "test_schedule.py",
    "test_supervisors_cli.py",
    "test_forge.py",
    "test_config_cli.py",
    "test_signals.py",
    "test_user_ml6.py",
    "test_serve_split.py",
    "test_fuzz_span.py",
    "test_bounded.py",
    "test_adversary_507217.py",
    "test_ranks_named.py",
    "test_init.py",
    "test_bench_fleet.py",
)


#: Modules that share a session fixture slow to start: under make test's ``--dist loadfile``
#: each group is one work unit (one worker runs its modules, one after the other), so that the
#: fixture starts once, not once on each worker that happens to get one of them. A session
#: fixture is a worker's: a real Prefect server (tests/prefect_server.py, ~50 s to start on
#: this loaded machine) and the Prefect test harness (``prefect_harness``, 15-45 s).
_SHARED_UNITS = {
    "test_deployments_e2e.py": "prefect_server",
    "test_packaging.py": "prefect_server",
    **dict.fromkeys(
        (
            "test_prefect.py",
            "test_span.py",
            "test_blocks_server.py",
            "test_readme.py",
            "test_secrets.py",
            "test_notify.py",
        ),
        "prefect_harness",
    ),
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    # pytest-xdist reorders the work units by their number of tests unless told not to: that
    # handed the Prefect server's unit (8 slow tests, ~390 s) out near the end of the run.
    config.option.loadscopereorder = False

    class _SharedFixtureScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)  # the module's path
            return _SHARED_UNITS.get(scope.rpartition("/")[2], scope)

    return _SharedFixtureScheduling(config, log)


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
    test's pytest-xdist workers, a session is a worker: the modules that ask for it are one
    work unit, ``_SHARED_UNITS``, so that one worker starts it.)"""
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


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory):
    """A loopback Slurm (tests/supervisors.py) for the test module that asks for it, skipped
    with the reason where Slurm is not installed."""
    from tests.supervisors import slurm_cluster, slurm_installed

    why = slurm_installed()
    if why:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("slurm")
    root.chmod(0o755)
    with slurm_cluster(root) as cluster:
        yield cluster
