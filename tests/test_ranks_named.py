"""What a person is shown for a stage over several hosts (issue 37, part 2): the lost rank
named (its global rank, PID, last sighting, its log's last line) wherever the verdict is
shown; words that follow ``policy.success``; rows that say what is true of each host.

The verdict across hosts is pure and tested here as a table on a simulated clock; the real
CLI over the two test sshd hosts is tested in the second half."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sensors import Reading, Says, State, Verdict
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across

NOW = 1_000_000.0
POLICY = PolicySpec(stall_after=60.0)


def _hms(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%H:%M:%S UTC")


def _r(signal: str, says: Says, read_at: float | None = NOW, detail: str = "", **evidence: Any) -> Reading:
    return Reading(signal, says, detail or f"{signal} {says}", evidence, read_at)


def _proc(*ranks: tuple[int, str], at: float = NOW, cpu: float = 5.0, **extra: Any) -> Reading:
    """A process reading listing live ranks: (pid, command line) each, any ``extra`` per entry
    keyed by pid (``env={pid: {...}}``)."""
    env = extra.pop("env", {})
    processes = [
        {
            "pid": pid,
            "ppid": 1,
            "state": "S",
            "cmdline": cmd,
            "started_at": NOW - 500 + pid % 100,
            **env.get(pid, {}),
        }
        for pid, cmd in ranks
    ]
    says = Says.WORKING if ranks else Says.DONE
    return _r(
        "process",
        says,
        at,
        alive=len(ranks),
        ranks=len(ranks),
        matched=len(ranks),
        processes=processes,
        seen_alive=True,
        cpu_seconds=cpu,
        **extra,
    )


def _log(says: Says = Says.WORKING, last: str = "step 12", size: int = 10, at: float = NOW) -> Reading:
    return _r("log", says, at, detail=f"log {says}", last_line=last, size=size)


def _node(
    host: str, state: State, *readings: Reading, at: float = NOW, ranks: dict | None = None, why: str = ""
) -> NodeCheck:
    verdict = Verdict("t", state, (why or f"{host} {state}",), {r.signal: r for r in readings}, at, host)
    return NodeCheck(host, verdict, ranks or {})


def _cmd(node: int, local: int, flag: str = "--local_rank") -> str:
    number = node * 2 + local if flag == "--rank" else local  # --rank: the global rank
    return f"python train.py --node {node} {flag} {number}" if flag else f"python train.py --node {node}"


def _two_checks(policy: PolicySpec, flag: str = "--local_rank", env: dict | None = None) -> AcrossMemory:
    """Two checks, 70 s and 65 s ago, of hosts a and b (2 ranks each, alive, logs per rank)."""
    memory = AcrossMemory()
    for at in (NOW - 70, NOW - 65):
        a = _node(
            "a",
            State.RUNNING,
            _proc((101, _cmd(0, 0, flag)), (102, _cmd(0, 1, flag)), at=at),
            _log(at=at),
            at=at,
            ranks={"log#rank1": _log(at=at)},
        )
        b = _node(
            "b",
            State.RUNNING,
            _proc((201, _cmd(1, 0, flag)), (202, _cmd(1, 1, flag)), at=at, env=env or {}),
            _log(at=at),
            at=at,
            ranks={"log#rank3": _log(at=at, last="step 11")},
        )
        _, memory = decide_across("t", [a, b], policy, 2, memory, at)
    return memory


def _hung(flag: str = "--local_rank", env: dict | None = None, success: str = "all") -> Verdict:
    """b's rank 3 (pid 202) gone; every rank left quiet for stall_after."""
    policy = POLICY.model_copy(update={"success": success})
    memory = _two_checks(policy, flag, env)
    a = _node(
        "a",
        State.RUNNING,
        _proc((101, _cmd(0, 0, flag)), (102, _cmd(0, 1, flag))),
        _log(),
        ranks={"log#rank1": _log()},
    )
    b = _node(
        "b",
        State.RUNNING,
        _proc((201, _cmd(1, 0, flag)), env=env or {}),
        _log(),
        ranks={"log#rank3": _log(last="step 11")},
    )
    verdict, _ = decide_across("t", [a, b], policy, 2, memory, NOW)
    return verdict


@pytest.mark.parametrize(
    ("flag", "env", "named"),
    [
        ("--local_rank", None, "rank 3, pid 202"),
        ("--rank", None, "rank 3, pid 202"),  # --rank is the global rank as the job was told it
        ("", {202: {"env_rank": 3}}, "rank 3, pid 202"),  # the environment's RANK
        ("", {202: {"env_local_rank": 1}}, "rank 3, pid 202"),  # LOCAL_RANK on node 1
        ("", None, "rank 3 (told by its place among the host's ranks), pid 202"),
    ],
    ids=["--local_rank", "--rank", "RANK", "LOCAL_RANK", "position"],
)
def test_a_hung_collective_names_the_lost_rank(flag: str, env: dict | None, named: str) -> None:
    verdict = _hung(flag, env)
    assert verdict.state is State.FAILED, verdict.reasons
    why = verdict.reasons[0]
    assert why.startswith("1 of 2 ranks on b gone") and "a collective waiting for a lost rank" in why, why
    assert f"{named}, last seen alive {_hms(NOW - 65)}" in why, why
    if named.startswith("rank 3"):
        assert "its log's last line: 'step 11'" in why, why
    assert "pid 201" not in why  # the rank still alive is not named


def test_the_lost_ranks_log_row_says_its_writer_is_gone_and_the_table_shows_ranks() -> None:
    verdict = _hung()
    row = verdict.readings["log#rank3@b"]
    assert row.says is Says.FAILED and row.detail.startswith("writer gone: rank 3 last seen alive"), row
    assert "last line: 'step 11'" in row.detail
    # The ranks alive stay as they were read.
    assert verdict.readings["log#rank1@a"].says is Says.WORKING
    assert verdict.readings["log@b"].says is Says.WORKING  # rank 2's, alive
    assert verdict.readings["process@b"].detail.startswith("ranks 1/2 alive on b; ")
    assert verdict.readings["process@a"].detail.startswith("ranks 2/2 alive on a; ")


def test_before_stall_after_the_lost_rank_is_named_too() -> None:
    memory = _two_checks(POLICY)
    a = _node("a", State.RUNNING, _proc((101, _cmd(0, 0)), (102, _cmd(0, 1)), cpu=9.0), _log(size=20))
    b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0))), _log(), ranks={"log#rank3": _log(last="step 11")})
    verdict, _ = decide_across("t", [a, b], POLICY, 2, memory, NOW)
    assert verdict.state is State.RUNNING
    assert "1 of 2 ranks on b gone" in verdict.reasons[0] and "rank 3, pid 202" in verdict.reasons[0]


