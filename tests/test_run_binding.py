"""Evidence belongs to a run: an earlier run's completion line, outputs or process records
never complete a stage (issue: verdicts tied to the run).

Real jobs (``SimulatedJob``) reusing one log and one output directory, as re-runs do; every
test that takes ``host`` runs locally and over the test sshd.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sensors import Checker, Says, State, stage_from_dict
from sensors._base.probe import new_nonce, split_sections
from sensors._check.checker import probe_script as build_script
from sensors._run.run import launch_mark_script, parse_launch_mark, parse_since
from sensors._signals.procfs import parse_cmdlines, parse_stats
from sensors.testing import SimulatedJob

CLI = [sys.executable, "-m", "sensors"]


def _finished_run(tmp_path: Path) -> SimulatedJob:
    """A first run that completed: its log ends with the completion line, outputs all there."""
    first = SimulatedJob(
        tmp_path, scenario="complete", total=8, step=0.01, tag=f"rerun-{uuid.uuid4().hex[:8]}"
    )
    first.start()
    assert first.wait(30) == 0
    assert "Extraction complete" in first.log_path.read_text()
    return first


def _states(checker: Checker, timeout: float = 30.0) -> list:
    return list(checker.watch(timeout=timeout))


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


# ----------------------------------------------------------------- 1. an earlier run's evidence


@pytest.mark.parametrize("gap", [3.2, 0.0], ids=["started-clearly-after", "started-at-once"])
def test_a_rerun_killed_half_way_is_never_complete_on_the_first_runs_evidence(tmp_path, host, gap) -> None:
    first = _finished_run(tmp_path)
    last_write = first.log_path.stat().st_mtime
    time.sleep(gap)
    rerun = SimulatedJob(tmp_path, scenario="stall", total=8, step=0.05, tag=first.tag)
    rerun.start(host if host.name != "local" else None)
    try:
        stage = stage_from_dict(rerun.stage_dict(interval="200ms", exit_grace="500ms", timeout="20s"))
        checker = Checker(stage, host=host)
        verdicts = []
        killed_at = None
        for verdict in checker.watch(timeout=20):
            verdicts.append(verdict)
            if len(verdicts) == 8:
                os.killpg(rerun.pid, signal.SIGKILL)  # half-way, outputs and log reused
                killed_at = time.monotonic()
            if killed_at and time.monotonic() - killed_at > 3:
                break
    finally:
        rerun.stop()
    assert verdicts[0].run["source"] == "process"
    assert State.COMPLETE not in [v.state for v in verdicts]
    final = verdicts[-1]
    assert final.readings["process"].says is Says.DONE
    log = final.readings["log"]
    assert log.evidence["earlier_complete_line"].startswith("Extraction complete")
    started = datetime.datetime.fromisoformat(verdicts[0].run["started_at"]).timestamp()
    # A start read from /proc is as exact as its probe measured (20 ms idle against
    # /proc/uptime, a second against btime), shown with the run; the mtime is exact to a
    # tick (20 ms).
    slack = verdicts[0].run["precision_s"]
    assert 0 < slack <= 1.0
    clearly_after = started - last_write > slack + 0.02
    if gap or (host.name == "local" and clearly_after):
        # The first run's last write was clearly before this run began (seconds, or, re-run
        # at once, more than the start's precision): its completion line is an earlier run's,
        # and this run wrote none. Outputs are all there (the first run's): they disagree.
        assert clearly_after
        assert log.says is Says.WORKING, log.detail
        assert final.state in (State.CONTRADICTION, State.FAILED), final.reasons
    elif host.name == "local":
        # Re-run at once: the log's last write is as near this run's start as the start is
        # exact, so whose completion line it is cannot be told.
        assert log.says is Says.UNKNOWN, log.detail
        assert "too near the run's start" in log.detail
        assert final.state in (State.UNKNOWN, State.CONTRADICTION, State.FAILED), final.reasons
    else:
        # Over SSH "at once" can still be a second later (the spawn's round trip), or the job
        # first seen after this watch first read the log: then the line is known to be older.
        assert log.says in (Says.UNKNOWN, Says.WORKING), log.detail
        assert final.state in (State.UNKNOWN, State.CONTRADICTION, State.FAILED), final.reasons


def test_a_stage_never_seen_running_is_unknown_not_complete_on_an_earlier_runs_evidence(
    tmp_path, host
) -> None:
    first = _finished_run(tmp_path)
    stage = stage_from_dict(first.stage_dict(interval="100ms", exit_grace="100ms"))
    checker = Checker(stage, host=host)
    verdicts = [checker.check() for _ in range(5)]
    assert {v.state for v in verdicts} == {State.UNKNOWN}
    reasons = " ".join(verdicts[-1].reasons)
    assert "--since" in reasons and "launch" in reasons, reasons
    # A typo in match is the same case: nothing ties the evidence to a run.
    typo = stage_from_dict({**first.stage_dict(interval="100ms"), "process": {"match": "--tag nosuchjob"}})
    checker = Checker(typo, host=host)
    assert {checker.check().state for _ in range(4)} == {State.UNKNOWN}


def test_given_since_a_stage_that_finished_before_the_watch_completes_at_once(tmp_path, host) -> None:
    first = _finished_run(tmp_path)
    stage = stage_from_dict(first.stage_dict(interval="100ms", exit_grace="100ms"))
    checker = Checker(stage, host=host, since="5m")
    states = [checker.check().state for _ in range(3)]
    assert states[-1] is State.COMPLETE, checker.last.reasons if checker.last else None
    assert checker.last is not None and checker.last.run["source"] == "since"
    # A start after the job's last write: the completion line is an earlier run's.
    late = Checker(stage, host=host, since=time.time() + 5)
    assert State.COMPLETE not in [late.check().state for _ in range(3)]
    assert late.last is not None and late.last.readings["log"].says is Says.WORKING


@pytest.mark.parametrize(("scenario", "state"), [("crash", State.FAILED), ("complete", State.COMPLETE)])
def test_a_start_given_to_the_moment_ties_a_log_born_just_after_it(tmp_path, host, scenario, state) -> None:
    """A launcher that notes the time, starts the job (whose log is born 50 ms later) and
    watches only after the job ended: the log was born after the given start, so all of it is
    this run's, though born in the same second (a birth read to the second could not show it).
    Not a few ms later: file times come from the kernel's coarse clock, up to a tick (1-10 ms)
    behind the clock the start was read from, so a birth in the start's tick is not after it."""
    job = SimulatedJob(tmp_path, scenario=scenario, total=4, step=0.01)
    started = time.time()
    time.sleep(0.05)
    job.start()
    job.wait(30)
    stage = stage_from_dict(job.stage_dict(interval="100ms", exit_grace="100ms"))
    checker = Checker(stage, host=host, since=started)
    states = [checker.check().state for _ in range(4)]
    assert states[-1] is state, checker.last.reasons if checker.last else None
    # The same log, with a start given after its last write: its lines are an earlier run's.
    later = Checker(stage, host=host, since=job.log_path.stat().st_mtime + 1)
    assert state not in [later.check().state for _ in range(4)]


