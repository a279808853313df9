"""An adversary's review of issue 25's logs per rank (commit 6cc0a7c: ``log.path`` with
``{rank}``): each rank's log read on its host in its host's probe, as a log of its own. The
hosts are real sshd hosts on 127.0.0.1 (tests/test_span.py's), the ranks real processes, the
logs real files written by the test as each rank would."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sensors import State, Verdict, stage_from_dict
from sensors._check.span import SpanChecker
from tests.test_span import _Host


class _Job:
    """A run of a job over two nodes of ``per_host`` ranks: each rank a real process whose
    command line names its node; its log (``rank<G>.log``) written by the test as it would."""

    def __init__(self, folder: Path, per_host: int = 2, nodes: int = 2) -> None:
        self.folder, self.per_host = folder, per_host
        self.tag = f"rk-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.nodes = nodes

    @property
    def match(self) -> str:
        return f"{self.tag} --node {{node}} "

    def start(self) -> None:
        code = "import sys, time; time.sleep(600)"
        self.procs = {
            node * self.per_host + local: subprocess.Popen(
                [sys.executable, "-c", code, self.tag, "--node", str(node), "--rank", str(local)],
                start_new_session=True,
            )
            for node in range(self.nodes)
            for local in range(self.per_host)
        }

    def write(self, rank: int, text: str) -> None:
        with open(self.folder / f"rank{rank}.log", "a") as f:
            f.write(text)

    def end(self, rank: int | None = None) -> None:
        for g, proc in self.procs.items():
            if rank is None or g == rank:
                proc.kill()
                proc.wait()

    def stage(self, hosts: list[_Host], **extra: Any) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "stage": "train",
            "hosts": [h.sshd.spec() for h in hosts],
            "process": {"match": self.match, "per_host": self.per_host},
            "log": {
                "path": str(self.folder / "rank{rank}.log"),
                "complete": r"^rank \d+ done",
                "error": r"^ERROR",
                "progress": r"^step",
            },
            "policy": {"interval": "300ms", "settle": 1, "exit_grace": "300ms", "stall_after": "30s"},
        }
        doc.update(extra)
        return doc


def _until(checker: SpanChecker, test: Any, timeout: float = 20.0) -> Verdict:
    end = time.monotonic() + timeout
    seen: list[Verdict] = []
    while time.monotonic() < end:
        verdict = checker.check()
        seen.append(verdict)
        if test(verdict):
            return verdict
        time.sleep(0.3)
    raise AssertionError([(v.state, v.reasons[:2]) for v in seen[-3:]])


def _all_alive(verdict: Verdict, per_host: int = 2) -> bool:
    procs = [r for k, r in verdict.readings.items() if k.startswith("process@")]
    return len(procs) == 2 and all(r.evidence.get("alive") == per_host for r in procs)


def _run_1(job: _Job, checker: SpanChecker) -> Verdict:
    """Run 1: every rank works, writes its line and ends; the watch's final verdict."""
    job.start()
    for g in range(4):
        job.write(g, "step 0\n")
    _until(checker, _all_alive)
    for g in range(4):
        job.write(g, f"rank {g} done\n")
    job.end()
    return _until(checker, lambda v: v.state.final)


def _start_run_2(job: _Job) -> None:
    """Run 2: rank 1 writes nothing (its output buffered); the others work."""
    job.start()
    for g in (0, 2, 3):
        job.write(g, "step 0\n")


def _end_run_2(job: _Job, checker: SpanChecker) -> list[Verdict]:
    """Run 2, seen at work, ends: rank 1 killed without a line, the others finish; 8 checks."""
    _until(checker, lambda v: _all_alive(v) and v.state is State.RUNNING)
    job.end(1)
    for g in (0, 2, 3):
        job.write(g, f"rank {g} done\n")
    job.end()
    return [checker.check() for _ in range(8) if not time.sleep(0.3)]


