"""What ties evidence to the run being watched.

Re-runs reuse their log and output paths, so a completion line or a full output directory may
be an earlier run's. A :class:`Run` says where "this run" begins, from the best source known:

- ``launch``: crosscheck started the job; just before, it read the host's clock and the log's
  inode, size and last bytes. Exact: the run's log lines are the bytes after that offset.
- ``since``: the user gave the run's start (``--since 2h`` or a time). Lines in a log last
  modified before it are not this run's; a log born after it is all this run's.
- ``process``: the job's process, first seen alive by this watch; its start time (from
  /proc start ticks and the boot clock) is the run's start.
- ``supervisor``: docker, systemd or Slurm recorded the run (a container's ID and start, an
  invocation, a job): its identity is the record's (``Run.supervised``), its start the record's.
- ``watch``: none of these: only what is written while this watch looks is this run's.

How each signal uses it is written where the signal is read (``_signals``); the rules are
in docs/run-binding.md, "What ties evidence to a run".
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
import shlex
import signal as _signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from sensors._base.probe import helper
from sensors._base.schema import parse_duration
from sensors._base.text import redact, redact_command
from sensors._base.tolerances import WHOLE_SECOND
from sensors._base.trust import TRUST_FN, TRUST_SH, Untrusted, parse_untrusted
from sensors._run.moment import Moment

#: Bytes compared at a remembered offset to tell "appended to" from "rewritten".
FINGERPRINT_BYTES = 64

RunSource = Literal["launch", "since", "process", "watch", "supervisor"]

#: The probe's check of an exit record before it is read (defined once per probe).
_TRUST_HELPER = helper(TRUST_FN, list(TRUST_SH))


@dataclass(frozen=True)
class Run:
    """Where the run being watched begins (times on the monitored host's clock).

    Attributes:
        source: ``launch``, ``since``, ``process`` or ``watch`` (see the module docstring).
        started_at: the run began no earlier than this (seconds since the epoch).
        log_inode / log_offset / log_fingerprint: for ``launch``: the log as it was just
            before the job started (``log_inode`` None: there was no log yet); the hex of
            the bytes before ``log_offset`` shows whether the file was rewritten since.
        pid: the job's PID, when known from the launch.
        exit_file: where the launch wrapper records the job's exit status and time on the
            host (``STATUS EPOCH``, written once the job ended; None: not launched so).
    """

    source: RunSource
    started_at: float | None = None
    log_inode: int | None = None
    log_offset: int | None = None
    log_fingerprint: str | None = None
    pid: int | None = None
    exit_file: str | None = None
    #: How far ``started_at`` may be from the truth (seconds), from where it was read; None:
    #: the source's own (a ``since`` is exact; a process's start, the worst case of
    #: :data:`~sensors._base.tolerances.PROCESS_START_PRECISION`). A process's start carries
    #: the precision its probe measured (``procfs.start_precision``).
    slack: float | None = None
    #: How far ``started_at`` may be *after* the truth, where it is less than ``slack``: a
    #: process's start read against /proc/uptime is late by its rounding at most, however
    #: wide the span its probe measured (``procfs.start_lead``). None: ``slack``.
    lead: float | None = None
    #: For ``since`` given as a time: that time as given (the checking machine's clock);
    #: ``started_at`` is it on the monitored host's clock (see :meth:`Since.resolve`).
    given: float | None = None
    #: The supervisor's identity of the run (``sensors._run.supervisor.Record.identity``): a
    #: ``supervisor`` run's, or the record a launch through a supervisor created (a record of
    #: another identity is another run's).
    supervised: str | None = None
    #: For ``launch``: the PID namespace the launch ran in (``pid:[INODE]``, read by the mark
    #: where the job then began; None: not read, or a supervisor's, whose job runs elsewhere).
    #: A probe in that namespace sees every process the job can leave behind: a child's
    #: namespaces nest inside its parent's, and /proc shows those nested in it.
    pidns: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self._json)

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        # Every verdict of a watch carries its run: formatted once per run, not per check.
        return {
            "source": self.source,
            "started_at": _iso(self.started_at),
            # How exact that start is, where it was read from /proc (the probe measures it):
            # a reader judging "too near the run's start" needs it as much as the start.
            **({"precision_s": self.slack} if self.source == "process" and self.slack is not None else {}),
            **({"pid": self.pid} if self.pid is not None else {}),
            **({"supervised": self.supervised} if self.supervised is not None else {}),
        }


def exit_record_lines(exit_file: str, pid: int | None) -> list[str]:
    """The probe lines that read the launched job's exit record (section ``exit``) and whether
    its wrapper's PID is still at work (section ``launched``: its state, or ``gone``): read for
    every check of a launched run, whatever signals the stage names. A launched run that is
    over is told by these, and what is written after it is a later run's (see
    ``sensors._signals.log`` and ``outputs``); a wrapper killed with its job writes no record.

    Read only: the wrapper owns the file. "unreadable": the record (or the way to it) is
    another user's, the launcher's: a watch run as another user cannot tell whether it was
    written, and says so. "untrusted ...": the record, or its directory or one above it, is
    one another user could have written or replaced (``sensors._base.trust``): what it holds
    is not read, and the job's end is not known from it.
    """
    lines: list[str] = [_TRUST_HELPER]
    if pid is not None:
        # The state after the command's closing parenthesis (a zombie is over too). Read
        # before the record: a wrapper found gone wrote its record (if ever) before this read.
        # A PID is the wrapper only while the exit file is one of its arguments (nohup, setsid
        # and the wrapper's sh all have it): once the wrapper is gone the PID may be reused by
        # another process ("other"), which is no wrapper at work.
        lines += [
            "sec launched",
            f"if read -r l </proc/{int(pid)}/stat; then l=${{l##*) }}; s=${{l%% *}};"
            f" if [ \"$s\" != Z ] && ! tr '\\000' '\\n' </proc/{int(pid)}/cmdline"
            f' | grep -Fxq -- {shlex.quote(exit_file)}; then s=other; fi; echo "$s";'
            " else echo gone; fi 2>/dev/null",
        ]
    f = shlex.quote(exit_file)
    d = shlex.quote(exit_file.rpartition("/")[0] or "/")
    # Trusted first (its owner, mode and type, and its directories'), then read: the record's
    # directory is then one nobody else can write, so what is read is what was checked.
    # Anything but "ok" is printed as it is (an empty answer too: nothing but "ok" trusts).
    # Both through __cc_put (see probe.ESCAPE): a path or a record's bytes cannot start a
    # section.
    lines += [
        "sec exit",
        f'w=$({TRUST_FN} {d} {f}) && [ -n "$w" ] || w="untrusted stat file - - - "{f};'
        ' if [ "$w" != ok ]; then __cc_put "$w";'
        f' elif r=$(head -c 256 -- {f} 2>&1); then __cc_put "$r";'
        ' else case $r in *"ermission denied"*) echo unreadable ;; *) echo missing ;; esac; fi',
    ]
    return lines


class LaunchEnd(NamedTuple):
    """How a launched job ended, as this check found it (every check of a launched run reads
    it, whatever signals the stage names).

    ``status`` / ``exited_at``: what its launch wrapper recorded (None: nothing recorded, or
    not readable); ``missing``: the record can be read and is not there (yet); ``over``: the
    job is over, recorded so or its wrapper gone (or a zombie) from a /proc that shows every
    process; ``alive``: its wrapper is at work (found in /proc, not a zombie); ``untrusted``:
    why the record was not read (another user could have written it): the job's end is not
    known from it, and a stage is not complete on it; ``unreadable``: the probe's user cannot
    read it (the launcher's own directory): whether and how the job ended is not known here.
    """

    status: int | None = None
    exited_at: float | None = None
    over: bool = False
    missing: bool = False
    alive: bool = False
    coarse: bool = False  # ``exited_at`` is whole seconds, rounded down (a date without %N)
    untrusted: str = ""
    unreadable: bool = False

    @property
    def exited_by(self) -> float | None:
        """The latest the recorded exit can have been: what was written after it is surely
        written after the exit (a time in whole seconds stands for any moment of its second;
        nanosecond file times of the job's last writes fall in it)."""
        if self.exited_at is None:
            return None
        return self.exited_at + WHOLE_SECOND if self.coarse else self.exited_at

    @property
    def killed_unrecorded(self) -> bool:
        """Over with no record although it can be read: the wrapper was killed with the job
        (a run that did not finish)."""
        return self.over and self.missing


def read_launch_end(sections: Mapping[str, bytes], hidden: bool) -> LaunchEnd:
    """The launched job's end from this probe's ``exit`` and ``launched`` sections
    (``hidden``: the probe cannot see every process, so a PID not found is not gone)."""
    record = read_exit_record(sections)
    status, at = record.get("exit_status"), record.get("exited_at")
    if isinstance(status, int):
        return LaunchEnd(
            status, at if isinstance(at, float) else None, True, coarse=bool(record.get("exited_coarse"))
        )
    state = (sections.get("launched") or b"").strip()
    # "other": the PID is another process's now (reused): the wrapper is gone, seen or not.
    gone = state in (b"Z", b"other") or (state == b"gone" and not hidden)
    alive = bool(state) and state not in (b"Z", b"gone", b"other")
    return LaunchEnd(
        over=gone,
        missing=record.get("exit_record") == "missing",
        alive=alive,
        untrusted=str(record.get("exit_record_untrusted") or ""),
        unreadable=bool(record.get("exit_record_unreadable")),
    )


def _untrusted_why(found: Untrusted | None) -> str:
    why = found.why("the probe's user") if found is not None else "it cannot be checked"
    return (
        f"not trusted: {why}: what it holds is not read (a file or directory another user"
        " controls can forge a job's exit)"
    )


def signal_words(sig: int) -> str:
    """A signal in words: ``SIGKILL (signal 9)``, or ``signal 99`` where it has no name."""
    try:
        return f"{_signal.Signals(sig).name} (signal {sig})"
    except ValueError:
        return f"signal {sig}"


def describe_exit(status: int) -> str:
    """An exit status in words (a POSIX shell reports death by signal N as 128 + N)."""
    if status == 0:
        return "exited with status 0 (success), as its launch wrapper recorded"
    if 128 < status < 128 + 65:
        return f"exit status {status}: killed by {signal_words(status - 128)}, as its launch wrapper recorded"
    return f"exited with status {status}, as its launch wrapper recorded"


def read_exit_record(sections: Mapping[str, bytes]) -> dict[str, Any]:
    """What the launch wrapper recorded: ``STATUS EPOCH`` once the job ended."""
    text = (sections.get("exit") or b"").decode("ascii", "replace").strip()
    words = text.split()
    if len(words) >= 2 and words[0].isdigit():
        # busybox's date prints %N as it is: the whole seconds stand.
        at = re.match(r"\d+(?:\.\d+)?", words[1])
        return {
            "exit_status": int(words[0]),
            "exited_at": float(at.group(0)) if at else None,
            "exited_coarse": bool(at) and "." not in at.group(0),  # type: ignore[union-attr]
        }
    if words == ["unreadable"]:
        return {"exit_status": None, "exited_at": None, "exit_record_unreadable": True}
    if words and words[0] == "untrusted":
        # What another user may have written is no status: not even "not written yet".
        why = _untrusted_why(parse_untrusted(text.splitlines()[0]))
        return {"exit_status": None, "exited_at": None, "exit_record_untrusted": why}
    return {"exit_status": None, "exited_at": None, "exit_record": "missing"}


@dataclass(frozen=True)
class Since:
    """A run start given by the user: an absolute time, or a duration before the first check."""

    at: float | None = None
    ago: float | None = None

    def resolve(self, now: float, ahead: tuple[float, float] = (0.0, 0.0)) -> Moment:
        """The start on the monitored host's clock, with how far it may be off either way:
        a duration before ``now`` (that clock's: exact), or the time as given (the checking
        machine's clock) moved by the host's clock offset. ``ahead``: the least and the most
        the host's clock can be ahead of this machine's, measured in the probe's round trip
        (its clock read after the probe was sent and before its answer came back; negative:
        behind). A host a minute ahead has its file times a minute ahead too; one a minute
        behind, a minute behind. Clocks that agree within the round trip are taken as one:
        NTP keeps them within milliseconds, far inside a round trip under load, which would
        otherwise make every write near the start undatable."""
        if self.at is None:
            return Moment(now - float(self.ago or 0.0), source="--since (a duration)")
        low, high = min(ahead), max(ahead)
        if low <= 0.0 <= high:
            return Moment(self.at, source="--since (a time)")
        return Moment.about(
            self.at + (low + high) / 2,
            (high - low) / 2,
            source="--since (a time, moved by the host's clock offset)",
        )


_ISO_HINT = re.compile(r"^\d{4}-\d{2}-\d{2}")
_BARE_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_BARE_SECONDS_AT_MOST = 10 * 365 * 86400.0


def parse_since(value: str | float | _dt.datetime | Since | None) -> Since | None:
    """``--since``: a duration (``2h``: the run started at most that long before the first
    check, on the monitored host's clock), an ISO 8601 time, a datetime, or epoch seconds
    (a number, or text ``@1796104800`` as ``date -d`` reads it).

    A bare number in text is a duration in seconds; one of more than ten years is refused
    rather than read as a start decades ago (which would make every earlier run's evidence
    this run's): it is epoch seconds missing its ``@``.

    Example:
        >>> parse_since("90m").ago
        5400.0
        >>> parse_since("2026-12-01T06:00:00Z").at
        1796104800.0
        >>> parse_since("@1796104800").at
        1796104800.0
    """
    if value is None or isinstance(value, Since):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # a naive time is the local clock's
        return Since(at=value.timestamp())
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if float(value) < _BARE_SECONDS_AT_MOST:
            # A number is epoch seconds here (the CLI reads a bare number as a duration): one
            # within ten years of 1970 is a duration misread, and would make every earlier
            # run's evidence this run's.
            raise ValueError(
                f"{value!r} as epoch seconds is {_iso(float(value))}: for a duration before now"
                f" write '{value:g}s' (a number is epoch seconds, as `date +%s` prints them)"
            )
        return Since(at=float(value))
    if isinstance(value, str) and _ISO_HINT.match(value.strip()):
        text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
        try:
            return parse_since(_dt.datetime.fromisoformat(text))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2026-12-01T06:00:00Z)") from None
    if isinstance(value, str) and value.strip().startswith("@"):
        try:
            return Since(at=float(value.strip()[1:]))
        except ValueError:
            raise ValueError(f"{value!r} is not epoch seconds (e.g. @1796104800)") from None
    try:
        ago = parse_duration(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is neither a duration (30m, 2h) nor a time (2026-12-01T06:00:00Z, @1796104800)"
        ) from None
    if isinstance(value, str) and _BARE_NUMBER.match(value.strip()) and ago > _BARE_SECONDS_AT_MOST:
        raise ValueError(
            f"{value!r} as seconds before now is over ten years: for epoch seconds write @{value.strip()}"
        )
    return Since(ago=ago)


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).isoformat(timespec="milliseconds")