def test_cli_status_and_wait_since(tmp_path) -> None:
    first = _finished_run(tmp_path)
    path = first.write_stage(tmp_path / "s.yaml", exit_grace="100ms")  # settle 2
    out = _cli("status", str(path), "--json")
    assert out.returncode == 1 and json.loads(out.stdout.splitlines()[-1])["verdict"] == "unknown", out.stdout
    assert "--since" in out.stdout
    out = _cli("status", str(path), "--json", "--since", "10m")
    doc = json.loads(out.stdout.splitlines()[-1])
    assert doc["verdict"] == "complete" and out.returncode == 0, out.stdout + out.stderr
    assert doc["run"]["source"] == "since"
    out = _cli("wait", str(path), "--since", "10m", "--timeout", "20s")
    assert out.returncode == 0, out.stdout + out.stderr
    bad = _cli("status", str(path), "--since", "yesterday-ish")
    assert bad.returncode == 2 and "--since" in bad.stderr


def test_a_given_start_splits_runs_a_moment_apart(tmp_path, host) -> None:
    """The log's mtime is read to the nanosecond (stat %.9Y): a start given a moment after
    one run's last write makes its completion line an earlier run's, and a job started and
    finished a moment after a given start completes (whole seconds could tell neither)."""
    first = _finished_run(tmp_path)
    time.sleep(0.1)
    after_first = time.time()
    stage = stage_from_dict(first.stage_dict(interval="100ms", exit_grace="100ms"))
    late = Checker(stage, host=host, since=after_first)
    assert State.COMPLETE not in [late.check().state for _ in range(3)]
    assert late.last is not None and late.last.readings["log"].says is Says.WORKING
    since = time.time()
    rerun = SimulatedJob(tmp_path, scenario="complete", total=8, step=0.01, tag=first.tag)
    rerun.start()
    assert rerun.wait(30) == 0  # over before the first check: only the start ties it
    checker = Checker(stage, host=host, since=since)
    states = [checker.check().state for _ in range(3)]
    assert states[-1] is State.COMPLETE, checker.last.reasons if checker.last else None


