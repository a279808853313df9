"""The log signal: this run's completion line, its errors, progress and staleness.

Read by seeking: ``stat`` and the last ``tail_bytes`` (a 10 GB log costs what a 10 KB one
does), bounded by the size ``stat`` saw so offsets are exact; a log that grew since the last
check, from where that check left off (``resume_at``). tqdm's ``\\r`` rewrites are
split; a completion marker is a whole line ending in ``\\n``. A completion line counts only
when this run wrote it: the memory keeps where the run's bytes begin (``run_from``, see
``sensors._run.run``) and the last bytes before the previous end, so a log replaced, truncated or
rewritten in place (even regrown past its old size) is seen. Staleness is the monitored host's
``now - mtime``, both read in one probe (clocks of two hosts differ).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple, TypedDict

from pydantic import Field

from sensors._base.model import Reading, Says
from sensors._base.probe import (
    ESCAPE,
    STAT_FORMAT,
    Meta,
    fstype_request,
    helper,
    holders_request,
    keeps_times,
    local_fs,
    own_clock,
    settled,
    shareable,
    shared_stats,
    stat_request,
    unchanged,
)
from sensors._base.regex import UserRegex, compile_user_regex, required_literal
from sensors._base.schema import AbsPath, Regex, Section
from sensors._base.text import redact
from sensors._base.tolerances import (
    ATTRIBUTE_CACHE_GRACE,
    FILE_CLOCK_TOLERANCE,
    FILE_TIME_TICK,
    JOB_BEFORE_WATCH,
    MTIME_SET_BACK,
    PROC_START_TICKS,
    PROC_START_TICKS_WRITER,
    PROC_START_WHOLE_SECONDS,
    WHOLE_SECOND,
)
from sensors._run.advice import Fix, Had, advice
from sensors._run.binding import (
    Holder,
    file_time_ahead,
    last_write,
    opened_in_run,
    run_start_slack,
    time_impossible,
    written_by,
)
from sensors._run.run import FINGERPRINT_BYTES, Run
from sensors._signals.base import CheckFacts, JobView, LastWord, ProbeInputs, Signal, evolve
from sensors._signals.procfs import elapsed_since, start_lead, start_precision


class LogSpec(Section):
    path: AbsPath
    complete: Regex = Field(description="regex that a whole line must match")
    error: Regex | None = None
    progress: Regex | None = Field(None, description="regex; named groups done and total are reported")
    tail_bytes: int = Field(
        256 * 1024, ge=4096, le=64 * 1024 * 1024, description="how much of the end is read"
    )


@dataclass(frozen=True)
class LogMemory:
    """The log as the last check left it, and where this run's bytes begin in it.

    ``run_from`` is the offset in ``inode`` where the run's bytes begin (None: not bound
    yet). Bytes before it are an earlier run's, or, when ``before_uncertain``, of a run
    that cannot be told (the log was written both before and after the run began, its last
    write was too close to the run's start to tell (``last_write_unclear``), or no run start
    is known at all).
    """

    inode: int | None = None
    size: int = 0
    fingerprint: str | None = None  # hex of the bytes just before `size`
    absent: bool = False  # no log at an earlier check: a file that appears is this run's
    run_from: int | None = None
    before_uncertain: bool = False
    last_write_unclear: bool = False  # the last write before run_from: too near the start
    bound_by: str | None = None
    bound_at: float | None = None
    # The latest the read that bound it can have been: the probe reads the log after its
    # clock (``bound_at``) and before its clock's second read (``Meta.now_end``); a run
    # begun in between is not "begun after this watch first read the log" (fuzzer seed
    # 6000214: a fast run begun, written and gone inside one slow probe).
    bound_read_by: float | None = None
    # The log's last write as the read that bound it found it (its mtime and how exact that
    # is), where the host's clock stamped it and it was not set back: a start learnt later
    # that is clearly after it makes every byte then there older than the run, however late
    # the read (a run begun inside that probe, after its read, that then touched the log, took
    # the last run's line for its own: tests/test_adversary_44.py). None: not known so.
    bound_write: tuple[float, float] | None = None
    complete_line: str | None = None  # this run's completion line
    complete_end: int | None = None  # the offset just after it
    error_line: str | None = None
    earlier_complete: str | None = None  # a completion line before run_from
    # The first text after this run's completion line that may be a later run's (any text
    # when the stage has no progress pattern): the completion line is then not this run's
    # last word, and cannot be counted (a completion line followed by a later run's progress
    # line is an earlier run's outright: ``earlier_complete``).
    followed_by: str | None = None
    # A progress line among that text ("'line', then 'progress'"): a later run's progress
    # or the line's writers' own last update; like any text after the line, only the
    # processes that can have written it tell (``_whose``), else it cannot be told.
    later_run: str | None = None
    clock_ahead: bool = False  # the log's file times were ahead of the host's clock at binding
    mtime_set_back: bool = False  # its mtime was set back at binding (its ctime clearly later)
    # The last check that found no file at the path (or, once a file was replaced or rewritten
    # after a check, the first that read the one before): a write there after it is stamped
    # after it. A file that appears dated clearly before it, with its ctime later (the mtime
    # set: cp -p, rsync -t, a checkpoint restored), holds bytes written elsewhere or earlier.
    absent_at: float | None = None
    # Who can have written this run's completion line, and when (see ``_whose``): the job's
    # PIDs that were alive before it was written; when it was written (its mtime while it was
    # the log's last bytes; None: not known); when this watch first found it; when this watch
    # last saw one of them alive with the line in the log (text after the line written by then
    # can be theirs; text written later cannot be told from a later run's: see ``_whose``).
    writers: tuple[int, ...] = ()
    writers_alive_at: float | None = None
    complete_at: float | None = None
    complete_seen_at: float | None = None
    # Where a completion line found to be an earlier run's ends (a process that began after
    # it was at work: ``_whose``), and that process: that line, and any before it, stays an
    # earlier run's once the later process is gone (its writers are not the later run's).
    demoted_end: int | None = None
    demoted_by: int | None = None
    # An earlier run's process (begun before this run's exact start) was alive at the last
    # check, and none of this run: a line found now is that run's (see _whose).
    earlier_alive: bool = False
    # An error line written by an earlier run's process (see ``read_log``): not this run's.
    earlier_error: str | None = None
    # The demoted line was written while only an earlier run's process was at work (that
    # pid): an earlier run's last word, not superseded by a later one.
    demoted_earlier: int | None = None
    # A process of this run alive when this watch first found the completion line, begun after
    # the log was born and not known to have begun before the line was written (when it was
    # written cannot be read: not the log's last line, or times not the host's): whether it is
    # a later run, begun after the line, cannot be told, for good (see ``_whose``).
    undatable_by: int | None = None
    # A launched run is over and a later run wrote here (why): its completion line followed by
    # a later run's progress, or a completion line written after the launched job's recorded
    # exit. For good: nothing read from now on is the launched run's word (see ``_launch_over``).
    superseded: str | None = None
    # The log (inode, size) at the first check that found the launched job's exit record: a
    # change after it is a later writer's, by this watch's own checks (no file time read).
    # ``foreign_clock``: the log's file times come from another clock than the host's (a file
    # server's), so they cannot be compared with the recorded exit.
    # On another host's file system, or where its times were seen to be impossible on the
    # host's clock (``foreign_clock``), they are not compared with the recorded exit, and the
    # client may show a size cached from before the exit for a while: the (inode, size) is
    # taken again until a check made that long after the exit (``exit_log_at``). ``over_at``:
    # the exit as recorded, or else the first check that found the launched job's wrapper
    # gone (killed with it: no record).
    exit_log: tuple[int, int] | None = None
    exit_log_at: float | None = None
    over_at: float | None = None
    foreign_clock: bool | None = None  # None: not read yet
    # The exit was already recorded when this watch first read the log, and its times are
    # another clock's: whether a later run wrote it since cannot be told, for good.
    exit_unclear: bool = False
    # What the last scan of the tail found besides the lines above, and the stat line that
    # identifies that tail (``sensors._base.probe.STAT_FORMAT``: inode, size, mtime and ctime to
    # the nanosecond, type): a log whose line is the same again is not read again (see
    # ``snippet``).
    scanned: str | None = None
    earlier_is_last: bool = False
    progress: Mapping[str, object] | None = None
    last_line: str = ""
    partial: bool = False
    # Where the last line at ``size`` begins (None: not known, e.g. a tail without a newline):
    # a log that grew is read from there, not its whole tail again (see ``resume_at``).
    line_start: int | None = None
    # The kernel showed, when the log was first bound, that this run began it: a process of
    # this run (or begun with it) held it on a description that began the file, and none begun
    # before the run held it to write (``sensors._run.binding.opened_in_run``). Then a log born
    # within /proc's precision of the job's start is the job's own.
    opened_in_run: bool = False
    # ... and that description had written up to the log's end when it was read (its offset
    # at the size or past it): every byte of the log is this run's, however old the file (a
    # re-run's `> log` truncates the last run's log and keeps its birth).
    opened_whole: bool = False
    # The log was born too near the run's start to tell which came first, and the kernel did
    # not show this run began it (see the end of ``_bind``): what ``before_uncertain`` then
    # rests on, said as it is (not "written before the run began").
    born_near_start: bool = False
    # The log born too near this watch's start to tell which came first, or after it (see
    # ``_bind``): the job began about when the watch did, its log begun afresh then; watching
    # earlier or beginning the log afresh is no advice to give. Words and advice only.
    born_near_watch: bool = False
    # Bound by the watch with no run start, the log was born at most JOB_BEFORE_WATCH before
    # this watch began and last written, as its first read found it, after it (its times, the
    # host's own clock, not set back): a job begun with the watch, its writer alive after the
    # watch began. A completion line ending it, unchanged since, is the last word of the run
    # at work when the watch began: the watch's run (the first check would have found its
    # process alive, had it come a moment sooner).
    written_after_watch: bool = False
    # The log was born after this watch began (its birth on the host's own clock, not set
    # back, not ahead), whatever bound the run (a --since too): the watch was there before the
    # job's log. Advice only: a watch there before the job is not told to watch earlier.
    born_after_watch: bool = False
    # Some holder's description began the file (`> log`), whoever's it was: a log each
    # run begins afresh already (a wrapper's, begun before the run), no advice to begin one.
    fresh_seen: bool = False
    # The job was alive when its holders were read, and none of its processes was shown
    # holding the log, by a probe that is not root: another user's /proc/PID/fd is closed to
    # it, so a `> log` the job began cannot be shown (see ``_why_unbegun``).
    holders_unseen: bool = False
    # The job was alive when the log's holders were read (its first read): a log it began
    # afresh would have shown (``fresh_seen``). Read with none alive (a watch begun after the
    # job's end), nothing could: to begin the log afresh would not tell, and the run may have
    # (user s15: `python job.py > job.log`, over before the first look, was told to).
    holders_read_live: bool = False


class LogEvidence(TypedDict, total=False):
    """The log reading's evidence (the JSON the CLI prints, key for key)."""

    path: str
    absent: bool  # the file is not there (an unknown reading)
    last_line: str
    age_seconds: float
    size: int
    inode: int
    mtime: int
    complete_line: str | None
    error_line: str | None
    progress: dict[str, object] | None
    partial_last_line: bool
    run_from_offset: int | None  # where this run's bytes begin in the file
    run_bound_by: str | None  # what told it: launch, since, process or watch
    born_after_watch: bool  # the log was born after this watch began (it was there before the job)
    earlier_complete_line: str  # a completion line before the run's first byte, or one a later run followed
    followed_by: str  # text after the completion line that may be a later run's
    # Unknown only for whose run a completion line is (the log itself was read): a
    # supervisor's word that this run is at work stands over it (rule S4).
    line_doubt: bool
    line_fix: str  # with line_doubt: what would have told whose the line is ("" : nothing known)
    complete_writers: list[int]  # the job's PIDs alive before the completion line was written
    # When its writers wrote the completion line (host clock; the kernel stamps a write no
    # later than it came): its mtime while it was the log's last bytes. Absent: not known so.
    complete_at: float
    superseded_by_pid: int  # a process of this run that began after the completion line
    undatable_by: int  # a live process of this run that may have begun after the completion line
    launch_superseded: str  # words written after the launched run's last: a later run's
    exit_unclear: (
        bool  # a launched run's exit recorded before the first read, the log's times another clock's
    )
    file_time_ahead_seconds: float  # the log's mtime/birth this far ahead of the host's clock
    written_by: float  # its last write was by then (its file clock: the mtime, or the ctime where set back)
    # Its last write came then or later (the host's clock: its mtime, where the host's own
    # clock stamps the file and the mtime was not set back; the kernel stamps a write no later
    # than it came). Absent: not known so.
    written_at: float
    replaced: bool
    rotated: bool
    truncated: bool
    rewritten: bool
    # An error line this read is the first to find, that text after it cleared (progress to a
    # new count, a completion line): the job went on past it, as one job writes its log. In a
    # log the nodes share that text may be another rank's (``sensors._verdict.across``). Only
    # at the read that first found it: a later read of the same bytes does not repeat it.
    survived_error: str


