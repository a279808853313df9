"""Adversary review of bcfbd3c: a short log read whole takes no progress from the memory for
the count before an error line, as a resumed read still did where its tail reaches back over
the last scan's last bytes (``resume_at``: the 64 bytes of the fingerprint).

A log-only stage, checks driven by hand, a real log.
"""

from __future__ import annotations

from pathlib import Path

from sensors import Checker, Says, stage_from_dict
from sensors._hosts import LocalHost
from tests.test_adversary_session import _append, _log_stage

#: More than the 64 bytes a resumed read reaches back: the progress before the error line
#: is out of the next tail, which begins in this line (dropped as partial).
_PAD = "y" * 80 + "\n"


def _checker(log: Path) -> Checker:
    log.write_text("")
    checker = Checker(stage_from_dict(_log_stage(log)), host=LocalHost("local"), since="1m")
    checker.check()
    return checker


def test_a_resumed_read_over_a_cleared_error_line_does_not_bring_it_back(tmp_path: Path) -> None:
    """Seed 50587's fault on a resumed read: the error line, then progress past it (cleared,
    ``working``); a line appended. The next read resumes 64 bytes before the last check's end,
    so it reads the error line and the progress again, with no progress before them in its
    tail: the memory's progress (the one *after* the error) was taken for the count before
    it, the same count after it read as a redraw, and the cleared error failed the run."""
    log = tmp_path / "job.log"
    checker = _checker(log)
    _append(log, "x" * 100 + "\n 5/10 steps\n" + _PAD + "Error: rank 1 lost its peer\n")
    assert checker.check().readings["log"].says is Says.FAILED
    _append(log, " 6/10 steps\n")
    assert checker.check().readings["log"].says is Says.WORKING
    _append(log, "checkpoint saved\n")
    again = checker.check().readings["log"]
    assert again.says is Says.WORKING, again.detail


def test_a_redraw_after_an_error_line_read_again_still_fails(tmp_path: Path) -> None:
    """What held, and must: the error line standing at the last check, read again by a resumed
    read whose tail holds no progress before it; then tqdm's redraw of the count before it.
    The memory's progress is that count (read before the error): the redraw is no work."""
    log = tmp_path / "job.log"
    checker = _checker(log)
    _append(log, "x" * 100 + "\n 5/10 steps\n" + _PAD + "Error: rank 1 lost its peer\n")
    assert checker.check().readings["log"].says is Says.FAILED
    _append(log, "\r 5/10 steps\n")
    again = checker.check().readings["log"]
    assert again.says is Says.FAILED, again.detail
    _append(log, " 6/10 steps\n")
    went_on = checker.check().readings["log"]
    assert went_on.says is Says.WORKING, went_on.detail
