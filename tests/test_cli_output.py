"""The installed ``crosscheck`` command in scripts, pipes and monitoring.

- A reader that goes away (``| head``) is a quiet exit that keeps the exit code: every command,
  every output path (JSON lines, tables, wait's lines, serve's lines, help and version).
- Output that is not a terminal is one record per line, whatever COLUMNS says.
- A missing part (the Prefect server; no Prefect API) is one line naming what to install or set.
- Without google-re2 the regexes run under ``regex``, each search bounded, and it says so.

Each runs the console script the venv installed, as a user's shell would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml

from sensors.testing import SimulatedJob

CROSSCHECK = str(Path(sys.executable).with_name("crosscheck"))


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "COLUMNS")},
        "CROSSCHECK_STATE": str(tmp_path / "state.db"),
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        **extra,
    }


def _closed_pipe(
    argv: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``argv`` with its standard output a pipe nobody reads any more (``| head`` after it
    exited): every write to it fails."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            argv, stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=timeout, check=False
        )
    finally:
        os.close(write)


def _log_stage(tmp_path: Path, name: str, lines: list[str], **policy: str) -> Path:
    log = tmp_path / f"{name}.log"
    log.write_text("".join(line + "\n" for line in lines))
    path = tmp_path / f"{name}.yaml"
    stage = {"stage": name, "host": "local", "log": {"path": str(log), "complete": "^Extraction complete"}}
    if policy:
        stage["policy"] = {k: int(v) if v.isdigit() else v for k, v in policy.items()}
    path.write_text(yaml.safe_dump(stage))
    return path


@pytest.fixture
def stages(tmp_path: Path) -> dict[str, Path]:
    """A finished stage (exit 0; settle 1: wait's first line is its last) and one still working
    (exit 1, never completes: wait stops at its first line, with "not yet")."""
    return {
        "done": _log_stage(tmp_path, "pipe-done", ["[9/10] working", "Extraction complete"], settle="1"),
        "working": _log_stage(tmp_path, "pipe-working", ["[1/10] working"], interval="300ms", timeout="60s"),
    }


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["status", "{done}", "--since", "1h"], 0),
        (["status", "{done}", "--since", "1h", "--json"], 0),
        (["status", "{done}", "{working}", "--since", "1h"], 1),
        (["status", "{working}", "--json"], 1),
        (["wait", "{done}", "--since", "1h"], 0),
        (["wait", "{done}", "--since", "1h", "--json"], 0),
        (["wait", "{working}", "--json"], 1),  # stops at its first line, not after the timeout
        (["wait", "{working}"], 1),
        (["history", "pipe-done"], 0),
        (["history", "pipe-done", "--json"], 0),
        (["--version"], 0),
        (["--help"], 0),
        (["status", "--help"], 0),
        (["status", "{tmp}/missing.yaml"], 2),  # the error line goes to stderr, still read
    ],
)
def test_a_closed_pipe_is_a_quiet_exit_that_keeps_the_exit_code(
    argv: list[str], code: int, stages: dict[str, Path], tmp_path: Path
) -> None:
    env = _env(tmp_path)
    if argv[0] == "history":  # something to show: two checks of the stage, stored
        subprocess.run(
            [CROSSCHECK, "status", str(stages["done"]), "--since", "1h"],
            env=env,
            capture_output=True,
            check=True,
        )
    args = [a.format(done=stages["done"], working=stages["working"], tmp=tmp_path) for a in argv]
    started = time.monotonic()
    out = _closed_pipe([CROSSCHECK, *args], env)
    assert out.returncode == code, out.stderr
    for noise in ("Traceback", "BrokenPipeError", "Exception ignored"):
        assert noise not in out.stderr, out.stderr
    assert time.monotonic() - started < 30


def test_status_piped_to_head_keeps_the_verdicts_exit_code(stages: dict[str, Path], tmp_path: Path) -> None:
    for stage, code in ((stages["done"], 0), (stages["working"], 1)):
        for json_flag in ("", "--json"):
            out = subprocess.run(
                ["bash", "-c", f'"{CROSSCHECK}" status "{stage}" --since 1h {json_flag} | head -c 20; exit "${{PIPESTATUS[0]}}"'],
                env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert out.returncode == code and "Traceback" not in out.stderr, out.stderr
            assert len(out.stdout) == 20


def test_serve_json_stops_when_its_reader_goes_away(stages: dict[str, Path], tmp_path: Path) -> None:
    directory = tmp_path / "serve"
    directory.mkdir()
    (directory / "w.yaml").write_text(stages["working"].read_text())
    out = _closed_pipe([CROSSCHECK, "serve", str(directory), "--json", "--rescan", "300ms"], _env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "stopped" in out.stderr


def test_piped_output_is_one_record_per_line(tmp_path: Path) -> None:
    """Not a terminal: nothing wrapped at 80 columns (COLUMNS is not the width of a pipe)."""
    long_line = "[3/10] " + " ".join(f"shard-{i:03d}.pt" for i in range(40))
    a = _log_stage(tmp_path, "wide-a", [long_line])
    b = _log_stage(tmp_path, "wide-b", [long_line])
    env = _env(tmp_path, COLUMNS="80")
    one = subprocess.run(
        [CROSSCHECK, "status", str(a), "--since", "1h"], env=env, capture_output=True, text=True, timeout=60
    )
    (row,) = [line for line in one.stdout.splitlines() if line.startswith("log ")]
    assert long_line[:150] in row and row.rstrip().endswith(" ago")  # the whole detail on its row
    both = subprocess.run(
        [CROSSCHECK, "status", str(a), str(b), "--since", "1h"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = both.stdout.splitlines()
    assert [line.split()[0] for line in rows[1:3]] == ["wide-a", "wide-b"] and len(rows) == 5, both.stdout
    assert all(long_line[:150] in line for line in rows[1:3])
    history = subprocess.run(
        [CROSSCHECK, "history", "wide-a"], env=env, capture_output=True, text=True, timeout=60
    )
    assert history.stdout and all(line[:4].isdigit() for line in history.stdout.splitlines())  # one a line
    assert max(map(len, one.stdout.splitlines())) > 200


def _shadow(tmp_path: Path, module: str) -> str:
    """A directory to put first on PYTHONPATH in which ``module`` cannot be imported: what a
    venv without it looks like to the command."""
    root = tmp_path / f"without-{module}"
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n"
    )
    return str(root)


@pytest.mark.timeout(120)
def test_demo_without_the_prefect_server_is_one_line_naming_what_to_install(tmp_path: Path) -> None:
    # prefect-client where prefect should be: no server (its asyncpg, first of all).
    out = subprocess.run(
        [CROSSCHECK, "demo", "--workdir", str(tmp_path / "demo")],
        env=_env(tmp_path, PYTHONPATH=_shadow(tmp_path, "asyncpg")),
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.splitlines()
    assert (
        line.startswith("crosscheck: ") and "Prefect server" in line and line.endswith("pip install prefect")
    )


def test_a_block_without_a_prefect_api_is_one_line_naming_what_to_set(tmp_path: Path) -> None:
    out = subprocess.run(
        [CROSSCHECK, "status", "block:extract"],
        env=_env(tmp_path, PYTHONPATH=_shadow(tmp_path, "asyncpg")),
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    (line,) = out.stderr.splitlines()
    assert "no Prefect API is set" in line and "set PREFECT_API_URL" in line and "pip install prefect" in line
    # A server that does not answer: one line, naming it.
    out = subprocess.run(
        [CROSSCHECK, "status", "block:extract"],
        env=_env(tmp_path, PREFECT_API_URL="http://127.0.0.1:9/api"),
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert "(on http://127.0.0.1:9/api)" in out.stderr


def test_version_names_prefect_and_the_regex_engine(tmp_path: Path) -> None:
    from importlib.metadata import version

    out = subprocess.run(
        [CROSSCHECK, "--version"], env=_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert out.stdout.startswith(
        f"crosscheck {version('prefect-crosscheck')}, prefect {version('prefect')}, "
    )
    assert out.stdout.rstrip().endswith("regexes: re2 (linear time)")


def test_without_google_re2_a_catastrophic_pattern_stays_bounded(tmp_path: Path) -> None:
    """google-re2 not importable (no wheel here): the regex module runs every pattern, each
    search stopped after 0.1 s; --version and status --json say so; no warning per pattern."""
    env = _env(tmp_path, PYTHONPATH=_shadow(tmp_path, "re2"))
    version = subprocess.run([CROSSCHECK, "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert "regexes: regex (no google-re2 here: each search stopped after 0.1 s)" in version.stdout
    lines = ["start", *(["a" * 64 + "b"] * 200), "Extraction complete"]
    stage = _log_stage(tmp_path, "catastrophic", lines)
    data = yaml.safe_load(stage.read_text())
    data["log"]["error"] = "(a|aa)+$"  # exponential backtracking on each of those lines
    stage.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    out = subprocess.run(
        [CROSSCHECK, "status", str(stage), "--json", "--since", "1h", "--state", "none"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    doc = json.loads(out.stdout)
    assert doc["regex_engine"] == "regex" and doc["verdict"] == "complete" and out.returncode == 0
    assert took < 20, took  # one stopped search per pattern per minute, not 200 of them
    assert "Warning" not in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("was stopped after 0.1 s") == 1, out.stderr
    # With google-re2 the same stage costs nothing, and says so.
    fast = subprocess.run(
        [CROSSCHECK, "status", str(stage), "--json", "--since", "1h", "--state", "none"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert json.loads(fast.stdout)["regex_engine"] == "re2" and fast.stderr == ""


def test_a_simulated_job_piped_through_wait_json_and_head(tmp_path: Path) -> None:
    """`crosscheck wait STAGE --json | head -1` of a job still running: the first verdict, then
    a quiet stop at the next line (no waiting for the job), exit 1 (not yet)."""
    job = SimulatedJob(tmp_path, scenario="stall", total=6, step=0.01)
    job.start()
    try:
        stage = job.write_stage(tmp_path / "s.yaml", interval="300ms")
        out = subprocess.run(
            ["bash", "-c", f'"{CROSSCHECK}" wait "{stage}" --json | head -1; exit "${{PIPESTATUS[0]}}"'],
            env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        job.stop()
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["verdict"] in ("running", "stalled", "unknown")


# --------------------------------------------------------------------------- serve


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(host: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{host}:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _serving(argv: list[str], env: dict[str, str], until: Callable[[], bool], err: Path) -> None:
    """``crosscheck serve ARGV`` until ``until()`` holds (checked while it runs), then SIGTERM."""
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [CROSSCHECK, "serve", *argv], stdout=subprocess.DEVNULL, stderr=stderr, env=env
        )
    try:
        deadline = time.monotonic() + 30
        while not until():
            assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, err.read_text()


@pytest.mark.parametrize(
    ("host", "reachable", "unreachable"),
    [
        (None, "127.0.0.1", "127.0.0.2"),
        ("127.0.0.2", "127.0.0.2", "127.0.0.1"),
        ("::1", "[::1]", "127.0.0.1"),
        ("[::1]", "[::1]", "127.0.0.1"),  # as a URL writes it
    ],
)
def test_serve_metrics_listen_on_metrics_host(
    host: str | None, reachable: str, unreachable: str, tmp_path: Path
) -> None:
    """127.0.0.1 unless --metrics-host says otherwise (0.0.0.0 for a Prometheus elsewhere)."""
    directory = tmp_path / "serve"
    directory.mkdir()
    port = _free_port()
    argv = [str(directory), "--metrics-port", str(port), *(["--metrics-host", host] if host else [])]
    _serving(
        argv,
        _env(tmp_path),
        lambda: _answers(reachable, port) and not _answers(unreachable, port),
        tmp_path / "err.log",
    )


def test_serve_log_levels_and_paramiko_quiet_by_default(ssh_spec: dict, tmp_path: Path) -> None:
    log = tmp_path / "remote.log"
    log.write_text("[1/10] working\n")
    directory = tmp_path / "serve"
    directory.mkdir()
    stage = {"stage": "ssh-logs", "host": ssh_spec, "log": {"path": str(log), "complete": "^done"},
             "policy": {"interval": "300ms"}}  # fmt: skip
    (directory / "s.yaml").write_text(yaml.safe_dump(stage))
    seen: dict[str, str] = {}
    for name, flags in (
        ("default", []),
        ("verbose", ["-v"]),
        ("quiet", ["-q"]),
        ("error", ["--log-level", "error"]),
    ):
        env = _env(tmp_path, CROSSCHECK_STATE=str(tmp_path / f"{name}.db"))

        def stored(state: str = env["CROSSCHECK_STATE"]) -> bool:  # a verdict: the SSH connection was made
            # What `crosscheck history ssh-logs` prints, read here: a CLI process at every
            # look cost a second of startup each on this loaded machine.
            from sensors._store import StoreError, open_store

            try:
                with open_store(state, readonly=True) as store:
                    return bool(store.history("ssh-logs"))
            except StoreError:  # not made yet (StoreMissing), or busy: as the CLI, look again
                return False

        _serving([str(directory), "--rescan", "300ms", *flags], env, stored, tmp_path / f"{name}.log")
        seen[name] = (tmp_path / f"{name}.log").read_text()
    chatter = "Authentication (publickey) successful"
    assert "INFO watching" in seen["default"] and "ssh-logs: running" in seen["default"]
    assert chatter not in seen["default"] and "Connected (version" not in seen["default"]
    assert chatter in seen["verbose"] and " DEBUG " in seen["verbose"]
    assert " INFO " not in seen["quiet"] and chatter not in seen["quiet"]
    assert seen["error"] == ""


@pytest.mark.parametrize("command", ["status", "check"])
def test_a_host_that_drops_the_handshake_is_its_verdict_not_tracebacks(command: str, tmp_path: Path) -> None:
    """A server that accepts and closes at once (no SSH banner): paramiko logged each try as
    ERROR with its traceback, and with no logging configured Python printed them on stderr
    (126 lines for one status) around a verdict that already said why, in one line."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def drop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.close()

    dropper = threading.Thread(target=drop, daemon=True)
    dropper.start()
    (tmp_path / "known_hosts").write_text("")
    host = {"ssh": "127.0.0.1", "port": listener.getsockname()[1], "config": "/dev/null",
            "known_hosts": str(tmp_path / "known_hosts")}  # fmt: skip
    path = tmp_path / "dropped.yaml"
    path.write_text(
        yaml.safe_dump({"stage": "dropped", "host": host, "log": {"path": "/x.log", "complete": "^done"}})
    )
    try:
        out = subprocess.run(
            [CROSSCHECK, command, str(path), "--state", "none"],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=60,
            check=False,
        )
    finally:
        stop.set()
        dropper.join(5)
        listener.close()
    assert out.returncode == (1 if command == "status" else 3), out.stderr
    assert "SSH protocol banner" in out.stdout  # the verdict's reason
    assert out.stderr == ""


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_wait_that_times_out_says_so_on_stderr_in_either_format(
    json_flag: list[str], stages: dict[str, Path], tmp_path: Path
) -> None:
    """Exit 4 and one line on stderr, with --json too (its stdout stays JSON lines only): an ML
    engineer's trial found a --json wait's timeout silent, its last line a plain unknown."""
    out = subprocess.run(
        [CROSSCHECK, "wait", str(stages["working"]), "--timeout", "1s", *json_flag],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 4, (out.stdout, out.stderr)
    assert "crosscheck: timed out waiting for pipe-working" in out.stderr
    if json_flag:
        assert all(json.loads(line)["stage"] == "pipe-working" for line in out.stdout.splitlines())
