"""Supervisors (docker, systemd, Slurm): their records as evidence of the run and its exit.

Pure parsing of each tool's real output format; verdict tables; then the real probe, locally
and over the test sshd, against the stand-ins of tests/supervisors.py (docker, systemctl: no
daemon, no systemd here), the real docker and systemctl CLIs where they cannot reach their
daemon (the record that cannot be read), and a real Slurm on loopback.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sensors import Checker, Says, State, stage_from_dict
from sensors._base.model import Reading
from sensors._config.stage import PolicySpec
from sensors._run.supervisor import parse_docker, parse_slurm, parse_systemd
from sensors._verdict import VerdictMemory, decide
from tests.supervisors import DOCKER_PERMISSION_DENIED, Stand

T0 = 1_796_104_800.0
CID = "4f" * 32
CID2 = "7a" * 32


# --------------------------------------------------------------------------- pure parsing


def _docker(tmp_path, **kw) -> str:
    stand = Stand(tmp_path)
    stand.container("web", **kw)
    return (stand.bin / "state" / "docker-web").read_text().split("\n", 1)[1]


@pytest.mark.parametrize(
    "kw, phase, success, status, oom",
    [
        ({"status": "running", "pid": 4242}, "running", False, None, False),
        ({"status": "exited", "finished": T0 + 60, "exit_code": 0}, "exited", True, 0, False),
        ({"status": "exited", "finished": T0 + 60, "exit_code": 1}, "exited", False, 1, False),
        ({"status": "exited", "finished": T0 + 60, "exit_code": 137}, "exited", False, 137, False),
        (
            {"status": "exited", "finished": T0 + 60, "exit_code": 137, "oom": True},
            "exited",
            False,
            137,
            True,
        ),
        ({"status": "created", "started": None}, "waiting", False, None, False),
    ],
)
def test_docker_inspect_as_docker_28_prints_it(tmp_path, kw, phase, success, status, oom) -> None:
    kw = {"cid": CID, "started": T0 + 0.123456789, **kw}
    record = parse_docker("web", 0, _docker(tmp_path, **kw))
    assert (record.phase, record.success, record.oom) == (phase, success, oom)
    if phase == "exited":
        assert record.exit_status == status
        assert record.finished_at == pytest.approx(T0 + 60)
    if phase != "waiting":
        assert record.identity.startswith(CID + "@")
        assert record.started_at == pytest.approx(T0 + 0.123456789)


def test_docker_errors_are_not_a_state() -> None:
    absent = parse_docker("web", 1, "[]\nError: No such container: web")
    assert absent.phase == "absent"
    denied = parse_docker("web", 1, "[]\n" + DOCKER_PERMISSION_DENIED.format(name="web"))
    assert denied.phase == "unreadable" and "permission denied" in denied.unreadable
    missing = parse_docker("web", 127, "sh: 1: docker: not found")
    assert missing.phase == "unreadable" and "no docker command" in missing.unreadable
    garbage = parse_docker("web", 0, "not json")
    assert garbage.phase == "unreadable"


def _unit(tmp_path, **kw) -> str:
    stand = Stand(tmp_path)
    stand.unit("job.service", **kw)
    return (stand.bin / "state" / "systemd-job.service").read_text().split("\n", 1)[1]


@pytest.mark.parametrize(
    "kw, phase, success, status, oom",
    [
        ({"active": "active", "sub": "running", "pid": 99}, "running", False, None, False),
        (
            {"active": "active", "sub": "exited", "exited": T0 + 5, "code": 1, "status": 0},
            "exited",
            True,
            0,
            False,
        ),
        (
            {
                "active": "failed",
                "sub": "failed",
                "exited": T0 + 5,
                "code": 1,
                "status": 3,
                "result": "exit-code",
            },
            "exited",
            False,
            3,
            False,
        ),
        (
            {
                "active": "failed",
                "sub": "failed",
                "exited": T0 + 5,
                "code": 2,
                "status": 9,
                "result": "signal",
            },
            "exited",
            False,
            137,
            False,
        ),
        (
            {
                "active": "failed",
                "sub": "failed",
                "exited": T0 + 5,
                "code": 2,
                "status": 9,
                "result": "oom-kill",
            },
            "exited",
            False,
            137,
            True,
        ),
    ],
)
def test_systemctl_show_as_systemd_252_prints_it(tmp_path, kw, phase, success, status, oom) -> None:
    kw = {"invocation": "0123456789abcdef0123456789abcdef", "started": T0, **kw}
    record = parse_systemd("job.service", 0, _unit(tmp_path, **kw))
    assert (record.phase, record.success, record.oom) == (phase, success, oom)
    assert record.identity == "0123456789abcdef0123456789abcdef"
    assert record.started_at == T0
    if phase == "exited":
        assert record.exit_status == status and record.finished_at == T0 + 5


def test_systemctl_errors_are_not_a_state() -> None:
    no_systemd = parse_systemd(
        "job.service",
        1,
        "System has not been booted with systemd as init system (PID 1). Can't operate.\n"
        "Failed to connect to bus: Host is down",
    )
    assert no_systemd.phase == "unreadable" and "booted with systemd" in no_systemd.unreadable
    not_found = parse_systemd("x.service", 0, "LoadState=not-found\nActiveState=inactive\nSubState=dead\n")
    assert not_found.phase == "absent"


# sacct -P -n -o JobID,State,ExitCode,Start,End as Slurm 22.05 documents and prints it (the
# job line, then its steps; "CANCELLED by UID"; ExitCode "code:signal").
SACCT = {
    "ok": "77|COMPLETED|0:0|2026-12-01T06:00:00|2026-12-01T07:00:00\n77.batch|COMPLETED|0:0|2026-12-01T06:00:00|2026-12-01T07:00:00\n",
    "fail": "77|FAILED|3:0|2026-12-01T06:00:00|2026-12-01T06:01:00\n77.batch|FAILED|3:0|2026-12-01T06:00:00|2026-12-01T06:01:00\n",
    "cancel": "77|CANCELLED by 0|0:15|2026-12-01T06:00:00|2026-12-01T06:02:00\n77.batch|CANCELLED|0:15|2026-12-01T06:00:00|2026-12-01T06:02:00\n",
    "oom": "77|OUT_OF_MEMORY|0:125|2026-12-01T06:00:00|2026-12-01T06:03:00\n77.batch|OUT_OF_MEMORY|0:125|2026-12-01T06:00:00|2026-12-01T06:03:00\n",
    "running": "77|RUNNING|0:0|2026-12-01T06:00:00|Unknown\n",
    "pending": "77|PENDING|0:0|Unknown|Unknown\n",
}


@pytest.mark.parametrize(
    "key, phase, success, status, oom",
    [
        ("ok", "exited", True, 0, False),
        ("fail", "exited", False, 3, False),
        ("cancel", "exited", False, 143, False),
        ("oom", "exited", False, 253, True),
        ("running", "running", False, None, False),
        ("pending", "waiting", False, None, False),
    ],
)
def test_sacct_as_slurm_22_05_prints_it(key, phase, success, status, oom) -> None:
    record = parse_slurm("77", (0, SACCT[key]), (1, "slurm_load_jobs error: Invalid job id specified"))
    assert (record.phase, record.success, record.oom) == (phase, success, oom)
    if phase == "exited":
        assert record.exit_status == status
    if phase != "waiting":
        assert record.identity == "77@2026-12-01T06:00:00"


def test_slurm_without_accounting_reads_squeue() -> None:
    # squeue -h -t all -O 'JobID:|,State:|,exit_code:|,StartTime:|,EndTime:' as Slurm 22.05
    # prints it: exit_code is the job's raw wait status (exit 3: 768; SIGKILL: 9).
    off = (1, "Slurm accounting storage is disabled")
    done = parse_slurm("5", off, (0, "5|COMPLETED|0|2026-12-05T18:44:32|2026-12-05T18:44:35"))
    assert done.success and done.identity == "5@2026-12-05T18:44:32"
    failed = parse_slurm("5", off, (0, "5|FAILED|768|2026-12-05T18:44:32|2026-12-05T18:44:35"))
    assert failed.phase == "exited" and not failed.success and failed.failed
    assert failed.exit_code == 3 and failed.how_it_ended() == "exited with status 3 (FAILED)"
    killed = parse_slurm("5", off, (0, "5|FAILED|9|2026-12-05T18:44:32|2026-12-05T18:44:35"))
    assert killed.signal == 9 and killed.exit_status == 137 and "SIGKILL" in killed.how_it_ended()
    running = parse_slurm("5", off, (0, "5|RUNNING|0|2026-12-05T18:44:32|NONE"))
    assert running.phase == "running"
    # Cancelled while pending: 0:0 is no exit status, and none is told.
    cancelled = parse_slurm("5", off, (0, "5|CANCELLED|0|None|2026-12-05T18:44:35"))
    assert cancelled.exit_status is None and "status 0" not in cancelled.how_it_ended()
    gone = parse_slurm("5", off, (1, "slurm_load_jobs error: Invalid job id specified"))
    assert gone.phase == "absent"
    down = parse_slurm(
        "5", off, (1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
    )
    assert down.phase == "unreadable" and "Unable to contact" in down.unreadable


# --------------------------------------------------------------------------- verdict tables


def _r(signal: str, says: Says, **evidence) -> Reading:
    return Reading(signal, says, f"{signal} {says}", evidence, T0, "local")


def _decide(*readings: Reading, settle: int = 1) -> State:
    verdict, _ = decide(
        "s", "local", {r.signal: r for r in readings}, PolicySpec(settle=settle), VerdictMemory(), T0
    )
    return verdict.state


@pytest.mark.parametrize(
    "readings, state",
    [
        # exit 0 recorded, nothing else: complete (the record ties it to this run).
        ((_r("supervisor", Says.DONE),), State.COMPLETE),
        # a process-only stage under a supervisor: gone + recorded exit 0 completes.
        ((_r("supervisor", Says.DONE), _r("process", Says.DONE, seen_alive=True)), State.COMPLETE),
        # never seen alive here, but the supervisor recorded this run's exit 0.
        ((_r("supervisor", Says.DONE), _r("process", Says.DONE)), State.COMPLETE),
        # a non-zero code, a signal, an OOM kill: failed, whatever the log says.
        ((_r("supervisor", Says.FAILED), _r("log", Says.DONE)), State.FAILED),
        # running while the log says complete: just running.
        ((_r("supervisor", Says.WORKING), _r("log", Says.DONE)), State.RUNNING),
        # running while this probe sees no process of the job: running.
        ((_r("supervisor", Says.WORKING), _r("process", Says.DONE, seen_alive=True)), State.RUNNING),
        # at work (or queued) while its log and outputs are not there yet (sbatch opens the log
        # when the job starts): running, as a live process with such a log is.
        (
            (_r("supervisor", Says.WORKING), _r("log", Says.UNKNOWN), _r("outputs", Says.UNKNOWN)),
            State.RUNNING,
        ),
        (
            (_r("supervisor", Says.WORKING, supervisor_phase="waiting"), _r("log", Says.UNKNOWN)),
            State.RUNNING,
        ),
        ((_r("supervisor", Says.WORKING), _r("process", Says.UNKNOWN)), State.RUNNING),
        # ... but a failure it shows is still a failure.
        ((_r("supervisor", Says.WORKING), _r("log", Says.FAILED), _r("outputs", Says.UNKNOWN)), State.FAILED),
        # the record cannot be read: unknown, never complete.
        ((_r("supervisor", Says.UNKNOWN), _r("log", Says.DONE)), State.UNKNOWN),
        # exited 0, yet a process of the job is alive outside the container: contradiction.
        (
            (
                _r("supervisor", Says.DONE, supervisor_pids=[]),
                _r("process", Says.WORKING, processes=[{"pid": 4321, "cmdline": "extract.py"}]),
            ),
            State.CONTRADICTION,
        ),
        # alive inside the record's processes while it says exited 0 cannot be; inside: no contradiction.
        (
            (
                _r("supervisor", Says.DONE, supervisor_pids=[4321]),
                _r("process", Says.WORKING, processes=[{"pid": 4321, "cmdline": "extract.py"}]),
            ),
            State.RUNNING,
        ),
    ],
)
def test_verdict_table(readings, state) -> None:
    assert _decide(*readings) is state


def test_queued_job_is_no_stall_but_a_running_one_with_nothing_readable_is_unknown() -> None:
    """A job waiting in Slurm's queue an hour is running (no progress is due before it
    starts); one at work whose log is unreadable for stall_after is unknown, as before."""

    def state(*readings: Reading) -> State:
        now = {r.signal: r for r in readings}
        idle = VerdictMemory(previous=now, last_progress_at=T0 - 3600)
        verdict, _ = decide("s", "local", now, PolicySpec(), idle, T0)
        return verdict.state

    queued = _r("supervisor", Says.WORKING, supervisor_phase="waiting")
    assert state(queued, _r("log", Says.UNKNOWN)) is State.RUNNING
    assert state(queued, _r("log", Says.WORKING)) is State.RUNNING
    assert state(_r("supervisor", Says.WORKING), _r("log", Says.UNKNOWN)) is State.UNKNOWN
    # A log read whole, doubting only whose its completion line is: no unreadable signal;
    # a job at work with nothing moving is stalled, not unknown.
    doubt = _r("log", Says.UNKNOWN, line_doubt=True)
    assert state(_r("supervisor", Says.WORKING), doubt) is State.STALLED


def test_a_running_record_outranks_the_logs_doubt_about_an_earlier_line() -> None:
    # docs/supervisors.md: running, whatever the log says; an error line still fails.
    doubt = _r("log", Says.UNKNOWN, line_doubt=True)
    assert _decide(_r("supervisor", Says.WORKING), doubt) is State.RUNNING
    assert _decide(_r("supervisor", Says.WORKING), doubt, _r("outputs", Says.DONE)) is State.RUNNING
    assert _decide(_r("supervisor", Says.WORKING), doubt, _r("outputs", Says.FAILED)) is State.FAILED
    assert _decide(_r("supervisor", Says.WORKING), _r("log", Says.FAILED)) is State.FAILED
    # not at work: the doubt stands
    assert _decide(_r("supervisor", Says.DONE), doubt) is State.UNKNOWN


def test_a_contradiction_names_both_sides() -> None:
    verdict, _ = decide(
        "s",
        "local",
        {
            "supervisor": _r("supervisor", Says.DONE, supervisor_pids=[]),
            "process": _r("process", Says.WORKING, processes=[{"pid": 4321, "cmdline": "extract.py --all"}]),
        },
        PolicySpec(),
        VerdictMemory(),
        T0,
    )
    assert "pid 4321 (extract.py --all)" in verdict.reasons[0]
    assert verdict.reasons[1].startswith("supervisor:") and verdict.reasons[2].startswith("process alive:")


# --------------------------------------------------------------------------- the real probe


def _watch(stage: dict, host, checks: int = 3):
    checker = Checker(stage_from_dict(stage), host=host)
    verdicts = [checker.check() for _ in range(checks)]
    return checker, verdicts[-1]


@pytest.fixture
def stand(tmp_path) -> Stand:
    return Stand(tmp_path)


def _docker_stage(stand: Stand, **extra) -> dict:
    return {"stage": "web", "supervisor": {"docker": "web", "bin": str(stand.bin)}, **extra}


def test_docker_exit_0_completes_and_the_pid_is_the_containers(stand, host) -> None:
    job = subprocess.Popen(["sleep", "30"])
    try:
        stand.container("web", status="running", cid=CID, started=time.time() - 5, pid=job.pid)
        checker = Checker(stage_from_dict(_docker_stage(stand)), host=host)
        running = checker.check()
        assert running.state is State.RUNNING
        sup = running.readings["supervisor"]
        assert sup.evidence["supervisor_pids"][0] == job.pid
        assert 1 not in sup.evidence["supervisor_pids"]  # the "Pid" label is not the State's
        assert running.run["source"] == "supervisor" and running.run["supervised"].startswith(CID)
    finally:
        job.kill()
        job.wait()
    stand.container("web", status="exited", cid=CID, started=time.time() - 5, finished=time.time())
    verdicts = [checker.check() for _ in range(2)]
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"exit_code": 1}, "exited with status 1"),
        ({"exit_code": 137}, "SIGKILL"),
        ({"exit_code": 137, "oom": True}, "OOM"),
    ],
)
def test_docker_non_zero_kill_oom_fail(stand, host, kw, words) -> None:
    stand.container("web", status="exited", cid=CID, started=T0, finished=T0 + 9, **kw)
    _, verdict = _watch(_docker_stage(stand), host, checks=1)
    assert verdict.state is State.FAILED
    assert words in verdict.reasons[0]
    assert verdict.readings["supervisor"].evidence["exit_status"] == 137 if kw["exit_code"] == 137 else 1


def test_docker_restarted_as_a_new_container_is_a_new_run(stand, host, tmp_path) -> None:
    log = tmp_path / "web.log"
    log.write_text("working\nDONE\n")
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$"})
    stand.container("web", status="exited", cid=CID, started=T0, finished=T0 + 9, exit_code=0)
    checker = Checker(stage_from_dict(stage), host=host)
    first = checker.check()
    assert first.run["supervised"].startswith(CID)
    # The same name, a new container, at work: a new run whatever the log holds.
    now = time.time()
    stand.container("web", status="running", cid=CID2, started=now, pid=0)
    second = checker.check()
    assert second.run["supervised"].startswith(CID2)
    # The check that finds the new run reads the log with the last run's offsets set aside
    # (its section was asked with them): it may say unknown once; the next is the new run's.
    assert second.state in (State.RUNNING, State.UNKNOWN)
    assert checker.check().state is State.RUNNING
    # It exits 0 without writing the completion line again: the earlier run's line is no
    # word of this run (written before it began).
    stand.container("web", status="exited", cid=CID2, started=now, finished=time.time(), exit_code=0)
    third = [checker.check() for _ in range(2)][-1]
    assert third.state is not State.COMPLETE


def test_a_since_watch_moves_to_a_new_container_and_its_own_outputs(stand, host, tmp_path) -> None:
    """A watch given --since sees container 1 killed, then container 2 (the same name) run
    and exit 0 with its line and every output: the latest run since the start decides, and
    nothing of container 1's (its end, the outputs' memory of it) holds for container 2
    (fuzzer seeds 87, 105, 159: container 2's outputs read as written after the job was
    over, unknown for good). What was written before container 2 began stays the last run's
    (seed 57: its line, a false complete when container 2 wrote none)."""
    log, out = tmp_path / "web.log", tmp_path / "out"
    out.mkdir()
    stage = _docker_stage(
        stand,
        log={"path": str(log), "complete": "^DONE$"},
        outputs={"files": str(out), "pattern": "*.pt", "expected": 2},
    )
    since = time.time()
    time.sleep(0.05)
    start1 = time.time()
    stand.container("web", status="running", cid=CID, started=start1, pid=0)
    log.write_text("step 1\n")
    (out / "a.pt").write_text("x")
    checker = Checker(stage_from_dict(stage), host=host, since=since)
    assert checker.check().state is State.RUNNING
    stand.container("web", status="exited", cid=CID, started=start1, finished=time.time(), exit_code=137)
    assert checker.check().state is State.FAILED
    time.sleep(0.05)
    start2 = time.time()
    stand.container("web", status="running", cid=CID2, started=start2, pid=0)
    (out / "a.pt").write_text("y")
    (out / "b.pt").write_text("y")
    with open(log, "a") as f:
        f.write("step 2\nDONE\n")
    stand.container("web", status="exited", cid=CID2, started=start2, finished=time.time(), exit_code=0)
    states = [checker.check().state for _ in range(4)]
    assert states[-1] is State.COMPLETE, (states, checker.last.reasons if checker.last else None)


def test_a_since_watch_never_takes_the_last_containers_line_for_a_new_ones(stand, host, tmp_path) -> None:
    log = tmp_path / "web.log"
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$"})
    since = time.time()
    time.sleep(0.05)
    start1 = time.time()
    stand.container("web", status="running", cid=CID, started=start1, pid=0)
    log.write_text("step 1\n")
    checker = Checker(stage_from_dict(stage), host=host, since=since)
    assert checker.check().state is State.RUNNING
    with open(log, "a") as f:
        f.write("DONE\n")
    stand.container("web", status="exited", cid=CID, started=start1, finished=time.time(), exit_code=0)
    checker.check()
    time.sleep(1.1)
    start2 = time.time()
    stand.container("web", status="running", cid=CID2, started=start2, pid=0)
    assert checker.check().state is not State.COMPLETE
    stand.container("web", status="exited", cid=CID2, started=start2, finished=time.time(), exit_code=0)
    states = [checker.check().state for _ in range(3)]
    assert State.COMPLETE not in states, states


@pytest.mark.parametrize("second_writes_the_line", [False, True])
def test_a_since_before_two_containers_first_watched_after_both_is_the_latest_ones(
    stand, host, tmp_path, second_writes_the_line
) -> None:
    """A watch begun after container 2 ended, with a since before container 1: container 1
    wrote the completion line and exited 0, container 2 (the latest since the since) wrote
    progress and exited 0 with no line. Container 1's line completed container 2 (fuzzer
    seed 4101729, a hard false complete): the first record a since-bound watch reads is the
    run, from the record's start. Container 2 with a line of its own completes."""
    log = tmp_path / "web.log"
    stage = _docker_stage(
        stand, log={"path": str(log), "complete": "^DONE$", "progress": r"\[(?P<done>\d+)/5\]"}
    )
    since = time.time()
    time.sleep(0.05)
    start1 = time.time()
    log.write_text("[5/5]\nDONE\n")
    stand.container("web", status="exited", cid=CID, started=start1, finished=time.time(), exit_code=0)
    time.sleep(1.1)
    start2 = time.time()
    time.sleep(0.3)  # its first words come after its start (an interpreter's import)
    with open(log, "a") as f:
        f.write("[1/5]\n[5/5]\n" + ("DONE\n" if second_writes_the_line else ""))
    stand.container("web", status="exited", cid=CID2, started=start2, finished=time.time(), exit_code=0)
    checker = Checker(stage_from_dict(stage), host=host, since=since)
    states = [checker.check().state for _ in range(4)]
    if second_writes_the_line:
        assert states[-1] is State.COMPLETE, (states, checker.last.reasons if checker.last else None)
    else:
        assert State.COMPLETE not in states, (states, checker.last.reasons if checker.last else None)


