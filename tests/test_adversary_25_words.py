"""An adversary's review of what a person is shown about a stage over several hosts (issue
25): every sentence true, nothing said twice, a verdict carrying its evidence. Pure: verdicts
across hosts built as tests/test_span_adversary.py builds them, and what each presenter (the
terminal, a notification, ...) makes of them. A failing test is a finding."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sensors import Reading, Says, State, Verdict
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across

NOW = 1_000_000.0
POLICY = PolicySpec(stall_after=60.0)


def _r(signal: str, says: Says, read_at: float | None = NOW, **evidence: Any) -> Reading:
    return Reading(signal, says, f"{signal} {says}", evidence, read_at)


def _node(
    host: str, state: State, *readings: Reading, at: float = NOW, reasons: tuple[str, ...] = ()
) -> NodeCheck:
    return NodeCheck(
        host, Verdict("t", state, reasons or (f"{host} {state}",), {r.signal: r for r in readings}, at, host)
    )


def _alive(n: int, cpu: float = 1.0, at: float = NOW, **extra: Any) -> Reading:
    return _r("process", Says.WORKING, at, alive=n, seen_alive=True, cpu_seconds=cpu, **extra)


def _decide(
    nodes: list[NodeCheck], *, per_host: int | None = None, success: str = "all", memory=None, now=NOW
):
    policy = POLICY.model_copy(update={"success": success})
    return decide_across("t", nodes, policy, per_host, memory or AcrossMemory(), now)


def _running_span() -> Verdict:
    """Two hosts at work: a with 2 ranks (CPU 50 s), b with 1 (CPU 7 s)."""
    verdict, _ = _decide(
        [
            _node("gpu-a", State.RUNNING, _alive(2, cpu=50.0, pid=11), _r("gpu", Says.WORKING)),
            _node("gpu-b", State.RUNNING, _alive(1, cpu=7.0, pid=22), _r("gpu", Says.DONE)),
        ]
    )
    return verdict


# --- a notification's evidence names each host ------------------------------------------------


def test_a_notifications_evidence_says_which_host_each_reading_is_of() -> None:
    """A notification listed a span's readings by their signal alone: "process: working ...",
    then "process: working ..." again, each host's line indistinguishable from the other's
    (and said twice, as far as a reader can tell)."""
    from sensors._notify.message import build_message

    text = build_message(_running_span()).text
    evidence = text.split("Evidence:\n", 1)[1].splitlines()
    assert any(line.startswith("- process@gpu-a: ") for line in evidence), evidence
    assert any(line.startswith("- process@gpu-b: ") for line in evidence), evidence
    assert len(set(evidence)) == len(evidence), evidence


# --- the terminal's tables ----------------------------------------------------------------------


def test_status_table_shows_each_hosts_key_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    """``crosscheck status`` of one stage: the key evidence column was empty on every row of a
    span (``process@gpu-a`` was not a signal name ``key_values`` knew): the CPU time of each
    host's ranks, shown for a stage of one host, was missing for each host."""
    from sensors._present.terminal import print_table

    print_table(_running_span())
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("process@gpu-a"))
    assert "cpu=50.0s" in row, out
    row = next(line for line in out.splitlines() if line.startswith("process@gpu-b"))
    assert "cpu=7.0s" in row, out
    # Its time is this machine's (SpanChecker), not a host's: none is named.
    assert "(host clock)" not in out, out


def test_status_of_several_stages_does_not_say_a_span_has_no_process_signal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``crosscheck status a.yaml b.yaml`` (a row per stage): a span's process and gpu cells
    were "—", as for a stage without those signals; it reads them on every host."""
    from sensors._present.terminal import print_verdicts

    other = Verdict("u", State.RUNNING, ("u running",), {"process": _alive(1)}, NOW, "h")
    print_verdicts([_running_span(), other])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("t "))
    assert "gpu-a working pid=11  cpu=50.0s; gpu-b working pid=22  cpu=7.0s" in row, out
    assert "gpu-a working; gpu-b done" in row, out


# --- the verdict's own times, on one clock ----------------------------------------------------


def test_how_long_a_span_held_its_state_is_not_the_hosts_skew() -> None:
    """Three hosts, b's clock an hour ahead. b cannot be read (``unknown``, this machine's
    time), then 30 s later c cannot be read while b can (still ``unknown``). The verdict's
    time was the latest of the hosts' clocks: the reminder said "still unknown for 1h"."""
    import time

    from sensors import stage_from_dict
    from sensors._check.span import SpanChecker
    from sensors._notify.message import build_message

    stage = stage_from_dict(
        {
            "stage": "t",
            "hosts": [{"ssh": "a"}, {"ssh": "b"}, {"ssh": "c"}],
            "process": {"match": "x"},
            "policy": {"interval": "10s"},
        }
    )

    def ok(host: str, at: float) -> Verdict:
        return Verdict(f"t#{host}", State.RUNNING, ("r",), {"process": _alive(1, at=at)}, at, host)

    def down(host: str, at: float) -> Verdict:
        gone = _r("process", Says.UNKNOWN, None, host_error="timeout")
        return Verdict(f"t#{host}", State.UNKNOWN, ("host unreachable",), {"process": gone}, at, host)

    with SpanChecker(stage) as span:
        t = time.time()
        first = span._combine([ok("a", t), down("b", t), ok("c", t)])
        second = span._combine([ok("a", t + 30), ok("b", t + 3630), down("c", t + 30)])
    assert first.state is second.state is State.UNKNOWN
    assert second.checked_at is not None and second.since is not None
    assert second.checked_at - second.since < 60, second.checked_at - second.since
    assert "1h" not in build_message(second, kind="reminder").title