def test_since_parsing() -> None:
    assert parse_since("2h").ago == 7200
    assert parse_since("2026-12-01T06:00:00Z").at == 1796104800.0
    assert parse_since(1796104800).at == 1796104800.0
    assert parse_since("@1796104800").at == 1796104800.0  # `--since @$(date +%s)`
    assert parse_since("5400").ago == 5400  # a bare number in text: seconds before now
    with pytest.raises(ValueError):
        parse_since("2026-13-45T99:00")
    # Epoch seconds without the @ would be a start 57 years ago: every earlier run's evidence
    # this run's. Refused, saying what to write.
    with pytest.raises(ValueError, match="@1796104800"):
        parse_since("1796104800")
    with pytest.raises(ValueError, match="not epoch seconds"):
        parse_since("@soon")
    out = _cli("status", "/nonexistent.yaml", "--since", "1796104800")
    assert out.returncode == 2 and "write @1796104800" in out.stderr, out.stderr


def test_a_launched_run_is_bound_exactly_even_when_the_job_finishes_before_the_first_check(
    tmp_path, host
) -> None:
    first = _finished_run(tmp_path)
    # The crosscheck launch: mark the log, then start the job (crash: an error, no completion).
    mark = parse_launch_mark(host.run_script(launch_mark_script(str(first.log_path)), timeout=10))
    assert mark.log_offset == first.log_path.stat().st_size and mark.log_fingerprint
    crash = SimulatedJob(tmp_path, scenario="crash", total=8, step=0.01, tag=first.tag)
    pid = crash.start(host if host.name != "local" else None)
    time.sleep(1.5)  # gone before the first check: never seen alive
    try:
        stage = stage_from_dict(
            {**crash.stage_dict(interval="100ms", exit_grace="100ms"), "process": {"pid": pid}}
        )
        run = type(mark)(**{**mark.__dict__, "pid": pid})
        verdicts = _states(Checker(stage, host=host, run=run), timeout=10)
    finally:
        crash.stop()
    assert verdicts[-1].state is State.FAILED, verdicts[-1].reasons
    assert "CUDA error" in verdicts[-1].readings["log"].evidence["error_line"]
    assert verdicts[-1].run["source"] == "launch"


def test_a_launched_run_that_completes_fast_is_complete(tmp_path, host) -> None:
    first = _finished_run(tmp_path)
    mark = parse_launch_mark(host.run_script(launch_mark_script(str(first.log_path)), timeout=10))
    again = SimulatedJob(tmp_path, scenario="complete", total=8, step=0.01, tag=first.tag)
    pid = again.start(host if host.name != "local" else None)
    time.sleep(1.5)
    try:
        stage = stage_from_dict(
            {**again.stage_dict(interval="100ms", exit_grace="100ms"), "process": {"pid": pid}}
        )
        run = type(mark)(**{**mark.__dict__, "pid": pid})
        verdicts = _states(Checker(stage, host=host, run=run), timeout=10)
    finally:
        again.stop()
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


def test_a_log_rewritten_in_place_past_its_old_size_is_seen(tmp_path, host) -> None:
    log = tmp_path / "r.log"
    log.write_text("step 1\nExtraction complete\n")
    stage = stage_from_dict({"stage": "r", "log": {"path": str(log), "complete": "^Extraction complete"}})
    checker = Checker(stage, host=host, since="1h")
    assert checker.check().readings["log"].says is Says.DONE
    inode = log.stat().st_ino
    with open(log, "r+") as f:  # same inode, truncated, regrown past the old size
        f.truncate(0)
        f.write("a new run starts here and writes more than before\nstep 1\n")
    assert log.stat().st_ino == inode
    reading = checker.check().readings["log"]
    assert reading.evidence.get("rewritten") is True
    assert reading.says is Says.WORKING and reading.evidence["complete_line"] is None


