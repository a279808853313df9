"""What every signal is: a probe snippet and a reader, around a memory of its own.

A check runs one probe script. Each configured signal adds its snippet (sh lines, each
section opened with ``sec NAME``), then reads its sections, in registry order: the process
signal first (it learns the job's PIDs and where the run begins), then the log, the outputs
and the GPU, each seeing what the ones before it learnt (:class:`CheckFacts`).

Adding a signal: one module holding its schema fragment (a pydantic ``Section``), its
``snippet``, its reader, its memory (a small frozen dataclass) and its evidence (a
``TypedDict``); then a :class:`Signal` in ``sensors._signals.SIGNALS`` and a field of that
name in ``sensors._config.Stage``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from sensors._model import Reading
from sensors._probe import Meta
from sensors._run import Run

SpecT = TypeVar("SpecT")
MemoryT = TypeVar("MemoryT")


@dataclass(frozen=True)
class ProbeInputs:
    """What a snippet may need beyond its own spec and memory."""

    nonce: str
    nvml: bool = True  # GPUs are read here through NVML (the local host), not by nvidia-smi
    job_alive: bool = False  # the job had live PIDs at the last check
    run_start: float | None = None  # where the run begins (or the watch's first check)
    outputs_tie: bool = False  # neither log nor process: outputs must show a write in the run


@dataclass(frozen=True)
class CheckFacts:
    """What one check knows, passed along the signals in registry order."""

    meta: Meta
    nonce: str
    host: str
    nvml: bool = True
    run: Run | None = None
    first_check_at: float | None = None
    exclude_pids: frozenset[int] = frozenset()
    job_pids: frozenset[int] | None = None  # from the process signal (None: not configured)
    outputs_tie: bool = False

    @property
    def run_start(self) -> float | None:
        """When this run began, or else this watch's first check (host clock)."""
        if self.run is not None and self.run.started_at is not None:
            return self.run.started_at
        return self.first_check_at


Snippet = Callable[[SpecT, MemoryT, ProbeInputs], list[str]]
Reader = Callable[[SpecT, Mapping[str, bytes], MemoryT, CheckFacts], tuple[Reading, MemoryT, CheckFacts]]


@dataclass(frozen=True)
class Signal(Generic[SpecT, MemoryT]):
    """One signal: its name (the stage field and the reading's name), a fresh memory, the
    probe snippet and the reader."""

    name: str
    new_memory: Callable[[], MemoryT]
    snippet: Snippet[SpecT, MemoryT]
    read: Reader[SpecT, MemoryT]
