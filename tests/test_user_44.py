"""An ML engineer's trial of ``crosscheck wait`` on real jobs that finish (notes/ml44.md).

Each job is a real ``python -u job.py TAG ...`` process, its stdout and stderr redirected to
its log as ``nohup python -u job.py > job.log 2>&1 &`` does (``>>`` for a re-run), writing
real output files; its parent (pytest) reaps it at once and takes the moment of its exit on
the monotonic clock. The real CLI, ``python -m sensors wait STAGE --json``, gates it. Every
test asserts the two things a gate owes its user: it never says ``complete`` before the job's
(last) exit, and it says it within 3 checks after it (the checks whose probes began after
the exit: one begun before it and answered after it is neither). Where the gate does not
open and it should, the test is ``xfail(strict=True)`` with the reason.

Run alone (real time; slow under load), ``-s`` prints each scenario's story, every reason a
person was shown, and the seconds from the exit to ``complete``:
``PYTHONPATH=$PWD python -m pytest -v -s tests/test_user_44.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.wait_cli import WaitCli

REPO = Path(__file__).resolve().parent.parent

# The job: its plan (a list of steps, JSON in its folder) says what it does, in order.
JOB = r"""
import json, os, sys, time
tag, folder = sys.argv[1], sys.argv[2]
plan = json.load(open(os.path.join(folder, "plan.json")))
out = plan["out"]
os.makedirs(out, exist_ok=True)
shard = 0  # a re-run writes its shards again, over the last run's
for step in plan["steps"]:
    what = step[0]
    if what == "shards":  # ["shards", how many, pause after each]
        for _ in range(step[1]):
            with open(os.path.join(out, f"part-{shard:05d}.pt"), "wb") as f:
                f.write(os.urandom(4096))
            shard += 1
            print(f"[{shard}/{plan['expected']}] wrote part-{shard - 1:05d}.pt", flush=True)
            time.sleep(step[2])
    elif what == "say":
        print(step[1], flush=True)
    elif what == "warn":
        print(step[1], file=sys.stderr, flush=True)
    elif what == "cpu":  # CPU-bound for this long (wall clock: the machine is loaded)
        end, x = time.monotonic() + step[1], 0
        while time.monotonic() < end:
            x += 1
    elif what == "sleep":
        time.sleep(step[1])
    elif what == "exit":
        sys.exit(step[1])
"""

DONE = "Extraction complete"
ERROR = r"^Traceback \(most recent call last\)|^[A-Za-z_][\w.]*(Error|Exception): "
WANDB = [
    ["say", "wandb: "],
    ["say", "wandb: Run summary:"],
    ["say", "wandb:   samples 24"],
    ["say", "wandb: Synced 5 W&B file(s), 0 media file(s), 2 artifact file(s) and 0 other file(s)"],
    ["say", "wandb: Find logs at: ./wandb/run-20261205_191831-3k2x9f0q/logs"],
]
LEAK = [
    "warn",
    "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There"
    " appear to be 1 leaked semaphore objects to clean up at shutdown",
]


class Job:
    """One run of a job: a real process, its output redirected to its log, reaped at once."""

    def __init__(
        self, folder: Path, steps: list[list[Any]], *, expected: int, tag: str, append: bool = False
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.tag = folder, tag
        self.log = folder / "extract.log"
        self.out = folder / "out"
        (folder / "job.py").write_text(JOB)
        (folder / "plan.json").write_text(
            json.dumps({"out": str(self.out), "expected": expected, "steps": steps})
        )
        self.exit_status: int | None = None
        self.exited = float("inf")  # monotonic
        self.exited_wall = float("inf")
        with open(self.log, "ab" if append else "wb") as log:  # the shell's >> or >
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                [sys.executable, "-u", str(folder / "job.py"), tag, str(folder)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        status = self.proc.wait()  # reaped at once: no zombie for the probe to see
        self.exited, self.exited_wall = time.monotonic(), time.time()
        self.exit_status = status

    def wait(self, timeout: float = 120) -> None:
        self._reaper.join(timeout)
        assert self.exit_status == 0, (self.exit_status, self.log.read_text()[-2000:])

    def logged(self, text: str, timeout: float = 60) -> None:
        """Until the log holds ``text``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.log.exists() and text in self.log.read_text():
                return
            time.sleep(0.02)
        raise AssertionError(f"{text!r} never logged")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()


