"""Rules 6-15: the process is gone (exited, a zombie, a reused PID, a reboot)."""

from __future__ import annotations

from collections.abc import Mapping

from sensors._base.model import Reading, Says, State
from sensors._config.stage import PolicySpec
from sensors._run.advice import Fix, Had, advice
from sensors._run.run import Run
from sensors._verdict.progress import Clocks, ev, ran, short
from sensors._verdict.stuck import had_of
from sensors._verdict.supervised import recorded_exit_ok

#: What a person can do when evidence cannot be tied to the run being watched.
TIE_FIXES = (Fix.SINCE, Fix.WATCH_EARLIER, Fix.CHECK_OFTEN, Fix.LAUNCH)
#: Those fixes, for a watch that had none of them (see :func:`how_to_tie`).
HOW_TO_TIE = advice(TIE_FIXES, Had())


def how_to_tie(had: Had) -> str:
    """The ways to tie evidence to the run that the watch did not take already (never what
    it did: a --since given, a launch), or why none is left."""
    return advice(TIE_FIXES, had) or "the watch had every tie crosscheck knows"


#: What a stage with only a process signal (and maybe a GPU) lacks, and how to give it.
CANNOT_TELL = (
    "no log completion line, no outputs, no recorded exit status (an exit and a kill look alike"
    " from /proc); add a log or outputs section, or launch the job through crosscheck (a launch"
    " section: its exit status is recorded), or name its supervisor (docker, systemd, slurm)"
)

Outcome = tuple[State | None, list[str]]


def gone(
    readings: Mapping[str, Reading],
    policy: PolicySpec,
    clocks: Clocks,
    run: Run | None = None,
    *,
    takes_since: bool = True,
) -> Outcome:
    """The state (None: every signal done, the settle count decides) and its reasons, the
    one that decided first (``process gone`` is context, not why it failed)."""
    p, lg, g = readings["process"], readings.get("log"), readings.get("gpu")
    # Rule 6: an error line of this run.
    if lg is not None and lg.says is Says.FAILED:
        return State.FAILED, [f"log: {lg.detail}", _gone(p)]
    # Rule 7: gone (or a zombie) yet its PIDs still hold a GPU context: the process table and
    # the driver disagree. Busy or merely holding memory, it is not a clean exit.
    gpu_job_pids = list(ev(g, "job_pids_on_gpu") or []) if g else []  # type: ignore[call-overload]
    if gpu_job_pids:
        held = "busy on" if ev(g, "job_gpu_busy") else "holding memory on"
        return State.CONTRADICTION, [
            f"the job's PIDs {gpu_job_pids} are still {held} the GPU, though the process is gone:"
            f" {g.detail if g else ''}",
            f"process says gone: {p.detail}",
        ]
    # Rule 7b: crosscheck launched the job and its launch wrapper recorded how it ended: a
    # status other than 0 (an exit code, or a signal such as SIGKILL) is a failure, whatever
    # the log and the outputs say (an exit and a kill look alike from /proc).
    status = ev(p, "exit_status")
    if isinstance(status, int) and status != 0:
        return State.FAILED, [_gone(p)]
    # Rule 7c: launched so, but no status was recorded (yet): the wrapper writes it the moment
    # the job ends; past exit_grace, it ended without writing it (killed with the job).
    if ev(p, "exit_record"):
        waited = f"{clocks.gone_for:.0f}s after the exit" if clocks.gone_for else "at the exit"
        return State.UNKNOWN, [
            f"the exit status is not recorded ({ev(p, 'exit_record')}), {waited}: its launch"
            " wrapper ended without writing it (killed with the job?) or has not yet; how the job"
            " ended cannot be told",
            _gone(p),
        ]
    # Rule 8: never seen alive in this watch, nor launched by it: not started yet, or a match
    # that matches nothing. Neither is evidence that the job ran and exited, and without this
    # run's completion line, outputs may be an earlier run's. A recorded exit of this run (its
    # launch wrapper's status 0, or its supervisor's) is: the run ran, and ended so.
    if not ran(p, lg) and not recorded_exit_ok(readings) and ev(p, "exit_status") != 0:
        if lg is not None and lg.says is Says.UNKNOWN and ev(lg, "absent") is True:
            # Nothing of the job yet: said plainly, first (notes/ml44.md, item 7: "log unknown:
            # log unreadable: stat: cannot statx ...", then "and no process found ...").
            return State.UNKNOWN, [
                f"{lg.detail} and {_never_seen(p)}: not started yet, or log.path or"
                " process.match/pid is wrong",
                *(f"{r.signal}: {r.detail}" for r in readings.values() if r is not p and r is not lg),
            ]
        if lg is not None and lg.says is Says.UNKNOWN:
            # The log could have tied it (a completion line of this run), and cannot tell: its
            # reason first. "Nothing else ties the evidence" read as the cause, with --since
            # given and the log bound by it, where the cause was text after the line.
            return State.UNKNOWN, [
                f"log unknown: {lg.detail}",
                f"process: {_never_seen(p)}",
                *(f"{r.signal}: {r.detail}" for r in readings.values() if r is not p and r is not lg),
            ]
        return State.UNKNOWN, [
            _never_seen(p),
            "not started yet, ended before this watch first looked, or process.match/pid is"
            " wrong; nothing else ties the"
            f" evidence to this run ({how_to_tie(had_of(readings, run, takes_since=takes_since))})",
            *(f"{r.signal}: {r.detail}" for r in readings.values() if r is not p),
        ]
    return _after_the_exit(readings, policy, clocks)


