"""What every signal is: a probe snippet and a reader, around a memory of its own.

A check runs one probe script. Each configured signal adds its snippet (sh lines, each
section opened with ``sec NAME``), then reads its sections, in registry order: the process
signal first (it learns the job's PIDs and where the run begins), then the log, the outputs
and the GPU, each seeing what the ones before it learnt (:class:`CheckFacts`).

Adding a signal: one module holding its schema fragment (a pydantic ``Section``), its
``snippet``, its reader, its memory (a small frozen dataclass) and its evidence (a
``TypedDict``); then a :class:`Signal` in ``sensors._signals.SIGNALS`` and a field of that
name in ``sensors._config.stage.Stage``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Generic, NamedTuple, TypeVar

from sensors._base.model import Reading
from sensors._base.probe import Meta
from sensors._run.run import LaunchEnd, Run
from sensors._run.supervisor import Record

SpecT = TypeVar("SpecT")
MemoryT = TypeVar("MemoryT")
T = TypeVar("T")


def evolve(value: T, **changes: Any) -> T:
    """``dataclasses.replace`` for a signal's memory, several times per stage-check: a copy
    of the fields, not a second run of ``__init__`` (~5x cheaper for a memory of twenty
    fields). Only for frozen dataclasses whose ``__init__`` does nothing but set their fields
    (no ``__post_init__``, no ``init=False`` field, nothing cached from the fields: a copy
    would carry it over stale): ``_plain`` checks."""
    cls = type(value)
    plain_class: type = cls  # mypy does not see type[T] as the Hashable functools.cache takes
    if not _plain(plain_class):
        raise TypeError(f"evolve() is for plain frozen dataclasses, not {cls.__name__}")
    state = value.__dict__.copy()
    for name in changes:
        if name not in state:
            raise TypeError(f"{cls.__name__} has no field {name!r}")
    state.update(changes)
    new = object.__new__(cls)
    new.__dict__.update(state)
    return new


@functools.cache
def _plain(cls: type) -> bool:
    params = getattr(cls, "__dataclass_params__", None)
    return bool(
        params is not None
        and params.frozen
        and not hasattr(cls, "__post_init__")
        and not hasattr(cls, "__slots__")
        and all(f.init for f in fields(cls))
        and not any(isinstance(v, functools.cached_property) for k in cls.__mro__ for v in vars(k).values())
    )


class Reread:
    """Readings a signal builds once per key and reads again at later checks.

    For a reading whose evidence and detail are a function of the key alone (every input
    they are built from, not the time): ``again(key, now)`` is the reading built for that key
    with ``now`` as its time (:meth:`~sensors._base.model.Reading.restamped`), or None; ``keep``
    stores one. Bounded: full, it starts over. Shared by the threads of a watcher (a dict's
    get and set are atomic).
    """

    def __init__(self, most: int = 16384) -> None:
        self._readings: dict[tuple[object, ...], Reading] = {}
        self._most = most

    def again(self, key: tuple[object, ...], read_at: float | None) -> Reading | None:
        reading = self._readings.get(key)
        return None if reading is None else reading.restamped(read_at)

    def keep(self, key: tuple[object, ...], reading: Reading) -> None:
        if len(self._readings) >= self._most:
            self._readings.clear()  # refilled by the next checks
        self._readings[key] = reading


class ProbeInputs(NamedTuple):
    """What a snippet may need beyond its own spec and memory (named tuples, this and
    :class:`CheckFacts`: built for every stage at every check, several times faster than a
    frozen dataclass; changed with ``_replace``)."""

    nonce: str
    nvml: bool = True  # GPUs are read here through NVML (the local host), not by nvidia-smi
    job_alive: bool = False  # the job had live PIDs at the last check
    job_pids: tuple[int, ...] = ()  # those PIDs (at most 64)
    job_ended: bool = False  # ... and every one of them was seen to end since (the exit watch)
    run_start: float | None = None  # where the run begins (or the watch's first check)
    outputs_tie: bool = False  # neither log nor process: outputs must show a write in the run
    table: bool = True  # the process snippet reads the table (a batch reads it once for all)
    exit_file: str | None = None  # where the launch wrapper records the job's exit status
    has_log: bool = False  # the stage has a log signal (its completion line may be an earlier run's)


class JobView(NamedTuple):
    """The job as the process signal saw it at this check, for the signals read after it:
    whose lines a log holds is a question of which process was alive when they were written.

    ``live``: this run's live matched PIDs (not an earlier run's); ``starts``: when each began
    (host clock; missing where /proc could not tell); ``previous``: this run's live PIDs at the
    previous check; ``exited_at``: the launched job's end, as its launch wrapper recorded it;
    ``parents``: each live PID's parent.
    """

    live: frozenset[int] = frozenset()
    starts: Mapping[int, float] = {}
    previous: frozenset[int] = frozenset()
    exited_at: float | None = None
    parents: Mapping[int, int] = {}  # each live PID's parent: a writer's child is its run's
    #: When this run's processes that are gone ended, where the host lets the end be seen
    #: (``sensors._hosts.exits``: the local host), by PID; a PID not in it ended unseen. The
    #: value is the latest file time (host clock) of a write still the process's own: the
    #: moment the end was found where it was seen closely, else a kernel tick before the
    #: last moment it was known alive (``sensors._check.checker._owned_by``).
    ends: Mapping[int, float] = {}
    #: An earlier run's live processes (begun before this run's exact start: ``--since`` or
    #: a launch; or forked by one that was, however late): what they write is not this run's.
    earlier: frozenset[int] = frozenset()
    #: This run's PIDs alive two checks ago and gone at the previous one: each ended between
    #: those /proc scans, perhaps after the previous check's log stat (taken before its scan).
    ended: frozenset[int] = frozenset()
    #: Those of ``previous`` alive when the previous check's probe read the log (alive at
    #: the check before it too, or begun clearly before its clock read): only they were at
    #: work when that read found no line. One its /proc scan found first may have begun after.
    at_read: frozenset[int] = frozenset()
    #: Where this host's log is one the nodes of a stage over several hosts share: the latest
    #: moment (this host's clock, at the earliest it can be) a rank of this run on another
    #: host was seen alive (``sensors._check.span``). What was written in the log before it
    #: was written while the run was at work there, by any of its ranks.
    elsewhere: float | None = None

    def descends(self, pid: int, ancestors: Iterable[int]) -> bool:
        """Whether ``pid``'s parent, or its parent's (as far as the live PIDs reach), is
        one of ``ancestors``."""
        wanted, seen = set(ancestors), set()
        while pid in self.parents and pid not in seen:
            seen.add(pid)
            pid = self.parents[pid]
            if pid in wanted:
                return True
        return False


class LastWord(NamedTuple):
    """This run's completion line as the log signal found it at this check, for the signals
    read after it: outputs written after it was found, with no process of the job alive to
    have written them, make it no longer its run's last word."""

    end: int  # the offset just after the line
    job_alive: bool  # a process of this run alive now or at the last check (its own work)
    # The log counts the line (says done). A line found but not counted yet (text after it,
    # a writer at work) is passed on all the same: outputs written after it are seen as such.
    done: bool = True
    # The log's mtime at this check (its stat; None: not read) and whether its times come from
    # the host's clock: outputs modified after the log's last write were written after the line.
    log_written: float | None = None
    log_own_clock: bool = False
    # When this watch first found the line (the host's clock): a change made after it was
    # made after the line, whatever the log's file times say.
    seen_at: float | None = None
    # One of the line's writers (a process of the run seen before the line was written, or
    # its child) is alive at this check: what changes while it lives may be its own work. A
    # process that began about when the line was found (a later run?) is no writer.
    writer_alive: bool = False
    # The last moment the last of the line's writers was alive, where the host let their end
    # be seen (``JobView.ends``; None: alive, or ended unseen): what changed before it is
    # theirs, as it is while one of them is found alive.
    writers_end: float | None = None


