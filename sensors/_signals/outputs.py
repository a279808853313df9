"""The outputs signal: how many outputs exist against the expected number, and whether they
stopped changing.

A directory's entries (``find -name``: the pattern and the exclusions mean what they mean to
fnmatch(3), for the count and the in-place-write check alike; temp names and dotfiles
excluded; a newline in a name counts once) or the records of a JSONL file (its newlines,
counted incrementally). Every tool's answer is checked: one that fails (a BusyBox without an
option, a read cut short) makes the reading ``unknown`` with its error, never a count of 0.
Outputs may predate the run (resumable jobs skip what exists), so the count stays a count:
what ties them to the run is said by ``written_this_run``.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple, TypedDict

from pydantic import Field, field_validator, model_validator

from sensors._base.model import Reading, Says
from sensors._base.probe import (
    LOCAL_FILE_SYSTEMS,
    Meta,
    fstype_request,
    helper,
    on_local_fs,
    own_clock,
    regular_file_type,
    shareable,
    shared_stats,
    stat_request,
    trusted_stamp,
    unchanged,
)
from sensors._base.schema import AbsPath, Section
from sensors._base.tolerances import (
    ATTRIBUTE_CACHE_GRACE,
    FILE_CLOCK_TOLERANCE,
    FILE_TIME_TICK,
    OWN_CLOCK_SLACK,
)
from sensors._run.run import FINGERPRINT_BYTES
from sensors._signals.base import CheckFacts, LastWord, ProbeInputs, Reread, Signal, evolve

DEFAULT_EXCLUDES = (".*", "*.tmp", "*.part", "*.partial", "*.swp", "*~")
MAX_EXCLUDES = 64


def _name_glob(value: str) -> bool:
    """A glob over one directory entry's name: non-empty, at most NAME_MAX bytes, and free of
    '/', NUL, newline and carriage return."""
    return (
        bool(value)
        and len(value.encode("utf-8", "surrogateescape")) <= 255
        and not any(c in value for c in "/\0\n\r")
    )


class OutputsSpec(Section):
    files: AbsPath | None = Field(None, description="directory whose entries are counted")
    pattern: str = "*"
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    lines: AbsPath | None = Field(None, description="file whose newline-terminated records count")
    expected: int = Field(gt=0, le=2**53)  # exact in JSON and in a float

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if not _name_glob(value):
            raise ValueError("a file name pattern like '*.pt' (no '/')")
        return value

    @field_validator("exclude")
    @classmethod
    def _exclude(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Each glob reaches the probe's find -name: one name each (an empty one, or one with a
        # '/', matches no name at all).
        if len(value) > MAX_EXCLUDES:
            raise ValueError(f"at most {MAX_EXCLUDES} exclude patterns")
        for glob in value:
            if not _name_glob(glob):
                raise ValueError(f"{glob!r} is not a file name pattern like '*.tmp' (no '/')")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> OutputsSpec:
        if (self.files is None) == (self.lines is None):
            raise ValueError("give exactly one of files or lines")
        return self


@dataclass(frozen=True)
class OutputsMemory:
    count: int | None = None
    lines_inode: int | None = None
    lines_size: int = 0
    lines_fingerprint: str | None = None  # hex of the bytes before lines_size
    checked_at: float | None = None  # the monitored host's clock at this check
    first_count: int | None = None  # the count at this watch's first reading
    written_this_run: bool = False  # an output written since the run began was seen
    # An output's time was once ahead of the host's clock where its kernel stamps the times:
    # set by a tool, so the outputs' times date nothing any more (once the clock has passed
    # such a time it looks like a write of this run: fuzzer seed 702132's outputs side).
    times_ahead: bool = False
    at_expected: bool = False  # the count was at the expected number
    # The directory's (or JSONL file's) stamp in the shared stat just before ``count`` was
    # read (None: not to be trusted to change with the next write, see sensors._base.probe).
    stamp: str | None = None
    # The path's line in the shared stat at the last reading (inode, size, birth, mtime and
    # ctime to the nanosecond): a file replaced, or rewritten with the same bytes, differs
    # from it though its count does not (compared for equality only: no clock is read in it).
    ident: str | None = None
    # Where this run's completion line ended in the log at the last reading (None: none), and
    # the end of one found not to be its run's last word: outputs were written after this
    # watch had found it, with no process of the job alive to have written them.
    line_end: int | None = None
    after_line: int | None = None
    # A launched run's: when a reading first found the launched job over (its exit recorded, or
    # its wrapper gone), and whether outputs changed after it (for good): a later writer's.
    over_seen_at: float | None = None
    after_exit: bool = False
    # The last check that found one of the log's completion line's writers alive (its
    # probe's end, host clock; for the line ending at ``line_end``): outputs changed by then
    # may be its own work, after the line too.
    writer_seen_at: float | None = None
    # The launched job's recorded exit, once a reading found it, and whether a later count
    # asked for an entry modified after it (a directory's; see ``_exit_since``): outputs
    # written after it, before any check of this watch saw them, are a later writer's too.
    exited_at: float | None = None
    exit_scanned: bool = False


class OutputsEvidence(TypedDict, total=False):
    """The outputs reading's evidence (the JSON the CLI prints, key for key)."""

    path: str | None
    absent: bool  # the directory (or file) is not there (an unknown reading)
    expected: int
    pattern: str
    count: int | None
    previous_count: int | None
    in_place_writes: str | None  # a file modified since the last check (directories)
    partial_record: bool  # a JSONL file not ending with a newline
    size: int
    rewritten: bool  # a JSONL file rewritten in place: counted again from the start
    written_this_run: bool  # an output written while this run went on
    times_ahead: bool  # an output's time was seen ahead of the host's clock: times date nothing
    written_after_complete_line: bool  # outputs written after the log's completion line was found
    modified_after_log: bool  # the outputs' mtime after the log's, with no process of the run seen since
    written_after_exit: bool  # outputs written after the launched job was found over


# --------------------------------------------------------------------------- probe snippet


