"""What a person can do so that a run can be told, less what the watch already did.

Every "cannot be told" a person reads ends with what would tell it; a fix the watch already
had (a --since it was given, a launch, the job watched from before its end) is never offered
again. Pure: the signals and the verdict both word their advice with it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Fix", "Had", "advice"]


@dataclass(frozen=True)
class Had:
    """What the watch had of its run: each a fix it needs no telling of."""

    since: bool = False  # the run's start, given (--since)
    #: The watch takes no run start (``serve``: its stage files have none): advice to give
    #: one is advice its reader cannot act on there (user s16).
    takes_no_since: bool = False
    launched: bool = False  # crosscheck launched the job (its start is exact, its exit recorded)
    seen_alive: bool = False  # this watch saw the job's process at work
    end_seen: bool = False  # ... and found it gone later: it watched the job end
    #: This watch looked before the job's log existed (or was born): it was there before the
    #: job ended, and only a check inside the job's life was missing.
    before_job: bool = False
    #: The log was born about when this watch began (too near to tell which came first): the
    #: job began with the watch, and its log was begun afresh then.
    born_with_watch: bool = False
    #: The run is at work in this watch's view: what it writes from now on is read as written.
    run_alive: bool = False


class Fix(enum.Enum):
    """One thing a person can do so that a run can be told."""

    SINCE = "give the run's start with --since TIME|DURATION"
    WATCH_EARLIER = "watch the job from before it ends"
    #: The log's: a watch that saw the job at work only once its completion line was written
    #: did watch it before it ended, and could still not tell whose the line is (user 39).
    WATCH_BEFORE_LINE = "watch the job from before it writes its completion line"
    #: ``serve`` looks at a stage finished for ten intervals ten times less often
    #: (``FINISHED_SLOWDOWN``): a re-run shorter than that came and went unseen, the interval
    #: already short (user s14).
    CHECK_OFTEN = (
        "check more often than the job runs (a policy.interval shorter than its life; serve looks"
        " at a stage finished for ten intervals ten times less often, so a re-run begun then"
        " must outlive ten intervals)"
    )
    LAUNCH = "launch the job through crosscheck (a launch section: its exit status is recorded)"
    LINE_LAST = "have the job write its completion line last (after closing its outputs)"
    #: Text after the line that no matched process wrote: a launcher or wrapper that logs after
    #: its workers (torchrun's agent, a shell script) is the job, and unmatched (user s16).
    MATCH_WRITER = (
        "match every process that writes the log with process.match (a launcher or wrapper that"
        " logs after its workers, as torchrun's agent or a shell script does)"
    )
    #: Text after the line, the line's writers known (matched, seen at work before it) but
    #: their end not seen: a watch restarted, or paused, across the end missed what tells
    #: their own text from a later run's (user s17).
    SEE_END = (
        "keep one watch running across the job's end (a watch stopped, restarted or paused then"
        " does not see the end, and text written before it is then no known writer's)"
    )
    ADD_SIGNAL = "add a log section with a completion line, or an outputs section"
    OWN_PATHS = (
        "give each run of the job its own log and output paths, or start no other run of it"
        " until this run's gate has ended"
    )
    FROM_LAUNCH = "watch a launched job from its launch (the gate or wait that launched it)"
    LOCAL_LOG = "keep the log on the host's own file system"
    #: A probe that cannot see the job's processes (another PID namespace, hidepid).
    SEE_PROCESSES = (
        "run the probe where it sees the job's processes (as root or the job's user, in the"
        " host's PID namespace)"
    )
    #: ... or let the launch record decide alone, knowing what it leaves unlooked-for.
    RECORD_ALONE = (
        "leave the process section out of the stage (the recorded exit then decides alone: a"
        " process the job leaves at work is not looked for)"
    )
    #: A log each run begins afresh (`> log`, `tee log`, logging's `filemode="w"`: the kernel
    #: shows the run's description began it, which an appending one never does).
    #: Which process began the log is read from its /proc/PID/fd, closed to other users.
    PROBE_AS_OWNER = (
        "run the probe as the job's user or as root (which process began the log is read from"
        " /proc/PID/fd, closed to other users)"
    )
    FRESH_LOG = (
        "have each run begin its log afresh (`job > log`, not `>> log`; `tee log`, not `tee -a`;"
        ' Python\'s logging with `filemode="w"`)'
    )


def _needless(fix: Fix, had: Had) -> bool:
    """Whether the watch already did what ``fix`` asks."""
    if fix is Fix.SINCE:
        return had.since or had.launched or had.takes_no_since  # a launch is an exact start already
    if fix in (Fix.WATCH_EARLIER, Fix.WATCH_BEFORE_LINE):
        return had.seen_alive or had.end_seen or had.before_job or had.born_with_watch
    if fix is Fix.FRESH_LOG:
        return had.born_with_watch  # born then: begun afresh, as the fix asks
    if fix is Fix.CHECK_OFTEN:
        # Offered to a watch that was there before the job and never saw it at work: what it
        # lacked is a check inside the job's life. Anywhere else, watching earlier is the fix.
        return not had.before_job or had.seen_alive or had.end_seen
    if fix is Fix.LAUNCH:
        return had.launched
    if fix is Fix.FROM_LAUNCH:
        return not had.launched  # advice for launched runs only
    return False


def advice(fixes: Iterable[Fix], had: Had) -> str:
    """The fixes, less those the watch already had, as one clause (``"A, B or C"``).

    Empty where every one was done already: the caller then has nothing to suggest, and says
    so rather than repeat what the user did.
    """
    left = [f.value for f in dict.fromkeys(fixes) if not _needless(f, had)]
    if len(left) <= 1:
        return "".join(left)
    return ", ".join(left[:-1]) + " or " + left[-1]
