"""Issue 35 as a user meets it: realistic ML jobs, started the way people start them, watched
with ``crosscheck wait`` at a 1 s interval, locally and over the test sshd.

The job looks like an extraction/training script: Python's ``logging`` to a file of its own
and ``print`` to a stdout the shell redirects (``nohup python job.py > job.log 2>&1 &``),
tqdm-like progress on stderr (``[3/6]``, ``100%|####| 6/6``), DataLoader-like workers forked
with ``multiprocessing``, outputs written to a temp name and renamed (the last one by a
background writer, after the completion line), ``Extraction complete: N files``, then the tail
people see: ``Saving index...`` and an index file, ``wandb: Synced run ...``, a warning at
exit. A torchrun-like parent runs 2 child ranks. Failing, SIGKILLed and re-run jobs too.

Each must-complete test measures the seconds from the job's exit (a pidfd on the PID the
shell printed with ``$!``) to the watch's ``complete`` and asserts it came within 3 checks of
the exit; a must-not-complete test asserts no check said ``complete``; a failing job must end
``failed``. Every test prints one row ``CASE | WHERE | S s | VERDICT | REASON`` (``pytest -s``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import shutil
import signal
import subprocess
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.test_scenarios_35 import CLI, PYTHON, Exit, Watch, _env, _stage_file

# The job. Arguments: --log FILE (logging's file) --out DIR --n N --tag TAG, and
# --fail K (raise after K files), --post S (post-processing after the line), --rank R
# (a child rank of the torchrun-like parent), --ranks N (be that parent).
JOB = textwrap.dedent(
    """
    import argparse, atexit, json, logging, multiprocessing as mp, os, subprocess, sys
    import threading, time, warnings

    p = argparse.ArgumentParser()
    p.add_argument("--log"); p.add_argument("--out"); p.add_argument("--n", type=int)
    p.add_argument("--tag"); p.add_argument("--fail", type=int, default=-1)
    p.add_argument("--post", type=float, default=1.0)
    p.add_argument("--rank", type=int, default=-1); p.add_argument("--ranks", type=int, default=0)
    a = p.parse_args()
    time.sleep(0.5)  # imports (torch, transformers...)

    def load(i):  # a DataLoader worker's item
        time.sleep(0.05)
        return i

    def shard(i):  # write to a temp name, then rename: a reader never sees half a file
        tmp = os.path.join(a.out, f".shard_{i:05d}.pt.tmp")
        with open(tmp, "wb") as f:
            f.write(os.urandom(4096))
        os.rename(tmp, os.path.join(a.out, f"shard_{i:05d}.pt"))

    if a.rank >= 0:  # a child rank: its half of the shards, no log of its own
        for i in range(a.rank, a.n, 2):
            time.sleep(0.4)
            shard(i)
        sys.exit(0)

    log = logging.getLogger("extract")
    logging.basicConfig(filename=a.log, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"Loading model from /shared/model... ({a.n} samples)", flush=True)
    log.info("run started, pid %d", os.getpid())

    writer = None
    if a.ranks:  # torchrun: the parent starts the ranks and waits for them
        me = [sys.executable, *sys.argv]
        kids = [subprocess.Popen(me + ["--rank", str(r)]) for r in range(a.ranks)]
        for r, k in enumerate(kids):
            print(f"[rank {r}] started pid {k.pid}", flush=True)
        while True:
            done = len([f for f in os.listdir(a.out) if f.endswith(".pt")])
            print(f"[{done}/{a.n}] shards", flush=True)
            if all(k.poll() is not None for k in kids):
                break
            time.sleep(0.5)
        assert all(k.returncode == 0 for k in kids)
    else:
        ctx = mp.get_context("fork")  # DataLoader's workers
        with ctx.Pool(2) as pool:
            for i in pool.imap(load, range(a.n)):
                time.sleep(0.4)
                if i == a.fail:
                    raise RuntimeError(f"CUDA error: an illegal memory access was encountered (sample {i})")
                if i == a.n - 1:  # the last shard saved by a background writer, as async checkpointing does
                    writer = threading.Thread(target=lambda: (time.sleep(0.2), shard(i)))
                    writer.start()
                else:
                    shard(i)
                print(f"[{i + 1}/{a.n}] extracted sample {i}", flush=True)
                sys.stderr.write(f"\\rextract: {100 * (i + 1) // a.n:3d}%|{'#' * (i + 1)}| {i + 1}/{a.n}")
                sys.stderr.flush()
        sys.stderr.write("\\n")
    print(f"Extraction complete: {a.n} files", flush=True)
    log.info("Extraction complete: %d files", a.n)
    if writer is not None:
        writer.join()

    import signal  # (tests) SIGUSR1: the post-processing is done now
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    print("Saving index...", flush=True)
    signal.sigtimedwait([signal.SIGUSR1], a.post)
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump({"files": a.n}, f)
    print("wandb: Synced run extract-7f3a: https://wandb.ai/team/eagle3/runs/7f3a", flush=True)
    atexit.register(lambda: warnings.warn("resource_tracker: There appear to be 1 leaked semaphore objects"))
    """
)


_TAGS: list[str] = []


@pytest.fixture(autouse=True)
def _reap_jobs():
    """Kill what a test's jobs left (a SIGKILLed job's forked workers live on, as they do)."""
    yield
    while _TAGS:
        tag = _TAGS.pop().encode()
        for entry in os.scandir("/proc"):
            try:
                if entry.name.isdigit() and tag in Path(entry.path, "cmdline").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


def _job(tmp: Path, tag: str, n: int = 6, *extra: str) -> str:
    """The job's command line, quoted for a shell."""
    _TAGS.append(tag)
    (tmp / "out").mkdir(exist_ok=True)
    (tmp / "job.py").write_text(JOB)
    argv = [PYTHON, str(tmp / "job.py"), "--log", str(tmp / "run.log"), "--out", str(tmp / "out"),
            "--n", str(n), "--tag", tag, *extra]  # fmt: skip
    return " ".join(shlex.quote(x) for x in argv)