def snippet(spec: OutputsSpec, memory: OutputsMemory, probe: ProbeInputs) -> list[str]:
    """The count, and (once it is at the expected number) the in-place and run-tie checks.

    Below the expected number, a directory (or JSONL file) the probe's shared stat finds as
    it was before the last count (the same inode, size, mtime and ctime: no entry added,
    removed or renamed, no record written) is not listed again: that count stands. A count
    kept so can only be short of the truth, never past it: the shortcut ends where the
    count could decide completion. At the expected number it holds only while the job is
    alive (``_kept_while_alive``): a stage with a live job is running whatever its outputs
    say, and a kept count read where the job is found gone decides nothing (see
    ``read_outputs``).
    """
    path = spec.files or spec.lines or ""
    shared = (not memory.at_expected or _kept_while_alive(memory, probe)) and shareable(path)
    head: list[str] = []
    if spec.lines:
        lines = _lines_section(spec.lines, memory)
        if probe.outputs_tie and not memory.written_this_run:
            # Whether the file's mtime can date a record into the run (see _count_lines).
            lines += ["sec lines_fs", fstype_request(shlex.quote(spec.lines))]
    else:
        d, count, names = _count_words(spec.files, spec.pattern, tuple(spec.exclude))
        # Same count is not enough: a file written in place (no temp name) changes while the
        # count stands still (since: one entry modified since the last check suffices). And
        # what ties outputs to the run when no log or process can: one entry written since the
        # run began (run_since). Either way every entry is stated: the count comes from the
        # same pass, the one matcher for all three.
        # And once a launched job's exit is recorded, one entry written after it (by its time
        # as given: a whole second is not read as any moment of it, see ``_exit_since``).
        since, run_since = _in_place_since(memory, probe), _run_tie_since(memory, probe)
        after = _exit_since(memory)
        if since is None and run_since is None and after is None:
            lines = ["sec outputs", *count]
            head = [_COUNT_FILES]
        else:
            lines = _scan(d, names, since, run_since, after)
            head = [_TIMES, _SCAN]  # the helpers it calls, defined once per probe
            shared = False
        if (
            probe.has_log
            and probe.exit_file is None
            and memory.at_expected
            and (not probe.job_alive or probe.job_ended)
        ):
            # Outputs that could decide completion, no process of the run at work (or none
            # left: its end was seen since the last check): when was anything under them
            # last changed (``_newer_than_log``)?
            lines = [
                *lines,
                "sec outputs_newest",
                f"__cc_newest {d} {_path_tests(spec.files, spec.pattern, tuple(spec.exclude))}",
            ]
            head = [*head, _NEWEST]
            shared = False
    if not shared:
        # The path's stamp all the same: outputs replaced or rewritten since the last check
        # (the same count, even the same bytes) are seen by it (``OutputsMemory.ident``).
        return [*head, stat_request(path), *lines] if shareable(path) else [*head, *lines]
    if memory.stamp is None or memory.count is None:
        return [*head, stat_request(path), *lines]
    if memory.at_expected:
        alive = _any_alive(probe.job_pids)
        return [*head, *_unless_unchanged(path, memory.stamp, tuple(lines), alive)]
    return [*head, *_unless_unchanged(path, memory.stamp, tuple(lines))]


def _kept_while_alive(memory: OutputsMemory, probe: ProbeInputs) -> bool:
    """Whether a count at the expected number may be kept on an unchanged stamp: the job had
    live PIDs at the last check (then no check of a time is asked: ``_in_place_since`` and
    ``_run_tie_since`` ask none while it lives; a launched job's exit asks its one scan all the
    same, and that scan is never kept). 100,000 outputs cost a ``find`` of ~100 ms a check."""
    return probe.job_alive and bool(probe.job_pids)


@functools.lru_cache(maxsize=1024)
def _any_alive(pids: tuple[int, ...]) -> str:
    """sh condition: one of the job's PIDs at the last check still has a /proc entry (a
    builtin test each, no fork). A PID reused since is taken for the job: the reading then
    finds the job gone and the kept count decides nothing (``read_outputs``)."""
    return " || ".join(f"[ -d /proc/{int(p)} ]" for p in pids[:64]) or "false"


@functools.lru_cache(maxsize=8192)
def _unless_unchanged(path: str, stamp: str, lines: tuple[str, ...], alive: str = "") -> tuple[str, ...]:
    """``lines`` run only when the shared stat does not find ``path`` as ``stamp`` said (the
    same for every check of a directory nobody adds to), and, ``alive`` given (an sh
    condition), when it does not hold."""
    kept = f"{{ {alive}; }} && {unchanged(path, stamp)}" if alive else unchanged(path, stamp)
    return (
        stat_request(path),
        f"if {kept}; then sec outputs_same; else",
        *(f"  {x}" for x in lines),
        "fi",
    )


# The count, the same for every directory: a sh function the probe defines once, called with
# the stage's quoted directory and its name tests (``-name PATTERN ! -name EXCLUDED ...``).
# find's -name is fnmatch(3): what docs/signals.md says ``pattern`` means, and the very test the
# in-place-write check (``__cc_scan``) applies, so the two cannot disagree on a name. Each
# entry ends with a NUL, which no name holds: a newline in a name counts once. What is
# shared with BusyBox only (no ``ls -f``, no ``-printf``, no ``-newermt`` there).
_COUNT_FILES = helper(
    "__cc_count",
    [
        'if [ -d "$1" ] && [ -r "$1" ] && [ -x "$1" ]; then',
        "  __d=$1; shift",
        # The count comes straight out (fd 4); find's errors and exit status come back
        # beside it (fd 3, captured): a find that fails is not a count of 0.
        '  { __e=$( { { find "$__d" -mindepth 1 -maxdepth 1 "$@" -print0 2>&3; echo "status $?" >&3; }'
        " | tr -cd '\\000' | wc -c >&4; } 3>&1 ); } 4>&1",
        # find's errors name entries the job made (any bytes): through __cc_put (ESCAPE).
        '  { __cc_put "$__e"; } | head -c 1024',
        'elif [ -e "$1" ]; then echo unreadable; else echo missing; fi',
    ],
)

# Each matching entry's mtime and inode, a line each: ``__cc_times DIR NAME-TESTS``. The same
# facts by either tool: GNU find's -printf (no process per batch of entries: as fast as the
# ``find -newermt`` it replaces), or, where find has no -printf (BusyBox), stat -c.
_TIMES = helper(
    "__cc_times",
    [
        "__t=$1; shift",
        "if find \"$__t\" -maxdepth 0 -printf '' 2>/dev/null; then",
        '  find "$__t" -mindepth 1 -maxdepth 1 "$@" -printf \'%T@ %i\\n\'',
        "else",
        '  find "$__t" -mindepth 1 -maxdepth 1 "$@" -exec stat -c \'%.9Y %i\' -- {} +',
        "fi",
    ],
)

