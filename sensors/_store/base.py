"""What every store backend shares: the records, the protocol, the warning, the row seal.

A row is *sealed*: a BLAKE2b digest over its key and payload is stored beside it, so a row
whose bytes were damaged where SQLite (or PostgreSQL) cannot see it — garbage written into a
text payload, a half-edited row — reads as "unusable" (a :class:`StoreWarning` and ``None``),
never as memory that is wrong. SQLite has no page checksums; this is the cheap substitute.

The seal guards against corruption, not against an attacker: it has no key, and anyone who
can write the file can seal a row of their own. Who can write the file is what keeps
another user out: a SQLite store that is not the user's own, or that group or others can
write (it or its directories), is refused (``sensors._base.trust``, ``refuse_untrusted`` in
:mod:`sensors._store.sqlite`).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sensors._base.errors import CrosscheckError
from sensors._base.text import redact_deep

#: The schema this code writes. A store whose ``schema_version`` is higher was written by a
#: newer crosscheck: it is left untouched (warning, fresh in-process memory).
SCHEMA_VERSION = 1
#: What ``crosscheck_meta`` says under ``app`` in a store that is ours.
APP = "crosscheck"
DEFAULT_RETENTION = 10_000


class StoreWarning(UserWarning):
    """A store, or one of its rows, is corrupt, foreign or from a newer schema version.

    Emitted with :func:`warnings.warn`; the operation goes on with fresh memory for the stages
    concerned. Never raised by the store itself.
    """


class StoreError(CrosscheckError):
    """The store could not answer: unreachable server, lock not granted within the busy
    timeout, disk full. Raised by ``open_store`` (PostgreSQL unreachable) and by
    ``acquire``/``release``/``announce``/``announced``, whose answers coordinate processes and
    must not be guessed. ``load`` and ``save`` never raise it: they warn instead (the caller's
    in-process memory carries on)."""

    def __init__(self, message: str, *, location: str | None = None):
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class StoreMissing(StoreError):
    """A read-only open found no store at the location (no file, an empty file, a database
    without crosscheck's tables): nothing was ever recorded there, and nothing is created."""


@dataclass(frozen=True)
class StageKey:
    """One watched stage on one host (the host's display name: ``local``, the ssh host)."""

    stage: str
    host: str


@dataclass(frozen=True)
class Stored:
    """What :meth:`Store.load` returns: the last save, as saved."""

    memory: str
    fingerprint: Mapping[str, str]
    verdict: Mapping[str, Any] | None
    saved_at: float
    version: int


@dataclass(frozen=True)
class Lease:
    """The answer of :meth:`Store.acquire`: whether *we* hold the stage, and who does.

    ``expires_at`` is epoch seconds on the store's clock (the database server's, for
    PostgreSQL: the one clock every watcher shares)."""

    held: bool
    holder: str
    expires_at: float


@dataclass(frozen=True)
class Announcement:
    """The answer of :meth:`Store.announce`. ``first`` is True for exactly one caller per
    ``(stage, host, run, state)``; everyone else gets the stored verdict and time.
    ``verdict`` is None only when the stored row is unusable (warned)."""

    first: bool
    run: str
    state: str
    verdict: Mapping[str, Any] | None
    decided_at: float


@dataclass(frozen=True)
class HistoryEntry:
    """One verdict change: when it was saved, where, the new state and the verdict document
    (with its evidence)."""

    at: float
    stage: str
    host: str
    state: str
    verdict: Mapping[str, Any]


@dataclass(frozen=True)
class Handoff:
    """A stage a gate handed to the watcher service (``crosscheck serve``) so that it holds no
    worker while it waits.

    ``ticket`` is the gate's flow run id; ``request`` is what the gate asks for (the stage
    definition, ``since``, the launch record: JSON); at ``deadline`` (epoch seconds) the
    watcher settles it as timed out. ``outcome`` is written once, by the watcher, when the
    stage is complete or failed or the deadline passed; the gate reads it when it resumes.
    """

    ticket: str
    stage: str
    host: str
    request: Mapping[str, Any]
    deadline: float
    created_at: float
    outcome: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SaveRequest:
    """One :meth:`Store.save`, as its arguments (``save_many`` takes several)."""

    key: StageKey
    memory: str
    fingerprint: Mapping[str, str]
    verdict: Mapping[str, Any]
    version: int
    changed: bool
    renew: tuple[str, float] | None = None


class Store(Protocol):
    """The durable memory of gates; see :mod:`sensors._store`."""

    location: str

    def load(self, key: StageKey) -> Stored | None: ...

    def save(
        self,
        key: StageKey,
        *,
        memory: str,
        fingerprint: Mapping[str, str],
        verdict: Mapping[str, Any],
        version: int,
        changed: bool,
        renew: tuple[str, float] | None = None,
    ) -> Lease | None: ...

    def acquire(self, key: StageKey, holder: str, ttl: float) -> Lease: ...

    def release(self, key: StageKey, holder: str) -> None: ...

    def renew_leases(self, holder: str, ttl: float, keys: Sequence[StageKey]) -> set[StageKey]: ...

    def announce(self, key: StageKey, run: str, state: str, verdict: Mapping[str, Any]) -> Announcement: ...

    def announced(self, key: StageKey, run: str) -> Announcement | None: ...

    def history(
        self, stage: str, host: str | None = None, *, limit: int | None = None
    ) -> list[HistoryEntry]: ...

    def hand_off(self, handoff: Handoff) -> Handoff: ...

    def handoffs(self) -> list[Handoff]: ...

    def handoff(self, ticket: str) -> Handoff | None: ...

    def record_outcome(self, ticket: str, outcome: Mapping[str, Any], *, replace: bool = False) -> bool: ...

    def drop_handoff(self, ticket: str) -> None: ...
    def heartbeat_watcher(self, holder: str, ttl: float, about: str = "") -> None: ...

    def live_watchers(self) -> list[str]: ...

    def drop_watcher(self, holder: str) -> None: ...

    def close(self) -> None: ...


def warn(message: str) -> None:
    # stacklevel 3: blame the caller of the store method, not the store.
    warnings.warn(message, StoreWarning, stacklevel=3)


# -- rows ---------------------------------------------------------------------------------


def dumps(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces): the same document seals the same way."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def shown(document: Mapping[str, Any]) -> str:
    """A document a person is shown (a verdict, a hand-off's outcome) as a row keeps it:
    :func:`dumps` of it with every string redacted (:func:`~sensors._base.text.redact_deep`).

    Verdicts are built from redacted readings already; this is the store's own guard, so that
    no secret reaches the file or the database (and ``history``) whatever built the document.
    """
    return dumps(redact_deep(dict(document)))


def seal(*parts: object) -> str:
    """Digest of a row's fields, each length-prefixed (no two rows seal alike by shifting
    bytes from one field to the next). Floats by ``repr``: exact for SQLite REAL and
    PostgreSQL double precision."""
    h = hashlib.blake2b(digest_size=16, person=b"crosscheck-st1")
    for part in parts:
        data = (repr(part) if isinstance(part, float) else str(part)).encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def check_save_args(
    memory: str, fingerprint: Mapping[str, str], verdict: Mapping[str, Any], version: int
) -> None:
    """A wrong type here is the caller's bug, not the store's state: raise, don't warn."""
    if not isinstance(memory, str):
        raise TypeError(f"memory must be a JSON text (str), not {type(memory).__name__}")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in fingerprint.items()):
        raise TypeError("fingerprint must map str to str")
    if not isinstance(verdict, Mapping):
        raise TypeError(f"verdict must be a mapping, not {type(verdict).__name__}")
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"version must be an int, not {type(version).__name__}")


