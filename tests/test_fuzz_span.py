"""A ground-truth fuzzer for stages over several hosts (issue 25): seeded random histories of a
job over the two test hosts (``hosts``: real sshd hosts on 127.0.0.1, tests/test_span.py's
``_Host``), checked by a real :class:`SpanChecker` between steps; the one thing it asserts is
that no check says ``complete`` unless the truth allows it (docs/fuzzer.md, for one host).

Each seed draws a stage (``per_host`` 1 or 2, ``success`` all or chief, a shared log, a log
per node (``{node}``: ``{host}`` is refused here, both hosts being 127.0.0.1) or a log per
rank (``{rank}``), outputs optional: a shared lines file with ``expected`` E) and one to three
runs. Each rank is a real process (its command line names its node, as test_span.py's) that
does what the test tells it through its stdin, one command at a time, so that a seed writes
the same bytes every time: step lines, rank 0's output records, its completion line, an error
line, an exit status. A rank's fate: it finishes (its line, exit 0), is SIGKILLed at a random
point (before or after its line), exits non-zero (with or without an error line), hangs
(alive to the end of its run: SIGKILLed before the next run starts, runs never overlap), or
never starts. A re-run appends to the same logs; its launcher empties the outputs first.

The truth (``_truth``) is what the test did. A watch's target is the latest run it could
observe (seen alive at one of its checks, or that left text in a log or records in the
outputs). ``complete`` is allowed when every rank of that run started and is gone, and under
``all`` every rank exited 0 after writing its line, under ``chief`` rank 0 did, and the
outputs reach ``expected``. Anything else that says ``complete`` is a false complete:

- *soft* (counted, not failed on), as the single-host fuzzer grades them: what no configured
  signal can see. A rank that wrote its completion line and then died or exited non-zero (no
  probe reads another host's exit status), and, under ``all``, a rank that ended without its
  line where its log (a shared log, or its node's log shared by its node's ranks) holds
  another rank's completion line of the same run: a completion pattern names no rank, so
  nothing tells whose line it is. Under ``chief`` the other ranks' ends are not looked at
  (docs/multi-host.md, "Known limits").
- *hard* (the test fails, printing the seed and its steps): everything else — a rank alive, a
  rank that never started, a completion line that is another run's, outputs short.

That is one side. The other (the two-sided oracle, docs/fuzzer.md): a check is **must
complete** when the latest run was seen alive by the watch, every rank started (seen alive
at a check, on another node than node 0 at one more than ``ACROSS_PRECISION`` after the run
began, or its own log shows it ran: under ``all`` its line there), ended with
status 0 after its completion line (``chief``: rank 0 after its line, the others exit 0), the
outputs reach ``expected``, the run began at least 50 ms after the run before it ended, and
no earlier run's completion line is in a log of it unless the watch saw the run alive before
its first line, and (a log the nodes share) nothing another node's rank wrote there after node
0's ranks ended was written within ``ACROSS_PRECISION`` of that rank's end (two hosts' clocks
order two moments no closer). Such a watch must say ``complete`` within 3 checks of the run's
last end plus ``exit_grace``. ``either``: ``complete`` allowed, not settled so. A ``failed`` verdict is
false (the test fails) when no run it can be about failed: every rank alive or exited 0,
none never started, no error line, no outputs short after the end.

``FUZZ_SPAN_SEEDS`` runs other seeds: ``N`` (seeds 0..N-1) or ``A-B`` (A..B inclusive);
``FUZZ_SPAN_VERBOSE=1`` prints each seed's steps and a false complete's readings. The false
completes found are tests/test_fuzz_span_routes.py.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sensors import State, Verdict, stage_from_dict
from sensors._check.span import SpanChecker

#: A rank: does what its stdin says, one command a line, and answers each with ``ok``.
_RANK = r"""
import sys
for line in sys.stdin:
    cmd, _, rest = line.rstrip("\n").partition(" ")
    if cmd == "w":
        path, _, text = rest.partition(" ")
        with open(path, "a") as f:
            f.write(text + "\n")
    elif cmd == "x":
        sys.stdout.write("ok\n")
        sys.stdout.flush()
        sys.exit(int(rest))
    sys.stdout.write("ok\n")
    sys.stdout.flush()
