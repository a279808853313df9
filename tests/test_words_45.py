"""Words a person is shown that were true but misleading, or not true (notes/ml44.md, items
5-8): each rewritten so it says what the watch knows, and no verdict's state changed.

Pure tables at the verdict (or the reading's words) where the words are made; one real
watch over a state store for the verdict an earlier watch decided (item 5)."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import pytest

from sensors import Reading, Says, State, Verdict
from sensors._check.checker import _earlier_watch_words

NOW = 1_000_000.0


def _hms(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%H:%M:%S UTC")


# --------------------------------------------------------------------------- item 5: an earlier watch's verdict


def _done(at: float = NOW) -> dict[str, Reading]:
    return {
        "process": Reading("process", Says.DONE, "pid 18208 ended (last seen alive 8s ago, 0.3s CPU)", {}, at),
        "log": Reading("log", Says.DONE, "completion line: Extraction complete", {}, at),
    }


def _complete(streak: int, at: float = NOW) -> Verdict:
    readings = _done(at)
    reasons = ("every signal says done", f"agreed for {streak} consecutive checks", *(r.detail for r in readings.values()))
    return Verdict("extract", State.COMPLETE, reasons, readings, at, "local")


@pytest.mark.parametrize(
    ("streak", "own", "stored", "agreed", "decided"),
    [
        # A wait begun after an earlier watch opened the gate: its one check agrees.
        (3, 1, "complete", "agreed for 3 consecutive checks, 2 of them an earlier watch's", True),
        # The earlier watch was confirming (running): this watch's check completed it.
        (2, 1, "running", "agreed for 2 consecutive checks, 1 of them an earlier watch's", False),
        # Every check of the streak this watch's own: nothing to say of an earlier one.
        (2, 3, "complete", "agreed for 2 consecutive checks", True),
        # No memory from the store: the words as they were.
        (2, 2, None, "agreed for 2 consecutive checks", False),
    ],
    ids=["opened on the stored complete", "stored running", "own streak", "nothing stored"],
)
def test_a_verdict_an_earlier_watch_decided_says_so(
    streak: int, own: int, stored: str | None, agreed: str, decided: bool
) -> None:
    """notes/ml44.md, item 5: a wait begun before a re-run, the state store its default,
    opened on the last run's verdict: 'agreed for 3 consecutive checks' (it made 1) and an
    old PID, nothing saying the verdict was an earlier watch's. Its state is as it was."""
    last = None
    if stored is not None:
        state = State(stored)
        readings = _done(NOW - 60)
        last = Verdict("extract", state, ("x",), readings if state is State.COMPLETE else {}, NOW - 60, "local")
    verdict = _earlier_watch_words(_complete(streak), streak, own, last, latest=True)
    assert verdict.state is State.COMPLETE and verdict.readings == _complete(streak).readings
    assert agreed in verdict.reasons, verdict.reasons
    said = [r for r in verdict.reasons if r.startswith("decided complete by an earlier watch")]
    assert bool(said) is decided, verdict.reasons
    if decided:
        assert verdict.reasons[1] == (
            f"decided complete by an earlier watch at {_hms(NOW - 60)}, of the run it saw (its memory,"
            " from the state store); to gate a run about to start, give its start (--since)"
        ), verdict.reasons
    assert verdict.reasons[0] == "every signal says done"
    # A watch told its run (a launch, --since) is told nothing of how to gate another.
    told = _earlier_watch_words(_complete(streak), streak, own, last)
    assert not [r for r in told.reasons if "--since" in r], told.reasons


def test_a_watch_going_on_from_an_earlier_watchs_memory_says_whose_verdict_it_is(tmp_path) -> None:
    """A real job, a watch that sees it end and completes (its memory kept in the store),
    then a second watch of the same store: complete at its first check, as documented
    (docs/cli.md: begun before a re-run without --since, wait answers for the run before it),
    and now said to be the earlier watch's."""
    from sensors import Checker, stage_from_dict
    from sensors.testing import COMPLETE_LINE
    from tests.test_false_complete_routes import _tagged

    tag = f"w45-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    stage = stage_from_dict(
        {
            "stage": "w45",
            "host": "local",
            "process": {"match": f"--tag {tag}( |$)"},
            "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}"},
            "policy": {"interval": "100ms", "settle": 2, "exit_grace": "1ms"},
        }
    )
    store = str(tmp_path / "state.db")
    first = Checker(stage, state=store)
    try:
        job = _tagged(f"sleep 0.6; printf '{COMPLETE_LINE}\\n' >> {log}", tag)
        time.sleep(0.2)
        assert first.check().readings["process"].says is Says.WORKING
        assert job.wait(10) == 0
        verdicts = []
        for _ in range(6):
            verdicts.append(first.check())
            if verdicts[-1].state is State.COMPLETE:
                break
            time.sleep(0.15)
    finally:
        first.close()
    opened = verdicts[-1]
    assert opened.state is State.COMPLETE, [v.reasons for v in verdicts]
    assert "agreed for 2 consecutive checks" in opened.reasons, opened.reasons  # its own: as it was
    assert not [r for r in opened.reasons if "earlier watch" in r], opened.reasons
    second = Checker(stage, state=store)
    try:
        again = second.check()
    finally:
        second.close()
    assert again.state is State.COMPLETE, again.reasons
    assert "agreed for 3 consecutive checks, 2 of them an earlier watch's" in again.reasons, again.reasons
    assert again.reasons[1].startswith(
        f"decided complete by an earlier watch at {_hms(opened.checked_at)}, of the run it saw"
    ), again.reasons