# The count with every entry's mtime, in one pass: ``__cc_scan DIR RECENT RUN UNTIL EXIT
# NAME-TESTS`` prints the ``outputs`` section as ``__cc_count`` does, then, each one asked (a
# time, not ``-``), ``outputs_recent``: an entry modified after RECENT, ``outputs_run``: one
# written after RUN and not after UNTIL, and ``outputs_exit``: one written after EXIT; each
# ``ok`` and the entry's name (``ok`` alone: none), and, RUN asked with UNTIL the host's clock
# to the nanosecond (a local file system's), ``outputs_ahead``: one whose time is ahead of it
# (set by a tool: a kernel's file clock never leads the host's), or
# ``failed`` and why. Each matching entry's mtime and inode (``__cc_times``: no name, which
# could hold a newline, passes the pipe), its mtime as exactly as the tool gives it (BusyBox's
# stat: whole seconds). "Modified after": a time in whole seconds may stand for any moment of its
# second (a write is never missed); "written after": by its time as given (a write is never
# dated later than it was).
_SCAN = helper(
    "__cc_scan",
    [
        "__d=$1 __rc=$2 __rn=$3 __u=$4 __ex=$5; shift 5",
        'if [ -d "$__d" ] && [ -r "$__d" ] && [ -x "$__d" ]; then',
        '  __r=$( { __cc_times "$__d" "$@" 2>/dev/null; echo "status $?"; }'
        ' | awk -v r="$__rc" -v s="$__rn" -v u="$__u" -v e="$__ex" \''
        '$1 == "status" && NF == 2 { st = $2; next } '
        "NF == 2 && $1 ~ /^[0-9]+([.][0-9]+)?$/ && $2 ~ /^[0-9]+$/ { n++; t = $1 + 0; hi = t; "
        "if ($1 !~ /[.][0-9]*[1-9]/) hi = t + 1; "
        'if (r != "-" && hi > r + 0 && fr == "") fr = $2; '
        'if (s != "-" && t > s + 0 && t <= u + 0 && fs == "") fs = $2; '
        'if (e != "-" && t > e + 0 && fe == "") fe = $2; '
        'if (s != "-" && u ~ /^[0-9]+[.][0-9]+$/ && t > u + '
        + str(OWN_CLOCK_SLACK)
        + ' && fa == "") fa = $2; next } '
        "{ bad = 1 } "
        'END { if (st == "") st = "none"; if (bad) st = "garbled";'
        ' print st, n + 0, (fr == "" ? "-" : fr), (fs == "" ? "-" : fs), (fe == "" ? "-" : fe),'
        ' (fa == "" ? "-" : fa) }\')',
        # find's status (or garbled), the count, the entries found (inodes, or -).
        "  __st=${__r%% *}; __r=${__r#* }; __n=${__r%% *}; __r=${__r#* }; __fr=${__r%% *}; __r=${__r#* }",
        "  __fs=${__r%% *}; __r=${__r#* }; __fe=${__r%% *}; __fa=${__r#* }",
        "  __e=",
        # Why it failed, once more with the error text (only when it did).
        '  [ "$__st" = 0 ] || __e=$(__cc_times "$__d" "$@" 2>&1 >/dev/null | head -c 300)',
        "  sec outputs",
        '  printf \'%s\\nstatus %s\\n\' "$__n" "$__st"; __cc_put "$__e"',
        '  for __w in "recent $__rc $__fr" "run $__rn $__fs" "exit $__ex $__fe" "ahead $__rn $__fa"; do',
        "    set -f; set -- $__w; set +f",
        '    [ "$2" = - ] && continue',
        "    sec outputs_$1",
        '    if [ "$3" != - ] && isnum "$3"; then',
        '      __f=$(find "$__d" -mindepth 1 -maxdepth 1 -inum "$3" -print 2>/dev/null | head -c 4000)',
        '      __cc_put "ok${__f:-?}"',
        '    elif [ "$__st" = 0 ]; then echo ok;',
        '    else __cc_put "failed (find exited $__st): $__e"; fi',
        "  done",
        'elif [ -e "$__d" ]; then sec outputs; echo unreadable; else sec outputs; echo missing; fi',
    ],
)


# The last change under a directory's outputs: ``__cc_newest DIR PATH-TESTS`` prints ``ok
# CTIME`` and, on the lines after it, the name of the entry (an output, or anything inside one,
# links followed) whose inode changed last; ``ok`` alone for none, or ``failed`` and why. The
# ctime, not the mtime: a write, a rename, a time set back (``touch -d``, ``cp -a``, ``tar x``)
# all move it, and nothing sets it back. BusyBox (no ``-printf``): stat's whole seconds, never
# later than the change was. No name passes the pipe that finds the last change (a name may
# hold a newline, and what follows it would read as an entry of its own, changed whenever its
# maker liked): each entry is its time and inode, and the last one's name is found by its
# inode and printed through __cc_put.
_NEWEST = helper(
    "__cc_newest",
    [
        "__d=$1; shift",
        "__r=$(if find \"$__d\" -maxdepth 0 -printf '' 2>/dev/null; then",
        '  { find -L "$__d" -mindepth 1 "$@" -printf \'%C@ %i\\n\' 2>/dev/null; echo "status $?"; }',
        "else",
        '  { find -L "$__d" -mindepth 1 "$@" -exec stat -L -c \'%Z %i\' -- {} + 2>/dev/null;'
        ' echo "status $?"; }',
        'fi | awk \'$1 == "status" && NF == 2 { st = $2; next } '
        'NF == 2 && $1 ~ /^[0-9]+([.][0-9]+)?$/ && $2 ~ /^[0-9]+$/ && (n == "" || $1 + 0 > m + 0) '
        "{ m = $1; n = $2 } "
        'END { if (st != "0") print "failed (find exited " st ")"; '
        'else if (n == "") print "ok"; else print "ok " m " " n }\')',
        'set -f; set -- $__r "$@"; set +f',
        'if [ "$1" = ok ] && [ $# -ge 3 ] && isnum "$3"; then',
        '  echo "ok $2"; __i=$3; shift 3',
        '  __cc_put "$(find -L "$__d" -mindepth 1 "$@" -inum "$__i" -print 2>/dev/null | head -c 300)"',
        "else printf '%s\\n' \"$__r\"; fi",
    ],
)