def test_a_watch_going_on_into_a_second_run_does_not_take_run_1s_rank_line(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    """serve watches run after run: rank 1 of run 2 is killed without writing a byte to its
    log (its output buffered), the others finish. Run 1's ``rank 1 done``, found while this
    watch looked at run 1, is no line of run 2's: node 0 knew run 2 began (its ranks' start)."""
    job = _Job(tmp_path / "job")
    stage = stage_from_dict(job.stage(hosts))
    with SpanChecker(stage) as checker:
        first = _run_1(job, checker)
        assert first.state is State.COMPLETE, first.reasons
        time.sleep(1.5)
        _start_run_2(job)
        verdicts = _end_run_2(job, checker)
    assert all(v.state is not State.COMPLETE for v in verdicts), [(v.state, v.reasons[:2]) for v in verdicts]


def test_a_changed_log_definition_starts_the_rank_logs_memory_afresh(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    """A watch restarted mid-run with ``log.complete`` tightened (``done`` also matched ``rank
    1 not done: shard lost``): the nodes' log memory starts afresh, and so must the ranks'
    logs'. Kept, rank 1's line found under the old pattern stood as its completion line under
    the new one, which it does not match: complete."""
    job = _Job(tmp_path / "job")
    store = tmp_path / "state.db"
    loose = job.stage(hosts)
    loose["log"]["complete"] = "done"
    job.start()
    try:
        for g in range(4):
            job.write(g, "step 0\n")
        with SpanChecker(stage_from_dict(loose), state=store) as checker:
            _until(checker, _all_alive)
            job.write(1, "rank 1 not done: shard lost\n")
            _until(
                checker,
                lambda v: any(
                    k.startswith("log#rank1@") and r.says.value == "done" for k, r in v.readings.items()
                ),
            )
        with SpanChecker(stage_from_dict(job.stage(hosts)), state=store) as checker:
            _until(checker, _all_alive)
            for g in (0, 2, 3):
                job.write(g, f"rank {g} done\n")
            job.end()
            verdicts = [checker.check() for _ in range(6) if not time.sleep(0.3)]
    finally:
        job.end()
    assert all(v.state is not State.COMPLETE for v in verdicts), [(v.state, v.reasons[:2]) for v in verdicts]
    assert any("log#rank1" in r for r in verdicts[-1].reasons), verdicts[-1].reasons


def test_a_restarted_watch_does_not_take_run_1s_rank_line_from_the_store(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    """As above, through the state store: a ``wait`` that saw run 1 finish, and one started
    again (told nothing of its run) while run 2 is at work, goes on from the stored memory:
    rank 1's memory is of run 1, and node 0 finds run 2 begun."""
    job = _Job(tmp_path / "job")
    store = tmp_path / "state.db"
    stage = stage_from_dict(job.stage(hosts))
    try:
        with SpanChecker(stage, state=store) as checker:
            assert _run_1(job, checker).state is State.COMPLETE
        time.sleep(3)
        _start_run_2(job)
        with SpanChecker(stage, state=store) as checker:
            verdicts = _end_run_2(job, checker)
    finally:
        job.end()
    assert all(v.state is not State.COMPLETE for v in verdicts), [(v.state, v.reasons[:2]) for v in verdicts]
    assert any("log#rank1" in r for r in verdicts[-1].reasons), verdicts[-1].reasons


# --------------------------------------------------------------------------- the verdict, pure

_NOW = 1_000_000.0


def _reading(signal: str, says: Any, **evidence: Any) -> Any:
    from sensors import Reading

    return Reading(signal, says, f"{signal} {says}", evidence, _NOW)


def _node(host: str, state: State, at: float, *readings: Any, **ranks: Any) -> Any:
    """A node's check: its readings, and its other ranks' logs (``log_rank1=`` for ``log#rank1``)."""
    from sensors._verdict.across import NodeCheck

    verdict = Verdict("t", state, (f"{host} {state}",), {r.signal: r for r in readings}, at, host)
    return NodeCheck(host, verdict, {k.replace("_", "#"): r for k, r in ranks.items()})


def _working_a_while(policy: Any) -> Any:
    """The memory across hosts after two checks, 70 s and 65 s ago, of two hosts (2 ranks each,
    alive, each host's own log and its second rank's at work): the ranks seen, then no progress."""
    from sensors import Says
    from sensors._verdict.across import AcrossMemory, decide_across

    alive = _reading("process", Says.WORKING, alive=2, seen_alive=True, cpu_seconds=5.0)
    working = _reading("log", Says.WORKING, size=10)
    memory = AcrossMemory()
    for at in (_NOW - 70, _NOW - 65):
        _, memory = decide_across(
            "t",
            [
                _node("a", State.RUNNING, at, alive, working, log_rank1=working),
                _node("b", State.RUNNING, at, alive, working, log_rank3=working),
            ],
            policy,
            2,
            memory,
            at,
        )
    return memory


@pytest.mark.parametrize(
    ("success", "done_on", "state"),
    [("all", "b", State.FAILED), ("chief", "a", State.STALLED)],
    ids=["all: b's first rank done, its other killed", "chief: node 0 done, its other rank lineless"],
)
def test_whether_a_host_with_a_log_per_rank_has_lost_a_rank(success: str, done_on: str, state: State) -> None:
    """``{rank}`` logs, 2 ranks a host, the ranks at work without progress for stall_after.

    all: on b, rank 2 (b's own log) wrote its line and ended, rank 3 was killed without one;
    a's ranks wait in a collective. b's own verdict is complete (its own log is rank 2's), and
    b was taken as a host whose ranks finished: no rank lost, the hung collective never named
    (a stall at most). A host finished only when every rank's log there shows its line.

    chief: the other ranks need write no line: node 0 complete (rank 0's line), its rank 1's
    log without one, b still at work: no rank lost (b's own verdict holds the stage), never a
    collective said to wait for node 0 (what the first fix of the case above did)."""
    from sensors import Says
    from sensors._config.stage import PolicySpec
    from sensors._verdict.across import decide_across

    policy = PolicySpec(stall_after=60.0, success=success)
    memory = _working_a_while(policy)
    alive = _reading("process", Says.WORKING, alive=2, seen_alive=True, cpu_seconds=5.0)
    working = _reading("log", Says.WORKING, size=10)
    gone = _reading("process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=5.0)
    done = _reading("log", Says.DONE, size=20)
    other = {"a": "b", "b": "a"}[done_on]
    finished = _node(
        done_on, State.COMPLETE, _NOW, gone, done, **{f"log_rank{'ab'.index(done_on) * 2 + 1}": working}
    )
    waiting = _node(
        other, State.STALLED, _NOW, alive, working, **{f"log_rank{'ab'.index(other) * 2 + 1}": working}
    )
    nodes = sorted([finished, waiting], key=lambda n: n.host)
    verdict, _ = decide_across("t", nodes, policy, 2, memory, _NOW)
    assert verdict.state is state, verdict.reasons
    if state is State.FAILED:
        why = verdict.reasons[0]
        assert "every rank on b gone" in why and "a collective" in why, verdict.reasons
    else:
        assert not any("collective" in r for r in verdict.reasons), verdict.reasons
