"""The durable memory of gates (issue 11): where a Checker's memory, the verdict history, the
leases and the announcements outlive its process.

Interface (the records are frozen dataclasses, in :mod:`sensors._store.base`)::

    StageKey(stage: str, host: str)
    Stored(memory: str, fingerprint: Mapping[str, str], verdict: Mapping | None,
           saved_at: float, version: int)
    Lease(held: bool, holder: str, expires_at: float)
    Announcement(first: bool, run: str, state: str, verdict: Mapping | None, decided_at: float)
    HistoryEntry(at: float, stage: str, host: str, state: str, verdict: Mapping)
    Handoff(ticket: str, stage: str, host: str, request: Mapping, deadline: float,
            created_at: float, outcome: Mapping | None)

    open_store(location=None, *, retention=None) -> Store
    store.load(key) -> Stored | None              # None: nothing stored, or unusable (warned)
    store.save(key, *, memory, fingerprint, verdict, version, changed, renew=None) -> Lease | None
        # renew=(holder, ttl): the lease is renewed in the same round trip, and returned
        # atomic; when changed, the verdict is also appended to the history
    store.acquire(key, holder, ttl) -> Lease      # held, or who holds it and until when
    store.release(key, holder) -> None
    store.announce(key, run, state, verdict) -> Announcement   # first=True exactly once
    store.announced(key, run) -> Announcement | None           # the earliest for this run
    store.history(stage, host=None, *, limit=None) -> list[HistoryEntry]   # oldest first
    store.hand_off(handoff) -> Handoff            # a gate hands its stage to the watcher;
                                                   # the stored one if the ticket is known
    store.handoffs() -> list[Handoff]              # every handoff, oldest first
    store.handoff(ticket) -> Handoff | None
    store.record_outcome(ticket, outcome, *, replace=False) -> bool   # the watcher's final word, once
                                                   # (replace: over an unusable one)
    store.drop_handoff(ticket) -> None
    store.heartbeat_watcher(holder, ttl, about="") -> None   # crosscheck serve: I am alive
    store.live_watchers() -> list[str]            # holders whose heartbeat has not expired
    store.drop_watcher(holder) -> None
    store.close()                                  # stores are also context managers

``memory`` and the fingerprint's values are opaque to the store (the codec owns them); the
history's ``state`` is the verdict document's ``verdict`` field (``Verdict.to_json``).
Retention is per (stage, host): at most ``retention`` entries (default 10,000), the oldest
pruned on save by a sequence threshold (an index range, not a count).

Locations: ``None`` → ``$CROSSCHECK_STATE``, else ``$XDG_STATE_HOME/crosscheck/state.db``
(``~/.local/state/crosscheck/state.db``); a path or ``sqlite:///path`` → SQLite (created
only where nothing stands: a path that does not exist, its directories mode 0700 and the file
0600, or an empty file; any other file is never renamed, replaced or written until it is
shown to be ours); ``:memory:`` → this process only; ``postgresql://…``,
``postgresql+psycopg://…`` → PostgreSQL.

Failure policy — a store never stops a gate:

- corrupt, foreign or newer-schema stores, and damaged rows, are a :class:`StoreWarning` and
  fresh memory for the stages concerned (rows carry a seal, a digest checked on load); see
  :mod:`sensors._store.sqlite` for what happens to the file;
- ``load``/``save``/``history`` never raise for the store's state: they warn;
- ``acquire``/``release``/``announce``/``announced`` raise :class:`StoreError` when the store
  cannot answer (locked past the busy timeout, server gone): who watches and who notifies must
  not be guessed. ``open_store`` raises it for an unreachable PostgreSQL server, and
  :class:`~sensors.ConfigError` for a location it does not understand.

Two backends, chosen by the location. SQLite is the standard library's ``sqlite3`` with
hand-written SQL in that one dialect: no dependency for the default store, and direct control
of what durability rests on (``BEGIN IMMEDIATE``, WAL, the busy timeout), which SQLAlchemy's
pysqlite layer hides behind its own transaction handling. PostgreSQL is SQLAlchemy Core 2.x
with psycopg 3 (the ``postgres`` extra), imported only when such a URL is opened: upserts
(``ON CONFLICT … DO UPDATE … WHERE``, ``DO NOTHING … RETURNING``) come from SQLAlchemy's
PostgreSQL dialect, so there is no dialect switching of ours. Both keep one schema, version 1,
in ``crosscheck_*`` tables (``crosscheck_meta`` holds ``app`` and ``schema_version``). Additions
since (the ``crosscheck_watcher`` registry; PostgreSQL's ``crosscheck_memory.seq`` counter) are
made when a store is opened, additively (``IF NOT EXISTS``): older crosscheck reads and writes
such a store as before, so the version stays 1.

Example:
    >>> store = open_store(":memory:")
    >>> key = StageKey("extract", "local")
    >>> store.save(key, memory="{}", fingerprint={"log": "ab12"}, verdict={"verdict": "running"},
    ...            version=1, changed=True)
    >>> store.load(key).fingerprint
    {'log': 'ab12'}
    >>> store.acquire(key, "watcher-1", ttl=60).held, store.acquire(key, "watcher-2", ttl=60).held
    (True, False)
    >>> store.announce(key, "run-7", "complete", {"verdict": "complete"}).first
    True
    >>> store.announce(key, "run-7", "complete", {"verdict": "complete"}).first
    False
"""

