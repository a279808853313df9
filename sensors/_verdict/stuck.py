"""Which ``unknown`` verdicts are stuck, and the advice that goes with them.

A verdict is stuck (:class:`~sensors._base.model.Stuck`) where no later reading of this run
can make it complete, and only there. Each cause below is a fact the signals keep for good
once read, for a run that is never rebound to a later one:

- ``launch_superseded``: a launched run is over and a later writer has been at its log
  (``launch_superseded``), its outputs (``written_after_exit``) or its process's place (a
  later run's process: ``superseded_by_pid``). A launched run is its launch for the whole
  watch; nothing read from then on is its work.
- ``exit_unclear``: a launched run's exit was recorded before this watch first read the log,
  and the log's times are another clock's: whether a later run wrote it cannot be told, at
  any later check either.
- ``blind_after_exit``: a launched job's exit is recorded with status 0, and the probe
  cannot see every process (another PID namespace, hidepid): whether the job left a process
  at work (a worker it double-forked, still writing an output) cannot be told from where the
  probe stands, now or later.
- ``nothing_tells``: the job is gone (this watch saw it alive), and the stage has no log, no
  outputs and no recorded exit status: an exit and a kill look alike from /proc, now and later.
- ``line_doubt``: the job is gone (this watch saw it alive) for ``exit_grace`` or more, its
  log unwritten for as long, and which run wrote its completion line cannot be told (``line_doubt``:
  an appending log watched after its line, text after the line never seen written, ...). The
  run's processes are gone and the log's lag is over: no later byte is this run's, and none
  can tell the line's run.

Left out on purpose (they may still change, however unlikely): a line in doubt while the job
is alive or within ``exit_grace`` of its end (a completion line written later is read anew,
and a file server may show the last bytes late); outputs written after the line
(``after_line``), which hold only for that line; an exit record not written or not trusted
(it may yet be written, or its directory's mode fixed).

The advice is a function of what the watch had (:class:`Had`): it never tells a watch with
``--since`` to give one, a watch that saw the job end to watch it from before its end, or a
launched run to launch through crosscheck.
"""

from __future__ import annotations

from collections.abc import Mapping

from sensors._base.model import Reading, Says, State, Stuck, Verdict
from sensors._run.advice import Fix, Had, advice
from sensors._run.run import Run

__all__ = ["doubt_only", "had_of", "stuck"]


def had_of(readings: Mapping[str, Reading], run: Run | None, *, takes_since: bool = True) -> Had:
    """What the watch had, from this check's readings and where its run begins
    (``takes_since``: whether it can be given a run start at all)."""
    p = readings.get("process")
    launched = run is not None and run.source == "launch"
    seen = False
    if p is not None:
        launched = launched or p.evidence.get("launched") is True
        seen = p.evidence.get("seen_alive") is True
    gone = p is not None and p.says is Says.DONE
    lg = readings.get("log")
    # The log bound whole by the watch (it was absent at an earlier check, or born after the
    # watch began), or born after the watch began whatever bound it: see
    # sensors._signals.log._watched_before_job.
    before_job = lg is not None and (
        (lg.evidence.get("run_bound_by"), lg.evidence.get("run_from_offset")) == ("watch", 0)
        or lg.evidence.get("born_after_watch") is True
    )
    return Had(
        since=run is not None and run.source == "since",
        takes_no_since=not takes_since,
        launched=launched,
        seen_alive=seen,
        end_seen=seen and gone,
        before_job=before_job,
    )


#: Each cause: why, the fixes it offers (the first that the watch has not done is said first).
_CAUSES: dict[str, tuple[str, tuple[Fix, ...]]] = {
    "launch_superseded": (
        "the launched run is over and a later writer has been at its log, outputs or process:"
        " nothing read from now on is the launched run's, so it can never be found complete",
        (Fix.OWN_PATHS,),
    ),
    "exit_unclear": (
        "the launched job's exit was recorded before this watch first read its log, whose times"
        " are another clock's: whether a later run wrote to it can never be told",
        (Fix.FROM_LAUNCH, Fix.LOCAL_LOG),
    ),
    "line_doubt": (
        "the job is gone, and which run wrote its completion line cannot be told (see the log's"
        " reading): none of its processes can write another, so no later check can tell either",
        (),  # the log's own advice (``line_fix``): it knows what the watch saw of the line
    ),
    "blind_after_exit": (
        "the launched job exited 0 (its wrapper recorded it), but this probe cannot see every"
        " process: whether the job left a process at work cannot be told, at any later check"
        " either",
        (Fix.SEE_PROCESSES, Fix.RECORD_ALONE),
    ),
    "nothing_tells": (
        "the job is gone and nothing in this stage tells a success from a crash (no log, no"
        " outputs, no recorded exit status): no later check can tell either",
        (Fix.ADD_SIGNAL, Fix.LAUNCH),
    ),
}


