"""The durable memory of gates (issue 11): where a Checker's memory, the verdict history, the
leases and the announcements outlive its process.

:func:`open_store` opens the store a location names and returns a :class:`Store`: SQLite
(:mod:`sensors._store.sqlite`, the standard library) for a path, PostgreSQL
(:mod:`sensors._store.postgres`, SQLAlchemy Core) for a ``postgresql://`` URL, this process
only for ``:memory:``. Its records (:class:`StageKey`, :class:`Stored`, :class:`Lease`,
:class:`Announcement`, :class:`HistoryEntry`, :class:`Handoff`) are frozen dataclasses in
:mod:`sensors._store.base`. A store never stops a gate: what is wrong with the store is a
:class:`StoreWarning` and fresh memory, while the calls that decide who watches and who
notifies raise :class:`StoreError` when the store cannot answer. The interface, the
locations, the failure policy and the two backends: docs/state-store.md, "Inside the store".

May import :mod:`sensors._base` only.
"""

from __future__ import annotations

import os
from pathlib import Path

from sensors._base.errors import ConfigError
from sensors._base.text import REDACTED, inert, redact
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
    "NO_STORE",
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
    "store_location",
]

_PG_SCHEMES = ("postgresql", "postgresql+psycopg", "postgres")


def default_location() -> str:
    """``$CROSSCHECK_STATE``, else ``$XDG_STATE_HOME/crosscheck/state.db``."""
    if os.environ.get("CROSSCHECK_STATE"):
        return os.environ["CROSSCHECK_STATE"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "crosscheck", "state.db")


#: The location that means no store: a gate's memory lives in its process (or task run) only.
NO_STORE = "none"


def store_location(location: str | None = None) -> str | None:
    """Where a command or a task keeps its state store: ``location`` (``--state``, a flow's
    ``state``), else ``$CROSSCHECK_STATE``, else :func:`default_location`'s file; ``None``
    when that names no store (:data:`NO_STORE`, any case, spaces around it ignored).

    The answer is given to :func:`open_store` as it is.

    Example:
        >>> store_location("/tmp/state.db"), store_location(" None ")
        ('/tmp/state.db', None)
    """
    where = location or os.environ.get("CROSSCHECK_STATE")
    if where is None:
        return default_location()
    return None if where.strip().lower() == NO_STORE else where


def open_store(
    location: str | os.PathLike[str] | None = None, *, retention: int | None = None, readonly: bool = False
) -> Store:
    """Open (creating if needed) the store at ``location`` (docs/state-store.md, "Inside the store").

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
        raise ConfigError(
            f"{_shown(where)}: unknown store location (scheme {inert(scheme, 40)!r}; a path,"
            " sqlite:///PATH or postgresql://...)"
        )
    if where == ":memory:":
        return SQLiteStore(None, retention=retention)
    if not where:
        raise ConfigError("an empty state store location (a path, sqlite:///PATH or postgresql://...)")
    return SQLiteStore(Path(where).expanduser(), retention=retention, readonly=readonly)


def _shown(where: str) -> str:
    """A store location as an error may show it: the URL's password masked
    (``postgresq://u:***@host/db``; everything between the user's ``:`` and the last ``@``,
    whatever it holds), any other secret redacted, and inert.

    Example:
        >>> _shown("postgresq://u:p/w@d@host:x/db?password=y")
        'postgresq://u:***@host:x/db?password=***'
    """
    scheme, sep, rest = where.partition("://")
    if sep and "@" in rest:
        userinfo, _, hostpart = rest.rpartition("@")
        if ":" in userinfo:
            rest = f"{userinfo.partition(':')[0]}:{REDACTED}@{hostpart}"
        where = f"{scheme}://{rest}"
    return inert(redact(where), 300)


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
    except (sa.exc.ArgumentError, ValueError) as exc:
        # SQLAlchemy's message quotes the URL whole, password included: never shown.
        why = "it cannot be parsed"
        if isinstance(exc, ValueError):
            why = "its host:port cannot be read; a port is a number"
        raise ConfigError(f"{_shown(where)}: not a PostgreSQL URL ({why})") from None
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
