"""The SQLite store: the standard library's ``sqlite3``, one connection per Store.

WAL mode, every write in ``BEGIN IMMEDIATE … COMMIT``; a file is created only where nothing
stands and written only once it is shown to be ours; a store of ours that SQLite later
reports corrupt is set aside and started afresh; ``readonly`` (``crosscheck history``)
creates, adopts and repairs nothing. The rules and why: docs/state-store.md, "The SQLite
store".
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sensors._base.errors import ConfigError
from sensors._base.trust import untrusted_store
from sensors._store.base import (
    APP,
    HANDOFF_COLUMNS,
    NOT_OUR_META,
    SCHEMA_VERSION,
    Announcement,
    Handoff,
    HistoryEntry,
    Lease,
    SaveRequest,
    StageKey,
    Stored,
    StoreError,
    StoreMissing,
    announce_seal,
    check_save_args,
    decode_announcement,
    decode_handoffs,
    decode_history,
    decode_stored,
    dumps,
    handoff_row,
    history_seal,
    judge_meta,
    memory_seal,
    outcome_seal,
    shown,
    state_of,
    warn,
)

T = TypeVar("T")
BUSY_TIMEOUT_S = 10.0

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS crosscheck_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS crosscheck_memory (stage TEXT NOT NULL, host TEXT NOT NULL,"
    " memory TEXT NOT NULL, fingerprint TEXT NOT NULL, verdict TEXT NOT NULL, saved_at REAL NOT NULL,"
    " version INTEGER NOT NULL, seal TEXT NOT NULL, PRIMARY KEY (stage, host))",
    "CREATE TABLE IF NOT EXISTS crosscheck_history (id INTEGER PRIMARY KEY, stage TEXT NOT NULL,"
    " host TEXT NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, state TEXT NOT NULL,"
    " verdict TEXT NOT NULL, seal TEXT NOT NULL)",
    # seq: 1, 2, 3… per (stage, host). The next one is max(seq)+1 and pruning is a range
    # delete below seq - retention: both index lookups, whatever the history's length.
    "CREATE INDEX IF NOT EXISTS crosscheck_history_key ON crosscheck_history (stage, host, seq)",
    "CREATE INDEX IF NOT EXISTS crosscheck_history_stage ON crosscheck_history (stage, id)",
    "CREATE TABLE IF NOT EXISTS crosscheck_lease (stage TEXT NOT NULL, host TEXT NOT NULL,"
    " holder TEXT NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (stage, host))",
    "CREATE TABLE IF NOT EXISTS crosscheck_announce (stage TEXT NOT NULL, host TEXT NOT NULL,"
    " run TEXT NOT NULL, state TEXT NOT NULL, verdict TEXT NOT NULL, decided_at REAL NOT NULL,"
    " seal TEXT NOT NULL, PRIMARY KEY (stage, host, run, state))",
    # Stages handed off by gates (added in schema 1 without a version bump: a table more is
    # invisible to older code, and CREATE TABLE IF NOT EXISTS gives it to older stores).
    "CREATE TABLE IF NOT EXISTS crosscheck_handoff (ticket TEXT PRIMARY KEY, stage TEXT NOT NULL,"
    " host TEXT NOT NULL, request TEXT NOT NULL, deadline REAL NOT NULL, created_at REAL NOT NULL,"
    " seal TEXT NOT NULL, outcome TEXT, outcome_seal TEXT)",
    # The watchers serving this store (crosscheck serve), each until its heartbeat expires.
    "CREATE TABLE IF NOT EXISTS crosscheck_watcher (holder TEXT PRIMARY KEY, about TEXT NOT NULL,"
    " expires_at REAL NOT NULL)",
    f"INSERT OR IGNORE INTO crosscheck_meta VALUES ('app', '{APP}'), ('schema_version', '{SCHEMA_VERSION}')",
)


class _Garbled(sqlite3.DatabaseError):
    """Bytes that are not UTF-8 where SQLite keeps text of its own (the schema in
    ``sqlite_master``): the driver raises UnicodeDecodeError decoding SQLite's message about
    it, not a DatabaseError. A file damaged there is as corrupt as one SQLite calls so."""

    sqlite_errorname = "SQLITE_CORRUPT"


@contextlib.contextmanager
def _garbled_is_corrupt() -> Iterator[None]:
    try:
        yield
    except UnicodeDecodeError as exc:
        raise _Garbled(f"file is not a database (undecodable schema text: {exc})") from exc


def _acquire_in(c: sqlite3.Connection, key: StageKey, holder: str, ttl: float) -> Lease:
    """Take or renew the lease, inside the caller's write transaction."""
    now = time.time()
    row = c.execute(
        "SELECT holder, expires_at FROM crosscheck_lease WHERE stage = ? AND host = ?",
        (key.stage, key.host),
    ).fetchone()
    if row is not None and row[0] != holder and _float(row[1]) > now:
        return Lease(held=False, holder=str(row[0]), expires_at=_float(row[1]))
    c.execute(
        "INSERT INTO crosscheck_lease VALUES (?, ?, ?, ?) ON CONFLICT (stage, host)"
        " DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at",
        (key.stage, key.host, holder, now + ttl),
    )
    return Lease(held=True, holder=holder, expires_at=now + ttl)