# --------------------------------------------------------------------------- probe snippet


def snippet(spec: LogSpec, memory: LogMemory, probe: ProbeInputs) -> list[str]:
    """stat, the tail (bounded by the size stat saw), and the bytes before the last check's end.

    Only a regular file is read: a FIFO would block ``tail`` and a device never ends. The
    bytes before the previous end show a file rewritten in place even when it regrew past
    its old size; they are read apart only when the tail does not hold them. A log the
    probe's shared stat finds as the last scan left it (``memory.scanned``: the same inode,
    size, mtime and ctime to the nanosecond) is not read at all: that scan stands.
    """
    scanned = memory.scanned if memory.run_from is not None and shareable(spec.path) else None
    return list(
        _snippet_lines(
            spec.path,
            int(spec.tail_bytes),
            memory.inode,
            memory.size,
            scanned,
            resume_at(memory),
            memory.foreign_clock is None,
        )
    )


def resume_at(memory: LogMemory) -> int | None:
    """Where a read of the log begins once it grew past the last check's end (None: its
    whole tail is read).

    A log that grew is read from the start of its last line at the last check (a line that
    was partial then is read whole now), and never after the last bytes before that end
    (so the tail holds them: a rewrite in place still shows). One byte earlier still: the
    scan drops a tail's first line as partial, and when that byte is a newline the dropped
    line is empty. What was before is the last scan's, kept in the memory (its completion,
    error and progress lines): each check costs what was appended, not the whole tail.
    """
    if memory.inode is None or memory.size <= 0 or memory.line_start is None or memory.run_from is None:
        return None
    start = min(memory.line_start, memory.size - min(memory.size, FINGERPRINT_BYTES))
    return max(start - 1, 0)


# The stat and the read, the same for every log: a sh function the probe defines once; each
# stage calls it with its own words (path, tail bytes, and what the last check left: inode,
# size, where a read of the grown file begins, where the bytes before its end begin and how
# many; "-" where nothing is known). The path is quoted; the rest are numbers made here.
_READ_LOG = helper(
    "__cc_log",
    [
        "__lp=$1 __lt=$2 __li=$3 __lz=$4 __lr=$5 __lq=$6 __ln=$7",
        "sec log_stat",
        # %.9Y: the mtime to the nanosecond where stat can (a stat without precisions
        # prints the whole seconds again); read in _parse_log_stat.
        f"st=$(stat -L -c '{STAT_FORMAT}' -- \"$__lp\" 2>&1 | head -c 4096); printf '%s\\n' \"$st\"",
        "set -f; set -- $st; set +f",
        'if [ "$7" = regular ] && isnum "$1" && isnum "$2"; then',
        # f: the offset the read begins at (0-based): the last tail_bytes, or where the last
        # check left off when the same file grew since (see resume_at).
        "  f=$(($2 > $__lt ? $2 - $__lt : 0))",
        '  if [ "$__lr" != - ] && [ "$1" = "$__li" ] && [ "$2" -gt "$__lz" ] && [ "$__lr" -gt "$f" ]; then',
        "    f=$__lr",
        "  fi",
        "  sec log_from",
        '  echo "$f"',
        "  sec log_tail",
        # Nothing to read is not read: a file of /proc (/proc/kmsg) or of a FUSE mount says it
        # is empty and may block its reader for ever (the tail that blocked a root probe, and
        # with it every stage of its host, issue 34).
        # The log's bytes are the job's text: escaped (ESCAPE), never able to start a section.
        f'  [ "$2" -le "$f" ] || tail -c +$((f + 1)) -- "$__lp" 2>/dev/null | head -c $(($2 - f)) | {ESCAPE}',
        # The bytes before the last end, read apart only when the tail begins after them
        # (see _previous_bytes).
        '  if [ "$__ln" != - ] && [ "$1" = "$__li" ] && [ "$2" -ge "$__lz" ] && [ "$f" -gt "$__lq" ]; then',
        "    sec log_prev",
        f'    tail -c +$((__lq + 1)) -- "$__lp" 2>/dev/null | head -c "$__ln" | {ESCAPE}',
        "  fi",
        "fi",
    ],
)


#: The most holders read back, a descriptor each: a job's ranks and their loader workers,
#: each holding the log on fd 1 and 2, with room (a list cut shows nothing).
_HOLDERS_CAP = 256


# Which processes hold the log open, on any descriptor (a wrapper may hold it on fd 4 for
# every run it starts: `exec 4>log; old >&4; job >&4`, or a driver's `open(log, "w")` passed
# as a child's stdout), with the description's flags, the process's parent and its start in
# ticks (fields 4 and 22 of /proc/PID/stat, counted after the command's closing parenthesis:
# the command is the job's text). Read when the log is first bound (see opened_in_run); the
# links come from the probe's one holders scan (``holders_request``: one find for every log
# first seen in it), oldest PIDs first (a wrapper is begun before its runs). Past the cap a
# line `cut` says the list is not whole, and a list not whole shows nothing (a wrapper may be
# in what was left out). A descriptor's link is the file's path in its holder's own mount
# namespace (a container's, any user's `unshare -rm`): its fdinfo's inode, where the kernel
# shows one, tells the log from another file at that path. A find without -lname (BusyBox's)
# finds none: the log is then not shown begun by the run.
_READ_HOLDERS = helper(
    "__cc_holders",
    [
        "sec log_holders",
        f'holders_of "$1" {_HOLDERS_CAP}',
        '[ "$__hl" != - ] || return 0',
        "set -f; set -- $__hl; set +f",
        f'if [ "$#" -gt {_HOLDERS_CAP} ]; then echo cut; return 0; fi',
        # Each descriptor's fdinfo and its process's stat, read by one awk for them all.
        "__hf=; for __x; do case $__x in /proc/*/fd/*)"
        ' __hf="$__hf ${__x%/fd/*}/fdinfo/${__x##*/} ${__x%/fd/*}/stat";; esac; done',
        '[ -n "$__hf" ] || return 0',
        "awk '",
        '  { n = split(FILENAME, a, "/") }',
        '  a[4] == "fdinfo" { if ($1 == "flags:" && $2 ~ /^[0-7]+$/) print "f", a[3], a[5], $2;'
        ' else if ($1 == "pos:" && $2 ~ /^[0-9]+$/) print "p", a[3], a[5], $2;'
        ' else if ($1 == "ino:" && $2 ~ /^[0-9]+$/) print "i", a[3], a[5], $2; next }',
        # A command holding ") " or a newline cannot make a line of numbers (it is 15 bytes
        # at most); what is printed is digits only, never the command.
        '  { t = $0; if (sub(/.*\\) /, "", t) && split(t, b, " ") >= 20 && b[2] ~ /^[0-9]+$/'
        " && b[9] ~ /^[0-9]+$/ && b[20] ~ /^[0-9]+$/ && b[14] b[15] ~ /^[0-9]+$/)"
        ' print "s", a[3], b[2], b[20], b[9], b[14] + b[15] }',
        # A process gone meanwhile fails awk (mawk stops at it): no `whole`, nothing shown.
        "' $__hf 2>/dev/null && echo whole",
    ],
)


def holders_lines(path: str) -> list[str]:
    """The snippet lines that read which processes hold ``path`` (section ``log_holders``)."""
    return [_READ_HOLDERS, holders_request(path), f"__cc_holders {shlex.quote(path)}"]


# A stage's snippet is the same check after check while its log stands still (and a batch
# builds one per stage): built once per (path, inode, size, stamp, resume offset).
@functools.lru_cache(maxsize=16384)
def _snippet_lines(
    path: str,
    t: int,
    inode: int | None,
    size: int,
    scanned: str | None,
    resume: int | None,
    clock_unknown: bool = True,
) -> tuple[str, ...]:
    known = inode is not None
    n = min(size, FINGERPRINT_BYTES) if known and size > 0 else None
    words = [
        shlex.quote(path),
        str(int(t)),
        str(int(inode)) if inode is not None else "-",
        str(int(size)),
        str(int(resume)) if known and resume is not None else "-",
        str(int(size - n)) if n is not None else "-",
        str(int(n)) if n is not None else "-",
    ]
    call = "__cc_log " + " ".join(words)
    if not known:
        # First bound at this check: who holds it open tells whether this run began it.
        call += f"\n__cc_holders {shlex.quote(path)}"
    if not known or clock_unknown:
        # Not bound yet (or bound by a launch, before any read): whose clock its file times
        # come from decides how exact they are, and whether they can be compared with the
        # host's (a launched job's recorded exit).
        call += f"\nsec log_fs\n{fstype_request(shlex.quote(path))}"
    if scanned is None:
        # In the shared stat all the same: its file system says whether a stamp of it may be
        # kept (sensors._base.probe.keeps_times).
        helpers = (_READ_LOG, _READ_HOLDERS, holders_request(path)) if not known else (_READ_LOG,)
        return (*helpers, stat_request(path), call) if shareable(path) else (*helpers, call)
    return (
        _READ_LOG,
        stat_request(path),
        f"if {unchanged(path, scanned)}; then sec log_same; else",
        f"  {call}",
        "fi",
    )


def _previous_bytes(memory: LogMemory, st: _LogStat, tail: bytes | None, prev: bytes | None) -> bytes | None:
    """The bytes before the last check's end as they are now: read apart, or in the tail."""
    if prev is not None or tail is None or memory.inode != st.inode or st.size < memory.size:
        return prev
    n = min(memory.size, FINGERPRINT_BYTES)
    tail_start = st.size - len(tail)
    if tail_start > memory.size - n:
        return None
    return tail[memory.size - n - tail_start : memory.size - tail_start]


# --------------------------------------------------------------------------- reading


def seed_log_memory(run: Run) -> LogMemory | None:
    """The log memory a launch leaves: the file as it was just before the job started."""
    if run.source != "launch" or run.started_at is None:
        return None
    if run.log_inode is None:
        return LogMemory(
            absent=True, bound_by="launch", bound_at=run.started_at, bound_read_by=run.started_at
        )
    return LogMemory(
        inode=run.log_inode,
        size=run.log_offset or 0,
        fingerprint=run.log_fingerprint,
        run_from=run.log_offset or 0,
        bound_by="launch",
        bound_at=run.started_at,
        bound_read_by=run.started_at,
    )


class _LogStat(NamedTuple):
    """The log's stat line, parsed. A named tuple, as every per-check value here that
    nothing stores: one or more per stage per check, built several times faster than a
    frozen dataclass."""

    inode: int
    size: int
    mtime: int  # whole seconds (rounded down)
    birth: float  # a lower bound of the file's birth; 0: unknown (the filesystem keeps none)
    written: float  # the mtime as exactly as stat gave it
    resolution: float  # the last write happened in [written, written + resolution)
    stamp: str  # the line stat printed (see sensors._base.probe.STAT_FORMAT)
    changed: float = 0.0  # the ctime (0: not read): no tool can set it back

    @property
    def set_back(self) -> bool:
        """Whether the mtime was set back (its ctime clearly later): it does not date the
        last write then, which may be later (fuzzer seed 3001164: a log stamped 30 s behind
        read as last written before the --since, and the run's own line as an earlier run's)."""
        return self.changed > self.written + self.resolution + MTIME_SET_BACK

    def identity(self, now: float | None) -> str | None:
        """The stamp a later check can find the log unchanged by (None: not to be trusted)."""
        return self.stamp if self.resolution < 1 and settled(self.stamp, now) else None


def _parse_log_stat(raw: bytes, path: str) -> _LogStat | str:
    """The log's stat, or why it cannot be read (not there, not a regular file)."""
    text = raw.decode("utf-8", "replace").strip()
    parts = text.split()
    try:
        mtime = int(parts[2])
        written, resolution = _precise(parts[4], mtime)
        changed = _birth(parts[5]) if len(parts) > 5 else 0.0
        st = _LogStat(
            int(parts[0]), int(parts[1]), mtime, _birth(parts[3]), written, resolution, text, changed
        )
    except (ValueError, IndexError):
        why = text.splitlines()[-1:] or ["no answer"]
        return f"log unreadable: {why[0][:200]}"
    kind = " ".join(parts[6:])
    if not kind.startswith("regular"):
        # A FIFO would block the reader, a device never ends: neither is read.
        return f"log is not a regular file: {kind or 'unknown type'} ({path})"
    return st


@functools.lru_cache(maxsize=8192)
def _parsed_stamp(stamp: str, path: str) -> _LogStat | str:
    """A remembered stamp parsed (an idle log's is the same check after check)."""
    return _parse_log_stat(stamp.encode(), path)


def _precise(value: str, whole: int) -> tuple[float, float]:
    """The mtime with its fraction and how exact it is: to the kernel's tick when stat
    printed one that agrees with the whole seconds, else to the second."""
    try:
        seconds = float(value)
    except ValueError:
        return float(whole), 1.0
    if "." not in value or int(seconds) != whole:
        return float(whole), 1.0
    return seconds, FILE_TIME_TICK