from __future__ import annotations

import os
from pathlib import Path

from sensors._base.errors import ConfigError
from sensors._store.base import (
    DEFAULT_RETENTION,
    SCHEMA_VERSION,
    Announcement,
    Handoff,
    HistoryEntry,
    Lease,
    SaveRequest,
    StageKey,
    Store,
    Stored,
    StoreError,
    StoreMissing,
    StoreWarning,
    warn,
)
from sensors._store.sqlite import SQLiteStore

__all__ = [
    "DEFAULT_RETENTION",
    "SCHEMA_VERSION",
    "Announcement",
    "Handoff",
    "HistoryEntry",
    "Lease",
    "SaveRequest",
    "StageKey",
    "Store",
    "StoreError",
    "StoreMissing",
    "StoreWarning",
    "Stored",
    "default_location",
    "open_store",
]

_PG_SCHEMES = ("postgresql", "postgresql+psycopg", "postgres")


def default_location() -> str:
    """``$CROSSCHECK_STATE``, else ``$XDG_STATE_HOME/crosscheck/state.db``."""
    if os.environ.get("CROSSCHECK_STATE"):
        return os.environ["CROSSCHECK_STATE"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "crosscheck", "state.db")


def open_store(
    location: str | os.PathLike[str] | None = None, *, retention: int | None = None, readonly: bool = False
) -> Store:
    """Open (creating if needed) the store at ``location``; see the module docstring.

    ``readonly`` (``crosscheck history``): open an existing store for reading only. Nothing
    is created or adopted; no store there raises :class:`StoreMissing`, one that cannot be
    read (not ours, newer, damaged, unreachable) :class:`StoreError`, instead of the
    writers' warning and in-process memory.

    Example:
        >>> with open_store("/tmp/crosscheck-doctest/state.db") as store:  # doctest: +SKIP
        ...     store.load(StageKey("extract", "local"))
    """
    if retention is None:
        retention = DEFAULT_RETENTION
    if isinstance(retention, bool) or not isinstance(retention, int) or retention < 1:
        raise ConfigError(f"retention must be a positive number of history entries, not {retention!r}")
    where = os.fspath(location) if location is not None else default_location()
    scheme = where.partition("://")[0].lower() if "://" in where else ""
    if scheme in _PG_SCHEMES:
        return _open_postgres(where, retention, readonly=readonly)
    if scheme == "sqlite":
        # SQLAlchemy's spelling: sqlite:///relative, sqlite:////absolute, sqlite:// = memory.
        where = where[len("sqlite://") :]
        where = where[1:] if where.startswith("/") else where
        if not where or where == ":memory:":
            return SQLiteStore(None, retention=retention)
    elif scheme:
        raise ConfigError(f"{where}: unknown store location (a path, sqlite:///PATH or postgresql://...)")
    if where == ":memory:":
        return SQLiteStore(None, retention=retention)
    if not where:
        raise ConfigError("an empty state store location (a path, sqlite:///PATH or postgresql://...)")
    return SQLiteStore(Path(where).expanduser(), retention=retention, readonly=readonly)


def _open_postgres(where: str, retention: int, *, readonly: bool = False) -> Store:
    try:
        import sqlalchemy as sa

        from sensors._store.postgres import PostgresStore
    except ImportError as exc:
        raise ConfigError(
            "a PostgreSQL store needs SQLAlchemy and psycopg: "
            f"pip install 'prefect-crosscheck[postgres]' ({exc})"
        ) from None
    try:
        url = sa.make_url(where)
    except sa.exc.ArgumentError as exc:
        raise ConfigError(f"not a PostgreSQL URL: {exc}") from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    store = PostgresStore(url, retention=retention, readonly=readonly)
    if store.problem and readonly:
        store.close()
        raise StoreError(store.problem, location=store.location)
    if store.problem:
        fallback = SQLiteStore(None, retention=retention)
        warn(
            f"{store.location} {store.problem}: memory, leases and announcements are kept in this "
            "process only"
        )
        store.close()
        return fallback
    return store
