"""ML engineer, common launches watched late (the watch begun during the job's
post-processing, its completion line already in the log), and a two-host job's chief saving
alone after the other ranks exited.

A log appended to (``>> log``, ``tee -a``, Python's ``logging`` in its default mode ``"a"``)
cannot show which run wrote a completion line found before the watch began: the wait ends
``stuck`` (exit 5) soon after the job's exit. What it says must be true: a fresh log opened
``>> log`` was said to be "written both before and after the run began" when it was born with
the job; and its fix must be one the user can apply: the advice named only ``> log``, and a
``tee -a`` or ``logging`` user had to translate it (measured: both forms it now names complete
when watched as late).
"""

from __future__ import annotations

import shlex
import time
import uuid
from pathlib import Path

import pytest

import tests.test_scenarios_35 as sc
from tests.test_scenarios_35 import Watch, _checked_at, _job_argv, _q, _shell, _stage, _stage_file


def _post_processing(log: Path, job: sc.Exit, lines: int = 1) -> None:
    """Until the job's ``lines``-th post-processing line is in the log (its completion line
    before it), the job still at work."""
    deadline = time.monotonic() + 20
    while (log.read_bytes() if log.exists() else b"").count(b"building sample_lengths") < lines:
        assert time.monotonic() < deadline and job.at is None
        time.sleep(0.05)


def _stuck_soon(watch: Watch, exited: float) -> dict:
    """The wait ended stuck (exit 5) within 3 s of the job's exit; its last verdict."""
    rc = watch.end()
    last = watch.lines[-1][1]
    assert rc == 5 and last["stuck"] is not None, (rc, watch.story())
    assert "complete" not in watch.states(), watch.story()
    assert _checked_at(last) - exited < 3.0, (_checked_at(last) - exited, watch.story())
    return last


def test_a_first_run_appending_to_a_new_log_watched_late_is_stuck_and_says_why_truly(tmp_path: Path) -> None:
    """`nohup job >> log` on a log that did not exist: born within the start's precision of
    the job, through an appending description (the kernel cannot show it began the log). The
    reason says so, not that the log "was written both before and after the run began"."""
    tag = f"gtgt-new-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    # 4 s of post-processing: the watch's first check (a CLI start, slow under load) sees it.
    argv = _q(_job_argv(tmp_path, tag, "stdout", after="postproc", post=4.0))
    job = _shell(f"nohup {argv} >> {shlex.quote(str(log))} 2>&1 &", tag)
    _post_processing(log, job)
    watch = Watch(stage, tmp_path, timeout="30s")
    assert watch.first()["verdict"] == "running"
    last = _stuck_soon(watch, job.wait())
    why = next(r for r in last["reasons"] if r.startswith("log unknown"))
    assert "written both before" not in why, why
    assert "born too near the run's start to tell which came first" in why, why
    assert "`job > log`, not `>> log`" in last["stuck"]["fix"], last["stuck"]


#: A re-run watched late, launched as people launch: the job's mode (``_job_argv``; logging-w
#: is Python's logging with ``filemode="w"``), its shell line, and whether it completes.
_RERUNS = {
    "tee -a": ("stdout", "{argv} 2>&1 | tee -a {log} > /dev/null &", False),
    "logging": ("logging", "{argv} > /dev/null 2>&1 &", False),
    "tee": ("stdout", "{argv} 2>&1 | tee {log} > /dev/null &", True),
    "logging-w": ("logging-w", "{argv} > /dev/null 2>&1 &", True),
}


@pytest.mark.parametrize("launch", sorted(_RERUNS))
def test_a_rerun_watched_late_completes_only_on_a_log_it_began_and_the_fix_names_that_form(
    tmp_path: Path, launch: str
) -> None:
    mode, line, completes = _RERUNS[launch]
    tag = f"rerun-{launch.replace(' ', '')}-{uuid.uuid4().hex[:8]}"
    stage = _stage_file(tmp_path, _stage(tmp_path, tag))
    log = tmp_path / "job.log"
    argv = _job_argv(
        tmp_path, tag, "logging" if mode.startswith("logging") else mode, after="postproc", post=0.2
    )
    if mode == "logging-w":
        (tmp_path / "job.py").write_text(
            sc.JOB.replace('format="%(asctime)s', 'filemode="w", format="%(asctime)s')
        )
    _shell(line.format(argv=_q(argv), log=shlex.quote(str(log))), tag).wait()
    time.sleep(0.3)
    for old in (tmp_path / "out").iterdir():  # the re-run writes its own outputs
        old.unlink()
    # This run post-processes until the watch's first check is back (LOG.hold, see sc.JOB):
    # the watch begins then. A fixed 2 s did not hold under make test's four workers: the
    # watch's first check came after the job's end.
    argv[7] = "0.5"
    hold = Path(f"{log}.hold")
    hold.touch()
    job = _shell(line.format(argv=_q(argv), log=shlex.quote(str(log))), tag)
    appends = not completes
    _post_processing(log, job, lines=2 if appends else 1)
    watch = Watch(stage, tmp_path, timeout="30s")
    first = watch.first()
    hold.unlink()
    assert first["verdict"] == "running", first
    if completes:
        sc._completes(watch, job.wait(), f"re-run/{launch}")
        return
    fix = _stuck_soon(watch, job.wait())["stuck"]["fix"]
    assert "`tee log`, not `tee -a`" in fix and 'logging with `filemode="w"`' in fix, fix