def _birth(value: str) -> float:
    """The birth stat printed (to the nanosecond, or whole seconds), 0 when unknown."""
    try:
        return max(float(value), 0.0)
    except ValueError:
        return 0.0


def _holders(raw: bytes | None, meta: Meta, inode: int | None = None) -> list[Holder] | None:
    """The ``log_holders`` section (see ``_READ_HOLDERS``): ``f PID FD FLAGS`` a descriptor
    (``p PID FD POS`` its offset, ``i PID FD INO`` its file's inode: one not ``inode``, the
    log's, is another file, named by the log's path in its holder's own mount namespace),
    ``s PID PPID TICKS CMINFLT CTICKS`` its process (its waited-for children's minor faults,
    none where none was reaped yet, and their CPU ticks), then ``whole``; a line otherwise is
    nothing, a process read two ways (a command made to look like a stat line) has no start.
    Empty: nobody holds it. None: the list is not whole (past the cap, or a holder gone while
    it was read: a wrapper begun before may be in what was left out)."""
    lines = (raw or b"").decode("ascii", "replace").splitlines()
    if "cut" in lines or (lines and lines[-1] != "whole"):
        return None
    fds: list[tuple[int, int, int]] = []
    stats: dict[int, set[tuple[int, int, int, int]]] = {}
    pos: dict[tuple[int, int], int] = {}
    other: set[tuple[int, int]] = set()
    for line in lines:
        f = line.split()
        if not all(x.isdigit() for x in f[1:]):
            continue
        if f[:1] == ["f"] and len(f) == 4:
            fds.append((int(f[1]), int(f[2]), int(f[3], 8)))
        elif f[:1] == ["p"] and len(f) == 4:
            pos[int(f[1]), int(f[2])] = int(f[3])
        elif f[:1] == ["i"] and len(f) == 4 and inode is not None and int(f[3]) != inode:
            other.add((int(f[1]), int(f[2])))
        elif f[:1] == ["s"] and len(f) == 6:
            stats.setdefault(int(f[1]), set()).add((int(f[2]), int(f[3]), int(f[4]), int(f[5])))
    if len(fds) > _HOLDERS_CAP:
        return None
    out = []
    for pid, fd, flags in dict.fromkeys(fds):
        if (pid, fd) in other:
            continue
        ppid, started, reaped, cpu = None, None, None, None
        if len(seen := stats.get(pid, set())) == 1:
            ((ppid, ticks, faults, cpu),) = seen
            age, _ = elapsed_since(ticks, meta)
            started = None if age is None or meta.now is None else round(meta.now - age, 3)
            reaped = faults > 0
        out.append(Holder(pid, fd, flags, started, ppid, reaped, cpu, pos.get((pid, fd))))
    return out


def _bind(
    memory: LogMemory,
    st: _LogStat,
    run: Run | None,
    now: float,
    latest: float | None = None,
    own: bool = True,
    watch_began: float | None = None,
) -> LogMemory:
    """Where this run's bytes begin, decided at the first check that sees the file.

    ``watch_began``: when this watch began, on the host's clock, at the latest (see
    ``CheckFacts.watch_began``): with no other run start, a log born after it is this run's
    (a job started after ``wait`` was, and over before its first check).

    ``latest``: the host's clock once the probe had read every file (no file time can be
    later on this host's clock). ``own``: the file system's times come from this host's clock;
    on another (NFS, FUSE, ...) a server's clock a little ahead can make an earlier write look
    later, so "after the start" needs the tolerance on top of the start's own slack (a clock
    behind makes later writes look earlier: that errs to "not this run's").
    """
    # A file time the host's clock has not reached yet (a file server with its own clock).
    ahead = file_time_ahead(st, latest or now, own) is not None
    dated = own and not memory.foreign_clock and not st.set_back and not ahead
    # The log's birth less this watch's start (host clock), where both are known; None also
    # where the run is known to have begun before the watch (a --since, or its process seen,
    # earlier than the watch's start less its precision): a log born after the watch by such a
    # run (a stage-out `cp` at its end, a rotation) is no sign the watch was there before it
    # (the adversary's review of 92f38f8).
    with_watch = -PROC_START_TICKS - FILE_TIME_TICK
    run_before = (
        run is not None
        and run.source in ("since", "process", "supervisor")
        and run.started_at is not None
        and watch_began is not None
        and run.started_at - watch_began < with_watch
    )
    born = st.birth - watch_began if st.birth and watch_began is not None and not run_before else None
    base = replace(
        memory,
        inode=st.inode,
        bound_at=memory.bound_at or now,
        bound_read_by=memory.bound_read_by or max(now, latest or now),
        bound_write=(st.written, st.resolution) if dated else None,
        born_after_watch=memory.born_after_watch or (dated and born is not None and born >= 0),
        # Within the watch start's precision (its /proc start, the file time's lag) either way:
        # the job began with the watch, whatever bound the run (advice only, as below).
        born_near_watch=memory.born_near_watch or (dated and born is not None and born >= with_watch),
    )
    # Appeared (or replaced, rewritten) after a check, dated before that check, its ctime
    # later: not written there since, but put there with an older mtime (a checkpoint's log
    # restored by cp -p, rsync -t, shutil.copy2; a file written elsewhere, then moved). Not
    # wholly this run's: dated, as any file found at a first look, by its times alone.
    copied = (
        memory.absent
        and st.set_back
        and memory.absent_at is not None
        and st.written + st.resolution < memory.absent_at - (FILE_TIME_TICK if own else FILE_CLOCK_TOLERANCE)
    )
    if memory.absent and not copied:
        return replace(base, run_from=0, bound_by=memory.bound_by or "watch")
    if memory.opened_whole and not copied and run is not None and run.started_at is not None:
        # The kernel shows a description this run began the log with (`> log`: it truncates)
        # that had written every byte of it: all of it is this run's, however old the file's
        # birth (a re-run truncating the last run's log keeps its inode and birth).
        return replace(base, run_from=0, bound_by=run.source)
    if run is None or run.source not in ("since", "process", "supervisor") or run.started_at is None:
        if (
            watch_began is not None
            and st.birth
            and not st.set_back
            and own
            and not ahead
            and st.birth >= watch_began
        ):
            # Born after this watch began: the run it holds began after it too, and every
            # byte of it is that run's (the watch's own start is a run start).
            return replace(base, run_from=0, bound_by="watch")
        # No run start: only what is written while this watch looks is this run's. A log born
        # within the watch start's precision of it (a /proc start, the file time's lag) was
        # begun with the watch: `wait x.yaml & job > log` (notes/ml44.md, item 6).
        # Its times are the host's own clock's, as written (a birth, not set back, not ahead):
        # what both orderings against the watch's start below rest on.
        dated = bool(st.birth) and not st.set_back and own and not ahead
        near = (
            watch_began is not None and dated and st.birth >= watch_began - PROC_START_TICKS - FILE_TIME_TICK
        )
        # Its mtime lags the write by a tick at most (the kernel's coarse clock) and the
        # watch's start is its latest: an mtime at or after it is a write after it. A write,
        # not the line's: only a log born a moment before the watch (a job typed with it) is
        # a job's at work across its start. One born earlier was written long before the
        # watch, and a write after it says only that something wrote it then: an earlier
        # run's log touched, `cat old >> log`, `cp old log` in place (its birth kept) after the
        # watch began completed on that run's line (tests/test_adversary_s14.py).
        after_watch = (
            watch_began is not None
            and dated
            and st.written >= watch_began
            and st.birth >= watch_began - JOB_BEFORE_WATCH
        )
        return replace(
            base,
            run_from=st.size,
            before_uncertain=True,
            mtime_set_back=copied,
            bound_by="watch",
            born_near_watch=near,
            written_after_watch=after_watch,
        )
    after = run_start_slack(run.source, run.slack) + (0.0 if own else FILE_CLOCK_TOLERANCE)
    # An mtime set back (its ctime later) is no later than the last write it stands for: a
    # copy's source was written by then and the copy after it, a chmod, chown or rename
    # (which move the ctime too) left it true. Clearly after the run's start, it still says
    # the last write came after it; anything else it says nothing of, and a birth (a copy's
    # is the copy's moment) dates none of what the copy holds.
    set_back = (
        st.set_back
        and last_write(st.written, st.resolution, run.started_at, run.source, after, run.slack) != "after"
    )
    if ahead or set_back:
        # A file time the host's clock has not reached yet (a file server with its own
        # clock), or an mtime set back (its ctime later), says nothing of when the file was
        # written: not born after the run began, not written before it. What was there is of
        # a run that cannot be told.
        return replace(
            base,
            run_from=st.size,
            before_uncertain=True,
            last_write_unclear=True,
            clock_ahead=ahead,
            mtime_set_back=not ahead,
            bound_by=run.source,
        )
    if st.birth and not st.set_back and st.birth >= run.started_at + after:
        # Born after the run began: all of it is this run's. The birth is never later than
        # the truth (whole seconds rounded down, or the kernel's coarse clock, which lags).
        return replace(base, run_from=0, bound_by=run.source)
    if (
        st.birth
        and not st.set_back
        and own
        and run.source == "process"
        and memory.opened_in_run
        and run.slack is not None
        and (lead := run.lead if run.lead is not None else run.slack) < PROC_START_WHOLE_SECONDS
        and st.birth >= run.started_at - lead - FILE_TIME_TICK
    ):
        # Born within the start's own precision of it (`nohup job > log` opens the log
        # between the fork and the exec, a millisecond after the start), and the kernel shows
        # this run began it (``opened_in_run``: times this close also fit a whole earlier run
        # of a few ms, fuzzer seed 1300210): the job's own log.
        # The start read may be late by /proc/uptime's rounding only (however slow `date`
        # was: that widens the other side), the birth early by the coarse clock's lag.
        # Another history fits only with a second run at work beside this one, writing the
        # same log: no history a watch of one job can tell.
        return replace(base, run_from=0, bound_by=run.source)
    when = last_write(st.written, st.resolution, run.started_at, run.source, after, run.slack)
    return replace(
        base,
        run_from=st.size,
        before_uncertain=when != "before",
        last_write_unclear=when == "unclear",
        # Born within the start's precision of it, and the kernel did not show this run began
        # it (``nohup job >> log`` on a new log: an appending description never does): an
        # earlier run may have written it first, not "written before the run began".
        born_near_start=bool(st.birth) and own and st.birth >= run.started_at - after - FILE_TIME_TICK,
        bound_by=run.source,
    )


def _written_after_start(
    memory: LogMemory, st: _LogStat, started: float, source: str, slack: float | None = None
) -> bool:
    """Whether the log, as it was when this watch first read it, was last written clearly
    after the run began. Bound with a run start, the binding decided it (``last_write_unclear``
    is not set then); bound before any start was known (``watch``), the start known now decides
    it, on the host's clock only."""
    if memory.bound_by != "watch":
        return True
    if memory.foreign_clock or memory.clock_ahead:
        return False
    return last_write(st.written, st.resolution, started, source, None, slack) == "after"


def _continuity(memory: LogMemory, st: _LogStat, prev: bytes | None, unchanged: bool) -> str | None:
    """How the file changed other than by appending since the last check, if it did."""
    if memory.inode is None or unchanged:
        return None
    if st.inode != memory.inode:
        return "replaced"
    if st.size < memory.size:
        return "truncated"
    if memory.size > 0 and (prev is None or prev.hex() != (memory.fingerprint or "")):
        return "rewritten"
    return None


#: What a launched run learnt of its end, and whose clock the file's times come from: they
#: hold whatever happens to the file after (a log rewritten after the launched job was over
#: is still written after it).
_KEPT_ACROSS_REWRITES = ("superseded", "exit_log", "exit_log_at", "over_at", "exit_unclear", "foreign_clock")


def _bound(
    memory: LogMemory,
    st: _LogStat,
    prev: bytes | None,
    run: Run | None,
    now: float,
    *,
    unchanged: bool = False,
    latest: float | None = None,
    own: bool = True,
    watch_began: float | None = None,
) -> tuple[LogMemory, str | None]:
    """The memory with this run's first byte known, and how the file changed, if it did
    (``unchanged``: the same stamp as at the last scan, see ``snippet``)."""
    change = _continuity(memory, st, prev, unchanged)
    if change is not None:
        # Rewritten after a check this watch made: everything in it now is this run's
        # (when bound), and nothing remembered of the old content holds.
        was_bound = memory.run_from is not None
        memory = LogMemory(
            absent=True,
            absent_at=memory.bound_at,
            bound_by=memory.bound_by if was_bound else None,
            bound_at=memory.bound_at,
            bound_read_by=memory.bound_read_by,
            **{name: getattr(memory, name) for name in _KEPT_ACROSS_REWRITES},
        )
    if memory.run_from is None:
        memory = replace(
            _bind(memory, st, run, now, latest, own, watch_began),
            foreign_clock=bool(memory.foreign_clock) or not own,
        )
    elif (
        memory.before_uncertain
        and run is not None
        and run.started_at
        and (
            (
                memory.bound_read_by
                and run.started_at >= memory.bound_read_by + run_start_slack(run.source, run.slack)
            )
            or (
                memory.bound_write is not None
                and last_write(*memory.bound_write, run.started_at, run.source, None, run.slack) == "before"
            )
        )
    ):
        # The run began after this watch first read the log: what was there is older. A
        # start read from /proc is known to a clock tick and rounded: one found alive at the
        # check that bound the log can read a few ms after it, and did not begin after it.
        # "After the read" is after the latest it can have been (``bound_read_by``), not
        # after the probe's clock read before it. (A memory stored before that field was
        # kept has none: it never rules so.) Or the run began clearly after the log's last
        # write as that read found it (``bound_write``): the start binding would have ruled.
        memory = replace(memory, before_uncertain=False, last_write_unclear=False)
    return memory, change