def test_the_lost_rank_is_named_in_the_table_the_notification_and_the_picture(capsys) -> None:
    from sensors._notify.message import build_message
    from sensors._present.picture import Sample, wait_svg
    from sensors._present.terminal import print_table

    verdict = _hung()
    named = "rank 3, pid 202, last seen alive"
    print_table(verdict)
    table = capsys.readouterr().out
    assert named in table and "writer gone: rank 3" in table and "ranks 1/2 alive on b" in table, table
    message = build_message(verdict)
    assert named in message.text, message.text
    assert named in str(message.payload["attachments"]), message.payload
    svg = wait_svg([Sample.of(verdict, at=NOW)], title="t: the wait", note=verdict.reasons[0])
    assert named in svg, svg


# --------------------------------------------------------------------------- success: chief


@pytest.mark.parametrize(
    ("success", "state", "lost"),
    [("chief", State.RUNNING, False), ("all", State.FAILED, True)],
    ids=["chief: the chief's line read, a worker tears down", "all: the same is a lost rank"],
)
def test_a_worker_ending_after_the_chiefs_line(success: str, state: State, lost: bool) -> None:
    """Node 0's own log holds the chief's completion line; rank 1 on a is still alive (it
    tears down), b's rank 3 ended, b's rank 2 still alive; nothing moves for stall_after."""
    policy = POLICY.model_copy(update={"success": success})
    memory = _two_checks(policy)
    a = _node(
        "a",
        State.RUNNING,
        _proc((102, _cmd(0, 1))),
        _log(Says.DONE, last="rank 0 done"),
        ranks={"log#rank1": _log()},
    )
    b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0))), _log(), ranks={"log#rank3": _log(last="step 11")})
    verdict, _ = decide_across("t", [a, b], policy, 2, memory, NOW)
    said = " ".join(verdict.reasons)
    assert verdict.state is state, verdict.reasons
    assert ("gone" in said and "collective" in said) is lost, verdict.reasons
    if not lost:
        assert verdict.readings["log#rank3@b"].says is Says.WORKING  # no writer said lost


def test_under_chief_a_worker_whose_ranks_ended_without_a_line_is_not_called_failed() -> None:
    """Only the chief was killed: node 0 failed; b's workers then ended, without a line of
    their own (none needed under chief): b is not 'failed' in the words."""
    nodes = [
        _node("a", State.FAILED, _proc(), _log(), why="pid 101 ended without a completion line"),
        _node("b", State.FAILED, _proc(), _log(), why="pid 201 ended without a completion line"),
    ]
    for success, words in (("chief", "b: its ranks ended (under success: chief"), ("all", "b: failed")):
        verdict, _ = decide_across(
            "t", nodes, POLICY.model_copy(update={"success": success}), 2, AcrossMemory(), NOW
        )
        assert verdict.state is State.FAILED and verdict.reasons[0].startswith("a: pid 101"), verdict.reasons
        assert any(r.startswith(words) for r in verdict.reasons), verdict.reasons
        if success == "chief":
            assert not any(r.startswith("b: failed") for r in verdict.reasons), verdict.reasons


# --------------------------------------------------------------------------- the first reason decides


def test_the_first_reason_is_the_host_whose_state_the_stage_shows_unknown() -> None:
    """notes/ml43.md, item 3: node 0 confirming its complete (running), node 1's ranks gone
    0.4 s ago (its exit grace, 1 s, not run out). The stage is unknown for node 1's sake; its
    first reason was node 0's 'running: every signal says done; confirming (1/2 checks)'."""
    policy = POLICY.model_copy(update={"exit_grace": 1.0})
    gone = _r("process", Says.DONE, alive=0, seen_alive=True, last_seen_alive={"pid": 201, "at": NOW - 0.4})
    a = _node(
        "a", State.RUNNING, _proc(), _log(Says.DONE), why="every signal says done; confirming (1/2 checks)"
    )
    b = _node("b", State.UNKNOWN, gone, why="nothing of its own tells success from a crash")
    verdict, _ = decide_across("t", [a, b], policy, None, AcrossMemory(), NOW)
    assert verdict.state is State.UNKNOWN, verdict.reasons
    assert verdict.reasons[0].startswith("b: its ranks were last seen alive 0s ago: waiting 1s"), (
        verdict.reasons
    )
    assert any(r.startswith("a (node 0): running: every signal says done") for r in verdict.reasons[1:])


def test_the_first_reason_is_the_host_whose_state_the_stage_shows_stalled() -> None:
    """Node 0 at work (running), node 1's own verdict stalled: the stage is stalled, and its
    first reason was node 0's 'running: process alive'."""
    a = _node("a", State.RUNNING, _proc((101, _cmd(0, 0))), _log(), why="process alive: pid 101")
    b = _node(
        "b", State.STALLED, _proc((201, _cmd(1, 0))), why="no progress for 66s (CPU time, I/O unchanged)"
    )
    verdict, _ = decide_across("t", [a, b], POLICY, None, AcrossMemory(), NOW)
    assert verdict.state is State.STALLED, verdict.reasons
    assert verdict.reasons[0] == "b: stalled: no progress for 66s (CPU time, I/O unchanged)", verdict.reasons
    assert verdict.reasons[1].startswith("a (node 0): running: process alive"), verdict.reasons


@pytest.mark.parametrize("shared", [True, False], ids=["a log the nodes share", "a log per node"])
def test_an_error_line_in_a_shared_log_is_the_shared_logs_not_node_0s(shared: bool) -> None:
    """notes/ml43.md, item 6: rank 2 (node 1) wrote a traceback into the one log the nodes
    share, read on node 0: 'a: error line: ...' read as node 0 failed. A log of node 0's own
    (a log per node) still names node 0's host."""
    error = "error line: torch.distributed.DistBackendError: NCCL error"
    log = _r("log", Says.FAILED, detail=error, path="/j/train-node0.log" if not shared else "/j/train.log")
    a = _node("a", State.FAILED, _proc(), log, why=error)
    b_log = (_r("log", Says.WORKING, path="/j/train-node1.log"),) if not shared else ()
    b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0))), *b_log)
    verdict, _ = decide_across("t", [a, b], POLICY, None, AcrossMemory(), NOW)
    assert verdict.state is State.FAILED, verdict.reasons
    want = f"shared log (read on a, node 0): {error}" if shared else f"a: {error}"
    assert verdict.reasons[0] == want, verdict.reasons


