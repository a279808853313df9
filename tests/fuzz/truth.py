"""The ground truth: may a watch say ``complete`` now? A pure function of the world's facts.

The fuzzer knows what the product has to guess: every run of the job it started (when, what
it wrote to the log, how it ended) and every output on disk. A watch's target is the latest
run (runs never overlap: a run ends before the next starts) that the watch could observe (see
:func:`observable`), within the watch's scope:

- with a launch record: the launched run — a later run started means the target is gone;
- with ``since`` (resolved to a time ``p``, its earliest possible value ``since_lo``): the
  latest run, provided it started after ``p`` — a since is the run's start, so a run that was
  alive at ``p`` (begun before it) is an earlier run, and a latest run begun before ``p``
  means the run asked for has not started;
- otherwise: the latest run.

``complete`` is right when that target exited with status 0 and meets the watch's definition
(a whole line *it* wrote matches ``log.complete``; the output count reaches
``outputs.expected``). Anything else is a false complete, graded:

- ``hard``: the product had, or should have had, the evidence: no target, a target running
  (visible or hidden from the probe: what the probe cannot see is not gone), killed or failed
  without declaring completion, a completion line that is not the target's or no longer
  matches, outputs short, a process-only stage whose job did not exit 0.
- ``soft``: the target declared completion through every configured signal (its completion
  line, its outputs) and then died, or is alive where no configured signal can see it (no
  process section, or a ``match`` edited to miss it). Without a recorded exit status no
  probe can tell; reported, not failed on. A launched run whose wrapper recorded a non-zero
  exit is not soft: the watch of that launch reads the record (hard).

That is one side (``must not complete``). The other side, :func:`obligation`, says when a
watch **must** complete: the evidence a careful operator has settles it (the run is
identified — seen alive by the watch, launched with its exit recorded, or begun wholly after
the watch's since —, it ended with status 0 and the watch could see that, its completion line
and outputs were there before the end, and its line cannot be an earlier run's). Where the
truth allows ``complete`` but such evidence is missing, or alternatives lie within the
measured precision (:data:`PRECISION`), the truth is ``either``. :func:`failed_allowed`
grades ``failed``: a ``failed`` verdict when the run it can be about did not fail is a false
failed.

A supervised run (``Definition.supervisor``): where the watch reads the record
(:func:`record_read`), it is an exit record like a launch wrapper's, of the latest container:
the latest run is observable, a run it says is running or that ended otherwise than 0 is never
complete (hard, not soft), and its exit 0 settles the end (``must``, a process-only stage too).
An unreadable record is no record.

Times are this machine's wall clock (the job and the probe run here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: A since within this many seconds of a run's end may bind either way (rounding of a
#: duration, the time a first check takes): the truth is lenient there.
SINCE_SLACK = 1.0
#: How long after a check's clock read its probe may still be scanning /proc: a local probe
#: takes ~35 ms on this machine idle (bench/local_probe.py), longer under the fuzzer's load
#: (not measured; 0.5 s is a margin over it). A run told to end within it may have been gone
#: from that scan.
SCAN_SLACK = 0.5
#: How far apart two moments must be for the product to tell their order: /proc's start
#: times against the boot clock are good to 50 ms (a tick each side, the start kept to the
#: ms); a file time lags the clock by a kernel tick. Closer than this: ``either``.
PRECISION = 0.05

OK, SOFT, HARD = "ok", "soft", "hard"
#: The container's name in a supervised history (the stand-in's state is per world).
SUPERVISED_NAME = "extract"
SEVERITY = {OK: 0, SOFT: 1, HARD: 2}


@dataclass(frozen=True)
class RunFacts:
    """One run of the job, as far as the snapshot's time."""

    index: int  # 1, 2, ...
    started: float  # wall clock just before the spawn
    ended: float | None = None  # wall clock once reaped; None: alive
    status: int | None = None  # exit status; negative: killed by that signal
    text: str = ""  # the log's whole lines this run ended (its launcher's included), each with its newline
    launched: bool = False
    count_trace: bool = False  # changed the output count (its launcher's clean included)
    recorded: bool = False  # launched, and its wrapper recorded its exit (not killed with it)
    pid: int | None = None  # the process the world spawned (a launched run: its wrapper)
    container: str = ""  # supervised: the container's ID (a new one per run)
    #: It created the log, opening it well after its start (a job's imports before Python's
    #: `logging` opens its file): every byte of the log is its own, and its file times say so.
    began_log: bool = False
    #: When each of ``lines`` was ended, at the latest (the world's clock after the job's ack).
    line_times: tuple[float, ...] = ()
    #: The earliest it can have ended: when its exit or kill step began (``ended`` is when the
    #: world reaped it, which under load can be well after the process was gone).
    ending_from: float | None = None

    @property
    def lines(self) -> list[str]:
        """The log's whole lines this run ended: a line is the one of whoever wrote its
        newline (a killed run's unfinished line glued to the next writer's text is the next
        writer's, as it reads in the file)."""
        return self.text.split("\n")[:-1]

    def how_ended(self) -> str:
        if self.ended is None:
            return "is alive"
        if self.status is not None and self.status < 0:
            return f"was killed by signal {-self.status}"
        return f"exited {self.status}"


