"""Adversary of issue 35's run-binding rules ("one model of a run"): histories where a rule
gives a false ``complete`` (or a false ``failed``), and a few where a rule holds where a hole
was expected. Real processes and files; ``Checker`` checks driven by hand.

Found (each test fails at the commit it was written against, 689ea36):

- rule 2, a zombie's pidfd: a writer seen alive by the probe, ended (not reaped) before the
  watch opened its pidfd, is taken for alive until the exit thread's last clean poll: a
  later run's banner written in between is the writer's (false complete; new in f0cccb2);
- rule 1, a log seeded with the last run's as the re-run starts (``cp last.log job.log;
  exec job >> job.log``): born with the job, its earlier completion line is the job's (false
  complete; new in d97ca23);
- rule 5, an earlier run's worker forked after --since is not an earlier run's; and a line
  written while an earlier and a this-run process were both at work is this run's (false
  complete; both already so at 19bc457: rule 5 leaves them open);
- rule 2, the job's own child writing after the job's process ended: unknown for good (a
  stuck unknown, already so at 19bc457).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sensors import Checker, stage_from_dict
from sensors._base.tolerances import PROC_START_TICKS

# A writer that, once its completion line is written, waits for the probe to open its log
# (inotify IN_OPEN: the probe reads /proc before the log) and exits at once: alive when the
# probe read the process table, gone before the watch registers its pidfd. Its parent does
# not reap it at once (a supervisor polling its workers, as torchrun's agent does): a zombie.
_OPENED_THEN_EXIT = textwrap.dedent(
    """
    import ctypes, os, sys, time
    log = sys.argv[1]
    with open(log, "a") as f:
        f.write("step 0\\n"); f.flush()
        time.sleep(1.3)
        f.write("Extraction complete\\n"); f.flush()
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init()
    assert fd >= 0 and libc.inotify_add_watch(fd, log.encode(), 0x20) >= 0  # IN_OPEN
    open(sys.argv[2], "w").close()
    os.read(fd, 4096)
    os._exit(0)
    """
)

# A later run (never matched by the stage, over before the next check): it appends its
# banner the moment the writer has ended.
_AFTER_ITS_END = textwrap.dedent(
    """
    import os, select, sys
    fd = os.pidfd_open(int(sys.argv[2]))
    select.select([fd], [], [])
    with open(sys.argv[1], "a") as f:
        f.write("starting run 2\\n")
    """
)


def _wait_for(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, path
        time.sleep(0.02)


def test_a_writer_that_ended_before_its_pidfd_was_opened_is_not_known_alive_after_its_end(
    tmp_path: Path,
) -> None:
    """Rule 2 (the end seen locally). The job is first seen alive by the probe's process
    table, ends while the same probe reads its log and outputs, and is not reaped at once (a
    zombie: pidfd_open and /proc/PID/stat still answer, with the same start ticks). A later
    run appends its banner right after that end. The watch's pidfd, opened after the probe
    returned, is readable at once; its 'last known alive' must not be later than the end."""
    tag = f"zombie-end-{time.time_ns()}"
    log, ready = tmp_path / "job.log", tmp_path / "ready"
    out = tmp_path / "out"
    out.mkdir()
    for i in range(20000):  # the probe lists them after the log: the writer's end falls inside it
        (out / f"s{i}.npy").touch()
    # Another stage of this machine keeps the exit thread polling every 5 ms.
    other_tag = f"other-{time.time_ns()}"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--tag", other_tag])
    writer = subprocess.Popen([sys.executable, "-c", _OPENED_THEN_EXIT, str(log), str(ready), "--tag", tag])
    try:
        other_checker = Checker(
            stage_from_dict(
                {
                    "stage": "other",
                    "host": "local",
                    "process": {"match": f"--tag {other_tag}$"},
                    "policy": {"interval": "300ms"},
                }
            )
        )
        time.sleep(0.3)
        other_checker.check()
        _wait_for(ready)
        later = subprocess.Popen([sys.executable, "-c", _AFTER_ITS_END, str(log), str(writer.pid)])
        time.sleep(0.3)  # the later run waits on the writer's pidfd
        checker = Checker(
            stage_from_dict(
                {
                    "stage": "zombie",
                    "host": "local",
                    "process": {"match": f"--tag {tag}$"},
                    "log": {"path": str(log), "complete": "^Extraction complete"},
                    "outputs": {"files": str(out), "pattern": "*.npy", "expected": 20000},
                    "policy": {"interval": "300ms", "exit_grace": "300ms"},
                }
            )
        )
        first = checker.check()
        later.wait(10)
        assert b"starting run 2" in log.read_bytes()
        writer.wait(10)  # reaped only now
        states = [first.state.value]
        for _ in range(8):
            time.sleep(0.3)
            states.append(checker.check().state.value)
        assert "complete" not in states, (states, checker.last.reasons if checker.last else None)
    finally:
        for p in (other, writer):
            p.kill()
            p.wait()


# An earlier run's process: it forks its worker (same command line: multiprocessing's fork)
# after the given --since; the worker writes the completion line and exits, then the parent.
_FORKS_LATE = textwrap.dedent(
    """
    import os, sys, time
    time.sleep(float(sys.argv[2]))
    pid = os.fork()
    if pid == 0:
        with open(sys.argv[1], "a") as f:
            for i in range(3):
                f.write(f"step {i}\\n"); f.flush(); time.sleep(0.3)
            f.write("Extraction complete\\n"); f.flush()
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(0.2)
    """
)


@pytest.mark.parametrize(
    ("how", "writes"),
    [
        # The seeded line undated (the re-run's line after it), the log born within the job's
        # start precision: told since the kernel is asked who began the log (the job appends:
        # `>>` begins nothing).
        ("cp", "resuming"),
        # The seeded line is the log's last, dated by its mtime: the job began too near it
        # to be known to precede it (undatable), so it is not taken as the job's.
        ("cp", "nothing"),
        ("mv", "resuming"),
        ("mv", "nothing"),
    ],
)
def test_a_log_seeded_with_the_last_runs_log_as_the_rerun_starts_is_not_its_own(
    tmp_path: Path, writes: str, how: str
) -> None:
    """Rule 1 (a log born with the job). A re-run resumes: its launcher seeds the new log
    with the last run's (`cp last.log job.log; exec job >> job.log`), so the log is born
    within a few ms of the job's start, yet every line in it is the last run's, its
    completion line among them. The re-run appends a line (or nothing) and is killed (the
    OOM killer: no traceback). Never complete: the re-run wrote no completion line. (`mv`
    keeps the last log's birth: that one holds; `cp` gives it a new one.)"""
    import shlex

    tag = f"seeded-{time.time_ns()}"
    last, log = tmp_path / "last.log", tmp_path / "job.log"
    last.write_text("step 0\nstep 1\nExtraction complete\n")
    time.sleep(1.2)
    code = (
        "import sys, time\n"
        + ("print('resuming from step 1', flush=True)\n" if writes == "resuming" else "")
        + "time.sleep(60)\n"
    )
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-c", code, "--tag", tag])
    job = subprocess.Popen(
        [
            "sh",
            "-c",
            f"{how} {shlex.quote(str(last))} {shlex.quote(str(log))}; exec {cmd} >> {shlex.quote(str(log))}",
        ]
    )
    doc = {
        "stage": "seeded",
        "host": "local",
        "process": {"match": f"--tag {tag}$"},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "policy": {"interval": "300ms", "exit_grace": "300ms"},
    }
    try:
        time.sleep(0.5)
        if how == "cp":
            # The premise: `cp` gave the log its birth within /proc's precision of the job's
            # start. Under a loaded machine's scheduling `cp` can run later than that: the log
            # is then born clearly after the job began, by the job's own command, which no
            # evidence tells from a job whose first act writes those lines (seen once under
            # make test with 4 workers: complete). That is another history, not this one.
            late = _born(log) - _started(job.pid)
            if late >= PROC_START_TICKS:
                pytest.skip(
                    f"premise not met under this load: the log was born {late:.3f}s after the job began"
                )
        checker = Checker(stage_from_dict(doc))
        states = []
        for _ in range(2):
            states.append(checker.check().state.value)
            time.sleep(0.3)
        job.kill()
        job.wait(10)
        for _ in range(8):
            time.sleep(0.3)
            states.append(checker.check().state.value)
        assert "complete" not in states, (states, checker.last.reasons if checker.last else None)
    finally:
        job.kill()
        job.wait()


def _born(path: Path) -> float:
    """A file's birth, as this host's statx gives it."""
    return float(subprocess.check_output(["stat", "-c", "%.9W", str(path)], text=True))


def _started(pid: int) -> float:
    """A process's start on this host's clock, from /proc's ticks (a tick or two off)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


# The job writes its completion line and leaves an uploader behind (a fork: the same command
# line), which writes its summary after the job's own process has ended.
_LEAVES_A_CHILD = textwrap.dedent(
    """
    import os, sys, time
    with open(sys.argv[1], "a") as f:
        for i in range(3):
            f.write(f"step {i}\\n"); f.flush(); time.sleep(0.3)
        f.write("Extraction complete\\n"); f.flush()
        if os.fork() == 0:
            time.sleep(1.0)
            f.write("uploaded 3 files\\n"); f.flush()
            os._exit(0)
    """
)


# A plain writer: its steps, then its completion line, from its own process.
_WRITES = (
    "import sys, time\nf = open(sys.argv[1], 'a')\nfor i in range(int(sys.argv[2])):\n"
    "    f.write(f'step {i}\\n'); f.flush(); time.sleep(0.3)\nf.write('Extraction complete\\n'); f.flush()\n"
)
