"""The process signal: is the job alive, in which state, is its CPU time moving, how old is it.

Everything the signal knows lives here: its schema fragment (:class:`ProcessSpec`), its probe
snippet (``/proc/*/stat`` and every command line, framed per record: see ``procfs``), its
parser, its memory (the identities it has seen) and its evidence. Rules it keeps:

- ``ps`` is never run. procps-ng 4.0.1 to 4.0.4 wraps elapsed time in unsigned arithmetic when
  /proc/uptime is virtualised (lxcfs), printing e.g. ``441077231-01:14:40`` (2^64/100/86400
  days; fixed upstream in procps-ng commit a5fad53b): start ticks are read from
  /proc/PID/stat and set against two boot clocks instead.
- The regex never leaves this process: command lines come back raw and are matched here, so
  the pattern is on no command line of the monitored host (``pgrep -f`` over SSH matches the
  remote shell whose own command line holds the pattern), and the probe and its ancestors
  are never matched.
- Identity is (boot_id, pid, start ticks): a reused PID is another process.
- Whose process a match is, is its real uid (``owner_lines``): with ``process.user`` another
  user's look-alike is not the job; without it, several users' matches are named.
"""

from __future__ import annotations

import bisect
import functools
import re
import shlex
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal, NamedTuple, NotRequired, TypedDict, cast

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from sensors._base.model import Reading, Says
from sensors._base.probe import ESCAPE, Meta
from sensors._base.regex import compile_user_regex, required_text, to_utf8
from sensors._base.schema import Regex, Section
from sensors._base.text import redact
from sensors._base.tolerances import RERUN_START_GAP, WHOLE_SECOND
from sensors._run.run import Run, describe_exit, read_exit_record
from sensors._signals.base import CheckFacts, JobView, ProbeInputs, Reread, Signal
from sensors._signals.procfs import (
    ALIVE_STATES,
    CMDLINE_CAP,
    CMDLINE_PER_PROCESS,
    STAT_CAP,
    TASKS_CAP,
    Cmdlines,
    ProcStat,
    ancestors,
    children_of,
    descendants,
    effective_state,
    elapsed,
    parse_cmdlines,
    parse_io,
    parse_stats,
    parse_task_cmdlines,
    parse_task_stats,
    start_lead,
    start_precision,
)

_CMD_EVIDENCE = 512

#: A user name as ``process.user`` takes it: POSIX's portable characters (and Samba's
#: trailing ``$``), never a leading ``-`` (it goes on ``id``'s command line, quoted).
_USER_NAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,255}\$?")
#: uid_t is 32 bits and (uid_t)-1 means "no change" to setresuid: no process has it.
_MAX_UID = 2**32 - 2


def _user(value: object) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= _MAX_UID:
            raise ValueError(f"uid {value} is out of range (0 to {_MAX_UID})")
        return value
    if not isinstance(value, str) or not _USER_NAME.fullmatch(value):
        raise ValueError("expected a user name (letters, digits, . _ -) or a numeric uid")
    if value.isdigit():
        # A name of digits alone would be read as a uid by some tools and as a name by others.
        raise ValueError(f"{value!r}: give a uid as a number (user: {value}), not a string")
    return value


User = Annotated[
    int | str,
    BeforeValidator(_user),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": _MAX_UID},
                {"type": "string", "pattern": r"^[A-Za-z0-9._][A-Za-z0-9._-]*\$?$", "maxLength": 257},
            ],
            "description": "the user the job runs as (its processes' real uid), a name or a uid,"
            " resolved on the monitored host",
        }
    ),
]


class ProcessSpec(Section):
    """Which process is the job: a regex over the full command line, or a PID."""

    match: Regex | None = Field(
        None, description="regex searched in the command line (argv joined by spaces)"
    )
    # pid_t is a 32-bit int: no PID is higher.
    pid: int | None = Field(None, gt=0, le=2**31 - 1, description="the job's PID, instead of match")
    user: User | None = Field(
        None,
        description="the user the job runs as (a name, resolved on the monitored host, or a uid):"
        " matches whose real uid is another user's are not the job (listed, ignored)",
    )
    scope: Literal["host", "visible"] = Field(
        "host",
        description="host: the job may be any process of the host, so a probe that cannot see"
        " every process (hidepid, a PID namespace of its own) never reads 'no match' as gone;"
        " visible: the job always runs where the probe sees it (the same user, the same container)",
    )

    per_host: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="a stage over several hosts: how many job processes each host runs (its ranks, e.g. 8);"
        " fewer alive while the others wait is a rank lost",
    )

    @model_validator(mode="after")
    def _one_of(self) -> ProcessSpec:
        # Neither: the job's processes are those its supervisor's record names (the stage
        # needs a supervisor; checked with the stage).
        if self.match is not None and self.pid is not None:
            raise ValueError("give exactly one of match or pid")
        if self.user is not None and self.match is None:
            raise ValueError("process.user narrows a match: give process.match with it")
        return self

    @property
    def supervised(self) -> bool:
        """No match, no PID: the job is the processes the supervisor's record names."""
        return self.match is None and self.pid is None


@dataclass(frozen=True)
class ProcessMemory:
    """What the process signal remembers: identities seen ((boot_id, pid) → start ticks),
    the job as last seen alive, and its PIDs at the last check (their /proc/PID/io is read)."""

    boot_id: str | None = None
    identities: Mapping[int, int] = field(default_factory=dict)
    first_pids: tuple[int, ...] = ()
    last_seen: Mapping[str, object] | None = None  # the job as last seen alive
    job_pids: tuple[int, ...] = ()
    # The view of the probe that saw it alive (``Meta.view``): only that view's "no match"
    # is an exit when the probe cannot see every process (None: not known, an older memory).
    seen_view: str | None = None
    run_pids: tuple[int, ...] = ()  # this run's live matched PIDs at the last check
    # Those of them alive when the last check's probe read the files (it reads them after its
    # clock and before its /proc scan): alive at the check before too, or begun clearly before
    # that clock read. One first found by the scan may have begun after the log was read, and
    # is no writer of a line that read did not find (fuzzer seed 8200018, under load: a re-run
    # begun between a slow probe's log stat and its scan took its predecessor's line, written
    # in between, for its own).
    run_at_read: tuple[int, ...] = ()
    # This run's PIDs alive at the check before the last and not at the last: each ended
    # between those two /proc scans, so perhaps after the last check's log stat, which the
    # probe takes before its scan (a line absent then may still be theirs: see the log's
    # ``_whose``).
    run_ended: tuple[int, ...] = ()
    # A launched run: when this watch first found the launched PID gone (its end, at the
    # latest, where no exit record tells it), and a later run's process seen since (a match
    # begun after the launched job ended, not its descendant): the launched run is over and
    # what is read from now on is that later run's.
    launched_gone_at: float | None = None
    superseded_by: int | None = None
    # Whether ``superseded_by`` began too close to the launched job's end to be ordered
    # against it (seed 507217: a re-run begun at once after the recorded exit passed for the
    # launched job's).
    unordered: bool = False
    # Without process.user: the owners (uid, name as shown) of the live matches this watch saw,
    # when they were several users' (a look-alike of another user's holds the stage too).
    owners_seen: tuple[tuple[int, str], ...] = ()
    # The earlier runs' processes seen ((pid, start ticks)): a child an earlier run's job
    # forked after the run began stays that run's once its parent is gone (reparented).
    earlier_kin: tuple[tuple[int, int], ...] = ()
    # When a check first found none of this run's processes alive after the watch saw one
    # (the host's clock read just before that check's /proc scan; None: not so, or alive
    # since). A match alive now began after that scan, or the scan would have found it (a
    # child the run forked before its end has the run's command line until it execs); begun
    # clearly after this moment, the start says so too: the job was run again (see ``_read``).
    seen_gone_at: float | None = None


#: The most earlier-run processes remembered (the oldest are forgotten first).
_EARLIER_KIN = 64


class ProcessEntry(TypedDict):
    """One matched process in the evidence (``processes``), as :func:`_describe` writes it."""

    pid: int
    ppid: int
    state: str
    threads: int
    cpu_seconds: float
    elapsed_seconds: float | None
    start_ticks: int
    cmdline: str  # redacted, then cut
    started_at: float | None  # when it began (the host's clock, to the ms)
    elapsed_unknown: NotRequired[str]  # why elapsed_seconds is None
    note: NotRequired[str]  # what effective_state saw past a zombie leader
    env_rank: NotRequired[int]  # its environment's RANK (read for the job's PIDs known at the last check)
    env_local_rank: NotRequired[int]  # its environment's LOCAL_RANK