def state_of(verdict: Mapping[str, Any]) -> str:
    """The state a verdict document names (``Verdict.to_json`` writes it as ``verdict``)."""
    state = verdict.get("verdict", verdict.get("state", ""))
    return state if isinstance(state, str) else str(state)


def memory_seal(
    key: StageKey, memory: str, fingerprint: str, verdict: str, saved_at: float, version: int
) -> str:
    return seal("memory", key.stage, key.host, memory, fingerprint, verdict, float(saved_at), version)


def decode_stored(key: StageKey, row: tuple[Any, ...], where: str) -> Stored | None:
    """``row`` = (memory, fingerprint, verdict, saved_at, version, seal) → Stored, or None
    with a warning when it is damaged."""
    try:
        memory, fingerprint, verdict, saved_at, version, digest = row
        if digest != memory_seal(key, memory, fingerprint, verdict, float(saved_at), int(version)):
            raise ValueError("its seal does not match its contents")
        fp = json.loads(fingerprint)
        vd = json.loads(verdict)
        if not isinstance(fp, dict) or not all(isinstance(v, str) for v in fp.values()):
            raise ValueError("its fingerprint is not a mapping of strings")
        if vd is not None and not isinstance(vd, dict):
            raise ValueError("its verdict is not a JSON object")
        if not isinstance(memory, str) or not math.isfinite(float(saved_at)):
            raise ValueError("its memory or time has the wrong type")
        return Stored(
            memory=memory, fingerprint=fp, verdict=vd, saved_at=float(saved_at), version=int(version)
        )
    except (ValueError, TypeError) as exc:
        warn(f"{where}: the stored memory of {key.stage}@{key.host} is unusable ({exc}); starting fresh")
        return None


def history_seal(stage: str, host: str, seq: int, at: float, state: str, verdict: str) -> str:
    return seal("history", stage, host, seq, float(at), state, verdict)