def _completion(
    scan: _LogScan, memory: LogMemory, st: _LogStat, run: Run | None
) -> tuple[str | None, int | None, bool]:
    """This run's completion line and where it ends; True when it is the earlier-looking
    line accepted as the last line of a log written since the run began."""
    if (
        scan.complete_line is None
        and scan.earlier_complete is not None
        and memory.before_uncertain
        and not memory.last_write_unclear
        and scan.earlier_is_last
        and scan.followed_by is None
        and memory.run_from is not None
        and st.size >= memory.run_from
        and (
            (
                run is not None
                and run.started_at is not None
                and _written_after_start(memory, st, run.started_at, run.source, run.slack)
            )
            # No run start: the watch's own start is one (``written_after_watch``). A job
            # begun just before `wait` and over before its first check, its line the log's
            # last write after the watch began: unknown for good under load (make test).
            or ((run is None or run.started_at is None) and memory.written_after_watch)
        )
    ):
        # Written before this watch saw the file, when it was already written both before and
        # after the run began: it counts only as the last line of a log nothing has been
        # appended to since but its own end. A line this watch first read partial (begun
        # before its first byte, its newline after: the earlier line ends at the file's end)
        # was being written then: the file's last write before that read was this run's
        # (after its start), and the line's end was written while watched (fuzzer seed
        # 1900030: "all s", then "hards complete", stayed unknown for good).
        return scan.earlier_complete, st.size, True
    return scan.complete_line, scan.complete_end, False


def read_log(
    spec: LogSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: LogMemory | None,
    *,
    host: str,
    run: Run | None = None,
    job: JobView | None = None,
    exited: float | None = None,
    over: bool = False,
    exited_by: float | None = None,
    record_end: float | None = None,
    job_unread: bool = False,
    watch_began: float | None = None,
    asked_with: LogMemory | None = None,
    earlier_record: bool = False,
    takes_since: bool = True,
) -> tuple[Reading, LogMemory]:
    """Read the log signal: this run's completion and error lines, progress, staleness.

    A completion line counts only when this run wrote it (``run`` and the memory say where
    its bytes begin: see ``sensors._run.run``), and only as its run's last word (``job``: the
    process signal's view of the job, see ``_whose``; ``exited``: a launched job's recorded
    end (``exited_by``: the latest it can have been, the record's precision allowing);
    ``record_end``: the latest a supervisor's recorded end of this run can have been; ``over``:
    the launched job is over, recorded or not: see ``_launch_over``; ``job_unread``: the
    process signal is configured but could not read the processes at this check;
    ``asked_with``: the memory the probe's request was built from, where a new run set it
    aside at this check, see ``_rebound``; ``earlier_record``: the supervisor's latest record
    is of a run begun before the given start, see ``CheckFacts.supervised_earlier``;
    ``takes_since``: see ``CheckFacts.takes_since``).
    """
    memory = memory or LogMemory()
    rebound = None
    if asked_with is not None and memory.inode is None and memory.run_from is None:
        rebound = _rebound(spec, sections, meta, asked_with, host, run, watch_began)
        if rebound is not None:
            memory = rebound[0]
    looked = memory.foreign_clock is not None  # read at an earlier check (a launch seeds the rest)

    def unknown(why: str, kept: LogMemory = memory, *, absent: bool = False) -> tuple[Reading, LogMemory]:
        evidence: dict[str, object] = {"path": spec.path} if why != _MISSING else {}
        if absent:
            evidence["absent"] = True  # not there (yet): its appearing is the job's first sign
        return Reading("log", Says.UNKNOWN, why, evidence, meta.now, host), kept

    same = "log_same" in sections or rebound is not None
    stat_raw = sections.get("log_stat")
    if rebound is not None:
        # The new run's memory holds this very stat's scan (see _rebound): read as unchanged.
        st: _LogStat | str = rebound[1]
    elif same:
        # The shared stat printed the very line the last scan was of (see ``snippet``).
        stamp = shared_stats(sections.get("stats")).get(spec.path)
        if memory.scanned is None or stamp != memory.scanned:
            return unknown(_MISSING)  # not what this check asked for
        st = _parsed_stamp(stamp, spec.path)
    elif stat_raw is None:
        return unknown(_MISSING)
    else:
        st = _parse_log_stat(stat_raw, spec.path)
    if meta.now is None:
        return unknown(_MISSING)
    if isinstance(st, str):
        # A log that is not there yet: the file that appears later is this run's.
        absent = "No such file" in st and memory.inode is None
        # Said as it is: stat's "log unreadable: stat: cannot statx ..." read as a permission
        # problem to the person waiting for a job not started yet (notes/ml44.md, item 7).
        why = f"the log is not there yet (no such file: {spec.path})" if absent else st
        return unknown(
            why,
            replace(memory, absent=True, absent_at=meta.now) if absent else memory,
            absent="No such file" in st,
        )
    tail, resumed = None, False
    if not same:
        tail, tail_from = sections.get("log_tail"), _offset(sections.get("log_from"))
        if tail is None or tail_from is None:
            return unknown(_MISSING)
        window = max(st.size - spec.tail_bytes, 0)
        if tail_from < window or len(tail) != st.size - tail_from:
            return unknown(_CHANGED_WHILE_READ)
        resumed = tail_from > window
        if resumed and tail_from != resume_at(memory):
            # Read from where another memory left off (this one was set aside meanwhile: a
            # new run, and _rebound could not take over): what came before is not scanned in
            # this one. Read whole next time.
            return unknown(_READ_ELSEWHERE)
    prev = _previous_bytes(memory, st, tail, sections.get("log_prev"))
    if "log_fs" in sections:
        memory = replace(memory, foreign_clock=not own_clock(sections.get("log_fs")))
    if "log_holders" in sections and memory.run_from is None:
        live = job.live if job is not None else frozenset()
        starts = {pid: at for pid, at in (job.starts if job is not None else {}).items() if pid in live}
        parents = job.parents if job is not None else {}
        listed = _holders(sections["log_holders"], meta, st.inode)
        holders = listed or []  # not whole: shows nothing
        began = opened_in_run(holders, starts, parents)
        whole = began and opened_in_run(holders, starts, parents, size=st.size)
        fresh = any(h.began_the_file for h in holders)
        unseen = (
            listed is not None
            and bool(live)
            and meta.euid not in (None, 0)
            and not any(h.pid in live for h in holders)
        )
        memory = replace(
            memory,
            opened_in_run=began,
            opened_whole=whole,
            fresh_seen=fresh,
            holders_unseen=unseen,
            holders_read_live=bool(live),
        )
    # Whose clock stamps the file: the host's unless the file system says another's (not
    # read yet: taken as the host's, where fewer file times are believed).
    own_times = memory.foreign_clock is not True
    if not memory.foreign_clock and time_impossible(st, run, meta.now_end or meta.now, own_times):
        memory = replace(memory, foreign_clock=True)
    memory, change = _bound(
        memory,
        st,
        prev,
        run,
        meta.now,
        unchanged=same,
        latest=meta.now_end,
        own="log_fs" not in sections or own_clock(sections.get("log_fs")),
        watch_began=watch_began,
    )
    if resumed and change is not None:
        # Rewritten in place: the bytes before this read are new too, and were not read.
        rewritten = {"path": spec.path, change: True}
        why = f"the log was {change} since the last check; it is read whole at the next check"
        return Reading("log", Says.UNKNOWN, why, rewritten, meta.now, host), memory
    scan = _remembered_scan(memory) if same else _scan_log(spec, tail or b"", st, memory, resumed=resumed)
    complete_line, complete_end, accepted = _completion(scan, memory, st, run)
    # How far a start read from /proc may be off: a few clock ticks, or whole seconds where
    # /proc/uptime is virtualised (the process signal's slack, for the same reason).
    start_slack = start_precision(meta)
    word = _whose(
        memory,
        scan,
        st,
        complete_line,
        complete_end,
        job,
        run,
        meta.now,
        exited,
        job_unread,
        start_slack,
        found_by=meta.now_end,
        record_end=record_end,
        # How late those starts may read (the late side of start_slack: /proc/uptime's
        # rounding, however slow `date` was): a job born with its log is its writer.
        lead=start_lead(meta),
    )
    superseded = _launch_over(memory, scan, word, st, change, run, exited_by)
    if superseded is not None and word.complete_line is not None:
        word = word._replace(complete_line=None, complete_end=None, demoted=word.complete_line)
    if word.demoted is not None:
        scan = scan._replace(earlier_complete=word.demoted, followed_by=None)
    earlier_error = memory.earlier_error
    # An error line first found while only an earlier run's processes were at work (now and
    # at the last check: none of this run's, begun after its exact start) is that run's last
    # word, not this one's (a --since given while an old run was finishing).
    # So too where the supervisor's latest record is an earlier run's (begun before the
    # --since, at work or ended) and no process of this run is in view: no run of the job
    # began since (fuzzer seed 4000132: a container begun 1.5 s before the since wrote a
    # CUDA error after it and exited 1, and a watch with only a log failed the run it asked
    # for, not yet begun).
    no_own = job is None or (not job.live and not job.previous)
    only_earlier = no_own and (
        earlier_record or (job is not None and (memory.earlier_alive or bool(job.earlier)))
    )
    if scan.error_line is not None and scan.error_line != memory.error_line and only_earlier:
        earlier_error = scan.error_line
    if scan.error_line is not None and scan.error_line == earlier_error:
        scan = scan._replace(error_line=None)
    complete_line, complete_end = word.complete_line, word.complete_end
    still_writing = (
        complete_end is not None
        # Grown since the last check, past the line: still being written, unless the job is
        # found gone (what it wrote before its end is no sign of a writer at work).
        and (job is None or bool(job.live))
        and change is None
        and memory.inode is not None
        and memory.size > 0
        and st.size > memory.size
        and st.size > complete_end
    )
    # From the mtime as exactly as stat gave it: its whole second made a log up to 1 s older
    # than it was, in the words, the perf data and the stuck rule's quiet log (user s16).
    # A write after the probe's clock read and before its end (the file is read in between)
    # came during this probe: 0 s old, not a file time ahead of the clock (user s17: "the
    # log stamped 0s ahead of the host's clock", "-0s ago", for a log the job had just written).
    age = round(meta.now - st.written, 1)
    if age <= 0 and st.written <= (meta.now_end if meta.now_end is not None else meta.now):
        age = 0.0
    evidence = _evidence(spec, scan, st, memory, complete_line, age, change, accepted)
    ahead = file_time_ahead(st, meta.now_end or meta.now, memory.foreign_clock is not True)
    if ahead is not None:
        evidence["file_time_ahead_seconds"] = ahead
    if word.writers:
        evidence["complete_writers"] = list(word.writers[:16])
        if word.complete_at is not None:
            evidence["complete_at"] = word.complete_at
    if word.later_pid is not None:
        evidence["superseded_by_pid"] = word.later_pid
    if word.undatable_by is not None and complete_line is not None:
        # The line may be older than this live process of the run (a later run with no line
        # of its own): whose line it is, not only whose the text after it, is in doubt.
        evidence["undatable_by"] = word.undatable_by
    # A stamp the next change may not move (a FUSE mount whose times stand still) is kept
    # for nothing: the log is read again at every check there.
    scanned = st.identity(meta.now) if keeps_times(spec.path, sections) else None
    if (
        same
        and scanned == memory.scanned
        and (complete_line, complete_end) == (memory.complete_line, memory.complete_end)
        and (st.inode, st.size, memory.absent) == (memory.inode, memory.size, False)
        and word.keeps(memory)
    ):
        # The last scan again, nothing of it changed: its memory stands as it is.
        new_memory = memory
    else:
        new_memory = _scanned_memory(memory, st, tail, scan, complete_line, complete_end, scanned, resumed)
        new_memory = evolve(
            new_memory,
            writers=word.writers,
            writers_alive_at=word.alive_at,
            complete_at=word.complete_at,
            complete_seen_at=word.seen_at,
            demoted_end=word.demoted_end if word.demoted_end is not None else memory.demoted_end,
            demoted_by=word.later_pid if word.later_pid is not None else memory.demoted_by,
            undatable_by=word.undatable_by,
            demoted_earlier=word.earlier_pid if word.earlier_pid is not None else memory.demoted_earlier,
        )
    if new_memory.earlier_error != earlier_error:
        new_memory = evolve(new_memory, earlier_error=earlier_error)
    # Whether only an earlier run's process was at work at this check (see _whose).
    earlier_alive = job is not None and bool(job.earlier) and not job.live
    if new_memory.earlier_alive != earlier_alive:
        new_memory = evolve(new_memory, earlier_alive=earlier_alive)
    if run is not None and run.source == "launch" and over and not _exit_log_holds(new_memory):
        new_memory = evolve(
            new_memory,
            exit_log=(st.inode, st.size),
            exit_log_at=meta.now,
            over_at=exited if exited is not None else (new_memory.over_at or meta.now),
            exit_unclear=new_memory.exit_unclear
            or (new_memory.foreign_clock and not looked and superseded is None),
        )
    if superseded is not None:
        new_memory = evolve(new_memory, superseded=superseded)
        evidence["launch_superseded"] = superseded
        detail = (
            f"the log holds words written after the launched run's last ({superseded}): a later"
            " run's, or a process the job left behind; no completion line read from now on is the"
            " launched run's"
        )
        return Reading("log", Says.UNKNOWN, detail, evidence, meta.now, host), new_memory
    # Where the log lives, for words true of it (a file server's clock, or a tool's times).
    fs = sections.get("log_fs")
    local = own_clock(fs) if fs and fs.strip() else local_fs(spec.path, sections)
    if new_memory.exit_unclear:
        evidence["exit_unclear"] = True  # for good: the verdict is stuck (sensors._verdict.stuck)
        whose = (
            "times a tool set, on the host's own file system"
            if local
            else "a file server's"
            if local is False
            else "a file server's, or times a tool set"
        )
        detail = (
            "the launched job's exit was already recorded when this watch first read the log, and"
            f" the log's file times come from another clock than the host's ({whose}): whether"
            " a later run wrote to it since cannot be told. Watch a launched job from its launch"
            " (the gate or wait that launched it)"
            + ("" if local else ", or keep the log on the host's own file system")
        )
        return Reading("log", Says.UNKNOWN, detail, evidence, meta.now, host), new_memory
    had = Had(
        since=run is not None and run.source == "since",
        takes_no_since=not takes_since,
        launched=run is not None and run.source == "launch",
        # A process of the job seen at work before its line was written: watched before it ended.
        seen_alive=bool(word.writers),
        before_job=_watched_before_job(new_memory),
        born_with_watch=new_memory.born_near_watch,
        # This run at work now, in this watch's view: a completion line it writes from now on
        # is read as it is written, and the doubt clears by itself.
        run_alive=job is not None and bool(job.live),
    )
    says, detail, fix = _log_says(
        scan, complete_line, still_writing, memory, age, word, had, ahead, local, size=st.size
    )
    if says is Says.UNKNOWN:
        evidence["line_doubt"] = True  # _log_says's only unknowns: whose a completion line is
        evidence["line_fix"] = fix or ""  # what would have told it (a stuck verdict's fix)
    if change:
        detail += f" (log {change} since the last check)"
    return Reading("log", says, detail, evidence, meta.now, host), new_memory