class ProcessEvidence(TypedDict, total=False):
    """The process reading's evidence (the JSON the CLI prints, key for key)."""

    how: str
    pid: int | None
    state: str | None
    cpu_seconds: float | None
    elapsed_seconds: float | None
    io_bytes: int | None
    alive: int
    matched: int
    ranks: int  # the live matches whose parent is not matched too (a rank's forked workers are not)
    descendants: int
    processes: list[ProcessEntry]
    boot_id: str | None
    started_at: float | None  # the earliest live job process's start (host clock)
    last_seen_alive: dict[str, object]
    seen_alive: bool  # this watch saw the job alive
    launched: bool  # the PID crosscheck launched for this run
    elapsed_unknown: str
    cut_pids: list[int]
    hidden: str  # why the probe cannot see every process of the host
    earlier_runs: list[int]  # live matches that started before this run began
    exit_status: int | None  # the launched job's, as its launch wrapper recorded it
    exited_at: float | None
    exit_record: str  # where the launch wrapper records it, when it has not (yet)
    exit_record_unreadable: str  # the record is another user's: how the job ended is not known here
    ignored: list[str]  # matches of users other than process.user: "pid N owned by uid U (user X)"
    users: list[str]  # without process.user: the several users whose matches this watch saw
    exit_record_untrusted: str  # another user could have written the record: it is not read


# --------------------------------------------------------------------------- probe snippet


def snippet(spec: ProcessSpec, memory: ProcessMemory, probe: ProbeInputs) -> list[str]:
    """Every /proc/PID/stat and command line, framed per record, and every process's real
    uid (unless a batch reads them once for all its stages: ``probe.table``); the uid of
    ``process.user`` on the host; the job's /proc/PID/io."""
    lines = list(table_lines()) if probe.table else []
    if probe.table and spec.match is not None:
        lines += owner_lines()
    if isinstance(spec.user, str):
        # Resolved where the job runs, at every check (one fork; NSS: a directory's users too).
        # What fails says why: no such user (1), or no id command (127).
        lines += ["sec procuser", f'id -u {shlex.quote(spec.user)} 2>/dev/null || echo "none $?"']
    if memory.job_pids:
        pids = " ".join(str(int(p)) for p in memory.job_pids[:64])
        lines += [
            "sec io",
            f"for p in {pids}; do",
            '  echo "== $p"',
            "  while IFS=': ' read -r k v; do case $k in rchar|wchar) echo \"$k: $v\";; esac;"
            " done </proc/$p/io 2>/dev/null",
            "done",
            # Each process's RANK and LOCAL_RANK (torchrun passes them in the environment, not
            # on the command line): what names a rank lost from a stage over several hosts.
            # Readable for the job's own user or root; a value is digits or it is not read.
            "sec rankenv",
            "grep -a -z -H -E '^(RANK|LOCAL_RANK)=[0-9]{1,6}$' "
            + " ".join(f"/proc/{int(p)}/environ" for p in memory.job_pids[:64])
            + f" 2>/dev/null | head -c {_RANK_ENV_CAP} | {ESCAPE}",
        ]
    return lines


#: The most bytes of the rank variables read back (64 processes' two variables, with room).
_RANK_ENV_CAP = 8192
_RANK_ENV = re.compile(rb"/proc/(\d+)/environ:(RANK|LOCAL_RANK)=(\d{1,6})")


def parse_rank_env(body: bytes | None) -> dict[int, dict[str, int]]:
    """PID → its ``RANK``/``LOCAL_RANK`` from ``grep -z -H`` over its environ: each record
    ``/proc/PID/environ:NAME=DIGITS``; anything else (a piece cut by the cap, a value the
    pattern let through with a newline in it) is not read."""
    found: dict[int, dict[str, int]] = {}
    for piece in (body or b"").split(b"\0"):
        m = _RANK_ENV.fullmatch(piece)
        if m is not None:
            key = "env_rank" if m.group(2) == b"RANK" else "env_local_rank"
            found.setdefault(int(m.group(1)), {})[key] = int(m.group(3))
    return found


#: How a probe's own readers of the table read in the command lines (see ``_ProcessTable``):
#: the cmdline scan's ``grep``, and the stat and task scans' ``head``.
_STAT_READER = "head -c 4096 /dev/null"
_OWN_READERS = ("grep -a -z -H  /proc/", f"{_STAT_READER} /proc/")


@functools.cache
def table_lines() -> tuple[str, ...]:
    """The process table's sections: every /proc/PID/stat and command line.

    No record boundary depends on a secret (none is on any command line, where every user
    could read it):

    - ``stat``: ``head``'s ``==> /proc/PID/stat <==`` headers. The only text a process
      controls in its stat is its comm, at most 15 bytes (TASK_COMM_LEN), between fixed
      fields: too short to hold a header, and it holds no NUL.
    - ``cmdline``: ``grep -z -H``: every NUL-ended piece of a command line (one argument)
      comes out as ``/proc/PID/cmdline:ARG`` and a NUL. An argument holds no NUL, so no
      byte of it can start another process's piece.

    Both pass through :data:`~sensors._base.probe.ESCAPE` (a comm or an argument may hold a
    newline and an ``@``).
    """
    return (
        # The command lines first, the stats after: a process the stat scan shows alive that
        # began before the probe was alive all through the cmdline scan, so a command line
        # missing for it was not missed by a race with its exit (``_unread``).
        "sec cmdline",
        # The whole command line of every process (longer than CMDLINE_PER_PROCESS: "cut",
        # and its match unknown, never "no match").
        f'grep -a -z -H "" /proc/[0-9]*/cmdline 2>/dev/null | head -c {CMDLINE_CAP} | {ESCAPE}',
        "sec stat",
        # A thread-group leader that called pthread_exit shows Z while its threads run: awk
        # passes every line through (escaped) and names such zombie leaders (rare) on its
        # stderr, whose threads' records the shell reads into the next sections. $1 must be
        # digits: a comm may hold a newline; nothing a process wrote reaches a command.
        "exec 4>&1",
        f"Z=$({{ {_STAT_READER} /proc/[0-9]*/stat 2>/dev/null"
        f" | head -c {STAT_CAP} | awk '"
        '{ if ($0 ~ /^[@\\\\]/) printf "\\\\"; print } '
        # Only zombie leaders that still count threads (field 20 > 1): plain zombies are
        # common where PID 1 does not reap (containers) and must cost nothing.
        '/[)] Z / && $1 ~ /^[0-9]+$/ { r = $0; sub(/.*[)] /, "", r); split(r, f, " "); '
        'if (f[1] == "Z" && f[18] > 1) z = z " " $1 } '
        'END { printf "%s", z > "/dev/stderr" }\' 2>&3 3>&- >&4 4>&-; } 3>&1)',
        "exec 4>&-",
        # Their threads' records: the same framing (a glob per leader, expanded unquoted).
        'T=; C=; for p in $Z; do isnum "$p" &&'
        ' T="$T /proc/$p/task/*/stat" && C="$C /proc/$p/task/*/cmdline"; done',
        "sec tasks",
        f'[ -n "$T" ] && {_STAT_READER} $T 2>/dev/null | head -c {TASKS_CAP} | {ESCAPE}',
        # A zombie leader's own cmdline reads empty; its live threads still show it.
        "sec taskcmd",
        f'[ -n "$C" ] && grep -a -z -H "" $C 2>/dev/null | head -c {TASKS_CAP} | {ESCAPE}',
    )


#: How many users' matches a watch remembers (``ProcessMemory.owners_seen``).
_OWNERS_SEEN = 16

#: The owners section's cap: "PID UID" per process, ~320 KB for 20k processes.
OWNERS_CAP = 4 * 1024 * 1024


@functools.cache
def owner_lines() -> tuple[str, ...]:
    """Each process's real uid (``PID UID``), then the host's names for those uids.

    Its own section, after the table (whose framing is ``table_lines``'s): read for every
    process, since the regex is matched here, after the probe. From /proc/PID/status's Uid
    line, its first field (the real uid), not the owner of /proc/PID (``stat -c %u``, ~2x
    cheaper: 2.3 ms against 5-6 ms for 485 processes here), which is the effective uid: a
    user who runs a setuid-root program (``su``) under a forged argv[0] showed uid 0 there and
    ``Uid: 1002 0 0 0`` here. An unprivileged process cannot change its real uid. The status
    file's only text a process writes is its Name, which the kernel escapes (no newline): a
    PID with two Uid lines that disagree is read as unknown (see ``_Owners``). Names come from
    the host's /etc/passwd, read by the same awk (no fork), after a ``names`` line, and a
    ``done`` line ends them (no ``done``: the section was cut); a uid of a directory (LDAP)
    shows as "uid N". No value of the probe's is on awk's command line.
    """
    return (
        "sec owners",
        "grep -s -H '^Uid:' /proc/[0-9]*/status | awk '"
        "$1 ~ /^\\/proc\\/[0-9]+\\/status:Uid:$/ && $2 ~ /^[0-9]+$/ "
        '{ p = substr($1, 7); sub(/\\/.*/, "", p); print p, $2; u[$2] = 1 } '
        'END { print "names"; '
        'while ((getline l < "/etc/passwd") > 0) { n = split(l, f, ":"); '
        'if (n > 2 && (f[3] in u)) { print f[3], f[1]; delete u[f[3]] } } print "done" }\''
        f" | head -c {OWNERS_CAP}",
    )