def stage_file(folder: Path, tag: str, *, expected: int, interval: str = "500ms", **extra: Any) -> Path:
    """What the engineer wrote after ``crosscheck init``: the job's own last line, its shards."""
    stage: dict[str, Any] = {
        "stage": "extract",
        "host": "local",
        "process": {"match": f"job\\.py {tag} "},
        "log": {"path": str(folder / "extract.log"), "complete": f"^{DONE}$", "error": ERROR},
        "outputs": {"files": str(folder / "out"), "pattern": "part-*.pt", "expected": expected},
        "policy": {"interval": interval, "timeout": "90s"},
    }
    for key, value in extra.items():
        if value is None:
            stage.pop(key, None)
        elif isinstance(value, dict) and isinstance(stage.get(key), dict):
            stage[key] = {**stage[key], **value}
        else:
            stage[key] = value
    path = folder.parent / f"{folder.name}.yaml"
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return path


class Wait(WaitCli):
    """The gate, and which checks began after a moment."""

    def after(self, moment: float) -> list[dict[str, Any]]:
        """The checks begun after ``moment`` (monotonic): each check's probe read its host's
        clock (every reading's ``read_at``) after it. A check whose probe began before the exit
        and whose line came after is neither before the exit nor after it, and not counted."""
        wall = moment + (time.time() - time.monotonic())  # one machine: the hosts' clocks too
        return [v for v in self.verdicts if _probe_began(v) > wall]


def _probe_began(verdict: dict[str, Any]) -> float:
    """When the check's probes began (the earliest host clock read among its readings)."""
    times = [s["read_at"] for s in verdict["signals"].values() if s.get("read_at")]
    return min(dt.datetime.fromisoformat(t).timestamp() for t in times or [verdict["checked_at"]])


def _bystanders(verdict: dict[str, Any]) -> bool:
    """An ``unknown`` the job had no part in: a process of this busy machine (the fuzzers'),
    alive before the probe, whose command line the probe could not read (notes/ml44.md,
    item 4). It costs a check; it is not counted among the checks the gate may take."""
    return verdict["verdict"] == "unknown" and any(
        s["says"] == "unknown" and "unread_pids" in s.get("evidence", {})
        for k, s in verdict["signals"].items()
        if k.partition("@")[0] == "process"
    )


def report(name: str, exited: float, waiting: Wait, rc: int) -> float | None:
    """Print what a person saw and how long after the last exit the gate opened."""
    opened = waiting.first("complete")
    took = None if opened is None else opened - exited
    after = waiting.after(exited)
    nth = next((i + 1 for i, v in enumerate(after) if v["verdict"] == "complete"), None)
    others = sum(1 for v in after[: nth or len(after)] if _bystanders(v))
    print(
        f"\n=== {name}: rc={rc}, complete {'never' if took is None else f'{took:+.2f}s'} after the"
        f" last exit (check {nth} of those begun after it, {others} of them unknown for other"
        f" processes; {len(waiting.verdicts)} checks in all)"
    )
    for state, why in waiting.story():
        print(f"    {state:13s} {why[:500]}")
    print("  every reason shown:")
    for r in waiting.reasons():
        print(f"    - {r[:700]}")
    if waiting.stderr.strip():
        print(f"  stderr: {waiting.stderr.strip()[:500]}")
    return took


