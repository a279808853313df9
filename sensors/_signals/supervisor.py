"""The supervisor signal: what docker, systemd or Slurm recorded of the job.

A job run by a supervisor (``docker run -d``, ``systemd-run``, ``sbatch``) is no descendant of
a shell crosscheck can see, but the supervisor keeps what crosscheck otherwise infers: which
run this is, whether it is at work, how it ended. The snippet reads that record in the
check's one probe, read-only:

- docker: ``docker inspect --type container NAME``, and the descendants of the container's
  host PID (``/proc/PID/task/*/children``);
- systemd: ``systemctl show [--user] -p ... UNIT``, and the unit's ``cgroup.procs``;
- Slurm: ``sacct -j ID -P -n -o JobID,State,ExitCode,Start,End`` (the accounting, where there
  is one), ``squeue -h -t all -j ID -O JobID:|,State:|,exit_code:|,StartTime:|,EndTime:`` (the
  controller's memory of the job, with its wait status) and
  ``scontrol listpids ID`` (the job's PIDs on this node).

The answers are parsed by ``sensors._run.supervisor`` (pure). The signal is read first: a
new identity (container, invocation, job) is a new run (:func:`_read`), and the record's PIDs
are the job's for the signals read after it. What each state means for the verdict, what the
probe's user needs and what stays ``unknown``: docs/supervisors.md.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field, model_validator

from sensors._base.model import Reading, Says
from sensors._base.probe import PUT, helper
from sensors._base.schema import AbsPath, Section
from sensors._base.tolerances import WHOLE_SECOND
from sensors._base.trust import TRUST_FN, TRUST_SH
from sensors._run.run import LaunchEnd, Run
from sensors._run.supervisor import PIDS_CAP, SYSTEMD_PROPERTIES, UNTRUSTED_RC, Record, read_record
from sensors._signals.base import CheckFacts, ProbeInputs, Signal

Kind = Literal["docker", "systemd", "slurm"]

#: What the probe keeps of a tool's answer (docker's JSON holds the container's whole
#: config: its environment, its mounts; far below this for any real container).
ANSWER_CAP = 256 * 1024
_DOCKER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,253}$"
# systemd's unit name characters (unit_name_is_valid: letters, digits, ":-_.\@"), a type
# suffix or none (systemctl adds ".service").
_UNIT_NAME = r"^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]{0,255}$"
# A job ID, or an array task (1234_7) or a het job component (1234+1).
_SLURM_ID = r"^[1-9][0-9]{0,9}([_+][0-9]{1,9})?$"


class SupervisorSpec(Section):
    """The supervisor that runs the job and the job's name in it: exactly one of docker,
    systemd or slurm."""

    docker: str | None = Field(
        None, pattern=_DOCKER_NAME, description="the container's name (or ID), as `docker inspect` takes it"
    )
    systemd: str | None = Field(
        None, pattern=_UNIT_NAME, description="the unit's name (`.service` when no suffix is given)"
    )
    slurm: str | None = Field(None, pattern=_SLURM_ID, description="the Slurm job ID (1234, 1234_7)")
    user: bool = Field(
        False, description="systemd: the unit is the probe's user's (`systemctl --user`), not the system's"
    )
    bin: AbsPath | None = Field(
        None,
        description="the folder holding the supervisor's commands (docker; systemctl; sacct, squeue,"
        " scontrol) where it is not on the probe's PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:"
        "/usr/bin:/sbin:/bin), e.g. /opt/slurm/bin or /snap/bin",
    )

    @model_validator(mode="before")
    @classmethod
    def _job_id_text(cls, value: object) -> object:
        # ``slurm: 1234`` in YAML is a number: the ID as text.
        if (
            isinstance(value, dict)
            and isinstance(value.get("slurm"), int)
            and not isinstance(value["slurm"], bool)
        ):
            return {**value, "slurm": str(value["slurm"])}
        return value

    @model_validator(mode="after")
    def _one_of(self) -> SupervisorSpec:
        given = [k for k in ("docker", "systemd", "slurm") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of docker, systemd or slurm")
        if self.user and self.systemd is None:
            raise ValueError("supervisor.user is for a systemd unit (systemctl --user)")
        return self

    @property
    def kind(self) -> Kind:
        return "docker" if self.docker is not None else "systemd" if self.systemd is not None else "slurm"

    @property
    def name(self) -> str:
        return str(self.docker or self.systemd or self.slurm)


# --------------------------------------------------------------------------- probe snippet


def _tool(spec: SupervisorSpec, command: str) -> str:
    return shlex.quote(f"{spec.bin.rstrip('/')}/{command}" if spec.bin else command)


#: The commands each supervisor's snippet runs (from ``bin`` where the stage gives one).
_TOOLS = {"docker": ("docker",), "systemd": ("systemctl",), "slurm": ("sacct", "squeue", "scontrol")}


def _trust(spec: SupervisorSpec) -> list[str]:
    """``t=ok`` where the tools may be run: a ``bin`` folder and its commands are trusted as
    an exit record is (sensors/_base/trust.py): another user who could write them could
    print any record (an exit 0 for a job that failed), and would run as the probe's user."""
    if not spec.bin:
        return ["t=ok"]
    d = shlex.quote(spec.bin.rstrip("/") or "/")
    lines = [helper(TRUST_FN, list(TRUST_SH)), "t=ok"]
    for tool in _TOOLS[spec.kind]:
        lines.append(
            f'[ "$t" = ok ] && {{ t=$({TRUST_FN} {d} {_tool(spec, tool)}) && [ -n "$t" ]'
            f' || t="untrusted stat file - - - "{d}; }}'
        )
    return lines