# --------------------------------------------------------------------------- launch


def launch_mark_script(log_path: str) -> bytes:
    """A read-only sh script: the host's clock and the log's inode, size and last bytes.

    Run just before the job is started, it marks where the run's log lines will begin.
    """
    log = shlex.quote(log_path)
    n = FINGERPRINT_BYTES
    return (
        "export LC_ALL=C LANG=C\n"
        'echo "now $(date +%s.%N 2>/dev/null)"\n'
        'echo "pidns $(readlink /proc/self/ns/pid 2>/dev/null)"\n'
        f"if [ -f {log} ]; then\n"
        f"  set -- $(stat -L -c '%i %s' -- {log} 2>/dev/null)\n"
        '  echo "log $1 $2"\n'
        f'  if [ "$2" -gt 0 ]; then s=$(($2 > {n} ? $2 - {n} + 1 : 1)); l=$(($2 > {n} ? {n} : $2));'
        f" echo \"fp $(tail -c +$s -- {log} | head -c $l | od -An -v -tx1 | tr -d ' \\n')\"; fi\n"
        "fi\n"
    ).encode()


def parse_launch_mark(output: bytes, *, pid: int | None = None) -> Run:
    """The :class:`Run` of a job started right after :func:`launch_mark_script` ran."""
    fields: dict[str, list[str]] = {}
    for line in output.decode("ascii", "replace").splitlines():
        key, _, rest = line.partition(" ")
        fields[key] = rest.split()
    now = _float(fields.get("now"))
    log = fields.get("log") or []
    inode = _int(log[:1])
    return Run(
        source="launch",
        started_at=now,
        log_inode=inode,
        log_offset=_int(log[1:2]) if inode is not None else None,
        log_fingerprint=(fields.get("fp") or [""])[0] or None,
        pid=pid,
        pidns=_pidns(fields.get("pidns")),
    )