"""

COMPLETE = r"^rank \d+ done"


def _seeds() -> list[int]:
    spec = os.environ.get("FUZZ_SPAN_SEEDS", "")
    if not spec:
        # And the seeds that found a fault: 12 (a rank's log never made, under chief: unknown
        # for good), 20 (run 2's node 0 never started: node 0's run-1 line completed it), 2965
        # (rank 0 never started, rank 1's line in the stage's one log completed node 0), 9431
        # (run 2's hung rank on node 1, last seen 14 ms before run 3 began without it, counted
        # as run 3's: complete), 12117 (run 3 began on node 1 alone, under chief: node 0's
        # run-2 line completed it).
        return [0, 1, 2, 3, 12, 20, 2965, 9431, 12117]
    if "-" in spec:
        a, b = spec.split("-", 1)
        return list(range(int(a), int(b) + 1))
    return list(range(int(spec)))


# --------------------------------------------------------------------------- the world


@dataclass
class _Rank:
    rank: int  # global rank
    node: int
    log: Path | None  # where its lines go (None: no log)
    proc: subprocess.Popen[str] | None = None  # None: never started
    status: int | None = None  # exit status once reaped; negative: killed by that signal
    line: bool = False  # its completion line written
    error: bool = False  # its error line written
    ended_at: float | None = None
    seen: bool = False  # alive at one of the watch's checks
    seen_at: float | None = None  # when the last check that found it alive began
    seen_width: float = 0.0  # how wide the two hosts' measured clock offsets were then (s)
    wrote: bool = False  # wrote to its log

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.status is None


@dataclass
class _Run:
    index: int
    ranks: list[_Rank]
    seen: bool = False  # alive at one of the watch's checks
    trace: bool = False  # left text in a log or records in the outputs
    seen_before_line: bool = False  # alive at a check before any of its completion lines
    started_at: float = 0.0


@dataclass
class _World:
    folder: Path
    tag: str
    per_host: int
    success: str
    log_mode: str  # "shared", "node", "rank"
    expected: int | None  # outputs.expected; None: no outputs section
    runs: list[_Run] = field(default_factory=list)
    #: Each completion line in a log: (file, run index, global rank).
    lines: list[tuple[Path, int, int]] = field(default_factory=list)
    #: Each write to the log the nodes share (log_mode "shared"): (when, run index, global rank).
    shared_writes: list[tuple[float, int, int]] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return self.folder / "out.jsonl"

    def log_of(self, rank: int, node: int) -> Path:
        if self.log_mode == "shared":
            return self.folder / "train.log"
        if self.log_mode == "node":
            return self.folder / f"node{node}.log"
        return self.folder / f"rank{rank}.log"

    def stage(self, hosts: list[Any]) -> dict[str, Any]:
        path = {"shared": "train.log", "node": "node{node}.log", "rank": "rank{rank}.log"}[self.log_mode]
        doc: dict[str, Any] = {
            "stage": "train",
            "hosts": [h.sshd.spec() for h in hosts],
            "process": {"match": f"{self.tag} --node {{node}} ", "per_host": self.per_host},
            "log": {
                "path": str(self.folder / path),
                "complete": COMPLETE,
                "error": r"^ERROR",
                "progress": r"^step",
            },
            "policy": {
                "interval": "300ms",
                "settle": 1,
                "exit_grace": "300ms",
                "stall_after": "30s",
                "success": self.success,
            },
        }
        if self.expected is not None:
            doc["outputs"] = {"lines": str(self.out), "expected": self.expected}
        return doc

    # ------------------------------------------------------------------ what the test does

    def start(self, absent: set[int]) -> _Run:
        run = _Run(len(self.runs) + 1, [], started_at=time.time())
        if self.expected is not None:
            if self.out.exists() and self.out.read_text():
                run.trace = True  # the count changed: a run the watch can tell began
            self.out.write_text("")  # the launcher overwrites the outputs
        for node in range(2):
            for local in range(self.per_host):
                g = node * self.per_host + local
                rank = _Rank(g, node, self.log_of(g, node))
                if g not in absent:
                    rank.proc = subprocess.Popen(
                        [sys.executable, "-c", _RANK, self.tag, "--node", str(node), "--rank", str(local)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                        start_new_session=True,
                    )
                run.ranks.append(rank)
        self.runs.append(run)
        self.steps.append(
            f"run {run.index} starts" + (f" (ranks {sorted(absent)} never start)" if absent else "")
        )
        return run

    def tell(self, run: _Run, g: int, what: str) -> None:
        rank = run.ranks[g]
        assert rank.proc is not None and rank.proc.stdin is not None and rank.proc.stdout is not None
        if what == "kill":
            rank.proc.kill()
            rank.status = rank.proc.wait(10)
            rank.ended_at = time.time()
            self.steps.append(f"  rank {g} SIGKILLed")
            return
        if what.startswith("exit"):
            code = int(what[4:])
            rank.proc.stdin.write(f"x {code}\n")
            rank.proc.stdin.flush()
            rank.status = rank.proc.wait(10)
            rank.ended_at = time.time()
            self.steps.append(f"  rank {g} exits {code}")
            return
        text = {
            "step": "step 1",
            "error": f"ERROR rank {g}",
            "line": f"rank {g} done",
        }.get(what)
        path = rank.log
        if what == "rec":
            path, text = self.out, f'{{"rank": {g}, "run": {run.index}}}'
        assert text is not None and path is not None, what
        rank.proc.stdin.write(f"w {path} {text}\n")
        rank.proc.stdin.flush()
        assert rank.proc.stdout.readline() == "ok\n"
        run.trace = True
        rank.wrote = rank.wrote or path == rank.log
        if self.log_mode == "shared" and path == rank.log:
            self.shared_writes.append((time.time(), run.index, g))
        if what == "error":
            rank.error = True
        if what == "line":
            rank.line = True
            self.lines.append((path, run.index, g))
        self.steps.append(f"  rank {g} writes {what!r} to {path.name}")

    def end_hangs(self) -> None:
        """Before another run: what hangs is SIGKILLed (runs never overlap)."""
        for run in self.runs:
            for rank in run.ranks:
                if rank.alive:
                    assert rank.proc is not None
                    rank.proc.kill()
                    rank.status = rank.proc.wait(10)
                    rank.ended_at = time.time()
                    self.steps.append(f"  rank {rank.rank} (run {run.index}, hung) SIGKILLed")

    def stop(self) -> None:
        for run in self.runs:
            for rank in run.ranks:
                if rank.proc is None:
                    continue
                if rank.proc.poll() is None:
                    rank.proc.kill()
                rank.proc.wait(10)
                # Its pipes closed: hundreds of seeds in one process ran out of the file
                # descriptors select() takes (seed 349 of the first long run).
                for pipe in (rank.proc.stdin, rank.proc.stdout):
                    if pipe is not None:
                        pipe.close()

    def records(self) -> int:
        if not self.out.exists():
            return 0
        return self.out.read_text().count("\n")


# --------------------------------------------------------------------------- the truth


def _truth(world: _World) -> tuple[str, str]:
    """("ok" | "soft" | "hard", why) for a ``complete`` now."""
    target = next((r for r in reversed(world.runs) if r.seen or r.trace), None)
    if target is None:
        return "hard", "no run observable"
    hard: list[str] = []
    soft: list[str] = []
    for rank in target.ranks:
        if rank.proc is None:
            hard.append(f"rank {rank.rank} of run {target.index} never started")
        elif rank.alive:
            hard.append(f"rank {rank.rank} of run {target.index} is alive")
    if world.success == "all":
        for rank in target.ranks:
            if rank.proc is None or rank.alive or (rank.status == 0 and rank.line):
                continue
            how = f"exited {rank.status}" if (rank.status or 0) >= 0 else f"was killed ({rank.status})"
            if rank.line:
                soft.append(f"rank {rank.rank} wrote its line, then {how}")
            elif any(
                path == rank.log and run == target.index and g != rank.rank for path, run, g in world.lines
            ):
                # Its log holds another rank's line of this run: no pattern says whose.
                soft.append(f"rank {rank.rank} {how} without its line; its log holds another rank's")
            else:
                hard.append(f"rank {rank.rank} of run {target.index} {how} without its completion line")
    else:
        chief = target.ranks[0]
        if chief.proc is not None and not chief.alive:
            if not chief.line:
                hard.append(f"rank 0 of run {target.index} ended ({chief.status}) without its line")
            elif chief.status != 0:
                soft.append(f"rank 0 wrote its line, then ended ({chief.status})")
    if world.expected is not None and (n := world.records()) < world.expected:
        hard.append(f"outputs {n} of {world.expected}")
    if hard:
        return "hard", "; ".join(hard)
    if soft:
        return "soft", "; ".join(soft)
    return "ok", ""


#: /proc's start precision: two moments closer than this cannot be ordered (``either``).
PRECISION = 0.05
#: How closely two moments on two hosts can be ordered here: each host's clock offset is known
#: to its round trip (±30 ms on loopback under load), a file time to its granularity (20 ms), an
#: end an exit watch saw to its poll (50 ms). Two moments on two hosts closer than this: ``either``.
ACROSS_PRECISION = 0.15
EXIT_GRACE = 0.3  # the stage's policy.exit_grace


def _must(world: _World) -> tuple[str, str, float]:
    """("must" | "either" | "not", why, when the evidence settled) for the check about now."""
    grade, why = _truth(world)
    if grade != "ok":
        return ("either" if grade == "soft" else "not"), why, 0.0
    run = world.runs[-1]
    if not (run.seen and run.ranks and all(r.proc is not None and not r.alive for r in run.ranks)):
        return "either", f"run {run.index} not seen alive by the watch, or a rank never started", 0.0
    if world.success == "all" and not all(r.status == 0 and r.line for r in run.ranks):
        return "either", "a rank ended without its line (the truth allows it through another's)", 0.0
    if any(r.status != 0 for r in run.ranks):
        return "either", "a rank other than the chief did not exit 0", 0.0
    # A rank the watch never saw alive shows it ran only through a log of its own (a log per
    # rank, or per node with one rank a node): under all its line there, under chief anything
    # it wrote there. Else it may as well never have started (seeds 6505, 6659: node 1's rank
    # began, wrote a step to the shared log and exited 0 between two checks).
    own = world.log_mode == "rank" or (world.log_mode == "node" and world.per_host == 1)
    unseen = [
        r.rank
        for r in run.ranks
        if not r.seen and not (own and (r.line if world.success == "all" else r.wrote))
    ]
    near = [
        r.rank
        for r in run.ranks
        if r.node != 0
        and r.seen_at is not None
        and r.seen_at - run.started_at < max(ACROSS_PRECISION, r.seen_width + PRECISION)
        and not (own and (r.line if world.success == "all" else r.wrote))
    ]
    if near:
        # Seen only within the hosts' clocks' precision of node 0's run start: a rank of a run
        # before it (gone unseen as this one began) fits as well (seed 10008: node 1's rank seen
        # once, 60 ms into the run, then gone; seed 9431's rank, 14 ms before, was the last run's).
        return (
            "either",
            f"rank(s) {near} of run {run.index} seen alive only within the hosts' measured clock"
            " offsets of its start",
            0.0,
        )
    if unseen:
        return (
            "either",
            f"rank(s) {unseen} of run {run.index} never seen alive, nothing of their own shows they ran",
            0.0,
        )
    if len(world.runs) > 1:
        prev_end = max((r.ended_at or 0.0) for r in world.runs[-2].ranks)
        if run.started_at - prev_end < PRECISION:
            return "either", f"run {run.index} began within {PRECISION}s of the run before's end", 0.0
    if world.log_mode == "shared":
        # Node 0's probe sees only node 0's processes: what another node's rank wrote to the
        # log they share after node 0's ranks ended is the run's only where that rank was
        # known alive after it, ordered across the two hosts' clocks (seeds 6361, 6398, 6766:
        # a step written, the rank seen once and ended, all within a tenth of a second).
        chief_end = max((r.ended_at or 0.0) for r in run.ranks if r.node == 0)
        for at, index, g in world.shared_writes:
            rank = run.ranks[g]
            if (
                index == run.index
                and rank.node != 0
                and at > chief_end
                and (rank.ended_at or 0.0) - at < ACROSS_PRECISION
            ):
                return (
                    "either",
                    f"rank {g} wrote the shared log after node 0's ranks ended, and ended"
                    f" {(rank.ended_at or 0.0) - at:.3f}s later: the two hosts' clocks order them no closer",
                    0.0,
                )
    logs = {r.log for r in run.ranks}
    if not run.seen_before_line and any(path in logs and i < run.index for path, i, _ in world.lines):
        return (
            "either",
            "an earlier run's line is in its log, and the watch saw the run only after its own",
            0.0,
        )
    return (
        "must",
        f"run {run.index} ended, every rank as it should",
        max(r.ended_at or 0.0 for r in run.ranks),
    )


def _offsets_width(checker: SpanChecker) -> float:
    """How far apart two moments on node 0 and node 1 may be and not be ordered at this check:
    the widths of the two hosts' measured clock offsets (``Checker.clock_ahead``; a second,
    ``CLOCKS_APART``, where one is not measured)."""
    width = 0.0
    for node in checker.nodes[:2]:
        ahead = node.clock_ahead
        width += 1.0 if ahead is None else ahead[1] - ahead[0]
    return width


def _failed_ok(world: _World) -> bool:
    """Whether ``failed`` is allowed: some run the watch can be about (the latest, or the
    latest it could observe) failed."""
    candidates = [world.runs[-1]] if world.runs else []
    observable = next((r for r in reversed(world.runs) if r.seen or r.trace), None)
    if observable is not None:
        candidates.append(observable)
    for run in candidates:
        for rank in run.ranks:
            if rank.proc is None or rank.error or (rank.status not in (None, 0)):
                return True
            if rank.status == 0 and not rank.line and (world.success == "all" or rank.rank == 0):
                return True
        ended = all(not r.alive for r in run.ranks)
        if ended and world.expected is not None and world.records() < world.expected:
            return True
    return False


# --------------------------------------------------------------------------- one history


def _plan(rng: random.Random, world: _World) -> list[tuple[int, str]]:
    """One run's actions, ranks interleaved: (global rank, action)."""
    per_rank: list[list[str]] = []
    n = 2 * world.per_host
    for g in range(n):
        writes_line = world.success == "all" or g == 0
        records = 0
        if g == 0 and world.expected is not None:
            records = world.expected if rng.random() < 0.8 else rng.randint(0, world.expected - 1)
        base = (
            ["step"] * rng.randint(0, 2) + ["rec"] * records + (["line"] if writes_line else []) + ["exit0"]
        )
        fate = rng.choices(["finish", "kill", "fail", "hang"], weights=[6, 2, 1, 1])[0]
        cut = rng.randint(0, len(base) - 1)
        if fate == "finish":
            acts = base
        elif fate == "kill":
            acts = [*base[:cut], "kill"]
        elif fate == "fail":
            acts = [*base[:cut], *(["error"] if rng.random() < 0.5 else []), f"exit{rng.choice([1, 2, 137])}"]
        else:
            acts = base[:cut]
        per_rank.append(acts)
    order: list[tuple[int, str]] = []
    cursors = [0] * n
    while any(c < len(a) for c, a in zip(cursors, per_rank, strict=True)):
        g = rng.choice([k for k in range(n) if cursors[k] < len(per_rank[k])])
        order.append((g, per_rank[g][cursors[g]]))
        cursors[g] += 1
    return order


