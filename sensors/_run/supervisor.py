"""A supervisor's record of a job (docker, systemd, Slurm), parsed: pure, no I/O.

The probe's snippet that reads it is ``sensors._signals.supervisor``; what each state means
for the verdict is docs/supervisors.md. The record's :attr:`Record.identity` is the run: a
new container (or the same one started again), a new invocation of a unit, a new job (or a
requeued job's new start) is a new run, whatever file times say.

Each parser follows the real tool's output: ``docker inspect`` of Docker 28.2 (API 1.50),
``systemctl show`` of systemd 252 (Debian 12), ``sacct -P``/``squeue -O`` of Slurm 22.05.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from sensors._base.text import redact
from sensors._base.trust import parse_untrusted
from sensors._run.run import signal_words

#: The most PIDs read as the job's (a container's tree, a unit's cgroup).
PIDS_CAP = 512

Phase = Literal["waiting", "running", "exited", "absent", "unreadable"]


@dataclass(frozen=True)
class Record:
    """What a supervisor recorded of the job, as this check read it (pure data).

    Attributes:
        kind: docker, systemd or slurm.
        name: the container, unit or job as the stage names it.
        phase: ``waiting`` (created, activating, pending), ``running``, ``exited``,
            ``absent`` (no such container, unit or job: not started yet, or removed) or
            ``unreadable`` (the tool is missing, or the probe's user may not read it).
        identity: the run (a container's ID and start, an InvocationID, a job's ID and start).
        state: the supervisor's own word (``exited``, ``failed/exit-code``, ``TIMEOUT``).
        exit_code: the main process's exit code, where it exited.
        signal: the signal that killed it, where one did.
        oom: the kernel's OOM killer ended it (docker's OOMKilled, systemd's oom-kill,
            Slurm's OUT_OF_MEMORY).
        failed: the supervisor names the end a failure (Slurm's FAILED, TIMEOUT, NODE_FAIL,
            CANCELLED; systemd's Result; docker's start that failed), with or without a code.
        started_at / finished_at: epoch seconds (``coarse``: whole seconds).
        pids: the job's processes on this host (the container's tree, the unit's cgroup, the
            step's PIDs), as far as the probe saw them.
        unreadable: why the record could not be read (phase ``unreadable``).
    """

    kind: str
    name: str
    phase: Phase
    identity: str | None = None
    state: str = ""
    exit_code: int | None = None
    signal: int | None = None
    oom: bool = False
    failed: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    coarse: bool = False
    pids: tuple[int, ...] = ()
    unreadable: str = ""

    @property
    def success(self) -> bool:
        """Exited with status 0: no signal, no OOM kill, no failure the supervisor named."""
        return (
            self.phase == "exited"
            and self.exit_code == 0
            and self.signal is None
            and not (self.oom or self.failed)
        )

    @property
    def exit_status(self) -> int | None:
        """The status as a shell reports it (128 + N for signal N), as a launch wrapper records it."""
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code

    def how_it_ended(self) -> str:
        """The recorded end in words."""
        if self.oom:
            return f"killed by the kernel's OOM killer ({self.state})"
        if self.signal is not None:
            return f"killed by {signal_words(self.signal)} ({self.state})"
        if self.exit_code is not None:
            # One parenthesis, and the state only where it adds a word: "exited with status 0
            # (success) (exited)" said it twice (notes/ml44.md, item 8).
            said = [w for w in ("success" if self.exit_code == 0 else "", self.state) if w and w != "exited"]
            return f"exited with status {self.exit_code}" + (f" ({'; '.join(said)})" if said else "")
        # No code: none was recorded with this end (Slurm's 0:0 of a job cancelled while
        # pending, a unit that failed before its main process ran, a start docker refused).
        return f"ended: {self.state}" + (" (a failure, with no exit status recorded)" if self.failed else "")


#: The status the probe's snippet gives for a ``supervisor.bin`` it does not trust (its
#: answer: ``__cc_trust``'s line; see ``sensors._signals.supervisor``).
UNTRUSTED_RC = 96


def _unreadable(kind: str, name: str, rc: int | None, text: str) -> Record:
    # The first line with words (docker prints an empty JSON array before its error).
    first = next((line.strip() for line in text.splitlines() if any(c.isalpha() for c in line)), "")
    untrusted = parse_untrusted(first) if rc == UNTRUSTED_RC else None
    if untrusted is not None:
        # The snippet ran no tool from a supervisor.bin it does not trust (see trust.py).
        why = f"supervisor.bin is not trusted, its {_TOOL[kind]} not run: {untrusted.why('the probe user')}"
    elif rc == UNTRUSTED_RC and first == "unreadable":
        why = "supervisor.bin cannot be read by the probe's user"
    elif rc == 127 or first == "missing":
        why = f"no {_TOOL[kind]} command on the host (give supervisor.bin where it lives)"
    else:
        why = f"{_TOOL[kind]} answered {first[:300]!r}" + (f" (exit status {rc})" if rc is not None else "")
    return Record(kind, name, "unreadable", unreadable=redact(why))


_TOOL = {"docker": "docker", "systemd": "systemctl", "slurm": "sacct/squeue"}


def _rfc3339(text: object) -> float | None:
    """Docker's RFC 3339 time with nanoseconds (``2026-12-05T18:43:40.123456789Z``); its zero
    time, ``0001-01-01T00:00:00Z``, is "not set"."""
    if not isinstance(text, str) or not text or text.startswith("0001-01-01"):
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text)
    if m is None:
        return None
    base = _dt.datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    frac = float("0." + m.group(2)) if m.group(2) else 0.0
    return base.timestamp() + frac


def parse_docker(name: str, rc: int | None, body: str, pids: tuple[int, ...] = ()) -> Record:
    """A record from ``docker inspect --type container NAME`` (its exit status and answer)."""
    if rc != 0:
        if "No such object" in body or "No such container" in body:
            return Record("docker", name, "absent", state="no such container")
        return _unreadable("docker", name, rc, body)
    try:
        # The array from the line that opens it: the CLI writes its warnings (an unreadable
        # ~/.docker/config.json, a context's) to stderr, which the probe reads with stdout.
        text = body.lstrip()
        start = 0 if text.startswith("[") else text.find("\n[") + 1
        if start == 0 and not text.startswith("["):
            raise ValueError("no JSON array")
        found, _ = json.JSONDecoder().raw_decode(text, start)
        info = found[0]
        state = info["State"]
        status = str(state["Status"])
        ident = str(info["Id"])
    except (ValueError, LookupError, TypeError):
        return _unreadable("docker", name, rc, "an answer that is not docker inspect's JSON")
    started = _rfc3339(state.get("StartedAt"))
    identity = f"{ident}@{state.get('StartedAt')}" if started is not None else None
    restarts = info.get("RestartCount")
    word = status + (f", restarted {restarts} time(s)" if isinstance(restarts, int) and restarts else "")
    base = {"identity": identity, "started_at": started, "pids": pids}
    if status in ("running", "paused", "restarting") or state.get("Running") is True:
        return Record("docker", name, "running", state=word, **base)  # type: ignore[arg-type]
    code = state.get("ExitCode")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    if status in ("created",) or started is None:
        if code or state.get("Error"):
            # A start that failed (the command not found: 127, not executable: 126): docker
            # leaves it "created", never started, with the code and the runtime's error.
            return Record(
                "docker",
                name,
                "exited",
                state=word + (f" ({state.get('Error')})" if state.get("Error") else ""),
                exit_code=code if code else None,
                failed=True,
            )
        return Record("docker", name, "waiting", state=word, identity=None)
    oom = state.get("OOMKilled") is True
    sig = None
    if code is not None and 128 < code < 128 + 65:
        # docker records a container killed by signal N as exit code 128 + N (its shim's
        # convention), like a shell: 137 is SIGKILL.
        sig, code = code - 128, None
    return Record(
        "docker",
        name,
        "exited",
        state=word + (f" ({state.get('Error')})" if state.get("Error") else ""),
        exit_code=code,
        signal=sig,
        oom=oom,
        finished_at=_rfc3339(state.get("FinishedAt")),
        **base,  # type: ignore[arg-type]
    )


#: The properties read from ``systemctl show`` (one call).
SYSTEMD_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainStatus",
    "ExecMainCode",
    "ExecMainPID",
    "InvocationID",
    "ExecMainStartTimestamp",
    "ExecMainExitTimestamp",
    "ExecMainStartTimestampMonotonic",
    "ExecMainExitTimestampMonotonic",
    "ControlGroup",
)
# siginfo's si_code for a child (include/uapi/asm-generic/siginfo.h): how ExecMainStatus reads.
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3


def _systemd_time(text: str) -> float | None:
    """``Thu 2026-12-05 18:43:40 UTC`` (the probe runs systemctl with TZ=UTC); empty: unset."""
    m = re.fullmatch(r"\w{3} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", text.strip())
    if m is None:
        return None
    return _dt.datetime.fromisoformat(m.group(1) + "+00:00").timestamp()


def parse_systemd(name: str, rc: int | None, body: str, pids: tuple[int, ...] = ()) -> Record:
    """A record from ``systemctl show UNIT -p ...`` (``Key=value`` lines)."""
    if rc != 0:
        return _unreadable("systemd", name, rc, body)
    props: dict[str, str] = {}
    for line in body.splitlines():
        key, eq, value = line.partition("=")
        if eq and key in SYSTEMD_PROPERTIES and key not in props:
            props[key] = value
    if "ActiveState" not in props or "LoadState" not in props:
        return _unreadable("systemd", name, rc, "an answer without ActiveState (not systemctl show's)")
    active, sub, result = props["ActiveState"], props.get("SubState", ""), props.get("Result", "")
    word = f"{active}/{sub}" + (f", result {result}" if result else "")
    if props["LoadState"] == "not-found":
        return Record("systemd", name, "absent", state=f"no such unit ({props['LoadState']})")
    invocation = props.get("InvocationID") or None
    started = _systemd_time(props.get("ExecMainStartTimestamp", ""))
    exited_mono = _int(props.get("ExecMainExitTimestampMonotonic"))
    main_pid = _int(props.get("ExecMainPID")) or 0
    base = {"identity": invocation, "started_at": started, "coarse": True, "pids": pids}
    if active == "activating":
        # Being started (again): an auto-restart after the last exit (Restart=), a start's
        # ExecStartPre. The ExecMain* properties are still the last exit's until the new main
        # process runs: not this start's end.
        return Record("systemd", name, "waiting", state=word, identity=invocation)
    if exited_mono:
        code = _int(props.get("ExecMainCode"))
        status = _int(props.get("ExecMainStatus"))
        exit_code = status if code == _CLD_EXITED else None
        sig = status if code in (_CLD_KILLED, _CLD_DUMPED) else None
        if code is None or status is None or (exit_code is None and sig is None):
            return _unreadable("systemd", name, rc, f"an exit recorded without a status ({word})")
        return Record(
            "systemd",
            name,
            "exited",
            state=word,
            exit_code=exit_code,
            signal=sig,
            oom=result == "oom-kill",
            failed=result not in ("", "success"),
            finished_at=_systemd_time(props.get("ExecMainExitTimestamp", "")),
            **base,  # type: ignore[arg-type]
        )
    if active in ("active", "reloading", "deactivating") and main_pid > 0:
        return Record("systemd", name, "running", state=word, **base)  # type: ignore[arg-type]
    if active == "failed":
        # Failed before its main process ran (start-limit-hit, resources): no exit to read.
        return Record("systemd", name, "exited", state=word, failed=True, **base)  # type: ignore[arg-type]
    # Loaded, never started (or its record reset): nothing of a run.
    return Record("systemd", name, "absent", state=word)


#: Slurm's job states (squeue's %T, sacct's State) and what they are.
SLURM_RUNNING = frozenset(
    {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
)
SLURM_WAITING = frozenset(
    {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
)
SLURM_FAILED = frozenset(
    {
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
    }
)


def _slurm_time(text: str) -> float | None:
    """``2026-12-05T18:43:40`` (the probe runs the tools with TZ=UTC); Unknown, None: unset."""
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", text.strip()):
        return None
    return _dt.datetime.fromisoformat(text.strip() + "+00:00").timestamp()


def parse_slurm(
    name: str, acct: tuple[int | None, str], queue: tuple[int | None, str], pids: tuple[int, ...] = ()
) -> Record:
    """A record from ``sacct -P -n -o JobID,State,ExitCode,Start,End`` and ``squeue -h -t all
    -O JobID:|,State:|,exit_code:|,StartTime:|,EndTime:`` (each: its exit status and answer).
    squeue's word is the controller's own, now, with the job's wait status (the exit code
    where there is no accounting); sacct's is the accounting's, kept after the controller
    forgot the job (its ``MinJobAge``). Neither carries text the job's user chose (scontrol's
    job line does: a JobName first, and it is not read)."""
    fields = None
    for line in acct[1].splitlines() if acct[0] == 0 else ():
        cut = line.split("|")
        if len(cut) >= 5 and cut[0] == name:
            fields = cut[:5]
    qfields = None
    for line in queue[1].splitlines() if queue[0] == 0 else ():
        cut = line.split("|")
        if len(cut) >= 5 and cut[0] == name:
            qfields = cut[:5]
    if fields is None and qfields is None:
        absent = "Invalid job id" in queue[1] and (
            acct[0] == 0 or "accounting storage is disabled" in acct[1]
        )
        if absent or (acct[0] == 0 and queue[0] == 0):
            return Record("slurm", name, "absent", state="no such job")
        return _unreadable("slurm", name, queue[0] if acct[0] == 0 else acct[0], queue[1] or acct[1])
    if qfields is not None:
        state_word, start, end = qfields[1], qfields[3], qfields[4]
        code_text = (
            fields[2]
            if fields is not None and fields[1].split()[0] == state_word
            else _wait_status(qfields[2])
        )
    else:
        assert fields is not None
        state_word, start, end, code_text = fields[1], fields[3], fields[4], fields[2]
    # sacct: "CANCELLED by 0"; the state is its first word.
    word = state_word.split()[0] if state_word.split() else ""
    started = _slurm_time(start)
    identity = f"{name}@{start}" if started is not None else None
    base = {"identity": identity, "started_at": started, "coarse": True, "pids": pids, "state": word}
    if word in SLURM_RUNNING:
        return Record("slurm", name, "running", **base)  # type: ignore[arg-type]
    # A final state is final whatever its times read as (a start in a format not parsed:
    # the probe asks for SLURM_TIME_FORMAT=standard, a site's wrapper may not).
    if word in SLURM_WAITING or (word and started is None and word not in SLURM_FAILED | {"COMPLETED"}):
        return Record("slurm", name, "waiting", state=word)
    code, sig = None, None
    m = re.fullmatch(r"(\d+):(\d+)", code_text.strip())
    if m:
        code, sig = int(m.group(1)), int(m.group(2)) or None
        if sig is not None:
            code = None
    if word == "COMPLETED":
        code = 0 if code is None else code
    elif code == 0 and sig is None:
        # A failed state with 0:0 (cancelled while pending, a node that failed): no exit
        # status was recorded with it, and none is told.
        code = None
    elif word not in SLURM_FAILED:
        return _unreadable("slurm", name, 0, f"a job state it does not know: {word or '(none)'}")
    return Record(
        "slurm",
        name,
        "exited",
        exit_code=code,
        signal=sig,
        oom=word == "OUT_OF_MEMORY",
        failed=word in SLURM_FAILED,
        finished_at=_slurm_time(end),
        **base,  # type: ignore[arg-type]
    )


def _wait_status(text: str) -> str:
    """squeue's ``exit_code`` (``-O``, Slurm 22.05: the job's raw wait status, 768 for exit 3,
    9 for SIGKILL) as sacct's ``code:signal`` (empty: not a number)."""
    status = _int(text)
    if status is None or status < 0:
        return ""
    return f"{(status >> 8) & 0xFF}:{status & 0x7F}"


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def parse_pids(body: bytes | None) -> tuple[int, ...]:
    """The first column's numbers (a PID a line; ``scontrol listpids``'s table too)."""
    pids: list[int] = []
    for line in (body or b"").decode("ascii", "replace").splitlines():
        word = line.split()[:1]
        if word and word[0].isdigit() and int(word[0]) > 0 and int(word[0]) not in pids:
            pids.append(int(word[0]))
    return tuple(pids[:PIDS_CAP])


def _answer(body: bytes | None) -> tuple[int | None, str]:
    """A section written as ``rc N`` then the tool's answer (``None``: no such section)."""
    text = (body or b"").decode("utf-8", "replace")
    head, _, rest = text.partition("\n")
    words = head.split()
    if len(words) == 2 and words[0] == "rc" and words[1].isdigit():
        return int(words[1]), rest
    return None, text


def read_record(kind: str, name: str, sections: Mapping[str, bytes]) -> Record:
    """The record from a probe's sections: ``supervisor`` (and for Slurm ``supervisor_queue``),
    each ``rc N`` then the tool's answer, and ``supervisor_pids`` (see
    ``sensors._signals.supervisor.snippet``)."""
    if "supervisor" not in sections:
        return Record(kind, name, "unreadable", unreadable="the probe wrote no supervisor section")
    pids = parse_pids(sections.get("supervisor_pids"))
    rc, body = _answer(sections["supervisor"])
    if kind == "docker":
        return parse_docker(name, rc, body, pids)
    if kind == "systemd":
        return parse_systemd(name, rc, body, pids)
    return parse_slurm(name, (rc, body), _answer(sections.get("supervisor_queue")), pids)