# --- the verdict across hosts' sentences ------------------------------------------------------


def test_a_lost_rank_is_said_whatever_the_gravest_state() -> None:
    """1 of 2 ranks on b gone while node 0 is ``stalled`` by its own rule (its log quiet while
    its CPU moves, so no hung collective yet): the stage was ``stalled`` with node 0's and b's
    reasons only; the lost rank, said under ``running``, went unsaid."""
    memory = None
    for t, (b_alive, a_state) in enumerate([(2, State.RUNNING), (1, State.STALLED)]):
        at = NOW + 40 * t
        nodes = [
            _node("a", a_state, _alive(2, cpu=5.0 + t, at=at), at=at, reasons=("no log line for 20m",)),
            _node("b", State.RUNNING, _alive(b_alive, cpu=3.0 + t, at=at), at=at),
        ]
        verdict, memory = _decide(nodes, per_host=2, memory=memory, now=at)
    assert verdict.state is State.STALLED, verdict.reasons
    assert any("1 of 2 ranks on b gone" in r for r in verdict.reasons), verdict.reasons


# --- validate's words -----------------------------------------------------------------------


def test_two_ipv6_hosts_are_not_told_they_share_a_name() -> None:
    """``log.path`` with ``{host}`` over fd00::1 and fd00::2: refused with "{host} would name
    two hosts alike (one name, two ports)" (a ':' in a label was taken for a port), though
    each host has a name of its own and each log its own path."""
    from sensors import stage_from_dict

    stage = stage_from_dict(
        {
            "stage": "t",
            "hosts": [{"ssh": "fd00::1"}, {"ssh": "fd00::2"}],
            "process": {"match": "x"},
            "log": {"path": "/l/{host}.log", "complete": "done"},
            "policy": {"interval": "10s"},
        }
    )
    assert [n.log.path for n in stage.nodes if n.log] == ["/l/fd00::1.log", "/l/fd00::2.log"]


def test_withstood_two_hosts_of_one_name_with_host_are_still_refused() -> None:
    from sensors import ConfigError, stage_from_dict

    with pytest.raises(ConfigError, match="one name, two ports"):
        stage_from_dict(
            {
                "stage": "t",
                "hosts": [{"ssh": "h", "port": 22}, {"ssh": "h", "port": 2222}],
                "process": {"match": "x"},
                "log": {"path": "/l/{host}.log", "complete": "done"},
                "policy": {"interval": "10s"},
            }
        )


def test_a_blip_does_not_move_when_ranks_were_found_gone() -> None:
    """b's rank found gone at the second check; b cannot be read at the third (a blip); at the
    fourth it shows the same 1 of 2. "found gone at" named the fourth check's time: the
    blip had dropped the time they were first found gone."""
    memory = None
    plan = [_alive(2), _alive(1), _r("process", Says.UNKNOWN, None, host_error="timeout"), _alive(1)]
    for t, reading in enumerate(plan):
        at = NOW + 40 * t
        reading = Reading(
            reading.signal, reading.says, reading.detail, reading.evidence, at if reading.read_at else None
        )
        nodes = [
            _node("a", State.RUNNING, _alive(2, cpu=5.0 + t, at=at), at=at),
            _node("b", State.RUNNING, reading, at=at),
        ]
        verdict, memory = _decide(nodes, per_host=2, memory=memory, now=at)
    found = dt.datetime.fromtimestamp(NOW + 40, tz=dt.UTC).strftime("%H:%M:%S UTC")
    assert any(f"1 of 2 ranks on b gone (found gone at {found}" in r for r in verdict.reasons), (
        verdict.reasons
    )