# --------------------------------------------------------------------------- reading


#: Per thread: while a batch's stages read one probe (``sensors._check.batch``), the tables parsed
#: from it, keyed by the identity of the section bytes they came from; None outside a batch.
_batch_tables = threading.local()


@contextmanager
def parse_table_once() -> Iterator[None]:
    """Within this block (one probe's answer read by several stages, in this thread), the
    process table is parsed once and shared: it does not depend on the stage.

    The cache holds the section bytes it was keyed on, so no key can be reused by other
    bytes while the block lasts; it is dropped at the end.
    """
    outer = getattr(_batch_tables, "cache", None)
    _batch_tables.cache = {}
    try:
        yield
    finally:
        _batch_tables.cache = outer


@dataclass(frozen=True)
class _ProcessTable:
    """The process sections of one probe, parsed (read-only: stages of a batch share it)."""

    stats: Mapping[int, ProcStat]
    cmdlines: Mapping[int, str]
    cut: frozenset[int]
    tasks: Mapping[int, list[ProcStat]]
    #: The command lines passed CMDLINE_CAP: those after the last one read were not read.
    capped: bool = False

    @functools.cached_property
    def searchable(self) -> tuple[tuple[int, str, bytes], ...]:
        """The command lines a pattern is searched in (not empty, not cut), each with its
        UTF-8 form: encoded once per table, whatever the number of stages reading it."""
        cut = self.cut
        return tuple((pid, cmd, to_utf8(cmd)) for pid, cmd in self.cmdlines.items() if cmd and pid not in cut)

    @functools.cached_property
    def children(self) -> dict[int, list[int]]:
        """PPID → its children: built once per table, whatever the number of stages."""
        return children_of(self.stats)

    @functools.cached_property
    def _joined(self) -> tuple[bytes, list[int]]:
        """The searchable command lines in one text, NUL between them (a command line holds
        none: its argv's NULs are spaces), and where each begins."""
        starts, at = [], 0
        for _, _, utf8 in self.searchable:
            starts.append(at)
            at += len(utf8) + 1
        return b"\0".join(utf8 for _, _, utf8 in self.searchable), starts

    def holding(self, text: bytes) -> list[tuple[int, str, bytes]]:
        """The searchable command lines that contain ``text`` (no NUL in it), in order: one
        ``find`` pass over the table, not one search per line."""
        joined, starts = self._joined
        lines, found = self.searchable, []
        at = joined.find(text)
        while at >= 0:
            k = bisect.bisect_right(starts, at) - 1
            found.append(lines[k])
            # Past the end of this line: each line is listed once.
            at = joined.find(text, starts[k + 1]) if k + 1 < len(starts) else -1
        return found

    @classmethod
    def parse(cls, sections: Mapping[str, bytes], nonce: str) -> _ProcessTable | str:
        """The table, or why it cannot be read (parsed once per probe inside a batch)."""
        cache = getattr(_batch_tables, "cache", None)
        if cache is None:
            return cls._parse(sections, nonce)
        get = sections.get
        bodies = (get("stat"), get("cmdline"), get("tasks"), get("taskcmd"))
        key = (nonce, id(bodies[0]), id(bodies[1]), id(bodies[2]), id(bodies[3]))
        hit: tuple[object, _ProcessTable | str] | None = cache.get(key)  # (bodies, table) or None
        if hit is None:
            cache[key] = hit = (bodies, cls._parse(sections, nonce))
        return hit[1]

    @classmethod
    def _parse(cls, sections: Mapping[str, bytes], nonce: str) -> _ProcessTable | str:
        stat_body, cmd_body = sections.get("stat"), sections.get("cmdline")
        if stat_body is None or cmd_body is None:
            return "the probe's process section is missing (output cut short)"
        if len(stat_body) >= STAT_CAP:
            return "the process table was too large to read in full"
        stats = parse_stats(stat_body)
        if not stats:
            return "no process could be read from /proc"
        cmds = parse_cmdlines(cmd_body)
        if len(cmd_body) >= CMDLINE_CAP and cmds.text:
            # Cut by the cap (another user's long command lines can fill it): the last one
            # read may be short of its end (cut), and the processes after it were not read
            # at all (unread: see _unread). What was read whole stands.
            cmds = Cmdlines(cmds.text, cmds.cut | {list(cmds.text)[-1]})
        # The probe's own `grep` reading the command lines is in them: its argv is every
        # /proc/PID/cmdline path, most of the table's text on a host of many processes
        # (searched again by every stage), and cut on one of ~20k (which would make every
        # "no match" unknown). Another probe's on the same host (a watch's other batch, a
        # CLI check beside `serve`) may be in them too, its grep or its stat scan's `head`.
        # Such a reader is never the job: it was over by this probe's stat scan (no stat
        # line), with a probe reader's argv; kept, it read "listed but its stat was
        # unreadable" for any pattern it matched. A process of that argv that has a stat
        # line is still at work, and stays (a job may be named anything).
        text = {
            pid: line for pid, line in cmds.text.items() if pid in stats or not line.startswith(_OWN_READERS)
        }
        cut = {pid for pid in cmds.cut if pid in text}
        threads = parse_task_cmdlines(sections.get("taskcmd"))
        for leader, line in threads.text.items():
            if not text.get(leader):
                text[leader] = line
                if leader in threads.cut:
                    cut.add(leader)
        capped = len(cmd_body) >= CMDLINE_CAP
        return cls(stats, text, frozenset(cut), parse_task_stats(sections.get("tasks")), capped)


@dataclass(frozen=True)
class _Owners:
    """The owners section, parsed: each process's real uid, and the host's names for them.

    ``whole``: the section came back whole (not missing, not cut at its cap). A PID not in
    ``uids`` (begun after the table was read, gone before its status was, or its Uid lines
    disagreeing) has no known owner: it is never set aside as another user's.
    """

    uids: Mapping[int, int]
    names: Mapping[int, str]
    whole: bool

    @classmethod
    def parse(cls, sections: Mapping[str, bytes]) -> _Owners:
        """Once per probe inside a batch (see ``parse_table_once``), like the table."""
        cache = getattr(_batch_tables, "cache", None)
        body = sections.get("owners")
        if cache is None:
            return cls._parse(body)
        key = ("owners", id(body))
        hit = cache.get(key)
        if hit is None:
            cache[key] = hit = (body, cls._parse(body))
        owners: _Owners = hit[1]
        return owners

    @classmethod
    def _parse(cls, body: bytes | None) -> _Owners:
        uids: dict[int, int] = {}
        torn: set[int] = set()
        text, named, rest = (b"\n" + (body or b"")).partition(b"\nnames\n")
        for line in text.split(b"\n"):
            pid_s, _, uid_s = line.partition(b" ")
            if pid_s.isdigit() and uid_s.isdigit():
                pid, uid = int(pid_s), int(uid_s)
                if uids.setdefault(pid, uid) != uid:
                    torn.add(pid)
        for pid in torn:
            del uids[pid]
        names: dict[int, str] = {}
        listed, done, end = rest.rpartition(b"done\n")
        for line in listed.split(b"\n"):
            uid_s, _, name = line.partition(b" ")
            if uid_s.isdigit() and name:
                names.setdefault(int(uid_s), name.decode("utf-8", "replace")[:64])
        # The names come after the owners, in the same capped stream: no end, no whole table.
        whole = body is not None and bool(named and done) and not end and len(body) < OWNERS_CAP - 64
        return cls(uids, names, whole)

    def label(self, uid: int) -> str:
        """A uid as a person reads it: its name on the host, or ``uid N``."""
        name = self.names.get(uid)
        return name if name is not None else f"uid {uid}"


def _resolve_user(spec: ProcessSpec, sections: Mapping[str, bytes], host: str) -> int | str:
    """``process.user`` as a uid on the monitored host, or why it is none."""
    user = spec.user
    if user is None or isinstance(user, int):
        return -1 if user is None else user  # None: not called so (-1 is no process's uid)
    answer = (sections.get("procuser") or b"").strip()
    if answer.isdigit():
        return int(answer)
    if answer == b"none 127":
        return f"process.user {user!r} cannot be resolved on {host}: it has no id command"
    if answer.startswith(b"none"):
        return f"process.user {user!r} is no user on {host} (id -u {user} knows none)"
    return f"process.user {user!r} could not be resolved on {host} (the probe's answer was cut short)"