def _run(section: str, command: str) -> list[str]:
    """``sec SECTION``, ``rc N`` (the tool's exit status: 127 where it is not there, as the
    shell says), then its answer (stdout and stderr, capped), every line of it through the
    escape: a container's labels or a unit's description are not the probe's text. Where
    ``bin`` is not trusted (``$t``), ``rc 96`` and why, the tool never run."""
    return [
        f"sec {section}",
        f'if [ "$t" = ok ]; then o=$({command} 2>&1); r=$?; else o=$t r={UNTRUSTED_RC}; fi',
        'echo "rc $r"',
        f'[ -n "$o" ] && {PUT} "$(printf \'%s\\n\' "$o" | head -c {ANSWER_CAP})"',
    ]


def snippet(spec: SupervisorSpec, memory: SupervisorMemory, probe: ProbeInputs) -> list[str]:
    """Read-only: the supervisor's record (one call, two for Slurm) and the job's PIDs."""
    name = shlex.quote(spec.name)
    trust = _trust(spec)
    if spec.kind == "docker":
        lines = trust + _run("supervisor", f"{_tool(spec, 'docker')} inspect --type container -- {name}")
        # The container's host PID (State.Pid: a number after a fixed key, first in the
        # answer: the State object comes before the config, and a label's value is quoted).
        lines += [
            "sec supervisor_pids",
            "q=$(printf '%s\\n' \"$o\" | sed -n 's/^ *\"Pid\": \\([1-9][0-9]*\\),*$/\\1/p' | head -n 1); n=0",
            f'while [ -n "$q" ] && [ $n -lt {PIDS_CAP} ]; do set -- $q; p=$1; shift; q=$*; echo "$p";'
            ' n=$((n+1)); for c in $(cat /proc/$p/task/*/children 2>/dev/null); do q="$q $c"; done; done',
        ]
        return lines
    if spec.kind == "systemd":
        user = " --user" if spec.user else ""
        props = ",".join(SYSTEMD_PROPERTIES)
        lines = trust + _run(
            "supervisor", f"TZ=UTC {_tool(spec, 'systemctl')}{user} show -p {props} -- {name}"
        )
        # The unit's cgroup (cgroup v2, else v1's systemd hierarchy): every process in it is
        # the unit's. A path systemd wrote, read only where it has no "..".
        lines += [
            "sec supervisor_pids",
            "g=$(printf '%s\\n' \"$o\" | sed -n 's/^ControlGroup=//p' | head -n 1)",
            'case $g in /*..* | *..*) ;; /*) for f in "/sys/fs/cgroup$g/cgroup.procs"'
            ' "/sys/fs/cgroup/systemd$g/cgroup.procs"; do [ -r "$f" ] &&'
            f' {{ head -n {PIDS_CAP} -- "$f"; break; }}; done ;; esac 2>/dev/null',
        ]
        return lines
    # SLURM_TIME_FORMAT=standard: the times as ISO 8601 whatever the probe user's
    # environment sets (a site's "relative", "%s": a start not parsed is no identity).
    env = "TZ=UTC SLURM_TIME_FORMAT=standard"
    acct = f"{env} {_tool(spec, 'sacct')} -j {name} -P -n -o JobID,State,ExitCode,Start,End"
    # -O's exit_code: the job's wait status, its exit code where there is no accounting.
    fields = "JobID:|,State:|,exit_code:|,StartTime:|,EndTime:"
    queue = f"{env} {_tool(spec, 'squeue')} -h -t all -j {name} -O '{fields}'"
    lines = trust + _run("supervisor", acct) + _run("supervisor_queue", queue)
    lines += [
        "sec supervisor_pids",
        f'[ "$t" = ok ] && {_tool(spec, "scontrol")} listpids {name} 2>/dev/null | head -n {PIDS_CAP + 1}',
    ]
    return lines


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class SupervisorMemory:
    """The identity of the run this watch has been reading (None: none seen yet), and
    whether the last check that read its record found it at work."""

    identity: str | None = None
    running: bool = False