def _read(path: Path) -> bytes:
    """The log's bytes so far (none before the job, started in the background, made it)."""
    return path.read_bytes() if path.exists() else b""


def _stage(tmp: Path, tag: str, where: Any, n: int = 6, log: str = "job.log") -> Path:
    """The stage file a user writes from docs/stage-file.md (for ``logging``'s file, whose
    lines begin with a time, the completion regex is not anchored)."""
    doc = {
        "stage": "extract-hidden-states",
        "host": where,
        "process": {"match": f"--tag {tag}( |$)"},
        "log": {
            "path": str(tmp / log),
            "complete": "^Extraction complete" if log == "job.log" else "Extraction complete",
            "error": "Traceback|CUDA error",
            "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]",
        },
        "outputs": {"files": str(tmp / "out"), "pattern": "*.pt", "expected": n},
        "policy": {"interval": "1s", "exit_grace": "2s", "timeout": "60s"},
    }
    return _stage_file(tmp, doc)


def _start(cmd: str, tmp: Path) -> Exit:
    """``cmd &`` from a shell that prints ``$!`` and exits, as a person does."""
    pidfile = tmp / "job.pid"
    subprocess.run(["sh", "-c", f"{cmd} & echo $! > {shlex.quote(str(pidfile))}"], check=True,
                   stdin=subprocess.DEVNULL)  # fmt: skip
    return Exit(int(pidfile.read_text()))


def _nohup(tmp: Path, tag: str, *extra: str, append: bool = False) -> Exit:
    redirect = ">>" if append else ">"
    return _start(
        f"nohup {_job(tmp, tag, 6, *extra)} {redirect} {shlex.quote(str(tmp / 'job.log'))} 2>&1", tmp
    )


def _where(where: str, request: pytest.FixtureRequest) -> Any:
    return "local" if where == "local" else request.getfixturevalue("ssh_spec")