@dataclass(frozen=True)
class Snapshot:
    """The world between two steps: the runs so far and what is on disk."""

    runs: tuple[RunFacts, ...]
    files: int  # *.pt files in the outputs directory (temp names and dotfiles excluded)
    records: int  # newline-terminated lines of the JSONL file

    @property
    def latest(self) -> RunFacts | None:
        return self.runs[-1] if self.runs else None


@dataclass(frozen=True)
class Definition:
    """The parts of a stage definition the fuzzer varies (the rest is fixed)."""

    signals: tuple[str, ...] = ("process", "log", "outputs")
    expected: int = 4
    complete: str = "^Extraction complete"
    match_hits: bool = True  # False: process.match edited so that it misses the job
    outputs_kind: str = "files"  # or "lines" (a JSONL file)
    progress: bool = True
    settle: int = 1
    exit_grace: float = 0.0
    #: The job runs under a supervisor (docker: the world writes its container record, see
    #: ``World.supervise``); "" for none.
    supervisor: str = ""
    #: ``process: {}`` (the record's processes are the job's) instead of ``process.match``.
    process_any: bool = False
    #: Whether the supervisor's record can be read (else: docker's permission denied). Not a
    #: part of the stage file: a fact of the history's host, fixed for the whole history.
    record_readable: bool = True

    def binds_alike(self, other: Definition) -> bool:
        """Whether what a watch saw under ``other`` still names runs under this definition.

        The product drops a run and everything tied to it where the ``process`` section (or
        the supervisor that names the run) changed, and the log's memory where the ``log``
        section did (docs/state-store.md): the evidence of another version of the stage may
        not decide for this one. An edit of ``outputs`` or ``policy`` alone keeps both."""

        def run_parts(d: Definition) -> tuple:
            return ("process" in d.signals, d.match_hits, d.process_any, d.supervisor)

        def log_parts(d: Definition) -> tuple:
            return ("log" in d.signals, d.complete, d.progress)

        # The log's parts only where this definition reads a log: a run seen under another
        # log section stands where only the process memory is read (the product keeps it
        # across a log edit: the adversary's review of 23fa430).
        same_log = "log" not in self.signals or log_parts(self) == log_parts(other)
        return run_parts(self) == run_parts(other) and same_log

    def stage_dict(self, *, name: str, tag: str, log: str, out: str, lines: str, sup_bin: str = "") -> dict:
        stage: dict = {"stage": name, "host": "local"}
        if self.supervisor:
            stage["supervisor"] = {self.supervisor: SUPERVISED_NAME, "bin": sup_bin}
        if "process" in self.signals:
            if self.supervisor and self.process_any:
                stage["process"] = {}
            else:
                stage["process"] = {"match": f"--tag {tag}{'' if self.match_hits else '-elsewhere'}( |$)"}
        if "log" in self.signals:
            stage["log"] = {"path": log, "complete": self.complete, "error": "Traceback|CUDA error"}
            if self.progress:
                stage["log"]["progress"] = r"\[(?P<done>\d+)/(?P<total>\d+)\]"
        if "outputs" in self.signals:
            if self.outputs_kind == "files":
                stage["outputs"] = {"files": out, "pattern": "*.pt", "expected": self.expected}
            else:
                stage["outputs"] = {"lines": lines, "expected": self.expected}
        stage["policy"] = {
            "interval": "100ms",
            "settle": self.settle,
            "exit_grace": self.exit_grace if self.exit_grace > 0 else "1ms",
            "stall_after": "10m",
            "timeout": "1m",
        }
        return stage