def record_evidence(record: Record) -> dict[str, object]:
    """The record as a reading's evidence (``supervisor_*`` keys: the verdict and the
    person read them)."""
    evidence: dict[str, object] = {
        "supervisor": record.kind,
        "supervisor_name": record.name,
        "supervisor_phase": record.phase,
        "supervisor_state": record.state,
        "supervisor_identity": record.identity,
    }
    if record.phase == "exited":
        evidence.update(
            exit_status=record.exit_status,
            exit_code=record.exit_code,
            exit_signal=record.signal,
            oom_killed=record.oom,
            exited_at=record.finished_at,
            exited_coarse=record.coarse,
        )
    if record.started_at is not None:
        evidence["started_at"] = record.started_at
    if record.pids:
        evidence["supervisor_pids"] = list(record.pids[:64])
    if record.unreadable:
        evidence["supervisor_unreadable"] = record.unreadable
    return evidence


def reading_of(
    record: Record, *, now: float | None, host: str, bound: str | None = None, begins: float | None = None
) -> Reading:
    """What the record says of the job. ``bound``: the identity a launch bound the run to (a
    record of another identity is another run's). ``begins``: when the run began, as given
    with ``since`` (an exit recorded of a run begun, or ended, before it is an earlier run's)."""
    evidence = record_evidence(record)
    where = f"{record.kind} {record.name}"
    if record.phase == "unreadable":
        return Reading(
            "supervisor",
            Says.UNKNOWN,
            f"{where}: the record cannot be read: {record.unreadable}",
            evidence,
            now,
            host,
        )
    if bound is not None and record.identity is not None and not _is_bound(record.identity, bound):
        evidence["supervisor_bound"] = bound
        return Reading(
            "supervisor",
            Says.UNKNOWN,
            f"{where} is another run ({record.identity}), not the launched one ({bound}): the launched"
            " run's record is gone, and how it ended cannot be told from it",
            evidence,
            now,
            host,
        )
    # As for a process (docs/run-binding.md, rule 11): an earlier run's record is `running`
    # while it runs, its exit no evidence of this run.
    earlier = _earlier(record, begins) if record.phase == "exited" else ""
    if earlier:
        evidence["supervisor_before"] = begins
        return Reading(
            "supervisor",
            Says.UNKNOWN,
            f"{where} {record.how_it_ended()}, but that is an earlier run's end ({earlier} before"
            " the given start of the run): no record of a run begun since",
            evidence,
            now,
            host,
        )
    if record.phase == "absent":
        return Reading(
            "supervisor",
            Says.UNKNOWN,
            f"{where}: {record.state}: not started yet, or removed with its record",
            evidence,
            now,
            host,
        )
    if record.phase == "waiting":
        return Reading(
            "supervisor",
            Says.WORKING,
            f"{where} has not started its job yet ({record.state})",
            evidence,
            now,
            host,
        )
    if record.phase == "running":
        pids = f", pids {', '.join(map(str, record.pids[:8]))}" if record.pids else ""
        return Reading(
            "supervisor", Says.WORKING, f"{where} is running ({record.state}{pids})", evidence, now, host
        )
    ended = record.how_it_ended()
    if record.success:
        return Reading("supervisor", Says.DONE, f"{where} {ended}", evidence, now, host)
    return Reading("supervisor", Says.FAILED, f"{where} {ended}", evidence, now, host)