def test_an_earlier_containers_error_after_the_since_fails_no_run_of_its_own(stand, host, tmp_path) -> None:
    """A --since given 1.5 s into container 1's life: it writes a CUDA error after the since
    and exits 1. That is an earlier run's end and an earlier run's error: the run asked for
    has not begun (fuzzer seed 4000132: `failed` on it). Container 2, begun after the since,
    writes the same error while at work: that one fails the run, its text the same."""
    log = tmp_path / "web.log"
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$", "error": "CUDA error"})
    start1 = time.time()
    stand.container("web", status="running", cid=CID, started=start1, pid=0)
    log.write_text("step 1\n")
    time.sleep(0.05)
    since = time.time()
    checker = Checker(stage_from_dict(stage), host=host, since=since)
    assert checker.check().state is not State.FAILED
    time.sleep(0.05)
    error = "RuntimeError: CUDA error: out of memory\n"
    with open(log, "a") as f:
        f.write("Traceback (most recent call last):\n" + error)
    stand.container("web", status="exited", cid=CID, started=start1, finished=time.time(), exit_code=1)
    states = [checker.check() for _ in range(2)]
    assert all(v.state is not State.FAILED for v in states), [v.reasons for v in states]
    start2 = time.time()
    stand.container("web", status="running", cid=CID2, started=start2, pid=0)
    checker.check()
    with open(log, "a") as f:
        f.write("step 1\n" + error)
    verdict = [checker.check() for _ in range(2)][-1]
    assert verdict.state is State.FAILED and "CUDA error" in verdict.reasons[0], verdict.reasons


