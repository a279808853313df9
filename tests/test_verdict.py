"""The verdict rules, table-driven: one row per situation (both incidents are rows).

Each row is a sequence of checks — (seconds since start, readings) — and the verdict expected
after the last one. Readings are built with the public ``sensors.testing.reading`` helper.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sensors import Reading, Says, State
from sensors._config.stage import GpuSpec, PolicySpec
from sensors._run.run import LaunchEnd
from sensors._signals.gpu import GpuDevice, GpuProcess, GpuSnapshot, gpu_reading
from sensors._verdict import VerdictMemory, decide
from sensors.testing import reading

POLICY = PolicySpec(stall_after=600, settle=2, stuck_in_d_after=120, exit_grace=60)


def proc(
    says: str = "working",
    cpu: float | None = 10.0,
    state: str = "R",
    pid: int = 4455,
    seen: bool = True,
    launched: bool = False,
    **exit: object,
) -> Reading:
    if says == "done":
        return reading(
            "process",
            "done",
            "no process found",
            pid=None,
            state=None,
            cpu_seconds=None,
            seen_alive=seen,
            launched=launched,
            **exit,
        )
    return reading("process", says, f"pid {pid} {state}", pid=pid, state=state, cpu_seconds=cpu)


def log(
    says: str = "working", size: int = 1000, line: str = "[37300] 18880 extracted, ETA 0 minutes"
) -> Reading:
    return reading("log", says, line, size=size, inode=7, last_line=line, age_seconds=5.0)


def outputs(
    count: int | None, expected: int = 37312, says: str | None = None, written: bool = False
) -> Reading:
    if says is None:
        says = "working" if count is None or count < expected else "done"
    return reading(
        "outputs", says, f"{count}/{expected}", count=count, expected=expected, written_this_run=written
    )


EARLIER = "a completion line is in the log but it may be an earlier run's: give --since"


def gpu(says: str = "done", job_pids: tuple[int, ...] = (), busy: bool = False) -> Reading:
    return reading(
        "gpu",
        says,
        "0% over 60s, 92 GB allocated" if says == "done" else "busy",
        job_pids_on_gpu=list(job_pids),
        job_gpu_busy=busy,
        job_memory_mib=92000.0 if job_pids else None,
    )


def gpu_held_by(pid: int, *, job_pids: frozenset[int] | None, pct: float = 100.0) -> Reading:
    """The real GPU reading (``gpu_reading``) of one GPU at ``pct`` % whose only compute
    process is ``pid``, given the job's PIDs as the Checker passes them (None: no process
    signal; empty: the job's identity is not known)."""
    proc = GpuProcess(pid, 40000.0, "other")
    dev = GpuDevice(0, "GPU-a", "H200", pct, 40000.0, 143771.0, (proc,))
    snap = GpuSnapshot(True, None, "550.54.15", (dev,), read_at=1_700_000_000.0, source="nvidia-smi")
    got, _ = gpu_reading(
        snap,
        GpuSpec(),
        job_pids=job_pids,
        visible_pids=frozenset({pid, *(job_pids or ())}),
        nspid={},
        state=None,
        now=1_700_000_000.0,
        host="gpu-box",
    )
    return got


def host_down(*names: str) -> dict[str, Reading]:
    ev = {"host_error": "gpu-box: connection refused"}
    return {n: Reading(n, Says.UNKNOWN, "host unreachable", ev, None, "gpu-box") for n in names}


def checks(*steps: tuple[float, dict[str, Reading]]) -> list[tuple[float, dict[str, Reading]]]:
    return list(steps)


def r(**kw: Reading) -> dict[str, Reading]:
    return dict(kw)


@dataclass
class Row:
    name: str
    steps: list[tuple[float, dict[str, Reading]]]
    expected: State
    reason_has: str = ""


