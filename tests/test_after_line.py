"""Outputs that changed after the watch found the completion line (``_after_line``), on a
simulated clock: a change the exit watch shows came before the line's writers ended is their
own work, though the reading before did not show it (issue 35: "the job ends inside one
probe" — its outputs' stamp read before the log, the job wrote its last output, its line and
ended between the two, and the next check found the output new with no process alive)."""

from __future__ import annotations

import pytest

from sensors._signals.base import LastWord
from sensors._signals.outputs import OutputsMemory, _after_line, _Count

T = 1_800_000_000.0
LINE_END = 120
BEFORE = "5 4096 1800000000 1799999990.000000000 1800000000.100000000 1800000000.100000000 directory"


def _now(ctime: float) -> str:
    """The directory's stamp at this check: its ctime moved by the last output."""
    return f"5 4096 {int(ctime)} 1799999990.000000000 {ctime:.9f} {ctime:.9f} directory"


@pytest.mark.parametrize(
    ("changed", "writers_end", "own", "after"),
    [
        # The last output landed 20 ms before the job's seen end: its own, not after the line.
        (T + 1.0, T + 1.02, True, False),
        # ... at the very moment (equal stamps are not "after").
        (T + 1.02, T + 1.02, True, False),
        # 30 ms after the seen end: a later writer's.
        (T + 1.05, T + 1.02, True, True),
        # No end seen (the job ended unseen): whose it is cannot be told.
        (T + 1.0, None, True, True),
        # Another clock's stamp (a file server's): not compared with the host's end.
        (T + 1.0, T + 1.02, False, True),
    ],
)
def test_a_change_before_the_writers_seen_end_is_theirs(
    changed: float, writers_end: float | None, own: bool, after: bool
) -> None:
    memory = OutputsMemory(count=4, ident=BEFORE, line_end=LINE_END, checked_at=T + 0.9)
    got = _Count(4, None, True, OutputsMemory(count=4))
    word = LastWord(LINE_END, job_alive=False, writers_end=writers_end)
    found = _after_line(memory, got, _now(changed), 4, word, own)
    assert (found == LINE_END) is after


def test_a_process_alive_at_the_last_check_leaves_it_to_the_writers() -> None:
    memory = OutputsMemory(count=4, ident=BEFORE, line_end=LINE_END, checked_at=T + 0.9)
    got = _Count(4, None, True, OutputsMemory(count=4))
    word = LastWord(LINE_END, job_alive=True)
    assert _after_line(memory, got, _now(T + 5), 4, word, True) is None