@pytest.mark.parametrize(
    "code, after",
    [(0, State.COMPLETE), (1, State.FAILED), (None, State.RUNNING)],
)
def test_the_check_that_finds_a_new_container_reads_its_log(stand, host, tmp_path, code, after) -> None:
    # The probe asks for the log with the last run's memory (a read from its offset, or none
    # where the log looked unchanged): the check that finds the new container must read its
    # log all the same, not say unknown once (issue 36).
    log = tmp_path / "web.log"
    log.write_text("working\n" * 40 + "DONE\n")
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$"})
    began = time.time() - 30
    stand.container("web", status="exited", cid=CID, started=began, finished=time.time() - 2, exit_code=0)
    checker = Checker(stage_from_dict(stage), host=host)
    assert [checker.check() for _ in range(2)][-1].state is State.COMPLETE
    now = time.time()
    stand.container("web", status="running", cid=CID2, started=now, pid=0)
    time.sleep(1.2)
    if code is not None:  # at work, it has written nothing yet: the log looks unchanged
        with log.open("a") as f:
            f.write("again\n" + ("DONE\n" if code == 0 else ""))
    if code is not None:
        stand.container("web", status="exited", cid=CID2, started=now, finished=time.time(), exit_code=code)
    first = checker.check()
    assert first.run["supervised"].startswith(CID2)
    assert first.state is not State.UNKNOWN, first.reasons
    # What a whole read of the log tells (an earlier line, then more, is not this run's).
    assert "left off" not in first.readings["log"].detail, first.readings["log"].detail
    verdicts = [first] + [checker.check() for _ in range(2)]
    assert after in [v.state for v in verdicts], [v.reasons for v in verdicts]


