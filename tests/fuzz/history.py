"""A history: the steps of one stage's life, as calls on a :class:`~tests.fuzz.world.World`.

A history is data (so it can be printed, shrunk and replayed) and its printed form is a
Python script that replays it: ``python -m tests.fuzz --seed N --print``.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fuzz.world import World


@dataclass(frozen=True)
class Step:
    """One call: ``World.<op>(**kwargs)``."""

    op: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def apply(self, world: World) -> None:
        getattr(world, self.op)(**dict(self.kwargs))

    def source(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs)
        return f"w.{self.op}({args})"


def step(op: str, **kwargs: Any) -> Step:
    return Step(op, tuple(kwargs.items()))


@dataclass
class History:
    seed: int
    cls: str
    steps: list[Step] = field(default_factory=list)

    def add(self, op: str, **kwargs: Any) -> None:
        self.steps.append(step(op, **kwargs))

    def script(self) -> str:
        """A Python script that replays this history and says what it found."""
        body = "\n".join(f"    {s.source()}" for s in self.steps)
        return (
            f'"""crosscheck fuzz history: seed {self.seed}, class {self.cls}, {len(self.steps)} steps.\n\n'
            f"Run from the repository root: python this_file.py (or python -m tests.fuzz --seed {self.seed}).\n"
            '"""\n\n'
            "from tests.fuzz.world import SinceSpec, World\n"
            "from tests.fuzz.report import print_world\n\n"
            f"w = World(seed={self.seed})\n"
            "try:\n"
            f"{body or '    pass'}\n"
            "finally:\n"
            "    w.close()\n"
            "print_world(w)\n"
        )


def run_history(history: History, *, verbose: bool = False) -> World:
    """Run every step in a fresh world; the world (closed) holds what was found."""
    world = World(history.seed, verbose=verbose)
    try:
        for s in history.steps:
            began = time.monotonic()
            s.apply(world)
            if verbose:
                print(f"  {s.source()}  # {time.monotonic() - began:.2f}s", flush=True)
    except Exception as exc:
        world.errors.append(f"step {world.step_no}: {type(exc).__name__}: {exc}")
    finally:
        world.close()
    return world


def run_seed(seed: int) -> dict[str, Any]:
    """One history, summed up (what a worker sends back)."""
    from tests.fuzz.generate import generate  # generate imports this module

    history = generate(seed)
    began = time.monotonic()
    world = run_history(history)
    summary = world.summary()
    summary.update(
        cls=history.cls,
        seconds=time.monotonic() - began,
        findings=[_finding(f) for f in world.findings],
        soft_findings=[_finding(f) for f in world.soft],
        false_failed_findings=[_finding(f) for f in world.false_failed],
    )
    return summary


def _finding(f: Any) -> dict[str, Any]:
    from tests.fuzz.report import finding_text

    return {
        "route": f.route,
        "why": f.judgement.why,
        "step": f.step,
        "watch": f.watch,
        "text": finding_text(f, verdict=True),
    }


def run_seeds(seeds: range | list[int], workers: int) -> list[dict[str, Any]]:
    """Run many seeds in ``workers`` processes (spawned: no thread of this one is forked);
    one summary per seed, in seed order."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, maxtasksperchild=100) as pool:
        return sorted(pool.imap_unordered(run_seed, list(seeds)), key=lambda r: r["seed"])


def worker_on_stop() -> None:
    """A long run's worker (its pool's initializer; importable, as ``spawn`` needs) runs its
    history to its end or to the pool's terminate: Ctrl-C, sent to the whole process group,
    is the parent's to act on. The terminate's SIGTERM ends the history as a history ends
    (``run_history``'s ``World.close``: its job and ``wait`` processes killed, its directory
    removed), not at once with all of it left behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stopped)


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