def _describe(
    candidates: list[int], table: _ProcessTable, meta: Meta
) -> tuple[list[ProcessEntry], list[int], list[int], float | None]:
    """Evidence per candidate process, the live ones, those listed without a stat, and when
    the earliest live one started (host clock)."""
    processes: list[ProcessEntry] = []
    alive_pids: list[int] = []
    missing_stat: list[int] = []
    earliest: float | None = None
    for pid in candidates:
        st = table.stats.get(pid)
        if st is None:
            # Listed in cmdline but its stat line could not be parsed (or it just exited):
            # don't guess.
            if table.cmdlines.get(pid):
                missing_stat.append(pid)
            continue
        state, note = effective_state(st, table.tasks)
        age, elapsed_why = elapsed(st, meta)
        entry: ProcessEntry = {
            "pid": pid,
            "ppid": st.ppid,
            "state": state,
            "threads": st.num_threads,
            "cpu_seconds": _ticks_to_s(st.utime + st.stime, meta),
            "elapsed_seconds": None if age is None else round(age, 1),
            # Unrounded (to the ms): what run binding compares, never rebuilt from the shown
            # elapsed time (a tenth of a second off).
            "started_at": None if age is None or meta.now is None else round(meta.now - age, 3),
            "start_ticks": st.starttime,
            # Redacted whole, then cut: a secret cut in half would no longer look like one.
            "cmdline": redact(table.cmdlines.get(pid, ""))[:_CMD_EVIDENCE],
        }
        if elapsed_why:
            entry["elapsed_unknown"] = elapsed_why
        if note:
            entry["note"] = note
        processes.append(entry)
        if state in ALIVE_STATES:
            alive_pids.append(pid)
            started = entry["started_at"]
            if started is not None:
                earliest = started if earliest is None else min(earliest, started)
    return processes, alive_pids, missing_stat, earliest


def _alive_detail(
    main: Mapping[str, object] | None,
    processes: list[ProcessEntry],
    alive_pids: list[int],
    evidence: Mapping[str, object],
) -> str:
    assert main is not None
    states = "".join(sorted({str(p["state"]) for p in processes if p["pid"] in alive_pids}))
    detail = (
        f"pid {main['pid']} alive in state {main['state']}"
        + (f" ({len(alive_pids)} processes)" if len(alive_pids) > 1 else "")
        + f", cpu {evidence['cpu_seconds']:.1f}s"
    )
    if states == "D" or main["state"] == "D":
        detail += " — uninterruptible I/O wait (D)"
    return detail


def _ticks_to_s(ticks: int, meta: Meta) -> float:
    return round(ticks / (meta.clk_tck or 100), 2)


class _Found(NamedTuple):
    """Which processes are the job, how they were found, and whether a known PID was reused."""

    candidates: list[int]
    how: str
    reused: bool = False
    # Matches of users other than ``process.user``: (pid, real uid) each; not the job.
    ignored: tuple[tuple[int, int], ...] = ()


def _find(
    spec: ProcessSpec,
    table: _ProcessTable,
    memory: ProcessMemory,
    excluded: frozenset[int],
    boot_changed: bool,
    supervised: tuple[int, ...] = (),
) -> _Found:
    stats = table.stats
    if spec.supervised:
        # The record's processes as it names them at this check (the container's tree, the
        # unit's cgroup, the job's PIDs on this node), and no others: none is carried over
        # from an earlier check, so one odd read (Slurm's proctrack/linuxproc walks /proc
        # while a step starts or ends) holds nothing past the read that showed it.
        ours = {pid for pid in supervised if pid in stats and pid not in excluded}
        return _Found(sorted(ours), "the supervisor's processes")
    if spec.pid is not None:
        candidates = [spec.pid] if spec.pid in stats or spec.pid in table.cmdlines else []
        # Identity is (boot_id, pid, start ticks): a reused PID is another process.
        if candidates and spec.pid in memory.identities:
            st = stats.get(spec.pid)
            if boot_changed or (st and st.starttime != memory.identities[spec.pid]):
                return _Found([], f"pid {spec.pid}", reused=True)
        return _Found(candidates, f"pid {spec.pid}")
    matched = {pid for pid in _matching(spec.match or "", table) if pid not in excluded}
    # Once matched, a process stays the job while its identity (boot, pid, start ticks)
    # holds, even if its command line stops matching (setproctitle, or a zombie leader
    # whose cmdline reads empty while its threads still run).
    if not boot_changed:
        matched |= {
            pid
            for pid, start in memory.identities.items()
            if pid in stats and stats[pid].starttime == start and pid not in excluded
        }
    user = f" of user {spec.user!r}" if spec.user is not None else ""
    # The pattern as the user wrote it: repr() doubled every backslash (\\. for \.).
    return _Found(sorted(matched), f"match '{spec.match}'{user}")


def _owned(
    found: _Found, uid: int, owners: _Owners, table: _ProcessTable, memory: ProcessMemory, boot_changed: bool
) -> _Found:
    """``found`` without the matches another user owns (``process.user``): a look-alike no
    user but the job's can start holds no stage. A match whose owner is not known stays (it
    may be the job), and so does one this watch already took for the job (its identity holds:
    a job begun as root that drops to another user is still the job)."""
    keep: list[int] = []
    ignored: list[tuple[int, int]] = []
    stats, uids, identities = table.stats, owners.uids, memory.identities
    for pid in found.candidates:
        owner = uids.get(pid)
        taken = not boot_changed and pid in stats and identities.get(pid) == stats[pid].starttime
        if owner is None or owner == uid or taken:
            keep.append(pid)
        else:
            ignored.append((pid, owner))
    return found._replace(candidates=keep, ignored=tuple(ignored)) if ignored else found


def _owner_note(spec: ProcessSpec, found: _Found, owners: _Owners | None, users: tuple[str, ...]) -> str:
    """What the detail adds about whose processes matched ("" most of the time)."""
    if found.ignored and owners is not None:
        shown = ", ".join(_ignored_text(pid, uid, owners) for pid, uid in found.ignored[:3])
        more = f" and {len(found.ignored) - 3} more" if len(found.ignored) > 3 else ""
        return f"; other users' matches ignored (process.user is {spec.user!r}): {shown}{more}"
    if len(users) > 1:
        return (
            f"; matches in this watch belong to {len(users)} users ({', '.join(users)}):"
            " set process.user to say whose job this is (until then any of them holds the stage)"
        )
    return ""


def _ignored_text(pid: int, uid: int, owners: _Owners) -> str:
    name = owners.names.get(uid)
    return f"pid {pid} owned by uid {uid}" + (f" (user {name})" if name is not None else "")


def _matching(pattern: str, table: _ProcessTable) -> frozenset[int]:
    """The PIDs whose whole command line ``pattern`` is found in (not cut, not empty; the
    excluded ancestry is each stage's to take out). Once per pattern and table inside a batch:
    stages watching one job share the pass over the command lines."""
    cache = getattr(_batch_tables, "cache", None)
    key = ("match", id(table), pattern)
    if cache is not None and key in cache:
        shared: frozenset[int] = cache[key][1]  # stored below: (table, pids)
        return shared
    rx = compile_user_regex(pattern)
    # Only lines holding the text every match spells can match (see required_text).
    needed = required_text(pattern)
    lines = table.searchable if needed is None else table.holding(needed)
    pids = frozenset(pid for pid, cmd, utf8 in lines if rx.found(cmd, utf8))
    if cache is not None:
        # The table is held by the cache entry, so its id is not reused while the block lasts.
        cache[key] = (table, pids)
    return pids


def _unread(table: _ProcessTable, meta: Meta, excluded: frozenset[int]) -> list[int]:
    """Live processes the stat scan shows, begun before this probe, whose command line the
    cmdline scan (read before the stats) did not return at all (not even an empty one: a
    process whose argv is all NULs still gives its pieces). Such a process was alive all
    through the cmdline scan: it was not missed by a race with its exit. Kernel threads and
    zombies have none; processes begun during the probe (its own among them) are not
    counted, nor those the kernel marks exiting (PF_EXITING, set before their memory goes:
    on a host where processes come and go, each check caught one in its exit, and a finished
    job stayed "unknown" at check after check: multi-host fuzzer seed 4145). What remains was
    hidden from that read.
    """
    if meta.uptime is None or not meta.clk_tck or meta.uptime_virtualised:
        # No tick count of the probe's start to tell the processes begun during it by.
        return []
    # Whole ticks: a process forked in the tick the probe's clock was read in began after it
    # as far as the tick count can tell.
    began = int(meta.uptime * meta.clk_tck)
    cmdlines = table.cmdlines
    return sorted(
        pid
        for pid, st in table.stats.items()
        if pid not in cmdlines
        and st.state in ALIVE_STATES
        and not st.kernel_thread
        and not st.exiting
        and st.starttime < began
        and pid not in excluded
    )


def _unread_once(table: _ProcessTable, meta: Meta, excluded: frozenset[int]) -> list[int]:
    """:func:`_unread`, once per batch: a fleet's stages with no job at work each ask it of
    the same table (one pass over every process, not one per stage)."""
    cache = getattr(_batch_tables, "cache", None)
    if cache is None:
        return _unread(table, meta, excluded)
    # The table is held by the cache entry, so its id is not reused while the block lasts.
    key = ("unread", id(table), excluded)
    if key not in cache:
        cache[key] = (table, _unread(table, meta, excluded))
    unread: list[int] = cache[key][1]
    return unread