def cause(readings: Mapping[str, Reading], gone_for: float = 0.0, grace: float = 0.0) -> str | None:
    """Which fact kept for good holds this check's readings from completing (None: none);
    ``gone_for``: how long the process signal has said the job is gone (``grace``: the
    stage's exit_grace)."""
    p, lg, o = readings.get("process"), readings.get("log"), readings.get("outputs")
    if any("host_error" in r.evidence for r in readings.values()):
        return None
    if p is not None and p.says is Says.UNKNOWN and p.evidence.get("superseded_by_pid") is not None:
        return "launch_superseded"  # the process signal's own: a later run's, after the launch
    if lg is not None and lg.says is Says.UNKNOWN and lg.evidence.get("launch_superseded"):
        return "launch_superseded"
    if o is not None and o.says is Says.UNKNOWN and o.evidence.get("written_after_exit") is True:
        return "launch_superseded"
    if lg is not None and lg.says is Says.UNKNOWN and lg.evidence.get("exit_unclear") is True:
        return "exit_unclear"
    if p is not None and p.says is Says.UNKNOWN and p.evidence.get("blind_after_exit") == 0:
        return "blind_after_exit"
    if (
        p is not None
        and lg is None
        and o is None
        and p.says is Says.DONE
        and p.evidence.get("seen_alive") is True
        and not p.evidence.get("launched")
        and "exit_record" not in p.evidence
        and not isinstance(p.evidence.get("exit_status"), int)
    ):
        return "nothing_tells"
    if (
        p is not None
        and lg is not None
        and p.says is Says.DONE
        and p.evidence.get("seen_alive") is True
        and lg.says is Says.UNKNOWN
        and lg.evidence.get("line_doubt") is True
        and gone_for >= grace
        and gone_for > 0
        and _quiet_for(lg, grace)
    ):
        return "line_doubt"
    return None


def doubt_only(verdict: Verdict) -> bool:
    """Whether ``verdict`` is held back for good only by ``line_doubt`` of one kind: its
    completion line is followed by text that no process the memory it was checked with knows
    to have written the line can have written. A lack of knowledge, not evidence against the
    run: a process that memory saw alive with the line in the log was a writer (its text
    attributed), its child, a later run (the line demoted) or undatable (another kind), so
    none it saw is a later run begun after the line; a check from a memory that saw the
    line's writer at work and its end can tell (sensors._check.checker, where a follower
    confirms a holder's verdict). Not the other kinds of ``line_doubt``: a live process not
    known to have begun before the line (``undatable_by``), or a line that may predate the
    run the memory bound to the processes it saw ("may be an earlier run's"): those doubt a
    process that memory saw, which the other may never have (tests/test_adversary_s18.py: a
    later run begun after the line, seen by the holder only, completed by its follower)."""
    if verdict.stuck is None or cause(verdict.readings, float("inf"), 0.0) != "line_doubt":
        return False
    ev = verdict.readings["log"].evidence
    return ev.get("complete_line") is not None and "followed_by" in ev and "undatable_by" not in ev


def _quiet_for(lg: Reading, grace: float) -> bool:
    """Whether the log was last written ``grace`` or more ago (its host's clock): one written
    since the job was gone has a writer the process signal does not match (`sh run.sh`
    running the matched train.py, then an evaluation that ends with the run's line)."""
    age = lg.evidence.get("age_seconds")
    return isinstance(age, (int, float)) and not isinstance(age, bool) and age >= max(grace, 0.0)


def stuck(
    state: State,
    readings: Mapping[str, Reading],
    run: Run | None,
    gone_for: float = 0.0,
    grace: float = 0.0,
    *,
    takes_since: bool = True,
) -> Stuck | None:
    """The :class:`Stuck` of an ``unknown`` verdict held for good (None: it may still change)."""
    if state is not State.UNKNOWN:
        return None
    why = cause(readings, gone_for, grace)
    if why is None:
        return None
    text, fixes = _CAUSES[why]
    lg = readings.get("log")
    if why == "line_doubt" and lg is not None:
        fix = str(lg.evidence.get("line_fix") or "")
    else:
        fix = advice(fixes, had_of(readings, run, takes_since=takes_since))
    return Stuck(text, fix or "nothing this watch lacked would have told; see docs/run-binding.md")
