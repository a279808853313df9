"""No false complete, the routes issue 21's fix left open (an adversary's review of it).

Each test replays one class through real components — real processes, files, the real CLI
or ``Checker``, a real state store — and asserts the verdict the truth allows:

1. what one viewer learnt stands for another: "seen alive" restored from the store into a
   probe that cannot see the job (hidepid, another PID namespace) made "no match" an exit;
2. a followed verdict that is out of date: a holder's ``complete`` followed while a new run
   of the job is already at work (the holder looks at a finished stage ten times less often);
3. a file clock ahead of the host's by less than the tolerated second made an earlier run's
   log or output "written after the run's start";
4. a line begun before the run's first byte and ended after it (an earlier run's completion
   line cut before its newline, ended by the next run's first byte) counted as this run's;
5. another machine's memory of a ``host: local`` stage (one store shared by machines);
6. a number given as ``since`` to the Python API read as a start in 1970;
7. text after a completion line, both ways: a re-run's banner read as post-processing, a
   launched job's summary line read as a later run's;
8. an exit record another user owns read as "never written" (a stage that never completes).

"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sensors._base.tolerances import END_WINDOW
from sensors.testing import COMPLETE_LINE, SimulatedJob
from tests.test_false_complete import (
    _cli,
    _cli_begun,
    _env,
    _finished,
    _HidepidHost,
    _json_lines,
    _needs_root,
    _never_complete,
    _serve,
    _stop,
    _stored_verdict,
    _until,
    _waiting,
    _write,
)

# ----------------------------------------------------------------- 1. another viewer's memory


@pytest.fixture
def open_dir():
    """A directory every user can reach (pytest's own are root's alone): a probe run as
    ``nobody`` reads the job's log and outputs there."""
    path = Path(tempfile.mkdtemp(prefix="crosscheck-adv-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _post_processing_slowly(workdir: Path) -> SimulatedJob:
    """A job (root's) that writes its completion line a few seconds in, then post-processes."""
    job = SimulatedJob(workdir, scenario="post_process", total=4, step=0.6, spin=120)
    job.start()
    return job


def test_seen_alive_by_another_viewer_is_not_seen_by_a_probe_that_cannot_see_the_job(
    tmp_path, open_dir
) -> None:
    """Root on a plain /proc watched the job (saw it alive) and stopped; a watch run as
    another user on a hidepid=2 /proc, same store, told nothing, restored "seen alive" and
    read "no match" as the job's exit: complete while the job still post-processed."""
    from sensors import Checker, State, stage_from_dict

    _needs_root()
    job = _post_processing_slowly(open_dir)
    try:
        stage = stage_from_dict(job.stage_dict(interval="200ms", exit_grace="200ms", settle=1))
        store = str(tmp_path / "state.db")
        with Checker(stage, state=store) as root:
            seen = [root.check() for _ in range(3)]
        assert seen[-1].readings["process"].says.value == "working", seen[-1].reasons
        _until(lambda: COMPLETE_LINE in job.log_path.read_text(), timeout=30)
        job.log_path.chmod(0o644)
        job.outputs_dir.chmod(0o755)
        time.sleep(0.5)
        with Checker(stage, host=_HidepidHost(), state=store) as hidden:
            verdicts = []
            for _ in range(4):
                verdicts.append(hidden.check())
                time.sleep(0.3)
        assert job.running
        assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons
        process = verdicts[-1].readings["process"]
        assert process.says.value == "unknown" and "hidepid" in process.detail, process.detail
    finally:
        job.stop()


def test_a_job_seen_alive_by_the_hidden_probe_itself_is_gone_when_it_no_longer_sees_it(
    tmp_path, open_dir
) -> None:
    """The other side: a probe that cannot see every process (nobody on hidepid=2) saw the
    job (nobody's own) alive; its absence there is an exit, and the stage completes."""
    from sensors import Checker, State, stage_from_dict

    _needs_root()
    tag = f"own-job-{os.getpid()}-{time.monotonic_ns()}"
    log_path = open_dir / "job.log"
    script = f"echo start; sleep 2; echo '{COMPLETE_LINE}: 1 sample'"
    with open(log_path, "w") as log:
        os.fchmod(log.fileno(), 0o666)
        job = subprocess.Popen(
            ["runuser", "-u", "nobody", "--", "sh", "-c", script, "--tag", tag],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    stage = stage_from_dict(
        {
            "stage": "own-job",
            "process": {"match": f"--tag {tag}"},
            "log": {"path": str(log_path), "complete": f"^{COMPLETE_LINE}"},
            "policy": {"interval": "200ms", "exit_grace": "200ms", "settle": 1},
        }
    )
    try:
        with Checker(stage, host=_HidepidHost(), state=str(tmp_path / "state.db")) as hidden:
            first = hidden.check()
            assert first.readings["process"].says.value == "working", first.reasons
            assert job.wait(30) == 0
            states = []
            for _ in range(10):
                states.append(hidden.check().state)
                if states[-1] is State.COMPLETE:
                    break
                time.sleep(0.3)
        assert states[-1] is State.COMPLETE, states
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(5)


# ----------------------------------------------------------------- 2. a followed verdict out of date


def test_a_holders_complete_is_followed_until_a_new_run_is_at_work(tmp_path) -> None:
    """serve settled run 1 complete and, after ten looks, looks at the finished stage ten times
    less often. While no new run began, a follower (status, wait) follows that complete, with the holder
    named (its own fresh check agrees). Once run 2 (the same job again) is at work, status
    (told nothing), status --since a time before both runs, and wait followed run 1's complete
    and exited 0: they say running now. (One serve and one run 1 for both sides: a follower
    checks without saving, the row is the holder's.)"""
    state, stages = tmp_path / "state.db", tmp_path / "stages"
    stages.mkdir()
    # Long enough for serve to see it alive (its first check is within one interval).
    first = SimulatedJob(tmp_path, scenario="complete", total=4, step=1.2)
    # Run 2 stops making progress at once: a stall_after the followers' checks cannot reach
    # under load keeps its verdict "running" (a 3 s one made it "stalled" in CI: true, and
    # not the claim this test makes).
    stage = first.stage_dict(interval="2s", exit_grace="300ms", stall_after="60s")
    stage_file = _write(stages / "s.yaml", stage)
    before = time.time() - 1
    first.start()
    serve = _serve(tmp_path, stages, state)
    try:
        assert first.wait(30) == 0
        _until(lambda: _stored_verdict(state, stage["stage"]) == "complete")
        settled = _saved_at(state, stage["stage"])
        # No new run: the holder's complete is followed. (The followers side by side, here and
        # below: a follower writes nothing to the store.)
        begun = [
            _cli_begun(state, *args, str(stage_file), "--json")
            for args in (["status"], ["wait", "--timeout", "20s"])
        ]
        for result in begun:
            out = result()
            verdicts = _json_lines(out.stdout)
            assert out.returncode == 0, (out.stdout[-1500:], out.stderr[-1500:])
            assert verdicts[-1]["verdict"] == "complete"
            assert verdicts[-1]["reasons"][0].startswith("watched elsewhere"), verdicts[-1]["reasons"]
        # The holder's slow looks (from ten intervals after the settling check: its looks 20 s
        # apart): no save for three intervals, so its next look is over 13 s away, and the
        # followers' checks below are their own. (A save time past 20 s after the settling one
        # was no sign: under load the ramp's looks drift late.)
        _until(lambda: _saved_at(state, stage["stage"]) >= settled + 10 * 2.0 - 0.5)
        _until(lambda: time.time() - _saved_at(state, stage["stage"]) >= 3 * 2.0, timeout=60)
        # Run 2 at work: it is not.
        second = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag=first.tag)
        second.start()
        try:
            time.sleep(0.5)
            begun = [
                _cli_begun(state, *args, str(stage_file), "--json")
                for args in (["status"], ["status", "--since", f"@{before:.3f}"], ["wait", "--timeout", "3s"])
            ]
            for result in begun:
                verdicts = _never_complete(result())
                assert verdicts[-1]["verdict"] == "running", verdicts[-1]["reasons"]
            assert second.running
            # The holder has not looked again meanwhile (it would have seen run 2 itself):
            # what said running was each follower's own check.
            assert _stored_verdict(state, stage["stage"]) == "complete"
        finally:
            second.stop()
    finally:
        _stop(serve)


def _saved_at(state: Path, stage: str) -> float:
    """When the holder last saved a check of ``stage`` (its wall clock; 0.0: none yet)."""
    from sensors._store import StageKey, open_store

    with open_store(state) as store:
        row = store.load(StageKey(stage, "local"))
    return 0.0 if row is None else row.saved_at


def test_a_holders_failed_is_not_followed_once_a_new_run_is_at_work(tmp_path) -> None:
    """The same for ``failed``: run 1 crashed and serve settled it failed; run 2 (the fix) is
    at work; status and wait exited 3 with run 1's failure."""
    state, stages = tmp_path / "state.db", tmp_path / "stages"
    stages.mkdir()
    first = SimulatedJob(tmp_path, scenario="crash", total=8, step=1.2)
    stage = first.stage_dict(interval="2s", exit_grace="300ms")
    stage_file = _write(stages / "s.yaml", stage)
    first.start()
    serve = _serve(tmp_path, stages, state)
    try:
        first.wait(30)
        _until(lambda: _stored_verdict(state, stage["stage"]) == "failed")
        second = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag=first.tag)
        second.start()
        try:
            time.sleep(0.5)
            # Side by side: a follower writes nothing to the store.
            begun = [
                _cli_begun(state, *args, str(stage_file), "--json")
                for args in (["status"], ["wait", "--timeout", "3s"])
            ]
            for result in begun:
                out = result()
                verdicts = _json_lines(out.stdout)
                assert out.returncode not in (0, 3), [v["reasons"][:2] for v in verdicts[-2:]]
                # Run 2's own state: at work, or stalled (the stall scenario makes no progress
                # after its first steps, and a loaded machine lets the wait's 3 s pass
                # stall_after): never run 1's failure.
                assert verdicts[-1]["verdict"] in ("running", "stalled"), verdicts[-1]["reasons"]
                assert any(r.startswith("process alive") for r in verdicts[-1]["reasons"]), verdicts[-1][
                    "reasons"
                ]
        finally:
            second.stop()
    finally:
        _stop(serve)


# ----------------------------------------------------------------- 3. a file clock a little ahead


@pytest.fixture
def skewed(tmp_path):
    """A real FUSE mount whose file times are 0.6 s ahead of the host's clock (a file server
    with a clock of its own): ``(mountpoint, skew)``."""
    from tests import skewfs

    why = skewfs.available()
    if why is not None:
        pytest.skip(why)
    skew = 0.6
    with skewfs.skewed_mount(tmp_path / "backing", tmp_path / "mnt", skew) as mnt:
        yield mnt, skew


def test_an_earlier_runs_log_stamped_by_a_clock_a_little_ahead_is_not_this_runs(skewed) -> None:
    """Run 1's completion line is the log's last line, written a moment before run 2's start
    (given with --since; run 2 queued, nothing written yet); the file server's clock, ahead by
    less than the second crosscheck can see as wrong, stamped the log after the start. On a
    file system whose times are its own (not this host's), "after the start" needs the
    tolerance too."""
    mnt, skew = skewed
    first = _finished(mnt)
    # A start a moment after the last write (the host's clock: the backing file's time), which
    # the server's clock stamped after that start.
    written = (mnt.parent / "backing" / first.log_path.name).stat().st_mtime
    since = written + skew / 2
    time.sleep(max(0.0, since - time.time()) + 1.2)
    stage_file = _write(
        mnt.parent / "s.yaml", first.stage_dict(interval="200ms", exit_grace="200ms", settle=1)
    )
    out = _cli(None, "status", str(stage_file), "--since", f"@{since:.3f}", "--json", "--state", "none")
    [verdict] = _never_complete(out)
    assert verdict["signals"]["log"]["says"] != "done", verdict["signals"]["log"]


def test_an_earlier_runs_output_stamped_by_a_clock_a_little_ahead_is_not_written_during_the_run(
    skewed,
) -> None:
    """An outputs-only stage: run 1's last output written a moment before run 2's start, its
    mtime (a file server's clock a little ahead) after it."""
    mnt, _ = skewed
    out_dir = mnt / "out"
    out_dir.mkdir()
    for i in range(3):
        (out_dir / f"{i}.pt").write_bytes(b"x")
        if i < 2:
            os.utime(out_dir / f"{i}.pt", (time.time() - 5, time.time() - 5))
    since = (mnt.parent / "backing" / "out" / "2.pt").stat().st_mtime + 0.3
    time.sleep(max(0.0, since - time.time()) + 1.2)
    stage = {
        "stage": "outputs-only",
        "outputs": {"files": str(out_dir), "pattern": "*.pt", "expected": 3},
        "policy": {"interval": "200ms", "settle": 1},
    }
    stage_file = _write(mnt.parent / "s.yaml", stage)
    out = _cli(None, "status", str(stage_file), "--since", f"@{since:.3f}", "--json", "--state", "none")
    [verdict] = _never_complete(out)
    assert verdict["signals"]["outputs"]["evidence"]["written_this_run"] is False, verdict
    # And a record file (JSONL) on such a mount, for an outputs-only stage alike.
    records = mnt / "train.jsonl"
    records.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    since = (mnt.parent / "backing" / "train.jsonl").stat().st_mtime + 0.3
    time.sleep(max(0.0, since - time.time()) + 1.2)
    stage["outputs"] = {"lines": str(records), "expected": 3}
    _write(mnt.parent / "s.yaml", stage)
    out = _cli(None, "status", str(stage_file), "--since", f"@{since:.3f}", "--json", "--state", "none")
    [verdict] = _never_complete(out)
    assert verdict["signals"]["outputs"]["evidence"]["written_this_run"] is False, verdict


def test_a_log_on_another_clock_born_clearly_after_the_start_is_still_this_runs(skewed) -> None:
    """The tolerance costs only the second after the start: a job that began its log on such a
    mount clearly after the given start still completes at once."""
    mnt, _ = skewed
    since = time.time()
    time.sleep(1.6)
    job = _finished(mnt)
    stage_file = _write(mnt.parent / "s.yaml", job.stage_dict(interval="200ms", exit_grace="200ms", settle=1))
    out = _cli(
        None,
        "wait",
        str(stage_file),
        "--since",
        f"@{since:.3f}",
        "--json",
        "--state",
        "none",
        "--timeout",
        "10s",
    )
    verdicts = _json_lines(out.stdout)
    assert out.returncode == 0 and verdicts[-1]["verdict"] == "complete", verdicts[-1:]


# ----------------------------------------------------------------- 4. a line begun before the run


def test_an_earlier_completion_line_ended_by_the_next_runs_newline_is_not_this_runs(tmp_path) -> None:
    """Run 1's completion line was cut before its newline; a wait --since run 2's start saw it
    so; run 2 appended a newline and its banner and was SIGKILLed while loading: the line,
    whole now, counted as run 2's and the stage completed."""
    first = _finished(tmp_path, total=4)
    first.log_path.write_text(first.log_path.read_text()[:-1])  # no newline after the marker
    time.sleep(1.2)
    since = time.time()
    stage_file = _write(tmp_path / "s.yaml", first.stage_dict(interval="200ms", exit_grace="300ms", settle=1))
    waiting = subprocess.Popen(
        [
            *(sys.executable, "-m", "sensors", "wait", str(stage_file), "--since", f"@{since:.3f}"),
            # Its checks go on for seconds after the kill (exit grace 300 ms, settle 1).
            *("--json", "--state", "none", "--timeout", "4.5s"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
    )
    try:
        time.sleep(1.5)  # its first checks see the cut line
        with open(first.log_path, "a") as log:
            rerun = subprocess.Popen(
                ["sh", "-c", f"echo; echo 'Loading model for {first.tag}...'; sleep 300", "--tag", first.tag],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        time.sleep(1.0)
        os.killpg(rerun.pid, signal.SIGKILL)
        rerun.wait(5)
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    verdicts = _never_complete(subprocess.CompletedProcess(waiting.args, waiting.returncode, out, err))
    assert verdicts[-1]["signals"]["log"]["says"] != "done", verdicts[-1]["signals"]["log"]


# ----------------------------------------------------------------- 5. another machine's "local"


def test_a_local_stages_memory_from_another_machine_is_not_this_machines(tmp_path) -> None:
    """One store shared by two machines (PostgreSQL, or the default state file in a $HOME on
    NFS), one stage file with ``host: local``: machine A watched its job to complete; on
    machine B, whose own run of the job was never observed (its scratch disk holds the
    last run's completion line), status restored A's memory ("pid N exited", A's process)
    and said complete. B alone says unknown. Machine B is a UTS, mount and PID namespace
    with its own hostname, boot id and scratch disk; the stage says ``process.scope:
    visible`` (on each machine the job runs where the probe sees it)."""
    _needs_root()
    scratch, state = tmp_path / "scratch", tmp_path / "state.db"
    scratch.mkdir()
    # Long enough for machine A's wait to see the job alive on a loaded machine (at 0.3 s a
    # step, a wait that started late found it gone and timed out: no run start known).
    job = SimulatedJob(scratch, scenario="complete", total=4, step=1.0)
    stage = job.stage_dict(interval="200ms", exit_grace="200ms", settle=1)
    stage["process"]["scope"] = "visible"
    stage_file = _write(tmp_path / "s.yaml", stage)
    job.start()
    on_a = _cli(state, "wait", str(stage_file), "--json", "--timeout", "60s")
    assert on_a.returncode == 0, on_a.stdout[-1500:]
    boot = tmp_path / "boot_id"
    boot.write_text(f"{uuid.uuid4()}\n")
    old_log = (
        f"Loading model for {job.tag}...\\n[4/4] 4 extracted, ETA 0 minutes\\n{COMPLETE_LINE}: 4 samples\\n"
    )
    outputs = " ".join(str(job.outputs_dir / f"sample_{i:06d}.pt") for i in range(4))
    machine_b = (
        f"hostname node-b && mount -t tmpfs tmpfs {scratch}"
        f" && mount --bind {boot} /proc/sys/kernel/random/boot_id && mkdir -p {job.outputs_dir}"
        f" && for f in {outputs}; do echo x > $f; done && printf '{old_log}' > {job.log_path}"
        f" && touch -d '-1 hour' {job.log_path} {outputs}"
        ' && exec "$@"'
    )
    on_b = ["unshare", "-u", "-m", "-p", "-f", "--mount-proc", "sh", "-c", machine_b, "sh"]
    # B with the shared store, and B alone, side by side (alone reads no store).
    shared = _cli_begun(state, "status", str(stage_file), "--json", wrap=tuple(on_b))
    alone = _cli_begun(None, "status", str(stage_file), "--json", "--state", "none", wrap=tuple(on_b))
    [verdict] = _never_complete(shared())
    assert str(job.pid) not in verdict["signals"]["process"]["detail"], verdict["signals"]["process"]
    assert _json_lines(alone().stdout)[-1]["verdict"] == verdict["verdict"] == "unknown"


# ----------------------------------------------------------------- 6. a duration read as a time


def test_a_number_given_as_since_to_the_python_api_is_never_a_start_in_1970(tmp_path) -> None:
    """The CLI reads ``--since 7200`` as two hours; ``check_stage(since=7200)`` (a Prefect
    deployment's numeric parameter) read it as epoch seconds, 1970-01-01T02:00Z: every earlier
    run's evidence was this run's, and an earlier run's completion line completed a re-run
    that had not started. Refused, with the duration spelled out."""
    from sensors import Checker, ConfigError, stage_from_dict

    first = _finished(tmp_path)
    stage = stage_from_dict(first.stage_dict(interval="200ms", exit_grace="200ms", settle=1))
    for since in (7200, 7200.0, 90.5):
        with pytest.raises(ConfigError, match="s'"):
            Checker(stage, since=since)
    out = _cli(None, "status", str(_write(tmp_path / "s.yaml", first.stage_dict())), "--since", "7200")
    assert "Traceback" not in out.stderr and out.returncode != 2, out.stderr


# ----------------------------------------------------------------- 7. text after a completion line


def test_a_reruns_banner_after_an_earlier_completion_line_is_not_post_processing(tmp_path) -> None:
    """--since before both runs; run 2 printed its banner ("Loading model ...", no progress
    yet) and was SIGKILLed: run 1's completion line, followed only by the banner, completed
    the stage."""
    before = time.time() - 1
    time.sleep(1.2)
    first = _finished(tmp_path, total=4)
    time.sleep(1.5)
    with open(first.log_path, "a") as log:
        rerun = subprocess.Popen(
            ["sh", "-c", f"echo 'Loading model for {first.tag}...'; sleep 300", "--tag", first.tag],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    time.sleep(0.5)
    os.killpg(rerun.pid, signal.SIGKILL)
    rerun.wait(5)
    stage_file = _write(tmp_path / "s.yaml", first.stage_dict(interval="200ms", exit_grace="200ms", settle=1))
    out = _cli(None, "status", str(stage_file), "--since", f"@{before:.3f}", "--json", "--state", "none")
    _never_complete(out)


def test_a_launched_job_that_logs_a_line_after_its_completion_line_completes(tmp_path) -> None:
    """The job prints its completion line, then one summary line, and exits 0 under the launch
    wrapper; the stage has no log.progress. Every check from the launch on saw it: the line
    after the completion line was written while this run's job was alive. It never completed."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost
    from sensors._run.run import Run, launch_mark_script, parse_launch_mark

    host, tag = LocalHost(), f"summary-{uuid.uuid4().hex[:8]}"
    log_path = str(tmp_path / "job.log")
    mark = parse_launch_mark(host.run_script(launch_mark_script(log_path), timeout=30))
    script = (
        "import time; print('[1/2] working', flush=True); time.sleep(1.0);"
        f" print('{COMPLETE_LINE}: 2 samples', flush=True); time.sleep(1.0);"
        " print('saved to /data/out in 2.0s', flush=True); time.sleep(1.0)"
    )
    pid, exit_file = host.launch([sys.executable, "-c", script, tag], log_path=log_path, name=tag)
    run = Run(
        "launch", mark.started_at, mark.log_inode, mark.log_offset, mark.log_fingerprint, pid, exit_file
    )
    stage = stage_from_dict(
        {
            "stage": "summary",
            "process": {"match": tag},
            "log": {"path": log_path, "complete": f"^{COMPLETE_LINE}"},
            "policy": {"interval": "300ms", "settle": 1, "exit_grace": "300ms"},
        }
    )
    verdicts = list(Checker(stage, run=run).watch(timeout=12))
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


# ----------------------------------------------------------------- 8. an exit record another user owns


class _AsNobody:
    """The local host, as a probe run as ``nobody`` sees it (a watcher run as another user
    than the one that launched the job: crosscheck serve as a service user)."""

    name = "local"
    nvml = False

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        cmd = ["runuser", "-u", "nobody", "--", "/bin/sh", "-s"]
        return subprocess.run(cmd, input=script, capture_output=True, timeout=timeout, check=False).stdout

    def close(self) -> None:
        pass


def test_a_launched_jobs_exit_record_another_user_owns_is_not_read_as_never_written(open_dir) -> None:
    """The job was launched by root (its exit record in root's 0700 state directory) and
    watched by another user: it exited 0 with its completion line, and the watch said
    "its launch wrapper ended without writing it (killed with the job?)" and stayed unknown
    for ever. The record is unreadable, not missing: the other signals decide, and the
    evidence says why the exit status is not known."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost
    from sensors._run.run import Run, launch_mark_script, parse_launch_mark

    _needs_root()
    host, tag = LocalHost(), f"other-user-{uuid.uuid4().hex[:8]}"
    log_path = str(open_dir / "job.log")
    mark = parse_launch_mark(host.run_script(launch_mark_script(log_path), timeout=30))
    script = f"import time; time.sleep(1.5); print('{COMPLETE_LINE}: 1 sample', flush=True)"
    pid, exit_file = host.launch([sys.executable, "-c", script, tag], log_path=log_path, name=tag)
    os.chmod(log_path, 0o644)
    run = Run(
        "launch", mark.started_at, mark.log_inode, mark.log_offset, mark.log_fingerprint, pid, exit_file
    )
    stage = stage_from_dict(
        {
            "stage": "other-user",
            "process": {"match": tag},
            "log": {"path": log_path, "complete": f"^{COMPLETE_LINE}"},
            "policy": {"interval": "300ms", "settle": 1, "exit_grace": "300ms"},
        }
    )
    try:
        verdicts = list(Checker(stage, host=_AsNobody(), run=run).watch(timeout=15))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    final = verdicts[-1]
    assert final.state is State.COMPLETE, final.reasons
    assert "killed with the job" not in " ".join(final.reasons)
    assert "cannot be read" in final.readings["process"].detail, final.readings["process"].detail
    assert Path(exit_file).read_text().split()[0] == "0"  # it was written all along


def _rerun(job: SimulatedJob, first: str, *, stay: float) -> subprocess.Popen[bytes]:
    """Another run of ``job`` (its tag on the command line, so ``process.match`` finds it),
    appending ``first`` to its log, then ``... ok`` after ``stay`` seconds, and exiting 0
    without a completion line of its own."""
    with open(job.log_path, "a") as log:
        return subprocess.Popen(
            ["sh", "-c", f"echo '{first}'; sleep {stay}; echo '... ok'", "--tag", job.tag],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def test_a_completion_line_a_later_run_was_seen_after_stays_an_earlier_runs(tmp_path) -> None:
    """Found by the fuzzer (seed 90): one watch over three runs (a stored memory, `status`
    every few seconds with one `--since`). Run 2's completion line was demoted while run 3
    was at work; once run 3 exited 0 without a completion line of its own, the next check
    took the line as found for the first time, counted run 3's process among its writers and
    said complete."""
    state = tmp_path / "state.db"
    before = time.time() - 1
    time.sleep(1.2)
    first = _finished(tmp_path, total=4)
    stage_file = _write(tmp_path / "s.yaml", first.stage_dict(interval="200ms", exit_grace="200ms", settle=1))

    def status() -> subprocess.CompletedProcess[str]:
        return _cli(
            None, "status", str(stage_file), "--since", f"@{before:.3f}", "--json", "--state", str(state)
        )

    assert _json_lines(status().stdout)[-1]["verdict"] == "complete"  # run 2 is the latest: true
    time.sleep(1.2)  # run 3 begins clearly after the line
    rerun = _rerun(first, "ETA 0 minutes", stay=2.5)
    time.sleep(0.8)
    while_running = _json_lines(status().stdout)[-1]
    print(
        while_running["verdict"],
        while_running["reasons"][:3],
        while_running["signals"]["log"]["evidence"],
        while_running.get("run"),
    )
    assert while_running["verdict"] != "complete", while_running["reasons"]
    assert rerun.wait(30) == 0
    for _ in range(3):
        out = status()
        _never_complete(out)


def test_a_writers_child_begun_after_the_completion_line_is_its_runs_own_work(tmp_path) -> None:
    """The other side of the rule above: a job that writes its completion line and then
    starts a child (its command line matched too: a fork) is one run. Once both are gone,
    the line is its run's last word: complete."""
    log = tmp_path / "job.log"
    tag = f"child-{uuid.uuid4().hex[:8]}"
    # Its line written a while after it began (a job works before it is done): a line within
    # /proc's start-time precision of its start could be a predecessor's (seed 200948).
    script = (
        f"sleep 1.2; echo '[4/4]' >> {log}; echo '{COMPLETE_LINE}' >> {log}; sleep 1.5; "
        f"sh -c 'sleep 1.5' --tag {tag}; exit 0"
    )
    stage = {
        "stage": "child",
        "host": "local",
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {"path": str(log), "complete": COMPLETE_LINE, "progress": r"\[(\d+)/(\d+)\]"},
        "policy": {"interval": "200ms", "exit_grace": "200ms", "settle": 1},
    }
    stage_file = _write(tmp_path / "s.yaml", stage)
    watch = _waiting(stage_file)
    assert watch.stdout is not None
    first = watch.stdout.readline()  # the watch has begun: it sees the log born during the run
    job = subprocess.Popen(["sh", "-c", script, "--tag", tag], start_new_session=True)
    rest, _ = watch.communicate(timeout=60)
    assert job.wait(10) == 0
    verdicts = _json_lines(first + rest)
    assert verdicts[-1]["verdict"] == "complete", [(v["verdict"], v["reasons"][:2]) for v in verdicts[-3:]]
    assert watch.returncode == 0
    # The child was seen at work beside its parent, after the line: the rule was exercised.
    seen = [v["signals"]["process"]["evidence"].get("alive") for v in verdicts]
    assert 2 in seen, seen


# ----------------------------------------------------------------- a launched run, superseded


def _launched_outputs_stage(tmp_path: Path, host: Any, tag: str, name: str, *, settle: int):
    """A launched job that writes 2 outputs after 1 s, and its stage (process and outputs,
    ``settle`` checks) with a state store: (outputs folder, Run, wrapper PID, Stage, store)."""
    from sensors import stage_from_dict

    out = tmp_path / "out"
    out.mkdir()
    write = f"import pathlib; [pathlib.Path('{out}', f'{{i}}.pt').write_text('x') for i in range(2)]"
    run1, pid1 = _launched(host, str(tmp_path / "job.log"), f"import time; time.sleep(1.0); {write}", tag)
    stage = stage_from_dict(
        {
            "stage": name,
            "process": {"match": f"{tag}$"},
            "outputs": {"files": str(out), "pattern": "*.pt", "expected": 2},
            "policy": {"interval": "100ms", "settle": settle, "exit_grace": "1ms"},
        }
    )
    return out, run1, pid1, stage, str(tmp_path / "state.db")


def _launched(host, log_path: str, script: str, tag: str):
    """A real launch through crosscheck's wrapper (its exit record), as ``launch_stage`` does:
    the log marked first; returns the Run and the wrapper's PID."""
    from sensors._run.run import launch_mark_script, parse_launch_mark

    mark = parse_launch_mark(host.run_script(launch_mark_script(log_path), timeout=30))
    pid, exit_file = host.launch([sys.executable, "-c", script, tag], log_path=log_path, name=tag)
    return replace(mark, pid=pid, exit_file=exit_file), pid


def _reaped(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)


def _ended(pid: int, timeout: float = 10.0) -> None:
    """Until ``pid`` has ended: gone, or a zombie, which every probe reads as over too. A
    launch's wrapper is an orphan once the launch's shell is gone, and PID 1 may reap it a
    second later (``_reaped``: where the PID itself must be free)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return
        if state == "Z":
            return
        time.sleep(0.02)


@pytest.mark.parametrize("signals", ["log", "process+log", "process+log, no exit record"])
def test_a_watch_of_a_launched_run_never_takes_a_later_runs_completion_line(tmp_path, signals) -> None:
    """Found by the fuzzer (seeds 417, 264, ...): a watch given run 1's launch record said
    complete on run 2's completion line (and run 2's process, run 2's outputs), run 2 launched
    later to the same log. The launched run is the first to write after its mark: a later
    run's progress after its completion line, a process begun after its recorded exit, a
    completion line written after that exit are a later run's, and the launched run is over."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    host, tag = LocalHost(), f"superseded-{uuid.uuid4().hex[:8]}"
    log_path = str(tmp_path / "job.log")
    done = f"print('[2/2]', flush=True); print('{COMPLETE_LINE}: 2 samples', flush=True)"
    run1, pid1 = _launched(host, log_path, f"import time; time.sleep(0.3); {done}", tag)
    stage_dict: dict = {
        "stage": "superseded",
        "log": {
            "path": log_path,
            "complete": f"^{COMPLETE_LINE}",
            "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]",
        },
        "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
    }
    if signals.startswith("process+log"):
        stage_dict["process"] = {"match": f"{tag}$"}
    if signals.endswith("no exit record"):
        # A Run made in Python with the launched PID only: its end is when the watch first
        # finds that PID gone.
        run1 = replace(run1, exit_file=None)
    checker = Checker(stage_from_dict(stage_dict), run=run1)
    _ended(pid1)
    first = checker.check()
    assert first.state is State.COMPLETE, first.reasons  # the launched run itself completes
    # Run 2, launched later to the same log: it works a while, then declares completion.
    _run2, pid2 = _launched(host, log_path, f"import time; time.sleep(1.0); {done}", tag)
    try:
        time.sleep(0.5)
        during = checker.check()
        if signals != "log":  # a log alone shows nothing of run 2 yet
            assert during.state is not State.COMPLETE, during.reasons
        _ended(pid2)
        for _ in range(3):
            after = checker.check()
            assert after.state is not State.COMPLETE, after.reasons
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid2, signal.SIGKILL)


# ------------------------------------ 9. text after a completion line, written once its writers were gone


def _run_of(log: Path, tag: str, script: str) -> subprocess.Popen[bytes]:
    """One run of a job: ``script`` in sh, its output appended to ``log``, ``--tag tag`` on
    its command line (so ``process.match`` finds it)."""
    with open(log, "a") as out:
        return subprocess.Popen(
            ["sh", "-c", script, "--tag", tag], stdout=out, stderr=out, start_new_session=True
        )


def _no_progress_stage(log: Path, tag: str) -> dict:
    """A stage with a process and a log section and no ``log.progress``: any text after a
    completion line may be a later run's."""
    return {
        "stage": "runs",
        "host": "local",
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {"path": str(log), "complete": "complete$"},
        "policy": {"interval": "100ms", "exit_grace": "1ms", "settle": 1},
    }


def test_a_later_runs_text_after_a_completion_line_its_writer_was_seen_with_is_not_post_processing(
    tmp_path,
) -> None:
    """Found by the fuzzer (seed 321): --since before both runs, no log.progress. The watch
    saw run 1 alive after its completion line; run 1 exited; run 2 (never seen alive) wrote
    one line and was SIGKILLed. The next check found run 1's writer gone at that check, took
    "the log last written before its writer was first seen gone" as post-processing by run 1
    and said complete. Only text written while a writer was last seen alive is its own."""
    from sensors import Checker, State, stage_from_dict

    log, tag = tmp_path / "job.log", f"seen-{uuid.uuid4().hex[:8]}"
    since = time.time() - 1
    time.sleep(1.2)
    first = _run_of(log, tag, "echo '[6/6]'; sleep 1; echo 'Extraction complete'; sleep 1.5")
    checker = Checker(stage_from_dict(_no_progress_stage(log, tag)), since=f"@{since:.3f}")
    _until(lambda: log.exists() and "[6/6]" in log.read_text(), timeout=10, every=0.05)
    checker.check()  # run 1 at work: the line's writer
    _until(lambda: "complete" in log.read_text(), timeout=10, every=0.05)
    seen = [checker.check() for _ in range(2)]
    assert seen[-1].readings["process"].says.value == "working", seen[-1].reasons
    assert first.wait(10) == 0
    time.sleep(1.2)  # run 2 begins clearly after run 1's end; this watch does not look meanwhile
    second = _run_of(log, tag, "echo '[5/6]'; sleep 300")
    time.sleep(0.5)
    os.killpg(second.pid, signal.SIGKILL)
    second.wait(5)
    verdicts = [checker.check() for _ in range(3)]
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons


def test_a_completion_line_and_a_later_runs_text_both_found_after_their_writer_is_gone_is_not_complete(
    tmp_path,
) -> None:
    """Found by the fuzzer (seed 218): --since as a duration, no log.progress. The watch saw
    run 1 at work (no completion line yet); run 1 wrote its completion line and exited 0, run 2
    (never seen alive) wrote one line and exited 0 without one. The next check found the line
    and the text after it at once, run 1's process among the line's writers and gone "now", so
    the text was "written before its writer was first seen gone": complete on run 1's line."""
    from sensors import Checker, State, stage_from_dict

    log, tag = tmp_path / "job.log", f"found-{uuid.uuid4().hex[:8]}"
    first = _run_of(log, tag, "echo '[1/6]'; sleep 1.5; echo 'all shards complete'")
    checker = Checker(stage_from_dict(_no_progress_stage(log, tag)), since="30s")
    _until(lambda: log.exists() and "[1/6]" in log.read_text(), timeout=10, every=0.05)
    seen = [checker.check() for _ in range(2)]
    assert seen[-1].readings["process"].says.value == "working", seen[-1].reasons
    assert first.wait(10) == 0
    # Run 2 begins clearly after END_WINDOW: text stamped up to the moment the exit watch
    # found run 1 gone is run 1's where that was within END_WINDOW of its last sighting (an
    # accepted risk, docs/run-binding.md rule 3). Begun at once, a loaded machine's late
    # watch thread put run 2's text inside it (make test, once): not the route this tests.
    time.sleep(END_WINDOW + 0.1)
    assert _run_of(log, tag, "echo '[6/6]'").wait(10) == 0
    verdicts = [checker.check() for _ in range(3)]
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons


def test_text_after_a_completion_line_seen_while_its_writer_was_alive_is_its_own(tmp_path) -> None:
    """The other side: a job that writes its completion line, then a summary line, and exits
    0, watched while it runs (no log.progress, not launched): the summary line was there
    while the job was alive, so it is the job's own output, and the stage completes."""
    from sensors import Checker, State, stage_from_dict

    log, tag = tmp_path / "job.log", f"own-{uuid.uuid4().hex[:8]}"
    job = _run_of(
        log, tag, "echo '[1/1]'; sleep 1; echo 'Extraction complete'; sleep 1; echo 'saved in 1s'; sleep 1"
    )
    checker = Checker(stage_from_dict(_no_progress_stage(log, tag)), since="30s")
    verdicts = list(checker.watch(timeout=15))
    assert job.wait(10) == 0
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


# ----------------------------------------------------------------- 9. outputs written after the line


@pytest.mark.parametrize("skew", [-3600.0, 0.6])
def test_outputs_rewritten_after_an_earlier_completion_line_do_not_complete_a_hidden_rerun(
    tmp_path, skew
) -> None:
    """Found by the fuzzer (seed 195): a watch given ``--since`` before two runs, its
    ``process.match`` edited so that it finds neither. Run 1 wrote its records and its
    completion line and was SIGKILLed; run 2 (a launcher that cleans the outputs first)
    recreated the JSONL file with the same three records, on a file server whose clock is
    behind (or ahead of) the host's (the log is local), and worked on without a completion
    line. Run 1's line
    was still the log's last, the count was still 3: the stage completed, again and again.
    The records were written after this watch had found the line, with no process of the
    job alive to have written them: the line is not its run's last word."""
    from sensors import Checker, State, stage_from_dict
    from tests import skewfs

    why = skewfs.available()
    if why is not None:
        pytest.skip(why)
    with skewfs.skewed_mount(tmp_path / "backing", tmp_path / "mnt", skew) as mnt:
        tag = f"hidden-{uuid.uuid4().hex[:8]}"
        log, records = tmp_path / "job.log", mnt / "records.jsonl"  # records on the server
        three = "".join(f'{{"i": {i}}}\n' for i in range(3))
        stage = stage_from_dict(
            {
                "stage": "hidden-rerun",
                "host": "local",
                "process": {"match": f"--tag {tag}-elsewhere( |$)"},  # edited: finds no run
                "log": {"path": str(log), "complete": "^Done", "progress": r"\[(\d+)/(\d+)\]"},
                "outputs": {"lines": str(records), "expected": 3},
                "policy": {"interval": "100ms", "settle": 1, "exit_grace": "100ms"},
            }
        )
        checker = Checker(stage, since=time.time() - 30)

        def job(script: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen(["sh", "-c", script, "--tag", tag], start_new_session=True)

        first = job(
            f"echo '[1/3]' >> {log}; printf '%s' '{three}' > {records}; echo '[3/3]' >> {log};"
            f" echo 'Done: wrote 3 records' >> {log}; sleep 300"
        )
        _until(lambda: log.exists() and "Done" in log.read_text(), 10)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(5)
        checker.check()
        time.sleep(0.3)
        # Run 1's line and records: run 1 is the latest run (killed: a soft false complete the
        # fuzzer reports, which no probe can tell without a process that finds the job).
        assert checker.check().state is State.COMPLETE
        # The marker says the rewrite is over: polling the records themselves passed on run 1's
        # file before the rm, or read between the rm and the printf (FileNotFoundError in CI).
        rewritten = tmp_path / "rewritten"
        second = job(f"rm -f {records}; printf '%s' '{three}' > {records}; touch {rewritten}; sleep 300")
        try:
            _until(rewritten.exists, 10)
            time.sleep(0.2)
            verdicts = []
            for _ in range(5):
                verdicts.append(checker.check())
                time.sleep(0.15)
            assert all(v.state is not State.COMPLETE for v in verdicts), [
                (v.state.value, v.reasons[:2]) for v in verdicts
            ]
            evidence = verdicts[-1].readings["outputs"].evidence
            # Told by this watch's own checks, or (where the clocks let it) by the records'
            # mtime after the log's: either way not the line's run's.
            assert evidence.get("written_after_complete_line") or evidence.get("modified_after_log"), evidence
        finally:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(5)
            checker.close()


# ------------------------------- 10. a launched run's end, whatever signals the stage names


def _launched_stage(tmp_path: Path, signals: str, expected: int = 3) -> dict:
    """A stage over ``tmp_path``'s job.log / out/ with only the named signals (no process
    signal: the launch's exit record is all that knows the launched job)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    stage: dict = {"stage": "launched", "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"}}
    if "log" in signals:
        stage["log"] = {"path": str(tmp_path / "job.log"), "complete": f"^{COMPLETE_LINE}"}
    if "outputs" in signals:
        stage["outputs"] = {"files": str(out), "pattern": "*.pt", "expected": expected}
    return stage


def _later_run(tmp_path: Path, *, prelude: bool, line: bool, stay: float = 0.0) -> subprocess.Popen[bytes]:
    """A run that was not launched through crosscheck: its launcher's banner, the outputs
    (overwritten), its completion line, then ``stay`` seconds more at work."""
    script = (
        (f"echo 'starting extract.sh' >> {tmp_path}/job.log; " if prelude else "")
        + f"for i in 1 2 3; do echo x > {tmp_path}/out/$i.pt; done; "
        + (f"echo '{COMPLETE_LINE}: 3 samples' >> {tmp_path}/job.log; " if line else "")
        + f"sleep {stay}"
    )
    return subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True)


@pytest.mark.parametrize("signals", ["log+outputs", "outputs"])
@pytest.mark.parametrize("first_look", ["before", "after"])
def test_a_launched_run_that_is_over_is_not_completed_by_what_a_later_run_wrote(
    tmp_path, signals, first_look
) -> None:
    """Found by the fuzzer (seeds 20115, 2712): a stage without a process signal, launched;
    the launched run ended (status 0, nothing written); a later run, not launched, wrote a
    banner, the outputs and its completion line, and is still at work. The watch given the
    launched run's record said complete: only the process signal knew the launched job's
    end. Every check of a launched run reads the exit record now: what was written after it
    is a later writer's, seen across checks ("before": the watch looked once the launched
    job was over) or by file times on the host's clock ("after": its first look)."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    host, tag = LocalHost(), f"over-{uuid.uuid4().hex[:8]}"
    run1, pid1 = _launched(host, str(tmp_path / "job.log"), "import time; time.sleep(0.2)", tag)
    _ended(pid1)
    _until(lambda: Path(run1.exit_file).exists(), timeout=10)
    checker = Checker(stage_from_dict(_launched_stage(tmp_path, signals)), run=run1)
    if first_look == "before":
        assert checker.check().state is not State.COMPLETE
    time.sleep(0.05)
    later = _later_run(tmp_path, prelude=True, line="log" in signals, stay=1.5)
    try:
        time.sleep(0.6)
        verdicts = [checker.check() for _ in range(3)]
        later.wait(timeout=30)
        verdicts += [checker.check() for _ in range(3)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(later.pid, signal.SIGKILL)
    states = [v.state for v in verdicts]
    assert State.COMPLETE not in states, verdicts[-1].reasons
    # Said why, in words: not "complete", not a silent unknown.
    assert "after" in " ".join(verdicts[-1].reasons), verdicts[-1].reasons


def test_a_launched_run_whose_wrapper_was_killed_with_it_is_never_complete(tmp_path) -> None:
    """Found by the fuzzer (seed 4297): the launched job and its wrapper killed together
    (SIGKILL to the process group: no exit record), then a later run wrote every output. An
    outputs-only watch of the launched run said complete on them. A wrapper gone without a
    record is a run that did not finish: how it ended cannot be told."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    host, tag = LocalHost(), f"killed-{uuid.uuid4().hex[:8]}"
    run1, pid1 = _launched(host, str(tmp_path / "job.log"), "import time; time.sleep(60)", tag)
    time.sleep(0.3)
    os.killpg(pid1, signal.SIGKILL)
    _ended(pid1)
    stage = stage_from_dict(_launched_stage(tmp_path, "outputs"))
    later = _later_run(tmp_path, prelude=False, line=False)
    later.wait(timeout=30)
    assert len(list((tmp_path / "out").glob("*.pt"))) == 3
    checker = Checker(stage, run=run1)
    verdicts = [checker.check() for _ in range(4)]
    assert not Path(run1.exit_file).exists()
    assert [v.state for v in verdicts] == [State.UNKNOWN] * 4, verdicts[-1].reasons
    assert "without recording an exit status" in verdicts[-1].reasons[0], verdicts[-1].reasons


def test_a_launched_job_without_a_process_signal_completes_only_once_it_exited_0(tmp_path) -> None:
    """The true path beside the routes above: a launched job writes its outputs and its
    completion line, then works on (post-processing). With no process signal, every signal
    saying done used to be complete at once; it is running until the wrapper records the
    exit, then complete (status 0) or failed (any other)."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    for status, want in ((0, State.COMPLETE), (3, State.FAILED)):
        work = tmp_path / f"exit{status}"
        work.mkdir()
        stage = stage_from_dict(_launched_stage(work, "log+outputs"))
        script = (
            "import pathlib, sys, time\n"
            f"for i in range(3): pathlib.Path('{work}/out/%d.pt' % i).write_text('x')\n"
            f"print('{COMPLETE_LINE}: 3 samples', flush=True)\n"
            f"time.sleep(1.5); sys.exit({status})\n"
        )
        run, pid = _launched(
            LocalHost(), str(work / "job.log"), script, f"true-{status}-{uuid.uuid4().hex[:6]}"
        )
        checker = Checker(stage, run=run)
        _until(lambda: COMPLETE_LINE in (work / "job.log").read_text(), timeout=20)  # noqa: B023
        during = [checker.check() for _ in range(3)]
        assert State.COMPLETE not in [v.state for v in during], during[-1].reasons
        assert "has not ended" in " ".join(during[-1].reasons), during[-1].reasons
        _ended(pid)
        _until(lambda: Path(run.exit_file).exists(), timeout=10)  # noqa: B023
        after = [checker.check() for _ in range(3)]
        assert after[-1].state is want, after[-1].reasons
        if status:
            assert "exited with status 3" in after[-1].reasons[0], after[-1].reasons


def test_an_undated_completion_line_does_not_finish_a_later_process_of_the_run(tmp_path) -> None:
    """Found by the fuzzer (seed 8675): run 1 wrote its completion line and a blank line
    (so the line is not the log's last: its mtime does not date it; here the mtime is also
    set back an hour), and ended; run 2 began, and was killed without writing a line. A
    watch --since before both first read the log while run 2 was alive: run 2 was taken for
    the line's writer, and once it was gone the stage completed. The line cannot be dated
    before run 2 began: whose it is cannot be told."""
    tag = f"undated-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    start = time.time() - 5
    run1 = _run_of(log, tag, f"echo '{COMPLETE_LINE}'; echo '   '")
    run1.wait(timeout=30)
    os.utime(log, (time.time() - 3600, time.time() - 3600))
    time.sleep(0.2)
    run2 = _run_of(log, tag, "sleep 60")
    stage = _no_progress_stage(log, tag)
    try:
        from sensors import Checker, State, stage_from_dict

        checker = Checker(stage_from_dict(stage), since=start)
        first = checker.check()
        assert first.state is not State.COMPLETE, first.reasons
        os.killpg(run2.pid, signal.SIGKILL)
        run2.wait(timeout=30)
        verdicts = [checker.check() for _ in range(3)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run2.pid, signal.SIGKILL)
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons
    assert "cannot be told" in verdicts[-1].readings["log"].detail, verdicts[-1].readings["log"].detail


def test_an_earlier_line_before_a_watch_that_knew_no_start_is_not_a_later_runs(tmp_path) -> None:
    """Found by the fuzzer (seed 5491): run 1 wrote its completion line and ended; a watch
    with no --since first read the log then (no run start known: bound by the watch); run 2
    (no line of its own) began a moment later and exited 0. The earlier line, the log's last,
    was accepted as run 2's: the start learnt later (run 2's process, too near the watch's
    first read to clear it) was never compared with the log's last write."""
    from sensors import Checker, State, stage_from_dict

    tag = f"nostart-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    run1 = _run_of(log, tag, f"echo '{COMPLETE_LINE}'")
    run1.wait(timeout=30)
    # Run 2 begins within a second of run 1's line: too near for its start to show the line
    # older than it (the process start's slack), so only the log's binding can tell.
    time.sleep(0.2)
    checker = Checker(stage_from_dict(_no_progress_stage(log, tag)))
    verdicts = [checker.check()]
    run2 = _run_of(log, tag, "sleep 1")
    time.sleep(0.2)
    verdicts.append(checker.check())
    assert verdicts[-1].readings["process"].says.value == "working", verdicts[-1].reasons
    run2.wait(timeout=30)
    verdicts += [checker.check() for _ in range(3)]
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons


# ------------------------- 11. a launched job's exit recorded to the second (BusyBox date)


def _busybox_bin(tmp_path: Path, *tools: str) -> Path:
    """A directory of ``tools`` that are BusyBox's (its ``date`` has no %N: ``X.%N``)."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("no busybox here")
    d = tmp_path / "busybox-bin"
    d.mkdir(exist_ok=True)
    for tool in tools:
        (d / tool).symlink_to(busybox)
    return d


def _mid_second() -> str:
    """Python that waits until the clock is 0.3-0.7 s into a second (what follows it, and
    the job's exit, fall in that second: the record's whole seconds are before them)."""
    return "import time\nwhile not 0.3 <= time.time() % 1 <= 0.7: time.sleep(0.01)\n"


@pytest.mark.parametrize("last", ["log", "outputs"])
def test_a_launched_job_whose_exit_is_recorded_to_the_second_completes(tmp_path, monkeypatch, last) -> None:
    """A host whose ``date`` has no %N (BusyBox): the wrapper records the exit in whole
    seconds, rounded down. A job that wrote its last log line (or its outputs) and exited in
    the same second, a few hundred ms into it, was "written after the launched job's recorded
    exit" (nanosecond file times against the whole second): unknown for good, a true
    completion blocked forever, and the sentence shown is false."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    bb = _busybox_bin(tmp_path, "date")
    monkeypatch.setenv("PATH", f"{bb}:{os.environ['PATH']}")
    stage = stage_from_dict(_launched_stage(tmp_path, "log+outputs"))
    line = f"print('{COMPLETE_LINE}: 3 samples', flush=True)\n"
    outputs = f"for i in range(3): open('{tmp_path}/out/%d.pt' % i, 'w').write('x')\n"
    # The other one is written a second earlier: only ``last`` shares the exit's second.
    first, then = (outputs, line) if last == "log" else (line, outputs)
    script = first + "import time; time.sleep(1.1)\n" + _mid_second() + then
    run, pid = _launched(LocalHost(), str(tmp_path / "job.log"), script, f"bb-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("PATH", os.environ["PATH"].split(":", 1)[1])
    _reaped(pid)  # gone, as written: with whole-second times its checks need the next second
    _until(lambda: Path(run.exit_file).exists(), timeout=10)
    record = Path(run.exit_file).read_text()
    assert record.startswith("0 ") and "%N" in record, record
    verdicts = _checked(Checker(stage, run=run))
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


def test_a_launched_jobs_outputs_with_whole_second_times_written_in_its_exit_second_complete(
    tmp_path,
) -> None:
    """The other way round: the exit recorded to the nanosecond, the outputs' mtimes in whole
    seconds (a file system that keeps no finer times, or BusyBox's stat). Outputs written a
    few hundred ms before the exit, in its second, show that second: "modified after" a time
    reads a whole second as any moment of it, and the after-exit scan found them written after
    the exit: unknown for good, for a job that finished."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    stage = stage_from_dict(_launched_stage(tmp_path, "log+outputs"))
    script = (
        f"print('{COMPLETE_LINE}: 3 samples', flush=True)\n"
        "import os, time; time.sleep(1.1)\n" + _mid_second() + "for i in range(3):\n"
        f"    p = '{tmp_path}/out/%d.pt' % i; open(p, 'w').write('x')\n"
        "    t = int(os.stat(p).st_mtime); os.utime(p, (t, t))  # a file system of whole seconds\n"
        "time.sleep(0.1)\n"
    )
    run, pid = _launched(LocalHost(), str(tmp_path / "job.log"), script, f"coarse-{uuid.uuid4().hex[:8]}")
    _reaped(pid)  # gone, as written: with whole-second times its checks need the next second
    _until(lambda: Path(run.exit_file).exists(), timeout=10)
    at = float(Path(run.exit_file).read_text().split()[1])
    assert at % 1 > 0.3, at  # the exit, in the outputs' second
    verdicts = _checked(Checker(stage, run=run))
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


def _checked(checker, times: int = 4, gap: float = 0.15) -> list:
    """``times`` checks, ``gap`` seconds apart: the verdicts."""
    verdicts = []
    for _ in range(times):
        verdicts.append(checker.check())
        time.sleep(gap)
    return verdicts


def _in_pid(pid: int, argv: list[str]) -> subprocess.Popen[bytes] | None:
    """``argv`` started with PID ``pid`` (a PID reused: ns_last_pid, root's), or None."""
    for _ in range(20):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError:
            return None
        proc = subprocess.Popen(argv, start_new_session=True)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


def test_a_killed_wrappers_pid_reused_by_another_process_is_not_its_wrapper_at_work(tmp_path) -> None:
    """The launched job and its wrapper killed together (no exit record), the outputs and the
    completion line already written; the wrapper's PID then reused by an unrelated process.
    The launch's end read only the PID's state: "its launch wrapper is at work and has
    recorded no exit status", running for as long as that process lives: a false sentence,
    and a run that did not finish reported as still going. A PID is a process only with its
    start: one begun after the launch's wrapper ended is not it."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    _needs_root()
    script = (
        "import pathlib, time\n"
        f"for i in range(3): pathlib.Path('{tmp_path}/out/%d.pt' % i).write_text('x')\n"
        f"print('{COMPLETE_LINE}: 3 samples', flush=True)\n"
        "time.sleep(60)\n"
    )
    stage = stage_from_dict(_launched_stage(tmp_path, "log+outputs"))
    run, pid = _launched(LocalHost(), str(tmp_path / "job.log"), script, f"reuse-{uuid.uuid4().hex[:8]}")
    _until(lambda: COMPLETE_LINE in (tmp_path / "job.log").read_text(), timeout=20)
    os.killpg(pid, signal.SIGKILL)
    _reaped(pid)
    time.sleep(1.2)  # the other process begins clearly after the wrapper
    other = _in_pid(pid, ["sleep", "60"])
    if other is None:
        pytest.skip("could not reuse the PID")
    try:
        checker = Checker(stage, run=run)
        verdicts = [checker.check() for _ in range(3)]
    finally:
        other.kill()
        other.wait()
    assert not Path(run.exit_file).exists()
    assert [v.state for v in verdicts] == [State.UNKNOWN] * 3, verdicts[-1].reasons
    assert "without recording an exit status" in verdicts[-1].reasons[0], verdicts[-1].reasons


# --------------------- 12. outputs a later run wrote after an earlier run's completion line


def _unseen_rerun_stage(tmp_path: Path, tag: str, kind: str) -> dict:
    out = tmp_path / "out"
    if kind == "lines":
        outputs: dict = {"lines": str(tmp_path / "records.jsonl"), "expected": 3}
    elif kind == "nested":  # checkpoint directories, each with its shard
        outputs = {"files": str(out), "pattern": "ckpt-*", "expected": 3}
    else:
        outputs = {"files": str(out), "pattern": "*.pt", "expected": 3}
    return {
        "stage": "unseen-rerun",
        "host": "local",
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {"path": str(tmp_path / "job.log"), "complete": f"^{COMPLETE_LINE}"},
        "outputs": outputs,
        "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
    }


def _tagged(script: str, tag: str, **popen: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["/bin/sh", "-c", script, "--tag", tag], start_new_session=True, **popen)


#: How each kind of history's first run lays its outputs out (the second run's by kind below).
_LAYOUT = {"in-place": "files", "restored": "files", "touched-back": "lines"}


def _write_outputs(tmp_path: Path, kind: str) -> str:
    """sh: the three outputs as a run writes them. ``files``/``lines``: written anew (a
    launcher that cleans them first); ``in-place``: the directory's files written over where
    they are (its mtime stays); ``restored``: cleaned, then copied back from a stale copy
    with its times (``cp -a``: every mtime an hour old); ``touched-back``: a JSONL rewritten,
    then its mtime set an hour back; ``nested``: a shard inside each checkpoint directory
    written over; ``symlink``: the blob behind each output's link written over."""
    t = tmp_path
    return {
        "files": f"rm -rf {t}/out; mkdir {t}/out; for i in 1 2 3; do echo x > {t}/out/$i.pt; done; ",
        "lines": f"rm -f {t}/records.jsonl; for i in 1 2 3; do echo '{{\"i\": '$i'}}' >> {t}/records.jsonl; done; ",
        "in-place": f"for i in 1 2 3; do echo y > {t}/out/$i.pt; done; ",
        "restored": f"rm -rf {t}/out; cp -a {t}/stale {t}/out; ",
        "touched-back": f"printf 'a\\nb\\nc\\n' > {t}/records.jsonl; touch -d '1 hour ago' {t}/records.jsonl; ",
        "nested": f"mkdir -p {t}/out/ckpt-1 {t}/out/ckpt-2 {t}/out/ckpt-3;"
        f" for i in 1 2 3; do echo x > {t}/out/ckpt-$i/model.bin; done; ",
        "symlink": f"mkdir -p {t}/blobs; for i in 1 2 3; do echo x > {t}/blobs/$i; ln -sf ../blobs/$i {t}/out/$i.pt; done; ",
    }[kind]


def _rewrite(tmp_path: Path, kind: str) -> str:
    """sh: what the later run does to the outputs (see ``_write_outputs``)."""
    t = tmp_path
    if kind == "nested":
        return f"echo partial > {t}/out/ckpt-1/model.bin; "
    if kind == "symlink":
        return f"echo partial > {t}/blobs/1; "
    return _write_outputs(tmp_path, kind)


#: The kinds of unseen re-run (see ``_write_outputs``), each with and without a prelude.
_UNSEEN = ["files", "lines", "in-place", "restored", "touched-back", "nested", "symlink"]


@pytest.fixture(scope="module")
def unseen_reruns(tmp_path_factory) -> dict[tuple[str, bool], tuple[Path, str, float]]:
    """Every history of the test below, each in a directory of its own, made together (the
    test only reads them): run 1 wrote its outputs and its completion line and ended; run 2
    — its launcher wrote a blank line first (``prelude``), or nothing — rewrote the outputs
    and was SIGKILLed before its first log line. ``(kind, prelude)`` → (its directory, its
    tag, a start before both runs)."""
    histories: dict[tuple[str, bool], tuple[Path, str]] = {}
    for kind in _UNSEEN:
        for prelude in (False, True):
            tmp_path = tmp_path_factory.mktemp(f"unseen-{kind}-{int(prelude)}")
            (tmp_path / "out").mkdir()
            if kind == "restored":  # a stale copy of the outputs, an hour old
                (tmp_path / "stale").mkdir()
                for k in (1, 2, 3):
                    (tmp_path / "stale" / f"{k}.pt").write_text("stale")
                stale = [*tmp_path.joinpath("stale").iterdir(), tmp_path / "stale"]
                subprocess.run(["touch", "-d", "1 hour ago", *map(str, stale)], check=True)
            histories[(kind, prelude)] = tmp_path, f"rerun-{uuid.uuid4().hex[:8]}"
    started = time.time() - 1
    firsts = [
        _tagged(
            _write_outputs(path, _LAYOUT.get(kind, kind))
            + f"echo '{COMPLETE_LINE}: 3 samples' >> {path}/job.log",
            tag,
        )
        for (kind, _), (path, tag) in histories.items()
    ]
    assert [first.wait(10) for first in firsts] == [0] * len(firsts)
    time.sleep(1.1)  # the next run clearly after (whole-second file times included)
    for (_, prelude), (path, _) in histories.items():
        if prelude:
            with open(path / "job.log", "a") as log:
                log.write("\n")
    # A later clock tick: writes within one tick of the kernel's file clock (a few ms) carry
    # the same time, and their order cannot be read from them.
    time.sleep(0.05)
    # Each says when its rewrite is done (on its stdout: no file beside the outputs), then
    # works on until it is killed.
    seconds = [
        _tagged(_rewrite(path, kind) + "echo rewritten; sleep 60", tag, stdout=subprocess.PIPE)
        for (kind, _), (path, tag) in histories.items()
    ]
    try:
        for second in seconds:
            assert second.stdout is not None and second.stdout.readline() == b"rewritten\n"
            os.killpg(second.pid, signal.SIGKILL)
            second.wait(5)
    finally:
        for second in seconds:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(second.pid, signal.SIGKILL)
    return {key: (path, tag, started) for key, (path, tag) in histories.items()}


@pytest.mark.parametrize("kind", _UNSEEN)
@pytest.mark.parametrize("prelude", [False, True])
def test_outputs_rewritten_after_the_last_completion_line_by_a_run_nobody_saw_do_not_complete(
    unseen_reruns, kind, prelude
) -> None:
    """Found by the fuzzer (seed 100490): run 1 wrote its outputs and its completion line and
    ended; run 2 — its launcher wrote a blank line first, or nothing — cleaned the outputs,
    wrote them again and was killed before its first log line. A watch begun afterwards,
    ``--since`` before both runs, found run 1's line as the log's last word, the count at the
    expected number and no process alive: complete, for a run that was killed. The outputs
    were modified after the log's last write, and no process of the run was seen at work
    then: the line is not known to be their run's last word. (The histories:
    ``unseen_reruns``.)"""
    from sensors import Checker, State, stage_from_dict

    tmp_path, tag, started = unseen_reruns[(kind, prelude)]
    layout = _LAYOUT.get(kind, kind)
    stage_file = _write(tmp_path / "stage.yaml", _unseen_rerun_stage(tmp_path, tag, layout))
    status = _cli_begun(
        None, "status", str(stage_file), "--json", "--state", "none", "--since", f"@{started}"
    )
    stage = stage_from_dict(_unseen_rerun_stage(tmp_path, tag, layout))
    verdicts = _checked(Checker(stage, since=started))
    assert all(v.state is not State.COMPLETE for v in verdicts), [(v.state, v.reasons[:2]) for v in verdicts]
    outputs = verdicts[-1].readings["outputs"]
    assert outputs.evidence.get("modified_after_log") is True, outputs.evidence
    assert "after the log's last write" in outputs.detail, outputs.detail
    _never_complete(status())


@pytest.mark.parametrize("kind", ["files", "lines", "nested", "symlink", "not-an-output-after"])
def test_a_run_whose_outputs_are_older_than_its_completion_line_completes_for_a_watch_begun_after(
    tmp_path, kind
) -> None:
    """The other side of the rule above: one run that wrote its outputs, then its line, and
    ended; a watch begun afterwards completes on it (no output changed after the line). A
    file that is not an output (its name not the pattern's: a summary, a lock file removed)
    written after the line is no output changed."""
    from sensors import Checker, State, stage_from_dict

    tag = f"once-{uuid.uuid4().hex[:8]}"
    (tmp_path / "out").mkdir()
    started = time.time() - 1
    layout = "files" if kind == "not-an-output-after" else kind
    after = f"sleep 0.05; echo '{{}}' > {tmp_path}/out/metrics.json" if kind == "not-an-output-after" else ":"
    job = _tagged(
        _write_outputs(tmp_path, layout)
        + f"echo '{COMPLETE_LINE}: 3 samples' >> {tmp_path}/job.log; {after}",
        tag,
    )
    assert job.wait(10) == 0
    stage = stage_from_dict(_unseen_rerun_stage(tmp_path, tag, layout))
    verdicts = _checked(Checker(stage, since=started))
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


def test_outputs_a_watched_job_wrote_after_its_completion_line_are_its_own(tmp_path) -> None:
    """A job that logs its completion line and then writes its last output (post-processing,
    a file closed late), watched while it does: the process was seen at work after the
    write, so the output is its own and the stage completes."""
    from sensors import Checker, State, stage_from_dict

    tag = f"late-{uuid.uuid4().hex[:8]}"
    (tmp_path / "out").mkdir()
    stage = stage_from_dict(_unseen_rerun_stage(tmp_path, tag, "files"))
    checker = Checker(stage, since=time.time() - 1)
    job = _tagged(
        # At work a while before its line (one within /proc's start precision of its start
        # could be a predecessor's: seed 200948).
        f"sleep 1.2; for i in 1 2; do echo x > {tmp_path}/out/$i.pt; done; echo '{COMPLETE_LINE}: 3 samples' >>"
        f" {tmp_path}/job.log; sleep 0.3; echo x > {tmp_path}/out/3.pt; sleep 1",
        tag,
    )
    try:
        _until(lambda: (tmp_path / "out" / "3.pt").exists(), 10)
        time.sleep(0.2)
        assert checker.check().readings["process"].says.value == "working"  # seen after the write
        assert job.wait(10) == 0
        verdicts = _checked(checker)
        assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)


def test_outputs_written_after_a_completion_line_seen_while_the_log_still_grew_do_not_complete(
    tmp_path,
) -> None:
    """Found by the fuzzer (seed 100427): a stage with no process section, watched from
    before run 2. Run 2 wrote its completion line and then blank text (the log still being
    written after the line: not counted yet) and was killed; run 3 appended records and no
    log line. The next checks found the log quiet, its last word run 2's line, and the
    records unchanged since: complete. The records were written after this watch had found
    the line — found while the log was not counted yet is found all the same. The records
    live on a file server whose clock is an hour behind: no file time tells the order here,
    only this watch's own checks do."""
    from sensors import Checker, State, stage_from_dict
    from tests import skewfs

    why = skewfs.available()
    if why is not None:
        pytest.skip(why)
    with skewfs.skewed_mount(tmp_path / "backing", tmp_path / "mnt", -3600.0) as mnt:
        log, records = tmp_path / "job.log", mnt / "records.jsonl"
        log.write_text(f"[6/6]\n{COMPLETE_LINE}: run 1\n")
        records.write_text("".join(f'{{"i": {i}}}\n' for i in range(6)))
        stage = stage_from_dict(
            {
                "stage": "grew-after-line",
                "host": "local",
                "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}", "progress": r"\[(\d+)/(\d+)\]"},
                "outputs": {"lines": str(records), "expected": 6},
                "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
            }
        )
        checker = Checker(stage)
        try:
            checker.check()
            time.sleep(0.2)
            with log.open("a") as f:  # run 2: its line, then blank text
                f.write(f"[6/6]\n{COMPLETE_LINE}: run 2\n")
            with records.open("a") as f:
                f.write("".join(f'{{"i": {i}}}\n' for i in range(6)))
            with log.open("a") as f:
                f.write("    \n")
            first = checker.check()
            assert first.readings["log"].says.value == "working", first.readings["log"].detail
            with records.open("a") as f:  # run 3: records, no log line
                f.write("".join(f'{{"i": {i}}}\n' for i in range(3)))
            time.sleep(0.3)
            verdicts = _checked(checker)
        finally:
            checker.close()
    assert all(v.state is not State.COMPLETE for v in verdicts), [(v.state, v.reasons[:2]) for v in verdicts]
    evidence = verdicts[-1].readings["outputs"].evidence
    assert evidence.get("written_after_complete_line") is True, evidence
    assert not evidence.get("modified_after_log"), evidence  # told by the checks, not the clocks


def test_a_launched_runs_end_is_read_before_its_log_and_outputs_in_one_probe(tmp_path) -> None:
    """Seen under load: the job wrote its completion line and exited between the probe's read
    of its log and the read of its exit record (both in one probe). The check found the job
    over with the log as it was before the line; at the next check the log had changed "after
    the job was over", and the line was taken for a later run's, for good. Read first, an end
    found means everything the job wrote is in what the same probe reads after it."""
    from sensors import Checker, stage_from_dict
    from sensors._run.run import Run

    run = Run("launch", time.time(), 1, 0, None, 4242, str(tmp_path / "exit"))
    stage = stage_from_dict(_launched_stage(tmp_path, "log+outputs"))
    script = "\n".join(line for snippet in Checker(stage, run=run).snippets("n0nce") for line in snippet)
    assert "sec launched" in script and "sec exit" in script
    reads = [script.find(marker) for marker in ("__cc_log ", "__cc_count ", "__cc_scan ", "sec outputs")]
    assert [at for at in reads if at >= 0], script
    first_read = min(at for at in reads if at >= 0)
    assert script.index("sec launched") < script.index("sec exit") < first_read


def test_a_directory_the_probe_may_not_enter_beside_the_outputs_does_not_keep_them_unknown(open_dir) -> None:
    """The outputs directory is a mount's root, with a ``lost+found`` only root may read, and
    the watch runs as another user. Asking for the last change under the outputs must not
    enter what is not an output: a find that cannot read it fails, and the stage would stay
    unknown for good."""
    from sensors import Checker, State, stage_from_dict

    _needs_root()
    tag = f"lostfound-{uuid.uuid4().hex[:8]}"
    out = open_dir / "out"
    out.mkdir()
    out.chmod(0o755)
    (out / "lost+found").mkdir(mode=0o700)
    started = time.time() - 1
    job = _tagged(
        f"for i in 1 2 3; do echo x > {out}/$i.pt; done; echo '{COMPLETE_LINE}: 3 samples' >> {open_dir}/job.log",
        tag,
    )
    assert job.wait(10) == 0
    # Readable by the other user as the job left them (umask 022): a chmod now would be a
    # change after the line (their ctime moves), which is what the rule looks for.
    assert all(path.stat().st_mode & 0o044 == 0o044 for path in (open_dir / "job.log", *out.glob("*.pt")))
    stage = stage_from_dict(_unseen_rerun_stage(open_dir, tag, "files"))
    verdicts = _checked(Checker(stage, host=_AsNobody(), since=started))
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


def test_a_run_begun_as_the_line_was_found_is_not_its_writer_and_its_outputs_are_not_the_lines(
    tmp_path,
) -> None:
    """Found by the fuzzer (seed 111483): a watch found a completion line no process of the
    run was seen to write; within a second a later run began (too close to the line for /proc's
    start times to call it later), wrote one output over in place, was seen alive, and was
    SIGKILLed; the log's file times ran 5 s ahead of the host's. "Changed while a process of
    the run was alive" took the later run for the line's own post-processing, and the stage
    completed for a killed run. Only the line's writers (seen before it, or their children)
    make a change theirs; a change after this watch found the line is after the line, whatever
    the log's times say."""
    from sensors import Checker, State, stage_from_dict

    tag = f"close-{uuid.uuid4().hex[:8]}"
    out, log = tmp_path / "out", tmp_path / "job.log"
    out.mkdir()
    stage = stage_from_dict(_unseen_rerun_stage(tmp_path, tag, "files"))
    checker = Checker(stage, since=time.time() - 5)
    try:
        # An earlier run, between two checks: its outputs, its line, a blank line.
        first = _tagged(
            _write_outputs(tmp_path, "files") + f"printf '{COMPLETE_LINE}: 3\\n \\n' >> {log}", tag
        )
        assert first.wait(10) == 0
        time.sleep(0.3)
        found = checker.check()
        assert found.readings["log"].says.value == "done", found.readings["log"].detail
        ahead = time.time() + 5
        os.utime(log, (ahead, ahead))  # then the log's times run ahead (a server's clock)
        later = _tagged(f"echo partial > {out}/1.pt; sleep 60", tag)
        try:
            _until(lambda: (out / "1.pt").read_text() == "partial\n", 10)
            seen = checker.check()
            assert seen.readings["process"].says.value == "working", seen.readings["process"].detail
        finally:
            os.killpg(later.pid, signal.SIGKILL)
            later.wait(5)
        verdicts = _checked(checker)
    finally:
        checker.close()
    assert all(v.state is not State.COMPLETE for v in verdicts), [(v.state, v.reasons[:2]) for v in verdicts]
    # Two rules hold it back: the outputs changed after the line, with none of its writers at
    # work; and (since an adversary's review of seed 200948's fix) the later run, begun within
    # /proc's start-time slack of the line (or the line undated) and seen at a later check,
    # leaves the line unknown.
    last = verdicts[-1].readings
    assert last["outputs"].evidence.get("modified_after_log") is True or (
        last["log"].says.value == "unknown" and "of this run was alive" in last["log"].detail
    ), (last["outputs"].evidence, last["log"].detail)


def test_a_rerun_begun_within_a_second_of_its_predecessors_line_does_not_finish_on_it(tmp_path) -> None:
    """Found by the fuzzer (seed 200948): a run wrote its completion line and exited; a re-run
    began 30 ms later, wrote nothing, and was killed. A watch (given a start before both)
    first read the log while the re-run was alive: the line was the log's last, dated by its
    mtime, but the re-run's /proc start was within the second of slack that /proc's start
    times need of it, so it passed for the line's writer, and the stage completed when it was
    killed. A process begun that close to an undated-by-us line is neither the line's known
    writer nor known to be later: whose the line is cannot be told, through the real CLI."""
    tag = f"close-line-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    stage = {
        "stage": "close-line",
        "host": "local",
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}"},
        "policy": {"interval": "150ms", "settle": 2, "exit_grace": "200ms"},
    }
    stage_file = _write(tmp_path / "s.yaml", stage)
    began = time.time() - 1
    # The earlier run's log is born well before its line: a re-run begun within /proc's start
    # precision of the log's *birth* may be the process that opened it (`nohup job > log`), a
    # history these times cannot tell from this one (docs/run-binding.md).
    earlier = _tagged(
        f"printf 'step 1\\n' >> {log}; sleep 0.3; printf '{COMPLETE_LINE}: 6 files\\n' >> {log}", tag
    )
    assert earlier.wait(10) == 0
    later = _tagged("sleep 60", tag)  # the re-run, begun at once: nothing written yet
    try:
        out = subprocess.Popen(
            [sys.executable, "-m", "sensors", "wait", str(stage_file), "--json", "--timeout", "3s",
             "--state", "none", "--since", f"@{began:.3f}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(None),
        )  # fmt: skip
        assert out.stdout is not None
        first = out.stdout.readline()  # the watch has begun, the re-run alive
        assert '"verdict"' in first, first
        os.killpg(later.pid, signal.SIGTERM)
        stdout, stderr = out.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(later.pid, signal.SIGKILL)
        later.wait(5)
    verdicts = _never_complete(subprocess.CompletedProcess(out.args, out.returncode, first + stdout, stderr))
    log_reading = verdicts[-1]["signals"]["log"]
    assert log_reading["says"] == "unknown", log_reading
    assert f"pid {later.pid}" in log_reading["detail"] and "too close" in log_reading["detail"], log_reading


def test_a_follower_keeps_what_it_saw_itself_when_it_confirms_the_holders_verdict(tmp_path) -> None:
    """Found by the fuzzer (seed 303081): two watches of one launched run share a state store;
    the holder settled the run complete. A later run began; the follower, confirming the
    holder's complete with a check of its own, saw it at work and said so. The later run was
    SIGKILLed; the holder, which never saw it, kept its complete; the follower's next
    confirming check took the holder's memory again — losing the later run it had seen — and
    confirmed complete for a run that was superseded. What a watch saw on the host itself is
    never replaced by another watch's memory."""
    from sensors import Checker, State
    from sensors._hosts import LocalHost

    host, tag = LocalHost(), f"follower-{uuid.uuid4().hex[:8]}"
    _, run1, pid1, stage, store = _launched_outputs_stage(tmp_path, host, tag, "follower", settle=1)
    holder = Checker(stage, run=run1, state=store)
    follower = Checker(stage, run=run1, state=store)
    try:
        assert holder.check().readings["process"].says.value == "working"  # seen at work
        _ended(pid1)
        settled = [holder.check() for _ in range(3)]
        assert settled[-1].state is State.COMPLETE, settled[-1].reasons
        assert follower.check().state is State.COMPLETE  # followed and confirmed: true then
        # A later run (not the watched launch) begins; it writes nothing before it is killed.
        _run2, pid2 = _launched(host, str(tmp_path / "job.log"), "import time; time.sleep(60)", tag)
        try:
            time.sleep(0.3)
            during = follower.check()
            assert during.state is not State.COMPLETE, during.reasons
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid2, signal.SIGKILL)
            _ended(pid2)
        assert holder.check().state is State.COMPLETE  # it never saw run 2: no trace of it left
        after = [follower.check() for _ in range(3)]
    finally:
        holder.close()
        follower.close()
    assert all(v.state is not State.COMPLETE for v in after), [(v.state, v.reasons[:2]) for v in after]


@pytest.mark.parametrize("when", ["at its recorded exit", "while it ran"])
def test_a_process_the_launched_job_did_not_start_is_not_its_own(tmp_path, when) -> None:
    """Found by the fuzzer (seed 507217): a process-only stage, launched; run 1 exited 0 and
    run 2, not launched, began at once — within /proc's precision of run 1's recorded exit,
    so "begun after the launched job ended" could not call it a later run and it passed for
    run 1's own. Once it exited, the watch said complete on run 1's recorded status 0.

    A match the launched job did not start, begun while it ran ("while it ran": not its
    descendant) or too close to its end to order ("at its recorded exit": started the moment
    the wrapper wrote the record), may be another run: the launched run's end is no evidence
    for good, and the verdict says why."""
    from sensors import Checker, State, stage_from_dict
    from sensors._hosts import LocalHost

    host, tag = LocalHost(), f"unordered-{uuid.uuid4().hex[:8]}"
    log_path = str(tmp_path / "job.log")
    run1, pid1 = _launched(host, log_path, "import time; time.sleep(0.6)", tag)
    run2_argv = f"exec {shlex.quote(sys.executable)} -c 'import time; time.sleep(3)' {tag}"
    if when == "at its recorded exit":
        # Spins until the wrapper writes the record, then starts run 2 at once (microseconds).
        script = f"while [ ! -s {shlex.quote(str(run1.exit_file))} ]; do :; done; {run2_argv}"
    else:
        script = f"sleep 0.2; {run2_argv}"
    run2 = subprocess.Popen(["/bin/sh", "-c", script], start_new_session=True)
    stage = stage_from_dict(
        {
            "stage": "unordered",
            "process": {"match": f"{tag}$"},
            "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
        }
    )
    checker = Checker(stage, run=run1)
    try:
        verdicts = [checker.check()]
        _ended(pid1)
        _until(lambda: Path(run1.exit_file).exists(), timeout=10)
        time.sleep(0.2)
        verdicts += [checker.check() for _ in range(2)]
        assert run2.poll() is None  # run 2 was at work for these checks
        run2.wait(timeout=30)
        verdicts += [checker.check() for _ in range(3)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run2.pid, signal.SIGKILL)
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons
    assert verdicts[-1].state is State.UNKNOWN, verdicts[-1].reasons
    assert "did not start" in verdicts[-1].readings["process"].detail, verdicts[-1].readings["process"].detail


@pytest.mark.parametrize("ahead", [0.3, 0.8])
def test_a_log_time_set_ahead_of_a_local_clock_does_not_date_an_earlier_line_into_the_run(
    tmp_path, ahead
) -> None:
    """Found by the fuzzer (seed 702132): run 1 finished; its log's mtime was then set ahead
    (as a file server's clock stamps it, here by a tool on a local file system) and, seconds
    later, a watch began with --since a moment before its first check. The mtime was less
    than a second ahead of the host's clock by then — within the tolerance a file server's
    clock is given — so it dated run 1's completion line after the start: complete, with no
    run since. On a file system whose times the host's kernel stamps, a time ahead of the
    clock is no write at all (the kernel's clock lags, never leads): not evidence."""
    from sensors import Checker, State, stage_from_dict

    log, records = tmp_path / "job.log", tmp_path / "records.jsonl"
    log.write_text("[2/2]\nExtraction complete\n")
    records.write_text('{"i": 1}\n{"i": 2}\n')
    past = time.time() - 30
    os.utime(records, (past, past))
    stage = stage_from_dict(
        {
            "stage": "ahead",
            "process": {"match": f"--tag {uuid.uuid4().hex}( |$)"},
            "log": {
                "path": str(log),
                "complete": "^Extraction complete",
                "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]",
            },
            "outputs": {"lines": str(records), "expected": 2},
            "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
        }
    )
    checker = Checker(stage, since="1ms")
    stamped = time.time() + ahead
    os.utime(log, (stamped, stamped))
    verdicts = [checker.check()]
    for _ in range(3):
        time.sleep(0.1)
        verdicts.append(checker.check())
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons


@pytest.mark.parametrize("kind", ["files", "lines"])
def test_output_times_set_ahead_of_a_local_clock_are_not_written_during_the_run(tmp_path, kind) -> None:
    """The outputs' side of seed 702132: an outputs-only stage, an earlier run's outputs
    stamped a moment ahead of the host's clock (within a file server's tolerance), a watch
    given a start a moment before its first check: they passed for outputs written during
    the run. On a local file system a time ahead of the clock is no write at all."""
    from sensors import Checker, State, stage_from_dict

    out = tmp_path / "out"
    out.mkdir()
    records = tmp_path / "records.jsonl"
    section = (
        {"files": str(out), "expected": 2} if kind == "files" else {"lines": str(records), "expected": 2}
    )
    stage = stage_from_dict(
        {"stage": "ahead-out", "outputs": section, "policy": {"interval": "100ms", "settle": 1}}
    )
    checker = Checker(stage, since="1ms")
    stamped = time.time() + 2.0  # ahead still at the first check, even on a loaded machine
    if kind == "files":
        for i in (1, 2):
            (out / f"{i}.pt").write_text("x")
            os.utime(out / f"{i}.pt", (stamped, stamped))
        os.utime(out, (stamped, stamped))
    else:
        records.write_text('{"i": 1}\n{"i": 2}\n')
        os.utime(records, (stamped, stamped))
    verdicts = [checker.check()]
    # Until the stamped time has passed and the outputs have settled: complete, before.
    while time.time() < stamped + 1.0:
        time.sleep(0.1)
        verdicts.append(checker.check())
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons


# ----------------------------------------------------------------- an earlier run's child

_FORKING_JOB = """
import os, subprocess, sys, time
tag, gates = sys.argv[1], sys.argv[2]
print("step 1/2", flush=True)
while not os.path.exists(gates + ".fork"): time.sleep(0.02)
# A child of the job (a writer, a DataLoader worker), its tag in its command line as the
# job's: it writes the completion line on the job's stdout (the log) and ends.
child = "import sys, time; time.sleep(0.4); print('Extraction complete', flush=True); time.sleep(0.4)"
subprocess.run([sys.executable, "-c", child, "--tag", tag], check=True)
while not os.path.exists(gates + ".exit"): time.sleep(0.02)
"""


@pytest.mark.parametrize("job_began", ["before the since", "after the since"])
def test_a_child_an_earlier_runs_job_forks_after_the_since_is_that_runs(tmp_path, job_began) -> None:
    """``--since`` placed inside an earlier run (its job at work, begun 1.5 s before): that
    job forks a child after the since, the child writes the completion line and ends, then
    the job exits 0. The child began after the since, but its parent is the earlier run's:
    what it wrote is not this run's, and the stage never completes — the run asked for has
    not begun (fuzzer seed 3000505: complete, the line taken for this run's by its writer's
    start alone). The other side: the same job begun after the since completes."""
    from sensors import Checker, stage_from_dict

    tag = f"fork-{uuid.uuid4().hex[:8]}"
    script, gates, log = tmp_path / "job.py", tmp_path / "gate", tmp_path / "job.log"
    script.write_text(_FORKING_JOB)
    stage = stage_from_dict(
        {
            "stage": "forks",
            "process": {"match": f"--tag {tag}$"},
            "log": {"path": str(log), "complete": "^Extraction complete"},
            "policy": {"interval": "200ms", "settle": 2, "exit_grace": "300ms"},
        }
    )
    argv = f"exec {shlex.quote(sys.executable)} {shlex.quote(str(script))} {tag} {shlex.quote(str(gates))} --tag {tag}"
    if job_began == "after the since":
        since = time.time()
        time.sleep(0.3)
    job = subprocess.Popen(["sh", "-c", f"{argv} > {shlex.quote(str(log))} 2>&1"], start_new_session=True)
    try:
        _until(lambda: b"step 1/2" in log.read_bytes() if log.exists() else False, timeout=30)
        if job_began == "before the since":
            time.sleep(1.5)
            since = time.time()
        checker = Checker(stage, since=since)
        verdicts = [checker.check()]
        Path(f"{gates}.fork").touch()
        _until(lambda: b"Extraction complete" in log.read_bytes(), timeout=30)
        verdicts += [checker.check() for _ in range(3)]
        Path(f"{gates}.exit").touch()
        assert job.wait(30) == 0
        for _ in range(6):
            time.sleep(0.2)
            verdicts.append(checker.check())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    states = [v.state.value for v in verdicts]
    if job_began == "before the since":
        assert "complete" not in states, (states, verdicts[-1].reasons)
        assert any("forked by an earlier run's process" in v.readings["process"].detail for v in verdicts), [
            v.readings["process"].detail for v in verdicts
        ]
    else:
        assert states[-1] == "complete", (states, verdicts[-1].reasons)
        assert "complete" not in states[:4], states