# --------------------------------------------------------------------------- a rank that finished


def _line(
    says: Says = Says.DONE, after: str | None = None, size: int = 10, at: float = NOW, **evidence: Any
) -> Reading:
    """A log holding this run's completion line: its last line, or followed by ``after``."""
    if after is not None:
        evidence.update(followed_by=after, line_doubt=True)
    return _r(
        "log",
        says,
        at,
        detail=f"log {says}",
        complete_line="Training complete",
        last_line=after or "Training complete",
        size=size,
        **evidence,
    )


def test_a_rank_whose_own_log_says_it_finished_is_not_lost_nor_a_hung_collectives() -> None:
    """notes/ml43.md, item 4: a log per rank, ``all``; rank 0 printed 'Training complete' as
    its last words and exited (torchrun's rank 0 does); the others hang in their teardown,
    quiet for stall_after. Was: failed, '1 of 2 ranks on a gone ...: rank 0, ..., its log's
    last line: 'Training complete'; ... a collective waiting for a lost rank'. A rank that
    ended after its own completion line is no lost rank: stalled (each host's own verdict),
    never complete while ranks are alive."""
    memory = _two_checks(POLICY)
    a = _node("a", State.STALLED, _proc((102, _cmd(0, 1))), _line(), ranks={"log#rank1": _log()})
    b = _node(
        "b",
        State.STALLED,
        _proc((201, _cmd(1, 0)), (202, _cmd(1, 1))),
        _log(),
        ranks={"log#rank3": _log(last="step 11")},
    )
    verdict, _ = decide_across("t", [a, b], POLICY, 2, memory, NOW)
    assert verdict.state is State.STALLED, verdict.reasons
    assert not any("gone" in r or "lost rank" in r for r in verdict.reasons), verdict.reasons
    assert verdict.readings["log@a"].says is Says.DONE  # its row is not 'writer gone'


def _shared_two_checks(policy: PolicySpec, size: int = 10) -> AcrossMemory:
    """Two checks, 70 s and 65 s ago, of hosts a and b (2 ranks each, alive), one log they
    share (read on a), ``size`` bytes long."""
    memory = AcrossMemory()
    for at in (NOW - 70, NOW - 65):
        shared = _r("log", Says.WORKING, at, last_line="step 12", size=size, path="/j/train.log")
        a = _node("a", State.RUNNING, _proc((101, _cmd(0, 0)), (102, _cmd(0, 1)), at=at), shared, at=at)
        b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0)), (202, _cmd(1, 1)), at=at), at=at)
        _, memory = decide_across("t", [a, b], policy, 2, memory, at)
    return memory


@pytest.mark.parametrize("ended", ["rank 0", "node 1's ranks"])
@pytest.mark.parametrize("quiet", [False, True], ids=["at work", "quiet for stall_after"])
@pytest.mark.parametrize("success", ["chief", "all"])
def test_ranks_ended_after_the_line_in_a_shared_log_followed_by_the_workers_teardown(
    success: str, quiet: bool, ended: str
) -> None:
    """notes/ml43.md, item 4: one log the nodes share; rank 0 printed 'Training complete' and
    exited (or node 1's ranks ended after their teardown lines, rank 1 still at its own); a
    worker's teardown line followed it, so node 0's log is no longer done (whose that text is
    is in doubt). Was: '1 of 2 ranks on a gone ...' (or 'every rank on b gone ...'), '...; if
    the others make no progress for 60s, it is a collective waiting for a lost rank', under
    chief too; and with the workers then hung in their teardown for stall_after, failed as
    that collective. Now no rank is lost: unknown (node 0's doubt), or stalled where a host's
    own verdict is."""
    policy = POLICY.model_copy(update={"success": success})
    memory = _shared_two_checks(policy, size=90 if quiet else 10)
    log = _line(Says.UNKNOWN, after="[rank1] destroy_process_group", size=90, path="/j/train.log")
    cpu = 5.0 if quiet else 9.0
    b_state = State.STALLED if quiet else State.RUNNING
    if ended == "rank 0":
        a = _node("a", State.UNKNOWN, _proc((102, _cmd(0, 1)), cpu=cpu), log)
        b = _node("b", b_state, _proc((201, _cmd(1, 0)), (202, _cmd(1, 1)), cpu=cpu))
    else:
        a = _node("a", b_state, _proc((101, _cmd(0, 0)), (102, _cmd(0, 1)), cpu=cpu), log)
        b = _node("b", State.UNKNOWN, _proc(), why="nothing of its own tells success from a crash")
    verdict, _ = decide_across("t", [a, b], policy, 2, memory, NOW)
    assert verdict.state is (
        State.STALLED if quiet else State.UNKNOWN if ended == "rank 0" else State.RUNNING
    ), verdict.reasons
    assert not any("gone" in r or "lost rank" in r for r in verdict.reasons), verdict.reasons
    if quiet:
        who = "b: stalled: b stalled" if ended == "rank 0" else "a (node 0): stalled: a stalled"
        assert verdict.reasons[0] == who, verdict.reasons


@pytest.mark.parametrize("found", ["before the error line", "with the error line"])
def test_under_chief_rank_0_gone_after_its_line_is_not_lost_when_an_error_line_follows(found: str) -> None:
    """notes/ml44.md, item 3: one log the nodes share, ``chief``; rank 0 printed 'Training
    complete' and exited 0; then rank 2 (node 1) wrote a traceback into the log and exited 1.
    Failed (the error line), as before; but the second reason named rank 0 among the ranks
    gone that 'a collective may be waiting for'. Rank 0 wrote the chief's completion line
    and ended after it (as with a log of its own): only rank 2 is lost."""
    policy = POLICY.model_copy(update={"success": "chief"})
    memory = _shared_two_checks(policy)
    if found == "before the error line":
        log = _line(Says.DONE, at=NOW - 5, path="/j/train.log")
        a = _node("a", State.RUNNING, _proc((102, _cmd(0, 1)), at=NOW - 5), log, at=NOW - 5)
        b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0)), (202, _cmd(1, 1)), at=NOW - 5), at=NOW - 5)
        _, memory = decide_across("t", [a, b], policy, 2, memory, NOW - 5)
    error = "error line: torch.distributed.DistBackendError: NCCL error"
    failed = _line(Says.FAILED, after="[rank1] destroy_process_group", path="/j/train.log")
    failed = Reading("log", Says.FAILED, error, {**failed.evidence, "error_line": error[12:]}, NOW)
    a = _node("a", State.FAILED, _proc((102, _cmd(0, 1))), failed, why=error)
    b = _node("b", State.RUNNING, _proc((202, _cmd(1, 1))))
    verdict, _ = decide_across("t", [a, b], policy, 2, memory, NOW)
    assert verdict.state is State.FAILED, verdict.reasons
    assert verdict.reasons[0] == f"shared log (read on a, node 0): {error}", verdict.reasons
    said = [r for r in verdict.reasons if " gone (" in r]
    assert len(said) == 1 and said[0].startswith(
        f"1 of 2 ranks on b gone (found gone at {_hms(NOW)}, its clock): rank 2, pid 201"
    ), verdict.reasons
    assert said[0].endswith("ranks alive on a (1), b (1): a collective may be waiting for a lost rank"), said
    assert "rank 0, pid 101" not in said[0] and " on a gone" not in said[0], said