def test_the_check_that_finds_a_new_container_of_an_unchanged_log(stand, host, tmp_path) -> None:
    # The log did not change between the checks (the probe asked for no read at all): the
    # new run's exit 1 fails the stage at the check that finds it.
    log = tmp_path / "web.log"
    log.write_text("working\nDONE\n")
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$"})
    stand.container(
        "web", status="exited", cid=CID, started=time.time() - 30, finished=time.time() - 2, exit_code=0
    )
    checker = Checker(stage_from_dict(stage), host=host)
    [checker.check() for _ in range(2)]
    now = time.time()
    stand.container("web", status="exited", cid=CID2, started=now, finished=now + 0.5, exit_code=0)
    first = checker.check()
    assert first.run["supervised"].startswith(CID2)
    assert first.readings["log"].says is not Says.UNKNOWN, first.readings["log"].detail
    assert first.state is not State.COMPLETE  # its line is the last run's


def test_docker_record_that_cannot_be_read(stand, host) -> None:
    stand.docker_error("web", DOCKER_PERMISSION_DENIED)
    _, verdict = _watch(_docker_stage(stand), host, checks=1)
    sup = verdict.readings["supervisor"]
    assert verdict.state is State.UNKNOWN and sup.says is Says.UNKNOWN
    assert "permission denied" in sup.detail