def _pids(pids: list[int]) -> str:
    """Processes by PID, in words: the first 4, and "…" only where there are more.

    Example:
        >>> _pids([7])
        'pid 7'
        >>> _pids([7, 8])
        '2 processes (pid 7, 8)'
        >>> _pids(list(range(1, 201)))
        '200 processes (pid 1, 2, 3, 4…)'
    """
    if len(pids) == 1:
        return f"pid {pids[0]}"
    more = "…" if len(pids) > 4 else ""
    return f"{len(pids)} processes (pid {', '.join(map(str, pids[:4]))}{more})"


def _excluded(meta: Meta, stats: Mapping[int, ProcStat], exclude_pids: frozenset[int]) -> set[int]:
    """Never the probe itself, crosscheck, or their ancestors."""
    excluded = set(exclude_pids)
    if meta.script_pid is not None:
        excluded |= ancestors(meta.script_pid, stats)
        excluded |= descendants([meta.script_pid], stats)
    return excluded


def _excluded_once(meta: Meta, table: _ProcessTable, exclude_pids: frozenset[int]) -> frozenset[int]:
    """:func:`_excluded`, once per batch: the probe's ancestry is the same for its stages."""
    cache = getattr(_batch_tables, "cache", None)
    if cache is None:
        return frozenset(_excluded(meta, table.stats, exclude_pids))
    # The table is held by the cache entry, so its id is not reused while the block lasts.
    key = ("excluded", id(table), meta.script_pid, exclude_pids)
    if key not in cache:
        cache[key] = (table, frozenset(_excluded(meta, table.stats, exclude_pids)))
    excluded: frozenset[int] = cache[key][1]  # (table, excluded), stored just above or earlier
    return excluded


def read_process(
    spec: ProcessSpec,
    sections: Mapping[str, bytes],
    meta: Meta,
    memory: ProcessMemory | None,
    *,
    host: str,
    nonce: str,
    exclude_pids: frozenset[int] = frozenset(),
    launched_pid: int | None = None,
    run: Run | None = None,
    supervised: tuple[int, ...] = (),
    record_over: bool = False,
) -> tuple[Reading, ProcessMemory, frozenset[int]]:
    """Read the process signal. Returns the reading, the memory, and the job's PIDs
    (matched processes and their live descendants) for the GPU attribution.

    ``launched_pid``: the PID crosscheck started for this run (its exit is this run's).
    ``run``: where the watched run begins; a match that started before a start given with
    ``--since`` (or before the launch) is an earlier run's process: alive, it keeps the
    stage running; gone, its exit is no evidence of this run's.
    ``supervised``: the PIDs the supervisor's record names (a stage with no match or pid).
    ``record_over``: a container's record says its run is over (its end takes every process
    in it along: no match left is no process left, seen or not).
    """
    memory = memory or ProcessMemory()

    def unknown(why: str, **evidence: object) -> tuple[Reading, ProcessMemory, frozenset[int]]:
        # memory is never None here: set just above, and later only to _after_launch's memory.
        assert memory is not None
        return Reading("process", Says.UNKNOWN, why, evidence, meta.now, host), memory, frozenset()

    table = _ProcessTable.parse(sections, nonce)
    if isinstance(table, str) or meta.now is None:
        return unknown(table if isinstance(table, str) else "the host's clock could not be read")
    excluded = _excluded_once(meta, table, exclude_pids)
    boot_changed = memory.boot_id is not None and meta.boot_id != memory.boot_id
    found = _find(spec, table, memory, excluded, boot_changed, supervised)
    want: int | None = None
    if spec.user is not None:
        resolved = _resolve_user(spec, sections, host)
        if isinstance(resolved, str):
            # Never "no match": whose processes are the job is not known at all.
            return unknown(resolved, how=found.how, user=spec.user)
        want = resolved
    # Whose processes matched: read only where some did (most stages of a fleet: none yet).
    owners = _Owners.parse(sections) if spec.match is not None and (found.candidates or table.cut) else None
    if want is not None and owners is not None:
        found = _owned(found, want, owners, table, memory, boot_changed)
    if found.candidates:
        processes, alive_pids, missing_stat, started_at = _describe(found.candidates, table, meta)
    else:
        processes, alive_pids, missing_stat, started_at = [], [], [], None
    if missing_stat:
        return unknown(
            f"process(es) {missing_stat} listed but their /proc stat was unreadable",
            matched=missing_stat,
        )
    cut = sorted(
        p
        for p in table.cut
        if p not in excluded
        and p not in found.candidates
        # Another user's, with process.user: not the job, whatever its command line says.
        and (want is None or owners is None or owners.uids.get(p, want) == want)
    )
    if cut and not alive_pids:
        # A command line longer than the probe reads may be the job's: "no match" is not known.
        return unknown(
            f"the command line of pid {cut[0]} is longer than {CMDLINE_PER_PROCESS} bytes:"
            " whether it is the job cannot be told",
            cut_pids=cut[:16],
        )
    if not alive_pids and spec.match is not None:
        unread = _unread_once(table, meta, excluded)
        if unread and want is not None:
            # Another user's, with process.user: not the job, whatever its command line.
            owners = owners or _Owners.parse(sections)
            unread = [p for p in unread if owners.uids.get(p, want) == want]
        if unread:
            # A live process the command-line scan did not show may be the job: "no match"
            # is not known (a process is never taken for gone because one read missed it).
            one = len(unread) == 1
            why = (
                f"the host's command lines passed the probe's {CMDLINE_CAP >> 20} MiB cap (long"
                " ones of other processes)"
                + ("" if want is not None else "; process.user would leave other users' aside")
                if table.capped
                else f"/proc shows {'it' if one else 'them'} alive since before this check"
            )
            lines, which = ("line", "it") if one else ("lines", "one of them")
            return unknown(
                f"the command {lines} of {_pids(unread)} could not be read ({why}): whether {which}"
                " is the job cannot be told",
                unread_pids=unread[:16],
            )
    launched = launched_pid is not None and (spec.pid == launched_pid or launched_pid in found.candidates)
    seen_here = memory.last_seen is not None and memory.seen_view == meta.view
    exit_record = read_exit_record(sections) if run is not None and run.exit_file else None
    # The launched job began in this probe's own PID namespace (crosscheck in a container,
    # launching on its own host): all it can leave at work is in this /proc (a child stays in
    # its parent's namespace or one nested in it, shown here too), unless hidepid hides it.
    launched_in_view = (
        run is not None
        and run.source == "launch"
        and run.pid is not None
        and run.pidns is not None
        and run.pidns == meta.pidns
        and meta.hidepid is None
    )
    if (
        not alive_pids
        and meta.hidden
        and spec.scope == "host"
        and not seen_here
        and not launched
        and not launched_in_view
        and not spec.supervised  # the supervisor names the PIDs: none is matched from /proc
        and not record_over
    ):
        # "No match" from a probe that cannot see every process is not "not running": the
        # job may be at work where this /proc does not show it (issue 21). Seen alive by a
        # probe with another view (root, the host's PID namespace: memory restored from the
        # store) is no sign that this one can see it.
        elsewhere = (
            " (the job was seen alive by a probe with another view of the host's processes)"
            if memory.last_seen is not None
            else ""
        )
        recorded = exit_record.get("exit_status") if exit_record is not None else None
        if isinstance(recorded, int):
            # The launched job's exit is on record (a file of the user's own), but not whether
            # it left a process at work (a worker it double-forked, still writing an output:
            # a probe that sees it says so, one that cannot see it would complete): the
            # record cannot tell, now or later, from where this probe stands.
            return unknown(
                f"the launched job's exit is recorded (status {recorded}), but no process of it can"
                f" be seen from here ({found.how}): the probe cannot see every process: {meta.hidden}"
                f"{elsewhere}. Whether the job left a process at work (a worker it forked) cannot"
                " be told",
                how=found.how,
                hidden=meta.hidden,
                seen_alive=False,
                blind_after_exit=recorded,
            )
        return unknown(
            f"no process matches ({found.how}), but the probe cannot see every process: {meta.hidden}"
            f"{elsewhere}. Run the probe {_where_it_sees(meta.hidden)}, or set process.scope:"
            " visible if the job always runs where the probe sees it",
            how=found.how,
            hidden=meta.hidden,
            seen_alive=False,
        )
    # The probe's word on the launched PID: "other" once another process holds it (reused).
    launched_state = (sections.get("launched") or b"").strip() if launched_pid is not None else b""
    memory, later = _after_launch(
        memory, run, launched_pid, exit_record, processes, alive_pids, table, meta, launched_state
    )
    if memory.superseded_by is not None:
        if memory.unordered:
            why = (
                f"a process matching the job that is not the launched job (pid {launched_pid}) nor"
                f" its descendant (pid {memory.superseded_by}: the launched job did not start it,"
                " or left it behind, its end in no record) began while it was at work or too close"
                " to its end to tell which came first: whether the log and outputs hold the launched"
                " run's work or another run's, and how that process ends, cannot be told"
            )
        else:
            why = (
                f"the launched run is over and a later run of the job is at work or was (pid"
                f" {memory.superseded_by}, begun after the launched job (pid {launched_pid}) ended):"
                " what the log and outputs hold now is that run's, not the launched run's"
            )
        return (
            Reading(
                "process",
                Says.UNKNOWN,
                why,
                {
                    "superseded_by_pid": memory.superseded_by,
                    "launched": True,
                    "later_runs": later[:16],
                    "unordered": memory.unordered,
                },
                meta.now,
                host,
            ),
            memory,
            frozenset(),
        )
    owners_seen = memory.owners_seen
    if owners is not None and spec.user is None and alive_pids:
        # Whose live matches these are: several users' look-alikes all hold the stage (which
        # is the job cannot be told), and the person is told so, with the fix.
        known = dict(owners_seen)
        fresh = {
            u: owners.label(u) for p in alive_pids if (u := owners.uids.get(p)) is not None and u not in known
        }
        if fresh:
            owners_seen = tuple(sorted({**known, **fresh}.items()))[:_OWNERS_SEEN]
    users = tuple(label for _, label in owners_seen) if len(owners_seen) > 1 else ()
    note = _owner_note(spec, found, owners, users)
    earlier = _earlier_runs(processes, alive_pids, run, start_precision(meta), table, memory.earlier_kin)
    job = _Job.of(processes, alive_pids, table, sections, meta, started_at, earlier)
    if (
        job is _NO_JOB
        and exit_record is None
        and not memory.identities
        and not memory.job_pids
        and memory.boot_id == meta.boot_id
    ):
        # No process and nothing to forget: what _remember would make is this memory (a
        # stage whose job has not started, or is gone, check after check), less the PIDs
        # found gone at the last check: none ended since.
        if memory.last_seen is None and not note:
            return _not_found(spec, found, memory, meta, launched_pid, host), memory, frozenset()
        new_memory = replace(memory, run_ended=()) if memory.run_ended else memory
    else:
        new_memory = _remember(spec, memory, job, table, meta)
    if owners_seen != new_memory.owners_seen:
        new_memory = replace(new_memory, owners_seen=owners_seen)
    gone_at = _seen_gone_at(memory, job, meta, boot_changed)
    if gone_at != new_memory.seen_gone_at:
        new_memory = replace(new_memory, seen_gone_at=gone_at)
    if earlier:
        ticks = {e["pid"]: e["start_ticks"] for e in processes}
        kin = dict.fromkeys((*memory.earlier_kin, *((pid, ticks[pid]) for pid in earlier if pid in ticks)))
        if tuple(kin) != new_memory.earlier_kin:
            new_memory = replace(new_memory, earlier_kin=tuple(kin)[-_EARLIER_KIN:])
    evidence = _evidence(spec, found, job, memory, meta, launched_pid)
    ranks_env = parse_rank_env(sections.get("rankenv"))
    if ranks_env:
        evidence["processes"] = [
            cast(ProcessEntry, {**e, **ranks_env.get(e["pid"], {})}) for e in evidence["processes"]
        ]
    if found.ignored and owners is not None:
        evidence["ignored"] = [_ignored_text(pid, uid, owners) for pid, uid in found.ignored[:16]]
    if users:
        evidence["users"] = list(users)
    if exit_record is not None:
        evidence.update(exit_record)  # type: ignore[typeddict-item]
        if "exit_record" in exit_record and run is not None:
            evidence["exit_record"] = f"not written yet: {run.exit_file}"
        if "exit_record_unreadable" in exit_record and run is not None:
            # Written or not, this watch cannot tell: no exit status, and no claim that the
            # wrapper died without writing one (the other signals decide, as without a launch).
            evidence["exit_record_unreadable"] = (
                f"{run.exit_file} is not readable by the probe's user (the launcher's own directory)"
            )
    if alive_pids:
        detail = _alive_detail(job.main, processes, alive_pids, evidence)
        if earlier:
            detail += _earlier_note(earlier, processes, run)
        return Reading("process", Says.WORKING, detail + note, evidence, meta.now, host), new_memory, job.pids
    detail = _gone_detail(spec, found, boot_changed, processes, memory, meta, launched_in_view)
    if "exit_record_untrusted" in evidence:
        # Gone, and how it ended is in a record another user could have written: unknown,
        # never done (a forged "0" would make a failed job complete).
        detail += f"; how it ended is not known: its exit record is {evidence['exit_record_untrusted']}"
        return Reading("process", Says.UNKNOWN, detail, evidence, meta.now, host), new_memory, frozenset()
    status = evidence.get("exit_status")
    if isinstance(status, int):
        detail += f"; {describe_exit(status)}"
    elif "exit_record_unreadable" in evidence:
        detail += f"; its exit status cannot be read: {evidence['exit_record_unreadable']}"
    return Reading("process", Says.DONE, detail + note, evidence, meta.now, host), new_memory, frozenset()