def _gone(p: Reading) -> str:
    """The process reading as context of a verdict on a job that is over: "process gone"
    where this watch saw it at work (or launched it, its exit recorded); a job it never saw
    is not found, not seen gone (notes/ml44.md, item 8: "process gone: no process found",
    with --since given and the job over before the first check)."""
    if ev(p, "seen_alive") or ev(p, "launched"):
        return f"process gone: {p.detail}"
    return f"process: {_never_seen(p)}"


def _never_seen(p: Reading) -> str:
    """A process reading of a job this watch never saw alive (nor launched), in words that
    say each thing once: "no process of the job found (match 'x'), nor seen alive during this
    watch", not "no process found and none seen alive during this watch: no process found
    (match 'x')"."""
    found = "no process found"
    if p.detail.startswith(found):
        return f"no process of the job found{p.detail[len(found) :]}, nor seen alive during this watch"
    return f"none seen alive during this watch: {p.detail}"


def _after_the_exit(readings: Mapping[str, Reading], policy: PolicySpec, clocks: Clocks) -> Outcome:
    p, lg, o = readings["process"], readings.get("log"), readings.get("outputs")
    # Rule 9: lagging — no completion line yet, or outputs short — within exit_grace (buffered
    # writes, NFS attribute caching). Outputs all there but being confirmed stable is not
    # lagging: the settle count handles it.
    lagging = [r for r in (lg, o) if r is not None and r.says is Says.WORKING and (r is lg or short(r))]
    grace = policy.exit_grace
    if lagging and clocks.gone_for < grace:
        return State.UNKNOWN, [
            f"waiting up to {grace:.0f}s after the exit for writes to land ({clocks.gone_for:.0f}s so far)",
            _gone(p),
            *(f"{r.signal}: {r.detail}" for r in lagging),
        ]
    # Rule 10: outputs short, for good — only as counted after the job's end. A probe counts
    # the outputs before it reads the log and the process table, so the check that first
    # finds the job over (a job that writes its last outputs, its line and exits inside one
    # probe; one never seen alive whose line this check found) may hold a count from before
    # its last writes: the next check's count is the first surely after the end. exit_grace
    # is no guard here: it may be 0, and a job never seen alive has been "gone" since the
    # watch began.
    if o is not None and o.says is Says.WORKING and short(o) and not clocks.over_before:
        return State.UNKNOWN, [
            "outputs short, but counted at the check that first found the job over, before its"
            " process table was read: they may predate its last writes; the next check decides",
            f"outputs: {o.detail}",
            _gone(p),
        ]
    # Changed since the last check (a count that moved, a file rewritten), with the job already
    # over at that check, they are still being written — late, or by a writer the process
    # signal does not find: a re-run that truncated them in the moment between this probe's
    # process table and its count. A count such a writer is still growing settles nothing; it
    # fails once it stops changing.
    if o is not None and o.says is Says.WORKING and short(o):
        moved = _outputs_moved(o)
        if moved:
            return State.UNKNOWN, [
                f"outputs short but {moved} since the last check, which found the job gone already:"
                " still being written (late writes, or a writer the process signal does not find:"
                " a new run?); failed only once they stop changing",
                f"outputs: {o.detail}",
                _gone(p),
            ]
        return State.FAILED, [f"outputs short: {o.detail}", _gone(p)]
    if lg is not None and lg.says is Says.WORKING:
        # Rule 11: outputs complete, no completion line.
        if o is not None and o.says is Says.DONE:
            return State.CONTRADICTION, [
                f"outputs complete, but the log has no completion line of this run: {lg.detail}",
                _gone(p),
                f"outputs complete: {o.detail}",
            ]
        # Rule 12: no completion line, no outputs configured.
        if o is None:
            return State.FAILED, [
                f"the log has no completion line of this run: {lg.detail}",
                _gone(p),
            ]
    # Rule 12b: nothing in the stage tells a success from a crash (no log with a completion
    # line, no outputs to count) and no exit status was recorded: a SIGKILL looks like an exit.
    if lg is None and o is None and ev(p, "exit_status") != 0 and not recorded_exit_ok(readings):
        return State.UNKNOWN, [
            f"nothing in this stage tells a success from a crash: {CANNOT_TELL}",
            _gone(p),
        ]
    # Rule 13: any configured signal unknown.
    unknowns = [r for r in readings.values() if r.says is Says.UNKNOWN]
    if unknowns:
        return State.UNKNOWN, [f"{r.signal} unknown: {r.detail}" for r in unknowns]
    # Rule 14: a signal not done yet (outputs confirming they stopped changing, a GPU window
    # not yet covered, a log still written after its completion line).
    not_done = [r for r in readings.values() if r.says is not Says.DONE]
    if not_done:
        return State.RUNNING, [*(f"{r.signal}: {r.detail}" for r in not_done), _gone(p)]
    # Rule 15: every signal done; `decide` completes it after `settle` checks.
    return None, []


def _outputs_moved(o: Reading) -> str | None:
    """How the outputs changed since the last reading (None: not that this reading can tell)."""
    count, before = ev(o, "count"), ev(o, "previous_count")
    if ev(o, "rewritten"):
        return "rewritten"
    if isinstance(count, int) and isinstance(before, int) and count != before:
        return f"changed ({before} → {count})"
    return None
