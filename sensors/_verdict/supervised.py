"""Rules S1-S4: what a supervisor's record (docker, systemd, Slurm) decides before the process.

The record is the run's recorded end, as a launch wrapper's is (docs/supervisors.md):

- S1: a failure it recorded (a non-zero exit code, a signal, an OOM kill, a Slurm state such
  as TIMEOUT) is ``failed``, whatever the log and the outputs say: an exit and a kill look
  alike from /proc, and a completion line may be written before the job is killed.
- S2: an exit 0 it recorded while a process matching the job is alive outside the record's
  processes (the container's tree, the unit's cgroup, the job's step) is a ``contradiction``,
  both sides' evidence given: the supervisor's run is over, yet something of the job runs.
- S3: a record that says running while the process signal finds no match is ``running``: the
  supervisor sees the job's processes where this probe may not (another PID namespace).
- S4: a record that says the job is at work, or not started yet (Slurm's PENDING, a container
  created), while a log, outputs or process reading is ``unknown`` (a log sbatch has not
  opened yet, an output folder not made yet) is ``running``, as a live process with such a
  log is (rule 5): the supervisor's word that the job is at work stands. A job not started
  yet is ``running`` however long it waits (a queue is no stall); one at work with nothing
  readable for ``stall_after`` goes on to the other rules (``unknown``). A log that was read
  and doubts only whose a completion line is (an earlier run's, then more text) is no
  unreadable signal: while the record says at work, the line counts for nothing anyway, so
  the stage is ``running`` (``stalled`` once nothing moved for ``stall_after``, as for any
  job at work); an error line still fails it.

Everything else goes on to the process rules, with the record's exit 0 as a recorded exit
(rules 8 and 12b of ``gone``; 16 of ``no_process``).
"""

from __future__ import annotations

from collections.abc import Mapping

from sensors._base.model import Reading, Says, State
from sensors._verdict.progress import details, ev


def supervised(readings: Mapping[str, Reading], *, stalled: bool = False) -> tuple[State, list[str]] | None:
    """The state a supervisor's record decides, with its reasons (None: it decides nothing
    alone; the other rules go on). ``stalled``: nothing moved for ``stall_after``."""
    s, p = readings.get("supervisor"), readings.get("process")
    if s is None:
        return None
    if s.says is Says.FAILED:
        # S1
        return State.FAILED, [
            f"supervisor: {s.detail}",
            *details({k: r for k, r in readings.items() if r is not s}),
        ]
    if s.says is Says.DONE and p is not None and p.says is Says.WORKING:
        pids, processes = ev(s, "supervisor_pids"), ev(p, "processes")
        theirs = set(pids) if isinstance(pids, (list, tuple)) else set()
        listed = processes if isinstance(processes, (list, tuple)) else ()
        outside = [e for e in listed if isinstance(e, Mapping) and e.get("pid") not in theirs]
        if outside:
            # S2
            shown = ", ".join(f"pid {e.get('pid')} ({e.get('cmdline', '')})" for e in outside[:3])
            return State.CONTRADICTION, [
                f"the supervisor says the job ended ({s.detail}), but a process matching the job is"
                f" alive outside it: {shown}",
                f"supervisor: {s.detail}",
                f"process alive: {p.detail}",
            ]
    if s.says is Says.WORKING and p is not None and p.says is Says.DONE:
        # S3
        return State.RUNNING, [
            f"supervisor: {s.detail}",
            f"the process signal finds no process of the job ({p.detail}): the supervisor's word stands",
        ]
    if s.says is Says.WORKING and not any(r.says is Says.FAILED for r in readings.values()):
        # S4
        unknown = [r for r in readings.values() if r.says is Says.UNKNOWN and not ev(r, "line_doubt")]
        doubts = [r for r in readings.values() if r.says is Says.UNKNOWN and ev(r, "line_doubt")]
        waiting = ev(s, "supervisor_phase") == "waiting"
        if doubts and not unknown and not waiting and (p is None or p.says is not Says.WORKING):
            # The log was read; only which run wrote its completion line cannot be told, and while
            # the supervisor says this run is at work, no completion line decides anything.
            at_work = f"supervisor: {s.detail}"
            others = [f"{r.signal}: {r.detail}" for r in readings.values() if r is not s]
            if stalled:
                return State.STALLED, [f"no progress for stall_after while {at_work}", *others]
            return State.RUNNING, [at_work, *others]
        if waiting or (unknown and not stalled and (p is None or p.says is not Says.WORKING)):
            return State.RUNNING, [
                f"supervisor: {s.detail}",
                *(f"{r.signal} unknown: {r.detail}" for r in unknown),
                *(f"{r.signal}: {r.detail}" for r in readings.values() if r is not s and r not in unknown),
            ]
    return None


def recorded_exit_ok(readings: Mapping[str, Reading]) -> bool:
    """Whether a supervisor recorded this run's exit with status 0 (its record says done)."""
    s = readings.get("supervisor")
    return s is not None and s.says is Says.DONE