@dataclass(frozen=True)
class Scope:
    """What a watch was told about the run it watches."""

    since_lo: float | None = None  # the earliest time its since can have resolved to
    launched: int | None = None  # the index of the run its launch record is of
    probe: str = "local"  # local, pidns (its own PID namespace), hidepid (another user)
    #: When the watch's first check read the host (None: not yet known): a run over before it
    #: was never in the view of its process section.
    first_check: float | None = None


@dataclass(frozen=True)
class Judgement:
    kind: str  # ok, soft, hard
    why: str
    route: str = ""  # a short class name for grouping findings
    extra: dict = field(default_factory=dict)


def record_read(d: Definition, scope: Scope) -> bool:
    """Whether the watch reads the supervisor's record: a supervised stage, a record the
    probe's user may read, and a probe that can run the tool (a probe as ``nobody`` cannot run
    the stand-in's interpreter here: its record reads ``unknown``, as no record). The record
    is the latest container's: it names the latest run, its start, and its end."""
    return bool(d.supervisor) and d.record_readable and scope.probe in ("local", "pidns")


def process_sees(d: Definition, scope: Scope) -> bool:
    """Whether the stage's process section finds the job where this probe looks: a ``match``
    that hits it, or ``process: {}`` with the record's PIDs (host PIDs: a probe in another
    PID namespace cannot look them up)."""
    if "process" not in d.signals or scope.probe != "local":
        return False
    if d.supervisor and d.process_any:
        return record_read(d, scope)
    return d.match_hits


def criteria(run: RunFacts, snap: Snapshot, d: Definition) -> tuple[bool, str, str]:
    """Whether ``run`` meets the definition's own criteria (not its exit): its completion
    line, the output count. (ok, why not, route)"""
    if "log" in d.signals:
        rx = re.compile(d.complete)
        if not any(rx.search(line) for line in run.lines):
            wrote = [line for line in run.lines if "complete" in line.lower() or line.startswith("Done")]
            if wrote:
                return (
                    False,
                    f"run {run.index}'s completion line {wrote[-1]!r} does not match {d.complete!r}",
                    "regex",
                )
            return False, f"run {run.index} wrote no completion line", "no-completion-line"
    if "outputs" in d.signals:
        count = snap.files if d.outputs_kind == "files" else snap.records
        if count < d.expected:
            return False, f"{count} outputs of {d.expected}", "outputs-short"
    return True, "", ""


PROGRESS = re.compile(r"\[(?P<done>\d+)/(?P<total>\d+)\]")
ERROR = re.compile(r"Traceback|CUDA error")


def _marks(line: str, d: Definition) -> bool:
    """Whether a log line tells of the run that wrote it, after another run's completion
    line (the issue's rule): a progress line, an error line, a completion line, or — with no
    progress pattern — any text. With a progress pattern, other text reads as the last run's
    post-processing; whitespace is evidence of nothing."""
    if (PROGRESS.search(line) and d.progress) or ERROR.search(line) or re.search(d.complete, line):
        return True
    return not d.progress and bool(line.strip())