@dataclass
class _Outcome:
    checks: int = 0
    completes: int = 0
    soft: int = 0
    hard: list[str] = field(default_factory=list)
    false_failed: list[str] = field(default_factory=list)
    said_failed: bool = False
    #: run index -> [class, own checks after settling, the check that completed or None, last reason]
    obligations: dict[int, list[Any]] = field(default_factory=dict)


def _history(seed: int, tmp_path: Path, hosts: list[Any]) -> tuple[_World, _Outcome]:
    rng = random.Random(seed)
    world = _World(
        folder=tmp_path / "job",
        tag=f"fz-{uuid.uuid4().hex[:8]}",
        per_host=rng.choice([1, 2]),
        success=rng.choice(["all", "chief"]),
        log_mode=rng.choice(["shared", "node", "rank"]),
        expected=rng.choice([None, 1, 2, 3]),
    )
    world.folder.mkdir(parents=True)
    stored = rng.random() < 0.3  # a state store, and the watch restarted from it once
    restart_at = rng.randint(1, 25) if stored else -1
    runs = rng.choices([1, 2, 3], weights=[2, 3, 2])[0]
    world.steps.append(
        f"seed {seed}: per_host {world.per_host}, success {world.success}, log {world.log_mode},"
        f" outputs expected {world.expected}, {runs} runs, store {stored} (restart at check {restart_at})"
    )
    stage = stage_from_dict(world.stage(hosts))
    db = tmp_path / "span.db"
    outcome = _Outcome()
    checker = SpanChecker(stage, state=db if stored else None)

    def check(pause: float = 0.0) -> None:
        nonlocal checker
        if pause:
            time.sleep(pause)
        if outcome.checks == restart_at:
            checker.close()
            checker = SpanChecker(stage, state=db)
            world.steps.append("  (the watch restarts from the store)")
        alive_before = [r for r in world.runs if any(k.alive for k in r.ranks)]
        began = time.time()
        verdict: Verdict = checker.check()
        at = time.time()
        outcome.checks += 1
        for run in alive_before:
            if not run.seen and not any(k.line for k in run.ranks):
                run.seen_before_line = True
            run.seen = True
            width = _offsets_width(checker)
            for rank in run.ranks:
                if rank.alive:  # a rank exits only when the test tells it to
                    rank.seen, rank.seen_at, rank.seen_width = True, began, width
        cls, _why, settled = _must(world)
        if cls != "not":
            ob = outcome.obligations.setdefault(world.runs[-1].index, [cls, 0, None, ""])
            if cls == "must":
                ob[0] = "must"
                if at >= settled + EXIT_GRACE or verdict.state is State.COMPLETE:
                    ob[1] += 1
                    if verdict.state is State.COMPLETE and ob[2] is None:
                        ob[2] = ob[1]
                    elif ob[2] is None:
                        ob[3] = f"{verdict.state}: {'; '.join(verdict.reasons[:2])}"
        # ``failed`` is final: a watch that said it rightly says it again after the world moves
        # on (a re-run), so only its first ``failed`` is graded.
        if verdict.state is State.FAILED and not outcome.said_failed and not _failed_ok(world):
            outcome.false_failed.append(f"check {outcome.checks}: failed {list(verdict.reasons)}")
            world.steps.append("    FALSE FAILED")
        outcome.said_failed = outcome.said_failed or verdict.state is State.FAILED
        world.steps.append(
            f"  check {outcome.checks}: {verdict.state} ({verdict.reasons[0] if verdict.reasons else ''})"
        )
        if verdict.state is not State.COMPLETE:
            return
        outcome.completes += 1
        grade, why = _truth(world)
        if grade == "soft":
            outcome.soft += 1
            world.steps.append(f"    soft false complete: {why}")
        elif grade == "hard":
            outcome.hard.append(f"check {outcome.checks}: {why}; reasons {list(verdict.reasons)}")
            world.steps.append(f"    HARD FALSE COMPLETE: {why}")
            if os.environ.get("FUZZ_SPAN_VERBOSE"):
                world.steps.append(
                    f"    readings: {dict((k, (r.says.value, dict(r.evidence))) for k, r in verdict.readings.items())}"
                )

    try:
        check()
        for _ in range(runs):
            world.end_hangs()
            absent = {g for g in range(2 * world.per_host) if rng.random() < 0.04}
            run = world.start(absent)
            if rng.random() < 0.85:
                check()
            for g, act in _plan(rng, world):
                if run.ranks[g].proc is None:
                    continue
                world.tell(run, g, act)
                if rng.random() < 0.6:
                    check()
            for _ in range(rng.randint(1, 3)):
                check(0.35)
        for _ in range(3):
            check(0.35)
    finally:
        checker.close()
        world.stop()
    return world, outcome