@pytest.mark.parametrize("progress", [r"\[(?P<done>\d+)\]", None], ids=["with-progress", "no-progress"])
def test_a_log_still_written_after_its_completion_line_is_not_done(tmp_path, host, progress) -> None:
    log = tmp_path / "w.log"
    log.write_text("[1] step 1\nExtraction complete\n")
    spec = {
        "path": str(log),
        "complete": "^Extraction complete",
        **({"progress": progress} if progress else {}),
    }
    stage = stage_from_dict({"stage": "w", "log": spec})
    checker = Checker(stage, host=host, since="1h")
    assert checker.check().readings["log"].says is Says.DONE
    with open(log, "a") as f:
        f.write("still writing\n")
    reading = checker.check().readings["log"]
    assert reading.says is Says.WORKING and "still being written" in reading.detail
    stopped = checker.check().readings["log"]
    # A log-only stage knows no process that wrote the completion line: whose the text after
    # it is (the job's own output, or a later run's banner) cannot be told, pattern or not. A
    # completion line counts only as its run's last word (issue 21).
    assert stopped.says is Says.UNKNOWN and "followed by other text" in stopped.detail, stopped.detail
    assert stopped.evidence["followed_by"] == "still writing"
    with open(log, "a") as f:
        f.write("Extraction complete\n")  # the last word again: complete
    checker.check()
    assert checker.check().readings["log"].says is Says.DONE


def test_a_log_only_stage_watched_while_it_runs_is_tied_by_the_watch(tmp_path, host) -> None:
    log = tmp_path / "l.log"
    log.write_text("old run\nExtraction complete\n")
    stage = stage_from_dict(
        {"stage": "l", "log": {"path": str(log), "complete": "^Extraction complete"}, "policy": {"settle": 1}}
    )
    checker = Checker(stage, host=host)
    first = checker.check()
    assert first.state is State.UNKNOWN and first.readings["log"].says is Says.UNKNOWN
    with open(log, "a") as f:
        f.write("new run\n")
    # Whose the old line is cannot be told (it could be this run's, with a last word after it).
    assert checker.check().readings["log"].says is Says.UNKNOWN
    with open(log, "a") as f:
        f.write("Extraction complete\n")
    checker.check()  # still written since the last check
    assert checker.check().state is State.COMPLETE


def test_outputs_only_stage_needs_an_output_written_during_the_run(tmp_path, host) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for i in range(3):
        (out / f"s{i}.pt").write_bytes(b"x")
    old = time.time() - 3600
    for p in out.iterdir():
        os.utime(p, (old, old))
    stage = stage_from_dict({"stage": "o", "outputs": {"files": str(out), "pattern": "*.pt", "expected": 3}})
    checker = Checker(stage, host=host, since="10m")
    verdicts = [checker.check() for _ in range(4)]
    assert {v.state for v in verdicts[1:]} == {State.UNKNOWN}, [v.reasons for v in verdicts]
    assert "nothing ties it to this run" in verdicts[-1].reasons[0]
    (out / "s2.pt").write_bytes(b"y")  # rewritten by this run
    os.utime(out / "s2.pt", (time.time() - 60, time.time() - 60))
    fresh = Checker(stage, host=host, since="10m")
    assert [fresh.check().state for _ in range(3)][-1] is State.COMPLETE


# ----------------------------------------------------------------- 2. whole and unforgeable process records

SLEEPER = "import sys, time; time.sleep(float(sys.argv[1]))"


def test_a_distinguishing_flag_after_the_first_4_kb_still_matches(tmp_path, host) -> None:
    tag = f"long-argv-{time.time_ns()}"
    shards = [f"/data/shards/shard-{i:05d}.parquet" for i in range(400)]  # ~13 KB of argv
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, "30", *shards, "--tag", tag])
    try:
        time.sleep(0.5)
        stage = stage_from_dict({"stage": "p", "process": {"match": f"--tag {tag}$"}})
        reading = Checker(stage, host=host).check().readings["process"]
        assert reading.says is Says.WORKING, reading.detail
        assert reading.evidence["pid"] == proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.alone
def test_the_probes_own_command_line_reader_is_never_the_job(host) -> None:
    """The probe's readers of the table are in the table it reads. A pattern one matches read
    "listed but their /proc stat was unreadable" (unknown, at every check) instead of no
    process. Alone: another probe's reader at work through this probe's two scans (another
    test's, beside it) is a process like any other, and matches."""
    stage = stage_from_dict({"stage": "own", "process": {"match": r"^head -c [0-9]+ /dev/null "}})
    reading = Checker(stage, host=host).check().readings["process"]
    assert reading.says is Says.DONE and reading.detail.startswith("no process found"), reading.detail