def observable(
    run: RunFacts, d: Definition, scope: Scope, seen_alive: frozenset[int], *, counts: bool = True
) -> bool:
    """Whether the watch could know ``run`` happened: it left a trace a configured signal
    reads (a log line that marks a run, see :func:`_marks`; a changed output count), the watch's own probe saw it alive, or
    it is alive where the probe cannot see (which the probe must know), or it is the
    launched run. A run that started and died between two checks without a trace is no
    evidence of anything: the run before it stays the latest the watch can judge."""
    if "log" in d.signals and any(_marks(line, d) for line in run.lines):
        return True
    if counts and "outputs" in d.signals and run.count_trace:
        return True
    if "process" in d.signals and (run.index in seen_alive or (scope.probe != "local" and run.ended is None)):
        return True
    if record_read(d, scope):
        # The record names the latest container as soon as it is created.
        return True
    return scope.launched == run.index


def judge(
    snap: Snapshot,
    d: Definition,
    scope: Scope,
    seen_alive: frozenset[int] = frozenset(),
    maybe_seen: frozenset[int] = frozenset(),
) -> Judgement:
    """Whether ``complete`` is allowed for a watch of ``scope`` and definition ``d`` in ``snap``
    (``seen_alive``: the runs the watch's own probes surely saw alive; ``maybe_seen``: runs
    they may have seen — a watch checking beside the steps, the holder of a followed verdict).

    Allowed when the latest run allows it (the plain truth), or the latest run the watch
    could observe does (observability only ever excuses). A run whose only trace is the
    output count it changed (no text in the log, never seen alive) is weak evidence: when
    the verdict would be right had nothing but it told of a new run, the false ``complete``
    is soft (a stage with a log attributes outputs to runs only through the log).
    """
    every = frozenset(r.index for r in snap.runs)
    sights = {seen_alive | maybe_seen, seen_alive}
    best = _judge(snap, d, scope, every, counts=True, everything=True)
    for seen in sights:
        if best.kind == OK:
            return best
        j = _judge(snap, d, scope, seen, counts=True)
        if SEVERITY[j.kind] < SEVERITY[best.kind]:
            best = j
    if best.kind != HARD:
        return best
    for seen in sights:
        if _judge(snap, d, scope, seen, counts=False).kind == OK:
            return Judgement(
                SOFT,
                f"{best.why} (a run whose only trace is its outputs)",
                f"outputs-only-trace/{best.route}",
            )
    return best


