"""The generator: a seed becomes a history of one stage (``random.Random(seed)`` only).

A history picks a class (what it leans on: re-runs, since, shared stores, definition edits,
skewed clocks, hidden processes, the CLI, serve, launch records, process-only stages), a
stage definition, and one to three runs of the job, each with a fate: finish (with or
without post-processing after the completion line), fail with an error line, exit 0 without
a completion line or with outputs short, be killed (SIGKILL or SIGTERM) at any point, or be
left running. Re-runs append to the same log and overwrite, skip (resume) or clean the
outputs. Between and inside the runs: watches started (with a since in any form, on a
shared store, through a probe that cannot see the job, with a launch record), checked,
stopped and abandoned; the definition edited; the file clock skewed.

The generator keeps a small model of what the world will be (which runs exist, which gaps
between them are wide enough for a since, which watches are live) so that every step is
valid; the times are the world's business.

About 15 % of histories are supervised (the job in a docker container whose record the world
keeps, see ``World._container``): decided, with what goes with it (``process: {}`` or a
``match``, a record the probe may not read, an OOM kill, a process-only stage), from a stream
of its own (``random.Random("supervised:SEED")``), so an unsupervised seed's history is the
one it was before supervised runs were generated.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field

from tests.fuzz.history import History
from tests.fuzz.world import API_FORMS, CLI_FORMS, MARGIN, SinceSpec

CLASSES = {
    "rerun": 3,
    "since": 3,
    "store": 3,
    "edit": 2,
    "skew": 1,
    "hidden": 1,
    "cli": 1,
    "serve": 1,
    "launch": 1,
    "process-only": 1,
}

SIGNAL_SETS = [
    (("process", "log", "outputs"), 6),
    (("process", "log"), 3),
    (("process", "outputs"), 2),
    (("log", "outputs"), 2),
    (("log",), 1),
    (("outputs",), 1),
    (("process",), 1),
]

REGEXES = ["^Extraction complete", "^Done", "complete$", "^(Extraction|all shards) complete"]
TEXTS = [
    "Extraction complete",
    "Done: wrote {n} shards",
    "all shards complete",
    "Extraction complete: {n} files",
]
POST_LINES = ["saving index", "", "   ", "uploading manifest", "[{n}/{n}]", "cleanup done"]
JUNK = ["loading model", "shard {i} opened", "warming up", "ETA 0 minutes"]

#: The share of histories whose job runs under a supervisor (docker).
SUPERVISED = 0.15

GAP = 2 * MARGIN + 0.2  # a pause that leaves room for a since on each side
MAX_CHECKERS = 3  # live checker watches at once: each burst checks them all


@dataclass
class Knobs:
    since: float = 0.35
    store: float = 0.25
    wait: float = 0.03
    status: float = 0.01
    serve: float = 0.0
    edit_between: float = 0.1
    edit_mid: float = 0.02
    skew: float = 0.05
    hidden: float = 0.04
    launch: float = 0.05
    gap: float = 0.2
    prelude: float = 0.2
    runs: tuple[int, ...] = (1, 2, 2, 3)
    abandon: float = 0.03
    stop: float = 0.03
    new_watch: float = 0.07


def knobs_for(cls: str) -> Knobs:
    k = Knobs()
    if cls == "rerun":
        k.runs, k.prelude, k.gap = (2, 2, 3), 0.4, 0.4
    elif cls == "since":
        k.since, k.gap, k.runs = 0.9, 0.6, (1, 2, 2, 3)
    elif cls == "store":
        k.store, k.gap, k.abandon, k.stop, k.new_watch, k.since = 0.95, 0.5, 0.08, 0.08, 0.12, 0.5
    elif cls == "edit":
        k.edit_between, k.edit_mid, k.store = 0.7, 0.12, 0.5
    elif cls == "skew":
        k.skew, k.since = 1.0, 0.5
    elif cls == "hidden":
        k.hidden, k.since = 0.8, 0.5
    elif cls == "cli":
        k.wait, k.status, k.store = 0.45, 0.12, 0.5
    elif cls == "serve":
        k.serve, k.store = 1.0, 0.8
    elif cls == "launch":
        k.launch = 0.8
    return k


@dataclass
class _Model:
    """What the generator knows of the world it is writing steps for."""

    signals: tuple[str, ...] = ()
    expected: int = 4
    complete: str = REGEXES[0]
    settle: int = 1
    outputs_kind: str = "files"
    runs: int = 0
    alive: bool = False
    wide_gaps: set[int] = field(default_factory=set)  # k: the gap before run k is >= GAP
    paused_since_end: bool = False
    launched: bool = False
    watches: dict[str, str] = field(default_factory=dict)  # live: name -> kind
    names: int = 0
    serve_started: bool = False


class Generator:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        rng = self.rng
        self.cls = rng.choices(list(CLASSES), weights=list(CLASSES.values()))[0]
        self.k = knobs_for(self.cls)
        self.m = _Model()
        # Its own stream: drawing from it leaves ``rng``'s draws, and so the unsupervised
        # histories, as they were.
        self.sup = random.Random(f"supervised:{seed}")
        self.supervised = self.sup.random() < SUPERVISED
        self.h = History(seed, self.cls + ("+docker" if self.supervised else ""))

    # ------------------------------------------------------------------ the whole history

    def history(self) -> History:
        rng, k, m = self.rng, self.k, self.m
        if self.cls == "process-only":
            signals = ("process",)
        else:
            sets, weights = zip(*SIGNAL_SETS, strict=True)
            signals = rng.choices(sets, weights=weights)[0]
        sup: dict = {}
        if self.supervised:
            if self.sup.random() < 0.25:
                signals = ("process",)  # a process-only stage: the record tells its end
            sup = {
                "supervisor": "docker",
                "process_any": self.sup.random() < 0.5,  # process: {}
                "record_readable": self.sup.random() >= 0.15,  # else: permission denied
            }
        m.signals = signals
        m.expected = rng.randint(2, 6)
        m.complete = rng.choice(REGEXES)
        m.settle = rng.choice([1, 1, 2])
        m.outputs_kind = "lines" if rng.random() < 0.2 else "files"
        self.h.add(
            "define",
            **sup,
            signals=signals,
            expected=m.expected,
            complete=m.complete,
            match_hits=True,
            outputs_kind=m.outputs_kind,
            progress=rng.random() < 0.7,
            settle=m.settle,
            exit_grace=rng.choice([0.0, 0.0, 0.2]),
        )
        if rng.random() < k.skew:
            self._skew()
        if self.cls == "serve" or rng.random() < k.serve:
            self._new_watch(kind="serve")
        if self.cls == "cli":
            self._new_watch(kind="wait")
        for _ in range(rng.choice([0, 1, 1, 2])):
            self._new_watch()
        n_runs = rng.choice(k.runs)
        for index in range(1, n_runs + 1):
            last = index == n_runs
            if index > 1:
                self._between_runs(index)
            self._run(index, last)
            self._after_run()
        self._final()
        return self.h

    # ------------------------------------------------------------------ runs

    def _between_runs(self, index: int) -> None:
        rng, k, m = self.rng, self.k, self.m
        if rng.random() < k.edit_between:
            self._edit()
        if rng.random() < k.skew / 2:
            self._skew()
        if rng.random() < k.gap:
            self.h.add("pause", seconds=GAP)
            m.wide_gaps.add(index)
            m.paused_since_end = True
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            self._new_watch()
            self._maybe_check(1.0)
        if rng.random() < k.prelude:
            self.h.add("prelude", text=rng.choice(["", "   ", "", "starting extract.sh"]))

    def _run(self, index: int, last: bool) -> None:
        rng, k, m = self.rng, self.k, self.m
        fates = {
            "success": 30,
            "success_post": 12,
            "killed": 18,
            "killed_post": 7,
            "fail_error": 9,
            "exit0_noline": 7,
            "exit0_short": 6,
            "declared_fail": 4,  # its completion line, then a non-zero exit (a teardown crash)
        }
        if last:
            fates.update(running=8, post_alive=8)
        fate = rng.choices(list(fates), weights=list(fates.values()))[0]
        mode = rng.choice(["overwrite", "overwrite", "skip", "clean"])
        launch = rng.random() < k.launch
        if self.supervised:
            launch = False  # the container is the launch (crosscheck's launch wrapper is not run)
        # Drawn apart from the history's own stream: a seed's other draws stay what they were
        # before this choice existed (its runs that now open their log late run differently).
        late = random.Random(f"{self.seed}/{index}/late-log").random() < 0.25
        kwargs = {"late_log": True} if late else {}
        self.h.add("start_run", outputs=mode, atomic=rng.random() < 0.3, launch=launch, **kwargs)
        m.runs, m.alive, m.paused_since_end = index, True, False
        m.launched = m.launched or launch
        actions = self._body(fate)
        last_line = None
        if (
            fate == "success"
            and actions
            and actions[-1][1]["command"].startswith("log ")
            and rng.random() < 0.3
        ):
            last_line = actions.pop()[1]["command"][4:]
        kill_at = rng.randrange(len(actions) + 1) if fate == "killed" else None
        for i, (op, kwargs) in enumerate(actions):
            if kill_at == i:
                break
            self.h.add(op, **kwargs)
            self._event_point()
        if fate in ("killed", "killed_post"):
            sig = rng.choice(["KILL", "KILL", "TERM"])
            if self.supervised and sig == "KILL" and self.sup.random() < 0.3:
                self.h.add("kill", sig=sig, oom=True)
            else:
                self.h.add("kill", sig=sig)
        elif fate in ("running", "post_alive"):
            return
        elif fate in ("fail_error", "declared_fail"):
            self.h.add("exit", status=1)
        elif last_line is not None:
            # The last line and the exit in one breath: the end falls inside a probe.
            self.h.add("exit", status=0, last=last_line)
        else:
            self.h.add("exit", status=0)
        m.alive = False

    def _body(self, fate: str) -> list[tuple[str, dict]]:
        """The job's writes for ``fate`` (before its exit or kill)."""
        rng, m = self.rng, self.m
        n = m.expected if fate not in ("exit0_short",) else max(0, m.expected - rng.randint(1, m.expected))
        if fate in ("killed", "fail_error") and rng.random() < 0.5:
            n = rng.randint(0, m.expected)
        chunks = _split(rng, n)
        verb = "out" if m.outputs_kind == "files" else "rec"
        actions: list[tuple[str, dict]] = []
        done = 0
        for i, c in enumerate(chunks):
            if rng.random() < 0.25:
                actions.append(("job", {"command": "log " + rng.choice(JUNK).format(i=i)}))
            if rng.random() < 0.15:
                actions.append(("job", {"command": "write partial line " + str(i)}))
                actions.append(("job", {"command": "log  ... ok"}))
            if c:
                actions.append(("job", {"command": f"{verb} {c}"}))
                done += c
            if rng.random() < 0.7:
                actions.append(("job", {"command": f"log [{done}/{m.expected}]"}))
            if rng.random() < 0.1:
                actions.append(("job", {"command": "cpu 0.05"}))
            if rng.random() < 0.08 and verb == "out":
                actions.append(("job", {"command": f"tmp {rng.randint(1, 2)}"}))  # partial, temp-named
            if rng.random() < 0.08:
                actions.append(("job", {"command": "child 0.05"}))  # a worker of the job
        if fate == "fail_error":
            actions.append(("job", {"command": "log Traceback (most recent call last):"}))
            actions.append(("job", {"command": "log RuntimeError: CUDA error: out of memory"}))
            return actions
        if fate == "exit0_noline" or (fate == "killed" and rng.random() < 0.5):
            return actions
        text = self._completion_text()
        if rng.random() < 0.1:
            actions.append(("job", {"command": "write " + text[:5]}))
            actions.append(("job", {"command": "log " + text[5:]}))
        else:
            actions.append(("job", {"command": "log " + text}))
        if fate in ("success_post", "killed_post", "post_alive", "running") or rng.random() < 0.15:
            for _ in range(rng.choice([0, 1, 1, 2])):
                actions.append(("job", {"command": "log " + rng.choice(POST_LINES).format(n=m.expected)}))
            if rng.random() < 0.3:
                actions.append(("job", {"command": "cpu 0.05"}))
        return actions

    def _completion_text(self) -> str:
        rng, m = self.rng, self.m
        texts = [t.format(n=m.expected) for t in TEXTS]
        good = [t for t in texts if re.search(m.complete, t)]
        if good and rng.random() < 0.9:
            return rng.choice(good)
        return rng.choice(texts)

    def _after_run(self) -> None:
        rng = self.rng
        if rng.random() < 0.6:
            self._burst()
        if rng.random() < 0.25:
            self._new_watch()
            self._burst()

    def _final(self) -> None:
        rng = self.rng
        if rng.random() < 0.5:
            self._new_watch()
        self._burst()
        if rng.random() < 0.15:
            self.h.add("pause", seconds=0.5)
            self._burst()

    # ------------------------------------------------------------------ events between the job's writes

    def _event_point(self) -> None:
        rng, k = self.rng, self.k
        self._maybe_check(0.35)
        r = rng.random()
        if r < k.new_watch:
            self._new_watch()
        elif r < k.new_watch + k.stop:
            self._end_watch("stop")
        elif r < k.new_watch + k.stop + k.abandon:
            self._end_watch("abandon")
        if rng.random() < k.status:
            self._status()
        if rng.random() < k.edit_mid:
            self._edit()

    def _checkers(self) -> list[str]:
        return [n for n, kind in self.m.watches.items() if kind == "checker"]

    def _maybe_check(self, p: float) -> None:
        checkers = self._checkers()
        if checkers and self.rng.random() < p:
            times = self.rng.choice([1, 1, 2])
            self.h.add("check", name=self.rng.choice(checkers), times=times, gap=0.12)

    def _burst(self) -> None:
        """Checks enough for every live checker to settle (complete is reachable when true)."""
        checkers = self._checkers()
        if not checkers:
            return
        self.h.add("pause", seconds=0.15)
        self.h.add("check_all", times=self.m.settle + self.rng.choice([1, 1, 2]), gap=0.12)

    def _end_watch(self, how: str) -> None:
        live = [n for n, kind in self.m.watches.items() if kind in ("checker", "wait")]
        if live:
            name = self.rng.choice(live)
            self.h.add(how, name=name)
            del self.m.watches[name]

    # ------------------------------------------------------------------ watches

    def _since(self, forms: tuple[str, ...]) -> SinceSpec | None:
        rng, m = self.rng, self.m
        if rng.random() >= self.k.since:
            return None
        anchors = ["before_first", "now"]
        anchors += [f"gap:{i}" for i in sorted(m.wide_gaps) if i <= m.runs] * 2
        if m.runs >= 1 and not m.alive and m.paused_since_end:
            anchors.append("now")
        return SinceSpec(rng.choice(anchors), rng.choice(forms), round(rng.random(), 3))

    def _new_watch(self, kind: str | None = None) -> None:
        rng, k, m = self.rng, self.k, self.m
        if kind is None:
            kind = "wait" if rng.random() < k.wait else "checker"
        if kind == "checker" and len(self._checkers()) >= MAX_CHECKERS:
            return
        if kind == "serve":
            if m.serve_started:
                return
            m.serve_started = True
        m.names += 1
        name = "abcdefghijklmnopqrstuvwxyz"[(m.names - 1) % 26] + ("" if m.names <= 26 else str(m.names))
        kwargs: dict = {"name": name, "kind": kind}
        if kind != "serve":
            since = self._since(CLI_FORMS if kind == "wait" else API_FORMS)
            if since is not None:
                kwargs["since"] = since
        if rng.random() < k.store or (kind == "serve" and rng.random() < 0.8):
            kwargs["store"] = rng.choice(["s1", "s1", "s2"])
        if kind == "checker":
            if rng.random() < k.hidden:
                kwargs["probe"] = rng.choice(["pidns", "hidepid"])
            if m.launched and "since" not in kwargs and rng.random() < 0.6:
                kwargs["launch"] = True
        if kind == "wait":
            kwargs["timeout"] = float(rng.choice([2, 3, 4, 6]))
        self.h.add("watch", **kwargs)
        m.watches[name] = kind

    def _status(self) -> None:
        kwargs: dict = {}
        since = self._since(CLI_FORMS)
        if since is not None:
            kwargs["since"] = since
        if self.rng.random() < self.k.store:
            kwargs["store"] = self.rng.choice(["s1", "s2"])
        self.h.add("status", **kwargs)

    # ------------------------------------------------------------------ the definition, the clock

    def _edit(self) -> None:
        rng, m = self.rng, self.m
        what = rng.choice(["expected", "expected", "complete", "match", "settle", "signals"])
        if what == "expected":
            m.expected = max(1, m.expected + rng.choice([-2, -1, 1, 2, 3]))
            self.h.add("define", expected=m.expected)
        elif what == "complete":
            m.complete = rng.choice([r for r in REGEXES if r != m.complete])
            self.h.add("define", complete=m.complete)
        elif what == "match":
            self.h.add("define", match_hits=rng.random() < 0.4)
        elif what == "settle":
            m.settle = rng.choice([1, 2])
            self.h.add("define", settle=m.settle)
        elif self.cls != "process-only":
            sets, weights = zip(*SIGNAL_SETS[:-1], strict=True)
            m.signals = rng.choices(sets, weights=weights)[0]
            self.h.add("define", signals=m.signals)

    def _skew(self) -> None:
        rng = self.rng
        log = rng.choice([0.0, 30.0, 3600.0, -30.0, -3600.0, 5.0])
        out = rng.choice([0.0, 30.0, 3600.0, -3600.0])
        if log == 0 and out == 0:
            log = 3600.0
        self.h.add("skew", log=log, out=out)


def _split(rng: random.Random, n: int) -> list[int]:
    if n <= 0:
        return [0]
    parts = rng.randint(1, min(3, n))
    cuts = sorted(rng.sample(range(1, n), parts - 1)) if parts > 1 else []
    bounds = [0, *cuts, n]
    return [b - a for a, b in itertools.pairwise(bounds)]


def generate(seed: int) -> History:
    """The history of ``seed`` (the same one every time)."""
    return Generator(seed).history()