def test_a_host_with_a_rank_that_finished_and_one_killed_names_the_killed_one_lost() -> None:
    """b's rank 2 wrote its completion line to its own log and ended; b's rank 3 was killed
    (its log's last line 'step 11'); a's ranks wait, quiet for stall_after: a hung
    collective, whose lost rank is rank 3 alone. Was: 'every rank on b gone ...: rank 2 ...,
    its log's last line: 'Training complete'; rank 3 ...'."""
    memory = _two_checks(POLICY)
    a = _node(
        "a", State.RUNNING, _proc((101, _cmd(0, 0)), (102, _cmd(0, 1))), _log(), ranks={"log#rank1": _log()}
    )
    b = _node("b", State.COMPLETE, _proc(), _line(), ranks={"log#rank3": _log(last="step 11")})
    verdict, _ = decide_across("t", [a, b], POLICY, 2, memory, NOW)
    assert verdict.state is State.FAILED, verdict.reasons
    why = verdict.reasons[0]
    assert why.startswith(
        f"1 of 2 ranks on b gone (found gone at {_hms(NOW)}, its clock): rank 3, pid 202"
    ), why
    assert "a collective waiting for a lost rank" in why, why
    assert "; rank 2 (pid 201) ended after its log's completion line: not lost" in why, why
    assert "'Training complete'" not in why, why
    assert verdict.readings["log#rank3@b"].detail.startswith("writer gone: rank 3"), verdict.readings[
        "log#rank3@b"
    ]


def test_a_rank_told_by_its_place_is_not_taken_for_finished_by_a_log_with_a_line() -> None:
    """Ranks told apart by their place alone (no RANK, no --rank): pid 202 is rank 3 by a
    guess, and rank 3's log holding a completion line does not make pid 202 a rank that
    finished: the guess may be wrong, and a killed rank would hide behind another's line."""
    memory = _two_checks(POLICY, flag="")
    a = _node(
        "a",
        State.RUNNING,
        _proc((101, _cmd(0, 0, "")), (102, _cmd(0, 1, ""))),
        _log(),
        ranks={"log#rank1": _log()},
    )
    b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0, ""))), _log(), ranks={"log#rank3": _line()})
    verdict, _ = decide_across("t", [a, b], POLICY, 2, memory, NOW)
    assert verdict.state is State.FAILED, verdict.reasons
    assert "rank 3 (told by its place among the host's ranks), pid 202" in verdict.reasons[0], verdict.reasons


# --------------------------------------------------------------------------- when a rank was found gone


def test_each_rank_is_said_found_gone_when_the_watch_first_found_it_gone() -> None:
    """notes/ml43.md, item 5: b's rank 3 found gone at the check 60 s ago, its rank 2 at
    this one. Was: 'every rank on b gone (found gone at <60 s ago>, its clock)', the time b
    began to count as lost, said of both."""
    memory = _two_checks(POLICY)
    for at, ranks in ((NOW - 60, ((201, _cmd(1, 0)),)), (NOW, ())):
        a = _node(
            "a",
            State.RUNNING,
            _proc((101, _cmd(0, 0)), (102, _cmd(0, 1)), at=at, cpu=NOW - at),
            _log(at=at),
            at=at,
            ranks={"log#rank1": _log(at=at)},
        )
        b = _node(
            "b", State.RUNNING, _proc(*ranks, at=at), _log(at=at), at=at, ranks={"log#rank3": _log(at=at)}
        )
        verdict, memory = decide_across("t", [a, b], POLICY, 2, memory, at)
    assert verdict.state is State.RUNNING, verdict.reasons
    why = verdict.reasons[0]
    assert why.startswith("every rank on b gone (times on its clock): "), why
    assert f"rank 2, pid 201, last seen alive {_hms(NOW - 60)}, found gone at {_hms(NOW)}, " in why, why
    assert f"rank 3, pid 202, last seen alive {_hms(NOW - 65)}, found gone at {_hms(NOW - 60)}, " in why, why


def test_a_rank_found_gone_before_its_host_counts_as_lost_is_said_found_gone_then() -> None:
    """b's rank 3 found gone at the check 60 s ago while b's own log showed its completion
    line (b finished: no loss); at this check that line is an earlier run's (a process of
    this run began after it), and b counts as lost. 'found gone at' named this check."""
    memory = _two_checks(POLICY)
    b_logs = (_line(at=NOW - 60), _log(at=NOW))
    for at, b_log in zip((NOW - 60, NOW), b_logs, strict=True):
        a = _node(
            "a",
            State.RUNNING,
            _proc((101, _cmd(0, 0)), (102, _cmd(0, 1)), at=at, cpu=NOW - at),
            _log(at=at),
            at=at,
        )
        b = _node("b", State.RUNNING, _proc((201, _cmd(1, 0)), at=at), b_log, at=at)
        verdict, memory = decide_across("t", [a, b], POLICY, 2, memory, at)
    why = verdict.reasons[0]
    assert why.startswith(
        f"1 of 2 ranks on b gone (found gone at {_hms(NOW - 60)}, its clock): rank 3, pid 202"
    ), why


# --------------------------------------------------------------------------- rows true of each host


def test_a_host_that_never_ran_the_job_does_not_say_process_done() -> None:
    never = _r("process", Says.DONE, detail="no process found (match 'x')", alive=0, seen_alive=False)
    a = _node("a", State.RUNNING, _proc((101, _cmd(0, 0)), (102, _cmd(0, 1))), _log())
    b = _node("b", State.UNKNOWN, never)
    verdict, _ = decide_across("t", [a, b], POLICY, 2, AcrossMemory(), NOW)
    row = verdict.readings["process@b"]
    assert row.says is Says.UNKNOWN and row.detail.startswith("never saw the job on b in this watch"), row