def _corrupt(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0  # an unreadable expiry is an expired one


def _save_row(r: SaveRequest) -> tuple[str, str, float, str, str]:
    """What a save writes besides the request: fingerprint and verdict as canonical JSON,
    the time, the verdict's state, the seal (checked before any write)."""
    check_save_args(r.memory, r.fingerprint, r.verdict, r.version)
    fp, vd, now = dumps(dict(r.fingerprint)), shown(r.verdict), time.time()
    return fp, vd, now, state_of(r.verdict), memory_seal(r.key, r.memory, fp, vd, now, r.version)


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"
_REQUIRED = frozenset({"crosscheck_memory", "crosscheck_history", "crosscheck_watcher", "crosscheck_handoff"})


def _uri(path: Path, mode: str, *, immutable: bool = False) -> str:
    """A ``file:`` URI for ``path``: ``mode=rw`` never creates a file, ``mode=ro`` never writes."""
    return f"file:{urllib.parse.quote(str(path))}?mode={mode}" + ("&immutable=1" if immutable else "")


def _not_sqlite(path: Path, st: os.stat_result) -> str | None:
    """Why the file at ``path`` cannot be a store (a directory, a device, not SQLite's
    header); None for a SQLite file or an empty one. Reads 16 bytes, writes nothing."""
    if stat.S_ISDIR(st.st_mode):
        return "is a directory"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_size == 0:
        return None
    with open(path, "rb") as f:
        head = f.read(len(SQLITE_HEADER))
    return None if head == SQLITE_HEADER else "is not a SQLite database"


def refuse_untrusted(path: Path) -> None:
    """Raise ConfigError (one line: the path, what is wrong, what to do) when the store at
    ``path``, or the directory it is in, or one above, is another user's to write
    (``sensors._base.trust``): their store could hand a watch a launched run whose exit
    record is theirs, or a memory that makes a running job done. Never falls back to
    memory quietly: the person must see it."""
    found = untrusted_store(str(path))
    if found is not None:
        raise ConfigError(
            f"{found.why()}: refusing it as the state store (a store another user controls can"
            f" forge a job's exit); {found.fix} or set CROSSCHECK_STATE to a private path"
        )


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _whose(conn: sqlite3.Connection, tables: set[str]) -> str | None:
    """None when the database is a store of ours this code can read; else what it is."""
    if "crosscheck_meta" not in tables:
        if not tables:
            return "is a SQLite database with no tables (not a crosscheck store); it is left untouched"
        return f"is a SQLite database of something else (tables: {', '.join(sorted(tables)[:5])})"
    try:
        meta = dict(conn.execute("SELECT key, value FROM crosscheck_meta"))
    except sqlite3.OperationalError:
        return NOT_OUR_META
    return judge_meta(meta)


def _peek(path: Path) -> str | None:
    """None when ``path`` holds a store of ours this code can read; else what it is.

    Read with ``immutable=1``: SQLite takes no lock, rolls back no hot journal, creates no
    ``-wal`` or ``-shm`` (a plain read-only open of a WAL database creates both, and leaves
    them) — it writes nothing, whoever the file belongs to. Our schema is created before the
    file turns to WAL mode, so ``crosscheck_meta`` is always in the main file. Without a lock
    the read can meet pages another process is writing (a commit, a checkpoint): an error is
    read again a few times before the file counts as one SQLite cannot read, which is not
    provably ours.

    The main file alone is not always the database: a writer killed mid-checkpoint leaves
    it with some of its WAL's pages copied in (page 1 first, whose header then counts pages
    the file does not have yet, which SQLite calls malformed), and only the WAL completes
    it. So where the main file alone does not read and a WAL stands beside it, the two are
    read from a private copy, where SQLite may recover the WAL without writing beside them."""
    for attempt in range(_PEEK_ATTEMPTS):
        try:
            conn = sqlite3.connect(_uri(path, "ro", immutable=True), uri=True)
        except sqlite3.Error as exc:
            return f"cannot be read ({exc})"
        try:
            return _read_whose(conn)
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(sqlite3.DatabaseError, OSError):
                wal = os.path.getsize(f"{path}-wal")
                if wal > 0 and wal + os.path.getsize(path) <= _PEEK_COPY_AT_MOST:
                    with _copied_with_wal(path) as copy:
                        return _read_whose(sqlite3.connect(_uri(copy, "rw"), uri=True))
            if attempt + 1 < _PEEK_ATTEMPTS:
                time.sleep(0.05 * (attempt + 1))
                continue
            return (
                f"is not a usable SQLite database ({exc}) and cannot be shown to be a crosscheck "
                "store; it is left untouched (move it away, or repair it with sqlite3's .recover)"
            )
    raise AssertionError("unreachable")


def _read_whose(conn: sqlite3.Connection) -> str | None:
    """:func:`_whose` of the database ``conn`` opened, which it closes; a file SQLite cannot
    read raises."""
    try:
        conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        with _garbled_is_corrupt():
            return _whose(conn, _tables(conn))
    finally:
        conn.close()


@contextlib.contextmanager
def _copied_with_wal(path: Path) -> Iterator[Path]:
    """A copy of the database at ``path`` and its WAL, in a private temporary folder (the
    main file first: a checkpoint that finishes meanwhile leaves a WAL that still completes
    it, or one whose old frames SQLite skips by their salt, and the caller reads again)."""
    with tempfile.TemporaryDirectory(prefix="crosscheck-peek-") as folder:
        copy = Path(folder) / "state.db"
        shutil.copyfile(path, copy)
        shutil.copyfile(f"{path}-wal", f"{copy}-wal")
        yield copy


_PEEK_ATTEMPTS = 5
#: The largest database and WAL read through a copy: a store keeps a bounded history, far
#: less. A larger pair is judged by its main file alone.
_PEEK_COPY_AT_MOST = 256 * 2**20


def _on_readonly_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


@contextlib.contextmanager
def _write(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SQLiteStore:
    """A store in one SQLite file (``path``), or in this process only (``path=None``).

    ``readonly``: open an existing store of ours for reading only (``crosscheck history``):
    nothing is created, adopted or repaired, and what stands in the way is raised
    (:class:`StoreMissing` when nothing was ever recorded there, :class:`StoreError` for the
    rest) instead of the writers' warning and in-process memory."""

    def __init__(self, path: Path | None, *, retention: int, readonly: bool = False) -> None:
        self.location = str(path) if path is not None else ":memory:"
        self._path = path
        self._retention = retention
        self._readonly = readonly
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._ino: int | None = None
        #: The inode whose crosscheck_meta this process read: the only file it may set aside.
        self._ours: int | None = None
        self._fallback = False
        if readonly and path is not None:
            self._open_readonly()
        else:
            self._open()

    # -- opening, adopting, setting aside ---------------------------------------------------

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        conn = sqlite3.connect(
            target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False, uri=uri
        )
        # Garbage in a text cell must read as a damaged row (its seal fails), not as an
        # exception from the driver's UTF-8 decoding.
        conn.text_factory = lambda b: b.decode("utf-8", "surrogateescape")
        return conn

    def _open(self, *, retried: bool = False) -> None:
        if self._path is None:
            self._in_memory()
            return
        # Two processes opening a new file at once: switching to WAL needs an exclusive lock,
        # and SQLite answers SQLITE_BUSY at once (no busy handler) when waiting could
        # deadlock. That is contention, not a broken file: try again.
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while not self._try_open(retried=retried) and time.monotonic() < deadline:
            time.sleep(0.005 + random.random() * 0.02)
        if self._conn is None:
            self._fall_back(f"stayed locked for {BUSY_TIMEOUT_S:g} s")

    def _try_open(self, *, retried: bool) -> bool:
        """Open and adopt the file; False when it was busy (the caller retries).

        A store is created only where nothing stands (the path does not exist, or is an empty
        file); whatever else is there is read, never written, until it is known to be ours."""
        assert self._path is not None
        path = self._path
        conn = None
        ino = None
        self._ours = None
        try:
            missing = not os.path.lexists(path)
            if missing:
                _private_dirs(path.parent)
            refuse_untrusted(path)
            if missing:
                # 0600: memory may quote logs. O_EXCL: created here, or by another process a
                # moment ago (then adopted below like any file).
                with contextlib.suppress(FileExistsError):
                    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            try:
                st = os.stat(path)
            except FileNotFoundError:
                self._fall_back("is a symbolic link to nothing; it is left as it is")
                return True
            ino = st.st_ino
            why = _not_sqlite(path, st)
            if why:
                self._fall_back(f"{why}; it is left untouched")
                return True
            # Whose it is, read without SQLite writing anything (no journal rolled back, no
            # -shm created): a database that is not ours is never opened for writing.
            why = _peek(path) if st.st_size else None
            if why:
                self._fall_back(why)
                return True
            # mode=rw: SQLite never creates the file (it may have gone since the stat).
            conn = self._connect(_uri(path, "rw"), uri=True)
            with _garbled_is_corrupt():
                problem = self._adopt(conn, empty=st.st_size == 0, ino=ino)
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                return False
            ours = ino is not None and self._ours == ino
            # ours implies ino is not None; said again for mypy, which cannot see through ours.
            if _corrupt(exc) and ours and not retried and ino is not None and self._set_aside(ino, exc):
                self._open(retried=True)
            elif _corrupt(exc) and not ours:
                self._fall_back(
                    f"is not a usable SQLite database ({exc}) and cannot be shown to be a crosscheck "
                    "store; it is left untouched (move it away, or repair it with sqlite3's .recover)"
                )
            else:
                self._fall_back(f"cannot be used ({exc})")
            return True
        except OSError as exc:
            self._fall_back(f"cannot be opened ({exc.strerror or exc})")
            return True
        if problem:
            conn.close()
            self._fall_back(problem)
            return True
        self._conn, self._ino = conn, ino
        return True

    def _open_readonly(self) -> None:
        """Open for reading only: whose the file is, peeked at first (:func:`_peek`); then
        ``mode=ro``, and ``immutable=1`` on a read-only filesystem (a WAL database needs its
        ``-shm`` file, which nobody can create there; nobody can change the file there either)."""
        assert self._path is not None
        path = self._path
        try:
            refuse_untrusted(path)
            st = os.stat(path)
        except FileNotFoundError:
            raise StoreMissing("no state store here: nothing was recorded", location=self.location) from None
        except OSError as exc:
            raise StoreError(f"cannot be read ({exc.strerror or exc})", location=self.location) from None
        if stat.S_ISREG(st.st_mode) and st.st_size == 0:
            raise StoreMissing("is an empty file: nothing was recorded", location=self.location)
        why = _not_sqlite(path, st)
        if why:
            raise StoreError(f"{why}, not a crosscheck state store", location=self.location)
        problem = _peek(path)
        if problem:
            raise StoreError(problem, location=self.location)
        conn = None
        # No -wal (and no rollback journal): no writer has the store open and every commit is
        # in the main file. mode=ro would create -wal and -shm beside it and leave them (the
        # reader's files, under the reader's name); immutable=1 reads the file and creates
        # nothing. A writer that starts meanwhile writes to a -wal of its own, not this file.
        quiet = not any(os.path.lexists(f"{path}{s}") for s in ("-wal", "-journal"))
        try:
            try:
                conn = self._connect(_uri(path, "ro", immutable=quiet), uri=True)
                with _garbled_is_corrupt():
                    _tables(conn)
            except sqlite3.OperationalError:
                if not _on_readonly_fs(path):
                    raise
                if conn is not None:
                    conn.close()
                conn = self._connect(_uri(path, "ro", immutable=True), uri=True)
                wal = Path(f"{path}-wal")
                if wal.exists() and wal.stat().st_size > 0:
                    warn(
                        f"{path} is on a read-only filesystem and its {wal.name} cannot be read without "
                        "its -shm file: the latest entries may be missing"
                    )
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            raise StoreError(f"cannot be read ({exc})", location=self.location) from None
        self._conn, self._ino = conn, st.st_ino

    def _adopt(self, conn: sqlite3.Connection, *, empty: bool, ino: int) -> str | None:
        """Create our schema in an empty file; say what is wrong with a file that is not ours."""
        tables = _tables(conn)
        if not tables and empty:
            # The schema is created in one transaction, before WAL mode: a file another process
            # is creating is either empty or holds our tables, never a bare SQLite header (which
            # would read as someone else's). BEGIN IMMEDIATE: one creator at a time.
            with _write(conn):
                if not _tables(conn):
                    for statement in SCHEMA:
                        conn.execute(statement)
            tables = _tables(conn)
        problem = _whose(conn, tables)
        if problem:
            return problem
        self._ours = ino
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        # Every statement is IF NOT EXISTS: a version-1 file gains the tables added since.
        if not tables >= _REQUIRED:
            with _write(conn):
                for statement in SCHEMA:
                    conn.execute(statement)
        return None

    def _in_memory(self) -> None:
        conn = self._connect(":memory:")
        for statement in SCHEMA:
            conn.execute(statement)
        self._conn, self._ino = conn, None

    def _fall_back(self, why: str) -> None:
        warn(
            f"{self.location} {why}: memory, leases and announcements are kept in this process only "
            "(set CROSSCHECK_STATE to another path to keep them)"
        )
        self._fallback = True
        self._in_memory()

    def _set_aside(self, ino: int, exc: sqlite3.Error) -> bool:
        """Rename a corrupt store of ours (and its -wal/-shm) aside, unless another process
        already did. Only a file whose crosscheck_meta this process read (``self._ours``) is
        ever renamed. False when it cannot be done (the caller falls back to memory)."""
        assert self._path is not None
        if ino != self._ours:
            return False
        path = self._path
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}")
        try:
            with open(path.with_name(path.name + ".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one renamer; the others see the new inode
                try:
                    if os.stat(path).st_ino != ino:
                        return True
                except FileNotFoundError:
                    return True
                for suffix in ("", "-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        except OSError:
            return False
        warn(f"{path}, a crosscheck store, is corrupt ({exc}): set aside as {aside.name}, starting fresh")
        return True

    def _follow(self) -> None:
        """Reopen when the file at the path is no longer the one we have open (another process
        set it aside, or someone removed it)."""
        if self._fallback or self._path is None or self._readonly:
            return  # a reader reads what it opened; it never creates a store in its place
        try:
            ino = os.stat(self._path).st_ino
        except OSError:
            ino = None
        if ino != self._ino:
            self._close_conn()
            self._open()

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._conn is None:
                raise StoreError("the store is closed", location=self.location)
            self._follow()
            assert self._conn is not None
            try:
                with _garbled_is_corrupt():
                    return fn(self._conn)
            except sqlite3.DatabaseError as exc:
                if not _corrupt(exc) or self._fallback or self._ino is None:
                    raise StoreError(str(exc), location=self.location) from exc
                ino = self._ino
                self._close_conn()
                if not self._set_aside(ino, exc):
                    self._fall_back(f"is corrupt ({exc}) and cannot be set aside")
                else:
                    self._open(retried=True)
            assert self._conn is not None
            try:
                return fn(self._conn)  # once more, on the fresh store
            except sqlite3.DatabaseError as exc:
                raise StoreError(str(exc), location=self.location) from exc

    def _close_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    # -- the Store protocol ---------------------------------------------------------------

    def load(self, key: StageKey) -> Stored | None:
        try:
            row = self._call(
                lambda c: c.execute(
                    "SELECT memory, fingerprint, verdict, saved_at, version, seal FROM crosscheck_memory"
                    " WHERE stage = ? AND host = ?",
                    (key.stage, key.host),
                ).fetchone()
            )
        except StoreError as exc:
            warn(f"{exc}: the memory of {key.stage}@{key.host} could not be read; starting fresh")
            return None
        return None if row is None else decode_stored(key, row, self.location)

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
    ) -> Lease | None:
        request = SaveRequest(key, memory, fingerprint, verdict, version, changed, renew)
        return self.save_many([request])[0]

    def save_many(self, requests: Sequence[SaveRequest]) -> list[Lease | None]:
        """Each request saved as :meth:`save` saves it, all in one transaction (a watcher
        saves a host's stages after their one probe: one write, not one per stage)."""
        rows = [(r, *_save_row(r)) for r in requests]
        if not rows:
            return []

        def write(c: sqlite3.Connection) -> list[Lease | None]:
            with _write(c):
                return [self._save_in(c, *row) for row in rows]

        try:
            return self._call(write)
        except StoreError as exc:
            for r in requests:
                warn(f"{exc}: the memory of {r.key.stage}@{r.key.host} was not saved")
            return [None] * len(requests)

    def _save_in(
        self, c: sqlite3.Connection, r: SaveRequest, fp: str, vd: str, now: float, state: str, digest: str
    ) -> Lease | None:
        key = r.key
        lease = _acquire_in(c, key, *r.renew) if r.renew is not None else None
        if lease is not None and not lease.held:
            # A save that rode on a lease renewal another watcher refused (this one was frozen
            # past its lease, and the stage is that watcher's now): its memory and its news are
            # not written over the holder's.
            return lease
        c.execute(
            "INSERT INTO crosscheck_memory VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stage, host)"
            " DO UPDATE SET memory = excluded.memory, fingerprint = excluded.fingerprint,"
            " verdict = excluded.verdict, saved_at = excluded.saved_at, version = excluded.version,"
            " seal = excluded.seal",
            (key.stage, key.host, r.memory, fp, vd, now, r.version, digest),
        )
        if not r.changed:
            return lease
        (seq,) = c.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM crosscheck_history WHERE stage = ? AND host = ?",
            (key.stage, key.host),
        ).fetchone()
        c.execute(
            "INSERT INTO crosscheck_history (stage, host, seq, at, state, verdict, seal)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                key.stage,
                key.host,
                seq,
                now,
                state,
                vd,
                history_seal(key.stage, key.host, seq, now, state, vd),
            ),
        )
        c.execute(
            "DELETE FROM crosscheck_history WHERE stage = ? AND host = ? AND seq <= ?",
            (key.stage, key.host, seq - self._retention),
        )
        return lease

    def acquire(self, key: StageKey, holder: str, ttl: float) -> Lease:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")

        def go(c: sqlite3.Connection) -> Lease:
            with _write(c):
                return _acquire_in(c, key, holder, ttl)

        return self._call(go)

    def renew_leases(self, holder: str, ttl: float, keys: Sequence[StageKey]) -> set[StageKey]:
        """Renew the leases of ``keys`` that ``holder`` holds, in one transaction (a watcher
        renews its share at every balance: one write, not one per stage); the keys renewed."""
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        wanted = set(keys)
        if not wanted:
            return set()

        def go(c: sqlite3.Connection) -> set[StageKey]:
            with _write(c):
                expires = time.time() + ttl
                c.executemany(
                    "UPDATE crosscheck_lease SET expires_at = ? WHERE stage = ? AND host = ? AND holder = ?",
                    [(expires, k.stage, k.host, holder) for k in wanted],
                )
                # In the same transaction: the rows of ours among the keys are the ones renewed.
                rows = c.execute("SELECT stage, host FROM crosscheck_lease WHERE holder = ?", (holder,))
                return {key for stage, host in rows if (key := StageKey(stage, host)) in wanted}

        return self._call(go)

    def release(self, key: StageKey, holder: str) -> None:
        def go(c: sqlite3.Connection) -> None:
            with _write(c):
                c.execute(
                    "DELETE FROM crosscheck_lease WHERE stage = ? AND host = ? AND holder = ?",
                    (key.stage, key.host, holder),
                )

        self._call(go)

    def announce(self, key: StageKey, run: str, state: str, verdict: Mapping[str, Any]) -> Announcement:
        vd, now = shown(verdict), time.time()

        def go(c: sqlite3.Connection) -> Announcement:
            with _write(c):
                cur = c.execute(
                    "INSERT INTO crosscheck_announce VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (key.stage, key.host, run, state, vd, now, announce_seal(key, run, state, vd, now)),
                )
                if cur.rowcount == 1:
                    return decode_announcement(
                        key,
                        (run, state, vd, now, announce_seal(key, run, state, vd, now)),
                        True,
                        self.location,
                    )
                row = c.execute(
                    "SELECT run, state, verdict, decided_at, seal FROM crosscheck_announce"
                    " WHERE stage = ? AND host = ? AND run = ? AND state = ?",
                    (key.stage, key.host, run, state),
                ).fetchone()
            return decode_announcement(key, row, False, self.location)

        return self._call(go)

    def announced(self, key: StageKey, run: str) -> Announcement | None:
        row = self._call(
            lambda c: c.execute(
                "SELECT run, state, verdict, decided_at, seal FROM crosscheck_announce"
                " WHERE stage = ? AND host = ? AND run = ? ORDER BY decided_at, state LIMIT 1",
                (key.stage, key.host, run),
            ).fetchone()
        )
        return None if row is None else decode_announcement(key, row, False, self.location)

    def history(self, stage: str, host: str | None = None, *, limit: int | None = None) -> list[HistoryEntry]:
        cols = "SELECT stage, host, seq, at, state, verdict, seal FROM crosscheck_history"
        args: tuple[str | int, ...]
        if host is None:
            sql, args = (
                f"{cols} WHERE stage = ? ORDER BY id DESC LIMIT ?",
                (stage, -1 if limit is None else limit),
            )
        else:
            sql = f"{cols} WHERE stage = ? AND host = ? ORDER BY seq DESC LIMIT ?"
            args = (stage, host, -1 if limit is None else limit)
        try:
            rows = self._call(lambda c: c.execute(sql, args).fetchall())
        except StoreError as exc:
            if self._readonly:
                raise  # a reader asked for the history: unreadable is not "none"
            warn(f"{exc}: the history of {stage} could not be read")
            return []
        rows.reverse()
        return decode_history(rows, self.location)

    _HANDOFF_COLS = f"SELECT {', '.join(HANDOFF_COLUMNS)} FROM crosscheck_handoff"

    def hand_off(self, handoff: Handoff) -> Handoff:
        row = handoff_row(handoff)

        def go(c: sqlite3.Connection) -> list[tuple[Any, ...]]:
            with _write(c):
                c.execute(
                    "INSERT INTO crosscheck_handoff VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL)"
                    " ON CONFLICT (ticket) DO NOTHING",
                    row,
                )
                return c.execute(f"{self._HANDOFF_COLS} WHERE ticket = ?", (handoff.ticket,)).fetchall()

        stored = decode_handoffs(self._call(go), self.location)
        if not stored:
            raise StoreError(f"the handoff {handoff.ticket} is unusable", location=self.location)
        return stored[0]

    def handoffs(self) -> list[Handoff]:
        rows = self._call(lambda c: c.execute(f"{self._HANDOFF_COLS} ORDER BY created_at").fetchall())
        return decode_handoffs(rows, self.location)

    def handoff(self, ticket: str) -> Handoff | None:
        rows = self._call(lambda c: c.execute(f"{self._HANDOFF_COLS} WHERE ticket = ?", (ticket,)).fetchall())
        found = decode_handoffs(rows, self.location)
        return found[0] if found else None

    def record_outcome(self, ticket: str, outcome: Mapping[str, Any], *, replace: bool = False) -> bool:
        doc = shown(outcome)
        only_new = "" if replace else " AND outcome IS NULL"

        def go(c: sqlite3.Connection) -> bool:
            with _write(c):
                cur = c.execute(
                    "UPDATE crosscheck_handoff SET outcome = ?, outcome_seal = ? WHERE ticket = ?" + only_new,
                    (doc, outcome_seal(ticket, doc), ticket),
                )
                return cur.rowcount == 1

        return self._call(go)

    def drop_handoff(self, ticket: str) -> None:
        def go(c: sqlite3.Connection) -> None:
            with _write(c):
                c.execute("DELETE FROM crosscheck_handoff WHERE ticket = ?", (ticket,))

        self._call(go)

    def heartbeat_watcher(self, holder: str, ttl: float, about: str = "") -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")

        def go(c: sqlite3.Connection) -> None:
            with _write(c):
                c.execute(
                    "INSERT INTO crosscheck_watcher VALUES (?, ?, ?) ON CONFLICT (holder)"
                    " DO UPDATE SET about = excluded.about, expires_at = excluded.expires_at",
                    (holder, about, time.time() + ttl),
                )

        self._call(go)

    def live_watchers(self) -> list[str]:
        rows = self._call(
            lambda c: c.execute(
                "SELECT holder FROM crosscheck_watcher WHERE expires_at > ? ORDER BY holder", (time.time(),)
            ).fetchall()
        )
        return [str(r[0]) for r in rows]

    def drop_watcher(self, holder: str) -> None:
        def go(c: sqlite3.Connection) -> None:
            with _write(c):
                c.execute("DELETE FROM crosscheck_watcher WHERE holder = ?", (holder,))

        self._call(go)

    def close(self) -> None:
        with self._lock:
            self._close_conn()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.location!r}{', in-process fallback' if self._fallback else ''})"


def _private_dirs(directory: Path) -> None:
    """``directory`` and the directories above it that are not there yet, each 0700
    (``mkdir(parents=True)`` gives the ones above the umask's mode: 0775 under umask 002,
    which the trust check then refuses as writable by the group)."""
    missing = []
    at = directory
    while not at.exists():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(made, 0o700)  # whatever the umask