def _seen_gone_at(memory: ProcessMemory, job: _Job, meta: Meta, boot_changed: bool) -> float | None:
    """``ProcessMemory.seen_gone_at`` after this check. Only a probe that sees every process
    finds a run gone (one that cannot finds nothing gone), and only once the run was seen."""
    if job.this_run_alive:
        return None
    if memory.seen_gone_at is not None:
        return memory.seen_gone_at
    if memory.last_seen is None or meta.hidden or boot_changed or meta.now is None or meta.now_coarse:
        return None
    return meta.now


def _where_it_sees(hidden: str) -> str:
    """Where a probe that cannot see every process would (``Meta.hidden``, why it cannot):
    the host's PID namespace for one in its own, root or the job's user for hidepid."""
    if "PID namespace" in hidden and "hidepid" not in hidden:
        return "in the host's PID namespace"
    if "hidepid" in hidden and "PID namespace" not in hidden:
        return "as root or as the job's user"
    return "as root or as the job's user, in the host's PID namespace"


def _earlier_note(earlier: list[int], processes: list[ProcessEntry], run: Run | None) -> str:
    """Which live matches are an earlier run's, in words: begun before this run, or forked by
    (or found before to be kin of) a process that was: only the first began before it."""
    starts = {e["pid"]: e.get("started_at") for e in processes}
    cut = (run.started_at or 0.0) - (run.slack or 0.0) if run is not None else 0.0
    before: list[int] = []
    for pid in earlier:
        began = starts.get(pid)
        if isinstance(began, (int, float)) and began < cut:
            before.append(pid)
    forked = [pid for pid in earlier if pid not in before]
    said = []
    if before:
        said.append(f"pid {', '.join(map(str, before[:4]))} started before this run began")
    if forked:
        said.append(f"pid {', '.join(map(str, forked[:4]))} forked by an earlier run's process")
    return f" ({'; '.join(said)})"


def _earlier_runs(
    processes: list[ProcessEntry],
    alive: list[int],
    run: Run | None,
    precision: float,
    table: _ProcessTable | None = None,
    remembered: tuple[tuple[int, int], ...] = (),
) -> list[int]:
    """The live matches that began before the run did: an earlier run's processes (a start
    given with --since, or a launch: both exact; a start learnt from the job itself is the
    earliest such start by construction, and so is a watch without a start). With them,
    their descendants however late they began (an earlier run's job forks a worker, a writer
    or a child after the since: fuzzer seed 3000505, whose completion line, written by such
    a child, was taken for this run's), and those this watch found so before
    (``remembered``: their parent may be gone since, the child reparented)."""
    if run is None or run.source not in ("since", "launch") or run.started_at is None:
        return []
    # As exact as the process's start is (procfs.start_precision): a process begun a second
    # before a --since is an earlier run's where /proc dates it to the tick.
    begins = run.started_at - (run.slack or 0.0) - precision
    earlier = []
    for entry in processes:
        if entry["pid"] not in alive:
            continue
        began = entry.get("started_at")
        # A start that cannot be read (implausible clocks) is not shown to be an earlier run's
        # either: it stays the job's (alive, it holds the stage back; an adversary's review: a
        # re-run /proc could not date was set aside and the stage completed on the line before).
        if isinstance(began, (int, float)) and began < begins:
            earlier.append(int(entry["pid"]))
    if not (earlier or remembered):
        return earlier
    kin = descendants(earlier, table.stats, table.children) if table is not None and earlier else set()
    seen = set(remembered)
    for entry in processes:
        pid = int(entry["pid"])
        if pid in alive and pid not in earlier and (pid in kin or (pid, entry["start_ticks"]) in seen):
            earlier.append(pid)
    return earlier