def test_rank_variables_are_read_as_digits_or_not_at_all() -> None:
    from sensors._signals.process import parse_rank_env

    body = (
        b"/proc/12/environ:RANK=3\0/proc/12/environ:LOCAL_RANK=1\0"
        b"/proc/13/environ:RANK=1\n/proc/14/environ:RANK=0\0"  # a value with a newline: not read
        b"/proc/15/environ:RAN"  # cut by the cap
    )
    assert parse_rank_env(body) == {12: {"env_rank": 3, "env_local_rank": 1}}


# --------------------------------------------------------------------------- the real CLI, two sshd hosts

import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from tests.test_span import _alive_everywhere, _Host, _Ranks, _stage, _wait  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _rank_logs(path: Path, ranks: _Ranks) -> None:
    doc = yaml.safe_load(path.read_text())
    doc["log"] = {
        "path": str(ranks.folder / "rank{rank}.log"),
        "complete": r"rank \d+ done",
        "error": r"^ERROR",
        "progress": r"^step",
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_over_two_hosts_a_hung_collective_names_the_lost_rank(tmp_path: Path, hosts: list[_Host]) -> None:
    """2 nodes x 2 ranks, a log per rank; rank 3 (node 1's second) is killed while the
    others block in a collective: the verdict names rank 3, its PID, when it was last seen
    and its log's last line; its log row says its writer is gone; each host's process row
    shows its ranks against per_host."""
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2, rank_logs=True)
    path = _stage(tmp_path, hosts, ranks)
    _rank_logs(path, ranks)
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    victim = ranks.procs[(1, 1)]
    try:
        waiting = _wait(path, "40s")
        waiting.until(lambda v: _alive_everywhere(v, hosts) and f"log#rank3@{b}" in v["signals"])
        (ranks.folder / "hang").touch()
        time.sleep(0.5)
        os.kill(victim.pid, signal.SIGKILL)
        rc = waiting.end()
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert rc == 3 and last["verdict"] == "failed", [
        (v["verdict"], v["reasons"][:1]) for v in waiting.verdicts[-3:]
    ]
    why = last["reasons"][0]
    assert f"1 of 2 ranks on {b} gone" in why and "a collective waiting for a lost rank" in why, why
    assert f"rank 3, pid {victim.pid}, last seen alive " in why, why
    assert "its log's last line: 'step " in why, why
    row = last["signals"][f"log#rank3@{b}"]
    assert row["says"] == "failed" and row["detail"].startswith("writer gone: rank 3 last seen alive"), row
    assert last["signals"][f"process@{b}"]["detail"].startswith(f"ranks 1/2 alive on {b}; "), last["signals"]


