"""When a file was written against a run's start: the pure rules the log's binding uses.

Moved here from ``sensors._signals.log`` as they were (issue 35: one model, in one place);
they read a file's times through :class:`FileTimes` (the log signal's parsed stat line is
one) and a :class:`~sensors._run.run.Run`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple, Protocol

from sensors._base.tolerances import (
    FILE_CLOCK_TOLERANCE,
    FILE_TIME_TICK,
    OWN_CLOCK_SLACK,
    PROC_START_WHOLE_SECONDS,
)
from sensors._run.run import Run


class FileTimes(Protocol):
    """A file's identity and times as one stat read them."""

    @property
    def inode(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def birth(self) -> float:  # a lower bound of the file's birth; 0: unknown
        ...
    @property
    def written(self) -> float:  # the mtime as exactly as stat gave it
        ...
    @property
    def resolution(self) -> float:  # the last write happened in [written, written + resolution)
        ...


def time_impossible(st: FileTimes, run: Run | None, latest: float, own: bool) -> bool:
    """Whether the log's file times cannot be true on the host's clock: ahead of it, before
    the file's birth, or, for a launched run's log changed since the launch, before the launch
    (set back by a tool, or a file server's clock): they are then no evidence of when it was
    written."""
    if file_time_ahead(st, latest, own) is not None:
        return True
    if st.birth and st.written + st.resolution < st.birth - FILE_TIME_TICK:
        return True  # last written before it was born: set back (the birth is the kernel's)
    if run is None or run.source != "launch" or run.started_at is None:
        return False
    changed = st.inode != run.log_inode or st.size != (run.log_offset or 0)
    return changed and st.written + st.resolution < run.started_at - FILE_TIME_TICK


def file_time_ahead(st: FileTimes, latest: float, own: bool) -> float | None:
    """How far the log's mtime or birth is ahead of ``latest`` (None: neither is, beyond what
    the file system's clock allows: a few ticks where the host's kernel stamps the times —
    its clock lags, never leads, so a time ahead was set by a tool — and the tolerance where
    a file server's clock does). A time ahead within the tolerance on the host's own clock
    dated an earlier run's line after a start given a moment before (fuzzer seed 702132)."""
    by = max(st.written, st.birth) - latest
    return round(by, 3) if by > (OWN_CLOCK_SLACK if own else FILE_CLOCK_TOLERANCE) else None


def run_start_slack(source: str, slack: float | None = None) -> float:
    """How far a run's start may be from the truth: a ``since`` is exact (on another host's
    clock, to the offset its round trip measured: ``Run.slack``); a process's start as exact
    as it was read (``Run.slack``), else the worst case."""
    if source == "since":
        return slack or 0.0  # exact on the host's clock; another host's, to its measured offset
    return PROC_START_WHOLE_SECONDS if slack is None else slack


def last_write(
    written: float,
    resolution: float,
    started: float,
    source: str,
    after: float | None = None,
    slack: float | None = None,
) -> Literal["before", "after", "unclear"]:
    """Whether the log was last written before the run began, after it, or too near to tell.

    The write happened in [written, written + resolution): to the kernel's tick where stat
    gives nanoseconds, to the second where it gives whole seconds only. Only a write clearly
    before the start is an earlier run's, and only one clearly after it is this run's; in
    between it could be either (a re-run started a moment after the last run's completion
    line, or a fast job that wrote its own before this watch first looked).
    """
    margin = run_start_slack(source, slack)
    if written + resolution <= started - margin:
        return "before"
    if written >= started + (margin if after is None else after):
        return "after"
    return "unclear"


def written_by(st: FileTimes, at: float | None) -> bool:
    """Whether the log was last written by ``at``: the whole span its mtime allows (a second
    where stat gives whole seconds) before it, to the kernel's tick."""
    return at is not None and st.written + st.resolution <= at + FILE_TIME_TICK


# --------------------------------------------------------------------------- who opened it

#: fdinfo's ``flags`` (octal): the access mode, and appending.
_ACCESS, _WRITE_ONLY, _APPEND = 0o3, 0o1, 0o2000
#: Two starts read from /proc in one probe against the same boot clock, to the ms each:
#: the same tick reads the same, give or take the rounding.
_SAME_PROBE_STARTS = 0.002


class Holder(NamedTuple):
    """A process the kernel shows holding the log open (/proc/PID/fd, /proc/PID/fdinfo)."""

    pid: int
    fd: int
    flags: int  # the open file description's flags, as fdinfo prints them (octal, parsed)
    started: float | None  # when the process began, on the host's clock (None: not read)
    ppid: int | None = None  # its parent
    #: Whether it has waited for a child that ended (its children's minor faults, /proc/PID/stat
    #: field 11: every program that runs makes some); None: not read.
    reaped: bool | None = None
    #: The CPU its ended children used, in clock ticks (/proc/PID/stat cutime + cstime; None:
    #: not read): 0 is less than a tick, less than any run of a job takes (`dirname`, `date`).
    children_ticks: int | None = None
    #: The description's offset (fdinfo ``pos``; None: not read): opened write-only, not
    #: appending, it wrote every byte before it since it was opened.
    pos: int | None = None

    @property
    def writes(self) -> bool:
        return self.flags & _ACCESS != 0  # write-only or read-write

    @property
    def began_the_file(self) -> bool:
        """Opened write-only, not appending: the shell's ``> log``, ``tee log``, Python's
        ``open(log, "w")``. Such an open truncates the file (or writes it from its first byte
        on): every byte in it was written after the open."""
        return self.flags & _ACCESS == _WRITE_ONLY and not self.flags & _APPEND


def opened_in_run(
    holders: Iterable[Holder],
    starts: Mapping[int, float],
    parents: Mapping[int, int] | None = None,
    size: int | None = None,
) -> bool:
    """Whether the kernel shows the log begun by this run (``starts``: this run's live
    processes and when each began, read in the same probe as ``holders``; ``parents``: each
    one's parent). With ``size`` (the log's, read just before the holders): whether it shows
    every byte of it this run's, the description that began it at that offset or past it.

    A log born within /proc's start precision of the job's process may be the job's own
    (``nohup job > log`` opens it between the fork and the exec) or an earlier run's, a whole
    run of a few ms begun and ended before this one (fuzzer seed 1300210): the two times
    cannot tell them apart. The kernel can: a process of this run, or one begun with it or
    after it (``job | tee log``), holding the log on a description that began the file (see
    :attr:`Holder.began_the_file`), and no process begun before the run, nor the parent of one
    of its processes (begun in the same tick), holding it to write (a wrapper that opened the
    log once for several runs, ``sh -c "old; job" > log``, hands every run the same
    description) — unless that parent began the file and ran no run before this run's
    process (:func:`_ran_no_run`). An appending description
    (``>> log``, Python's ``logging``) says nothing of what was there before it: not that.
    """
    if not starts:
        return False
    first = min(starts.values()) - _SAME_PROBE_STARTS
    children = {parent: pid for pid, parent in (parents or {}).items() if pid in starts}
    wrappers = set(children) - set(starts)
    began, before = False, False
    for h in holders:
        started = starts.get(h.pid, h.started)
        whole = size is None or (h.pos is not None and h.pos >= size)
        if h.pid in wrappers and h.began_the_file and _ran_no_run(h, children[h.pid]):
            # A wrapper that began the log and ran no run before this run's process (`bash
            # run.sh > log`, run.sh running the job).
            began = began or whole
        elif started is None or started < first or h.pid in wrappers:
            # Not known to have begun with the run: a writer may hold what it opened for an
            # earlier one (a reader, `tail -f log`, writes nothing).
            before = before or h.writes
        elif h.began_the_file:
            began = began or whole
    return began and not before


def _ran_no_run(wrapper: Holder, child: int) -> bool:
    """Whether a wrapper ran no earlier run before its child ``child`` (this run's process):
    it forked the child as its very next PID (PIDs are handed out in order: no process at all
    between), or no child of it ended yet, or those that ended used less than a clock tick of
    CPU between them — a `cd "$(dirname "$0")"`, a `date` (user 39: such a wrapper watched late
    stayed unknown for good). A run of a job (its interpreter's start alone) takes more."""
    return child == wrapper.pid + 1 or wrapper.reaped is False or wrapper.children_ticks == 0