def assert_opened_after_the_exit(exited: float, waiting: Wait, rc: int, checks: int = 3) -> None:
    """Never complete before the (last) exit (no ``complete`` line came before it); complete
    within ``checks`` of the checks begun after it (:meth:`Wait.after`; not counting those a
    bystander made unknown, :func:`_bystanders`)."""
    early = [v for v, t in zip(waiting.verdicts, waiting.times, strict=True) if t <= exited and v["advance"]]
    assert not early, ("opened before the exit", early[0]["reasons"])
    assert rc == 0, (rc, waiting.stderr, waiting.story())
    assert waiting.verdicts[-1]["verdict"] == "complete" and waiting.verdicts[-1]["advance"] is True
    after = [v["verdict"] for v in waiting.after(exited) if not _bystanders(v)]
    assert "complete" in after[:checks], (after, waiting.story())


def _tag() -> str:
    return f"ml44-{uuid.uuid4().hex[:8]}"


def _run(
    tmp_path: Path,
    name: str,
    steps: list[list[Any]],
    *,
    expected: int,
    start_wait: str,
    interval: str = "500ms",
    wait_args: tuple[str, ...] = ("--state", "none"),
    **extra: Any,
) -> tuple[Job, Wait, int]:
    """Run one job under one wait. ``start_wait``: ``before`` (the wait first, its first
    verdict in, then the job), ``just before`` (the wait spawned, the job at once), ``0.3s
    before`` (the job 0.3 s after the wait), ``after:TEXT`` (the wait once the log holds TEXT)."""
    tag = _tag()
    folder = tmp_path / "job"
    path = stage_file(folder, tag, expected=expected, interval=interval, **extra)
    job: Job | None = None
    waiting: Wait | None = None
    try:
        if start_wait in ("before", "just before", "0.3s before"):
            waiting = Wait(path, *wait_args)
            if start_wait == "before":
                waiting.until(lambda v: True)
            elif start_wait == "0.3s before":
                time.sleep(0.3)
            job = Job(folder, steps, expected=expected, tag=tag)
        else:
            job = Job(folder, steps, expected=expected, tag=tag)
            job.logged(start_wait.partition(":")[2])
            waiting = Wait(path, *wait_args)
        job.wait()
        rc = waiting.end()
    finally:
        if job is not None:
            job.stop()
        if waiting is not None and waiting.proc.poll() is None:
            waiting.proc.kill()
    report(name, job.exited, waiting, rc)
    return job, waiting, rc


# --------------------------------------------------------------------------- 1. the incident


def extraction(post: float, after: list[list[Any]] | None = None) -> list[list[Any]]:
    """24 shards, the completion line, then a CPU-bound post-processing of ``post`` s."""
    return [["shards", 24, 0.05], ["say", DONE], ["cpu", post], *(after or []), ["exit", 0]]


@pytest.mark.parametrize("start_wait", ["after:" + DONE, "before"])
def test_the_incident_a_cpu_bound_phase_after_the_completion_line(tmp_path: Path, start_wait: str) -> None:
    """The log says "Extraction complete", every shard is there, and the process goes on at
    the CPU for 8 s (building an index), then exits 0. The gate must hold until the exit."""
    job, waiting, rc = _run(
        tmp_path,
        f"incident, wait {start_wait.split(':')[0]}",
        extraction(8.0),
        expected=24,
        start_wait=start_wait,
    )
    assert_opened_after_the_exit(job.exited, waiting, rc)
    while_alive = [v for v, t in zip(waiting.verdicts, waiting.times, strict=True) if t < job.exited - 1.0]
    assert while_alive and {v["verdict"] for v in while_alive} <= {"running", "unknown"}, waiting.story()


# --------------------------------------------------------------------------- 2. text after the line


@pytest.mark.parametrize(
    ("after", "name"),
    [
        pytest.param([["sleep", 0.5], *WANDB], "wandb summary", id="wandb summary"),
        pytest.param([LEAK], "warning at exit", id="a warning at exit"),
    ],
)
def test_text_after_the_completion_line(tmp_path: Path, after: list[list[Any]], name: str) -> None:
    """The job's last words are not its completion line: wandb's summary (half a second
    after it), or a warning Python prints at shutdown (stderr, into the same log)."""
    steps = [["shards", 24, 0.05], ["say", DONE], ["cpu", 2.0], *after, ["exit", 0]]
    job, waiting, rc = _run(tmp_path, name, steps, expected=24, start_wait="before")
    assert_opened_after_the_exit(job.exited, waiting, rc)