def decode_history(rows: list[tuple[Any, ...]], where: str) -> list[HistoryEntry]:
    """``rows`` of (stage, host, seq, at, state, verdict, seal); damaged ones are skipped
    with one warning."""
    out, bad = [], 0
    for row in rows:
        try:
            stage, host, seq, at, state, verdict, digest = row
            if digest != history_seal(stage, host, int(seq), float(at), state, verdict):
                raise ValueError
            doc = json.loads(verdict)
            if not isinstance(doc, dict):
                raise ValueError
            out.append(HistoryEntry(at=float(at), stage=stage, host=host, state=state, verdict=doc))
        except (ValueError, TypeError):
            bad += 1
    if bad:
        warn(f"{where}: skipped {bad} unusable history entr{'y' if bad == 1 else 'ies'}")
    return out


def announce_seal(key: StageKey, run: str, state: str, verdict: str, decided_at: float) -> str:
    return seal("announce", key.stage, key.host, run, state, verdict, float(decided_at))


def decode_announcement(key: StageKey, row: tuple[Any, ...], first: bool, where: str) -> Announcement:
    """``row`` = (run, state, verdict, decided_at, seal). An unusable row still *is* an
    announcement (someone was first): only its verdict is lost."""
    run, state, verdict, decided_at, digest = row
    doc: Any = None
    try:
        if digest != announce_seal(key, run, state, verdict, float(decided_at)):
            raise ValueError
        doc = json.loads(verdict)
        if not isinstance(doc, dict):
            raise ValueError
    except (ValueError, TypeError):
        doc = None
        warn(f"{where}: the announcement of {key.stage}@{key.host} run {run} ({state}) is unusable")
    try:
        at = float(decided_at)
    except (TypeError, ValueError):
        at = 0.0
    return Announcement(first=first, run=str(run), state=str(state), verdict=doc, decided_at=at)


def handoff_seal(ticket: str, stage: str, host: str, request: str, deadline: float, created_at: float) -> str:
    return seal("handoff", ticket, stage, host, request, float(deadline), float(created_at))


def outcome_seal(ticket: str, outcome: str) -> str:
    return seal("outcome", ticket, outcome)


#: A handoff row's columns, in the order :func:`handoff_row` gives and
#: :func:`decode_handoffs` reads (both backends select exactly these).
HANDOFF_NEW = ("ticket", "stage", "host", "request", "deadline", "created_at", "seal")
HANDOFF_COLUMNS = (*HANDOFF_NEW, "outcome", "outcome_seal")


def handoff_row(handoff: Handoff) -> tuple[Any, ...]:
    """(ticket, stage, host, request, deadline, created_at, seal) of a new handoff."""
    request = dumps(dict(handoff.request))
    digest = handoff_seal(
        handoff.ticket, handoff.stage, handoff.host, request, handoff.deadline, handoff.created_at
    )
    return (
        handoff.ticket,
        handoff.stage,
        handoff.host,
        request,
        float(handoff.deadline),
        float(handoff.created_at),
        digest,
    )


def decode_handoffs(rows: list[tuple[Any, ...]], where: str) -> list[Handoff]:
    """``rows`` of (ticket, stage, host, request, deadline, created_at, seal, outcome,
    outcome_seal); damaged ones are skipped with one warning (a damaged outcome alone reads as
    no outcome yet: the watcher decides again)."""
    out, bad = [], 0
    for row in rows:
        try:
            ticket, stage, host, request, deadline, created_at, digest, outcome, o_digest = row
            if digest != handoff_seal(ticket, stage, host, request, float(deadline), float(created_at)):
                raise ValueError
            doc = json.loads(request)
            if not isinstance(doc, dict):
                raise ValueError
            result: Any = None
            if outcome is not None and o_digest == outcome_seal(ticket, outcome):
                result = json.loads(outcome)
                if not isinstance(result, dict):
                    result = None
            out.append(
                Handoff(
                    ticket=str(ticket),
                    stage=str(stage),
                    host=str(host),
                    request=doc,
                    deadline=float(deadline),
                    created_at=float(created_at),
                    outcome=result,
                )
            )
        except (ValueError, TypeError):
            bad += 1
    if bad:
        warn(f"{where}: skipped {bad} unusable handoff{'' if bad == 1 else 's'}")
    return out


#: Why a store whose ``crosscheck_meta`` table crosscheck did not write is left alone.
NOT_OUR_META = "has a crosscheck_meta table that crosscheck did not write"


def judge_meta(meta: Mapping[str, Any]) -> str | None:
    """What is wrong with a store whose ``crosscheck_meta`` holds ``meta`` (None: it is
    crosscheck's, at a schema version this one reads). One rule for both backends."""
    try:
        version = int(meta.get("schema_version", ""))
    except (ValueError, TypeError):
        return NOT_OUR_META
    if meta.get("app") != APP:
        return NOT_OUR_META
    if version > SCHEMA_VERSION:
        return (
            f"was written by a newer crosscheck (schema version {version}; this one reads "
            f"{SCHEMA_VERSION}); it is left untouched"
        )
    return None