def test_the_probes_own_processes_are_left_out_of_the_table_even_when_cut() -> None:
    """The probe's own cmdline scan is in the table it reads: on a host of ~20k processes its
    argv is longer than a command line is read, and a cut line makes every "no match"
    unknown. It is over by the stat scan (no stat line) and has the scan's own argv: it is
    not in the table at all. A process of that argv that has a stat line is another's."""
    from sensors._signals.process import _ProcessTable
    from sensors._signals.procfs import CMDLINE_PER_PROCESS

    nonce = new_nonce()
    scanner = ["grep", "-a", "-z", "-H", ""] + [f"/proc/{pid}/cmdline" for pid in range(1, 150_000)]
    assert len("\0".join(scanner)) > CMDLINE_PER_PROCESS

    def pieces(pid: int, argv: list[str]) -> str:
        return "".join(f"/proc/{pid}/cmdline:{arg}\0" for arg in argv)

    cmdline = (pieces(7, ["train.py"]) + pieces(8, scanner)).encode()
    line = "(python) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 77 0 0\n"
    stat = f"==> /dev/null <==\n\n==> /proc/7/stat <==\n7 {line}".encode()
    table = _ProcessTable._parse({"stat": stat, "cmdline": cmdline}, nonce)
    assert not isinstance(table, str), table
    assert dict(table.cmdlines) == {7: "train.py"} and table.cut == frozenset()
    # The same argv with a stat line: a process that looks like the scan stays (and is cut).
    stat8 = stat + f"\n==> /proc/8/stat <==\n8 {line}".encode()
    table = _ProcessTable._parse({"stat": stat8, "cmdline": cmdline}, nonce)
    assert not isinstance(table, str) and 8 in table.cmdlines and table.cut == frozenset({8})


def test_another_probes_stat_reader_that_ended_between_the_scans_is_not_in_the_table() -> None:
    """Another crosscheck probe on the same host (a CLI check beside `serve`): its stat scan's
    `head` was at work while this probe read the command lines and over by its stat scan. Kept,
    a pattern it matched read "listed but their /proc stat was unreadable", unknown (CI, at
    bbd6ae4). The same argv still at work (a stat line) is a process like any other."""
    from sensors._signals.process import _ProcessTable

    nonce = new_nonce()
    reader = ["head", "-c", "4096", "/dev/null"] + [f"/proc/{pid}/stat" for pid in (1, 7, 9)]
    cmdline = "".join(
        f"/proc/{pid}/cmdline:{arg}\0" for pid, argv in ((7, ["train.py"]), (9, reader)) for arg in argv
    )
    line = "(python) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 77 0 0\n"
    stat = f"==> /dev/null <==\n\n==> /proc/7/stat <==\n7 {line}".encode()
    table = _ProcessTable._parse({"stat": stat, "cmdline": cmdline.encode()}, nonce)
    assert not isinstance(table, str), table
    assert dict(table.cmdlines) == {7: "train.py"}
    stat9 = stat + f"\n==> /proc/9/stat <==\n9 {line}".encode()
    table = _ProcessTable._parse({"stat": stat9, "cmdline": cmdline.encode()}, nonce)
    assert not isinstance(table, str) and table.cmdlines.get(9, "").startswith(
        "head -c 4096 /dev/null /proc/1/stat"
    )


def test_a_forged_header_in_another_processs_argv_does_not_hide_the_job(tmp_path, host) -> None:
    tag = f"forged-{time.time_ns()}"
    job = subprocess.Popen([sys.executable, "-c", SLEEPER, "30", "--tag", tag])
    forgers = []
    try:
        time.sleep(0.3)
        # Look-alikes of the probe's record headers (old and new) naming the job's PID, plus a
        # partial one that would swallow the newline before the next real header.
        for fake in (
            f"x\n==> /proc/{job.pid}/cmdline <==\nsleep\n==> /proc/{job.pid}/stat <==\n",
            f"\n@@crosscheck 0000 cmdline\n==> /proc/{job.pid}/cmdline <==",
            "y\n==> /proc/1/cmdline <==",
            f"z\n/proc/{job.pid}/cmdline:sleep\n\\@@crosscheck 0000 stat\n@@crosscheck 0000 end\n",
        ):
            forgers.append(subprocess.Popen([sys.executable, "-c", SLEEPER, "30", fake]))
        time.sleep(0.5)
        stage = stage_from_dict({"stage": "p", "process": {"match": f"--tag {tag}$"}})
        reading = Checker(stage, host=host).check().readings["process"]
        assert reading.says is Says.WORKING, reading.detail
        assert reading.evidence["pid"] == job.pid and reading.evidence["matched"] == 1
    finally:
        for p in [job, *forgers]:
            p.kill()
            p.wait()