# --------------------------------------------------------------------------- 3. a fast end


@pytest.mark.parametrize("interval", ["100ms", "500ms"])
def test_a_fast_end_inside_one_probe(tmp_path: Path, interval: str) -> None:
    """The job works for 2.5 s, then writes its last shard, its line and exits within a few
    ms: the end falls inside one probe (or between two)."""
    steps = [["shards", 23, 0.1], ["shards", 1, 0.0], ["say", DONE], ["exit", 0]]
    job, waiting, rc = _run(
        tmp_path, f"fast end, interval {interval}", steps, expected=24, start_wait="before", interval=interval
    )
    assert_opened_after_the_exit(job.exited, waiting, rc)
    seen = [v for v in waiting.verdicts if v["signals"]["process"]["says"] == "working"]
    assert seen, "the watch saw the job at work"


# --------------------------------------------------------------------------- 4. over before the first check


def _at() -> str:
    return f"@{time.time():.6f}"


@pytest.mark.parametrize("since", ["none", "@now"])
def test_a_wait_started_just_before_a_fast_job(tmp_path: Path, since: str) -> None:
    """``crosscheck wait extract.yaml --json & python -u job.py > extract.log``: the job
    writes its 24 shards and its line and exits in a fraction of a second, before the wait
    (still importing: 2-4 s here) makes its first check. With ``--since "@$(date +%s.%N)"``
    taken before the wait, as docs/cli.md advises, and without: the job then begins 0.3 s
    after the wait (its log born after the wait began: the wait's own start binds it,
    sensors._cli.main._process_started). A job begun within a few ms of the wait is
    notes/ml44.md's item 1: it depends on the first probe's latency, so it is not here."""
    args = ("--state", "none", *(("--since", _at()) if since == "@now" else ()))
    steps = [["shards", 24, 0.0], ["say", DONE], ["exit", 0]]
    job, waiting, rc = _run(
        tmp_path,
        f"over before the first check, since {since}",
        steps,
        expected=24,
        start_wait="just before" if since == "@now" else "0.3s before",
        wait_args=args,
    )
    first = waiting.times[0] if waiting.times else float("inf")
    assert first > job.exited, "the job ended before the first check"
    assert_opened_after_the_exit(job.exited, waiting, rc)


# --------------------------------------------------------------------------- 5. a re-run into the same log


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1000) % 1000:03d}Z"


@pytest.mark.parametrize("how", ["store, --since an ISO time", "store, --since a duration", "store alone"])
def test_a_rerun_appending_to_the_same_log(tmp_path: Path, how: str) -> None:
    """Run 1 ends and its gate opens (the state store kept). The stage runs again, ``>>``
    into the same log and writing its shards again over run 1's (24 of 24 there from its
    first moment): run 1's completion line is in the log all along. Gate 2 uses the same
    store and: an ISO ``--since`` taken before run 2 and begun before it; ``--since 6s``
    begun 1 s into run 2 (run 1 ended 8 s before run 2 began); nothing more, begun 1 s into
    run 2. It must not open on run 1's line, and must open soon after run 2's exit."""
    tag = _tag()
    folder = tmp_path / "job"
    store = str(tmp_path / "state.db")
    path = stage_file(folder, tag, expected=24)
    steps = [["shards", 24, 0.2], ["say", DONE], ["cpu", 2.0], ["exit", 0]]
    first = Job(folder, steps, expected=24, tag=tag)
    try:
        gate = Wait(path, "--state", store)
        first.wait()
        assert gate.end() == 0, gate.story()
    finally:
        first.stop()
    report("re-run: run 1", first.exited, gate, 0)
    assert_opened_after_the_exit(first.exited, gate, 0)
    time.sleep(8.0 - (time.monotonic() - first.exited))
    second: Job | None = None
    try:
        if how == "store, --since an ISO time":
            gate = Wait(path, "--state", store, "--since", _utc(time.time()))
            time.sleep(0.5)
            second = Job(folder, steps, expected=24, tag=tag, append=True)
        else:
            second = Job(folder, steps, expected=24, tag=tag, append=True)
            time.sleep(1.0)
            gate = Wait(path, "--state", store, *(("--since", "6s") if "duration" in how else ()))
        second.wait()
        rc = gate.end()
    finally:
        if second is not None:
            second.stop()
    report(f"re-run: {how}", second.exited, gate, rc)
    assert second.log.read_text().count(DONE) == 2
    assert_opened_after_the_exit(second.exited, gate, rc)