def _judge(
    snap: Snapshot,
    d: Definition,
    scope: Scope,
    seen_alive: frozenset[int],
    *,
    counts: bool,
    everything: bool = False,
) -> Judgement:
    runs = [r for r in snap.runs if everything or observable(r, d, scope, seen_alive, counts=counts)]
    run = runs[-1] if runs else None
    if run is None:
        return Judgement(HARD, "no run the watch could observe has started", "no-run")
    if scope.launched is not None and run.index != scope.launched:
        return Judgement(
            HARD, f"run {run.index} started after the launched run {scope.launched}", "launch-superseded"
        )
    if scope.since_lo is not None and run.started <= scope.since_lo - SINCE_SLACK:
        # A since is the run's start: a run begun before it is an earlier one, whether it
        # ended before the since or was still finishing at it (a relaunch while the old run
        # writes its last line).
        gone = run.ended is not None and run.ended <= scope.since_lo - SINCE_SLACK
        # The record's StartedAt dates the container too.
        # A run was in the view of the watch's process section if the watch saw it, or if it
        # surely outlived the first check's /proc scan. A check is dated by its probe's clock
        # read, made before the scan, and the world learns of an end only once it reaps the
        # process (under load, 0.15 s after the probe's clock read for a run whose last line
        # was written 0.15 s before it: fuzzer seed 8701256). So a run counts out of view
        # unless it was told to end SCAN_SLACK after the first check's clock read or later.
        end_lo = run.ending_from if run.ending_from is not None else run.ended
        in_view = (
            scope.first_check is None
            or run.ended is None
            or run.index in seen_alive
            or (end_lo is not None and end_lo >= scope.first_check + SCAN_SLACK)
        )
        sees = (process_sees(d, scope) and in_view) or record_read(d, scope)
        if not gone and not sees:
            # Only a process tells a run alive at the since from one begun after it: where no
            # process section finds it, or the run was over before the watch's first check (a
            # `wait` whose start took 3 s under load: fuzzer seed 8001159), what it writes after
            # the since reads as the run asked for (as a run alive where no configured signal
            # sees it: soft).
            return Judgement(
                SOFT,
                f"the latest run (run {run.index}) began {scope.since_lo - run.started:.1f}s before"
                " since and was alive at it, where no process section finds it"
                + (
                    "" if in_view else " (it may have been over before the watch's first check scanned /proc)"
                ),
                "since-inside-earlier-run-unseen",
            )
        return Judgement(
            HARD,
            f"the latest run (run {run.index}) began {scope.since_lo - run.started:.1f}s before since"
            + ("" if gone else " and was alive at it")
            + ": the run asked for has not started",
            "since-excludes-every-run" if gone else "since-inside-earlier-run",
        )
    met, why, route = criteria(run, snap, d)
    if met and run.ended is not None and run.status == 0:
        return Judgement(OK, f"run {run.index} exited 0 and meets the definition")
    state = run.how_ended()
    if not met:
        return Judgement(HARD, f"run {run.index} {state}; {why}", f"{route}/{_fate(run)}")
    declares = "log" in d.signals or "outputs" in d.signals
    if run.ended is None:
        if record_read(d, scope):
            return Judgement(
                HARD, f"run {run.index} is alive, and its supervisor's record says so", "alive/record"
            )
        sees = "process" in d.signals and (d.match_hits or (bool(d.supervisor) and d.process_any))
        if sees:
            hidden = "" if scope.probe == "local" else f" (the probe runs in {scope.probe})"
            return Judgement(
                HARD, f"run {run.index} is alive, and process.match finds it{hidden}", f"alive/{scope.probe}"
            )
        if declares:
            return Judgement(
                SOFT,
                f"run {run.index} is alive, after declaring completion; no process section finds it",
                "alive-unwatched",
            )
        return Judgement(HARD, f"run {run.index} is alive", "alive-unwatched-no-declaration")
    if not declares:
        return Judgement(HARD, f"process-only stage: run {run.index} {state}", f"process-only/{_fate(run)}")
    if scope.launched == run.index and run.recorded:
        return Judgement(
            HARD,
            f"launched run {run.index} declared completion, then {state}, and its wrapper recorded it",
            f"launched-recorded-{_fate(run)}",
        )
    if record_read(d, scope):
        return Judgement(
            HARD,
            f"run {run.index} declared completion, then {state}, and its supervisor recorded it",
            f"supervised-recorded-{_fate(run)}",
        )
    return Judgement(
        SOFT, f"run {run.index} declared completion, then {state}", f"declared-then-{_fate(run)}"
    )


def _fate(run: RunFacts) -> str:
    if run.ended is None:
        return "running"
    if run.status is not None and run.status < 0:
        return "killed"
    return "exit0" if run.status == 0 else "failed"


# --------------------------------------------------------------------------- the other side

MUST, EITHER, NOT = "must", "either", "not"


@dataclass(frozen=True)
class Sighting:
    """One check of a watch, as the world was when it probed: the runs it saw alive."""

    at: float
    seen: frozenset[int]
    snap: Snapshot
    #: The definitions the watch may have checked under (a ``serve`` watch rereads its file:
    #: near an edit, either); empty: not recorded (the one the obligation is asked for).
    under: tuple[Definition, ...] = ()


def sightings_under(sightings: tuple[Sighting, ...], d: Definition) -> tuple[Sighting, ...]:
    """The sightings that still name runs under ``d`` (:meth:`Definition.binds_alike`): one
    made under another version of the stage's process or log section is set aside, as the
    product sets that memory aside (fuzzer seed 8800630: a process section added while run 2
    ran; what the watch had seen of run 2 before was graded as the new definition's)."""
    return tuple(s for s in sightings if all(d.binds_alike(u) for u in s.under))