def _glob_escaped(path: str) -> str:
    """``path`` as a literal inside a find ``-path`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", path)


@functools.lru_cache(maxsize=4096)
def _path_tests(files: str, pattern: str, exclude: tuple[str, ...]) -> str:
    """find's expression for every output under ``files`` and everything inside one (a
    checkpoint directory's shards), the top-level name matched as the count matches it, by
    path: what is not an output (an excluded name, a ``lost+found`` the probe may not read) is
    pruned, never entered; what follows it (``-printf``) applies to the rest. A ``*`` in
    ``-path`` also spans a ``/``: a deeper path may match too, which can only ask about more,
    never less."""
    q = shlex.quote
    d = _glob_escaped(files.rstrip("/") or "/")
    other = f"! -path {q(f'{d}/{pattern}')} ! -path {q(f'{d}/{pattern}/*')}"
    for x in exclude:
        if not _disjoint(pattern, x):
            other += f" -o -path {q(f'{d}/{x}')} -o -path {q(f'{d}/{x}/*')}"
    return f"\\( {other} \\) -prune -o"


@functools.lru_cache(maxsize=8192)
def _count_words(files: str, pattern: str, exclude: tuple[str, ...]) -> tuple[str, tuple[str, ...], str]:
    """The parts of the outputs snippet a stage's definition alone decides (the same every
    check): the quoted directory, the count's lines, the ``find`` name tests."""
    q = shlex.quote
    d = q(files)
    tests = [f"-name {q(pattern)}", *(f"! -name {q(x)}" for x in exclude if not _disjoint(pattern, x))]
    names = " ".join(tests)
    return d, (f"__cc_count {d} {names}",), names


#: What may stand for other characters in a glob (``]`` too: scanning from the end, it may
#: close a bracket expression; taking a literal one for a wildcard only shortens the ends).
_GLOB_META = frozenset("*?[]\\")


def _literal_ends(glob: str) -> tuple[str, str]:
    """The literal text every name a glob matches begins with, and ends with."""
    first = next((k for k, c in enumerate(glob) if c in _GLOB_META), len(glob))
    last = next((k for k in range(len(glob) - 1, -1, -1) if glob[k] in _GLOB_META), -1)
    return glob[:first], glob[last + 1 :]


def _disjoint(pattern: str, exclude: str) -> bool:
    """Whether no name can match both globs: their literal beginnings (or ends) differ.

    An exclusion no output name can match (``*.tmp`` beside ``*.pt``) is a test find would
    run on every entry for nothing: left out, the count is the same. Only what the literal
    ends prove is claimed.

    Example:
        >>> _disjoint("*.pt", "*.tmp"), _disjoint("*.pt", ".*"), _disjoint("sample_*", ".*")
        (True, False, True)
    """
    (p1, s1), (p2, s2) = _literal_ends(pattern), _literal_ends(exclude)
    return not (p1.startswith(p2) or p2.startswith(p1)) or not (s1.endswith(s2) or s2.endswith(s1))


def _in_place_since(memory: OutputsMemory, probe: ProbeInputs) -> float | None:
    """The in-place-write check stats every entry (O(n)): only worth it when outputs may
    decide completion, i.e. the count at the expected number and the job not alive (while
    it runs the verdict is running anyway, e.g. a long CPU phase after the last output)."""
    if memory.at_expected and not probe.job_alive:
        return memory.checked_at
    return None


def _exit_since(memory: OutputsMemory) -> float | None:
    """Once a launched job's exit is recorded, ask once for an entry written after it (the
    latest it can have been), by the entry's time as given: a file system or a stat that
    keeps whole seconds shows the job's last outputs in the second of its exit, and they
    are not "after" it (the in-place check's "modified after" reads a whole second as any
    moment of it: a write is never missed, but here that would take the job's own outputs
    for a later writer's, for good)."""
    if memory.exited_at is None or memory.exit_scanned or memory.after_exit:
        return None
    return memory.exited_at + FILE_TIME_TICK


def _run_tie_since(memory: OutputsMemory, probe: ProbeInputs) -> float | None:
    """Ask for an output written during the run only when nothing else can tie the outputs to
    it (no log, no process signal) and they could decide completion."""
    if not probe.outputs_tie or memory.written_this_run or not memory.at_expected:
        return None
    return probe.run_start


def _lines_section(path: str, memory: OutputsMemory) -> list[str]:
    """JSONL records: count only the bytes added since the last check, unless rewritten.

    O(new data) per check instead of O(file). The previous end's last bytes must still be
    there, else the file was rewritten (same inode, truncated, regrown) and is counted
    again from the start. Bounded by the size read here, so a record written meanwhile is
    counted next time, once.
    """
    f = shlex.quote(path)
    n = FINGERPRINT_BYTES
    prev_ino, prev_size = int(memory.lines_inode or 0), int(memory.lines_size)
    same = f'[ "$1" = {prev_ino} ] && [ "$2" -ge {prev_size} ]'
    if prev_size > 0 and memory.lines_fingerprint and re.fullmatch(r"[0-9a-f]+", memory.lines_fingerprint):
        k = min(prev_size, n)
        same += (
            f' && [ "$(tail -c +{prev_size - k + 1} -- {f} 2>/dev/null | head -c {k}'
            f" | od -An -v -tx1 | tr -d ' \\n')\" = {memory.lines_fingerprint} ]"
        )
    elif prev_size > 0:
        same = "false"
    return [
        "sec lines",
        f"if [ -f {f} ]; then",
        f"  set -f; set -- $(stat -L -c '%i %s %Y' -- {f} 2>/dev/null); set +f",
        '  if isnum "$1" && isnum "$2"; then',
        f"  base=0; if {same}; then base={prev_size}; fi",
        # Newlines and bytes: a read that came short (a tool that failed, a file cut
        # meanwhile) is seen as such, never a count of what it did not read.
        # Nothing to read is not read: a file that says it is empty (of /proc, of a FUSE
        # mount) may block its reader for ever.
        "  c='0 0' fp=",
        f'  [ "$2" -le "$base" ] || c=$(tail -c +$((base + 1)) -- {f} 2>/dev/null'
        " | head -c $(($2 - base)) | wc -l -c)",
        f'  [ "$2" -le 0 ] || fp=$(tail -c +$(($2 > {n} ? $2 - {n} + 1 : 1)) -- {f} 2>/dev/null'
        f" | head -c $(($2 > {n} ? {n} : $2)) | od -An -v -tx1 | tr -d ' \\n')",
        '  echo "$1 $2 $3 $base $c ${fp:-none}"',
        "  else echo unreadable; fi",
        f"elif [ -e {f} ]; then {regular_file_type(f)}; else echo missing; fi",
    ]