def test_the_real_docker_cli_without_a_daemon_is_unknown(host) -> None:
    # The real docker CLI (28.2.2 here), no daemon: its own words, unknown.
    _, verdict = _watch({"stage": "web", "supervisor": {"docker": "web"}}, host, checks=1)
    sup = verdict.readings["supervisor"]
    assert sup.says is Says.UNKNOWN, sup.detail
    assert verdict.state is State.UNKNOWN


def test_docker_exit_0_with_the_job_alive_outside_is_a_contradiction(stand, host, tmp_path) -> None:
    tag = f"cc-sup-{uuid.uuid4().hex[:8]}"
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", tag])
    try:
        stand.container("web", status="exited", cid=CID, started=T0, finished=T0 + 9, exit_code=0)
        _, verdict = _watch(_docker_stage(stand, process={"match": tag}), host, checks=1)
        assert verdict.state is State.CONTRADICTION, verdict.reasons
        assert f"pid {outside.pid}" in verdict.reasons[0]
    finally:
        outside.kill()
        outside.wait()


def _rewrite(path: Path, text: str) -> None:
    """A job's last write: a temporary file renamed over an output (its folder changes)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


@pytest.mark.parametrize(
    "when, completes",
    [
        # the last output rewritten after the completion line, the container still running
        # at the check that finds it (then it exits 0)
        ("running", True),
        # rewritten, then exited 0, both between two checks: the record said running at the
        # last check and its FinishedAt is after the write: the job's own work
        ("before_exit", True),
        # rewritten after the recorded FinishedAt: not the job's (never complete)
        ("after_exit", False),
    ],
)
def test_outputs_written_after_the_line_while_the_container_works_are_its_own(
    stand, host, tmp_path, when, completes
) -> None:
    # A gate that never opened (review of issue 36): a job that writes its completion line,
    # then its last output, then exits, watched with a log and outputs and no process
    # section: the supervisor's record is the job's liveness and its end.
    log, out = tmp_path / "web.log", tmp_path / "out"
    out.mkdir()
    (out / "a.out").write_text("a")
    (out / "b.out").write_text("b")
    log.write_text("working\nDONE\n")
    job = subprocess.Popen(["sleep", "60"])
    began = time.time() - 5
    stage = _docker_stage(
        stand,
        log={"path": str(log), "complete": "^DONE$"},
        outputs={"files": str(out), "expected": 2},
    )
    try:
        stand.container("web", status="running", cid=CID, started=began, pid=job.pid)
        checker = Checker(stage_from_dict(stage), host=host)
        seen = [checker.check(), checker.check()]
        assert [v.state for v in seen] == [State.RUNNING, State.RUNNING], [v.reasons for v in seen]
        time.sleep(0.05)
        if when == "after_exit":
            stand.container("web", status="exited", cid=CID, started=began, finished=time.time(), exit_code=0)
            time.sleep(0.05)
            _rewrite(out / "b.out", "b, final")
        else:
            _rewrite(out / "b.out", "b, final")
            if when == "running":
                seen.append(checker.check())
                assert seen[-1].state is State.RUNNING, seen[-1].reasons
            time.sleep(0.05)
            stand.container("web", status="exited", cid=CID, started=began, finished=time.time(), exit_code=0)
    finally:
        job.kill()
        job.wait()
    seen += [checker.check() for _ in range(4)]
    if completes:
        assert seen[-1].state is State.COMPLETE, [v.reasons for v in seen]
        assert not any("completion line" in v.readings["outputs"].detail for v in seen), [
            v.readings["outputs"].detail for v in seen
        ]
    else:
        assert all(v.state is not State.COMPLETE for v in seen), [v.reasons for v in seen]
        assert seen[-1].readings["outputs"].says is Says.UNKNOWN, seen[-1].readings["outputs"].detail


@pytest.mark.parametrize(
    "when, completes",
    [
        # the line, then a summary, then exit 0, all between two checks: the record said
        # running at the last check and its FinishedAt is after the summary: the job's own
        ("before_exit", True),
        # the summary written after the recorded FinishedAt: another writer's (never complete)
        ("after_exit", False),
    ],
)
def test_text_after_the_line_while_the_container_works_is_its_own(
    stand, host, tmp_path, when, completes
) -> None:
    # Fuzzer seed 1600096: a job that prints a summary after its completion line
    # ("uploading manifest") and exits 0, watched with a log and no process section: the
    # supervisor's recorded end tells whose the summary is, as a launched job's recorded
    # exit does. Before, it stayed unknown for good ("no process known to have written the
    # completion line can have written" the summary).
    log = tmp_path / "web.log"
    log.write_text("working\n")
    job = subprocess.Popen(["sleep", "60"])
    began = time.time() - 5
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$"})
    try:
        stand.container("web", status="running", cid=CID, started=began, pid=job.pid)
        checker = Checker(stage_from_dict(stage), host=host)
        seen = [checker.check(), checker.check()]
        assert [v.state for v in seen] == [State.RUNNING, State.RUNNING], [v.reasons for v in seen]
        time.sleep(0.05)
        with log.open("a") as f:
            f.write("DONE\n")
        if when == "after_exit":
            time.sleep(0.05)
            stand.container("web", status="exited", cid=CID, started=began, finished=time.time(), exit_code=0)
            time.sleep(0.05)
            with log.open("a") as f:
                f.write("uploading manifest\n")
        else:
            with log.open("a") as f:
                f.write("uploading manifest\n")
            time.sleep(0.05)
            stand.container("web", status="exited", cid=CID, started=began, finished=time.time(), exit_code=0)
    finally:
        job.kill()
        job.wait()
    seen += [checker.check() for _ in range(4)]
    if completes:
        assert seen[-1].state is State.COMPLETE, [v.reasons for v in seen]
    else:
        assert all(v.state is not State.COMPLETE for v in seen), [v.reasons for v in seen]
        assert seen[-1].readings["log"].says is Says.UNKNOWN, seen[-1].readings["log"].detail


@pytest.mark.parametrize("error", [False, True])
def test_a_running_container_whose_log_holds_an_earlier_line_then_more_is_running(
    stand, host, tmp_path, error
) -> None:
    log = tmp_path / "web.log"
    log.write_text("working\nDONE\n")
    stand.container("web", status="running", cid=CID, started=time.time() - 30, pid=0)
    with log.open("a") as f:
        f.write("a new run begins\n" + ("Traceback (most recent call last):\n" if error else ""))
    stage = _docker_stage(stand, log={"path": str(log), "complete": "^DONE$", "error": "^Traceback"})
    _, verdict = _watch(stage, host, checks=2)
    if error:
        assert verdict.state is State.FAILED, verdict.reasons
    else:
        assert verdict.readings["log"].says is Says.UNKNOWN, verdict.readings["log"].detail
        assert verdict.readings["log"].evidence.get("line_doubt") is True
        assert verdict.state is State.RUNNING, verdict.reasons


def _unit_stage(stand: Stand, **extra) -> dict:
    return {"stage": "job", "supervisor": {"systemd": "job.service", "bin": str(stand.bin)}, **extra}


def _own_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line.strip()[3:]
    return ""


@pytest.mark.parametrize(
    "kw, state",
    [
        ({"active": "active", "sub": "exited", "code": 1, "status": 0}, State.COMPLETE),
        ({"active": "failed", "sub": "failed", "code": 1, "status": 2, "result": "exit-code"}, State.FAILED),
        ({"active": "failed", "sub": "failed", "code": 2, "status": 9, "result": "signal"}, State.FAILED),
        ({"active": "failed", "sub": "failed", "code": 2, "status": 9, "result": "oom-kill"}, State.FAILED),
    ],
)
def test_systemd_ends(stand, host, kw, state) -> None:
    stand.unit("job.service", invocation="ab" * 16, started=T0, exited=T0 + 3, **kw)
    _, verdict = _watch(_unit_stage(stand), host)
    assert verdict.state is state, verdict.reasons


def test_systemd_running_reads_the_units_cgroup(stand, host) -> None:
    cgroup = _own_cgroup()
    stand.unit(
        "job.service", invocation="ab" * 16, started=T0, active="active", sub="running", pid=1, cgroup=cgroup
    )
    _, verdict = _watch(_unit_stage(stand), host, checks=1)
    assert verdict.state is State.RUNNING
    import os

    if cgroup and os.path.exists(f"/sys/fs/cgroup{cgroup}/cgroup.procs"):
        assert verdict.readings["supervisor"].evidence.get("supervisor_pids")


def test_systemd_a_new_invocation_is_a_new_run(stand, host) -> None:
    stand.unit(
        "job.service", invocation="ab" * 16, started=T0, exited=T0 + 3, active="active", sub="exited", code=1
    )
    checker = Checker(stage_from_dict(_unit_stage(stand)), host=host)
    assert checker.check().run["supervised"] == "ab" * 16
    stand.unit("job.service", invocation="cd" * 16, started=T0 + 60, active="active", sub="running", pid=1)
    verdict = checker.check()
    assert verdict.run["supervised"] == "cd" * 16 and verdict.state is State.RUNNING


def test_systemd_record_that_cannot_be_read(stand, host) -> None:
    stand.systemd_error("job.service", "Failed to connect to bus: No medium found")
    _, verdict = _watch(
        _unit_stage(stand, supervisor={"systemd": "job.service", "user": True, "bin": str(stand.bin)}),
        host,
        checks=1,
    )
    assert verdict.state is State.UNKNOWN
    assert "No medium found" in verdict.readings["supervisor"].detail


def test_the_real_systemctl_without_systemd_is_unknown(host) -> None:
    _, verdict = _watch({"stage": "job", "supervisor": {"systemd": "job.service"}}, host, checks=1)
    assert verdict.readings["supervisor"].says is Says.UNKNOWN
    assert verdict.state is State.UNKNOWN


def test_a_real_systemd_run_user_unit(tmp_path) -> None:
    done = subprocess.run(["systemctl", "--user", "show", "-p", "Version"], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"no systemd user manager here: systemctl --user says {done.stderr.strip()!r}")
    unit = f"cc-test-{uuid.uuid4().hex[:8]}.service"
    subprocess.run(["systemd-run", "--user", "--unit", unit, "-p", "RemainAfterExit=yes", "true"], check=True)
    try:
        _, verdict = _watch({"stage": "job", "supervisor": {"systemd": unit, "user": True}}, None, checks=3)
        assert verdict.state is State.COMPLETE
    finally:
        subprocess.run(["systemctl", "--user", "stop", unit], check=False)


# --------------------------------------------------------------------------- Slurm, for real


def _slurm_stage(slurm, job: str) -> dict:
    return {"stage": "sb", "supervisor": {"slurm": job, "bin": str(slurm.bin)}}


@pytest.mark.parametrize(
    "script, final, state, words",
    [
        ("sleep 0.5; exit 0", "COMPLETED", State.COMPLETE, "exited with status 0 (success; COMPLETED)"),
        # No accounting here: the code is squeue's (its exit_code, the wait status), not lost.
        ("sleep 0.5; exit 3", "FAILED", State.FAILED, "exited with status 3 (FAILED)"),
        ("kill -9 $$", "FAILED", State.FAILED, "killed by SIGKILL (signal 9)"),
    ],
)
def test_slurm_job_ends(slurm, host, script, final, state, words) -> None:
    job = slurm.submit(script)
    slurm.wait_state(job, final)
    _, verdict = _watch(_slurm_stage(slurm, job), host)
    assert verdict.state is state, verdict.reasons
    assert verdict.run["supervised"].startswith(f"{job}@")
    assert words in verdict.readings["supervisor"].detail, verdict.readings["supervisor"].detail


def test_slurm_job_killed(slurm, host) -> None:
    job = slurm.submit("sleep 60")
    slurm.wait_state(job, "RUNNING")
    checker = Checker(stage_from_dict(_slurm_stage(slurm, job)), host=host)
    running = checker.check()
    assert running.state is State.RUNNING, running.reasons
    slurm.tool("scancel", job)
    slurm.wait_state(job, "CANCELLED")
    assert checker.check().state is State.FAILED


def test_slurm_requeued_is_a_new_run(slurm, host) -> None:
    job = slurm.submit("sleep 60")
    slurm.wait_state(job, "RUNNING")
    checker = Checker(stage_from_dict(_slurm_stage(slurm, job)), host=host)
    first = checker.check().run["supervised"]
    time.sleep(1.1)  # Slurm's start times are whole seconds
    slurm.tool("scontrol", "requeue", job)
    # A requeued job is held back (its BeginTime, ~2 minutes on): let it start now.
    slurm.wait_state(job, "PENDING", "REQUEUED")
    slurm.tool("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        verdict = checker.check()
        if (
            verdict.run["supervised"] != first
            and verdict.readings["supervisor"].evidence["supervisor_phase"] == "running"
        ):
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"the requeued job was never read as a new run: {verdict.run}")
    slurm.tool("scancel", job)


def test_slurm_record_that_cannot_be_read(slurm, host, tmp_path) -> None:
    # A controller that does not answer: a configuration naming a port nobody listens on.
    bad = tmp_path / "bin"
    bad.mkdir()
    conf = tmp_path / "slurm.conf"
    text = slurm.conf.read_text()
    import re

    # MessageTimeout=1: the client tries the port once, not for 18 s (the default 10 s has
    # squeue retry its connect); the answer, "Unable to contact slurm controller", is the same.
    conf.write_text("MessageTimeout=1\n" + re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=1", text))
    for tool in ("sacct", "squeue", "scontrol"):
        (bad / tool).write_text(f'#!/bin/sh\nSLURM_CONF={conf}; export SLURM_CONF\nexec {tool} "$@"\n')
        (bad / tool).chmod(0o755)
    _, verdict = _watch({"stage": "sb", "supervisor": {"slurm": "1", "bin": str(bad)}}, host, checks=1)
    assert verdict.readings["supervisor"].says is Says.UNKNOWN, verdict.readings["supervisor"].detail
    assert "Unable to contact slurm controller" in verdict.readings["supervisor"].detail
    assert verdict.state is State.UNKNOWN


# --------------------------------------------------------------------------- launch through a supervisor


@pytest.fixture(params=["local", "ssh"])
def on(request) -> dict:
    """Where a launched stage lives: this machine, or the test sshd (the stage's ``host``)."""
    return {} if request.param == "local" else {"host": request.getfixturevalue("ssh_spec")}


def _launch(stage: dict, state: Path) -> dict:
    """``launch_stage`` as a flow runs it (its body, Prefect's run logger off: no API needed
    for a supervised launch)."""
    from prefect.logging import disable_run_logger

    from sensors.flows import launch_stage

    with disable_run_logger():
        return launch_stage.fn(stage_from_dict(stage), state=str(state))


def _gate(stage: dict, record: dict, checks: int = 1):
    """A gate given the launch record (``check_stage``'s body: a Checker of the record's run)."""
    from sensors._run.run import run_from_record

    checker = Checker(stage_from_dict(stage), run=run_from_record(record))
    return [checker.check() for _ in range(checks)][-1]


def _until(stage: dict, record: dict, *states: State, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        verdict = _gate(stage, record, checks=2)
        if verdict.state in states or time.monotonic() > deadline:
            return verdict
        time.sleep(0.2)


@pytest.mark.parametrize("code, final", [(0, State.COMPLETE), (3, State.FAILED)])
def test_docker_launch_binds_the_container_it_created(stand, on, tmp_path, code, final) -> None:
    name = f"web-{uuid.uuid4().hex[:6]}"
    stage = {
        "stage": "web",
        **on,
        "supervisor": {"docker": name, "bin": str(stand.bin)},
        "launch": {
            "command": ["busybox:1.36", "sh", "-c", f"sleep 3; exit {code}"],
            "log": str(tmp_path / "web.log"),
        },
    }
    record = _launch(stage, tmp_path / "state.db")
    cid = record["supervised"]
    assert record["pid"] is None and cid and cid in stand.record(f"docker-{name}")
    running = _gate(stage, record)
    assert running.state is State.RUNNING, running.reasons
    assert running.readings["supervisor"].evidence["supervisor_pids"], running.readings["supervisor"]
    verdict = _until(stage, record, State.COMPLETE, State.FAILED)
    assert verdict.state is final, verdict.reasons
    assert verdict.readings["supervisor"].evidence["supervisor_identity"].startswith(cid)
    # The name again, a later container (removed and run again by hand): another run. The
    # launched run's record is gone; its gate never takes the later one's exit for it.
    subprocess.run([str(stand.bin / "docker"), "rm", name], check=True, capture_output=True)
    stand.container(name, status="exited", cid=CID2, started=time.time(), finished=time.time(), exit_code=0)
    later = _gate(stage, record, checks=2)
    assert later.state is State.UNKNOWN, later.reasons
    assert "another run" in later.readings["supervisor"].detail
    # A second launch under a name in use is docker's conflict, said as the launch's error.
    from sensors._base.errors import ProbeError

    with pytest.raises(ProbeError, match="already in use"):
        _launch(stage, tmp_path / "state.db")


@pytest.mark.parametrize("code, final", [(0, State.COMPLETE), (3, State.FAILED)])
def test_systemd_launch_binds_the_invocation_it_created(stand, on, tmp_path, code, final) -> None:
    unit = f"job-{uuid.uuid4().hex[:6]}"
    log = tmp_path / "job.log"
    stage = {
        "stage": "job",
        **on,
        "supervisor": {"systemd": unit, "bin": str(stand.bin)},
        "launch": {
            "command": ["sh", "-c", f"echo at work in $PWD; sleep 3; exit {code}"],
            "log": str(log),
            "cwd": str(tmp_path),
        },
    }
    record = _launch(stage, tmp_path / "state.db")
    invocation = record["supervised"]
    assert record["pid"] is None and len(invocation) == 32
    running = _gate(stage, record)
    assert running.state is State.RUNNING, running.reasons
    verdict = _until(stage, record, State.COMPLETE, State.FAILED)
    assert verdict.state is final, verdict.reasons
    assert verdict.readings["supervisor"].evidence["supervisor_identity"] == invocation
    assert f"at work in {tmp_path}" in log.read_text()  # the unit's output, appended to the log
    # The unit collected (reset-failed, stop) and run again under the same name: a new
    # invocation, another run for the launched one's gate. (Its job works 0.5 s, not 3:
    # nothing here waits to see it at work.)
    (stand.bin / "state" / f"systemd-{unit}.service").unlink()
    rerun = {**stage, "launch": {**stage["launch"], "command": ["sh", "-c", f"sleep 0.5; exit {code}"]}}
    again = _launch(rerun, tmp_path / "other.db")
    assert again["supervised"] != invocation
    later = _gate(stage, record, checks=2)
    assert later.state is State.UNKNOWN, later.reasons
    assert "another run" in later.readings["supervisor"].detail
    assert _until(rerun, again, State.COMPLETE, State.FAILED).state is final


@pytest.mark.parametrize(
    "script, final", [("sleep 1; echo done; exit 0", State.COMPLETE), ("sleep 1; exit 3", State.FAILED)]
)
def test_slurm_launch_binds_the_job_sbatch_gave(slurm, on, tmp_path, script, final) -> None:
    tmp_path.chmod(0o755)
    log = tmp_path / "sb.log"
    # The stage file cannot know the job's ID before sbatch gives it: it names any; every
    # consumer of the launch record watches the job the record names.
    stage = {
        "stage": "sb",
        **on,
        "supervisor": {"slurm": 999999, "bin": str(slurm.bin)},
        "launch": {"command": ["sh", "-c", script], "log": str(log)},
    }
    record = _launch(stage, tmp_path / "state.db")
    job = record["supervised"]
    assert job.isdigit() and job != "999999"
    verdict = _until(stage, record, State.COMPLETE, State.FAILED, timeout=40)
    assert verdict.state is final, verdict.reasons
    sup = verdict.readings["supervisor"]
    assert sup.evidence["supervisor_name"] == job and sup.evidence["supervisor_identity"].startswith(
        f"{job}@"
    )
    if final is State.COMPLETE:
        assert "done" in log.read_text()


# --------------------------------------------------------------------------- process-only under a supervisor


def test_process_without_match_needs_a_supervisor() -> None:
    from sensors._base.errors import ConfigError

    with pytest.raises(ConfigError, match="give a supervisor section"):
        stage_from_dict({"stage": "p", "process": {}})
    with pytest.raises(ConfigError, match="exactly one of match or pid"):
        stage_from_dict({"stage": "p", "supervisor": {"docker": "x"}, "process": {"match": "a", "pid": 3}})
    assert stage_from_dict({"stage": "p", "supervisor": {"docker": "x"}, "process": {}}).process.supervised


def _supervised_stage(kind: str, stand: Stand, request, tmp_path: Path, code: int) -> dict:
    script = f"sleep 2; exit {code}"
    if kind == "docker":
        sup, command = (
            {"docker": f"p-{uuid.uuid4().hex[:6]}", "bin": str(stand.bin)},
            ["img", "sh", "-c", script],
        )
    elif kind == "systemd":
        sup, command = {"systemd": f"p-{uuid.uuid4().hex[:6]}", "bin": str(stand.bin)}, ["sh", "-c", script]
    else:
        slurm = request.getfixturevalue("slurm")
        tmp_path.chmod(0o755)
        sup, command = {"slurm": 999999, "bin": str(slurm.bin)}, ["sh", "-c", script]
    return {
        "stage": "p",
        "supervisor": sup,
        "process": {},
        "launch": {"command": command, "log": str(tmp_path / "p.log")},
    }


@pytest.mark.parametrize("kind", ["docker", "systemd", "slurm"])
@pytest.mark.parametrize("code, final", [(0, State.COMPLETE), (4, State.FAILED)])
def test_a_process_only_stage_under_a_supervisor_ends(
    kind, code, final, stand, on, request, tmp_path
) -> None:
    stage = {**_supervised_stage(kind, stand, request, tmp_path, code), **on}
    record = _launch(stage, tmp_path / "state.db")
    from sensors._run.run import run_from_record

    checker = Checker(stage_from_dict(stage), run=run_from_record(record))
    deadline = time.monotonic() + 30
    seen: list = []
    while time.monotonic() < deadline:
        verdict = checker.check()
        seen.append(verdict)
        if verdict.state in (State.COMPLETE, State.FAILED):
            break
        time.sleep(0.2)
    assert verdict.state is final, [
        (v.state, v.readings["supervisor"].evidence.get("supervisor_pids"), v.readings["process"].detail)
        for v in seen
    ]
    at_work = [v for v in seen if v.readings["process"].says is Says.WORKING]
    # The record's processes were the job's while it ran (the container's PID, the unit's
    # cgroup, the job's PIDs on this node), read as its process.
    assert at_work, [v.readings["process"].detail for v in seen]
    pids = at_work[0].readings["supervisor"].evidence["supervisor_pids"]
    assert {p["pid"] for p in at_work[0].readings["process"].evidence["processes"]} <= set(pids)
    if final is State.COMPLETE:
        assert verdict.readings["process"].says is Says.DONE


def test_a_process_only_stage_whose_record_cannot_be_read_is_unknown(stand, host) -> None:
    stand.docker_error("web", DOCKER_PERMISSION_DENIED)
    _, verdict = _watch(_docker_stage(stand, process={}), host, checks=2)
    assert verdict.state is State.UNKNOWN
    assert verdict.readings["process"].says is Says.UNKNOWN, verdict.readings["process"].detail
