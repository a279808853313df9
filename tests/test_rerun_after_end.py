"""A job run again after the watch saw it end (multi-host fuzzer seed 50587, issue 35).

Run 1 writes an error line and exits 1: the watch says ``failed``, rightly. The operator runs
the job again at once. Before: a re-run counted as a new run only where its first process
began RERUN_START_GAP (2 s) after the run the watch knew, so a re-run begun within 2 s of
run 1's start stayed run 1 for good: over two hosts, run 1's error line in a worker's log
failed run 2, and the stage never opened. The 2 s is the precision of two starts read against different boot clocks; here the
watch has more: a check that found every process of run 1 gone, and a process begun after
that check's /proc scan cannot be run 1's. That re-run is a new run, and its own log words
decide it.

On one host these three pass at 7a0f186 as well (run 2's own completion line, after run 1's
error line, completed it there, and a process seen after the line kept the killed re-run from
completing): they pin both sides of the rule where the single-host verdict already held. The
history that failed before the rule is the one over two hosts, where a worker needs no line
of its own: tests/test_fuzz_span_routes.py, seed 50587.

The other side: a process begun while run 1 was still at work (no check in between found the
job gone) is not taken for a new run by that rule: run 1's error line still fails the run.
(An error line followed by the completion line, both this run's, is complete as before: a
job that logged an error and went on to finish.)

Real processes, a real log, run locally and over the test sshd; checks driven by hand.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sensors import Checker, State, stage_from_dict

#: A job that writes its words when told (a line on stdin), then exits with the given status.
JOB = textwrap.dedent(
    """
    import sys
    for line in sys.stdin:
        cmd, _, rest = line.rstrip("\\n").partition(" ")
        if cmd == "w":
            with open(sys.argv[1], "a") as f:
                f.write(rest + "\\n")
        elif cmd == "x":
            sys.exit(int(rest))
        sys.stdout.write("ok\\n")
        sys.stdout.flush()
    """
)


class _Job:
    def __init__(self, log: Path, tag: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", JOB, str(log), "--tag", tag],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def write(self, text: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"w {text}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "ok\n"

    def exit(self, status: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"x {status}\n")
        self.proc.stdin.flush()
        self.proc.wait(10)


def _checker(tmp_path: Path, tag: str, host) -> Checker:
    doc = {
        "stage": "rerun",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(tmp_path / "job.log"), "complete": "^rank done$", "error": "^ERROR"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    return Checker(stage_from_dict(doc), host=host)


def test_a_rerun_begun_at_once_after_the_watch_saw_run_1_end_is_its_own_run(tmp_path: Path, host) -> None:
    tag = f"rerun-{time.time_ns()}"
    log = tmp_path / "job.log"
    checker = _checker(tmp_path, tag, host)
    assert checker.check().state is not State.COMPLETE  # the job has not started
    run_1 = _Job(log, tag)
    assert checker.check().state is State.RUNNING
    run_1.write("ERROR rank 1: CUDA out of memory")
    run_1.exit(1)
    failed = checker.check()
    assert failed.state is State.FAILED, failed.reasons
    # Run again at once: well within RERUN_START_GAP of run 1's start.
    run_2 = _Job(log, tag)
    running = checker.check()
    assert running.state is State.RUNNING, running.reasons
    run_2.write("step 1")
    run_2.write("rank done")
    run_2.exit(0)
    exited = time.monotonic()
    states = []
    for _ in range(6):
        time.sleep(0.35)
        verdict = checker.check()
        states.append(verdict.state)
        if verdict.state is State.COMPLETE:
            break
    assert states[-1] is State.COMPLETE, (states, checker.last.reasons if checker.last else None)
    assert len(states) <= 3, states  # within 3 checks of the exit
    assert time.monotonic() - exited < 3.0
    assert checker.last is not None
    assert "ERROR" not in " ".join(checker.last.reasons)  # run 1's error line is not this run's


def test_a_process_begun_while_run_1_was_at_work_is_not_a_new_run(tmp_path: Path, host) -> None:
    """No check between found the job gone: the second process may be run 1's own (a worker
    it started, which ends without a word), and run 1's error line is this run's: ``failed``.
    Taken for a new run, the log would hold nothing of it and the error would be lost."""
    tag = f"rerun-{time.time_ns()}"
    log = tmp_path / "job.log"
    checker = _checker(tmp_path, tag, host)
    first = _Job(log, tag)
    assert checker.check().state is State.RUNNING
    second = _Job(log, tag)  # begun while the first is at work
    first.write("ERROR rank 1: CUDA out of memory")
    first.exit(1)
    assert checker.check().state is not State.COMPLETE
    second.exit(0)
    states = []
    for _ in range(4):
        time.sleep(0.35)
        states.append(checker.check().state)
    assert State.COMPLETE not in states, states
    assert states[-1] is State.FAILED, (states, checker.last.reasons if checker.last else None)


def test_a_rerun_killed_without_a_word_after_run_1_completed_is_not_complete(tmp_path: Path, host) -> None:
    """The other side of the same rule: run 1 (under 2 s) writes its line and exits 0, the
    watch says ``complete``; the job is run again at once, seen at work, and killed before a
    word. Taken for run 1 (begun within RERUN_START_GAP of it), run 1's line completed the
    re-run. It is a new run: no line of its own, never complete."""
    tag = f"rerun-{time.time_ns()}"
    log = tmp_path / "job.log"
    checker = _checker(tmp_path, tag, host)
    assert checker.check().state is not State.COMPLETE
    run_1 = _Job(log, tag)
    assert checker.check().state is State.RUNNING
    run_1.write("rank done")
    run_1.exit(0)
    states = []
    for _ in range(6):
        time.sleep(0.35)
        states.append(checker.check().state)
        if states[-1] is State.COMPLETE:
            break
    assert states[-1] is State.COMPLETE, (states, checker.last.reasons if checker.last else None)
    run_2 = _Job(log, tag)
    assert checker.check().state is State.RUNNING
    run_2.proc.kill()
    run_2.proc.wait(10)
    after = []
    for _ in range(4):
        time.sleep(0.35)
        after.append(checker.check().state)
    assert State.COMPLETE not in after, (after, checker.last.reasons if checker.last else None)