def _let_go(job: Exit, watch: Watch, log: Path, *, saving: int = 1, checks: int = 3) -> None:
    """End the job's post-processing (SIGUSR1: index, wandb, exit 0) once the watch has made
    ``checks`` checks after the ``saving``-th "Saving index" reached the log: the watch saw the
    job at work after its line, and no fixed post-processing time is waited out beyond that."""
    deadline = time.monotonic() + 40
    while _read(log).count(b"Saving index") < saving:
        assert time.monotonic() < deadline and job.at is None, watch.story()
        time.sleep(0.05)
    seen = len(watch.lines)
    while len(watch.lines) < seen + checks:
        assert time.monotonic() < deadline and job.at is None, watch.story()
        time.sleep(0.05)
    os.kill(job.pid, signal.SIGUSR1)


def _row(case: str, where: str, watch: Watch, exited: float | None) -> dict[str, Any]:
    """The last verdict, and one table row printed for the report."""
    last = watch.lines[-1][1] if watch.lines else {"verdict": "(no check)", "reasons": []}
    secs = f"{watch.lines[-1][0] - exited:.2f}" if exited and watch.lines else "-"
    if exited and watch.lines:
        first = watch.lines[0][1]
        print(
            f"\nFIRST check {watch.lines[0][0] - exited:+.2f} s from the exit: {first['verdict']}, "
            f"{len(watch.lines)} checks, {_after(watch, exited)} after the exit"
        )
    why = " / ".join(last.get("reasons", [])[:2])
    dump = os.environ.get("USER35_DUMP")  # every check's JSON, for a reader
    if dump:
        Path(dump).mkdir(parents=True, exist_ok=True)
        with open(Path(dump, f"{case.replace('/', '_')}-{where}.jsonl"), "w") as f:
            for at, obj in watch.lines:
                f.write(json.dumps({"at_minus_exit": at - exited if exited else None, **obj}) + "\n")
    print(f"\nROW {case} | {where} | {secs} s | {last['verdict']} | {why[:400]}")
    if last["verdict"] != "complete":
        print("EVIDENCE " + json.dumps({k: last["signals"][k] for k in ("log", "outputs", "process")
                                        if k in last.get("signals", {})})[:3000])  # fmt: skip
    return last


def _after(watch: Watch, exited: float) -> int:
    return sum(
        1 for _, obj in watch.lines if dt.datetime.fromisoformat(obj["checked_at"]).timestamp() > exited
    )


def _must_complete(case: str, where: str, watch: Watch, exited: float) -> None:
    rc = watch.end()
    err = watch.stderr()
    last = _row(case, where, watch, exited)
    assert last["verdict"] == "complete" and rc == 0, (rc, err, watch.story())
    assert _after(watch, exited) <= 3, (_after(watch, exited), watch.story(5))


# Over SSH a watch's exit watch once came into view of its first process ~2.1 s after the
# check that found it (its channel's login shell sourced root's pyenv init here): a job that
# ended sooner ended unseen, and text after its line was nobody's. The checker now opens that
# channel beside its first probe (tests/test_ssh_exits.py, with a login shell 1.5 s slow), and
# the test sshd's shells read no bashrc (tests/sshd.py): both ran as expected failures until then.

WHERE = ["local", "ssh"]
#: Where a trial runs locally only: each names the test that makes its claim over SSH (each
#: SSH trial is ~15 s; the transport is the same probe, exercised by the others).
LOCAL = ["local"]


# ----------------------------------------------------------------- must complete