FORGED_COMM = """
import sys, time
with open("/proc/self/comm", "w") as f:
    f.write(sys.argv[1])
time.sleep(30)
"""


def test_a_comm_with_a_newline_cannot_replace_the_jobs_stat_record(tmp_path, host) -> None:
    job = subprocess.Popen(["sleep", "30"])
    forger = None
    try:
        stage = stage_from_dict({"stage": "p", "process": {"pid": job.pid}, "policy": {"interval": "100ms"}})
        checker = Checker(stage, host=host)
        assert checker.check().readings["process"].says is Says.WORKING
        # "x\n<PID> (y" makes the forger's stat read as a record of the job's PID with the
        # forger's start time: the job would look like a reused PID, i.e. gone.
        forger = subprocess.Popen([sys.executable, "-c", FORGED_COMM, f"x\n{job.pid} (y"])
        time.sleep(0.5)
        with open(f"/proc/{forger.pid}/comm", "rb") as f:
            assert b"\n" in f.read()  # the kernel kept the newline
        reading = checker.check().readings["process"]
        assert reading.says is Says.WORKING, reading.detail
        assert reading.evidence["pid"] == job.pid
    finally:
        for p in (job, forger):
            if p is not None:
                p.kill()
                p.wait()


def test_record_parsers_take_each_piece_for_the_file_it_came_from() -> None:
    """No byte of a command line or a comm can start another process's record: a command
    line comes as ``grep -z -H`` pieces (an argument holds no NUL), and a comm (15 bytes at
    most) is too short to hold a stat header. No secret is involved (issue 34)."""
    stage = stage_from_dict({"stage": "p", "process": {"match": "x"}})
    script = build_script(stage, new_nonce()).decode()
    assert 'grep -a -z -H "" /proc/[0-9]*/cmdline' in script
    body = (
        b"/proc/10/cmdline:job\0/proc/10/cmdline:--tag\0/proc/10/cmdline:a\n/proc/11/cmdline:forged\0"
        b"/proc/10/cmdline:\n==> /proc/12/cmdline <==\nforged too\0"
        b"/proc/13/cmdline:other\0/proc/13/task/13/cmdline:x\0"
        # A piece cut short by the cap (no NUL after it) is not read.
        b"/proc/14/cmdline:cut sh"
    )
    cmds = parse_cmdlines(body)
    assert dict(cmds.text) == {
        10: "job --tag a\n/proc/11/cmdline:forged \n==> /proc/12/cmdline <==\nforged too",
        13: "x",  # its thread's record came after its own (one file's pieces are its record)
    }
    stat = "==> /dev/null <==\n\n==> /proc/20/stat <==\n20 (a\n21 (b) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 77 0 0\n"
    stats = parse_stats(stat.encode())
    assert list(stats) == [20] and stats[20].comm == "a\n21 (b"  # pid 21 is inside 20's comm


def test_a_command_line_too_long_to_read_whole_is_unknown_not_no_match(monkeypatch, tmp_path, host) -> None:
    import sensors._signals.process as signals
    import sensors._signals.procfs as probe

    monkeypatch.setattr(probe, "CMDLINE_PER_PROCESS", 8192)
    monkeypatch.setattr(signals, "CMDLINE_PER_PROCESS", 8192)
    filler = "y" * 9000
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, "30", filler, "--tag", "cut-short"])
    try:
        time.sleep(0.5)
        stage = stage_from_dict({"stage": "p", "process": {"match": "--tag nothing-runs-this"}})
        nonce = new_nonce()
        sections = split_sections(host.run_script(build_script(stage, nonce), timeout=30), nonce)
        cmds = parse_cmdlines(sections["cmdline"])
        assert proc.pid in cmds.cut
        reading = Checker(stage, host=host).check().readings["process"]
        assert reading.says is Says.UNKNOWN and "longer than" in reading.detail
    finally:
        proc.kill()
        proc.wait()