#: Both sides over the seeds this session ran (printed once at the end of the module).
_TOTALS: dict[str, int] = {}
_MISSES: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _oracle_report():
    yield
    if not _TOTALS:
        return
    t = _TOTALS
    measured = t.get("must", 0) - t.get("short", 0)
    share = 100.0 * t.get("within3", 0) / measured if measured else 100.0
    print(
        f"\nmulti-host oracle: {t.get('seeds', 0)} seeds, {t.get('checks', 0)} checks, hard false completes"
        f" {t.get('hard', 0)}, soft {t.get('soft', 0)}, false failed {t.get('false_failed', 0)};"
        f" must complete {t.get('must', 0)} ({measured} measured), {t.get('within3', 0)} within 3 checks"
        f" ({share:.1f} %), late {t.get('late', 0)}, missed {t.get('missed', 0)}; either {t.get('either', 0)}"
    )
    for m in _MISSES[:30]:
        print("  MUST-COMPLETE NOT MET: " + m)
    floor = os.environ.get("FUZZ_SPAN_MUST_SHARE")
    assert floor is None or share >= float(floor), f"must-complete share {share:.1f} % < {floor} %"


@pytest.mark.parametrize("seed", _seeds())
def test_no_false_complete_over_two_hosts(seed: int, tmp_path: Path, hosts: list[Any]) -> None:
    world, outcome = _history(seed, tmp_path, hosts)
    steps = "\n".join(world.steps)
    counts = {"seeds": 1, "checks": outcome.checks, "hard": len(outcome.hard), "soft": outcome.soft}
    counts["false_failed"] = len(outcome.false_failed)
    for index, (cls, n, hit, last) in outcome.obligations.items():
        if cls == "either":
            counts["either"] = counts.get("either", 0) + 1
            continue
        result = (
            "within3" if hit is not None and hit <= 3 else "late" if hit else "missed" if n >= 3 else "short"
        )
        counts["must"] = counts.get("must", 0) + 1
        counts[result] = counts.get(result, 0) + 1
        if result in ("late", "missed"):
            _MISSES.append(
                f"seed {seed} run {index}: {result} ({n} checks after settling); said {last[:300]}"
            )
    for k, v in counts.items():
        _TOTALS[k] = _TOTALS.get(k, 0) + v
    assert not outcome.hard, f"seed {seed}: hard false complete\n{outcome.hard}\n{steps}"
    assert not outcome.false_failed, f"seed {seed}: false failed\n{outcome.false_failed}\n{steps}"
    print(
        f"\nseed {seed}: {outcome.checks} checks, {outcome.completes} complete, {outcome.soft} soft,"
        f" obligations {outcome.obligations}"
    )
    if os.environ.get("FUZZ_SPAN_VERBOSE"):
        print(steps)