def _pidns(values: list[Any] | None) -> str | None:
    value = str(values[0]) if values else ""
    return value if re.fullmatch(r"pid:\[\d+\]", value) else None


def launch_record(
    stage: str, host: str, run: Run, *, log: str | None, command: Sequence[str] | str, cwd: str | None
) -> dict[str, Any]:
    """A launched run as ``launch_stage`` returns it (and a gate or the watcher is given it):
    the one place its keys are written; :func:`run_from_record` reads it back.

    ``command`` (the launch words, or a line) is kept redacted: the record is a task's
    return value, an artifact, a hand-off request in the state store.
    """
    return {
        "stage": stage,
        "host": host,
        "pid": run.pid,
        "log": log,
        "command": redact(command) if isinstance(command, str) else redact_command(command),
        "cwd": cwd or "",
        "exit_file": run.exit_file,
        "supervised": run.supervised,
        "run": {
            "started_at": run.started_at,
            "log_inode": run.log_inode,
            "log_offset": run.log_offset,
            "log_fingerprint": run.log_fingerprint,
            "pidns": run.pidns,
        },
    }


def run_from_record(record: Mapping[str, Any] | Run | None) -> Run | None:
    """A :class:`Run` from a launch record (:func:`launch_record`'s dict) or a Run."""
    if record is None or isinstance(record, Run):
        return record
    run = record.get("run")
    if not isinstance(run, Mapping):
        return Run(source="launch", pid=_int([record.get("pid")]))
    return Run(
        source="launch",
        started_at=_float([run.get("started_at")]),
        log_inode=_int([run.get("log_inode")]),
        log_offset=_int([run.get("log_offset")]),
        log_fingerprint=run.get("log_fingerprint") or None,
        pid=_int([record.get("pid")]),
        exit_file=record.get("exit_file") or None,
        supervised=record.get("supervised") or None,
        pidns=_pidns([run.get("pidns")]),
    )


def _float(values: list[Any] | None) -> float | None:
    # busybox date has no %N: "1700000000.%N" still gives its whole seconds.
    m = re.match(r"\d+(?:\.\d+)?", str(values[0])) if values and values[0] is not None else None
    return float(m.group(0)) if m else None


def _int(values: list[Any] | None) -> int | None:
    try:
        return int(values[0]) if values and values[0] is not None else None
    except (TypeError, ValueError):
        return None