def test_validate_does_not_offer_a_span_the_launch_it_refuses() -> None:
    """A stage over several hosts with a process section alone: validate's warning told it to
    add "a launch section (crosscheck then records the exit status)", which a stage over
    several hosts refuses ("a launch across hosts is not built")."""
    from sensors import stage_from_dict
    from sensors._cli.validate import warnings_of

    doc = {"stage": "t", "process": {"match": "x"}, "policy": {"interval": "10s"}}
    span = stage_from_dict({**doc, "hosts": [{"ssh": "a"}, {"ssh": "b"}]})
    (note,) = warnings_of(span)
    assert "never completes on its own" in note and "launch" not in note, note
    (one,) = warnings_of(stage_from_dict({**doc, "host": "local"}))
    assert "a launch section" in one, one


def test_a_complete_span_says_whose_reasons_follow_every_host_agrees() -> None:
    """Complete across a and b: after "every host agrees (a, b)" came node 0's own reasons,
    unnamed — "every signal says done", "agreed for 3 consecutive checks", "4455 gone" — read
    as the stage's, though they are a's alone (b was done at its first check)."""
    done = (
        "every signal says done",
        "agreed for 3 consecutive checks",
        "pid 4455 gone",
    )
    gone = _r("process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=9.0)
    nodes = [
        _node("a", State.COMPLETE, gone, _r("log", Says.DONE), reasons=done),
        _node("b", State.COMPLETE, gone, _r("log", Says.DONE), reasons=("every signal says done",)),
    ]
    verdict, _ = _decide(nodes)
    assert verdict.state is State.COMPLETE, verdict.reasons
    assert verdict.reasons[0] == "every host agrees (a, b)", verdict.reasons
    assert all(r.startswith("a (node 0): ") for r in verdict.reasons[1:]), verdict.reasons


# --- ranks counted past the evidence's list of processes ---------------------------------------


def test_ranks_are_counted_past_the_sixteen_processes_the_evidence_lists(tmp_path: Any) -> None:
    """2 ranks, each with 8 forked DataLoader workers (their command line the rank's): 18
    matches, of which the evidence lists 16. Ranks were told from workers only in a full list;
    past it every live match counted as a rank: "ranks alive on a (18)", and 1 of 2 ranks
    lost (9 matches left, >= per_host) was never seen lost."""
    import subprocess
    import sys
    import uuid

    from sensors import stage_from_dict
    from sensors._check.checker import Checker
    from sensors._verdict.across import _alive as ranks_alive

    tag = f"wk-{uuid.uuid4().hex[:8]}"
    code = (
        "import os, sys, time\n"
        "for _ in range(8):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(600); os._exit(0)\n"
        "sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(600)\n"
    )
    ranks = [
        subprocess.Popen([sys.executable, "-c", code, tag], stdout=subprocess.PIPE, start_new_session=True)
        for _ in range(2)
    ]
    try:
        for rank in ranks:
            assert rank.stdout is not None and rank.stdout.readline() == b"up\n"
        stage = stage_from_dict(
            {"stage": "t", "host": "local", "process": {"match": tag}, "policy": {"interval": "10s"}}
        )
        with Checker(stage) as checker:
            verdict = checker.check()
        evidence = verdict.readings["process"].evidence
        assert evidence["matched"] == 18 and len(evidence["processes"]) < 18, evidence
        assert ranks_alive(verdict) == 2, evidence
    finally:
        import os
        import signal

        for rank in ranks:
            os.killpg(rank.pid, signal.SIGKILL)
            rank.wait()


def test_every_host_that_cannot_be_read_is_named_with_its_cause() -> None:
    """Two of three hosts unreadable: the first was named with its cause, the second shown as
    "c: unknown" alone, as if c had been read and found undecided."""

    def unread(host: str, why: str) -> NodeCheck:
        return NodeCheck(
            host,
            Verdict(
                "t",
                State.UNKNOWN,
                (why,),
                {"process": Reading("process", Says.UNKNOWN, why, {}, None)},
                NOW,
                host,
            ),
        )

    nodes = [
        _node("a", State.COMPLETE, _r("process", Says.DONE, alive=0, seen_alive=True), _r("log", Says.DONE)),
        unread("b", "connection refused"),
        unread("c", "timed out after 10s"),
    ]
    verdict, _ = _decide(nodes)
    assert verdict.state is State.UNKNOWN
    assert verdict.reasons == (
        "b cannot be read: connection refused",
        "c cannot be read: timed out after 10s",
        "a: complete: a complete",  # its state and its own first reason (notes/ml44.md, item 8)
    ), verdict.reasons