def _after_launch(
    memory: ProcessMemory,
    run: Run | None,
    launched_pid: int | None,
    exit_record: Mapping[str, object] | None,
    processes: list[ProcessEntry],
    alive: list[int],
    table: _ProcessTable,
    meta: Meta,
    launched_state: bytes = b"",
) -> tuple[ProcessMemory, list[int]]:
    """A launched run's end, and the later runs begun after it (see ``ProcessMemory``).

    The launched job ended at its recorded exit, or at the latest when this watch first found
    its PID gone (a probe that cannot see every process finds nothing gone). A live match
    that is neither the launched PID nor its descendant and began after that is a later run:
    the launched run is superseded for good (its log lines and outputs may be overwritten).
    One that began while the launched job was at work but not by it, or too close to its end
    to order against it (within /proc's precision of the recorded exit; after this watch last
    saw the launched PID alive, where no exit is recorded), may be another run: the launched
    run's end is then no evidence for good, too.
    """
    if run is None or run.source != "launch" or launched_pid is None or meta.now is None:
        return memory, []
    if memory.superseded_by is not None:
        return memory, []
    exited = exit_record.get("exited_at") if exit_record else None
    coarse = bool(exit_record.get("exited_coarse")) if exit_record else False
    gone_at = memory.launched_gone_at
    # The launched PID is the wrapper only while the probe did not find it another process's
    # ("other": the exit file is not among its arguments, see exit_record_lines): a PID reused
    # by a later run (or its shell) is neither the launched job nor its parent, and the
    # wrapper is gone, seen or not.
    reused = launched_state == b"other"
    if (launched_pid not in table.stats or reused) and gone_at is None and (reused or not meta.hidden):
        gone_at = meta.now
        memory = replace(memory, launched_gone_at=gone_at)
    # The launched job ended by ``ends_by``: its recorded exit (a time in whole seconds stands
    # for any moment of its second), else when this watch first found it gone; at work, not yet.
    ends_by = (
        float(exited) + (WHOLE_SECOND if coarse else 0.0) if isinstance(exited, (int, float)) else gone_at
    )
    if not alive:
        return memory, []
    ours = set() if reused else {launched_pid} | descendants([launched_pid], table.stats, table.children)
    # A start read from /proc is exact to a few clock ticks, but to whole seconds where
    # uptime is virtualised (see procfs.start_precision).
    slack = start_precision(meta)
    later: list[int] = []
    unordered: list[int] = []
    for entry in processes:
        # The start to the ms, never rebuilt from the elapsed time shown (a tenth of a second).
        began = entry.get("started_at")
        if entry["pid"] not in alive or entry["pid"] in ours:
            continue
        if not isinstance(began, (int, float)):
            # A start /proc cannot tell (uptime virtualised without btime, boot clocks that
            # disagree) orders nothing: not shown to be the launched job's own, nor an earlier
            # run's (see _earlier_runs), it may be another run's.
            unordered.append(int(entry["pid"]))
            continue
        if ends_by is not None and began > ends_by + slack:
            later.append(int(entry["pid"]))
        elif run.started_at is None or began >= run.started_at - slack:
            # Begun since the launch, not surely after its end, and neither the wrapper nor its
            # descendant now: begun while the launched job was at work but not by it, or too
            # close to its end to order (another run), or the launched job's own left behind
            # by its wrapper (its exit is in no record). Whether this watch saw it before or
            # only after the wrapper's end, which run the log and outputs show, and how this
            # process ends, cannot be told.
            unordered.append(int(entry["pid"]))
    if later:
        memory = replace(memory, superseded_by=min(later))
    elif unordered:
        memory = replace(memory, superseded_by=min(unordered), unordered=True)
    return memory, sorted(later or unordered)


def _not_found(
    spec: ProcessSpec,
    found: _Found,
    memory: ProcessMemory,
    meta: Meta,
    launched_pid: int | None,
    host: str,
) -> Reading:
    """The reading when no process is the job and none was ever seen alive in this watch.

    Its evidence and detail are functions of the key below alone (no process entry, no
    times: the job was never seen), so a stage whose job has not started yet — most of a
    fleet's, check after check — gets the reading built the first time, read again now.
    """
    launched = launched_pid is not None and (spec.pid == launched_pid or launched_pid in found.candidates)
    key = (host, found.how, found.reused, meta.boot_id, launched, meta.hidden)
    reading = _NOT_FOUND.again(key, meta.now)
    if reading is None:
        evidence = _evidence(spec, found, _NO_JOB, memory, meta, launched_pid)
        detail = _gone_detail(spec, found, False, [], memory, meta)
        reading = Reading("process", Says.DONE, detail, evidence, meta.now, host)
        _NOT_FOUND.keep(key, reading)
    return reading


#: Readings of :func:`_not_found`, by what they are built from (a pure function of the key).
_NOT_FOUND = Reread()


@dataclass(frozen=True)
class _Job:
    """The matched processes of one check, summed: the job as this check sees it."""

    processes: list[ProcessEntry]
    alive: list[int]
    descendants: set[int]
    cpu_seconds: float | None
    io_bytes: int | None
    main: ProcessEntry | None
    started_at: float | None  # the earliest live process's start (host clock)
    earlier: tuple[int, ...] = ()  # live ones that began before this run: an earlier run's

    @property
    def pids(self) -> frozenset[int]:
        return frozenset(self.alive) | frozenset(self.descendants)

    @property
    def this_run_alive(self) -> bool:
        """Whether a live match is this run's (not only an earlier run's, still running)."""
        return any(pid not in self.earlier for pid in self.alive)

    @classmethod
    def of(
        cls,
        processes: list[ProcessEntry],
        alive: list[int],
        table: _ProcessTable,
        sections: Mapping[str, bytes],
        meta: Meta,
        started_at: float | None = None,
        earlier: list[int] | None = None,
    ) -> _Job:
        if not alive:
            # No live job (not started, or gone): nothing to sum (most stages of a fleet
            # waiting for their jobs, or finished).
            if not processes and not sections.get("io"):
                return _NO_JOB
            io = parse_io(sections.get("io"))
            main = processes[0] if processes else None
            return cls(processes, alive, set(), None, 0 if io else None, main, None)
        stats = table.stats
        live_desc = descendants(alive, stats, table.children)
        cpu_ticks = sum(stats[p].utime + stats[p].stime for p in alive) + sum(
            stats[p].utime + stats[p].stime for p in live_desc if stats[p].state in ALIVE_STATES
        )
        io = parse_io(sections.get("io"))
        io_bytes = sum(io[p] for p in alive if p in io) if io else None
        before = tuple(earlier or ())
        main = next(
            (p for p in processes if p["pid"] in alive and p["pid"] not in before),
            next((p for p in processes if p["pid"] in alive), processes[0] if processes else None),
        )
        cpu = _ticks_to_s(cpu_ticks, meta)
        return cls(processes, alive, live_desc, cpu, io_bytes, main, started_at, before)


#: The job when no process is the job and no I/O was read (shared: never changed).
_NO_JOB = _Job([], [], set(), None, None, None, None)


def _ranks(job: _Job) -> int:
    """The live matches whose parent is not matched too: a stage over several hosts counts a
    host's ranks by it. Counted here, over every match: ``processes`` lists 16, and past them
    a rank's forked workers (DataLoader's, its command line) were counted as ranks."""
    pids = {e["pid"] for e in job.processes}
    alive = set(job.alive)
    return sum(1 for e in job.processes if e["pid"] in alive and e.get("ppid") not in pids)


def _ranks_first(job: _Job) -> list[ProcessEntry]:
    """The matches as the evidence lists them: the ranks (no matched parent) before their
    forked workers, each in PID order. The list is cut at 16: by PID alone, 8 ranks with 3
    DataLoader workers each could leave ranks out, and a stage over several hosts names a
    lost rank from the ranks listed."""
    pids = {e["pid"] for e in job.processes}
    return sorted(job.processes, key=lambda e: e.get("ppid") in pids)


def _evidence(
    spec: ProcessSpec,
    found: _Found,
    job: _Job,
    memory: ProcessMemory,
    meta: Meta,
    launched_pid: int | None,
) -> ProcessEvidence:
    main = job.main
    evidence = ProcessEvidence(
        how=found.how,
        pid=main["pid"] if main else None,
        state=main["state"] if main else None,
        cpu_seconds=job.cpu_seconds,
        elapsed_seconds=main["elapsed_seconds"] if main else None,
        io_bytes=job.io_bytes,
        alive=len(job.alive),
        matched=len(job.processes),
        ranks=_ranks(job),
        descendants=len(job.descendants),
        processes=_ranks_first(job)[:16],
        boot_id=meta.boot_id,
        started_at=job.started_at,
    )
    if not job.alive and memory.last_seen:
        evidence["last_seen_alive"] = dict(memory.last_seen)
    # Whether this watch ever saw the job alive: "gone" and "not started yet (or a wrong
    # match)" look the same in one snapshot, and only the first is evidence of an exit.
    evidence["seen_alive"] = job.this_run_alive or memory.last_seen is not None
    if job.earlier:
        evidence["earlier_runs"] = list(job.earlier[:16])
    # The PID crosscheck launched for this run is this run's process, seen or not.
    evidence["launched"] = launched_pid is not None and (
        spec.pid == launched_pid or launched_pid in found.candidates
    )
    if main and "elapsed_unknown" in main:
        evidence["elapsed_unknown"] = str(main["elapsed_unknown"])
    return evidence