def obligation(
    snap: Snapshot,
    d: Definition,
    scope: Scope,
    sightings: tuple[Sighting, ...] = (),
    *,
    clean_clock: bool = True,
    lenient_ok: bool = False,
) -> tuple[str, str]:
    """Whether a watch **must** say ``complete`` now: (MUST | EITHER | NOT, why).

    MUST when the latest run exited 0, meets ``d``, and the evidence a careful operator has
    settles it:

    - *visible end*: the watch can see the run end — its process is where the probe looks
      (a ``process`` section that matches it, a probe that sees every process), or it was
      launched and its wrapper recorded the exit; and a success is told from a crash: a log
      or outputs section declares it, or the exit record does (a process-only stage without
      one is ``either``);
    - *identity*: the watch saw the run alive (``sightings``), or was given its launch (the
      record exists), or a since the run began clearly after;
    - *its own line*: no earlier run's line in the log matches ``log.complete``, or the watch
      saw the run alive before its line was there, or the launch mark divides the log, or the
      line is the log's last (a since: the bytes after it were written after the since); and
      where no record dates its end: text after its line only where the watch saw the run
      alive, and a line the watch first saw the run with only where it was the log's last
      (else a run unseen, between two checks, fits: ``either``);
    - *precision*: the run began at least :data:`PRECISION` after the run before it ended,
      and no file clock was skewed (``clean_clock``).

    EITHER where ``complete`` is allowed (``lenient_ok``: by the lenient truth, which excuses
    what the watch could not observe) but not settled so; NOT otherwise.
    """
    every = frozenset(r.index for r in snap.runs)
    plain = _judge(snap, d, scope, every, counts=True, everything=True)
    if plain.kind != OK:
        return (
            (EITHER, f"allowed only through what the watch could not observe: {plain.why}")
            if lenient_ok
            else (
                NOT,
                plain.why,
            )
        )
    run = snap.runs[-1]
    if d.supervisor and not record_read(d, scope):
        # A supervisor named and its record unreadable: the product's verdict is ``unknown``
        # by design (docs/supervisors.md: "cannot be read"), whatever the other signals say.
        # For what must not be, that is no record (the rules above); nothing must complete.
        return EITHER, f"the supervisor's record cannot be read: run {run.index}'s verdict stays unknown"
    # Its record read: a probe as another user (``hidepid``: nobody) cannot read the
    # launcher's own directory, where the wrapper writes it (seed 2200111).
    launched = scope.launched == run.index and run.recorded and scope.probe != "hidepid"
    if launched and "process" in d.signals and scope.probe != "local":
        # Its exit is recorded, but a process section whose probe cannot see every process
        # cannot tell whether the job left one at work (a worker it double-forked, still
        # writing: the adversary's false complete): the product says unknown, stuck, by design.
        return (
            EITHER,
            f"run {run.index}'s exit is recorded, but what it left at work is out of the probe's sight",
        )
    # A supervisor's record is an exit record (like a launch wrapper's) of the latest
    # container, which names the run too; it does not divide the log (below).
    supervised = record_read(d, scope)
    if not (launched or supervised) and not process_sees(d, scope):
        return EITHER, f"run {run.index}'s end is out of the watch's sight (no record, no process it can see)"
    if not (launched or supervised) and not ("log" in d.signals or "outputs" in d.signals):
        return EITHER, f"a process-only stage: run {run.index}'s exit and a kill look alike (no exit record)"
    saw = [s for s in sightings_under(sightings, d) if run.index in s.seen]
    after_since = scope.since_lo is not None and run.started > scope.since_lo + PRECISION
    if not (launched or supervised) and not saw and "log" not in d.signals:
        # Its end seen only as a process found gone that the watch never found alive: a match
        # that misses a job still at work reads alike (the product's rule 8).
        return EITHER, f"run {run.index}'s process was never seen alive, and no log or record tells its end"
    if scope.since_lo is not None and not after_since and not launched:
        # A since names the run's start: a run begun before it (within the slack the truth
        # allows) is not named by it, whatever the watch saw.
        return EITHER, f"run {run.index} began before the since, within its slack"
    if not (launched or supervised or saw or after_since):
        return EITHER, f"nothing names run {run.index} for the watch (never seen alive, no launch, no since)"
    if not (launched or supervised or saw) and scope.since_lo is not None:
        # A since tells the run's bytes by when they were written; an earlier run still alive
        # after it wrote after it too, and no process seen tells which run wrote what
        # (seed 2300028: a since inside run 2, run 3 begun and ended between two checks).
        straddling = [
            r
            for r in snap.runs[:-1]
            if r.started <= scope.since_lo + PRECISION and (r.ended is None or r.ended > scope.since_lo)
        ]
        if straddling:
            return EITHER, (
                f"run {straddling[-1].index}, begun before the since, was alive after it, and the"
                f" watch never saw run {run.index} alive: what run {straddling[-1].index} wrote after"
                f" the since reads as run {run.index}'s"
            )
    if not clean_clock:
        return EITHER, "a file clock was skewed"
    if len(snap.runs) > 1:
        prev = snap.runs[-2]
        if prev.ended is not None and run.started - prev.ended < PRECISION:
            return EITHER, f"run {run.index} began within {PRECISION}s of run {prev.index}'s end"
    if "log" in d.signals and not launched:
        rx = re.compile(d.complete)
        earlier = any(rx.search(line) for r in snap.runs[:-1] for line in r.lines)
        if earlier:
            before_line = any(
                not any(rx.search(line) for line in _run_in(s.snap, run.index).lines) for s in saw
            )
            last = bool(run.lines) and bool(rx.search(run.lines[-1])) and after_since
            if not (before_line or last):
                return EITHER, (
                    f"an earlier run's completion line is in the log, and the watch did not see run"
                    f" {run.index} alive before its own"
                )
    if "log" in d.signals and not launched:
        rx = re.compile(d.complete)
        own = [i for i, line in enumerate(run.lines) if rx.search(line)]
        if own and run.lines[own[-1] + 1 :] and not saw:
            # Text after its line, its run never seen at work. Its end recorded nowhere: a
            # later run begun and ended between two checks, with no line of its own, fits as
            # well (seeds 1600075, 1600101). A supervisor's record names the run and dates its
            # end, but not the line, which only its bytes' place dates (after the watch's last
            # look before the run): an unseen run gone before the record's start that wrote the
            # line fits as well (seeds 3000556, 3000712, 4001261).
            return EITHER, (
                f"text after run {run.index}'s completion line, and the watch never saw run"
                f" {run.index} at work: an unseen run "
                + (
                    "before it may have written the line"
                    if supervised
                    else "after it may have written the text"
                )
            )
    if "log" in d.signals and not launched:
        # Supervised runs too: the record dates the run, not its line (seeds 4700464,
        # 4700772: a docker job first seen at work after its line and more, the log appended
        # to by the container before it; as the rule for text after the line says).
        rx = re.compile(d.complete)
        own = [i for i, line in enumerate(run.lines) if rx.search(line)]
        if (
            own
            and saw
            and not run.began_log
            and all(any(rx.search(line) for line in _run_in(s.snap, run.index).lines) for s in saw)
        ):
            then = _run_in(saw[0].snap, run.index).lines
            at = run.line_times[own[-1]] if own[-1] < len(run.line_times) else None
            if at is not None and at - run.started < 2 * PRECISION:
                # First seen with its line already written, the line within /proc's start
                # precision of the run's start (and of the spawn's own time): a run before it,
                # unseen, that wrote the line and ended as this one began fits as well (seed
                # 2300015: "Extraction complete" 30 ms after the spawn).
                return EITHER, (
                    f"run {run.index}'s completion line was written {at - run.started:.3f}s after"
                    f" its start, before the watch first saw it: within the start's precision"
                )
            if not rx.search(then[-1]):
                # First seen with its line already written and followed by more (a blank line
                # will do): when the line was written cannot be read, and an unseen run that
                # wrote it and ended before this one began fits as well (seed 1600059). Not
                # where the run created the log well after its start: then it wrote all of it.
                return EITHER, (
                    f"run {run.index}'s completion line was in the log, followed by more, when the"
                    f" watch first saw run {run.index}: a run before it, unseen, may have written it"
                )
    return MUST, f"run {run.index} exited 0 and meets the definition; the watch can tell"