def test_identities_of_short_lived_workers_are_not_kept(tmp_path, host) -> None:
    tag = f"forker-{time.time_ns()}"
    code = (
        "import subprocess, sys, time\n"
        "end = time.time() + 30\n"
        "while time.time() < end:\n"
        f"    subprocess.run([sys.executable, '-c', 'pass', '--tag', {tag!r}])\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, "--tag", tag])
    try:
        stage = stage_from_dict({"stage": "f", "process": {"match": f"--tag {tag}"}})
        checker = Checker(stage, host=host)
        for _ in range(15):
            checker.check()
            time.sleep(0.1)
        identities = checker._memory.signals["process"].identities
        assert proc.pid in identities
        assert len(identities) <= 3, identities  # the job, and a worker alive right now
    finally:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------- 4. JSONL rewritten in place


def test_a_jsonl_file_rewritten_in_place_past_its_old_size_is_counted_again(tmp_path, host) -> None:
    f = tmp_path / "train.jsonl"
    f.write_text('{"a": 1}\n{"a": 2}\n')
    stage = stage_from_dict({"stage": "l", "outputs": {"lines": str(f), "expected": 5}})
    checker = Checker(stage, host=host, since="1h")
    assert checker.check().readings["outputs"].evidence["count"] == 2
    inode = f.stat().st_ino
    with open(f, "r+") as fh:  # same inode: truncated, then three longer records
        fh.truncate(0)
        fh.write('{"b": 100000}\n{"b": 200000}\n{"b": 300000}\n')
    assert f.stat().st_ino == inode
    reading = checker.check().readings["outputs"]
    assert reading.evidence["count"] == 3, reading.evidence  # not 2 + the new tail
    assert reading.evidence.get("rewritten") is True
    with open(f, "a") as fh:
        fh.write('{"b": 4}\n')
    assert checker.check().readings["outputs"].evidence["count"] == 4  # appends stay incremental


def test_cli_status_finds_a_job_whose_flag_sits_after_4_kb_of_argv(tmp_path) -> None:
    tag = f"long-cli-{time.time_ns()}"
    shards = [f"/data/shards/shard-{i:05d}.parquet" for i in range(400)]
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, "30", *shards, "--tag", tag])
    try:
        time.sleep(0.5)
        path = tmp_path / "p.yaml"
        path.write_text(json.dumps({"stage": "p", "process": {"match": f"--tag {tag}$"}}))
        out = _cli("status", str(path), "--json")
        doc = json.loads(out.stdout.splitlines()[-1])
        assert doc["signals"]["process"]["says"] == "working", doc
        assert doc["signals"]["process"]["evidence"]["pid"] == proc.pid
        assert doc["verdict"] == "running" and out.returncode == 1
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("line", "written", "resolution"),
    [
        (
            b"12 345 1796109031 0 1796109031.987028479 1796109031.987028479 regular file",
            1796109031.987028479,
            0.02,
        ),
        # busybox, or a stat without precisions: %.9Y prints the whole seconds again
        (b"12 345 1796109031 1796100000 1796109031 1796109031 regular file", 1796109031.0, 1.0),
        # a fraction that disagrees with %Y is not believed
        (b"12 345 1796109031 0 1796109032.5 1796109032.5 regular empty file", 1796109031.0, 1.0),
        (b"12 345 1796109031 0 ? ? regular file", 1796109031.0, 1.0),
    ],
)
def test_the_logs_mtime_is_as_exact_as_stat_gives_it(line: bytes, written: float, resolution: float) -> None:
    from sensors._signals.log import _parse_log_stat

    st = _parse_log_stat(line, "/x.log")
    assert not isinstance(st, str), st
    assert (st.inode, st.size, st.mtime) == (12, 345, 1796109031)
    assert st.written == pytest.approx(written) and st.resolution == resolution
    assert (
        _parse_log_stat(b"12 345 1796109031 0 1796109031.5 1796109031.5 fifo", "/x.log")
        == "log is not a regular file: fifo (/x.log)"
    )


@pytest.mark.parametrize(
    ("birth", "source", "started", "whole"),
    [
        ("1000.004000000", "since", 1000.0, True),  # born 4 ms after a start given exactly
        ("1000.000000000", "since", 1000.0, True),
        ("999.996000000", "since", 1000.0, False),  # a tick before: it may hold older lines
        ("1000", "since", 999.5, True),  # whole seconds: the birth is at 1000 or later
        ("1000", "since", 1000.5, False),
        ("1000.500000000", "process", 1000.0, False),  # a start from /proc is known to 1 s
        ("1001.200000000", "process", 1000.0, True),
        ("0", "since", 1.0, False),  # no birth kept (the filesystem has none)
        ("-", "since", 1.0, False),
    ],
)
def test_a_log_born_after_the_runs_start_is_all_this_runs(birth, source, started, whole) -> None:
    from sensors._run.run import Run
    from sensors._signals.log import LogMemory, _bind, _parse_log_stat

    st = _parse_log_stat(f"7 10 2000 {birth} 2000.5 2000.5 regular file".encode(), "/j.log")
    assert not isinstance(st, str), st
    bound = _bind(LogMemory(), st, Run(source=source, started_at=started), 2001.0)
    assert (bound.run_from == 0) is whole, bound
    assert bound.bound_by == source