def _scan(
    d: str, names: str, since: float | None, run_since: float | None, exit_since: float | None = None
) -> list[str]:
    """sh: the count and, each asked, an entry modified after ``since`` (the last check), one
    written after ``run_since`` (the run's start) and not after the host's clock (a second of
    slack): an mtime in the future (a file server with a clock of its own) says nothing of
    when it was written; and one written after ``exit_since`` (a launched job's exit)."""
    recent = "-" if since is None else f"{since:.6f}"
    ex = "-" if exit_since is None else f"{exit_since:.6f}"
    if run_since is None:
        return [f"__cc_scan {d} {recent} - - {ex} {names}"]
    # On a file system whose times come from another clock (NFS, FUSE, ...), newer than the
    # start by the tolerance: a server's clock a little ahead must not date an earlier run's
    # output into this run.
    # Not after the host's clock either: on a local file system, whose times the kernel
    # stamps (lagging the clock, never leading it), not after now (to the nanosecond; where
    # date has no %N, whole seconds rounded down: a write of this very second is counted at
    # the next check); on another, the tolerance ahead.
    locals_ = "|".join(sorted(LOCAL_FILE_SYSTEMS))
    return [
        f'case "$({fstype_request(d)})" in {locals_}) __s={run_since:.6f} __u=$(date +%s.%N 2>/dev/null) ;;'
        f" *) __s={run_since + FILE_CLOCK_TOLERANCE:.6f} __u=$(($(date +%s) + 1)) ;; esac",
        f'__cc_scan {d} {recent} "$__s" "$__u" {ex} {names}',
    ]


# --------------------------------------------------------------------------- reading


def _newer_answer(raw: bytes | None, what: str) -> str | tuple[str] | None:
    """What one of the probe's ``__cc_scan`` checks found: the entry's name (``""``: none),
    None when not asked, or ``(why,)`` when it could not tell."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    if text.startswith("ok"):
        return text[2:].strip()
    why = " ".join(text.split())[:300] or "no answer"
    return (f"{what} could not be read: {why}",)


def _newest_answer(raw: bytes | None) -> tuple[float, str] | str | None:
    """``__cc_newest``'s answer: (ctime, name) of the last change, None (not asked, or
    nothing there), or why it could not be read."""
    if raw is None:
        return None
    first, _, name = raw.decode("utf-8", "replace").partition("\n")
    text = first.strip()
    if text == "ok" and not name.strip():
        return None
    if text.startswith("ok "):
        try:
            # The name as the probe found it by its inode (it may have gone since: "?").
            return float(text[3:]), name.rstrip("\n")[:300] or "?"
        except ValueError:
            pass
    text = " ".join([text, *name.split()])
    return (
        f"the last change under the outputs could not be read: {' '.join(text.split())[:300] or 'no answer'}"
    )


class _Count(NamedTuple):
    """One check's count, what changed besides it, and the memory it leaves."""

    # A field named as tuple's count method, which it hides (a NamedTuple's field may).
    count: int  # type: ignore[assignment]
    changed: str | None  # why an unchanged count is not yet done
    written: bool  # an output was seen written since the run began
    memory: OutputsMemory
    replaced: bool = False  # a JSONL file counted again from its start (replaced, rewritten)
    asked_exit: bool = False  # the count was asked for an entry written after the exit
    exit_name: str | None = None  # the one it found
    newest: tuple[float, str] | None = None  # the last change under the outputs (ctime, name), when asked
    ahead: bool = False  # an output's time was ahead of the host's clock (set by a tool)


def _count_files(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory,
    evidence: OutputsEvidence,
) -> _Count | str:
    """The directory's count, or why it cannot be read."""
    if "outputs_same" in sections:
        return _same(memory, sections, spec.files, evidence, spec.pattern)
    stamp = _stamp(spec.files, sections, meta)
    raw = sections.get("outputs")
    if raw is None:
        return "the probe's outputs section is missing"
    count = _found_count(raw.decode("utf-8", "replace"), spec.files)
    if isinstance(count, str):
        return count
    evidence["pattern"] = spec.pattern
    recent = _newer_answer(sections.get("outputs_recent"), "the files modified since the last check")
    run = _newer_answer(sections.get("outputs_run"), "the files written during the run")
    after = _newer_answer(sections.get("outputs_exit"), "the files written after the launched job's exit")
    ahead = _newer_answer(sections.get("outputs_ahead"), "the files stamped ahead of the host's clock")
    newest = _newest_answer(sections.get("outputs_newest"))
    if isinstance(newest, str):
        return newest
    for answer in (recent, run, after, ahead):
        if isinstance(answer, tuple):
            return answer[0]  # a check that could not tell is no "none modified"
    # Every (why,) returned above: each answer left is a name, "" or None.
    assert not isinstance(recent, tuple) and not isinstance(after, tuple) and not isinstance(ahead, tuple)
    changed = None
    if recent is not None:
        evidence["in_place_writes"] = recent or None
        if recent:
            changed = f"{recent.rsplit('/', 1)[-1]} was modified since the last check"
    written = bool(run)
    return _Count(
        count,
        changed,
        written,
        OutputsMemory(count=count, checked_at=meta.now, stamp=stamp),
        asked_exit=after is not None,
        exit_name=after or None,
        newest=newest,
        ahead=bool(ahead),
    )