def _run_in(snap: Snapshot, index: int) -> RunFacts:
    for r in snap.runs:
        if r.index == index:
            return r
    return RunFacts(index, 0.0)  # not started then: it had written nothing


def failed_allowed(
    snap: Snapshot,
    d: Definition,
    scope: Scope,
    seen_alive: frozenset[int] = frozenset(),
    maybe_seen: frozenset[int] = frozenset(),
) -> tuple[bool, str]:
    """Whether ``failed`` is allowed: the run the watch can be about (the latest run, or the
    latest it could observe) ended without meeting the definition (killed, non-zero, no line,
    outputs short) or wrote an error line; or a later run superseded its launch. A run alive
    and clean, or one that exited 0 and meets the definition, did not fail."""
    every = frozenset(r.index for r in snap.runs)
    why = "no run has started"
    for seen, everything in ((every, True), (seen_alive | maybe_seen, False), (seen_alive, False)):
        for counts in (True, False):
            runs = [r for r in snap.runs if everything or observable(r, d, scope, seen, counts=counts)]
            if not runs:
                continue
            run = runs[-1]
            if scope.launched is not None and run.index != scope.launched:
                return True, ""
            if scope.since_lo is not None and run.started <= scope.since_lo - SINCE_SLACK:
                gone = run.ended is not None and run.ended <= scope.since_lo - SINCE_SLACK
                if gone or process_sees(d, scope) or record_read(d, scope):
                    why = f"run {run.index} began before since: the run asked for has not started"
                    continue
                # Alive at the since where no process section finds it: what it writes after
                # the since reads as the run asked for (the same judgement as a complete's,
                # soft in complete_allowed: only a process tells the two runs apart). Its
                # error line, its end short of the definition, fail the run asked for.
            if "log" in d.signals and any(ERROR.search(line) for line in run.lines):
                return True, ""
            if run.ended is None:
                why = f"run {run.index} is alive and wrote no error line"
                continue
            met, _, _ = criteria(run, snap, d)
            if not (met and run.status == 0):
                return True, ""
            why = f"run {run.index} exited 0 and meets the definition"
    if (
        "log" in d.signals
        and not process_sees(d, scope)
        and not record_read(d, scope)
        and scope.launched is None
    ):
        # Nothing but the log tells one run from the next (no process section, or one whose
        # match misses the job: seed 4102314): an earlier run's error line with
        # the latest run's text after it reads as one run's error and the output that came
        # after it (a teardown's, a `wandb: Synced`), which the product takes for a failure
        # where no `progress` line says work went on (seeds 4101442, 4101610). Allowed, as
        # `complete` is where the evidence cannot tell which run wrote what.
        latest = snap.runs[-1] if snap.runs else None
        erred = [
            r
            for r in snap.runs[:-1]
            if any(ERROR.search(line) for line in r.lines)
            and (scope.since_lo is None or r.started > scope.since_lo - SINCE_SLACK)
        ]
        if erred and latest is not None and latest.lines:
            return True, ""
        # The latest run wrote its completion line short of its outputs: with no process in
        # sight it reads as a run that ended short, whether it has (the product's "outputs
        # short") or still works on (seed 4202171: the match missed run 2, alive for a moment
        # after its line with 2 of 3 outputs, and then exited so).
        if (
            latest is not None
            and "outputs" in d.signals
            and any(re.search(d.complete, line) for line in latest.lines)
            and (snap.files if d.outputs_kind == "files" else snap.records) < d.expected
        ):
            return True, ""
    return False, why