# Over SSH: test_a_torchrun_like_job_on_a_loaded_machine[ssh] (this job and stage, its watch
# begun before a nohup start, with 2 ranks and the CPUs taken) and
# tests/test_scenarios_35.py::test_a_nohup_job_completes[ssh].
@pytest.mark.parametrize("where", LOCAL)
def test_watch_started_before_a_nohup_job(tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    tag = f"u-before-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    job = _nohup(tmp_path, tag)
    _must_complete("before/nohup", where, watch, job.wait(60))


# Over SSH: test_a_late_watch_whose_job_exits_a_second_after_it_starts[ssh], the same late
# start (first check "running") with the exit sooner after it: the harder case for the watch's
# exit channel, the same "within 3 checks of the exit".
@pytest.mark.parametrize("where", LOCAL)
def test_watch_started_late_during_post_processing(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """The headline incident: the log already says complete, the job is saving its index."""
    tag = f"u-late-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    job = _nohup(tmp_path, tag, "--post", "30")  # until _let_go
    deadline = time.monotonic() + 40
    while b"Saving index" not in _read(tmp_path / "job.log"):
        assert time.monotonic() < deadline and job.at is None
        time.sleep(0.05)
    watch = Watch(stage, tmp_path, timeout="60s")
    first = watch.first()
    assert first["verdict"] == "running", (first["verdict"], first["reasons"])
    _let_go(job, watch, tmp_path / "job.log")  # 3 checks more of its post-processing
    _must_complete("late/post-processing", where, watch, job.wait(60))


@pytest.mark.parametrize("where", WHERE)
def test_since_5m(tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    tag = f"u-since-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    job = _nohup(tmp_path, tag, "--post", "30")  # until _let_go
    time.sleep(2.0)  # the user starts the watch a moment later, saying when the run began
    watch = Watch(stage, tmp_path, "--since", "5m", timeout="60s")
    _let_go(job, watch, tmp_path / "job.log")
    _must_complete("since-5m", where, watch, job.wait(60))


# Over SSH: test_a_torchrun_like_job_on_a_loaded_machine[ssh], this test with the CPUs taken.
@pytest.mark.parametrize("where", LOCAL)
def test_a_torchrun_like_parent_with_2_ranks(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    tag = f"u-ranks-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    job = _nohup(tmp_path, tag, "--ranks", "2")
    exited = job.wait(60)
    # the completion line is the parent's, after its ranks are done
    _must_complete("torchrun-2-ranks", where, watch, exited)


def test_a_setsid_job_logging_to_its_own_file(tmp_path: Path) -> None:
    """``setsid``, stdout thrown away; the stage watches the file ``logging`` writes."""
    tag = f"u-setsid-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, "local", log="run.log")
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    job = _start(f"setsid {_job(tmp_path, tag)} > /dev/null 2>&1 < /dev/null", tmp_path)
    _must_complete("setsid/logging-file", "local", watch, job.wait(60))


def test_a_tmux_job(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("no tmux")
    tag = f"u-tmux-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, "local")
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    sock = str(tmp_path / "tmux.sock")
    inner = f"{_job(tmp_path, tag)} > {shlex.quote(str(tmp_path / 'job.log'))} 2>&1; echo $? > {tmp_path}/rc"
    pane = subprocess.run(
        ["tmux", "-S", sock, "new-session", "-d", "-P", "-F", "#{pane_pid}", "sh", "-c", inner],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    try:
        shell = Exit(int(pane.stdout.strip()))  # the pane's shell ends right after the job
        _must_complete("tmux", "local", watch, shell.wait(60))
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)


@pytest.mark.parametrize("where", WHERE)
def test_a_rerun_of_the_same_stage_completes_on_the_second_run_only(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """Run 1 completes (watched). Run 2: same command, its log appended (``>>``), its shards
    rewritten; the user starts it, then ``crosscheck wait`` again on the same state store."""
    tag = f"u-rerun-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    run1 = _nohup(tmp_path, tag, "--post", "0.3")
    _must_complete("rerun/run-1", where, watch, run1.wait(60))
    time.sleep(1.0)
    run2 = _nohup(tmp_path, tag, "--post", "30", append=True)  # the watch sees it at work
    watch = Watch(stage, tmp_path, timeout="60s")
    _let_go(run2, watch, tmp_path / "job.log", saving=2)  # run 2's own "Saving index", 3 checks
    exited = run2.wait(60)
    early = [obj["verdict"] for at, obj in watch.lines if at < exited]
    assert "complete" not in early, ("completed on run 1", watch.story())
    _must_complete("rerun/run-2", where, watch, exited)


# ----------------------------------------------------------------- must complete: a fast end, a loaded host


@pytest.mark.parametrize("where", WHERE)
def test_a_late_watch_whose_job_exits_a_second_after_it_starts(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """The headline incident as it often ends: the watch is started during post-processing
    and the job exits about a second after the watch's first check."""
    tag = f"u-late1-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    job = _nohup(tmp_path, tag, "--post", "30")
    deadline = time.monotonic() + 40
    while b"Saving index" not in _read(tmp_path / "job.log"):
        assert time.monotonic() < deadline and job.at is None
        time.sleep(0.05)
    watch = Watch(stage, tmp_path, timeout="20s")
    first = watch.first()
    assert first["verdict"] == "running", (first["verdict"], first["reasons"])
    time.sleep(1.0)
    os.kill(job.pid, signal.SIGUSR1)  # the post-processing is done: index, wandb, exit 0
    _must_complete("late/exit-1s-after-first-check", where, watch, job.wait(60))


@pytest.fixture
def loaded_machine():
    """Two CPU burners more than this machine's 2 cores can run beside the watch."""
    burners = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        yield
    finally:
        for b in burners:
            b.kill()
            b.wait()


@pytest.mark.parametrize("where", WHERE)
def test_a_torchrun_like_job_on_a_loaded_machine(
    tmp_path: Path, where: str, request: pytest.FixtureRequest, loaded_machine: None
) -> None:
    tag = f"u-load-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    job = _nohup(tmp_path, tag, "--ranks", "2")
    _must_complete("torchrun-loaded", where, watch, job.wait(60))


# ----------------------------------------------------------------- must not complete


@pytest.mark.parametrize("where", WHERE)
def test_a_job_that_fails_ends_failed(tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    """A CUDA error at sample 3: a traceback in the log, exit 1."""
    tag = f"u-fail-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    watch = Watch(stage, tmp_path, timeout="60s")
    watch.first()
    job = _nohup(tmp_path, tag, "--fail", "3")
    exited = job.wait(60)
    rc = watch.end()
    last = _row("fails(exit 1, traceback)", where, watch, exited)
    assert "complete" not in watch.states(), watch.story()
    assert last["verdict"] == "failed" and rc == 3, (rc, watch.story())
    assert _after(watch, exited) <= 3, watch.story(5)


@pytest.mark.parametrize("where", WHERE)
def test_a_job_killed_by_sigkill_never_completes(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """The OOM killer at sample 3: no line, 3 of 6 shards (temp files, workers orphaned)."""
    tag = f"u-kill-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, _where(where, request))
    watch = Watch(stage, tmp_path, timeout="12s")
    watch.first()
    job = _nohup(tmp_path, tag)
    deadline = time.monotonic() + 40
    while b"[3/6]" not in _read(tmp_path / "job.log"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(job.pid, signal.SIGKILL)
    exited = job.wait(10)
    rc = watch.end(60)
    err = watch.stderr()
    _row("SIGKILL", where, watch, exited)
    print(f"STDERR rc={rc}: {err.strip()[:600]}")
    assert "complete" not in watch.states(), watch.story()
    assert rc != 0


def test_the_verdict_a_person_reads_for_a_late_watch(tmp_path: Path) -> None:
    """The text (not --json) a person sees when the watch starts during post-processing:
    running while the job saves its index, then complete."""
    tag = f"u-text-{uuid.uuid4().hex[:8]}"
    stage = _stage(tmp_path, tag, "local")
    job = _nohup(tmp_path, tag, "--post", "3")
    deadline = time.monotonic() + 40
    while b"Saving index" not in _read(tmp_path / "job.log"):
        assert time.monotonic() < deadline and job.at is None
        time.sleep(0.05)
    done = subprocess.run([*CLI, "wait", str(stage), "--timeout", "40s"], capture_output=True, text=True,
                          env=_env(tmp_path), timeout=90, check=False)  # fmt: skip
    print(f"\nTEXT rc={done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-1500:]}")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "complete" in done.stdout.lower()