# --------------------------------------------------------------------------- over two sshd

#: A rank of a two-node job (``JOB TAG --node N --local_rank R DIR``): it works (a step line
#: from each node's rank 0, a little CPU) until DIR/finish; with DIR/quiet it waits meanwhile
#: (little CPU, no line: data loading from a slow store). At DIR/finish ("SECONDS HOW") global
#: rank 0 alone saves for SECONDS (``write``: 64 KiB every 0.5 s, a checkpoint to slow
#: storage) then writes the outputs; the other ranks exit 0, node 1's rank 0 once the outputs
#: are there, each node's rank 0 with its line.
SPAN_JOB = """
import os, sys, time
tag, _, node, _, rank, folder = sys.argv[1:7]
node, rank = int(node), int(rank)
log = os.path.join(folder, f"node{node}.log")
def has(name): return os.path.exists(os.path.join(folder, name))
step = 0
while not has("finish"):
    if has("quiet"):
        time.sleep(0.1); continue
    if rank == 0:
        with open(log, "a") as f: f.write(f"step {step}\\n")
    step += 1
    end = time.process_time() + 0.01
    while time.process_time() < end: pass
    time.sleep(0.1)
if node == 0 and rank == 0:
    secs, how = open(os.path.join(folder, "finish")).read().split()
    until = time.monotonic() + float(secs)
    with open(os.path.join(folder, "ckpt.bin"), "wb") as ckpt:
        while time.monotonic() < until:
            if how == "write":
                ckpt.write(b"x" * 65536); ckpt.flush()
            time.sleep(0.5)
    os.makedirs(os.path.join(folder, "out"), exist_ok=True)
    for k in range(2):
        with open(os.path.join(folder, "out", f"part-{k}.bin"), "wb") as f: f.write(b"x")
if rank == 0:
    while node != 0 and not has("out/part-1.bin"): time.sleep(0.02)
    with open(log, "a") as f: f.write(f"node {node} done\\n")
"""


@pytest.mark.parametrize("case", ["chief saves alone", "all ranks quiet"])
def test_two_hosts_slow_work_with_little_cpu_and_no_log_line_is_not_failed(
    tmp_path: Path, hosts, case: str
) -> None:
    """Slow work with little CPU and no log line for 3 x stall_after is not a hung collective:
    global rank 0 writing a checkpoint slowly after the other ranks on both nodes exited 0
    (rank 1 of each node gone, its I/O the progress), or every rank alive and quiet
    (``stalled`` at most: no rank lost). Seen: both complete, never ``failed``."""
    import subprocess
    import sys

    import yaml

    from tests.test_span import _alive_everywhere, _wait

    folder = tmp_path / "job"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "job.py").write_text(SPAN_JOB)
    tag = f"ml6span-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(folder / "job.py"),
                tag,
                "--node",
                str(n),
                "--local_rank",
                str(r),
                str(folder),
            ],
            start_new_session=True,
        )
        for n in range(2)
        for r in range(2)
    ]
    stage = {
        "stage": "train",
        "hosts": [h.sshd.spec() for h in hosts],
        "process": {"match": f"{tag} --node {{node}} ", "per_host": 2},
        "log": {"path": str(folder / "node{node}.log"), "complete": r"node \d+ done", "progress": r"^step"},
        "outputs": {"files": str(folder / "out"), "expected": 2},
        "policy": {"interval": "300ms", "settle": 1, "exit_grace": "300ms", "stall_after": "2s"},
    }
    stage_file = tmp_path / "train.yaml"
    stage_file.write_text(yaml.safe_dump(stage, sort_keys=False))
    try:
        waiting = _wait(stage_file, "40s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        if case == "all ranks quiet":
            (folder / "quiet").touch()
            time.sleep(6)
            (folder / "quiet").unlink()
            time.sleep(1)
            (folder / "finish").write_text("0 sleep")
        else:
            (folder / "finish").write_text("6 write")
        for proc in procs:
            assert proc.wait(30) == 0
        rc = waiting.end()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    states = [v["verdict"] for v in waiting.verdicts]
    assert "failed" not in states and rc == 0, [
        (v.get("checked_at"), v["verdict"], v["reasons"][:3]) for v in waiting.verdicts
    ]
    assert states[-1] == "complete"
    if case == "all ranks quiet":
        assert "stalled" in states, states  # said, and not taken for a failure