def _found_count(text: str, path: str | None) -> int | str:
    """The count ``__cc_count`` (or ``__cc_scan``) printed, or why there is none: only a find
    that ended with status 0 counted every entry (a BusyBox without an option, an unreadable
    directory: its error, never 0)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if lines in (["missing"], ["unreadable"]):
        return f"output directory {lines[0]}: {path}"
    statuses = [line.split()[1:] for line in lines[1:] if line.split()[:1] == ["status"]]
    if not lines or not lines[0].isdigit() or len(statuses) != 1 or len(statuses[0]) != 1:
        return f"output count unreadable: {text.strip()[:200]!r}"
    if statuses[0] != ["0"]:
        why = " ".join(" ".join(line for line in lines[1:] if not line.startswith("status ")).split())
        return f"output count failed (find exited {statuses[0][0]}): {why[:300] or 'no message'}"
    return int(lines[0])


def _stamp(path: str | None, sections: Mapping[str, bytes], meta: Meta) -> str | None:
    """The path's line in the shared stat, read before the count, when it can be trusted to
    move with the next change (see ``sensors._base.probe.trusted_stamp``)."""
    return trusted_stamp(path, sections, meta.now)


def _same(
    memory: OutputsMemory,
    sections: Mapping[str, bytes],
    path: str | None,
    evidence: OutputsEvidence,
    pattern: str | None = None,
) -> _Count | str:
    """The last count again: the shared stat printed the stamp it was read under."""
    stamp = shared_stats(sections.get("stats")).get(path or "")
    if memory.count is None or stamp is None or stamp != memory.stamp:
        return "the probe's outputs section is missing"  # not what this check asked for
    if pattern is not None:
        evidence["pattern"] = pattern
    return _Count(memory.count, None, False, memory)  # checked_at is set by read_outputs


def _count_lines(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory,
    evidence: OutputsEvidence,
    run_since: float | None,
    asked: OutputsMemory | None = None,
) -> _Count | str:
    """The JSONL file's record count (incremental unless rewritten), or why it cannot be read.

    ``asked``: the memory the probe's request was built from, where a new run set it aside at
    this check: the records it counted are the file's, whoever's run wrote them."""
    if "outputs_same" in sections:
        same = _same(memory, sections, spec.lines, evidence)
        if not isinstance(same, str):
            tail_hex = memory.lines_fingerprint or "none"
            evidence["partial_record"] = tail_hex != "none" and not tail_hex.endswith("0a")
            evidence["size"] = memory.lines_size
        return same
    stamp = _stamp(spec.lines, sections, meta)
    raw = sections.get("lines")
    if raw is None:
        return "the probe's outputs section is missing"
    text = raw.decode("utf-8", "replace").strip()
    if text in ("missing", "unreadable"):
        return f"output file {text}: {spec.lines}"
    if text.startswith("notregular"):
        return f"output file is not a regular file: {text[11:].strip()} ({spec.lines})"
    try:
        ino_s, size_s, mtime_s, base_s, n_s, read_s, tail_hex = text.split()
        inode, size, mtime, base, n = int(ino_s), int(size_s), int(mtime_s), int(base_s), int(n_s)
        read = int(read_s)
    except ValueError:
        return f"record count unreadable: {text[:100]!r}"
    if read != size - base:
        # A tool that failed, or a file cut while it was read: not a count of what was not read.
        return f"record count unreadable: read {read} of {size - base} bytes ({spec.lines})"
    if size > 0 and tail_hex == "none":
        return f"record count unreadable: the file's last bytes could not be read ({spec.lines})"
    if (
        base > 0
        and memory.count is None
        and asked is not None
        and asked.count is not None
        and (inode, base) == (asked.lines_inode, asked.lines_size)
    ):
        # Counted on from where the memory the probe was built from left off (set aside by a
        # new run at this check), its bytes before ``base`` unchanged (the probe compared
        # their last bytes): its count is the file's up to there, as a whole count would find
        # (fuzzer seed 159: a recount cost the new run a check).
        memory = replace(memory, count=asked.count, lines_inode=inode, lines_size=base)
    if base > 0 and (memory.count is None or (inode, base) != (memory.lines_inode, memory.lines_size)):
        # Counted on from where another memory left off: this one was set aside after the
        # probe was built (a new run of the job, see the Checker), and the records before
        # ``base`` are not counted in it. Adding to what it does not know would keep a count
        # short for good (0/6 with 6 on disk: a re-run that rewrote the same records, which
        # every later check counts on from the same end). Counted whole at the next check,
        # as the log is read whole (``sensors._signals.log``).
        return (
            "the records were counted on from where an earlier check left off (its memory was"
            f" set aside: a new run); counted from the start at the next check ({spec.lines})"
        )
    if base == 0 and memory.lines_size > 0 and memory.lines_inode == inode and size >= memory.lines_size:
        # Same inode, not shorter, but the bytes before the last end changed: rewritten in
        # place (truncated and regrown past its old size). Counted again from the start.
        evidence["rewritten"] = True
    count = ((memory.count or 0) if base > 0 else 0) + n
    partial = tail_hex != "none" and not tail_hex.endswith("0a")
    evidence["partial_record"] = partial
    evidence["size"] = size
    changed = None
    if partial:
        changed = "a record is being written (the file does not end with a newline)"
    elif memory.lines_inode is not None and (inode, size) != (memory.lines_inode, memory.lines_size):
        changed = "the file changed since the last check"
    new_memory = OutputsMemory(
        count=count,
        lines_inode=inode,
        lines_size=size,
        lines_fingerprint=None if tail_hex == "none" else tail_hex,
        checked_at=meta.now,
        stamp=stamp,
    )
    # Written during the run: after its start, and not in the host's future (file times come
    # from whoever wrote the file: a file server's clock may be ahead; on such a file system,
    # after the start by the tolerance too).
    # On the host's own clock (a local file system, or not known), a time ahead of it was set
    # by a tool, not written (see OWN_CLOCK_SLACK).
    foreign = "lines_fs" in sections and not own_clock(sections.get("lines_fs"))
    latest = (meta.now_end or meta.now or 0.0) + (FILE_CLOCK_TOLERANCE if foreign else OWN_CLOCK_SLACK)
    earliest = None if run_since is None else run_since
    if earliest is not None and foreign:
        earliest += FILE_CLOCK_TOLERANCE
    replaced = base == 0 and memory.lines_size > 0
    ahead = earliest is not None and not foreign and mtime > latest
    written = earliest is not None and earliest <= mtime <= latest
    return _Count(count, changed, written, new_memory, replaced, ahead=ahead)


def read_outputs(
    spec: OutputsSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: OutputsMemory | None,
    *,
    host: str,
    run_since: float | None = None,
    last_word: LastWord | None = None,
    over: bool = False,
    exited: float | None = None,
    launched: bool = False,
    job_alive: bool = False,
    asked_with: OutputsMemory | None = None,
) -> tuple[Reading, OutputsMemory]:
    """Read the outputs signal: the count against the expected number, and stability.

    Outputs may predate the run (resumable jobs skip what exists), so the count stays a
    count; ``written_this_run`` says whether an output was written while the run went on
    (the count moved during this watch, or one is newer than ``run_since``).

    ``job_alive``: the process signal found the job's PIDs live at this check. A count kept
    at the expected number (the probe did not list again: the job was alive at the last
    check) says done only with the job alive now, when the stage is running whatever the
    outputs say; where the job is found gone, the count that may decide is the next check's
    own listing. ``asked_with``: the memory the probe's request was built from, where a new
    run set it aside at this check (a JSONL count goes on from it: see ``_count_lines``).
    """
    memory = memory or OutputsMemory()
    where = spec.files or spec.lines
    evidence = OutputsEvidence(path=where, expected=spec.expected)
    got = (
        _count_files(spec, sections, meta, memory, evidence)
        if spec.files
        else _count_lines(spec, sections, meta, memory, evidence, run_since, asked_with)
    )
    if isinstance(got, str):
        unknown: dict[str, object] = {"path": where, "count": None, "expected": spec.expected}
        if got.startswith(("output directory missing", "output file missing")):
            unknown["absent"] = True  # not there (yet): its appearing is the job's first sign
        if over and memory.over_seen_at is None and unknown.get("absent"):
            # Found over with no outputs there: what appears from now on is not its own. Not
            # where they are there but went uncounted (unreadable, or a count a new run's
            # memory must take whole at the next check): that count is no change after the end
            # (fuzzer seeds 87, 105, 159: a new container found exited 0, its outputs then
            # "written after it was over", unknown for good).
            memory = evolve(memory, over_seen_at=meta.now, checked_at=meta.now)
        return Reading("outputs", Says.UNKNOWN, got, unknown, meta.now, host), memory
    count, expected = got.count, spec.expected
    first = memory.first_count if memory.first_count is not None else count
    times_ahead = memory.times_ahead or got.ahead
    written = memory.written_this_run or (got.written and not times_ahead) or count != first
    ident = shared_stats(sections.get("stats")).get(where or "") if where else None
    after_line = _after_line(memory, got, ident, expected, last_word, on_local_fs(where, sections))
    seen_at = memory.over_seen_at
    # The count asked for an entry written after the recorded exit (see ``_exit_since``).
    asked = spec.files is not None and _exit_since(memory) is not None and got.asked_exit
    after_exit = (
        memory.after_exit
        or (asked and got.exit_name is not None)
        or (
            seen_at is not None
            and memory.checked_at is not None
            # On another host's file system a count or stat may be cached from before the end.
            and (on_local_fs(where, sections) or memory.checked_at >= seen_at + ATTRIBUTE_CACHE_GRACE)
            and _wrote(memory, got, ident)
        )
    )
    new_memory = evolve(
        got.memory,
        checked_at=meta.now,
        first_count=first,
        written_this_run=written,
        times_ahead=times_ahead,
        at_expected=count >= expected,
        ident=ident if ident is not None else memory.ident,
        line_end=None if last_word is None else last_word.end,
        after_line=after_line,
        over_seen_at=seen_at if seen_at is not None else (meta.now if over else None),
        exited_at=memory.exited_at if memory.exited_at is not None else exited,
        exit_scanned=memory.exit_scanned or asked,
        after_exit=after_exit,
        writer_seen_at=_writer_seen_at(memory, last_word, meta),
    )
    if after_exit:
        evidence["count"] = count
        evidence["previous_count"] = memory.count
        evidence["written_after_exit"] = True
        return Reading(
            "outputs",
            Says.UNKNOWN,
            f"{count}/{expected} outputs, but outputs were written after the launched job was over"
            " (a check found them changed after it had found the job over, or an entry's mtime is"
            " after its recorded exit): a later run (or a process the job left behind) wrote them,"
            " and they are not the launched run's outputs as it left them",
            evidence,
            meta.now,
            host,
        ), new_memory
    newer = (
        None
        if launched
        else _newer_than_log(
            where, sections, ident, got.newest, spec.files is not None, last_word, new_memory.writer_seen_at
        )
    )
    if newer is not None:
        evidence["count"] = count
        evidence["previous_count"] = memory.count
        evidence["written_this_run"] = written
        if times_ahead:
            evidence["times_ahead"] = True
        evidence["modified_after_log"] = True
        if new_memory.writer_seen_at is not None:
            why = (
                "after this watch last saw the job at work: by the job after its completion line,"
                " or by a later run, which cannot be told, nor whether that writer ended well."
                " Have the job write its completion line last (after closing its outputs), or"
                " launch it through crosscheck (its exit status is recorded)"
            )
        else:
            why = (
                "and no process of the run was seen at work since: the completion line may be an"
                " earlier run's and these outputs a later run's, which cannot be told. Watch the job"
                " with a process section while it runs, launch it through crosscheck, or have it"
                " write its completion line last"
            )
        return Reading(
            "outputs",
            Says.UNKNOWN,
            f"{count}/{expected} outputs, but {newer}, {why}",
            evidence,
            meta.now,
            host,
        ), new_memory
    if last_word is not None and last_word.done and after_line == last_word.end:
        evidence["count"] = count
        evidence["previous_count"] = memory.count
        evidence["written_this_run"] = written
        if times_ahead:
            evidence["times_ahead"] = True
        evidence["written_after_complete_line"] = True
        return Reading(
            "outputs",
            Says.UNKNOWN,
            f"{count}/{expected} outputs, but they were written after the log's completion line was"
            " found, and no process of the job was alive to have written them: the completion line"
            " is not its run's last word (a later run at work?), and whose outputs these are cannot"
            " be told. Watch the job with a process section that finds it, launch it through"
            " crosscheck, or have it write its completion line last",
            evidence,
            meta.now,
            host,
        ), new_memory
    # A directory as the last count left it (the shared stat found its stamp): the reading is
    # a function of this key alone (no entry listed, nothing changed in place), built once.
    unchanged = got.memory is memory and spec.files is not None
    # A count kept at the expected number with the job not found alive: not yet weighed.
    unweighed = "outputs_same" in sections and count >= expected and not job_alive
    same = (host, where, expected, spec.pattern, count, written, unweighed) if unchanged else None
    if same is not None and (again := _UNCHANGED.again(same, meta.now)) is not None:
        return again, new_memory
    evidence["count"] = count
    evidence["previous_count"] = memory.count
    evidence["written_this_run"] = written
    if times_ahead:
        evidence["times_ahead"] = True
    stable = memory.count is not None and memory.count == count
    if count >= expected and stable and got.changed:
        # Same count, but written in place: a file finished only when it stops changing.
        says, detail = Says.WORKING, f"{count}/{expected} outputs, but {got.changed}"
    elif count >= expected and stable and spec.files and exited is not None and not new_memory.exit_scanned:
        says, detail = (
            Says.WORKING,
            f"{count}/{expected} outputs; confirming none was written after the launched job's exit",
        )
    elif count >= expected and stable and unweighed:
        says, detail = (
            Says.WORKING,
            f"{count}/{expected} outputs (the last check's count: the job was alive);"
            " counting them again now that it is not",
        )
    elif count >= expected and stable and _unasked(spec, sections, last_word, launched):
        # The probe did not ask for the last change under the outputs (the job was alive at
        # the last check): whether it came after the log's completion line is the next check's.
        says, detail = (
            Says.WORKING,
            f"{count}/{expected} outputs; confirming none changed after the log's completion line",
        )
    elif count >= expected and stable:
        says, detail = Says.DONE, f"{count}/{expected} outputs, unchanged since last check"
    elif count >= expected:
        says, detail = Says.WORKING, f"{count}/{expected} outputs; confirming they stopped changing"
    else:
        says, detail = Says.WORKING, f"{count}/{expected} outputs"
    reading = Reading("outputs", says, detail, evidence, meta.now, host)
    if same is not None:
        _UNCHANGED.keep(same, reading)
    return reading, new_memory


def _newer_than_log(
    where: str | None,
    sections: Mapping[str, bytes],
    ident: str | None,
    newest: tuple[float, str] | None,
    files: bool,
    last_word: LastWord | None,
    writer_seen_at: float | None,
) -> str | None:
    """How the outputs were found changed after the log's last write, when that makes the
    log's completion line not known to be their run's last word (None: it does not).

    A completion line found with no process of the job at work cannot be told from an
    earlier run's by the log alone. Outputs changed after the log was last written were
    changed after that line: by the job's own post-processing (a file closed after the line
    was logged), or by a later run that wrote nothing to the log (a launcher that cleans the
    outputs first, a resumed run killed before its first line). Changed no later than this
    watch last saw one of the line's writers alive, they may be its own; changed after it (or
    never seen alive: a watch begun after the job, or a process section that does not find
    it), whose they are, and whether that writer ended well, cannot be told, as for text after
    the line (``sensors._signals.log``). A launched run's exit record tells (not here).

    Compared: the last change under the outputs (a directory's: every output and what is
    inside one, links followed, by ``__cc_newest``; a JSONL file's own) by its ctime, which
    every change moves and nothing sets back, with the log's mtime (the same probe), and the
    last sighting on the host's clock; where times come from another clock than the host's,
    only beyond the tolerance such clocks are given. Equal times are not "after": the kernel
    stamps files from a clock that moves in ticks of a few milliseconds, and a job that
    writes its last output and then its line within one tick must complete.
    """
    if last_word is None or not last_word.done or last_word.writer_alive:
        return None
    if files:
        if newest is None:
            return None
        changed, name = newest
    else:
        ctime = _ctime(ident)
        if ctime is None:
            return None
        changed, name = ctime, where or ""
    own = on_local_fs(where, sections)
    margin = 0.0 if last_word.log_own_clock and own else FILE_CLOCK_TOLERANCE
    after_log = last_word.log_written is not None and changed > last_word.log_written + margin
    # Changed after this watch had found the line (host clock, outputs stamped by it): after
    # the line, whatever the log's own times say (another clock's, or set ahead).
    after_seen = own and last_word.seen_at is not None and changed > last_word.seen_at
    if not (after_log or after_seen):
        return None
    if writer_seen_at is not None and changed <= writer_seen_at + (0.0 if own else FILE_CLOCK_TOLERANCE):
        return None
    if own and last_word.writers_end is not None and changed <= last_word.writers_end:
        # Changed before the line's writers ended (their end seen, on the host's clock: see
        # ``JobView.ends``): their own work after the line.
        return None
    if after_log and last_word.log_written is not None:
        return f"{name} changed {changed - last_word.log_written:.3f} s after the log's last write"
    return f"{name} changed after this watch had found the log's completion line"


def _unasked(
    spec: OutputsSpec, sections: Mapping[str, bytes], last_word: LastWord | None, launched: bool
) -> bool:
    """Whether a directory's outputs could complete a stage on a completion line that this
    check could not weigh them against: the last change under them was not asked for."""
    return (
        spec.files is not None
        and not launched
        and last_word is not None
        and last_word.done
        and not last_word.writer_alive
        and "outputs_newest" not in sections
    )


def _writer_seen_at(memory: OutputsMemory, last_word: LastWord | None, meta: Meta) -> float | None:
    """The last check that found one of the completion line's writers alive (for this line:
    another line has other writers, and an earlier line's sighting says nothing of them)."""
    if last_word is None:
        return None
    before = memory.writer_seen_at if memory.line_end == last_word.end else None
    return (meta.now_end or meta.now) if last_word.writer_alive else before


def _after_line(
    memory: OutputsMemory,
    got: _Count,
    ident: str | None,
    expected: int,
    last_word: LastWord | None,
    own: bool = False,
) -> int | None:
    """The end of the completion line outputs were written after (sticky), or None.

    Outputs written after this watch found the run's completion line, while no process of the
    job is alive to have written them (post-processing is its own work), make that line not
    its run's last word: a later run (one the process signal cannot see, or a stage without
    one) may be at work. "After" is by this watch's own checks: the last reading was made with
    the line already in the log, and this one finds the outputs changed (the count, a file
    replaced or rewritten — the same bytes included —, the path's stat): no file time, which
    may come from another clock, is read (a directory's entry "modified since the last check"
    is: it keeps a count at the expected number from settling, no more). Outputs still
    landing (a count short of the expected number that only grew, the same file appended to)
    are the run's own, late: not so. Nor a change stamped, on the host's own clock (``own``),
    no later than the end of the line's writers the exit watch saw (``writers_end``): their
    own work, though the last reading did not show it (its outputs' stamp read before the log,
    in a probe inside which the job wrote its last output, its line and ended).
    """
    if last_word is None or last_word.job_alive or memory.line_end != last_word.end:
        return memory.after_line
    count, before = got.count, memory.count
    landing = before is not None and before < expected and count > before and not got.replaced
    if _wrote(memory, got, ident) and not landing:
        changed = got.newest[0] if got.newest is not None else _ctime(ident)
        ended = last_word.writers_end
        if own and changed is not None and ended is not None and changed <= ended:
            return memory.after_line
        return last_word.end
    return memory.after_line


def _ctime(ident: str | None) -> float | None:
    """The ctime in a shared stat line (``STAT_FORMAT``: the sixth field), None: not there."""
    try:
        return float((ident or "").split(" ", 6)[5])
    except (IndexError, ValueError):
        return None


def _wrote(memory: OutputsMemory, got: _Count, ident: str | None) -> bool:
    """Whether the outputs changed since the last reading, by this watch's own checks: the
    count, a file replaced or rewritten (the same bytes included), the path's stat (compared
    for equality only: no file time, which may come from another clock, is read)."""
    before = memory.count
    return (
        (before is not None and got.count != before)
        or (before is None and memory.checked_at is not None)  # none to count at the last reading
        or (got.changed is not None and memory.lines_inode is not None)  # a JSONL file's stat
        or got.replaced
        or (ident is not None and memory.ident is not None and ident != memory.ident)
    )


#: Readings of unchanged directories (see read_outputs), by what they are built from.
_UNCHANGED = Reread()


# --------------------------------------------------------------------------- the signal


def _read(
    spec: OutputsSpec, sections: Mapping[str, bytes], memory: OutputsMemory, facts: CheckFacts
) -> tuple[Reading, OutputsMemory, CheckFacts]:
    reading, new_memory = read_outputs(
        spec,
        sections,
        facts.meta,
        memory,
        host=facts.host,
        run_since=facts.run_start,
        last_word=facts.last_word,
        over=facts.launch is not None and facts.launch.over,
        exited=facts.launch.exited_by if facts.launch is not None else None,
        launched=facts.launch is not None,
        job_alive=bool(facts.job_pids) and not facts.job_unread,
        asked_with=asked if isinstance(asked := facts.set_aside.get("outputs"), OutputsMemory) else None,
    )
    return reading, new_memory, facts


SIGNAL: Signal[OutputsSpec, OutputsMemory] = Signal("outputs", OutputsMemory, snippet, _read)