def _scanned_memory(
    memory: LogMemory,
    st: _LogStat,
    tail: bytes | None,
    scan: _LogScan,
    complete_line: str | None,
    complete_end: int | None,
    scanned: str | None,
    resumed: bool,
) -> LogMemory:
    return evolve(
        memory,
        inode=st.inode,
        size=st.size,
        fingerprint=memory.fingerprint if tail is None else tail[-FINGERPRINT_BYTES:].hex(),
        absent=False,
        complete_line=complete_line,
        complete_end=complete_end,
        error_line=scan.error_line,
        earlier_complete=scan.earlier_complete,
        followed_by=None if scan.followed_by is None else redact(scan.followed_by),
        later_run=None if scan.later_run is None else redact(scan.later_run),
        scanned=scanned,
        earlier_is_last=scan.earlier_is_last,
        # Kept redacted (the memory is stored): they are shown only as redacted evidence.
        progress=None
        if scan.progress is None
        else {k: redact(v) if isinstance(v, str) else v for k, v in scan.progress.items()},
        last_line=redact(scan.last_line),
        partial=scan.partial,
        line_start=memory.line_start if tail is None else _line_start(tail, st.size, memory, resumed),
    )


_MISSING = "the probe's log section is missing"
_CHANGED_WHILE_READ = "the log changed while it was read"
_READ_ELSEWHERE = "the log was read from where an earlier check left off; read whole at the next check"
#: The answers of a read whose sections were not what its memory asked for, or not whole.
_NOT_READ = frozenset({_MISSING, _CHANGED_WHILE_READ, _READ_ELSEWHERE})


def _rebound(
    spec: LogSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    asked: LogMemory,
    host: str,
    run: Run | None,
    watch_began: float | None,
) -> tuple[LogMemory, _LogStat] | None:
    """A new run's first memory of the log, from sections the last run's memory (``asked``)
    asked for, with the stat they hold (None: it cannot be told; the log is read whole at
    the next check, ``unknown`` at this one).

    The check that finds a new run (a new container, invocation or job, or the process
    signal's new run) had its probe built before it knew: the log was read from where the
    last run's memory left off, or not at all where it looked unchanged. Those sections are
    read with that memory first; what it then knows of the file is the file's, whoever's run
    it is (its inode, size, last bytes, last line, progress, and the last line matching the
    completion pattern). A fresh memory binds the log at the file's end unless the file was
    born after the new run began (``_bind``): then every line now in it is an earlier run's,
    and the scan of the whole tail a fresh read would make tells no more than that last
    matching line, whether it is the log's last, and the rest the old memory holds. Born
    after the new run began (every byte the new run's): not told, the log is read whole.
    """
    if asked.run_from is None:
        return None  # not bound: its request was a whole read, as a fresh memory's is
    if "log_same" in sections:
        stamp = shared_stats(sections.get("stats")).get(spec.path)
        if stamp is None or stamp != asked.scanned:
            return None
        st = _parsed_stamp(stamp, spec.path)
    else:
        raw = sections.get("log_stat")
        st = _parse_log_stat(raw, spec.path) if raw is not None else "no stat"
    if isinstance(st, str) or meta.now is None:
        return None
    reading, read = read_log(spec, sections, meta, asked, host=host)
    changed = any(reading.evidence.get(k) for k in ("replaced", "truncated", "rewritten", "rotated"))
    if (
        changed
        or (reading.says is Says.UNKNOWN and reading.detail in _NOT_READ)
        or (read.inode, read.size) != (st.inode, st.size)
        or read.run_from is None
    ):
        return None
    own = read.foreign_clock is not True
    bound = _bind(
        LogMemory(foreign_clock=read.foreign_clock), st, run, meta.now, meta.now_end, own, watch_began
    )
    if bound.run_from != st.size:
        return None
    if read.complete_end is not None:
        last, last_is_end = read.complete_line, read.complete_end == st.size
    else:
        last, last_is_end = read.earlier_complete, read.earlier_is_last
    return (
        replace(
            bound,
            foreign_clock=read.foreign_clock,
            size=st.size,
            fingerprint=read.fingerprint,
            scanned=read.scanned,
            earlier_complete=last,
            earlier_is_last=last is not None and last_is_end,
            progress=read.progress,
            last_line=read.last_line,
            partial=read.partial,
            line_start=read.line_start,
        ),
        st,
    )


def _offset(raw: bytes | None) -> int | None:
    text = (raw or b"").strip()
    return int(text) if text.isdigit() else None


def _line_start(tail: bytes, size: int, memory: LogMemory, resumed: bool) -> int | None:
    """Where the log's last line begins, from a tail that ends at ``size``."""
    newline = tail.rfind(b"\n")
    if newline >= 0:
        return size - len(tail) + newline + 1
    if resumed:
        return memory.line_start  # the line went on from where it began
    return 0 if len(tail) == size else None  # the whole file is one line, or not known


def _evidence(
    spec: LogSpec,
    scan: _LogScan,
    st: _LogStat,
    memory: LogMemory,
    complete_line: str | None,
    age: float,
    change: str | None,
    accepted: bool,
) -> LogEvidence:
    evidence = LogEvidence(
        path=spec.path,
        last_line=scan.last_line,
        age_seconds=age,
        size=st.size,
        inode=st.inode,
        mtime=st.mtime,
        complete_line=complete_line,
        error_line=scan.error_line,
        progress=scan.progress,
        partial_last_line=scan.partial,
        run_from_offset=memory.run_from,
        born_after_watch=memory.born_after_watch,
        run_bound_by=memory.bound_by,
        # The latest its last write can have been (a stage over several hosts orders another
        # node's ranks by it: ``sensors._verdict.across``). A mtime set back dates nothing.
        written_by=(st.changed if st.set_back else st.written) + st.resolution,
    )
    if memory.foreign_clock is False and not memory.clock_ahead and not st.set_back:
        evidence["written_at"] = st.written
    if scan.earlier_complete is not None and not accepted:
        evidence["earlier_complete_line"] = scan.earlier_complete
    if scan.followed_by is not None and complete_line is not None:
        evidence["followed_by"] = scan.followed_by
    if scan.survived is not None:
        evidence["survived_error"] = scan.survived.strip()[:200]
    if change:
        evidence[change] = True  # type: ignore[literal-required]
        if change in ("replaced", "truncated"):
            evidence["rotated" if change == "replaced" else "truncated"] = True
    return evidence


class _Word(NamedTuple):
    """Whose last word this run's completion line is (see :func:`_whose`)."""

    complete_line: str | None
    complete_end: int | None
    demoted: str | None = None  # the completion line, an earlier run's: a later run is at work
    later_pid: int | None = None
    writers: tuple[int, ...] = ()
    complete_at: float | None = None
    seen_at: float | None = None
    unattributed: bool = False  # text after it that none of its writers can have written
    demoted_end: int | None = None  # where the demoted line ends
    alive_at: float | None = None  # when this watch last saw a writer alive, the line there
    undatable_by: int | None = None  # a live process that may have begun after the line
    earlier_pid: int | None = None  # demoted: written while only this earlier run's process was
    #: Unattributed with its writers known and gone, their end not seen by this watch (one
    #: restarted or paused across it): what would have told their own text from a later run's.
    end_unseen: bool = False

    def keeps(self, memory: LogMemory) -> bool:
        return (
            self.writers,
            self.complete_at,
            self.seen_at,
            self.demoted_end,
            self.alive_at,
            self.undatable_by,
        ) == (
            memory.writers,
            memory.complete_at,
            memory.complete_seen_at,
            memory.demoted_end,
            memory.writers_alive_at,
            memory.undatable_by,
        )