@pytest.mark.parametrize(
    ("mtime", "ctime", "unclear"),
    [
        ("1990.000000000", "1990.000000000", False),  # one write: both stamped at once
        ("1990.000000000", "1990.800000000", False),  # within the second a write may leave
        ("1990.000000000", "2020.000000000", True),  # set 30 s back (touch -d, cp -p): no date
        ("1990", "2020.000000000", True),  # whole seconds, set back all the same
    ],
)
def test_a_log_whose_mtime_was_set_back_is_not_dated_by_it(mtime, ctime, unclear) -> None:
    """A log last written, by its mtime, before a --since: what it held was an earlier run's
    — unless the mtime was set back (its ctime, which no tool can set, clearly later): then
    when it was last written is not known, and what it held is of a run that cannot be told
    (fuzzer seed 3001164: the run's own line read as an earlier run's, and its exit 0 as a
    run with no completion line: failed)."""
    from sensors._run.run import Run
    from sensors._signals.log import LogMemory, _bind, _parse_log_stat

    st = _parse_log_stat(f"7 10 1990 0 {mtime} {ctime} regular file".encode(), "/j.log")
    assert not isinstance(st, str), st
    bound = _bind(LogMemory(), st, Run(source="since", started_at=2000.0), 2021.0)
    assert bound.run_from == 10 and bound.before_uncertain is unclear, bound
    assert bound.last_write_unclear is unclear


@pytest.mark.parametrize(
    ("source", "after", "uncertain"),
    [
        ("process", 0.004, True),  # read from /proc a tick after the check that bound the log
        ("process", 0.9, True),
        ("process", 5.0, False),  # clearly after: what the log held then is older
        ("since", 0.004, False),  # a start given by the user is exact
    ],
)
def test_a_run_start_a_tick_after_the_binding_check_is_not_after_it(source, after, uncertain) -> None:
    from sensors._run.run import Run
    from sensors._signals.log import LogMemory, _bound, _parse_log_stat

    bound_at = 1_000_000.0
    # Bound by a probe that read its clock again at once (3a1678a: "after" is after the
    # latest that read can have been; a memory without it never rules so).
    memory = LogMemory(
        inode=7,
        size=10,
        run_from=10,
        before_uncertain=True,
        bound_by="process",
        bound_at=bound_at,
        bound_read_by=bound_at,
    )
    st = _parse_log_stat(b"7 10 999000 0 999000.5 999000.5 regular file", "/j.log")
    assert not isinstance(st, str)
    run = Run(source=source, started_at=bound_at + after)
    kept, change = _bound(memory, st, None, run, bound_at + 10, unchanged=True)
    assert change is None and kept.before_uncertain is uncertain


def test_a_launch_record_reads_back_as_the_run_it_was_written_from() -> None:
    """One home for the launch record's keys (``launch_stage``'s result and a running launch
    found again): what ``launch_record`` writes, ``run_from_record`` reads back whole."""
    from sensors._run.run import Run, launch_record, run_from_record

    run = Run(
        source="launch",
        started_at=1796300000.25,
        log_inode=42,
        log_offset=1024,
        log_fingerprint="0a",
        pid=4455,
        exit_file="/tmp/x.exit",
    )
    record = launch_record("extract", "gpu-1", run, log="/data/extract.log", command="python x.py", cwd=None)
    assert record["cwd"] == "" and record["pid"] == 4455 and record["log"] == "/data/extract.log"
    assert run_from_record(record) == run


@pytest.mark.parametrize(
    ("started", "slack", "first_check", "afresh"),
    [
        (100.5, 0.0, 100.0, True),  # docker's nanoseconds: begun after the first check
        (99.5, 0.0, 100.0, False),  # begun before it
        # systemd's and Slurm's whole seconds, rounded down: read 100, begun in [100, 101).
        (100.0, 1.0, 100.4, True),  # may have begun after the first check (adversary 41)
        (99.0, 1.0, 100.4, False),  # surely before it
    ],
)
def test_a_records_first_run_binds_afresh_where_it_may_have_begun_after_the_first_check(
    started: float, slack: float, first_check: float, afresh: bool
) -> None:
    from sensors._check.checker import _Memory, _named_since_first
    from sensors._run.run import Run

    mem = _Memory()
    mem.first_check_at = first_check
    run = Run(source="supervisor", started_at=started, supervised="unit@x", slack=slack)
    assert _named_since_first(run, mem) is afresh