# --------------------------------------------------------------------------- 6. under docker


def test_a_docker_job_that_begins_and_ends_between_two_checks(tmp_path: Path) -> None:
    """``docker run -d --name NAME IMAGE sh -c 'python -u job.py ... >> /logs/extract.log'``
    (tests/supervisors.py's stand-in: the job runs for real, its record as Docker 28 keeps
    it) started just after a check, over in a fraction of a second, before the next (every
    3 s). The record's exit 0 is the job's end: the gate opens on it."""
    from tests.supervisors import Stand

    root = tmp_path / "standin"
    root.mkdir()
    root.chmod(0o755)
    stand = Stand(root)
    name = f"extract-{uuid.uuid4().hex[:8]}"
    tag = _tag()
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "job.py").write_text(JOB)
    steps = [["shards", 24, 0.0], ["say", DONE], ["exit", 0]]
    (folder / "plan.json").write_text(
        json.dumps({"out": str(folder / "out"), "expected": 24, "steps": steps})
    )
    path = stage_file(
        folder, tag, expected=24, interval="3s", supervisor={"docker": name, "bin": str(stand.bin)}
    )
    waiting = Wait(path, "--state", "none")
    try:
        waiting.until(lambda v: True)
        job = f"exec {sys.executable} -u {folder / 'job.py'} {tag} {folder} >> {folder / 'extract.log'} 2>&1"
        cid = subprocess.run(
            [
                str(stand.bin / "docker"),
                "run",
                "-d",
                "--name",
                name,
                "pytorch/pytorch:2.5.1",
                "sh",
                "-c",
                job,
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        record = json.loads(stand.wait(f"docker-{name}", '"Status": "exited"'))[0]
        rc = waiting.end()
    finally:
        if waiting.proc.poll() is None:
            waiting.proc.kill()
    assert record["Id"] == cid and record["State"]["ExitCode"] == 0
    finished = record["State"]["FinishedAt"]  # RFC 3339, nanoseconds, UTC
    whole, _, frac = finished.rstrip("Z").partition(".")
    at = time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - time.timezone + float("0." + (frac or "0"))
    exited = at - (time.time() - time.monotonic())  # on the monotonic clock
    report("docker, begun and ended between two checks", exited, waiting, rc)
    assert not [v for v in waiting.verdicts if v["signals"]["process"]["says"] == "working"], waiting.story()
    assert_opened_after_the_exit(exited, waiting, rc)


# --------------------------------------------------------------------------- 7. two nodes


TORN_DOWN_2S_LATER = [
    [0.6, "[rank{rank}] destroy_process_group"],
    [0.2, "wandb: Run summary:"],
    [0.0, "wandb:   train/loss 0.0123"],
    [0.0, "wandb: Synced 5 W&B file(s), 0 media file(s)"],
    [1.2, "exit 0"],
]


def _two_nodes(
    tmp_path: Path, hosts: list[Any], name: str, success: str, traceback: bool = False
) -> tuple[Any, Wait, int]:
    """Rank 0 prints "Training complete" and exits; the others tear down for 2 s (rank 2,
    with ``traceback``, dies in the closing barrier instead); one ``train.log`` for all."""
    from tests import test_user_43 as ml43

    plan: dict[int, list[list[Any]]] = {0: [[0.0, ml43.DONE], [0.0, "exit 0"]]}
    plan.update({r: TORN_DOWN_2S_LATER for r in range(1, 2 * ml43.PER_HOST)})
    if traceback:
        plan[ml43.PER_HOST] = ml43.TRACEBACK
    folder = tmp_path / "job"
    job = ml43.Job(folder, str(folder / "train.log"), plan)
    try:
        spec = {"path": str(folder / "train.log"), **ml43.SHARED}
        path = ml43.stage_file(tmp_path, hosts, job, spec, success=success, interval="500ms")
        waiting = Wait(path, "--state", "none", "--timeout", "60s")
        waiting.until(ml43.alive_everywhere(hosts))
        job.finish()
        job.wait()
        rc = waiting.end()
    finally:
        job.stop()
    report(name, job.last_exit, waiting, rc)
    return job, waiting, rc


@pytest.mark.parametrize("success", ["chief", "all"])
def test_two_nodes_a_shared_log_rank_0_ends_first(tmp_path: Path, hosts: list[Any], success: str) -> None:
    """Two nodes (the test sshd hosts), two ranks each, one ``train.log`` every rank appends
    to. Rank 0 prints "Training complete" and exits; the workers tear down (their words land
    after the line) and exit 2 s later. ``policy.exit_grace: 1s`` (local disks, as
    docs/cli.md's init advice says). The gate opens after the last exit, within exit_grace
    and 3 checks of it, and no reason calls a rank that ended after the line lost."""
    job, waiting, rc = _two_nodes(tmp_path, hosts, f"two nodes, shared log, {success}", success)
    assert job.last_exit - job.exits[0][0] > 1.5, job.exits
    said = [r for r in waiting.reasons() if "lost rank" in r or " gone (" in r]
    assert not said, said
    # exit_grace (1 s) after the workers' last sighting is 2 checks at 500 ms; then the
    # settle count: 3 checks on top of the grace's 2.
    assert_opened_after_the_exit(job.last_exit, waiting, rc, checks=5)


def test_two_nodes_a_traceback_from_node_1_in_the_shared_log(tmp_path: Path, hosts: list[Any]) -> None:
    """As above (``success: chief``), but rank 2 (node 1's first) dies in the closing barrier:
    its traceback lands in the shared log after the chief's line, and it exits 1. Failed,
    never opened, and the failure names the shared log, not node 0 (where it is read)."""
    job, waiting, rc = _two_nodes(
        tmp_path, hosts, "two nodes, shared log, chief, traceback from node 1", "chief", traceback=True
    )
    assert job.exits[2][1] == 1
    assert rc == 3 and waiting.verdicts[-1]["verdict"] == "failed", waiting.story()
    assert not [v for v in waiting.verdicts if v["advance"]], waiting.story()
    a = f"127.0.0.1:{hosts[0].sshd.port}"
    first = waiting.verdicts[-1]["reasons"][0]
    # The traceback came after the chief's completion line, and the reason says so.
    assert first.startswith(f"shared log (read on {a}, node 0): error line after the completion line ("), (
        first
    )


def test_two_nodes_a_traceback_does_not_call_rank_0_lost(tmp_path: Path, hosts: list[Any]) -> None:
    """The same run as above: rank 0 printed the completion line and exited 0 before rank 2
    died. docs/multi-host.md rule 2: a rank that finished is no lost rank; in a log every rank
    writes, ranks that end after the line tear down. Only rank 2 may be called gone."""
    job, waiting, rc = _two_nodes(
        tmp_path, hosts, "two nodes, traceback, rank 0's words", "chief", traceback=True
    )
    assert rc == 3 and job.exits[0][1] == 0
    lost = [r for r in waiting.reasons() if " gone (" in r]
    assert lost and not [r for r in lost if "rank 0, pid" in r], lost