ROWS = [
    Row(
        "never seen, the log unable to tell (text after its line): the log's reason first",
        checks(
            (
                0,
                r(
                    process=proc("done", seen=False),
                    log=log("unknown", line="wandb: Synced 5 W&B file(s)"),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.UNKNOWN,
        "log unknown: wandb: Synced",
    ),
    Row(
        "incident 2: log ETA 0, GPU idle with 92 GB allocated, process Rl with CPU advancing",
        checks(
            (0, r(process=proc(cpu=2700.0), log=log(), outputs=outputs(37311), gpu=gpu("done", (4455,)))),
            (30, r(process=proc(cpu=2730.0), log=log(), outputs=outputs(37311), gpu=gpu("done", (4455,)))),
        ),
        State.RUNNING,
        "CPU phase",
    ),
    Row(
        "incident 2 variant: every output counted and log complete, but the process still works",
        checks(
            (
                0,
                r(process=proc(cpu=1.0), log=log("done", line="Extraction complete"), outputs=outputs(37312)),
            ),
            (
                30,
                r(process=proc(cpu=9.0), log=log("done", line="Extraction complete"), outputs=outputs(37312)),
            ),
        ),
        State.RUNNING,
        "still at work",
    ),
    Row(
        "all done for settle=2 checks: complete",
        checks(
            (0, r(process=proc("done"), log=log("done"), outputs=outputs(37312))),
            (30, r(process=proc("done"), log=log("done"), outputs=outputs(37312))),
        ),
        State.COMPLETE,
        "every signal says done",
    ),
    Row(
        "all done once: not complete yet (settle)",
        checks((0, r(process=proc("done"), log=log("done"), outputs=outputs(37312)))),
        State.RUNNING,
        "confirming (1/2",
    ),
    Row(
        "alive, nothing moves for stall_after: stalled",
        checks(
            (0, r(process=proc(cpu=5.0, state="S"), log=log(), outputs=outputs(100))),
            (300, r(process=proc(cpu=5.0, state="S"), log=log(), outputs=outputs(100))),
            (601, r(process=proc(cpu=5.0, state="S"), log=log(), outputs=outputs(100))),
        ),
        State.STALLED,
        "no progress for 601s",
    ),
    Row(
        "alive and quiet but under stall_after: running",
        checks(
            (0, r(process=proc(cpu=5.0, state="S"), log=log(), outputs=outputs(100))),
            (300, r(process=proc(cpu=5.0, state="S"), log=log(), outputs=outputs(100))),
        ),
        State.RUNNING,
    ),
    Row(
        "the Ceph hang: state D for long counts as no progress even if counters wobble",
        checks(
            (0, r(process=proc(cpu=5.0, state="D"), log=log(size=10), outputs=outputs(18421))),
            (200, r(process=proc(cpu=5.5, state="D"), log=log(size=10), outputs=outputs(18421))),
            (700, r(process=proc(cpu=6.0, state="D"), log=log(size=10), outputs=outputs(18421))),
        ),
        State.STALLED,
        "state D",
    ),
    Row(
        "process gone with an error line: failed",
        checks((0, r(process=proc("done"), log=log("failed", line="CUDA error"), outputs=outputs(100)))),
        State.FAILED,
        "CUDA error",
    ),
    Row(
        "process gone, outputs short after the exit grace: failed",
        checks(
            (0, r(process=proc("done"), log=log(), outputs=outputs(18880))),
            (61, r(process=proc("done"), log=log(), outputs=outputs(18880))),
        ),
        State.FAILED,
        "outputs short",
    ),
    Row(
        "process gone, outputs short, within exit grace: unknown (writes may lag)",
        checks((0, r(process=proc("done"), log=log(), outputs=outputs(18880)))),
        State.UNKNOWN,
        "waiting up to 60s",
    ),
    Row(
        "process gone, outputs all counted, no completion line: contradiction",
        checks(
            (0, r(process=proc("done"), log=log(), outputs=outputs(37312))),
            (61, r(process=proc("done"), log=log(), outputs=outputs(37312))),
        ),
        State.CONTRADICTION,
        "no completion line",
    ),
    Row(
        "process gone, no completion line and no outputs configured: failed",
        checks(
            (0, r(process=proc("done"), log=log())),
            (61, r(process=proc("done"), log=log())),
        ),
        State.FAILED,
        "no completion line",
    ),
    Row(
        "completion line long ago but the process neither exits nor progresses: contradiction",
        checks(
            (0, r(process=proc(cpu=5.0, state="S"), log=log("done"))),
            (700, r(process=proc(cpu=5.0, state="S"), log=log("done"))),
        ),
        State.CONTRADICTION,
        "has not exited",
    ),
    Row(
        "process unreadable while log and outputs say done: unknown, never complete",
        checks(
            (
                0,
                r(
                    process=reading("process", "unknown", "stat unreadable"),
                    log=log("done"),
                    outputs=outputs(37312),
                ),
            ),
            (
                30,
                r(
                    process=reading("process", "unknown", "stat unreadable"),
                    log=log("done"),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.UNKNOWN,
        "process unknown",
    ),
    Row(
        "SSH connection failed: unknown, not gone",
        checks((0, host_down("process", "log", "outputs"))),
        State.UNKNOWN,
        "could not read the host",
    ),
    Row(
        "process gone but the job's PIDs still busy on the GPU: contradiction",
        checks((0, r(process=proc("done"), log=log("done"), gpu=gpu("working", (4455,), busy=True)))),
        State.CONTRADICTION,
        "still busy on the GPU",
    ),
    Row(
        "process gone (zombie) while its PIDs still hold GPU memory, GPU idle: contradiction",
        checks((0, r(process=proc("done"), log=log("done"), gpu=gpu("done", (4455,), busy=False)))),
        State.CONTRADICTION,
        "holding memory on the GPU",
    ),
    Row(
        "stuck in D while holding GPU memory: stalled, with the GPU evidence",
        checks(
            (0, r(process=proc(cpu=5.0, state="D"), log=log(size=10), gpu=gpu("done", (4455,)))),
            (200, r(process=proc(cpu=5.0, state="D"), log=log(size=10), gpu=gpu("done", (4455,)))),
            (800, r(process=proc(cpu=5.0, state="D"), log=log(size=10), gpu=gpu("done", (4455,)))),
        ),
        State.STALLED,
        "hold GPU memory",
    ),
    Row(
        "GPU busy, process alive and progressing: running",
        checks(
            (0, r(process=proc(cpu=1.0), log=log(size=10), gpu=gpu("working", (4455,), busy=True))),
            (30, r(process=proc(cpu=9.0), log=log(size=99), gpu=gpu("working", (4455,), busy=True))),
        ),
        State.RUNNING,
        "progress",
    ),
    Row(
        "a process-only stage whose match never matched: unknown, not complete",
        checks((0, r(process=proc("done", seen=False))), (30, r(process=proc("done", seen=False)))),
        State.UNKNOWN,
        "nor seen alive during this watch",
    ),
    Row(
        "never seen alive, outputs short: unknown (not started yet), not failed",
        checks(
            (0, r(process=proc("done", seen=False), log=log(), outputs=outputs(0))),
            (120, r(process=proc("done", seen=False), log=log(), outputs=outputs(0))),
        ),
        State.UNKNOWN,
        "not started yet",
    ),
    Row(
        # A late wait whose first look came just after the job's exit (a slow login over SSH):
        # the job did start; the reason names that history too, not only the two wrong ones.
        "never seen alive: it may have ended before the watch first looked",
        checks(
            (0, r(process=proc("done", seen=False), log=log(), outputs=outputs(0))),
            (120, r(process=proc("done", seen=False), log=log(), outputs=outputs(0))),
        ),
        State.UNKNOWN,
        "ended before this watch first looked",
    ),
    Row(
        "never seen alive but it finished before the watch began: log and outputs agree",
        checks(
            (0, r(process=proc("done", seen=False), log=log("done"), outputs=outputs(37312))),
            (30, r(process=proc("done", seen=False), log=log("done"), outputs=outputs(37312))),
        ),
        State.COMPLETE,
    ),
    Row(
        "never seen alive, an error line in the log: failed",
        checks(
            (0, r(process=proc("done", seen=False), log=log("failed", line="Traceback"), outputs=outputs(3)))
        ),
        State.FAILED,
    ),
    Row(
        "alive, counters still, but the job's own GPU busy (a long kernel): running, not stalled",
        checks(
            (
                0,
                r(process=proc(cpu=5.0, state="S"), log=log(size=10), gpu=gpu("working", (4455,), busy=True)),
            ),
            (
                700,
                r(process=proc(cpu=5.0, state="S"), log=log(size=10), gpu=gpu("working", (4455,), busy=True)),
            ),
        ),
        State.RUNNING,
        "the job's GPU busy",
    ),
    # Issue 9.3: "used only by others" discounts a GPU only when the job's identity is known.
    Row(
        "never seen alive, log and outputs done, a GPU at 100 % held by an unattributed PID:"
        " running, never complete",
        checks(
            (
                0,
                r(
                    process=proc("done", seen=False),
                    log=log("done"),
                    outputs=outputs(37312),
                    gpu=gpu_held_by(31337, job_pids=frozenset()),
                ),
            ),
            (
                30,
                r(
                    process=proc("done", seen=False),
                    log=log("done"),
                    outputs=outputs(37312),
                    gpu=gpu_held_by(31337, job_pids=frozenset()),
                ),
            ),
        ),
        State.RUNNING,  # this run's completion line ties the run; the busy GPU is not done
        "gpu: GPU 0 reached 100%",
    ),
    Row(
        "never seen alive, log still writing, a GPU busy by an unattributed PID: unknown",
        checks(
            (0, r(process=proc("done", seen=False), log=log(), gpu=gpu_held_by(31337, job_pids=frozenset()))),
            (
                30,
                r(process=proc("done", seen=False), log=log(), gpu=gpu_held_by(31337, job_pids=frozenset())),
            ),
        ),
        State.UNKNOWN,
        "nor seen alive during this watch",
    ),
    Row(
        "gone after seen alive (its last PIDs known), a GPU busy only by another PID: discounted",
        checks(
            (
                0,
                r(
                    process=proc("done"),
                    log=log("done"),
                    outputs=outputs(37312),
                    gpu=gpu_held_by(31337, job_pids=frozenset({4455})),
                ),
            ),
            (
                30,
                r(
                    process=proc("done"),
                    log=log("done"),
                    outputs=outputs(37312),
                    gpu=gpu_held_by(31337, job_pids=frozenset({4455})),
                ),
            ),
        ),
        State.COMPLETE,
        "not the job's: PID 31337",
    ),
    Row(
        "no process signal, log done, a GPU busy by some PID: device level, running",
        checks(
            (0, r(log=log("done"), gpu=gpu_held_by(31337, job_pids=None))),
            (30, r(log=log("done"), gpu=gpu_held_by(31337, job_pids=None))),
        ),
        State.RUNNING,
        "GPU 0 reached 100%",
    ),
    Row(
        "GPU signal unknown (no driver) blocks complete",
        checks(
            (0, r(process=proc("done"), log=log("done"), gpu=reading("gpu", "unknown", "no NVIDIA driver"))),
            (30, r(process=proc("done"), log=log("done"), gpu=reading("gpu", "unknown", "no NVIDIA driver"))),
        ),
        State.UNKNOWN,
        "gpu unknown",
    ),
    Row(
        "outputs unreadable after the process is gone: unknown",
        checks(
            (0, r(process=proc("done"), log=log("done"), outputs=outputs(None, says="unknown"))),
            (61, r(process=proc("done"), log=log("done"), outputs=outputs(None, says="unknown"))),
        ),
        State.UNKNOWN,
        "outputs unknown",
    ),
    Row(
        "log-only stage: completion line twice in a row: complete",
        checks((0, r(log=log("done"))), (30, r(log=log("done")))),
        State.COMPLETE,
    ),
    Row(
        "outputs-only stage, count frozen below expected for stall_after: stalled",
        checks((0, r(outputs=outputs(10))), (601, r(outputs=outputs(10)))),
        State.STALLED,
    ),
    Row(
        "outputs-only stage, count rising: running",
        checks((0, r(outputs=outputs(10))), (601, r(outputs=outputs(20)))),
        State.RUNNING,
        "outputs 10 → 20",
    ),
    Row(
        "no process signal, log error: failed",
        checks((0, r(log=log("failed"), outputs=outputs(10)))),
        State.FAILED,
    ),
    Row(
        "a host blip after progress does not reset the stall clock or count as done",
        checks(
            (0, r(process=proc("done"), log=log("done"), outputs=outputs(37312))),
            (30, host_down("process", "log", "outputs")),
            (60, r(process=proc("done"), log=log("done"), outputs=outputs(37312))),
        ),
        State.RUNNING,
        "confirming (1/2",
    ),
    # Issue 9.1: evidence belongs to a run.
    Row(
        "never seen alive, a completion line that may be an earlier run's, outputs all there: unknown",
        checks(
            (
                0,
                r(
                    process=proc("done", seen=False),
                    log=reading("log", "unknown", EARLIER),
                    outputs=outputs(37312),
                ),
            ),
            (
                30,
                r(
                    process=proc("done", seen=False),
                    log=reading("log", "unknown", EARLIER),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.UNKNOWN,
        "--since",
    ),
    Row(
        "never seen alive, no completion line from this run, an earlier run's outputs: unknown, with the fix",
        checks(
            (0, r(process=proc("done", seen=False), log=log(), outputs=outputs(37312))),
            (30, r(process=proc("done", seen=False), log=log(), outputs=outputs(37312))),
        ),
        State.UNKNOWN,
        "--since",
    ),
    Row(
        "never seen alive, but this run's completion line (--since) and outputs: complete",
        checks(
            (0, r(process=proc("done", seen=False), log=log("done"), outputs=outputs(37312))),
            (30, r(process=proc("done", seen=False), log=log("done"), outputs=outputs(37312))),
        ),
        State.COMPLETE,
        "every signal says done",
    ),
    Row(
        "no log, the process never seen nor launched, outputs all there: unknown (they may predate the run)",
        checks(
            (0, r(process=proc("done", seen=False), outputs=outputs(37312))),
            (30, r(process=proc("done", seen=False), outputs=outputs(37312))),
        ),
        State.UNKNOWN,
        "nor seen alive during this watch",
    ),
    Row(
        "no log, the process launched by crosscheck and gone before the first check, outputs all there: complete",
        checks(
            (0, r(process=proc("done", seen=False, launched=True), outputs=outputs(37312))),
            (30, r(process=proc("done", seen=False, launched=True), outputs=outputs(37312))),
        ),
        State.COMPLETE,
    ),
    Row(
        "seen alive, gone, no completion line from this run (an earlier one's excluded), outputs all there:"
        " contradiction",
        checks(
            (0, r(process=proc(cpu=10.0), log=log(), outputs=outputs(37000))),
            (30, r(process=proc("done"), log=log(), outputs=outputs(37312))),
            (100, r(process=proc("done"), log=log(), outputs=outputs(37312))),
        ),
        State.CONTRADICTION,
        "no completion line",
    ),
    Row(
        "outputs only, all there, none written during the run: unknown",
        checks((0, r(outputs=outputs(37312))), (30, r(outputs=outputs(37312)))),
        State.UNKNOWN,
        "nothing ties it to this run",
    ),
    Row(
        "outputs only, all there, one written during the run: complete",
        checks((0, r(outputs=outputs(37312, written=True))), (30, r(outputs=outputs(37312, written=True)))),
        State.COMPLETE,
    ),
    # Issue 21, class 1: memory of another run. What reaches the verdict is a process signal
    # that saw no job of this run alive (the only one seen began before the run's start) and
    # a log whose completion line is an earlier run's.
    Row(
        "issue 21 (1): the only process seen alive was an earlier run's; outputs all there, the log's"
        " completion line an earlier run's: unknown",
        checks(
            (0, r(process=proc("done", seen=False), log=log("working"), outputs=outputs(37312))),
            (90, r(process=proc("done", seen=False), log=log("working"), outputs=outputs(37312))),
        ),
        State.UNKNOWN,
        "nor seen alive during this watch",
    ),
    # Class 2: a completion line counts only as its run's last word.
    Row(
        "issue 21 (2): a completion line followed by a later run's progress (an earlier run's), the re-run"
        " killed, outputs all there: contradiction",
        checks(
            (0, r(process=proc(cpu=10.0), log=log(), outputs=outputs(37000))),
            (30, r(process=proc("done"), log=log(), outputs=outputs(37312))),
            (100, r(process=proc("done"), log=log(), outputs=outputs(37312))),
        ),
        State.CONTRADICTION,
        "no completion line of this run",
    ),
    Row(
        "issue 21 (2): a completion line followed by other text, no progress pattern (whose text cannot be"
        " told): unknown",
        checks(
            (
                0,
                r(
                    process=proc("done"),
                    log=log("unknown", line="followed by other text"),
                    outputs=outputs(37312),
                ),
            ),
            (
                100,
                r(
                    process=proc("done"),
                    log=log("unknown", line="followed by other text"),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.UNKNOWN,
        "followed by other text",
    ),
    # Class 3: what the probe cannot see is not gone; an exit and a kill look alike.
    Row(
        "issue 21 (3): no match from a probe that cannot see every process (hidepid), this run's completion"
        " line and every output: unknown",
        checks(
            (
                0,
                r(
                    process=reading(
                        "process", "unknown", "no process matches, but the probe cannot see every process"
                    ),
                    log=log("done", line="Extraction complete"),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.UNKNOWN,
        "cannot see every process",
    ),
    Row(
        "issue 21 (3): process only, seen alive, gone, no exit status (an exit and a SIGKILL look alike): unknown",
        checks((0, r(process=proc(cpu=10.0))), (30, r(process=proc("done"))), (600, r(process=proc("done")))),
        State.UNKNOWN,
        "success from a crash",
    ),
    Row(
        "issue 21 (3): process and GPU only, gone, GPU idle: unknown (an idle GPU is no success)",
        checks(
            (0, r(process=proc(cpu=10.0), gpu=gpu("working"))),
            (30, r(process=proc("done"), gpu=gpu("done"))),
            (600, r(process=proc("done"), gpu=gpu("done"))),
        ),
        State.UNKNOWN,
        "success from a crash",
    ),
    Row(
        "issue 21 (3): process only, launched, the wrapper recorded exit status 0: complete",
        checks(
            (0, r(process=proc("done", seen=False, launched=True, exit_status=0, exited_at=1.0))),
            (30, r(process=proc("done", seen=False, launched=True, exit_status=0, exited_at=1.0))),
        ),
        State.COMPLETE,
    ),
    Row(
        "issue 35: process only, a launch record read after the exit (its wrapper never in view, the job"
        " never seen): the recorded status 0 is this run's end: complete",
        checks(
            (0, r(process=proc("done", seen=False, launched=False, exit_status=0, exited_at=1.0))),
            (30, r(process=proc("done", seen=False, launched=False, exit_status=0, exited_at=1.0))),
        ),
        State.COMPLETE,
    ),
    Row(
        "issue 35: never seen, not launched in view, a recorded status other than 0: failed, not unknown",
        checks(
            (0, r(process=proc("done", seen=False, launched=False, exit_status=1, exited_at=1.0))),
        ),
        State.FAILED,
    ),
    Row(
        "issue 21 (3): launched, the wrapper recorded status 137 (SIGKILL); completion line and every output"
        " there: failed",
        checks(
            (0, r(process=proc(cpu=10.0), log=log("working"), outputs=outputs(37000))),
            (
                30,
                r(
                    process=proc("done", launched=True, exit_status=137, exited_at=1.0),
                    log=log("done", line="Extraction complete"),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.FAILED,
        "process gone",
    ),
    Row(
        "issue 21 (3): launched, gone, no exit status recorded (the wrapper killed with the job): unknown",
        checks(
            (0, r(process=proc(cpu=10.0), log=log("working"), outputs=outputs(37000))),
            (
                300,
                r(
                    process=proc("done", launched=True, exit_status=None, exit_record="not written yet: /x"),
                    log=log("done", line="Extraction complete"),
                    outputs=outputs(37312),
                ),
            ),
        ),
        State.UNKNOWN,
        "exit status is not recorded",
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_verdict_table(row: Row) -> None:
    memory = VerdictMemory()
    start = 1_700_000_000.0
    verdict = None
    for offset, readings in row.steps:
        host_error = any("host_error" in x.evidence for x in readings.values())
        verdict, memory = decide(
            "extract", "gpu-box", readings, POLICY, memory, None if host_error else start + offset
        )
    assert verdict is not None
    assert verdict.state is row.expected, verdict.reasons
    assert verdict.advance is (row.expected is State.COMPLETE)
    if row.reason_has:
        assert any(row.reason_has in reason for reason in verdict.reasons), verdict.reasons


def test_complete_verdict_with_a_signal_not_done_is_refused() -> None:
    from sensors import Verdict

    with pytest.raises(ValueError, match="not done"):
        Verdict("s", State.COMPLETE, ("x",), {"log": reading("log", "working")}, 0.0, "h")


def test_since_holds_while_the_state_holds() -> None:
    memory = VerdictMemory()
    readings = r(process=proc(cpu=1.0), log=log())
    v1, memory = decide("s", "h", readings, POLICY, memory, 100.0)
    v2, memory = decide("s", "h", r(process=proc(cpu=2.0), log=log()), POLICY, memory, 130.0)
    assert v1.state is v2.state is State.RUNNING
    assert v2.since == 100.0


def test_verdict_json_schema() -> None:
    v, _ = decide("extract", "gpu-box", r(process=proc(), log=log()), POLICY, VerdictMemory(), 1e9)
    data = v.to_json()
    assert set(data) >= {"stage", "verdict", "advance", "reasons", "checked_at", "host", "signals"}
    assert data["verdict"] == "running" and data["advance"] is False
    assert data["signals"]["process"]["evidence"]["pid"] == 4455
    assert data["checked_at"].startswith("2001-09-09T01:46:40")


#: Rows whose first reason must be the one that decided (an event's `crosscheck.reason`,
#: the terminal's headline and the serve log show the first reason alone), not the context
#: ("process alive: ...", "process gone: ...") that every verdict of its kind shares.
DECIDED_BY = {
    "alive, nothing moves for stall_after: stalled": "no progress for 601s (CPU time, I/O, log size",
    "stuck in D while holding GPU memory: stalled, with the GPU evidence": "no progress for",
    "completion line long ago but the process neither exits nor progresses: contradiction": (
        "has made no progress"
    ),
    "process gone with an error line: failed": "log: ",
    "process gone, outputs short after the exit grace: failed": "outputs short",
    "process gone, outputs short, within exit grace: unknown (writes may lag)": "waiting up to",
    "process gone, outputs all counted, no completion line: contradiction": "no completion line",
    "process gone, no completion line and no outputs configured: failed": "no completion line",
    "process gone but the job's PIDs still busy on the GPU: contradiction": "still busy on the GPU",
    "issue 21 (3): process only, seen alive, gone, no exit status (an exit and a SIGKILL look alike): unknown": (
        "tells a success from a crash"
    ),
    "issue 21 (3): launched, gone, no exit status recorded (the wrapper killed with the job): unknown": (
        "exit status is not recorded"
    ),
}


@pytest.mark.parametrize("name", sorted(DECIDED_BY), ids=sorted(DECIDED_BY))
def test_the_first_reason_is_the_one_that_decided(name: str) -> None:
    (row,) = [row for row in ROWS if row.name == name]
    memory, verdict = VerdictMemory(), None
    for offset, readings in row.steps:
        verdict, memory = decide("extract", "gpu-box", readings, POLICY, memory, 1_700_000_000.0 + offset)
    assert verdict is not None and verdict.state is row.expected
    assert DECIDED_BY[name] in verdict.reasons[0], verdict.reasons


def test_work_is_claimed_only_where_progress_was_measured() -> None:
    """Alive is not at work: "still at work" and "a CPU phase" only with CPU time (or other
    progress) measured rising between two checks; a first check has nothing to compare."""
    quiet = r(
        process=proc(cpu=0.0, state="S"),
        log=log("done", line="Extraction complete"),
        outputs=outputs(37312),
        gpu=gpu("done", (4455,)),
    )
    first, memory = decide("s", "h", quiet, POLICY, VerdictMemory(), 100.0)
    second, memory = decide("s", "h", quiet, POLICY, memory, 130.0)
    for verdict in (first, second):
        assert verdict.state is State.RUNNING
        said = " ".join(verdict.reasons)
        assert "at work" not in said and "works" not in said and "CPU phase" not in said, verdict.reasons
        assert "has not exited" in said
    busy = r(**{**quiet, "process": proc(cpu=9.0, state="R")})
    third, _ = decide("s", "h", busy, POLICY, memory, 160.0)
    said = " ".join(third.reasons)
    assert "still at work" in said and "a CPU phase" in said and "CPU time +9.00s" in said, third.reasons


# Rule 10 on a simulated clock (checks every 100 ms). A probe counts the outputs before it
# reads the log and the process table, so the check that first finds the job over may hold a
# count from before its last writes: outputs short is `failed` only as counted at a check
# after one that already found the job over (seen alive, launched or its line read, then
# gone). exit_grace is no guard: a millisecond here, and a job never seen alive is "gone"
# from the start.
GONE_UNSEEN, GONE_SEEN = proc("done", seen=False), proc("done")
LINE = log("done", line="Extraction complete: 2 shards")
U, R, F, C = State.UNKNOWN, State.RUNNING, State.FAILED, State.COMPLETE
RULE_10 = {
    # The job: never seen alive, it wrote its outputs, its line and exited inside one
    # probe (after the count, before the log read): 0/2 then, 2/2 at the next check.
    "ends inside one probe, never seen alive: waits one check, then completes": (
        [(proc("done", seen=False), log(), outputs(0, 2)), (GONE_UNSEEN, LINE, outputs(0, 2)),
         (GONE_UNSEEN, LINE, outputs(2, 2)), (GONE_UNSEEN, LINE, outputs(2, 2))],
        [U, U, R, C],
    ),
    "line read, never seen alive, still short at the next check: failed": (
        [(GONE_UNSEEN, log(), outputs(0, 2)), (GONE_UNSEEN, LINE, outputs(0, 2)),
         (GONE_UNSEEN, LINE, outputs(0, 2))],
        [U, U, F],
    ),
    "seen alive, gone with outputs short: waits one check, then completes": (
        [(proc(), log(), outputs(1, 2)), (GONE_SEEN, LINE, outputs(1, 2)),
         (GONE_SEEN, LINE, outputs(2, 2)), (GONE_SEEN, LINE, outputs(2, 2))],
        [R, U, R, C],
    ),
    "seen alive, gone, still short at the next check: failed": (
        [(proc(), log(), outputs(1, 2)), (GONE_SEEN, log(), outputs(1, 2)),
         (GONE_SEEN, log(), outputs(1, 2))],
        [R, U, F],
    ),
    "process unknown at the check before: not known over then, waits one check": (
        [(proc(), log(), outputs(1, 2)),
         (reading("process", "unknown", "stat unreadable"), log(), outputs(1, 2)),
         (GONE_SEEN, LINE, outputs(1, 2)), (GONE_SEEN, LINE, outputs(1, 2))],
        [R, U, U, F],
    ),
}  # fmt: skip


@pytest.mark.parametrize("grace", [0.001, 0.099])  # under one interval: rule 9 passes
@pytest.mark.parametrize("name", sorted(RULE_10))
def test_outputs_short_fails_only_as_counted_after_the_end(name: str, grace: float) -> None:
    policy = PolicySpec(stall_after=600, settle=2, stuck_in_d_after=120, exit_grace=grace, interval=0.1)
    history, expected = RULE_10[name]
    memory, got = VerdictMemory(), []
    for k, step in enumerate(history):
        readings = r(process=step[0], log=step[1], outputs=step[2])
        verdict, memory = decide("extract", "gpu-box", readings, policy, memory, 1_700_000_000.0 + 0.1 * k)
        got.append(verdict.state)
        assert verdict.stuck is None, verdict.reasons  # a wait for one more check, never for good
    assert got == expected, got


@pytest.mark.parametrize(
    ("launch", "state", "words"),
    [
        (None, State.UNKNOWN, "nothing ties it to this run"),
        # A resumable re-run, launched, found every output there, skipped them and exited 0
        # (fuzzer seed 4000781: unknown for good). Its own exit on record ties them to it.
        (LaunchEnd(0, 100.0, over=True), State.COMPLETE, ""),
        (LaunchEnd(1, 100.0, over=True), State.FAILED, "launched job: exited with status 1"),
        (LaunchEnd(over=True, unreadable=True), State.UNKNOWN, "exit record cannot be read"),
        (LaunchEnd(missing=True, alive=True), State.RUNNING, "has not ended"),
    ],
)
def test_outputs_only_with_none_written_in_the_run_are_tied_to_it_by_its_recorded_exit_0(
    launch: LaunchEnd | None, state: State, words: str
) -> None:
    memory, verdict = VerdictMemory(), None
    for offset in (0.0, 30.0, 60.0):
        verdict, memory = decide(
            "s", "h", r(outputs=outputs(37312)), POLICY, memory, 100.0 + offset, launch=launch
        )
    assert verdict is not None and verdict.state is state, verdict.reasons if verdict else None
    if words:
        assert words in verdict.reasons[0], verdict.reasons


def test_a_run_never_seen_whose_log_cannot_tell_leads_with_the_logs_reason() -> None:
    """A watch given --since, first looking after the job's exit, the log's line followed by
    text whose run cannot be told: the log is why (it would have tied the run), not "nothing
    else ties the evidence to this run", which read untrue with --since given."""
    readings = r(
        process=proc("done", seen=False),
        log=log("unknown", line="a completion line is followed by other text ('wandb: Synced')"),
        outputs=outputs(37312),
    )
    verdict, _ = decide("extract", "gpu-box", readings, POLICY, VerdictMemory(), 1_700_000_000.0)
    assert verdict.state is State.UNKNOWN
    assert verdict.reasons[0].startswith("log unknown: a completion line is followed"), verdict.reasons
    assert not any("nothing else ties" in x for x in verdict.reasons), verdict.reasons


@pytest.mark.parametrize(
    ("before", "now", "said"),
    [
        ({"size": 100, "inode": 7}, {"size": 250, "inode": 7}, "log grew"),
        # logging's RotatingFileHandler: job.log -> job.log.1, a new, smaller job.log (user s15)
        ({"size": 768, "inode": 7}, {"size": 192, "inode": 8, "rotated": True}, "log rotated or replaced"),
        ({"size": 100, "inode": 7}, {"size": 900, "inode": 8}, "log rotated or replaced"),
        ({"size": 768, "inode": 7}, {"size": 0, "inode": 7, "truncated": True}, "log truncated"),
        ({"absent": True}, {"size": 10, "inode": 7}, "log appeared"),
    ],
)
def test_what_moved_in_the_log_is_said_as_it_happened(before: dict, now: dict, said: str) -> None:
    from sensors._verdict.progress import progress

    moved = progress(
        {"log": reading("log", Says.WORKING, **now)}, {"log": reading("log", Says.WORKING, **before)}
    )
    assert said in moved, moved
    assert [m for m in moved if m.startswith("log ")] == [said], moved