def test_over_two_hosts_under_chief_workers_tearing_down_after_the_chiefs_line_are_no_loss(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    """success: chief. Rank 3 is held (SIGSTOP) while every other rank ends normally: the
    chief writes its line, rank 2 ends, rank 3 lingers quiet for longer than stall_after,
    then ends. A worker that ends after the chief's line is no lost rank: never 'gone', never
    a collective said to wait, and the stage completes."""
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2, rank_logs=True)
    path = _stage(tmp_path, hosts, ranks, success="chief")
    _rank_logs(path, ranks)
    late = ranks.procs[(1, 1)]
    try:
        waiting = _wait(path, "40s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        late.send_signal(signal.SIGSTOP)
        ranks.finish()
        for key, proc in ranks.procs.items():
            if key != (1, 1):
                assert proc.wait(20) == 0
        time.sleep(4.0)  # twice stall_after, rank 3 alive and quiet
        late.send_signal(signal.SIGCONT)
        rc = waiting.end()
    finally:
        ranks.stop()
    said = [r for v in waiting.verdicts for r in v["reasons"]]
    assert rc == 0 and waiting.verdicts[-1]["verdict"] == "complete", waiting.verdicts[-1]["reasons"]
    assert not [r for r in said if "gone" in r and "rank" in r], said
    assert not [r for r in said if "collective" in r], said


def test_over_two_hosts_under_chief_a_worker_ended_after_the_chief_was_killed_is_not_called_failed(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    path = _stage(tmp_path, hosts, ranks, success="chief")
    doc = yaml.safe_load(path.read_text())
    del doc["outputs"]  # none written: the chief's log alone tells
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        waiting = _wait(path, "30s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        for node in (0, 1):  # the chief's node killed, the workers told to end
            for rank in range(2):
                ranks.procs[(node, rank)].send_signal(signal.SIGKILL if node == 0 else signal.SIGTERM)
        rc = waiting.end()
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert rc == 3 and last["verdict"] == "failed", last["reasons"]
    said = [r for v in waiting.verdicts for r in v["reasons"]]
    assert f"{b}: failed" not in said, said


def test_over_two_hosts_a_host_that_never_ran_the_job_says_so(tmp_path: Path, hosts: list[_Host]) -> None:
    ranks = _Ranks(tmp_path / "job", nodes=1, per_host=2)  # node 1 never runs
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    try:
        waiting = _wait(_stage(tmp_path, hosts, ranks), "4s")
        rc = waiting.end()
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert rc == 4 and last["verdict"] != "complete"
    row = last["signals"][f"process@{b}"]
    assert row["says"] == "unknown" and row["detail"].startswith(f"never saw the job on {b}"), row
    assert "\\\\" not in row["detail"] and f"match '{ranks.tag} --node 1 '" in row["detail"], row


def test_over_two_hosts_a_frozen_host_is_no_answer_within_its_timeout(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    sshd = hosts[1].sshd
    path = _stage(tmp_path, hosts, ranks)
    doc = yaml.safe_load(path.read_text())
    doc["hosts"][1]["connect_timeout"] = 2.0
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    os.kill(sshd.proc.pid, signal.SIGSTOP)  # accepts (the kernel), answers nothing
    try:
        waiting = _wait(path, "6s")
        rc = waiting.end()
    finally:
        os.kill(sshd.proc.pid, signal.SIGCONT)
        ranks.stop()
    b = f"127.0.0.1:{sshd.port}"
    last = waiting.verdicts[-1]
    assert rc == 4 and last["verdict"] == "unknown", last["reasons"]
    why = last["reasons"][0]
    assert why.startswith(f"{b} cannot be read") and f"no answer from {b} within 2 s" in why, last["reasons"]
    assert "banner" not in " ".join(last["reasons"])


def test_validate_names_the_field_that_names_two_hosts_alike(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "stage": "t",
                "hosts": [{"ssh": "10.0.0.5", "port": 2201}, {"ssh": "10.0.0.5", "port": 2202}],
                "process": {"match": "train.py --node {node} "},
                "log": {"path": "/logs/{host}.log", "complete": "done"},
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "sensors", "validate", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out
    assert "log.path: {host} would name two hosts alike" in out.stderr + out.stdout, out


# --------------------------------------------------------------------------- a log stamped ahead


def test_a_log_stamped_ahead_is_worded_for_where_it_lives() -> None:
    """A file time ahead of the host's clock is no age, and its cause depends on the file
    system: the host's own kernel never stamps ahead (a tool set it), a file server's clock may
    run ahead; not known: both named. No words blame a file server for a local file."""
    from sensors._present.evidence import evidence_line, key_values
    from sensors._present.facts import _log_facts
    from sensors._signals.log import clock_ahead_words

    local = clock_ahead_words(575.6, True)
    assert "575.6s ahead of the host's clock" in local and "a tool set them" in local
    assert "file server" not in local
    served = clock_ahead_words(575.6, False)
    assert "file server" in served and "tool" not in served
    assert "file server" in clock_ahead_words(None, None) and "tool" in clock_ahead_words(None, None)
    ev = {"age_seconds": -575.6, "size": 16, "last_line": "step 3"}
    assert key_values("log", ev, "gpu-02") == "stamped 575.6s ahead of gpu-02's clock  bytes=16"
    assert key_values("log", ev) == "stamped 575.6s ahead of the host's clock  bytes=16"
    assert key_values("log", {"age_seconds": 12.0}) == "age=12.0s"
    line = evidence_line(Reading("log", Says.UNKNOWN, "x", ev))
    assert "stamped 9m 35s ahead of the host's clock" in line and "age" not in line, line
    assert _log_facts(ev)[1] == "stamped 9 m 35 s ahead of the host's clock"
    assert key_values("process", {"ranks": 1, "per_host": 2, "pid": 7}) == "ranks=1/2  pid=7"
    assert key_values("process", {"ranks": 1, "pid": 7}) == "pid=7"


def test_over_two_hosts_a_local_log_stamped_ahead_says_so_and_no_file_server(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    """Each node's log (local files, on this machine's file systems) touched 10 minutes into
    the future, the watch given --since: the table says how far ahead of which host's clock
    the log is stamped (no negative age), its words blame no file server, and no advice asks
    for the --since the watch has."""
    folder = tmp_path / "logs"
    folder.mkdir()
    for node in (0, 1):
        log = folder / f"node{node}.log"
        log.write_text(f"step 1\nnode {node} done\n")
        subprocess.run(["touch", "-d", "+10 minutes", str(log)], check=True)
    stage = {
        "stage": "ahead",
        "hosts": [h.sshd.spec() for h in hosts],
        "process": {"match": f"no-such-job-{os.getpid()} --node {{node}} "},
        "log": {"path": str(folder / "node{node}.log"), "complete": r"node \d+ done"},
    }
    path = tmp_path / "ahead.yaml"
    path.write_text(yaml.safe_dump(stage, sort_keys=False))

    def cli(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sensors", "status", str(path), "--since", "5m", *extra],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"},
            timeout=120,
            check=False,
        )

    table = cli()
    shown = table.stdout + table.stderr
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    assert "stamped 6" in shown or "stamped 5" in shown, shown
    assert f"ahead of {b}'s clock" in shown, shown
    assert "age=-" not in shown and "s ago" not in shown.replace("seen alive", ""), shown
    assert "file server" not in shown, shown
    assert "a tool set them (touch -d" in shown, shown
    assert "--since" not in shown, shown
    doc = json.loads(cli("--json").stdout)
    row = doc["signals"][f"log@{b}"]
    assert row["says"] == "unknown" and row["evidence"]["age_seconds"] < 0, row  # the raw number kept
    assert "ahead of the host's clock, on the host's own file system" in row["detail"], row
    assert "file server" not in json.dumps(doc) and "--since" not in json.dumps(doc), doc


def test_the_ranks_against_per_host_in_every_place_a_row_is_shown() -> None:
    """The process row of a host (its evidence given ``per_host`` by the verdict across
    hosts) shows its ranks against it: the table's key values, the notification's line, the
    evidence artifact's facts."""
    from sensors._present.evidence import evidence_line, key_values
    from sensors._present.facts import _process_facts

    verdict = _hung()
    row = verdict.readings["process@b"]
    assert row.evidence["per_host"] == 2 and row.evidence["ranks"] == 1, row.evidence
    assert key_values("process", row.evidence).startswith("ranks=1/2  "), key_values("process", row.evidence)
    assert "(ranks 1/2, " in evidence_line(row, "process@b"), evidence_line(row, "process@b")
    assert _process_facts(row.evidence)[0] == "ranks 1/2"


def test_the_table_of_several_stages_shows_each_hosts_ranks_against_per_host(capsys, monkeypatch) -> None:
    from sensors._present.terminal import print_verdicts

    monkeypatch.setenv("COLUMNS", "300")
    verdict = _hung()
    print_verdicts([verdict, verdict])
    out = capsys.readouterr().out
    assert "a working ranks=2/2  cpu=5.0s; b working ranks=1/2  cpu=5.0s" in out, out


# --------------------------------------------------------------------------- the rank named, and only when true


def _env_proc(entries: list[tuple[int, int | None, float]], at: float = NOW, **extra: Any) -> Reading:
    """A process reading of live ranks (pid, RANK or None, when it began) with no rank on
    their command lines."""
    processes = [
        {
            "pid": pid,
            "ppid": 1,
            "state": "S",
            "cmdline": "python train.py",
            "started_at": began,
            **({"env_rank": rank} if rank is not None else {}),
        }
        for pid, rank, began in entries
    ]
    n = len(entries)
    return _r(
        "process", Says.WORKING if n else Says.DONE, at, alive=n, ranks=n, matched=n, processes=processes,
        seen_alive=True, cpu_seconds=5.0, **extra,
    )  # fmt: skip


def _run(
    checks: list[tuple[float, list[tuple[int, int | None, float]]]], last: str = "step 11"
) -> list[Verdict]:
    """Host a (ranks 0, 1: pids 101, 102) unchanged; host b as each check lists it. Every
    rank quiet (no progress), logs per rank."""
    memory, out = AcrossMemory(), []
    for at, b_entries in checks:
        a = _node(
            "a", State.RUNNING, _env_proc([(101, 0, NOW - 500), (102, 1, NOW - 500)], at=at), _log(at=at),
            at=at, ranks={"log#rank1": _log(at=at)},
        )  # fmt: skip
        b = _node(
            "b", State.RUNNING, _env_proc(b_entries, at=at), _log(at=at),
            at=at, ranks={"log#rank3": _log(at=at, last=last)},
        )  # fmt: skip
        verdict, memory = decide_across("t", [a, b], POLICY, 2, memory, at)
        out.append(verdict)
    return out


def test_two_processes_told_the_same_rank_are_both_said() -> None:
    """A misconfigured launch (both of b's ranks given RANK=3): one ends. The words do not
    name it as rank 3 alone, nor read rank 3's log as its own, nor call that log's writer
    gone (the other one, alive, may be writing it)."""
    both = [(201, 3, NOW - 400), (202, 3, NOW - 400)]
    verdicts = _run([(NOW - 70, both), (NOW - 65, both), (NOW, [(201, 3, NOW - 400)])])
    why = verdicts[-1].reasons[0]
    assert verdicts[-1].state is State.FAILED, verdicts[-1].reasons
    assert "pid 202" in why and "pid 201 on b, alive, is told rank 3 too" in why, why
    assert "so its environment's RANK says" in why and "cannot be told" in why, why
    assert "its log's last line" not in why and "rank 3's log's last line (either may have written it)" in why
    assert verdicts[-1].readings["log#rank3@b"].says is Says.WORKING  # a writer of it is alive


def test_a_stale_rank_of_an_earlier_run_told_the_same_rank_is_said_too() -> None:
    """b runs a stale rank 3 (pid 150, begun long before) beside this run's ranks 2 and 3;
    this run's two end: rank 2 is named plainly, rank 3 with the stale one that shares it."""
    three = [(150, 3, NOW - 9000), (201, 2, NOW - 400), (202, 3, NOW - 400)]
    verdicts = _run([(NOW - 70, three), (NOW - 65, three), (NOW, [(150, 3, NOW - 9000)])])
    why = verdicts[-1].reasons[0]
    assert "rank 2, pid 201, last seen alive" in why, why
    assert "pid 150 on b, alive, is told rank 3 too" in why and "pid 202" in why, why


def test_an_elastic_restart_is_no_lost_rank() -> None:
    """torchrun --max-restarts: rank 3 (pid 202) ends and a new process told RANK=3 (pid
    203) takes its place. Between the two, rank 3 is lost and named; once it is back nothing
    calls it lost, and when rank 2 is lost later the old pid 202 is not named with it."""
    whole = [(201, 2, NOW - 400), (202, 3, NOW - 400)]
    again = [(201, 2, NOW - 400), (203, 3, NOW - 62)]
    verdicts = _run(
        [
            (NOW - 70, whole),
            (NOW - 65, whole),
            (NOW - 63, [(201, 2, NOW - 400)]),  # rank 3 gone, not back yet
            (NOW - 60, again),  # back, in a new process
            (NOW - 5, again),
            (NOW, [(203, 3, NOW - 62)]),  # rank 2 lost now
        ]
    )
    assert "rank 3, pid 202" in verdicts[2].reasons[0], verdicts[2].reasons
    for v in verdicts[3:5]:
        said = " ".join(v.reasons) + " ".join(r.detail for r in v.readings.values())
        assert "gone" not in said and "202" not in said, v.reasons
        assert v.readings["log#rank3@b"].says is Says.WORKING
    why = verdicts[-1].reasons[0]
    assert "rank 2, pid 201" in why and "202" not in why and "203" not in why, why
    assert verdicts[-1].readings["log#rank3@b"].says is Says.WORKING  # rank 3's writer, pid 203, alive


def test_a_rank_replaced_while_another_is_lost_is_not_named() -> None:
    """In one interval rank 3 is begun again (pid 203) and rank 2 ends: only rank 2 is lost."""
    whole = [(201, 2, NOW - 400), (202, 3, NOW - 400)]
    verdicts = _run([(NOW - 70, whole), (NOW - 65, whole), (NOW, [(203, 3, NOW - 30)])])
    why = verdicts[-1].reasons[0]
    assert "rank 2, pid 201" in why and "pid 202" not in why, why


def test_a_whole_restart_told_by_place_names_the_new_process_only() -> None:
    """Ranks told by place alone (no RANK readable, nothing on the command line): every rank
    begun again (pids 203, 204), then 204 ends: rank 3 is pid 204, said as told by place."""
    old = [(201, None, NOW - 400), (202, None, NOW - 399)]
    new = [(203, None, NOW - 100), (204, None, NOW - 99)]
    verdicts = _run([(NOW - 70, old), (NOW - 65, new), (NOW - 60, new), (NOW, [(203, None, NOW - 100)])])
    why = verdicts[-1].reasons[0]
    assert "rank 3 (told by its place among the host's ranks), pid 204" in why, why
    assert "201" not in why and "202" not in why, why


def test_a_rank_told_by_place_is_said_so_wherever_it_is_named(capsys) -> None:
    """No RANK readable (another user's job) and nothing on the command line: every place
    that names rank 3 says it was told by its place, never as if read."""
    from sensors._notify.message import build_message
    from sensors._present.picture import Sample, wait_svg
    from sensors._present.terminal import print_table

    verdict = _hung("")
    told = "rank 3 (told by its place among the host's ranks)"
    row = verdict.readings["log#rank3@b"]
    assert row.says is Says.FAILED and row.detail.startswith(f"writer gone: {told} last seen alive"), row
    print_table(verdict)
    table = capsys.readouterr().out
    message = build_message(verdict)
    svg = wait_svg([Sample.of(verdict, at=NOW)], title="t", note=verdict.reasons[0])
    for shown in (verdict.reasons[0], table, message.text, json.dumps(message.payload, ensure_ascii=False)):
        assert told in shown, shown
        assert shown.count("rank 3") == shown.count(told), shown  # never a bare "rank 3"
    assert "rank 3 (told by its place" in svg, svg


def test_a_lost_ranks_log_line_is_shown_inert_redacted_and_bounded(capsys, monkeypatch) -> None:
    """The lost rank's log's last line holds terminal escapes (clear screen, an OSC 8 link),
    secrets and 5 KB of text: shown as visible escapes, redacted, cut, everywhere."""
    from sensors._notify.message import build_message
    from sensors._present.picture import Sample, wait_svg
    from sensors._present.terminal import print_table

    monkeypatch.setenv("COLUMNS", "400")
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWx"
    nasty = (
        "<!channel> <script>x</script> \x1b[2J\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\ "
        f"step 11 {token} password=hunter2hunter2 "
    )
    nasty += "x" * (5000 - len(nasty))
    # As the log signal gives it: its last 300 characters (a Reading redacts its evidence).
    verdicts = _run(
        [(NOW - 70, [(201, 2, NOW - 400), (202, 3, NOW - 400)])] * 1
        + [(NOW - 65, [(201, 2, NOW - 400), (202, 3, NOW - 400)]), (NOW, [(201, 2, NOW - 400)])],
        last=nasty[:300],
    )
    verdict = verdicts[-1]
    why = verdict.reasons[0]
    assert (
        "its log's last line: '<!channel> <script>x</script> \\x1b[2J\\x1b]8;;http://evil.example" in why
    ), why
    print_table(verdict)
    table = capsys.readouterr().out
    message = build_message(verdict)
    svg = wait_svg([Sample.of(verdict, at=NOW)], title="t", note=why)
    for shown in (why, table, message.text, str(message.payload), svg):
        assert "\x1b" not in shown and "\r" not in shown, shown
        assert "hunter2" not in shown and token[3:] not in shown, shown
        assert "x" * 200 not in shown, shown  # bounded (160 characters of the line)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert (
        "<!channel>" not in str(message.payload["attachments"])
        and "&lt;!channel&gt;" in message.payload["text"]
    )


def test_ranks_come_first_in_the_listed_processes() -> None:
    """8 ranks each with 3 DataLoader workers, each rank's workers forked before the next
    rank began (PIDs interleaved): the evidence's 16 list every rank first."""
    from sensors._signals.process import _Job, _ranks_first

    processes: list[Any] = []
    pid = 1000
    for rank in range(8):
        parent = pid
        processes.append({"pid": parent, "ppid": 1, "state": "S", "cmdline": f"train.py --local_rank {rank}"})
        for _ in range(3):
            pid += 1
            processes.append({"pid": pid, "ppid": parent, "state": "S", "cmdline": "train.py"})
        pid += 1
    job = _Job(processes, [e["pid"] for e in processes], set(), 1.0, None, processes[0], NOW - 100)
    listed = _ranks_first(job)[:16]
    assert [e["cmdline"] for e in listed[:8]] == [f"train.py --local_rank {r}" for r in range(8)]
    assert [e["pid"] for e in listed[:8]] == sorted(e["pid"] for e in listed[:8])


def _workers_proc(ranks: list[int], at: float, listed: int | None = None) -> Reading:
    """Host b: 8 ranks (pids 200 + rank, RANK in the environment), 3 workers each; the
    probe's 16 listed ranks first (``listed``: only the first ``listed`` entries in PID
    order, as a list cut before the ranks came first)."""
    parents = [
        {"pid": 200 + r, "ppid": 1, "state": "S", "cmdline": "python train.py", "started_at": NOW - 400,
         "env_rank": 8 + r}
        for r in ranks
    ]  # fmt: skip
    workers = [
        {
            "pid": 300 + 3 * r + w,
            "ppid": 200 + r,
            "state": "S",
            "cmdline": "python train.py",
            "started_at": NOW - 390,
        }
        for r in ranks
        for w in range(3)
    ]
    if listed is None:
        shown = (parents + workers)[:16]
    else:
        mixed = sorted(parents + workers, key=lambda e: (e["ppid"] if e["ppid"] != 1 else e["pid"], e["pid"]))
        shown = mixed[:listed]
    n = len(parents) + len(workers)
    return _r(
        "process", Says.WORKING, at, alive=n, ranks=len(parents), matched=n, processes=shown,
        seen_alive=True, cpu_seconds=5.0,
    )  # fmt: skip


@pytest.mark.parametrize("listed", [None, 16], ids=["ranks first", "cut among the workers"])
def test_a_32_process_host_names_its_lost_rank_or_says_it_cannot(listed: int | None) -> None:
    """Host b, node 1 of 8 ranks each (ranks 8..15), 32 processes with their workers; rank 13
    (pid 205) ends with its workers. Listed ranks first, rank 13 is named; listed by PID with
    ranks left out of the 16, no rank is named wrong: the words say which is not told."""
    memory = AcrossMemory()
    policy = POLICY
    for at, ranks in ((NOW - 70, range(8)), (NOW - 65, range(8)), (NOW, [r for r in range(8) if r != 5])):
        a = _node("a", State.RUNNING, _env_proc([(100 + r, r, NOW - 500) for r in range(8)], at=at), at=at)
        b = _node("b", State.RUNNING, _workers_proc(list(ranks), at, listed), at=at)
        verdict, memory = decide_across("t", [a, b], policy, 8, memory, at)
    why = verdict.reasons[0]
    assert why.startswith("1 of 8 ranks on b gone"), why
    if listed is None:
        assert "rank 13, pid 205, last seen alive" in why, why
        assert why.count("pid 2") == 1, why  # no other rank of b named
    else:
        assert "which one is not told (the probe lists 16 of its 28 processes)" in why, why
        assert "pid 2" not in why, why


def test_over_two_hosts_a_rank_begun_again_is_no_lost_rank(tmp_path: Path, hosts: list[_Host]) -> None:
    """An elastic restart over the two sshd hosts: rank 3 is killed and a new process with
    its command line takes its place at once. Once the watch sees it, no verdict calls a
    rank gone or names the old PID, and the stage completes when every rank ends."""
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2, rank_logs=True)
    path = _stage(tmp_path, hosts, ranks)
    _rank_logs(path, ranks)
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    old = ranks.procs[(1, 1)]
    try:
        waiting = _wait(path, "40s")
        waiting.until(lambda v: _alive_everywhere(v, hosts) and f"log#rank3@{b}" in v["signals"])
        old.kill()
        old.wait()
        new = subprocess.Popen(
            [sys.executable, *old.args[1:]], start_new_session=True, env={**os.environ, "SPAN_RANK_LOGS": "2"}
        )
        ranks.procs[(1, 1)] = new
        waiting.until(lambda v: f'"pid": {new.pid},' in json.dumps(v["signals"].get(f"process@{b}", {})))
        seen = len(waiting.verdicts)
        time.sleep(1.5)
        ranks.finish()
        rc = waiting.end()
    finally:
        ranks.stop()
    after = waiting.verdicts[seen:]
    said = [r for v in after for r in v["reasons"]] + [
        s["detail"] for v in after for s in v["signals"].values()
    ]
    assert not [s for s in said if f"pid {old.pid}" in s or "gone" in s], said
    assert rc == 0 and waiting.verdicts[-1]["verdict"] == "complete", waiting.verdicts[-1]["reasons"]
