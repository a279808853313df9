"""Readings and verdicts: small frozen values, serialisable to the CLI's JSON schema."""

from __future__ import annotations

import datetime as _dt
import enum
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sensors._base.text import redact, redact_deep

SIGNALS = ("supervisor", "process", "log", "outputs", "gpu")


class Says(enum.StrEnum):
    """What one signal says about the stage."""

    DONE = "done"
    WORKING = "working"
    FAILED = "failed"
    UNKNOWN = "unknown"


class State(enum.StrEnum):
    """The verdict on a stage."""

    COMPLETE = "complete"
    RUNNING = "running"
    STALLED = "stalled"
    FAILED = "failed"
    CONTRADICTION = "contradiction"
    UNKNOWN = "unknown"

    @property
    def final(self) -> bool:
        """Whether the stage is over: ``complete`` or ``failed`` end a wait, a gate and a
        watch's fast cadence; every other verdict may still change."""
        return self in _FINAL


_FINAL = frozenset({State.COMPLETE, State.FAILED})


@dataclass(frozen=True)
class Stuck:
    """Why an ``unknown`` verdict's run can never be found complete, and what would have told.

    Set by the verdict (``sensors._verdict.stuck``) only where no later reading of this run
    can make it complete: a launched run whose log, outputs or process a later run has taken
    over, or a stage with nothing that tells a success from a crash. Not for an ``unknown``
    that may clear (a host that does not answer, a file not readable now, writes that may
    still land). Only a new run of the job, watched anew, can be found complete.

    Attributes:
        why: one line: what settled it.
        fix: one line: what to do so the next run can be told, never what the watch already did.
    """

    why: str
    fix: str

    def to_json(self) -> dict[str, str]:
        return {"why": self.why, "fix": self.fix}


def _freeze(evidence: Mapping[str, Any] | None) -> Mapping[str, Any]:
    frozen = {}
    for key, value in (evidence or {}).items():
        # Most evidence values are numbers or None: taken as they are, without a call.
        if value is None or type(value) in _SCALARS:
            frozen[key] = value
        elif type(value) is str:
            frozen[key] = redact(value)
        else:
            frozen[key] = redact_deep(value)
    return MappingProxyType(frozen)


_SCALARS = frozenset({int, float, bool})


@dataclass(frozen=True)
class Reading:
    """One signal's reading.

    Attributes:
        signal: ``supervisor``, ``process``, ``log``, ``outputs`` or ``gpu``.
        says: done, working, failed or unknown.
        detail: one line a person reads.
        evidence: the raw facts behind ``says`` (JSON-serialisable values).
        read_at: when it was read, seconds since the epoch on the monitored host's clock
            (``None`` when the host could not be asked).
        host: where it was read.
    """

    signal: str
    says: Says
    detail: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    read_at: float | None = None
    host: str = "local"

    def __post_init__(self) -> None:
        if type(self.says) is not Says:
            object.__setattr__(self, "says", Says(self.says))
        object.__setattr__(self, "detail", redact(self.detail))
        object.__setattr__(self, "evidence", _freeze(self.evidence))

    def restamped(self, read_at: float | None) -> Reading:
        """This reading as read again at ``read_at``: the same facts (its evidence shared:
        frozen, never changed), another time. For a signal whose every input is as at an
        earlier check, so its reading would be built anew to the same value."""
        again = object.__new__(type(self))
        again.__dict__.update(self.__dict__, read_at=read_at)
        return again

    def to_json(self) -> dict[str, Any]:
        return {
            "says": str(self.says),
            "detail": self.detail,
            "evidence": _jsonable(self.evidence),
            "read_at": _iso(self.read_at),
        }


@dataclass(frozen=True)
class Verdict:
    """The one answer for a stage at one check, with its reasons and every reading.

    ``advance`` is true only for ``complete``: the single place a gate looks. The first of
    ``reasons`` is the one that decided (``no progress for 66s ...`` for a stall, the error
    line for a failure): where one reason is shown alone (an event's ``crosscheck.reason``,
    a headline), it is that one; the others are context.
    """

    stage: str
    state: State
    reasons: tuple[str, ...]
    readings: Mapping[str, Reading]
    checked_at: float | None
    host: str
    since: float | None = None  # when this state began (monitored host's clock)
    run: Mapping[str, Any] | None = None  # where the run being watched begins (source, start)
    # An unknown that no later reading of this run can make complete (None: it may still be).
    stuck: Stuck | None = None

    def __post_init__(self) -> None:
        if type(self.state) is not State:
            object.__setattr__(self, "state", State(self.state))
        if self.stuck is not None:
            if self.state is not State.UNKNOWN:
                raise ValueError(f"a {self.state} verdict cannot be stuck: only an unknown one is")
            object.__setattr__(self, "stuck", Stuck(redact(self.stuck.why), redact(self.stuck.fix)))
        if self.run is not None:
            object.__setattr__(self, "run", _freeze(self.run))
        # Reasons are built from details (already redacted) and host errors; redacting again
        # is idempotent and covers a reason written from anything else.
        object.__setattr__(self, "reasons", tuple([redact(r) for r in self.reasons]))
        object.__setattr__(self, "readings", MappingProxyType(dict(self.readings)))
        if self.state is State.COMPLETE:
            # A complete verdict with a signal that is not done contradicts itself: refuse it
            # at construction so no code path can produce one.
            not_done = [r.signal for r in self.readings.values() if r.says is not Says.DONE]
            if not_done:
                raise ValueError(f"complete verdict with signals not done: {not_done}")

    @property
    def advance(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def settled(self) -> bool:
        """Whether this verdict ends a wait: ``complete``, ``failed``, or an ``unknown`` that
        can never become complete (``stuck``)."""
        return self.stuck is not None or self.state.final

    def to_json(self) -> dict[str, Any]:
        """The CLI's ``--json`` schema (also the event payload and the artifact source)."""
        return {
            "stage": self.stage,
            "verdict": str(self.state),
            "advance": self.advance,
            # Whether it can still change: false while it may (running, unknown for now).
            "settled": self.settled,
            "stuck": self.stuck.to_json() if self.stuck is not None else None,
            "reasons": list(self.reasons),
            "checked_at": _iso(self.checked_at),
            "since": _iso(self.since),
            "host": self.host,
            "run": _jsonable(dict(self.run)) if self.run is not None else None,
            "signals": {name: r.to_json() for name, r in self.readings.items()},
        }


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _iso_of(ts)


# A verdict's readings were read at one moment, the check's: the same time, written once.
@functools.lru_cache(maxsize=1024)
def _iso_of(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).isoformat(timespec="milliseconds")


def _jsonable(value: Any) -> Any:
    """``value`` as JSON values: mappings with text keys, lists, finite numbers, text.

    Every verdict is made JSON (the store saves one per check of every stage): the common
    types are told by their exact type first, the rest as they always were.
    """
    kind = type(value)
    if kind in _JSON_PLAIN:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict or kind is MappingProxyType:
        plain = _JSON_PLAIN
        return {
            k if type(k) is str else str(k): v if type(v) in plain else _jsonable(v) for k, v in value.items()
        }
    if kind is list or kind is tuple:
        return [v if type(v) in _JSON_PLAIN else _jsonable(v) for v in value]
    return _jsonable_any(value)


_JSON_PLAIN = frozenset({str, int, bool, type(None)})


def _jsonable_any(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