def _whose(
    memory: LogMemory,
    scan: _LogScan,
    st: _LogStat,
    complete_line: str | None,
    complete_end: int | None,
    job: JobView | None,
    run: Run | None,
    now: float,
    exited: float | None = None,
    job_unread: bool = False,
    start_slack: float = PROC_START_WHOLE_SECONDS,
    found_by: float | None = None,
    record_end: float | None = None,
    lead: float | None = None,
) -> _Word:
    """Whether this run's completion line is its run's last word, by the processes that can
    have written what is in the log (issue 21: the latest run decides).

    When this watch first finds the line, its possible writers are the job's processes of
    this run that were alive before it was written: alive at the previous check (the line was
    not there then), or begun clearly before its mtime while it is the log's last bytes (then
    the mtime is when it was written). Then:

    - a live process of this run that began clearly after the line was written (or after
      this watch found it), is none of its writers and no writer's child is a later run at
      work: the line is an earlier run's (``demoted``), for good: once that process is gone,
      the line is still not its run's last word (a re-run that wrote no completion line of
      its own is not finished by its predecessor's);
    - text after the line (not progress: that demotes it in the scan) is the job's own output
      only when one of its writers can have written it — alive now, or the log last written
      by the last check that saw one of them alive with the line already in the log — or, for
      a launched job, before its recorded exit. Between a writer's last sighting and the
      check that finds it gone, it may have ended and a later run begun, written and ended:
      text written then is not known to be the writer's (the check that first finds the
      writers gone is no bound on when they ended). Otherwise whose it is cannot be told
      (``unattributed``): a re-run's banner and a job's post-processing read alike, and only
      a process seen at work tells them apart. Where the host lets a process's end be seen
      (``JobView.ends``), text written before the end of the last of the writers is theirs,
      as a launched job's written before its recorded exit is, and as it is while a writer
      is found alive: the end is then what a later check's "gone" could not bound.
    """
    if complete_line is None:
        return _Word(None, None, demoted_end=memory.demoted_end)
    if memory.demoted_end is not None and complete_end is not None and complete_end <= memory.demoted_end:
        return _Word(
            None,
            None,
            demoted=complete_line,
            later_pid=memory.demoted_by,
            demoted_end=memory.demoted_end,
            earlier_pid=memory.demoted_earlier,
        )
    same = (
        memory.complete_seen_at is not None
        and complete_line == memory.complete_line
        and complete_end == memory.complete_end
    )
    if same:
        writers = memory.writers
        at, seen_at = memory.complete_at, memory.complete_seen_at
        alive_at = memory.writers_alive_at
        undatable_by = memory.undatable_by
    else:
        # The line ends the log, nothing after it: the mtime is when it was written (on the
        # host's clock only).
        dated = complete_end == st.size and st.resolution < 1 and not memory.foreign_clock
        at = st.written if dated else None
        # Begun before the line was written: before its mtime when that is known, or before
        # the log itself was born (a job that created its log can have written every line).
        # Clearly before, to the start's measured precision (the mtime is never later than the
        # write): a whole second was /proc's worst case, and kept a run begun 0.4 s before its
        # dated line from being its writer (fuzzer seed 2000017: unknown for good).
        written_after = max(at or 0.0, st.birth if memory.run_from == 0 else 0.0)
        early = (
            {pid for pid, start in job.starts.items() if start + start_slack < written_after}
            if job is not None and written_after
            else set()
        )
        if (
            job is not None
            and memory.run_from == 0
            and ((st.birth and not memory.foreign_clock) or memory.opened_whole)
        ):
            # Begun clearly before the log was born (its start's precision allowing), it can
            # have written every line of it: any other writer was at work beside it. Begun
            # within that precision of the birth, either side (late by /proc/uptime's rounding
            # at most, the birth early by the coarse clock's lag, FILE_TIME_TICK), it may as
            # well be a later run begun a few ms after a whole earlier one that wrote the log
            # (fuzzer seed 1300210), or after a launcher seeded it (`cp last.log log; exec job
            # >> log`): its writer only where the kernel showed this run began the log
            # (``opened_in_run``: `nohup job > log`, which the shell opens between the fork and
            # the exec, a millisecond after the start). Python's `logging` opens its file after
            # its imports, clearly after the start. Not one begun too near a dated line to be
            # known to precede it (a re-run begun a moment after a log written whole at once:
            # _undatable's).
            late = st.birth + (start_slack if lead is None else lead) + FILE_TIME_TICK
            early |= {
                pid
                for pid, start in job.starts.items()
                if (
                    start + start_slack < st.birth
                    or (memory.opened_in_run and start <= late)
                    or memory.opened_whole  # every byte written through this run's `> log`
                )
                and (at is None or start < at - start_slack)
            }
        # Ended since the check before (``JobView.ended``), perhaps after the previous check's
        # stat found no line (the probe stats the log before its /proc scan): a writer where
        # the exit watch saw its end no earlier than the log's last write (every byte of it,
        # the line and any text after, came while it lived; the ctime where the mtime was set
        # back, as for text after the line below), as text written before a writer's seen end
        # is its own (below). A rank that printed its line and exited between that stat and
        # the scan, found a zombie there, was no writer, and its line "a later run's no check
        # saw": unknown for good (tests/test_user_43.py's workers before the chief, under CI's
        # load). Alive at the check before, it was at work before the line only where the
        # line is new since the last read: appended past the size that read found (a line
        # already there, found anew because the memory was set aside, is no sign it lived
        # then: a re-run's rank begun after run 1's line and killed later took it for its
        # own, tests/test_fuzz_span_routes.py seed 195), or in a log absent at the last check
        # and stamped after it (``absent_at``); one stamped (or born) before it was not
        # written here then, but came from elsewhere (a symlink, a directory renamed into
        # place: neither moves the file's ctime), and whose it is cannot be told. Such a PID
        # alive again is another process (it was gone at the last scan), judged by its start
        # like any live one: as a writer, a re-run that reused it, and its children, escaped
        # the demotion below.
        if job is not None and job.ended and not memory.foreign_clock and st.resolution < 1:
            last = st.changed if st.set_back else st.written
            first = at if at is not None else st.birth  # the line written no earlier
            if memory.absent:
                here = memory.absent_at is not None and first + FILE_TIME_TICK > memory.absent_at
            else:
                here = memory.inode == st.inode and complete_end is not None and complete_end > memory.size
            early |= {
                pid
                for pid in job.ended
                if pid not in job.live and (end := job.ends.get(pid)) is not None and here and last <= end
            }
        # Alive at the previous check's read of the log, which found no line (not one its
        # /proc scan found first: begun after the read, it may be a later run), and only
        # where that read was of this memory: a log added to the stage since (its memory
        # fresh, the process's kept) was not read then, and the line may be older.
        read_then = memory.absent or (
            memory.inode == st.inode and complete_end is not None and complete_end > memory.size
        )
        previous = job.at_read if job is not None and read_then else frozenset()
        writers = tuple(sorted(previous | early))[:64]
        # Found by the end of this probe (its log read comes after its clock read, ``now``):
        # only a change after that is surely after the line (a job that wrote its outputs, its
        # line and ended inside one probe changed them after ``now``, before the line).
        seen_at = max(now, found_by or now)
        if not writers and job is not None and (memory.earlier_alive or job.earlier) and not job.live:
            # Written while an earlier run's process was at work (begun before this run's
            # exact start) and none of this run's: that run's last word, never this one's,
            # once that process is gone too.
            pid = min(job.earlier) if job.earlier else None
            return _Word(None, None, demoted=complete_line, demoted_end=complete_end, earlier_pid=pid or -1)
        # Undated, the line may be older than a live process of this run not known to have
        # begun before it: that process may be a later run that wrote no line of its own.
        # Dated, so may a process begun within /proc's start-time slack of it (either side):
        # too close to call it the line's writer or a later run (fuzzer seed 200948: a re-run
        # begun 30 ms after its predecessor's completion line, then killed).
        undatable_by = _undatable(job, writers, run, at, written_after, start_slack)
        # Seen alive at the previous check, when the line was not there yet: no text after
        # it was written by then.
        alive_at = None
        if job is None and job_unread:
            # The process signal could not read the processes at this first sighting: who
            # was alive when the line was found is not known, so it is not settled now — the
            # next check that can see them finds the line anew (seed 200948, one probe cut short).
            seen_at = None
    if undatable_by is None and same:
        # Not only at the first sighting: a process first seen at a later check, begun as
        # close to the line, is as undatable (an adversary's review of seed 200948's fix).
        undatable_by = _undatable(job, writers, run, at, at if at is not None else 0.0, start_slack)
    live = job.live if job is not None else frozenset()
    if live.intersection(writers) and not written_by(st, alive_at):
        alive_at = now  # moved only when the log's last write needs it: an idle log's memory stands
    bound = at if at is not None else seen_at
    if job is not None and bound is not None:
        # Who can have written the line: its writers, and any live process begun before it.
        elders = set(writers) | {
            pid
            for pid in live
            if (start := job.starts.get(pid)) is not None and start <= bound + PROC_START_WHOLE_SECONDS
        }
        later = sorted(
            pid
            for pid in live
            if pid not in writers
            and not job.descends(pid, elders)  # their child: their run's own work
            and (start := job.starts.get(pid)) is not None
            and start > bound + PROC_START_WHOLE_SECONDS
        )
        if later:
            return _Word(None, None, demoted=complete_line, later_pid=later[0], demoted_end=complete_end)
    unattributed = end_unseen = False
    if scan.followed_by is not None:
        # When the text after the line was written, at the latest: the mtime, unless it was
        # set back (its ctime clearly later: a tool's touch -d, or a chmod since, which read
        # alike), when the write may be as late as the ctime (fuzzer seed 4701897: a log
        # stamped 30 s behind dated a later run's progress lines before the line's writer
        # ended, and its line completed the run after it, which wrote none).
        last = st.changed if st.set_back else st.written
        by_writer = bool(writers) and (
            bool(live.intersection(writers))
            or (written_by(st, alive_at) if not st.set_back else alive_at is not None and last <= alive_at)
        )
        by_exit = (
            run is not None
            and run.source == "launch"
            and exited is not None
            and not memory.foreign_clock
            and last <= exited + FILE_TIME_TICK
        ) or (
            # A supervisor's recorded end of this run (its container, unit or job: a later run
            # is another identity, and another run): written by then is the run's own, as
            # a launched job's is before its recorded exit. Whatever names the run: the
            # record is this run's (``CheckFacts.supervised``), also where a since bound it
            # (fuzzer seed 1800023: a container begun after the since, its summary after
            # its line).
            record_end is not None and not memory.foreign_clock and last <= record_end + FILE_TIME_TICK
        )
        ended = _writers_end(writers, job)
        # ``ended``: the latest file time of a write still the writers' own, from when their
        # end was seen (see ``JobView.ends``).
        by_end = ended is not None and not memory.foreign_clock and last <= ended
        # A log the nodes share: written before a rank of this run on another host was seen
        # alive, by one of the run's ranks (multi-host fuzzer seeds 6361, 6398: node 1's
        # step after rank 0's line, unknown for good). Never set for a stage of one host.
        by_elsewhere = (
            job is not None
            and job.elsewhere is not None
            and not memory.foreign_clock
            and last + st.resolution <= job.elsewhere
        )
        unattributed = not (by_writer or by_exit or by_end or by_elsewhere)
        end_unseen = unattributed and bool(writers) and ended is None and not live.intersection(writers)
    return _Word(
        complete_line,
        complete_end,
        None,
        None,
        writers,
        at,
        seen_at,
        unattributed,
        alive_at=alive_at,
        undatable_by=undatable_by,
        end_unseen=end_unseen,
    )


def _writers_end(writers: tuple[int, ...], job: JobView | None) -> float | None:
    """The latest file time of a write still one of the line's writers' own, from the ends
    the exit watch saw (None: one of them is alive, or none's end was seen). One writer's
    seen end is enough: a write before it came while that writer lived. Another that ended
    unseen (a pool worker gone before its end could be watched) only may have lived longer."""
    if not writers or job is None or job.live.intersection(writers):
        return None
    ends = [end for pid in writers if (end := job.ends.get(pid)) is not None]
    return max(ends) if ends else None


def _launched(run: Run | None) -> tuple[int, ...]:
    """The launched job's wrapper (the PID its launch printed), where the run is a launch: it
    and its children are that run by the launch's own record, never a later run begun after
    the line, however close to it or undated they began (a launched job watched first during
    its post-processing: its own process, alive after its line, was taken for one, and the
    gate stayed shut for good once it exited 0: session 18, fuzzer seed 9000193)."""
    return (run.pid,) if run is not None and run.source == "launch" and run.pid is not None else ()


def _undatable(
    job: JobView | None,
    writers: tuple[int, ...],
    run: Run | None,
    at: float | None,
    written_after: float,
    start_slack: float,
) -> int | None:
    """A live process of this run that may have begun after the completion line (None: none):
    not one of its writers nor their child, nor a launched run's wrapper or its child (see
    :func:`_launched`), and — the line undated — not known to have begun before it, or —
    dated by ``at`` — not known to have begun before it (``start_slack``: how far /proc's
    start times may be off) nor clearly after it, or begun when /proc cannot tell."""
    if job is None:
        return None
    known = (*writers, *_launched(run))

    def close(pid: int) -> bool:
        if at is None:
            return job.starts.get(pid, written_after) >= written_after - PROC_START_WHOLE_SECONDS
        return at - start_slack <= job.starts.get(pid, at) <= at + PROC_START_WHOLE_SECONDS

    return min(
        (pid for pid in job.live if pid not in known and not job.descends(pid, known) and close(pid)),
        default=None,
    )


def _launch_over(
    memory: LogMemory,
    scan: _LogScan,
    word: _Word,
    st: _LogStat,
    change: str | None,
    run: Run | None,
    exited_by: float | None,
) -> str | None:
    """Why a launched run's log holds a later run's words (None: it does not, as far as known).

    A launch binds the run to the bytes after its mark, and the launched run is the first to
    write there: once a completion line there is followed by a later run's progress (the
    scan's rule), that later run has begun, and every completion line after it is the later
    run's. Once the launched job's exit is recorded (read at every check of a launched run,
    whatever signals the stage names), nothing it wrote comes after it: a log that changed
    after a check had found the record, or whose last write (on the host's clock) is after
    it, holds a later writer's bytes (a later run, or a child the job left behind: either
    way, the launched run's last word is not what ends the log).
    """
    if run is None or run.source != "launch":
        return None
    if memory.superseded is not None:
        return memory.superseded
    if scan.later_run is not None and word.unattributed:
        return f"a completion line followed by a later run's progress: {scan.later_run}"
    if _exit_log_holds(memory) and (change is not None or (st.inode, st.size) != memory.exit_log):
        return "the log changed after a check had found the launched job over"
    if exited_by is None:
        return None
    if memory.foreign_clock:
        # File times of another clock date nothing against the recorded exit: what was written
        # after the last read made with the job alive may be its last words or a later run's.
        # A completion line, progress, then another completion line, read there (fuzzer seed
        # 8001198: run 3 began at the exit and wrote its progress and its own line before the
        # next check): the later line is a later run's as far as anything read tells (the
        # scan's rule, ``later_run``, where the clock cannot date them against the exit).
        if scan.before_last is not None and not _exit_log_holds(memory):
            return (
                f"a completion line ({scan.before_last[:120]!r}) followed by progress and another"
                " completion line, read after the launched job's recorded exit in a log whose times"
                " are another clock's"
            )
        return None
    if st.written > exited_by + FILE_TIME_TICK:
        what = (
            f"the completion line {word.complete_line.strip()[:120]!r} was"
            if word.complete_line is not None and word.complete_end == st.size
            else "the log was last"
        )
        return f"{what} written after the launched job's recorded exit"
    return None


