"""Issue 35's scenarios on the real CLI, with jobs started the way users start them.

Each scenario of the issue ("What a user meets today", both lists, and the false `failed`)
is a test here: ``crosscheck wait STAGE --json`` as a subprocess, a stage file written by
the test (interval 300 ms unless said), and a real job launched from a shell (``nohup job >
log 2>&1 &``, Python's ``logging``, ``print`` to a redirected stdout, setsid, tmux, a PID
namespace, crosscheck's own launch wrapper), locally and over the test sshd where a host
matters.

A must-complete test measures the seconds from the job's exit (seen by a pidfd or its
parent's wait) to the watch's ``complete`` line and asserts it came within 3 checks of the
exit; it prints ``exit->complete: S s, N checks`` (``pytest -s`` shows them). A
must-not-complete test asserts no check said ``complete``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

import sensors

PYTHON = sys.executable
# The CLI runs the sensors this test imported (PYTHONPATH decides which checkout).
ROOT = str(Path(sensors.__file__).resolve().parent.parent)
CLI = [PYTHON, "-m", "sensors"]
COMPLETE = "Extraction complete"

# The job: MODE LOG OUT STEPS AFTER POST --tag TAG. It writes STEPS outputs (one each 0.3 s)
# with a line each, its completion line, then AFTER (text after the line), POST seconds of
# post-processing, and exits 0. MODE: stdout (print, flushed: the shell redirects it), print
# (print unflushed: block-buffered, all of it at exit), logging (Python's logging to LOG,
# opened after its imports, as basicConfig does).
JOB = textwrap.dedent(
    """
    import atexit, logging, os, sys, time
    mode, log, out, steps, after, post = sys.argv[1:7]
    if mode == "logging":
        time.sleep(0.3)  # imports
        logging.basicConfig(filename=log, level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(message)s")
        say = logging.info
        warn = logging.warning
    else:
        flush = mode == "stdout"
        def say(text):
            print(text, flush=flush)
        def warn(text):
            print(text, file=sys.stderr, flush=flush)
    for i in range(int(steps)):
        time.sleep(0.3)
        with open(os.path.join(out, f"s{i}.npy"), "w") as f:
            f.write("x")
        say(f"[{i + 1}/{steps}] extracted shard {i}")
    say("Extraction complete: %s shards" % steps)
    def last_word(text, how):  # its last text, then the process ends (as fast as a C exit)
        how(text)
        logging.shutdown()
        os._exit(0)
    if after == "wandb":
        last_word("wandb: Synced run-7f3a: https://wandb.ai/team/proj/runs/7f3a", say)
    elif after == "warning":
        atexit.register(last_word, "UserWarning: resource_tracker: 1 leaked semaphore to clean up at shutdown", warn)
    elif after == "teardown":
        atexit.register(last_word, "Tearing down: process group destroyed", say)
    elif after == "postproc":
        say("building sample_lengths.json")
    time.sleep(float(post))
    # Held on while LOG.hold exists (at most 60 s): a test whose watch must first see the job
    # at work in its post-processing lets it end only once that check is back (under load a
    # watch's first check came after POST seconds, the job gone: the premise did not hold).
    hold, deadline = log + ".hold", time.time() + 60
    while os.path.exists(hold) and time.time() < deadline:
        time.sleep(0.02)
    """
)


# ----------------------------------------------------------------- helpers


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": ROOT, "CROSSCHECK_STATE": str(tmp / "state.db"), **extra}


def _stage_file(tmp: Path, doc: dict[str, Any], name: str = "stage.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _stage(tmp: Path, tag: str, *, steps: int = 4, host: Any = "local", **policy: Any) -> dict[str, Any]:
    return {
        "stage": "extract",
        "host": host,
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {"path": str(tmp / "job.log"), "complete": COMPLETE},
        "outputs": {"files": str(tmp / "out"), "pattern": "*.npy", "expected": steps},
        "policy": {"interval": "300ms", "exit_grace": "300ms", "timeout": "40s", **policy},
    }


def _job_argv(
    tmp: Path, tag: str, mode: str, *, steps: int = 4, after: str = "", post: float = 0.0
) -> list[str]:
    (tmp / "out").mkdir(exist_ok=True)
    job = tmp / "job.py"
    job.write_text(JOB)
    return [PYTHON, str(job), mode, str(tmp / "job.log"), str(tmp / "out"), str(steps), after or "-", str(post),
            "--tag", tag]  # fmt: skip


def _q(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _pid_of(tag: str, timeout: float = 10.0) -> int:
    """The job's Python process (found by its tag, as a person finds it with pgrep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0] == PYTHON.encode() and tag.encode() in argv:
                return int(entry.name)
        time.sleep(0.02)
    raise AssertionError(f"no process of {tag}")


class Exit:
    """When a process ended, seen by a pidfd (any process, not only this test's child)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.at: float | None = None
        self._fd = os.pidfd_open(pid)
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        select.select([self._fd], [], [])
        self.at = time.time()
        os.close(self._fd)

    def wait(self, timeout: float = 30.0) -> float:
        deadline = time.monotonic() + timeout
        while self.at is None:
            assert time.monotonic() < deadline, f"pid {self.pid} still runs"
            time.sleep(0.01)
        return self.at

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def _shell(cmd: str, tag: str, env: dict[str, str] | None = None) -> Exit:
    """Run ``cmd`` in a shell as a person types it (it puts the job in the background and the
    shell exits): the job is no child of this test."""
    subprocess.run(["sh", "-c", cmd], check=True, env=env, stdin=subprocess.DEVNULL)
    return Exit(_pid_of(tag))


class Watch:
    """``crosscheck wait STAGE --json ARGS``: each line as it comes, with when it came."""

    def __init__(
        self, stage: Path, tmp: Path, *args: str, timeout: str = "8s", env: dict | None = None
    ) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "wait", str(stage), "--json", "--timeout", timeout, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env or _env(tmp),
        )
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), json.loads(line)))

    def first(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.lines:
            assert self.proc.poll() is None or self._reader.is_alive(), self.stderr()
            assert time.monotonic() < deadline, "no check"
            time.sleep(0.01)
        return self.lines[0][1]

    def end(self, timeout: float = 60.0) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(10)
        return rc

    def stderr(self) -> str:
        return self.proc.stderr.read()[-2000:] if self.proc.stderr else ""

    def states(self) -> list[str]:
        return [obj["verdict"] for _, obj in self.lines]

    def story(self, n: int = 3) -> list[tuple[str, list[str]]]:
        return [(obj["verdict"], [r[:300] for r in obj["reasons"][:2]]) for _, obj in self.lines[-n:]]


def _checked_at(obj: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(obj["checked_at"]).timestamp()


def _completes(watch: Watch, exited_at: float, label: str = "") -> None:
    """The watch ends ``complete``, within 3 checks of the job's exit; the seconds printed."""
    rc = watch.end()
    assert watch.lines, watch.stderr()
    last = watch.lines[-1][1]
    if last["verdict"] != "complete":  # the evidence the verdict stood on, for a reader (pytest -s)
        print(f"\n{label}: last verdict: {json.dumps(last, indent=1)}")
    assert last["verdict"] == "complete" and rc == 0, (rc, watch.story())
    came = watch.lines[-1][0]
    after = [obj for _, obj in watch.lines if _checked_at(obj) > exited_at]
    print(
        f"\n{label or 'scenario'}: exit->complete: {came - exited_at:.2f} s, {len(after)} checks after the exit"
    )
    assert len(after) <= 3, (len(after), watch.story(5))


def _never_completes(watch: Watch) -> None:
    watch.end()
    assert watch.lines, watch.stderr()
    assert "complete" not in watch.states(), watch.story()


def _status(stage: Path, tmp: Path, *args: str) -> dict[str, Any]:
    """``crosscheck status STAGE --json``: the verdict with its readings' evidence."""
    done = subprocess.run(
        [*CLI, "status", str(stage), "--json", *args],
        capture_output=True,
        text=True,
        env=_env(tmp),
        timeout=60,
    )
    return json.loads(done.stdout)


def _host_doc(host: str, request: pytest.FixtureRequest) -> Any:
    return "local" if host == "local" else request.getfixturevalue("ssh_spec")


# ----------------------------------------------------------------- realistic launches, watched from the start


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_a_nohup_job_completes(tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    """``nohup job > log 2>&1 &``: the shell opens the log between its fork and the exec."""
    tag = f"nohup-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag, host=_host_doc(where, request)))
    watch = Watch(stage, tmp_path)
    watch.first()
    argv = _job_argv(tmp_path, tag, "stdout")
    job = _shell(f"nohup {_q(argv)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1 &", tag)
    _completes(watch, job.wait(), f"nohup/{where}")


#: How people start a job, each its own seam (who opens the log, when its lines reach it): the
#: job's mode (``_job_argv``) and the shell line that starts it ({argv}, {log}).
_LAUNCHES = {
    # Python's ``logging`` to a file it opens after its imports (basicConfig).
    "logging": ("logging", "{argv} > /dev/null 2>&1 &"),
    # ``print`` without flush to ``> log``: block-buffered, every line written at the exit.
    "print": ("print", "{argv} > {log} 2>&1 &"),
    # ``setsid``: a new session, no controlling terminal, stdin closed.
    "setsid": ("stdout", "setsid {argv} > {log} 2>&1 < /dev/null &"),
}


@pytest.mark.parametrize("launch", sorted(_LAUNCHES))
def test_a_job_started_as_people_start_jobs_completes(tmp_path: Path, launch: str) -> None:
    mode, line = _LAUNCHES[launch]
    tag = f"{launch}-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    watch = Watch(stage, tmp_path)
    watch.first()
    argv = _q(_job_argv(tmp_path, tag, mode))
    job = _shell(line.format(argv=argv, log=shlex.quote(str(tmp_path / "job.log"))), tag)
    _completes(watch, job.wait(), launch)


@pytest.mark.parametrize("since", [False, True], ids=["watched", "since"])
@pytest.mark.parametrize("after", ["wandb", "warning", "teardown"])
def test_text_after_the_completion_line_completes(tmp_path: Path, after: str, since: bool) -> None:
    """A `wandb: Synced` line, a warning at exit, a teardown message after the completion
    line; the watch saw the job from its start to its exit (and, ``since``, was told when
    the run began)."""
    tag = f"after-{after}-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    watch = Watch(stage, tmp_path, *(["--since", "5s"] if since else []))
    watch.first()
    argv = _job_argv(tmp_path, tag, "stdout", after=after)
    job = _shell(f"nohup {_q(argv)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1 &", tag)
    exited = job.wait()
    assert (tmp_path / "job.log").read_text().rstrip().rsplit("\n", 1)[-1].find(COMPLETE) < 0
    _completes(watch, exited, f"after-{after}{'/since' if since else ''}")


@pytest.mark.parametrize("how", ["nohup", "logging"])
def test_the_headline_incident_a_late_watch_during_post_processing_completes(
    tmp_path: Path, how: str
) -> None:
    """The log already says complete; the job post-processes (a line saying so), and the
    watch starts now: `running`, which is right. The job then exits 0 with every output."""
    tag = f"headline-{how}-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    if how == "nohup":
        argv = _job_argv(tmp_path, tag, "stdout", after="postproc", post=2.0)
        job = _shell(f"nohup {_q(argv)} > {shlex.quote(str(log))} 2>&1 &", tag)
    else:
        argv = _job_argv(tmp_path, tag, "logging", after="postproc", post=2.0)
        job = _shell(f"{_q(argv)} > /dev/null 2>&1 &", tag)
    _watched_late(stage, tmp_path, log, job, f"headline/{how}")


def _watched_late(stage: Path, tmp_path: Path, log: Path, job: Exit, what: str) -> None:
    """Watched first during the job's post-processing (its completion line in the log, text
    after it): ``running`` then, ``complete`` within 3 checks of its exit."""
    deadline = time.monotonic() + 20
    while b"building sample_lengths" not in (log.read_bytes() if log.exists() else b""):
        assert time.monotonic() < deadline and job.at is None
        time.sleep(0.05)
    hold = log.with_name(log.name + ".hold")
    hold.touch()  # the job post-processes until this watch's first check is back
    try:
        assert job.at is None, "the job ended before its post-processing was held"
        watch = Watch(stage, tmp_path)
        first = watch.first()
    finally:
        hold.unlink()
    assert first["verdict"] == "running", (first["verdict"], first["reasons"])
    _completes(watch, job.wait(), what)


def _since_arg(form: str, at: float) -> str:
    if form == "duration":
        return "2m"
    if form == "iso":
        return dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")
    return f"@{at:.3f}"


def test_since_as_an_iso_time_is_the_same_start_as_epoch_seconds() -> None:
    """``--since 2026-...Z`` and ``--since @EPOCH`` of one instant are one start as the CLI
    reads them (the same ``Since``): the real watch below runs the epoch form for both."""
    from sensors._cli.main import _since_arg as cli_since
    from sensors._run.run import Since

    at = 1796104800.123
    assert cli_since(_since_arg("iso", at)) == cli_since(_since_arg("epoch", at)) == Since(at=at)
    assert cli_since(_since_arg("iso", at).replace("Z", "+00:00")) == Since(at=at)


# A duration and a time are each their own way to the run's start (Since.resolve: the host's
# clock less the duration, or the time moved by the host's clock offset); the ISO spelling of a
# time is the table test above.
@pytest.mark.parametrize("form", ["duration", "epoch"])
def test_since_in_each_form_completes(tmp_path: Path, form: str) -> None:
    """``--since 2m``, ``--since @EPOCH``: the run began after it; a log an earlier run left (a
    completion line in it) is set aside by the given start."""
    tag = f"since-{form}-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    at = time.time() - 1.0
    watch = Watch(stage, tmp_path, "--since", _since_arg(form, at))
    watch.first()
    argv = _job_argv(tmp_path, tag, "stdout")
    job = _shell(f"nohup {_q(argv)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1 &", tag)
    _completes(watch, job.wait(), f"since-{form}")


LAUNCH = textwrap.dedent(
    """
    import json, sys
    import sensors.flows as flows
    from sensors import load_stage

    class _Quiet:  # launch_stage's Prefect run logger and artifact: no Prefect server here
        def info(self, *a, **k):
            pass

    flows.get_run_logger = lambda: _Quiet()
    flows.create_table_artifact = lambda **k: None
    record = flows.launch_stage.fn(load_stage(sys.argv[1]), state=sys.argv[2])
    print(json.dumps({"pid": record["pid"]}))
    """
)


def test_a_job_launched_through_crosscheck_completes(tmp_path: Path) -> None:
    """``launch_stage`` (the stage's ``launch:`` section: mark, wrapper, exit record, the run
    kept in the state store), then ``crosscheck wait`` on the same store."""
    tag = f"launch-{uuid.uuid4().hex[:8]}"
    doc = _stage(tmp_path, tag)
    doc["launch"] = {
        # 2 s of work after its summary: still alive when looked for (a job over before the
        # launcher's own start, under load, left no process to find).
        "command": _job_argv(tmp_path, tag, "stdout", after="wandb", post=2.0),
        "log": str(tmp_path / "job.log"),
    }
    stage = _stage_file(tmp_path, doc)
    env = _env(tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg"))
    done = subprocess.run(
        [PYTHON, "-c", LAUNCH, str(stage), str(tmp_path / "state.db")],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    job = Exit(_pid_of(tag))
    watch = Watch(stage, tmp_path, env=env)
    _completes(watch, job.wait(), "launch")


def test_a_tmux_job_completes(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("no tmux")
    tag = f"tmux-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    watch = Watch(stage, tmp_path)
    watch.first()
    argv = _job_argv(tmp_path, tag, "stdout")
    session = f"cc-{tag}"
    sock = str(tmp_path / "tmux.sock")
    inner = f"{_q(argv)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1"
    try:
        job = _shell(f"tmux -S {shlex.quote(sock)} new-session -d -s {session} {shlex.quote(inner)}", tag)
        _completes(watch, job.wait(), "tmux")
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)


def test_a_job_in_a_pid_namespace_completes(tmp_path: Path) -> None:
    """The job in a PID namespace of its own (a container's): the probe sees it by its
    host PID."""
    if os.geteuid() != 0:
        pytest.skip("unshare --pid needs root")
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid fails here: {probe.stderr.decode().strip()}")
    tag = f"pidns-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    watch = Watch(stage, tmp_path)
    watch.first()
    argv = _job_argv(tmp_path, tag, "stdout")
    inner = f"{_q(argv)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1"
    job = _shell(
        f"unshare --pid --fork --mount-proc sh -c {shlex.quote(inner)} < /dev/null > /dev/null 2>&1 &", tag
    )
    _completes(watch, job.wait(), "pid-namespace")


# ----------------------------------------------------------------- fast jobs


SHORT = textwrap.dedent(
    """
    import os, sys
    out, log = sys.argv[1], sys.argv[2]
    with open(log, "a") as f:
        f.write("working\\n"); f.flush()
        for i in range(2):
            with open(os.path.join(out, f"s{i}.npy"), "w") as o:
                o.write("x")
        f.write("Extraction complete: 2 shards\\n")
    """
)


@pytest.fixture
def crowded_host():
    """About 1,000 sleeping processes on this host (a busy node's process table)."""
    crowd = subprocess.Popen(
        ["sh", "-c", "for i in $(seq 1000); do sleep 120 & done; wait"], start_new_session=True
    )
    deadline = time.monotonic() + 30
    while sum(1 for e in os.listdir("/proc") if e.isdigit()) < 1000 and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(crowd.pid, signal.SIGKILL)
        crowd.wait()


def test_short_jobs_that_end_inside_one_probe_complete(tmp_path: Path, crowded_host: None) -> None:
    """Short jobs on a host with ~1,000 processes, checked every 100 ms: a job writes its
    last output, its line and exits between a probe's clock read and its /proc scan. Seen
    before: 'modified_after_log' unknown for good, and a false 'failed: outputs short 0/2'
    from a count taken before the job's writes in the probe that found its line (rule 10
    now fails only on a count taken after a check that already found the job over)."""
    results = []
    for k in range(5):
        tmp = tmp_path / f"r{k}"
        tmp.mkdir()
        (tmp / "out").mkdir()
        tag = f"short-{uuid.uuid4().hex[:8]}"
        doc = _stage(tmp, tag, steps=2, interval="100ms", exit_grace="100ms", timeout="15s")
        stage = _stage_file(tmp, doc)
        watch = Watch(stage, tmp, timeout="15s")
        watch.first()
        time.sleep(0.15 + 0.03 * k)
        job = subprocess.Popen([PYTHON, "-c", SHORT, str(tmp / "out"), str(tmp / "job.log"), "--tag", tag])
        job.wait(20)
        exited = time.time()
        rc = watch.end()
        results.append((rc, watch.story(2)))
        if rc != 0:
            print(f"\nshort-{k}: last verdict: {json.dumps(watch.lines[-1][1], indent=1)}")
        else:
            _completes(watch, exited, f"short-{k}")
    assert all(rc == 0 for rc, _ in results), results


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_a_wait_started_just_before_a_fast_job_completes(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """``crosscheck wait`` begins; a job runs and is over before the first check. Over SSH
    this said "no run start is known": the first probe's round trip held the kept shell's
    start (root's ~/.bashrc, ~2 s here), the watch's start placed on the host's clock by
    that bound landed after the log's birth."""
    tag = f"fast-{uuid.uuid4().hex[:8]}"
    (tmp_path / "out").mkdir()
    stage = _stage_file(tmp_path, _stage(tmp_path, tag, steps=2, host=_host_doc(where, request)))
    watch = Watch(stage, tmp_path)
    time.sleep(0.05)  # the job is typed right after `wait`
    subprocess.run(
        [PYTHON, "-c", SHORT, str(tmp_path / "out"), str(tmp_path / "job.log"), "--tag", tag], check=True
    )
    exited = time.time()
    _completes(watch, exited, f"fast/{where}")


# ----------------------------------------------------------------- false complete routes


def _fake_date(folder: Path, ahead: int) -> None:
    """A ``date`` first on PATH whose clock is ``ahead`` seconds ahead (``+%s.%N`` and
    ``+%s``; any other use goes to the real one at that time)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "date"
    script.write_text(
        "#!/bin/sh\n"
        f"s=$(/bin/date +%s.%N); w=${{s%.*}}; f=${{s#*.}}; w=$((w + {ahead}))\n"
        'case "$1" in\n'
        '  +%s.%N) echo "$w.$f" ;;\n'
        '  +%s) echo "$w" ;;\n'
        '  *) exec /bin/date -d "@$w.$f" "$@" ;;\n'
        "esac\n"
    )
    script.chmod(0o755)


def test_two_hosts_a_node_60s_ahead_never_completes_on_run_1(tmp_path: Path) -> None:
    """A stage over two hosts; node 1's clock is 60 s ahead of this machine (its ``date``
    and its file server's times). Run 1 wrote its completion line on both nodes; run 2 is
    started with ``--since`` (a time on this machine), runs on node 0 only and finishes
    there. Node 1 never ran run 2: never complete."""
    from tests import skewfs
    from tests.sshd import SSHD, sshd_available

    if not sshd_available() or os.geteuid() != 0:
        pytest.skip("needs sshd and root (a mount namespace per test host)")
    why = skewfs.available()
    if why:
        pytest.skip(why)
    tag = f"span-{uuid.uuid4().hex[:8]}"
    logs0, backing1 = tmp_path / "n0", tmp_path / "n1-backing"
    logs0.mkdir()
    with skewfs.skewed_mount(backing1, tmp_path / "n1", 60.0) as logs1:
        _fake_date(tmp_path / "bin1", 60)
        hosts = [
            SSHD(),
            SSHD(wrap=["unshare", "-m", "--propagation", "private", "sh", "-c",
                       f'mount --bind {tmp_path / "bin1"} /usr/local/sbin && exec "$@"', "sh"]),
        ]  # fmt: skip
        try:
            for h in hosts:
                h.start()
            # Run 1, on both nodes, a few seconds ago: its lines there.
            (logs0 / "job.log").write_text("[1/1] extracted\nExtraction complete: run 1\n")
            (logs1 / "job.log").write_text("[1/1] extracted\nExtraction complete: run 1\n")
            time.sleep(1.0)
            since = time.time()
            doc = {
                "stage": "span",
                "hosts": [h.spec() for h in hosts],
                "process": {"match": f"--tag {tag} --node {{node}}( |$)"},
                "log": {"path": str(tmp_path / "n{node}" / "job.log"), "complete": COMPLETE},
                "policy": {"interval": "300ms", "exit_grace": "300ms", "timeout": "6s"},
            }
            stage = _stage_file(tmp_path, doc)
            watch = Watch(stage, tmp_path, "--since", f"@{since:.3f}", timeout="6s")
            watch.first()
            code = "import sys, time\nprint('[1/1] extracted', flush=True); time.sleep(1); print('Extraction complete: run 2', flush=True)"
            run2 = subprocess.Popen(
                [
                    "sh",
                    "-c",
                    f"exec {_q([PYTHON, '-c', code, '--tag', tag, '--node', '0'])} >> {logs0 / 'job.log'}",
                ]
            )
            run2.wait(20)
            _never_completes(watch)
            print(f"\nspan/skew: {watch.states()}")
        finally:
            for h in hosts:
                h.cleanup()


def test_a_since_inside_an_earlier_runs_life_never_completes_on_it(tmp_path: Path) -> None:
    """A relaunch while the old run is still finishing: ``--since`` is now, the old run's
    process began a second before; it writes its line and exits. The new run never starts."""
    tag = f"since-in-{uuid.uuid4().hex[:8]}"
    # The old run ends ~3 s into the watch; 5 s of watch leave 2 s (7 checks) after its exit.
    stage = _stage_file(tmp_path, _stage(tmp_path, tag, steps=12, timeout="5s"))
    argv = _job_argv(tmp_path, tag, "stdout", steps=12)
    old = _shell(f"nohup {_q(argv)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1 &", tag)
    time.sleep(1.0)
    watch = Watch(stage, tmp_path, "--since", _since_arg("iso", time.time()), timeout="5s")
    first = watch.first()
    # The watch saw the old run at work (the history; one that never saw it is another).
    assert first["signals"]["process"]["says"] == "working" and old.at is None, watch.story()
    exited = old.wait()
    _never_completes(watch)
    # ... and went on checking after the old run's exit (its line then stood alone).
    assert sum(1 for _, obj in watch.lines if _checked_at(obj) > exited) >= 3, watch.story(5)


RUN1 = "print('[2/2] extracted', flush=True); print('Extraction complete: run 1', flush=True)"
RUN2 = "import time; print('resuming from shard 1', flush=True); time.sleep(30)"  # killed before its line


@pytest.mark.parametrize("replay", range(3))
def test_a_rerun_30ms_after_a_completion_line_never_completes_on_the_old_line(
    tmp_path: Path, replay: int
) -> None:
    """Run 1 writes its completion line and exits; run 2 (same command line, same log) is
    started 30 ms after that line; the watch is given run 2's start with ``--since``. Run 2
    is killed before it writes its own line."""
    tag = f"rerun-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    doc = _stage(tmp_path, tag, timeout="4s")
    del doc["outputs"]
    stage = _stage_file(tmp_path, doc)
    run1 = _q([PYTHON, "-c", RUN1, "--tag", tag])
    run2 = _q([PYTHON, "-c", RUN2, "--tag", tag])
    script = (
        f"{run1} >> {shlex.quote(str(log))}; sleep 0.03; date +%s.%N > {shlex.quote(str(tmp_path / 'since'))}; "
        f"exec {run2} >> {shlex.quote(str(log))}"
    )
    shell = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "since").exists() or not (tmp_path / "since").read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        since = (tmp_path / "since").read_text().strip()
        watch = Watch(stage, tmp_path, "--since", f"@{since}", timeout="4s")
        time.sleep(2.0)
        os.killpg(shell.pid, signal.SIGKILL)
        _never_completes(watch)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


# ----------------------------------------------------------------- a false failed


JSONL = textwrap.dedent(
    """
    import json, sys, time
    out = sys.argv[1]
    print("starting", flush=True)
    with open(out, "w") as f:  # truncates the last run's records, and writes them again
        for i in range(6):
            time.sleep(0.4)
            f.write(json.dumps({"i": i, "text": "x" * 20}) + "\\n"); f.flush()
    print("Extraction complete: 6 records", flush=True)
    """
)


def test_a_rerun_that_truncates_its_jsonl_outputs_completes_at_6_of_6(tmp_path: Path) -> None:
    """Run 1 writes 6 JSONL records, watched to complete (the state store keeps what the
    watch knew). A re-run truncates the file and writes the same 6 again; a new ``wait``
    on the same store: never `failed`, complete at 6/6."""
    tag = f"jsonl-{uuid.uuid4().hex[:8]}"
    log, out = tmp_path / "job.log", tmp_path / "out.jsonl"
    doc = {**_stage(tmp_path, tag), "outputs": {"lines": str(out), "expected": 6}}
    stage = _stage_file(tmp_path, doc)
    argv = [PYTHON, "-c", JSONL, str(out), "--tag", tag]
    watch = Watch(stage, tmp_path)
    watch.first()
    run1 = _shell(f"nohup {_q(argv)} >> {shlex.quote(str(log))} 2>&1 &", tag)
    run1.wait()
    assert watch.end() == 0, watch.story()
    time.sleep(1.5)  # the re-run, clearly later
    # The re-run first (a new wait with no --since on a store that knows run 1 complete says
    # so at once, by design), then the watch, while it truncates and rewrites.
    run2 = _shell(f"nohup {_q(argv)} >> {shlex.quote(str(log))} 2>&1 &", tag)
    watch = Watch(stage, tmp_path)
    first = watch.first()
    assert run2.at is None and first["signals"]["process"]["says"] == "working", watch.story()
    exited = run2.wait()
    watch.end()
    assert "failed" not in watch.states(), watch.story()
    last = watch.lines[-1][1]
    assert last["signals"]["outputs"]["evidence"]["count"] == 6, last["signals"]["outputs"]
    _completes(watch, exited, "jsonl-rewrite")
