"""Seeing a process end (issue 35, "See the end"): the watch learns when the job's process
ended (locally a pidfd, over SSH the host's exit watch in a channel of its connection), so
text its log got before that end is its own run's, and text written after it is not. Each
test runs locally and over SSH (the test sshd on 127.0.0.1: the job runs on this machine).

Real processes and files; checks driven by hand, a few hundred ms apart.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sensors import Checker, stage_from_dict

JOB = textwrap.dedent(
    """
    import logging, sys, time
    logging.basicConfig(filename=sys.argv[1], level=logging.INFO, format="%(asctime)s %(message)s")
    for i in range(3):
        logging.info("step %d", i)
        time.sleep(0.3)
    logging.info("Extraction complete")
    time.sleep(float(sys.argv[3]))
    logging.info("wandb: Synced run abc (%s)", sys.argv[2])
    time.sleep(0.05)  # teardown (wandb's own takes longer): the end comes after the last line
    """
)


def _stage(tmp_path: Path, tag: str, host) -> Checker:
    doc = {
        "stage": "end",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(tmp_path / "job.log"), "complete": "Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    return Checker(stage_from_dict(doc), host=host)


def _job(tmp_path: Path, tag: str, after: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path / "job.log"), "x", str(after), "--tag", tag]
    )


def test_text_after_the_completion_line_is_the_jobs_own_when_its_end_was_seen(tmp_path: Path, host) -> None:
    """The job writes its completion line, then a `wandb: Synced` line, then exits 0; the
    watch saw it from its start. Before: `unknown` for good ("followed by other text that no
    process known to have written the completion line can have written"). Now: complete
    within 3 checks of the exit. What is written in the last ~15 ms of a process (the poll's
    5 ms and a kernel tick of file-time lag) cannot be told from a later run's first write:
    that stays unknown."""
    tag = f"see-end-{time.time_ns()}"
    job = _job(tmp_path, tag, 0.15)
    checker = _stage(tmp_path, tag, host)
    time.sleep(0.2)
    states = [checker.check().state.value]
    job.wait(20)
    exited = time.monotonic()
    checks = 0
    while states[-1] != "complete" and checks < 12:
        time.sleep(0.3)
        states.append(checker.check().state.value)
        checks += 1
    assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
    assert checks <= 4, (checks, states)  # exit grace and settle: within 3 checks of the grace
    assert time.monotonic() - exited < 3.0


def test_text_written_after_the_writers_end_is_not_theirs(tmp_path: Path, host) -> None:
    """The job writes its completion line and exits; after its end (seen), another process
    (a later run, begun and over between two checks, never seen) appends a banner. That text
    is not the job's: the completion line is not its run's last word, never complete."""
    tag = f"see-end-{time.time_ns()}"
    job = _job(tmp_path, tag, 0.0)
    checker = _stage(tmp_path, tag, host)
    time.sleep(0.2)
    checker.check()
    # Watched alive at every check until its line is there, so the line's writer is known.
    log = tmp_path / "job.log"  # the job makes it (under load, after the first check)
    while b"Extraction complete" not in (log.read_bytes() if log.exists() else b""):
        checker.check()
        time.sleep(0.05)
    job.wait(20)
    time.sleep(0.3)  # its end seen, well before the banner
    with open(tmp_path / "job.log", "a") as log:
        log.write("starting run 2 (banner)\n")
    states = []
    for _ in range(8):
        time.sleep(0.3)
        verdict = checker.check()
        states.append(verdict.state.value)
    assert "complete" not in states, (states, verdict.reasons)


HEADLINE = textwrap.dedent(
    """
    import logging, sys, time
    if sys.argv[1] == "logging":
        time.sleep(0.2)  # its imports first (torch takes seconds): the log is born after it began
        logging.basicConfig(filename=sys.argv[2], level=logging.INFO, format="%(message)s")
        say = logging.info
    else:
        def say(text):
            print(text, flush=True)
    for i in range(4):
        say(f"[{i}] extracted")
        open(f"{sys.argv[3]}/s{i}.npy", "w").write("x")
        time.sleep(0.3)
    say("Extraction complete")
    say("building sample_lengths.json")
    time.sleep(1.5)
    """
)


def _headline(tmp_path: Path, how: str, host) -> None:
    """The headline incident watched the way it happened: the watch starts while the job,
    its completion line already written, post-processes; the job then exits 0 with every
    output there. Before: `unknown` until the timeout ("it may be an earlier run's: the log
    was written both before and after the run began": the log was born with the job, within
    the 1 s a process start was taken to be off). Now: complete within 3 checks of the exit,
    for a log opened by Python's `logging` once the job is under way and for one the shell
    opened between the fork and the exec (`nohup job > log`)."""
    import shlex

    tag = f"headline-{time.time_ns()}"
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "job.log"
    argv = [sys.executable, "-c", HEADLINE, how, str(log), str(out), "--tag", tag]
    if how == "nohup":  # the log opened by the shell between the fork and the exec
        cmd = " ".join(shlex.quote(a) for a in argv)
        job = subprocess.Popen(["sh", "-c", f"exec nohup {cmd} > {shlex.quote(str(log))} 2>&1"])
    else:
        job = subprocess.Popen(argv)
    while b"building sample_lengths" not in (log.read_bytes() if log.exists() else b""):
        assert job.poll() is None
        time.sleep(0.05)
    doc = {
        "stage": "headline",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "outputs": {"files": str(out), "pattern": "*.npy", "expected": 4},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    checker = Checker(stage_from_dict(doc), host=host)
    first = checker.check()
    assert first.state.value == "running", first.reasons  # the job post-processes: not done
    job.wait(20)
    exited = time.monotonic()
    states = []
    while (not states or states[-1] != "complete") and len(states) < 12:
        time.sleep(0.3)
        states.append(checker.check().state.value)
    assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
    assert len(states) <= 4, states
    assert time.monotonic() - exited < 3.0


def test_the_headline_incident_watched_as_it_happened_logging(tmp_path: Path, host) -> None:
    _headline(tmp_path, "logging", host)


def test_the_headline_incident_watched_as_it_happened_nohup(tmp_path: Path, host) -> None:
    _headline(tmp_path, "nohup", host)


def test_a_log_born_long_before_the_job_is_not_taken_for_its_own(tmp_path: Path, host) -> None:
    """The other side: a log an earlier run wrote (its completion line in it, born long before
    this run), appended to by a new run that writes no completion line and exits. Never
    complete: the line is not this run's."""
    log = tmp_path / "job.log"
    log.write_text("[0] extracted\nExtraction complete\n")
    time.sleep(1.5)
    tag = f"appender-{time.time_ns()}"
    code = "import sys, time\nf = open(sys.argv[1], 'a')\nf.write('run 2 starting\\n'); f.flush(); time.sleep(1.0)"
    job = subprocess.Popen([sys.executable, "-c", code, str(log), "--tag", tag])
    doc = {
        "stage": "appender",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    checker = Checker(stage_from_dict(doc), host=host)
    time.sleep(0.3)
    states = [checker.check().state.value]
    job.wait(20)
    for _ in range(8):
        time.sleep(0.3)
        states.append(checker.check().state.value)
    assert "complete" not in states, (states, checker.last.reasons if checker.last else None)


def _fast_stage(tmp_path: Path, tag: str) -> dict[str, object]:
    return {
        "stage": "fast",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(tmp_path / "job.log"), "complete": "^done$"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }


def _fast_job_completes(tmp_path: Path, tag: str, checker: Checker) -> None:
    """Run a job that writes its log whole and is over before ``checker``'s first check; it
    completes within 3 checks."""
    subprocess.run(
        [sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write('working\\ndone\\n')",
         str(tmp_path / "job.log"), "--tag", tag],
        check=True,
    )  # fmt: skip
    states = []
    while (not states or states[-1] != "complete") and len(states) < 8:
        states.append(checker.check().state.value)
        time.sleep(0.3)
    assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
    assert len(states) <= 3, states


def test_a_wait_started_just_before_a_fast_job_completes(tmp_path: Path, host) -> None:
    """`crosscheck wait` begins, then a job runs and is over before the first check: its log,
    born after the watch began, is its run's (the watch's own start is a run start). Before:
    `unknown` ("no run start is known"). Locally and over SSH (the host's clock placed by the
    first probe's round trip, which the kept shell's start, ~2 s of root's ~/.bashrc here, no
    longer widens: the log born 50 ms after the watch began)."""
    tag = f"fast-{time.time_ns()}"
    checker = Checker(stage_from_dict(_fast_stage(tmp_path, tag)), host=host)
    time.sleep(0.05)
    _fast_job_completes(tmp_path, tag, checker)


def test_on_this_machine_the_watchs_start_is_not_moved_by_its_first_probes_latency(tmp_path: Path) -> None:
    """ML engineer's trial (notes/ml44.md, item 1): the watch's start was moved onto the host's
    clock by the first probe's time until it read the clock (15-30 ms under load) on this
    machine too, where one clock reads both: a log born 12 ms after `wait` began read as born
    before it, and a job begun just after `wait` and over before its first check never
    completed (5 of 6 tries)."""
    from sensors import LocalHost
    from sensors._base.probe import Meta

    checker = Checker(stage_from_dict(_fast_stage(tmp_path, "t")), host=LocalHost(), began=1_000.0)
    checker.sent(1_000.5, 1_000.6)
    meta = Meta(
        now=1_000.53, uptime=1.0, btime=0, boot_id="b", clk_tck=100, script_pid=1, hostname="h",
        uptime_virtualised=False,
    )  # fmt: skip
    assert checker._host_began(meta) == 1_000.0


def test_a_job_begun_at_once_after_the_watch_and_over_before_its_first_check_completes(
    tmp_path: Path,
) -> None:
    """The same on the real machine: the job starts as soon as the watch is made (its log born
    a Python start, ~20-40 ms, after it), with no pause the first probe's latency fits in."""
    tag = f"fast0-{time.time_ns()}"
    checker = Checker(stage_from_dict(_fast_stage(tmp_path, tag)))
    _fast_job_completes(tmp_path, tag, checker)


def test_a_log_older_than_the_watch_is_not_its_run(tmp_path: Path, host) -> None:
    """The other side: the log (its completion line in it) was there before the watch began,
    and no process is seen: an earlier run's, or this one's, cannot be told: never complete."""
    (tmp_path / "job.log").write_text("working\ndone\n")
    time.sleep(0.1)
    checker = Checker(stage_from_dict(_fast_stage(tmp_path, f"old-{time.time_ns()}")), host=host)
    states = []
    for _ in range(4):
        states.append(checker.check().state.value)
        time.sleep(0.3)
    assert "complete" not in states, (states, checker.last.reasons if checker.last else None)


def test_a_since_given_as_a_time_is_placed_on_the_hosts_clock() -> None:
    """``--since TIME`` is on the checking machine's clock; a host's file times are on its
    own. The start is placed on the host's clock by the offset the probe's round trip
    measured, as an interval: the least and the most the host's clock can be ahead (its clock
    read after the probe was sent, before the answer came back). A node 60 s ahead no longer
    dates run 1's lines, stamped 60 s ahead, after a since placed between them and run 2
    (issue 35, two hosts with a skewed clock); a node 60 s behind no longer dates run 2's
    lines before it (a gate that would not open for a minute). A duration is taken before the
    host's own clock's now: exact."""
    from sensors._run.run import parse_since

    at = parse_since("@1796104800")
    assert at is not None

    # Ahead by 60.1 to 60.3 s: the start is 60.2 s later on the host's clock, give or take 0.1 s.
    def span(moment):
        return round(moment.earliest, 6), round(moment.latest, 6)

    assert span(at.resolve(now=1796105000.0, ahead=(60.1, 60.3))) == (1796104860.1, 1796104860.3)
    assert span(at.resolve(now=1796105000.0, ahead=(-60.3, -60.1))) == (1796104739.7, 1796104739.9)
    assert span(at.resolve(now=1796105000.0)) == (1796104800.0, 1796104800.0)
    # Agreeing within the round trip: one clock (NTP), not a round trip's worth of doubt.
    assert span(at.resolve(now=1796105000.0, ahead=(-0.2, 0.3))) == (1796104800.0, 1796104800.0)
    ago = parse_since("90s")
    assert ago is not None
    assert span(ago.resolve(now=1796105000.0, ahead=(60.1, 60.3))) == (1796104910.0, 1796104910.0)


SINCE_JOB = (
    "import sys, time\nf = open(sys.argv[1], 'a')\nfor i in range(int(sys.argv[2])):\n"
    "    f.write(f'step {i}\\n'); f.flush(); time.sleep(0.3)\nf.write('Extraction complete\\n'); f.flush()\n"
)


def test_a_since_inside_an_earlier_runs_life_is_not_completed_by_it(tmp_path: Path, host) -> None:
    """A relaunch while the old run is still finishing: `--since` is now, the old run's
    process began a second before it. It writes its completion line and exits: that line is
    the old run's (written while only it was at work), never this run's; the new run's own
    line completes the stage. Before: complete on the old run's line."""
    tag = f"since-in-{time.time_ns()}"
    log = tmp_path / "job.log"
    old = subprocess.Popen([sys.executable, "-c", SINCE_JOB, str(log), "8", "--tag", tag])
    time.sleep(1.0)
    doc = {
        "stage": "s",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    checker = Checker(stage_from_dict(doc), since=time.time(), host=host)
    states = []
    while old.poll() is None or len(states) < 12:
        states.append(checker.check().state.value)
        time.sleep(0.3)
    assert "complete" not in states, (states, checker.last.reasons if checker.last else None)
    assert "earlier run" in checker.last.readings["log"].detail, checker.last.readings["log"].detail
    new = subprocess.Popen([sys.executable, "-c", SINCE_JOB, str(log), "2", "--tag", tag])
    new.wait(20)
    for _ in range(10):
        time.sleep(0.3)
        if checker.check().state.value == "complete":
            break
    assert checker.last.state.value == "complete", checker.last.reasons


LAST_OUTPUT_AFTER_LINE = textwrap.dedent(
    """
    import sys, time
    out = sys.argv[2]
    with open(sys.argv[1], "w") as log:
        for i in range(3):
            time.sleep(0.1)  # the work of a shard
            open(f"{out}/s{i}.npy", "w").write("x")
            log.write(f"[{i}] extracted\\n"); log.flush()
        log.write("Extraction complete\\n"); log.flush()
        time.sleep(float(sys.argv[3]))
        open(f"{out}/sample_lengths.json", "w").write("{}")  # post-processing's own output
    """
)


def test_an_output_written_after_the_line_before_the_jobs_end_is_its_own(tmp_path: Path) -> None:
    """The job logs its completion line, then writes one more output (post-processing) and
    exits between two checks. Before: the output, changed after the last check that saw the
    job alive, was 'modified after the log' for good (`unknown`: a later run's?). Now the
    job's end is seen (a pidfd): changed before it, the output is the job's own, and the stage
    completes within 3 checks of the exit. The checks are driven by hand so that none falls
    between the output's write and the exit."""
    tag = f"lastout-{time.time_ns()}"
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "job.log"
    doc = {
        "stage": "lastout",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "outputs": {"files": str(out), "pattern": "*", "expected": 4},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    job = subprocess.Popen(
        [sys.executable, "-c", LAST_OUTPUT_AFTER_LINE, str(log), str(out), "1.0", "--tag", tag]
    )
    while b"Extraction complete" not in (log.read_bytes() if log.exists() else b""):
        assert job.poll() is None
        time.sleep(0.02)
    checker = Checker(stage_from_dict(doc))
    assert checker.check().state.value == "running"  # alive: its line, 3 of 4 outputs
    job.wait(20)
    exited = time.monotonic()
    states = []
    while (not states or states[-1] != "complete") and len(states) < 8:
        time.sleep(0.3)
        states.append(checker.check().state.value)
    assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
    assert len(states) <= 3, states
    print(f"exit to complete: {time.monotonic() - exited:.2f} s")


OUTPUTS_THEN_LINE = textwrap.dedent(
    """
    import os, sys, time
    out = sys.argv[2]
    for i in range(3):
        with open(os.path.join(out, f".part-{i}.tmp"), "w") as f:
            f.write("x" * 100)
        os.rename(os.path.join(out, f".part-{i}.tmp"), os.path.join(out, f"part-{i}.npy"))
    with open(sys.argv[1], "w") as log:
        print("Extraction complete", file=log, flush=True)
        print("wandb: Waiting for W&B process to finish...", file=log, flush=True)
        time.sleep(float(sys.argv[3]))
        print("wandb: Synced run abc", file=log, flush=True)
    """
)


def test_outputs_are_weighed_against_the_line_at_the_first_check_after_the_end_was_seen(
    tmp_path: Path, host
) -> None:
    """ML user: outputs written (temp name, then renamed), the completion line, a `wandb:
    Synced` line, exit 0; the watch saw the job alive after its line. Its end was seen (the
    exit watch) before the next check, yet that check did not ask when the outputs last
    changed (the job was alive at the check before) and said "confirming none changed after
    the log's completion line": complete came 3 checks after the exit, 89 s at the default
    30 s interval. Asked at the first check after the end was seen, it comes at the second
    (settle 2)."""
    tag = f"weigh-{time.time_ns()}"
    out = tmp_path / "out"
    out.mkdir()
    log = tmp_path / "job.log"
    doc = {
        "stage": "weigh",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "outputs": {"files": str(out), "pattern": "part-*.npy", "expected": 3},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    job = subprocess.Popen([sys.executable, "-c", OUTPUTS_THEN_LINE, str(log), str(out), "0.6", "--tag", tag])
    while b"wandb: Waiting" not in (log.read_bytes() if log.exists() else b""):
        assert job.poll() is None
        time.sleep(0.02)
    checker = Checker(stage_from_dict(doc), host=host)
    assert checker.check().state.value == "running"  # alive after its line
    job.wait(20)
    time.sleep(0.4)  # the exit watch sees the end within a poll
    states = []
    while (not states or states[-1] != "complete") and len(states) < 6:
        states.append(checker.check().state.value)
        time.sleep(0.3)
    assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
    assert len(states) <= 2, (states, checker.last.reasons if checker.last else None)


# The job's last words and its exit inside one probe: once its completion line is written it
# waits for the probe to have read its log (inotify IN_CLOSE_NOWRITE: the probe reads /proc
# first, so it has found the job alive), then writes a teardown line and exits at once,
# before the watch can open its pidfd. Its parent reaps it at once (as a shell does).
_ENDS_INSIDE_THE_PROBE = textwrap.dedent(
    """
    import ctypes, os, sys, time
    log = sys.argv[1]
    with open(log, "a") as f:
        f.write("step 0\\n"); f.flush()
        time.sleep(0.6)
        f.write("Extraction complete\\n"); f.flush()
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init()
        assert fd >= 0 and libc.inotify_add_watch(fd, log.encode(), 0x10) >= 0  # IN_CLOSE_NOWRITE
        open(sys.argv[2], "w").close()
        os.read(fd, 4096)
        f.write("wandb: Synced run abc\\n"); f.flush()
    os._exit(0)
    """
)


def test_a_job_whose_last_words_and_exit_fall_inside_one_probe_completes(tmp_path: Path) -> None:
    """Found alive by a probe's process table, the job writes its teardown line and exits
    while the same probe reads its log (before the watch could hold it): the issue's "a job
    whose end falls inside one probe", made certain here (test_scenarios_35's short jobs
    meet it by chance). Text written by the probe's end, found with the writer alive, is the
    writer's: complete within 3 checks of the exit."""
    tag = f"inside-probe-{time.time_ns()}"
    log, lined = tmp_path / "job.log", tmp_path / "lined"
    job = subprocess.Popen([sys.executable, "-c", _ENDS_INSIDE_THE_PROBE, str(log), str(lined), "--tag", tag])
    checker = Checker(
        stage_from_dict(
            {
                "stage": "inside",
                "host": "local",
                "process": {"match": f"--tag {tag}$"},
                "log": {"path": str(log), "complete": "^Extraction complete"},
                "policy": {"interval": "300ms", "exit_grace": "300ms"},
            }
        )
    )
    try:
        deadline = time.monotonic() + 10
        while not lined.exists():  # the line written (the log itself not opened here)
            assert time.monotonic() < deadline
            assert checker.check().state.value == "running"
            time.sleep(0.1)
        checker.check()  # the probe that finds it alive reads the log: it ends inside it
        job.wait(10)
        exited = time.monotonic()
        states = []
        for _ in range(4):
            states.append(checker.check().state.value)
            if states[-1] == "complete":
                break
            time.sleep(0.3)
        assert states[-1] == "complete", (states, checker.last.reasons if checker.last else None)
        print(f"complete {time.monotonic() - exited:.2f} s after the exit, at check {len(states)}")
    finally:
        job.kill()
        job.wait()