def _earlier(record: Record, begins: float | None) -> str:
    """How the record shows itself an earlier run's than one that began at ``begins`` (its
    start, else its end, clearly before it; to the second where the record keeps whole
    seconds); empty: it does not."""
    if begins is None:
        return ""
    slack = WHOLE_SECOND if record.coarse else 0.0
    if record.started_at is not None:
        return "it began" if record.started_at + slack < begins else ""
    if record.finished_at is not None and record.finished_at + slack < begins:
        return "it ended"
    return ""


def _is_bound(identity: str, bound: str) -> bool:
    """Whether a record's identity is the one a launch bound: a unit's InvocationID exactly;
    a container's ID or a job's ID with whatever start the record has (the launch saw only
    the ID: a container started again under that ID is, for a launch, the same run)."""
    return identity == bound or identity.startswith(bound + "@")


def run_of(record: Record, slack: float = WHOLE_SECOND) -> Run:
    """The run a record's identity begins (its start, to the record's precision)."""
    return Run(source="supervisor", started_at=record.started_at, supervised=record.identity, slack=slack)


def _read(
    spec: SupervisorSpec, sections: Mapping[str, bytes], memory: SupervisorMemory, facts: CheckFacts
) -> tuple[Reading, SupervisorMemory, CheckFacts]:
    record = read_record(spec.kind, spec.name, sections)
    run = facts.run
    bound = run.supervised if run is not None and run.source == "launch" else None
    # A start given with --since is exact (to its slack): a record begun before it is an
    # earlier run's, whatever it says (its exit 0 is no word of this run).
    begins = (
        run.started_at - (run.slack or 0.0)
        if run is not None and run.source == "since" and run.started_at is not None
        else None
    )
    reading = reading_of(record, now=facts.meta.now, host=facts.host, bound=bound, begins=begins)
    new_memory = memory
    # At work at the last check that read this run's record (its identity the same).
    alive_before = memory.running and record.identity is not None and memory.identity == record.identity
    if record.identity is not None and reading.says is not Says.UNKNOWN:
        if (
            bound is None
            and (run is None or run.source != "since")
            and (memory.identity != record.identity or run is None or run.supervised != record.identity)
        ):
            # A new container, invocation or job: a new run, whatever file times say. The
            # checker sets the last run's memory aside (its log offsets, its verdict).
            run = run_of(record, 0.0 if not record.coarse else WHOLE_SECOND)
        elif (
            run is not None
            and run.source == "since"
            and memory.identity != record.identity
            and record.started_at is not None
        ):
            # Another container, invocation or job since the one this watch saw, or the first
            # this watch sees: the latest run since the start given decides, and nothing of
            # the last one (its end, its outputs' memory) holds for it (fuzzer seeds 87, 105,
            # 159: container 1's end made container 2's outputs "written after the job was
            # over", unknown for good). Its start is the record's (to its precision), never
            # the start given: what was written between the two is the last run's (fuzzer
            # seed 57; seed 4101729: a watch begun after container 2 with a since before
            # container 1 took container 1's completion line for container 2's).
            run = replace(
                run,
                supervised=record.identity,
                started_at=max(record.started_at, run.started_at or record.started_at),
                slack=WHOLE_SECOND if record.coarse else 0.0,
            )
        new_memory = SupervisorMemory(record.identity, running=record.phase == "running")
    # The record, where it tells of this run (not unreadable, absent, another run's): the
    # process signal of a stage with no match takes its PIDs for the job's; the log and the
    # outputs read its job at work now or at the last check as a live process of the run.
    told = reading.says is not Says.UNKNOWN
    facts = facts._replace(
        run=run,
        supervised=record if told else None,
        supervised_alive=told and (record.phase == "running" or alive_before),
        supervised_earlier=record.identity is not None and bool(_earlier(record, begins)),
    )
    if record.phase == "exited" and facts.launch is None and reading.says is not Says.UNKNOWN:
        # The recorded end, as a launch wrapper's: what the log and outputs hold after it is
        # no longer the job's own work (the signals read after this one use it so).
        facts = facts._replace(
            launch=LaunchEnd(record.exit_status, record.finished_at, over=True, coarse=record.coarse)
        )
    if facts.job_pids is None and record.pids and record.phase == "running":
        facts = facts._replace(job_pids=frozenset(record.pids))
    return reading, new_memory, facts


SIGNAL: Signal[SupervisorSpec, SupervisorMemory] = Signal("supervisor", SupervisorMemory, snippet, _read)
