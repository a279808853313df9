"""A moment as it was read: a time on one clock and how far the truth may be from it.

Nothing that ties evidence to a run is a point: a process's start from /proc is known to a
few clock ticks (a second where /proc/uptime is virtualised), a file time lags the write by
a tick and may be whole seconds, another host's clock is off by what its round trip allows.
A :class:`Moment` keeps the interval the truth lies in, ``[earliest, latest]``, and which
clock it is on; comparing two answers yes, no, or ``None``: cannot tell, when the intervals
overlap and either order fits what was read.

Example:
    >>> start = Moment.about(100.0, 0.05, source="/proc start ticks")
    >>> line = Moment.within(100.02, 100.04, clock="host", source="mtime")
    >>> print(line.before(start))
    None
    >>> Moment.within(99.0, 99.01).before(start)
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

#: Whose clock a moment was read on: the monitored host's (its kernel, its ``date``), a file
#: server's (file times on NFS, FUSE, ...), or the checking machine's (``--since`` given as a
#: time, when a probe's answer came back).
Clock = Literal["host", "file", "checker"]

#: yes, no, or cannot tell (the intervals overlap: either order fits what was read).
Answer = Literal[True, False, None]


@dataclass(frozen=True)
class Moment:
    """A time read on ``clock`` (seconds since the epoch): the truth lies in
    ``[at - early, at + late]``; ``source`` says where it was read (for a reader)."""

    at: float
    early: float = 0.0
    late: float = 0.0
    clock: Clock = "host"
    source: str = ""

    def __post_init__(self) -> None:
        values = (self.at, self.early, self.late)
        if not all(math.isfinite(v) for v in values) or self.early < 0 or self.late < 0:
            raise ValueError(f"a moment needs a finite time and slack of 0 or more: {values}")

    @classmethod
    def about(cls, at: float, slack: float, clock: Clock = "host", source: str = "") -> Moment:
        """``at``, off by up to ``slack`` either way (a /proc start: ``PROC_START_TICKS``)."""
        return cls(at, slack, slack, clock, source)

    @classmethod
    def within(cls, earliest: float, latest: float, clock: Clock = "host", source: str = "") -> Moment:
        """Somewhere in ``[earliest, latest]`` (a file time: ``[mtime, mtime + resolution]``)."""
        if latest < earliest:
            raise ValueError(f"a moment's latest ({latest}) is before its earliest ({earliest})")
        return cls(earliest, 0.0, latest - earliest, clock, source)

    @property
    def earliest(self) -> float:
        return self.at - self.early

    @property
    def latest(self) -> float:
        return self.at + self.late

    def before(self, other: Moment) -> Answer:
        """Whether this moment was strictly before ``other``: True when every truth of it is
        before every truth of ``other``, False when none is (it was at or after it), None
        when the intervals leave both. Moments on two clocks are not compared: move one onto
        the other's first (:meth:`moved`)."""
        self._same_clock(other)
        if self.latest < other.earliest:
            return True
        if self.earliest >= other.latest:
            return False
        return None

    def after(self, other: Moment) -> Answer:
        """Whether this moment was strictly after ``other`` (as :meth:`before`, turned round)."""
        return other.before(self)

    def moved(self, clock: Clock, offset: float, uncertainty: float = 0.0) -> Moment:
        """This moment on ``clock``, which reads ``offset`` more than this one's, known to
        within ``uncertainty`` either way (a host's clock against the checking machine's,
        measured in the probe's round trip): the interval widens by it."""
        if not math.isfinite(offset) or not math.isfinite(uncertainty) or uncertainty < 0:
            raise ValueError(
                f"an offset needs finite values and an uncertainty of 0 or more: {offset}, {uncertainty}"
            )
        return Moment(self.at + offset, self.early + uncertainty, self.late + uncertainty, clock, self.source)

    def _same_clock(self, other: Moment) -> None:
        if self.clock != other.clock:
            raise ValueError(f"a {self.clock} clock's moment compared with a {other.clock} clock's")