def _exit_log_holds(memory: LogMemory) -> bool:
    """Whether the log as a check found it after the launched job's recorded exit is what the
    job left (on another host's file system: once that check was late enough for no cached
    size to be older than the exit, see ``ATTRIBUTE_CACHE_GRACE``)."""
    return (
        memory.exit_log is not None
        and memory.exit_log_at is not None
        and memory.over_at is not None
        and (not memory.foreign_clock or memory.exit_log_at >= memory.over_at + ATTRIBUTE_CACHE_GRACE)
    )


def _watched_before_job(memory: LogMemory) -> bool:
    """Whether this watch looked before the job's log existed: the log was absent at an
    earlier check, or born after the watch began (every byte of it bound by the watch, or
    by a run start it was given: user s17's ``wait --since`` begun before a tiny job)."""
    return (memory.bound_by == "watch" and memory.run_from == 0) or memory.born_after_watch


#: What a doubt about a completion line ends with while its run is at work in view.
_AT_WORK = "a completion line it writes from now on is read as its own"


def _doubt(detail: str, fixes: tuple[Fix, ...], had: Had) -> tuple[Says, str, str]:
    """A completion line whose run cannot be told: unknown, in words that end with what
    would tell it (the fixes the watch had left out), and that advice alone."""
    left = advice(fixes, had)
    if had.run_alive:
        # No advice while the run is at work in view: what it writes next tells (notes/ml44.md,
        # item 6: "watch the job from before ..." to a watch doing just that). The fixes stay
        # the reading's (``line_fix``), for a run that ends without telling.
        return Says.UNKNOWN, f"{detail}. This run is at work: {_AT_WORK}", left
    return Says.UNKNOWN, detail + _to_tell(left), left


def _advise(fixes: tuple[Fix, ...], had: Had) -> str:
    """What would tell it, as the end of a sentence (the fixes the watch had left out)."""
    return _to_tell(advice(fixes, had))


def _to_tell(left: str) -> str:
    return f". To tell: {left}" if left else ". No other tie crosscheck knows would tell it"


def _log_says(
    scan: _LogScan,
    complete_line: str | None,
    still_writing: bool,
    memory: LogMemory,
    age: float,
    word: _Word | None = None,
    had: Had | None = None,
    ahead: float | None = None,
    local: bool | None = None,
    size: int | None = None,
) -> tuple[Says, str, str | None]:
    """What the log says, in words, and for a completion line whose run cannot be told, what
    would tell it (the fixes the watch had left out, "" where none would: see ``_advise``).
    ``size``: the log's size at this read (None: not known, and the log is never said empty)."""
    had = had or Had()
    if scan.error_line is not None:
        # After the completion line (a teardown hook's traceback, an atexit error): said so, or
        # a person cannot tell a crash at exit from one mid-run (user s15).
        # The scan's line is this run's unless ``_whose`` found it an earlier run's (a process
        # of this run began after it): a re-run's crash then is no crash after finishing.
        whose = "the" if complete_line is not None else "an earlier run's"
        after = (
            f" after {whose} completion line ({scan.complete_line.strip()[:80]})"
            if scan.complete_line is not None
            else ""
        )
        return Says.FAILED, f"error line{after}: {scan.error_line.strip()[:200]}", None
    if complete_line is not None and still_writing:
        return (
            Says.WORKING,
            f"completion line seen ({complete_line.strip()[:120]}), but the log is still being"
            " written after it",
            None,
        )
    if complete_line is not None and word is not None and word.undatable_by is not None:
        when = (
            "it was written too close to that process's start for /proc's start times to tell"
            " which came first"
            if word.complete_at is not None
            else "when the line was written cannot be read (it is not the log's last line, or the"
            " log's times are not the host's clock's)"
        )
        return _doubt(
            f"a completion line ({complete_line.strip()[:120]}) was in the log when this watch first"
            f" read it, while pid {word.undatable_by} of this run was alive, and {when}:"
            " whether that process is a later run, begun after the line and"
            " with no completion line of its own, cannot be told",
            (Fix.WATCH_BEFORE_LINE, Fix.CHECK_OFTEN, Fix.LAUNCH),
            had,
        )
    if complete_line is not None and word is not None and word.unattributed and scan.followed_by is not None:
        # The line's writers known (the matched processes at work before it) and gone, their
        # end unseen by this watch (restarted or paused across it): what it lacked is that end,
        # which tells their own text after the line from a later run's. Seen, the text came
        # after it: another writer's (an unmatched launcher's, or a later run's).
        fixes = (
            (Fix.SEE_END, Fix.LAUNCH, Fix.LINE_LAST)
            if word.end_unseen
            else (Fix.WATCH_BEFORE_LINE, Fix.CHECK_OFTEN, Fix.MATCH_WRITER, Fix.LAUNCH, Fix.LINE_LAST)
        )
        return _doubt(
            f"a completion line ({complete_line.strip()[:120]}) is followed by other text"
            f" ({scan.followed_by[:120]!r}) that no process known to have written the completion"
            " line can have written: a completion line counts only as its run's last word, and"
            " whether a later run wrote that text cannot be told",
            fixes,
            had,
        )
    if complete_line is not None:
        return Says.DONE, f"completion line: {complete_line.strip()[:200]}", None
    if scan.earlier_complete is not None and memory.before_uncertain:
        if memory.mtime_set_back:
            why = (
                "the log's ctime is later than its mtime (an mtime set back: touch -d, cp -p,"
                " rsync -t, a restored copy; or a chmod, chown or rename since its last write), so"
                " when what it held was written, before the run began or after, cannot be told"
            )
        elif memory.bound_by == "watch":
            # True also once a start is known (a supervisor's record read later): the read
            # that bound the log had none, and what the log held then is dated by nothing.
            why = "no run start was known when this watch first read the log" + (
                ", and the log was born too near this watch's start to tell which came first"
                if memory.born_near_watch
                else ""
            )
        elif memory.clock_ahead:
            why = clock_ahead_words(ahead, local)
        elif memory.last_write_unclear:
            why = "the log was last written too near the run's start to tell which run wrote it"
        elif memory.born_near_start and memory.holders_unseen:
            why = (
                "the log was born too near the run's start to tell which came first, and the"
                " probe, not root, saw none of the job's processes holding it: another user's"
                " /proc/PID/fd is closed to it"
            )
        elif memory.born_near_start:
            why = (
                "the log was born too near the run's start to tell which came first, and no"
                " description of this run is shown to have begun it (an appending one, `>> log`,"
                " never is)"
            )
        else:
            why = "the log was written both before and after the run began, and more since"
        # A run start tells only where the log was not written on both sides of it: where a
        # start is known and it was, another start (--since) would not tell either.
        since = (Fix.SINCE,) if memory.bound_by == "watch" else ()
        # A log the kernel showed begun afresh (`> log`, a wrapper's) needs no telling to be;
        # where the probe could not read the job's descriptors, whether it was is not known,
        # and what would show it is a probe that can.
        if memory.holders_unseen:
            fresh: tuple[Fix, ...] = (Fix.PROBE_AS_OWNER,)
        else:
            fresh = () if memory.fresh_seen or not memory.holders_read_live else (Fix.FRESH_LOG,)
        return _doubt(
            f"a completion line is in the log ({scan.earlier_complete.strip()[:120]}) but it may be an"
            f" earlier run's: {why}",
            (*since, Fix.WATCH_BEFORE_LINE, Fix.CHECK_OFTEN, Fix.LAUNCH, *fresh),
            had,
        )
    if word is not None and word.later_pid is not None:
        earlier = (
            f" (the completion line in it is an earlier run's: pid {word.later_pid} of this run began"
            " after it was written)"
        )
    elif word is not None and word.earlier_pid is not None:
        who = f"pid {word.earlier_pid}" if word.earlier_pid > 0 else "a process"
        earlier = (
            f" (the completion line in it is an earlier run's: it was written while {who}, an"
            " earlier run's (begun before this run's start, or forked by a process that was), was"
            " at work, and no process of this run)"
        )
    else:
        earlier = " (the completion line in it is an earlier run's)" if scan.earlier_complete else ""
    # An empty log said so (a job whose stdout is block-buffered writes nothing until it
    # exits: "last: ''" read as a line it wrote; user s15). By its size now: the memory's is
    # the last check's, 0 at a first read and after a rewrite (6000 bytes of dots with no
    # newline in the tail were "empty", beside "log grew": tests/test_adversary_s15b.py).
    last = "the log is empty, last written" if size == 0 else f"last: {scan.last_line[:160]!r},"
    return (
        Says.WORKING,
        f"no completion line from this run yet{earlier}; {last}"
        + (f" {age:.0f}s ago" if age >= 0 else f" the log stamped {-age:.0f}s ahead of the host's clock"),
        None,
    )


def clock_ahead_words(ahead: float | None, local: bool | None) -> str:
    """Why a log whose file times are ahead of the host's clock cannot be dated, true of where
    it lives (``local``: its file system is the host's own, None: not known): a file server's
    clock may run ahead of the host's; on a local file system the host's kernel stamps the
    times from its own clock, which never leads, so a tool set them.

    Example:
        >>> clock_ahead_words(575.6, True)[:62]
        "the log's file times are 575.6s ahead of the host's clock, on "
    """
    by = f" {ahead:.1f}s" if ahead is not None else ""
    said = f"the log's file times are{by} ahead of the host's clock"
    undated = "so they do not tell when it was written"
    if local:
        return (
            f"{said}, on the host's own file system, whose times never run ahead of its clock: a tool"
            f" set them (touch -d, a copy or an unpack that kept another machine's times), {undated}"
        )
    if local is False:
        return f"{said} (the log's file server stamps them by a clock of its own), {undated}"
    return f"{said} (set by a tool, or by a file server's clock), {undated}"


class _LogScan(NamedTuple):
    """What one scan of the tail found (a named tuple: see _LogStat)."""

    complete_line: str | None
    complete_end: int | None
    error_line: str | None
    earlier_complete: str | None
    earlier_is_last: bool
    progress: dict[str, object] | None
    last_line: str
    partial: bool
    followed_by: str | None = None
    later_run: str | None = None  # a completion line of this run's bytes, then a later run's progress
    # The completion line of this run's bytes that this scan found progress, then another
    # completion line after (None: none): a later run's work between two last words.
    before_last: str | None = None
    # The last error line of the bytes this scan is the first to read (past ``memory.size``)
    # that later text cleared (None: none): see ``LogEvidence.survived_error``.
    survived: str | None = None