def _remember(
    spec: ProcessSpec, memory: ProcessMemory, job: _Job, table: _ProcessTable, meta: Meta
) -> ProcessMemory:
    stats = table.stats
    # Remember only identities that can still matter: live processes (a dead PID, reused,
    # has other start ticks and is no longer the job), and the configured PID's.
    seen = {p["pid"]: p["start_ticks"] for p in job.processes}
    remembered = {
        pid: start
        for pid, start in ({**memory.identities, **seen} if memory.identities else seen).items()
        if (pid in stats and stats[pid].starttime == start) or pid == spec.pid
    }
    main = job.main
    return ProcessMemory(
        boot_id=meta.boot_id,
        identities=remembered,
        first_pids=memory.first_pids or tuple(job.alive),
        # Seen alive: this run's job only (an earlier run's process, still alive when the
        # run began, is no evidence that this run's job ran and exited).
        last_seen=(
            # ``until``: the probe's clock read after its /proc scan, the latest the sighting
            # can have been (``at`` is read before it).
            {
                "pid": main["pid"],
                "cpu_seconds": job.cpu_seconds,
                "at": meta.now,
                **({"until": meta.now_end} if meta.now_end is not None else {}),
            }
            if job.this_run_alive and main
            else memory.last_seen
        ),
        job_pids=tuple(sorted(job.pids))[:64] if job.alive or job.descendants else (),
        seen_view=meta.view if job.this_run_alive and main else memory.seen_view,
        run_pids=tuple(sorted(p for p in job.alive if p not in job.earlier))[:64],
        run_at_read=_alive_at_read(job, memory, meta),
        # Gone, not only no longer this run's: one found an earlier run's since (--since: its
        # start unreadable before, or its parent found an earlier run's) is alive, no writer.
        run_ended=tuple(sorted(set(memory.run_pids) - set(job.alive))),
        launched_gone_at=memory.launched_gone_at,
        superseded_by=memory.superseded_by,
        unordered=memory.unordered,
        owners_seen=memory.owners_seen,
    )


def _alive_at_read(job: _Job, memory: ProcessMemory, meta: Meta) -> tuple[int, ...]:
    """This run's live PIDs that were alive when this probe read the files: alive at the last
    check's scan too (the same process: its identity is checked), or begun clearly before
    this probe's clock read, to its start's measured precision. One begun within that
    precision of it (or after) was at work at the read as well unless a process of the job
    seen at the last check is gone now: then a line found first after this read may be
    that one's, written and left between this read and this scan, and the new process a
    re-run begun in between (fuzzer seed 8200018). Nothing of the job gone, no process seen
    wrote it so: a job begun as the watch polls is its own line's writer (an adversary's
    review: unknown for good where its line had text after it)."""
    slack = start_precision(meta)
    before = set(memory.run_pids)
    # Gone since the last check: a process of the job then (this run's or an earlier one's)
    # that this scan does not find (``job.pids``: its live matches and their descendants).
    gone = bool((before | set(memory.job_pids)) - job.pids)
    starts = {p["pid"]: p["started_at"] for p in job.processes}
    return tuple(
        sorted(
            pid
            for pid in job.alive
            if pid not in job.earlier
            and (
                pid in before
                or not gone
                or (
                    meta.now is not None
                    and (start := starts.get(pid)) is not None
                    and start + slack < meta.now
                )
            )
        )
    )[:64]


def _gone_detail(
    spec: ProcessSpec,
    found: _Found,
    boot_changed: bool,
    processes: list[ProcessEntry],
    memory: ProcessMemory,
    meta: Meta,
    in_view: bool = False,
) -> str:
    if found.reused:
        return f"pid {spec.pid} now belongs to another process: the job is gone"
    if boot_changed:
        return "the host rebooted since the last check: the job is gone"
    if processes:
        # /proc tells an end, not how: an exit and a kill look alike there.
        return f"pid {processes[0]['pid']} ended (a zombie: exited or killed)"
    if memory.last_seen:
        last = memory.last_seen
        at = last.get("at")
        ago = meta.now - float(at) if isinstance(at, (int, float)) and meta.now is not None else None
        return f"pid {last['pid']} ended" + (
            f" (last seen alive {ago:.0f}s ago, {last['cpu_seconds']}s CPU)" if ago is not None else ""
        )
    if meta.hidden and in_view:
        return (
            f"no process found ({found.how}): the job was launched in this probe's own PID"
            f" namespace ({meta.pidns}), where every process it can leave at work is seen"
        )
    if meta.hidden:
        # Taken for gone from a probe that cannot see every process only where the launched
        # job's recorded exit says it ended (see read): said so, not "none is left".
        return f"no process found ({found.how}), but the probe cannot see every process: {meta.hidden}"
    return f"no process found ({found.how})"


# --------------------------------------------------------------------------- the signal


def _read(
    spec: ProcessSpec, sections: Mapping[str, bytes], memory: ProcessMemory, facts: CheckFacts
) -> tuple[Reading, ProcessMemory, CheckFacts]:
    run = facts.run
    if spec.supervised and facts.supervised is None:
        # Which processes are the job is the record's word, and it said nothing of this run.
        return (
            Reading(
                "process",
                Says.UNKNOWN,
                "the job's processes are the supervisor's, and its record tells nothing of this run",
                {"how": "the supervisor's processes"},
                facts.meta.now,
                facts.host,
            ),
            memory,
            facts._replace(job_pids=frozenset(), job=None, job_unread=True),
        )
    reading, new_memory, job_pids = read_process(
        spec,
        sections,
        facts.meta,
        memory,
        host=facts.host,
        nonce=facts.nonce,
        exclude_pids=facts.exclude_pids,
        launched_pid=run.pid if run is not None else None,
        run=run,
        supervised=facts.supervised.pids
        if spec.supervised and facts.supervised is not None and facts.supervised.phase == "running"
        else (),
        # A container's end takes every process in it along (its PID namespace and cgroup
        # go with its first process); a unit's or a Slurm job's may leave some (systemd's
        # KillMode=process, a proctrack without cgroups): those stay unseen, not gone.
        record_over=facts.supervised is not None
        and facts.supervised.phase == "exited"
        and facts.supervised.kind == "docker",
    )
    started = reading.evidence.get("started_at")
    if reading.says is Says.WORKING and isinstance(started, (int, float)):
        # As exact as the boot clock it was read against (see procfs.start_precision).
        slack, lead = start_precision(facts.meta), start_lead(facts.meta)
        if run is None:
            # First seen alive: its start is where this run begins.
            run = Run(source="process", started_at=float(started), slack=slack, lead=lead)
        elif (
            run.source == "process"
            and run.started_at is not None
            and (
                started > run.started_at + RERUN_START_GAP
                or (memory.seen_gone_at is not None and started - lead > memory.seen_gone_at)
            )
        ):
            # Every job process alive now started after the run this watch knew (restored
            # from the state store), or after a check that found that run's processes all
            # gone (its start's early side later than that check's clock read before its
            # /proc scan: none that check could have missed): the job was run again. A new run, announced
            # anew (multi-host fuzzer seed 50587: a rank's re-run 0.6 s after its run failed
            # was bound to the failed run's error line for good).
            run = Run(source="process", started_at=float(started), slack=slack, lead=lead)
    return (
        reading,
        new_memory,
        facts._replace(
            job_pids=job_pids,
            run=run,
            job=(view := _job_view(reading, memory, new_memory)),
            job_unread=view is None,
        ),
    )


def _job_view(reading: Reading, before: ProcessMemory, after: ProcessMemory) -> JobView | None:
    """What the signals read after this one may know of the job (None: the process signal
    could not tell whether it runs)."""
    if reading.says is Says.UNKNOWN or reading.read_at is None:
        return None
    live = frozenset(after.run_pids) if reading.says is Says.WORKING else frozenset()
    starts: dict[int, float] = {}
    parents: dict[int, int] = {}
    for entry in reading.evidence.get("processes") or ():
        pid, began, ppid = entry.get("pid"), entry.get("started_at"), entry.get("ppid")
        if pid in live and isinstance(began, (int, float)):
            starts[pid] = began
        if pid in live and isinstance(ppid, int):
            parents[pid] = ppid
    exited = reading.evidence.get("exited_at")
    earlier = reading.evidence.get("earlier_runs") or ()
    return JobView(
        live,
        starts,
        frozenset(before.run_pids),
        float(exited) if isinstance(exited, (int, float)) else None,
        parents,
        earlier=frozenset(p for p in earlier if isinstance(p, int)),
        ended=frozenset(before.run_ended),
        at_read=frozenset(before.run_at_read),
    )


SIGNAL: Signal[ProcessSpec, ProcessMemory] = Signal("process", ProcessMemory, snippet, _read)