class CheckFacts(NamedTuple):
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
    job: JobView | None = None  # from the process signal (None: not configured, or unknown)
    job_unread: bool = False  # the process signal is configured but could not tell at this check
    last_word: LastWord | None = None  # from the log signal (None: no completion line of this run)
    launch: LaunchEnd | None = None  # a launched job's end as this check found it (None: not launched)
    #: When this watch began on the host's clock, at the latest (the checking machine's
    #: clock at its start, moved by the most the host's clock can be ahead of it as the
    #: first probe's round trip measured): a file born after it is of a run begun after it.
    watch_began: float | None = None
    #: The supervisor's record of the job as this check read it (None: no supervisor section,
    #: or a record that tells nothing of this run: unreadable, absent, another run's).
    supervised: Record | None = None
    #: That record says this run's job was at work at this check or at the last one (the
    #: same identity): what changed in between may be its own, as for a live process
    #: (``LastWord.job_alive``); a stage with no process section has no other sign of it.
    supervised_alive: bool = False
    #: The supervisor's record, the latest it keeps, is of a run begun before this run's
    #: given start (``--since``), at work or ended: no run of the job has begun since, as the
    #: supervisor knows it; what the log holds so far is no word of this run's.
    supervised_earlier: bool = False
    #: The memories a new run set aside at this check (see ``Checker.absorb``): the probe's
    #: request was built from them, so a signal reads its sections with them first (the log:
    #: a read resumed at the last run's offset, or none where it looked unchanged).
    set_aside: Mapping[str, object] = {}
    #: Whether the watch can be given a run start (False: ``serve``, whose stage files have
    #: none): the fixes a reading offers leave out giving one where it cannot.
    takes_since: bool = True

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