def _scan_log(
    spec: LogSpec, tail: bytes, st: _LogStat, memory: LogMemory, *, resumed: bool = False
) -> _LogScan:
    """The tail's lines, split at ``memory.run_from`` into this run's and those before.

    ``resumed``: the tail begins where the last scan's left off (see ``resume_at``): what it
    holds no line of (progress, a last line with text) is the last scan's.

    A completion line counts only as the last word of its run. After it, whitespace is
    evidence of nothing; an error line fails the run; any other text is a later run's or this
    one's own output after the line (``followed_by``), which only the processes that can have
    written it tell (``_whose``), progress (``later_run``) as any other text: a later run's
    begun after the line, or the line's own writers' last update.
    """
    tail_start = st.size - len(tail)
    run_from = memory.run_from or 0
    flat = tail.decode("utf-8", "replace").replace("\r", "\n")
    if tail_start > 0:
        flat = flat.partition("\n")[2]
    last_raw = tail[tail.rfind(b"\n") + 1 :]  # after the last newline: b"" when it ends one
    partial = bool(last_raw)
    complete_rx = compile_user_regex(spec.complete)
    error_rx = compile_user_regex(spec.error) if spec.error else None
    progress_rx = compile_user_regex(spec.progress) if spec.progress else None
    complete_line, complete_end = memory.complete_line, memory.complete_end
    error_line, followed_by = memory.error_line, memory.followed_by
    earlier, earlier_end = memory.earlier_complete, None
    later_run = memory.later_run
    before_last = None
    # Where the error line standing ends (None: the memory's, read at an earlier check), and
    # the last one cleared that no earlier read found.
    error_end: int | None = None
    survived = None
    # The last progress update read before this line (a redraw of it is no new work). The
    # memory's is the last in the bytes it scanned: before this tail only where this scan
    # resumes after them, or where the tail starts mid-file (the memory is all there is of
    # what came before). A tail read from the file's first byte is scanned again whole, and
    # the memory's progress may be a line of it after an error line: it is found again in
    # its place (multi-host fuzzer seed 50587: the progress that had cleared an error line,
    # read as the count before it, made itself a redraw, and the error failed the run again).
    remembered = _memory_progress_key(memory.progress) if resumed or tail_start > 0 else None
    progress_key = remembered
    offset = tail_start
    # One C-speed search over the whole tail (\r as line breaks, MULTILINE) tells whether any
    # line can match; only then is the tail split into lines and each examined (else only the
    # last, partial one is looked at). A per-line match implies a whole-text match for every
    # pattern but those anchored with \A or \Z. Once this run has a completion line, every
    # line after it is looked at: what follows it decides whose it is.
    may = (
        complete_line is not None
        or _may_match(spec.complete, flat)
        or _may_match(spec.error, flat)
        or (error_line is not None and _may_match(spec.progress, flat))
    )
    raw_lines = tail.split(b"\n") if may else [last_raw]
    last = len(raw_lines) - 1
    for i, raw in enumerate(raw_lines):
        whole = i < last  # ends with a newline (the last piece is the partial line, or b"")
        end = offset + len(raw) + 1 if whole else st.size
        offset = end
        if i == 0 and tail_start > 0:
            continue  # the first line of a tail that starts mid-file is partial
        if not raw.strip():
            continue  # whitespace is evidence of nothing
        line = raw.decode("utf-8", "replace")
        clean = line.rstrip("\r")
        # The marker is the last \r-segment of a line: "...\rExtraction complete\n".
        segment = clean.rsplit("\r", 1)[-1]
        # Where that segment begins in the file: a completion line whose text was there
        # before this run's first byte is an earlier run's, even when this run's first byte
        # is the newline that ends it (a line cut before its newline, ended by the next run).
        stripped = raw.rstrip(b"\r")
        begun_before = end - len(raw) - (1 if whole else 0) + stripped.rfind(b"\r") + 1 < run_from
        if end <= run_from or (begun_before and whole and complete_rx.search(segment)):
            # Ended before this run's first byte: a completion line is noted, never counted.
            if whole and complete_rx.search(segment):
                earlier, earlier_end = redact(segment), end
            elif earlier_end is not None:
                earlier_end = -1  # text after it: it is not the last line
            continue
        if whole and complete_rx.search(segment):
            if later_run is not None and complete_line is not None:
                # Progress after a completion line, then another (a line written twice, by two
                # logging handlers, has no progress between: the same last word).
                before_last = complete_line
            # Lines kept are kept redacted (the memory is stored), and compared as kept: the
            # same line redacts the same way at every check.
            complete_line, complete_end = redact(segment), end
            # Errors before the completion line were survived; what came after the last one
            # says nothing of this one.
            survived = _survived(error_line, error_end, memory, survived)
            error_line, followed_by, later_run = None, None, None
        elif whole and error_rx and error_rx.search(clean):
            error_line, error_end = redact(clean), end
            # The last progress before it (once per error line, not a match per line); none in
            # this tail, the memory's, where that was read before it: the line is new, or the
            # last scan ended with it standing. A resumed tail reaches back before the last
            # scan's end (the bytes of its fingerprint, ``resume_at``): a line it read again
            # whose error the last scan saw cleared had the memory's progress after it, and
            # that count, taken for the one before it, made itself a redraw and failed the run
            # again (seed 50587's fault, on a resumed read).
            progress_key = _key_before(progress_rx, raw_lines, i) or (
                remembered if end > memory.size or error_line == memory.error_line else None
            )
        elif (
            error_line is not None
            and complete_line is None
            and (key := _progress_key(progress_rx, clean)) is not None
            and key != progress_key
        ):
            # Progress after an error line, to a count not seen before it: work went on past
            # it (the job survived it, or a later run in the same log is at work): no run's
            # last word yet. The count seen before it again is a bar redrawn at the crashed
            # interpreter's exit (tqdm's close at shutdown, after the traceback): no work.
            survived = _survived(error_line, error_end, memory, survived)
            error_line = None
            progress_key = key
        elif complete_line is not None and (complete_end is None or end > complete_end):
            if _progress_key(progress_rx, clean) is not None:
                # Progress after the completion line: a later run's, or the line's own writers'
                # last update of the bar: ``_whose`` tells which, or that it cannot be told.
                later_run = (
                    later_run or f"{complete_line.strip()[:120]!r}, then {redact(clean.strip())[:120]!r}"
                )
            if followed_by is None:
                # Whose it is is the job's question (see _whose): the process that wrote the
                # completion line, still at work, or a later run.
                followed_by = redact(clean.strip())[:200]
        if earlier_end is not None and end > earlier_end:
            earlier_end = -1
    # Nothing after the earlier line, not even whitespace: its newline is the file's last byte.
    earlier_is_last = earlier_end is not None and earlier_end == st.size
    trimmed = flat.rstrip()
    # Redacted whole, then cut: a secret cut at the edge would no longer read as one.
    last_line = redact(trimmed[trimmed.rfind("\n") + 1 :].strip())[:300]
    progress = _progress_of(spec, flat)
    if resumed:
        if progress is None and memory.progress is not None:
            progress = dict(memory.progress)
        last_line = last_line or memory.last_line
    return _LogScan(
        complete_line,
        complete_end,
        error_line,
        earlier,
        earlier_is_last,
        progress,
        last_line,
        partial,
        followed_by,
        later_run,
        before_last,
        survived,
    )


def _survived(error_line: str | None, end: int | None, memory: LogMemory, before: str | None) -> str | None:
    """The error line being cleared where this read is the first to find it (it ends past the
    last read's end, ``memory.size``), else ``before``: a read that begins before that end (a
    resumed read's fingerprint, a whole tail read again) finds old lines again, not new."""
    if error_line is not None and end is not None and end > memory.size:
        return error_line
    return before


def _progress_key(progress_rx: UserRegex | None, line: str) -> tuple[object, ...] | None:
    """What a progress line says (its named groups, or its match): None where it is none.
    The last ``\\r``-segment that is one counts (a bar redrawn in place)."""
    if progress_rx is None:
        return None
    for part in reversed(line.split("\r")):
        found = progress_rx.named_groups(part.strip())
        if found is not None:
            whole, groups = found
            if not groups:
                return (("match", whole[:200]),)
            return tuple(sorted((k, _num(v)) for k, v in groups.items() if v is not None))
    return None


def _key_before(progress_rx: UserRegex | None, raw_lines: list[bytes], i: int) -> tuple[object, ...] | None:
    """:func:`_progress_key` of the last progress line before ``raw_lines[i]`` (None: none)."""
    if progress_rx is None:
        return None
    for raw in reversed(raw_lines[:i]):
        key = _progress_key(progress_rx, raw.decode("utf-8", "replace").rstrip("\r"))
        if key is not None:
            return key
    return None


def _memory_progress_key(progress: Mapping[str, object] | None) -> tuple[object, ...] | None:
    """:func:`_progress_key` of the progress a memory kept (``_progress_of``'s dict)."""
    if not progress:
        return None
    if "match" in progress:
        return (("match", progress["match"]),)
    return tuple(sorted((k, v) for k, v in progress.items() if k != "line"))


def _remembered_scan(memory: LogMemory) -> _LogScan:
    """The last scan, for a tail that has not changed since: what scanning it again would
    give (a scan starts from the memory's lines and finds the same ones again)."""
    return _LogScan(
        memory.complete_line,
        memory.complete_end,
        memory.error_line,
        memory.earlier_complete,
        memory.earlier_is_last,
        dict(memory.progress) if memory.progress is not None else None,
        memory.last_line,
        memory.partial,
        memory.followed_by,
        memory.later_run,
    )


def _may_match(pattern: str | None, flat: str) -> bool:
    if pattern is None:
        return False
    if "\\A" in pattern or "\\Z" in pattern:
        return True
    # Text every match spells, absent: no line can match (one C-speed ``in``, not a search).
    needed = required_literal(pattern)
    if needed is not None and needed not in flat:
        return False
    return _multiline(pattern).found(flat)


@functools.lru_cache(maxsize=8192)
def _multiline(pattern: str) -> UserRegex:
    return compile_user_regex(pattern, multiline=True)


@functools.lru_cache(maxsize=8192)
def _matches_nothing(pattern: str) -> bool:
    """Whether ``pattern`` finds nothing in an empty line (then an empty one is skipped)."""
    return compile_user_regex(pattern).named_groups("") is None


#: Lines read from the end for a progress line before the whole tail is searched at once.
_PROGRESS_FIRST_LINES = 4


def _progress_of(spec: LogSpec, flat: str) -> dict[str, object] | None:
    """The last progress line's named groups. Read from the end: a running job's progress
    line is nearly always among the last few; past those, one search of the whole tail says
    whether a line-by-line search can find one at all."""
    if not spec.progress:
        return None
    progress_rx = compile_user_regex(spec.progress)
    end, looked = len(flat), 0
    while end >= 0:
        if looked == _PROGRESS_FIRST_LINES and not _may_match(spec.progress, flat[: end + 1]):
            return None
        looked += 1
        start = flat.rfind("\n", 0, end) + 1
        seg = flat[start:end]
        end = start - 1
        if not seg and _matches_nothing(spec.progress):
            continue  # the empty line after the tail's last newline, most checks
        found = progress_rx.named_groups(seg)
        if found is not None:
            whole, groups = found
            progress: dict[str, object] = {
                "line": seg.strip()[:200],
                **{k: _num(v) for k, v in groups.items() if v is not None},
            }
            if not groups:
                progress["match"] = whole[:200]
            return progress
    return None


def _num(value: str) -> object:
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value


# --------------------------------------------------------------------------- the signal


def _read(
    spec: LogSpec, sections: Mapping[str, bytes], memory: LogMemory, facts: CheckFacts
) -> tuple[Reading, LogMemory, CheckFacts]:
    reading, new_memory = read_log(
        spec,
        sections,
        facts.meta,
        memory,
        host=facts.host,
        run=facts.run,
        job=facts.job,
        exited=facts.launch.exited_at if facts.launch is not None else None,
        over=facts.launch is not None and facts.launch.over,
        exited_by=facts.launch.exited_by if facts.launch is not None else None,
        record_end=_recorded_end(facts),
        job_unread=facts.job_unread,
        watch_began=facts.watch_began,
        asked_with=asked if isinstance(asked := facts.set_aside.get("log"), LogMemory) else None,
        earlier_record=facts.supervised_earlier,
        takes_since=facts.takes_since,
    )
    if new_memory.complete_end is not None:
        # Alive now or at the last check: outputs written in between may be its own.
        # A supervisor's record of this run is the job's liveness and end as a process's
        # is (a stage without a process section has no other): its job at work now or at the
        # last check, the writer alive while it says running, the recorded exit the writers'
        # end (to its precision: whole seconds for systemd and Slurm, docker's nanoseconds).
        alive = (
            facts.job is not None and bool(facts.job.live or facts.job.previous)
        ) or facts.supervised_alive
        stamp = shared_stats(sections.get("stats")).get(spec.path)
        writer_alive = _writer_alive(new_memory, facts) or _supervised_phase(facts) == "running"
        last_word = LastWord(
            new_memory.complete_end,
            alive,
            done=reading.says is Says.DONE,
            log_written=_stamp_mtime(stamp),
            log_own_clock=new_memory.foreign_clock is False,
            seen_at=new_memory.complete_seen_at,
            writer_alive=writer_alive,
            writers_end=_writers_end(new_memory.writers, facts.job) or _recorded_end(facts),
        )
        facts = facts._replace(last_word=last_word)
    return reading, new_memory, facts


def _supervised_phase(facts: CheckFacts) -> str | None:
    """The phase of the supervisor's record of this run (None: none, or none of this run)."""
    return facts.supervised.phase if facts.supervised is not None else None


def _recorded_end(facts: CheckFacts) -> float | None:
    """The latest moment the supervisor's recorded exit of this run can have been (its
    ``FinishedAt``, a whole second standing for any moment of it): a change stamped no later
    is the job's own (None: no exit recorded with a time)."""
    record = facts.supervised
    if record is None or record.phase != "exited" or record.finished_at is None:
        return None
    return record.finished_at + (WHOLE_SECOND if record.coarse else 0.0)


def _writer_alive(memory: LogMemory, facts: CheckFacts) -> bool:
    """Whether one of the completion line's writers is alive at this check: a process of the
    run seen before the line was written (``writers``), its child, or one that /proc says
    began no later than the line was written, when that is known (the line the log's last
    bytes, on the host's clock) — to a clock tick, or, where /proc/uptime is virtualised and
    starts are whole seconds, clearly before. A process that began after the line, or about
    when an undated line was found, may be a later run: no writer."""
    job = facts.job
    if job is None or not job.live:
        return False
    writers = frozenset(memory.writers)
    at = memory.complete_at
    for pid in job.live:
        if pid in writers or (writers and job.descends(pid, writers)):
            return True
        start = job.starts.get(pid)
        if at is None or start is None:
            continue
        virtualised = facts.meta.uptime_virtualised
        if start <= (at - PROC_START_WHOLE_SECONDS if virtualised else at + PROC_START_TICKS_WRITER):
            return True
    return False


def _stamp_mtime(stamp: str | None) -> float | None:
    """The mtime (to the nanosecond, as the file system keeps it) in a shared-stat line."""
    fields = (stamp or "").split(" ", 6)
    try:
        return float(fields[4]) if len(fields) == 7 else None
    except ValueError:
        return None


SIGNAL: Signal[LogSpec, LogMemory] = Signal("log", LogMemory, snippet, _read)
