"""The PostgreSQL store: SQLAlchemy Core 2.x over psycopg 3 (imported only when a
``postgresql://`` location is opened).

Tables are prefixed ``crosscheck_`` so the store can share a database with anything else. The
schema is created under a transaction-level advisory lock (two watchers starting at once do
not race on ``CREATE TABLE``). Time for leases is the *server's* clock
(``clock_timestamp()``): watchers on different machines compare expiries against one clock.

- lease: one ``INSERT … ON CONFLICT (stage, host) DO UPDATE … WHERE holder = us OR expired
  RETURNING``: PostgreSQL's row lock decides, no protocol of ours; no row back = held
  elsewhere (then read who holds it).
- announce: ``INSERT … ON CONFLICT DO NOTHING RETURNING`` on the primary key
  (stage, host, run, state): a concurrent insert waits for the other to commit, so exactly one
  caller gets a row back.
- watchers (``crosscheck serve``): a heartbeat upsert with the server clock's expiry; live =
  not expired on that clock.
- save: one statement in autocommit, one round trip, changed or not (a changed save was a
  transaction of five round trips: 13 % of a local check; bench/store.py). See
  :func:`_changed_save` for why a changed save is sound in one statement.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect

from sensors._store.base import (
    APP,
    HANDOFF_COLUMNS,
    HANDOFF_NEW,
    NOT_OUR_META,
    SCHEMA_VERSION,
    Announcement,
    Handoff,
    HistoryEntry,
    Lease,
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
# Any 64-bit constant: the advisory lock that serialises schema creation ("crosscheck" in hex, roughly).
SCHEMA_LOCK = 0x63726F7373636B

md = sa.MetaData()
meta = sa.Table(
    "crosscheck_meta",
    md,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)
memory_t = sa.Table(
    "crosscheck_memory",
    md,
    sa.Column("stage", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("memory", sa.Text, nullable=False),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Column("saved_at", sa.Double, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("seal", sa.Text, nullable=False),
    # The last history seq written for (stage, host): the counter a changed save bumps under
    # the row lock (see _changed_save). Added to version-1 stores by adopt(); not sealed (a
    # wrong value costs a retry, never a collision: the statement checks the history too).
    sa.Column("seq", sa.BigInteger, nullable=False, server_default="0"),
)
history_t = sa.Table(
    "crosscheck_history",
    md,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("stage", sa.Text, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("at", sa.Double, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Column("seal", sa.Text, nullable=False),
    sa.Index("crosscheck_history_key", "stage", "host", "seq"),
    sa.Index("crosscheck_history_stage", "stage", "id"),
)
lease_t = sa.Table(
    "crosscheck_lease",
    md,
    sa.Column("stage", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("expires_at", sa.Double, nullable=False),
)
# The watchers serving this store (crosscheck serve), each until its heartbeat expires on the
# server's clock. Added after version 1 without a version change: create_all adds a missing
# table, and older crosscheck never reads it.
watcher_t = sa.Table(
    "crosscheck_watcher",
    md,
    sa.Column("holder", sa.Text, primary_key=True),
    sa.Column("about", sa.Text, nullable=False, server_default=""),
    sa.Column("expires_at", sa.Double, nullable=False),
)
announce_t = sa.Table(
    "crosscheck_announce",
    md,
    sa.Column("stage", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, primary_key=True),
    sa.Column("run", sa.Text, primary_key=True),
    sa.Column("state", sa.Text, primary_key=True),
    sa.Column("verdict", sa.Text, nullable=False),
    sa.Column("decided_at", sa.Double, nullable=False),
    sa.Column("seal", sa.Text, nullable=False),
)
# Stages handed off by gates: a table more in schema 1 (create_all adds it to older stores;
# older code never looks at it).
handoff_t = sa.Table(
    "crosscheck_handoff",
    md,
    sa.Column("ticket", sa.Text, primary_key=True),
    sa.Column("stage", sa.Text, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("request", sa.Text, nullable=False),
    sa.Column("deadline", sa.Double, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("seal", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("outcome_seal", sa.Text, nullable=True),
)
_HANDOFF = sa.select(*(handoff_t.c[n] for n in HANDOFF_COLUMNS))

# Built once, with bound parameters: constructing a statement costs about as much as the
# round trip that runs it.
_FIELDS = ("memory", "fingerprint", "verdict", "saved_at", "version", "seal")
_LOAD = sa.select(*(memory_t.c[n] for n in (*_FIELDS, "seq"))).where(
    memory_t.c.stage == sa.bindparam("stage"), memory_t.c.host == sa.bindparam("host")
)
#: A save riding on a lease renewal writes only while the lease is the saver's (the renewal
#: runs first in the same pipeline): a watcher frozen past its lease writes nothing over the
#: new holder's memory and history.
_LEASE_HELD = sa.exists().where(
    lease_t.c.stage == sa.bindparam("stage"),
    lease_t.c.host == sa.bindparam("host"),
    lease_t.c.holder == sa.bindparam("holder"),
)


def _upsert(held: bool) -> Any:
    """Unchanged: the memory alone; the counter is left as it is and read back (the next
    changed save's guess). ``held``: only while the lease is the saver's (see _LEASE_HELD)."""
    binds = sa.select(*(sa.bindparam(n, type_=memory_t.c[n].type) for n in ("stage", "host", *_FIELDS)))
    rows = binds.where(_LEASE_HELD) if held else binds
    up = pg_insert(memory_t).from_select(["stage", "host", *_FIELDS], rows)
    return up.on_conflict_do_update(
        index_elements=["stage", "host"], set_={n: up.excluded[n] for n in _FIELDS}
    ).returning(memory_t.c.seq)


_UPSERT, _UPSERT_HELD = _upsert(False), _upsert(True)


def _changed_save(held: bool = False) -> sa.Select[Any]:
    """A changed save as one statement: memory upserted, history row appended, history pruned.

    Why not "max(seq) + 1 from the history" in a CTE behind the row lock: every part of one
    statement reads the snapshot taken when it began, so a save that waited for another's
    row lock would still compute the old max and collide. Only the row the upsert locked is
    read at its newest version (ON CONFLICT DO UPDATE re-reads it after the wait). So the
    sequence is a counter in the memory row itself (``crosscheck_memory.seq``), and the seal
    (computed here, in Python, over the same fields as ever, seq included) needs seq before
    the statement runs: the caller *guesses* it (the counter it last read or wrote, + 1; under
    a lease only one watch saves a stage, so the guess is right but for the first save of a
    process) and the statement writes only when the guess holds:

    - the upsert's ``DO UPDATE … WHERE seq <= :prev`` is evaluated on the locked, newest row:
      two saves of one stage serialise on it, the counter only grows (``next`` is above it),
      so once one save moved it to ``next`` another with the same guess writes nothing;
    - it inserts nothing (no new row either) while the history holds a seq ≥ :next — a counter
      behind its history (an older crosscheck's saves, a memory row deleted by hand) is
      caught, not reused;
    - the history insert and the prune read the upsert's ``RETURNING`` (the CTE ``m``): no row
      back, nothing appended or pruned.

    It returns ``written`` (the seq appended, NULL when the guess was wrong) and ``current``
    (the counter or the history's max, whichever is higher: the next guess). A wrong guess
    costs one more round trip, not a wrong row.
    """
    b, h, mc = sa.bindparam, history_t.c, memory_t.c
    this_h = (h.stage == b("stage"), h.host == b("host"))
    values = sa.select(
        *(b(n, type_=memory_t.c[n].type) for n in ("stage", "host", *_FIELDS)), b("next")
    ).where(~sa.exists().where(*this_h, h.seq >= b("next")))
    if held:
        values = values.where(_LEASE_HELD)  # see _LEASE_HELD: nothing written, no row back
    ins = pg_insert(memory_t).from_select(["stage", "host", *_FIELDS, "seq"], values)
    m = (
        ins.on_conflict_do_update(
            index_elements=["stage", "host"],
            set_={**{n: ins.excluded[n] for n in _FIELDS}, "seq": ins.excluded.seq},
            where=mc.seq <= b("prev"),
        )
        .returning(mc.seq)
        .cte("m")
    )
    written = sa.select(m.c.seq).scalar_subquery()
    append = (
        history_t.insert()
        .from_select(
            ["stage", "host", "seq", "at", "state", "verdict", "seal"],
            sa.select(b("stage"), b("host"), m.c.seq, b("saved_at"), b("state"), b("verdict"), b("row_seal")),
        )
        .returning(h.id)
        .cte("h")
    )
    prune = history_t.delete().where(*this_h, h.seq <= written - b("retention")).returning(h.id).cte("d")
    counter = sa.select(mc.seq).where(mc.stage == b("stage"), mc.host == b("host")).scalar_subquery()
    highest = sa.select(sa.func.max(h.seq)).where(*this_h).scalar_subquery()
    return sa.select(written.label("written"), sa.func.greatest(counter, highest).label("current")).add_cte(
        append, prune
    )


@dataclass(frozen=True)
class _Sql:
    """A statement compiled once for psycopg: its text, and the values of its literals."""

    text: str
    defaults: Mapping[str, Any]

    @classmethod
    def of(cls, stmt: sa.ClauseElement) -> _Sql:
        # SQLAlchemy leaves the dialect's __init__ unannotated: an untyped call to mypy.
        compiled = stmt.compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
        return cls(str(compiled), {k: v for k, v in compiled.params.items() if v is not None})


_CHANGED, _CHANGED_HELD = _changed_save(), _changed_save(held=True)
#: A wrong guess is retried with the seq the statement saw; only two savers of one stage
#: racing (which the lease prevents) can make a second guess wrong too.
_SAVE_ATTEMPTS = 5
_SERVER_NOW = sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Double)
_lease_key = (lease_t.c.stage == sa.bindparam("stage"), lease_t.c.host == sa.bindparam("host"))
_take = pg_insert(lease_t).values(
    stage=sa.bindparam("stage"),
    host=sa.bindparam("host"),
    holder=sa.bindparam("holder"),
    expires_at=_SERVER_NOW + sa.bindparam("ttl", type_=sa.Double),
)
_ACQUIRE = _take.on_conflict_do_update(
    index_elements=["stage", "host"],
    set_={"holder": _take.excluded.holder, "expires_at": _take.excluded.expires_at},
    where=(lease_t.c.holder == sa.bindparam("holder")) | (lease_t.c.expires_at <= _SERVER_NOW),
).returning(lease_t.c.holder, lease_t.c.expires_at)
_HELD_BY = sa.select(lease_t.c.holder, lease_t.c.expires_at).where(*_lease_key)
_RELEASE = lease_t.delete().where(*_lease_key, lease_t.c.holder == sa.bindparam("holder"))
_beat = pg_insert(watcher_t).values(
    holder=sa.bindparam("holder"),
    about=sa.bindparam("about"),
    expires_at=_SERVER_NOW + sa.bindparam("ttl", type_=sa.Double),
)
_HEARTBEAT = _beat.on_conflict_do_update(
    index_elements=["holder"], set_={"about": _beat.excluded.about, "expires_at": _beat.excluded.expires_at}
)
_LIVE = sa.select(watcher_t.c.holder).where(watcher_t.c.expires_at > _SERVER_NOW).order_by(watcher_t.c.holder)
_DROP = watcher_t.delete().where(watcher_t.c.holder == sa.bindparam("holder"))
# What every check runs (load, save, lease), compiled once: executed on the pooled psycopg
# connection itself, without SQLAlchemy's per-execution work (~0.08 ms a statement here, as
# much as the server's share of an upsert).
_LOAD_SQL, _UPSERT_SQL, _CHANGED_SQL = _Sql.of(_LOAD), _Sql.of(_UPSERT), _Sql.of(_CHANGED)
_UPSERT_HELD_SQL, _CHANGED_HELD_SQL = _Sql.of(_UPSERT_HELD), _Sql.of(_CHANGED_HELD)
_ACQUIRE_SQL, _HELD_BY_SQL, _RELEASE_SQL = _Sql.of(_ACQUIRE), _Sql.of(_HELD_BY), _Sql.of(_RELEASE)
_HEARTBEAT_SQL, _LIVE_SQL, _DROP_SQL = _Sql.of(_HEARTBEAT), _Sql.of(_LIVE), _Sql.of(_DROP)
# A watcher's share renewed in one statement: the keys as two arrays, paired by unnest.
_RENEW_SQL = _Sql(
    "UPDATE crosscheck_lease AS l SET expires_at ="
    " CAST(extract(epoch FROM clock_timestamp()) AS DOUBLE PRECISION) + %(ttl)s"
    " FROM unnest(CAST(%(stages)s AS TEXT[]), CAST(%(hosts)s AS TEXT[])) AS k(stage, host)"
    " WHERE l.stage = k.stage AND l.host = k.host AND l.holder = %(holder)s"
    " RETURNING l.stage, l.host",
    {},
)
_ANNOUNCE_COLS = (
    announce_t.c.run,
    announce_t.c.state,
    announce_t.c.verdict,
    announce_t.c.decided_at,
    announce_t.c.seal,
)


def adopt(engine: sa.Engine, *, readonly: bool = False) -> str | None:
    """Create our tables if missing; say what is wrong with a database whose
    ``crosscheck_meta`` is not ours or is newer. Raises SQLAlchemy's errors for the rest.

    ``readonly``: create nothing (the session is read-only too); a database without our
    tables raises :class:`StoreMissing`."""
    with engine.connect().execution_options(isolation_level="READ COMMITTED") as conn, conn.begin():
        if not readonly:
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK)))
        ours = {t for t in sa.inspect(conn).get_table_names() if t in md.tables}
        if readonly and not ours:
            raise StoreMissing("no crosscheck store in this database: nothing was recorded")
        if ours and "crosscheck_meta" not in ours:
            return f"has tables named like crosscheck's ({', '.join(sorted(ours))}) but no crosscheck_meta"
        if ours:
            try:
                with conn.begin_nested():
                    rows = {k: v for k, v in conn.execute(sa.select(meta.c.key, meta.c.value))}
            except sa.exc.ProgrammingError:
                return NOT_OUR_META
            if (wrong := judge_meta(rows)) is not None:
                return wrong
        if readonly:
            return None
        md.create_all(conn, checkfirst=True)  # additive: a version-1 store gains new tables
        if "crosscheck_memory" in ours and "seq" not in {
            c["name"] for c in sa.inspect(conn).get_columns("crosscheck_memory")
        }:
            # A version-1 store from before the counter: added as 0 (no table rewrite), and a
            # counter behind its history heals at its stage's next changed save (_changed_save).
            # Still version 1: older crosscheck reads and writes it as before.
            conn.execute(
                sa.text(
                    "ALTER TABLE crosscheck_memory ADD COLUMN IF NOT EXISTS seq BIGINT NOT NULL DEFAULT 0"
                )
            )
        conn.execute(
            pg_insert(meta)
            .values([{"key": "app", "value": APP}, {"key": "schema_version", "value": str(SCHEMA_VERSION)}])
            .on_conflict_do_nothing()
        )
    return None


class PostgresStore:
    """A store in a PostgreSQL database (``url``: a SQLAlchemy URL, driver psycopg)."""

    def __init__(self, url: sa.URL, *, retention: int, readonly: bool = False) -> None:
        self.location = url.render_as_string(hide_password=True)
        self._retention = retention
        self._readonly = readonly
        # The history seq last read or written per stage: the next changed save's guess.
        self._seq: dict[StageKey, int] = {}
        # Round trips are the cost (bench/store.py): no pre-ping (a connection the server
        # dropped is retried once instead, SQLAlchemy's "optimistic" disconnect handling), and
        # synchronous_commit off for the session: memory and leases are re-derived by the next
        # check, so a server crash may lose the last writes (never corrupt them) and no fsync
        # is waited for. announce() turns it back on: exactly-once must survive a crash.
        # Autocommit is the engine's default: most calls are one statement, atomic by itself
        # (BEGIN and COMMIT would be two more round trips); a transaction asks for one.
        self.engine = sa.create_engine(
            url,
            pool_size=2,
            isolation_level="AUTOCOMMIT",
            connect_args={
                "connect_timeout": 10,
                # A reader's session refuses every write (crosscheck history creates nothing).
                "options": "-c synchronous_commit=off"
                + (" -c default_transaction_read_only=on" if readonly else ""),
            },
        )
        try:
            self.problem = adopt(self.engine, readonly=readonly)
        except StoreError as exc:
            self.engine.dispose()
            raise type(exc)(str(exc), location=self.location) from None
        except sa.exc.SQLAlchemyError as exc:
            self.engine.dispose()
            raise StoreError(_why(exc), location=self.location) from exc

    def _call(self, fn: Callable[[sa.Connection], T], *, single: bool = False) -> T:
        """Run ``fn`` in one transaction, or, for ``single`` statements (atomic by
        themselves), in autocommit: one round trip instead of three."""
        for attempt in (1, 2):
            try:
                with self.engine.connect() as conn:
                    if single:
                        return fn(conn)
                    with conn.execution_options(isolation_level="READ COMMITTED").begin():
                        return fn(conn)
            except sa.exc.DBAPIError as exc:
                if attempt == 1 and exc.connection_invalidated:
                    continue  # the server dropped a pooled connection (restart): once more
                raise StoreError(_why(exc), location=self.location) from exc
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(_why(exc), location=self.location) from exc
        raise AssertionError("unreachable")

    def _run(self, fn: Callable[[Any], T], *, raw: bool = False) -> T:
        """Run ``fn(execute)`` on one pooled connection, in autocommit; ``execute(sql,
        params)`` runs one compiled statement and returns its rows (``raw``: ``fn(conn)``, the
        psycopg connection itself). A connection the server dropped (a restart) is thrown
        away and ``fn`` tried once more, as in :meth:`_call`."""
        for attempt in (1, 2):
            try:
                pooled = self.engine.raw_connection()
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(_why(exc), location=self.location) from exc
            conn = pooled.driver_connection
            assert isinstance(conn, psycopg.Connection)
            try:
                return fn(conn if raw else functools.partial(_execute, conn))
            except psycopg.Error as exc:
                if conn.broken:
                    pooled.invalidate(exc)
                    if attempt == 1:
                        continue
                raise StoreError(_why(exc), location=self.location) from exc
            finally:
                pooled.close()
        raise AssertionError("unreachable")

    def load(self, key: StageKey) -> Stored | None:
        params = {"stage": key.stage, "host": key.host}
        try:
            rows = self._run(lambda execute: execute(_LOAD_SQL, params))
        except StoreError as exc:
            warn(f"{exc}: the memory of {key.stage}@{key.host} could not be read; starting fresh")
            return None
        if not rows:
            return None
        *fields, seq = rows[0]
        self._seq[key] = int(seq)
        return decode_stored(key, tuple(fields), self.location)

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
        check_save_args(memory, fingerprint, verdict, version)
        fp, vd, now, state = dumps(dict(fingerprint)), shown(verdict), time.time(), state_of(verdict)
        params: dict[str, Any] = {
            "stage": key.stage,
            "host": key.host,
            "memory": memory,
            "fingerprint": fp,
            "verdict": vd,
            "saved_at": now,
            "version": version,
            "seal": memory_seal(key, memory, fp, vd, now, version),
        }

        lease_params = None
        if renew is not None:
            lease_params = {"stage": key.stage, "host": key.host, "holder": renew[0], "ttl": float(renew[1])}

        def with_lease(
            conn: psycopg.Connection[Any], sql: _Sql, held_sql: _Sql, more: Mapping[str, Any]
        ) -> tuple[Any, Lease | None]:
            """The save, and the lease renewal before it in one round trip (pipeline mode:
            both statements are sent before either answer is read); the save writes only
            while the lease is the saver's (``held_sql``)."""
            if lease_params is None:
                return _execute(conn, sql, {**params, **more}), None
            with conn.pipeline():
                took = conn.execute(_ACQUIRE_SQL.text, {**_ACQUIRE_SQL.defaults, **lease_params})
                saved = conn.execute(
                    held_sql.text, {**held_sql.defaults, **params, **more, "holder": lease_params["holder"]}
                )
            rows = took.fetchall()
            lease = (
                Lease(held=True, holder=rows[0][0], expires_at=rows[0][1])
                if rows
                else Lease(held=False, holder="", expires_at=0.0)  # refused: who holds it is read later
            )
            return saved.fetchall(), lease

        def unchanged(conn: psycopg.Connection[Any]) -> Lease | None:
            rows, lease = with_lease(conn, _UPSERT_SQL, _UPSERT_HELD_SQL, {})
            if rows:  # none: the lease is another's, nothing was written
                ((self._seq[key],),) = rows
            return lease

        def changed_save(conn: psycopg.Connection[Any]) -> Lease | None:
            nonlocal lease_params
            prev = self._seq.get(key, 0)
            lease = None
            for _ in range(_SAVE_ATTEMPTS):
                ((written, current),), renewed = with_lease(
                    conn,
                    _CHANGED_SQL,
                    _CHANGED_HELD_SQL,
                    {
                        "prev": prev,
                        "next": prev + 1,
                        "state": state,
                        "retention": self._retention,
                        "row_seal": history_seal(key.stage, key.host, prev + 1, now, state, vd),
                    },
                )
                if renewed is not None and not renewed.held:
                    return renewed  # another's lease: nothing was written, nor is retried
                if renewed is not None:
                    lease, lease_params = renewed, None  # renewed once, whatever the save does
                if written is not None:
                    self._seq[key] = int(written)
                    return lease
                prev = int(current or 0)  # the guess was wrong: nothing was written
            raise StoreError(
                f"{_SAVE_ATTEMPTS} saves of this stage raced with others'", location=self.location
            )

        try:
            return self._run(changed_save if changed else unchanged, raw=True)
        except StoreError as exc:
            warn(f"{exc}: the memory of {key.stage}@{key.host} was not saved")
            return None

    def acquire(self, key: StageKey, holder: str, ttl: float) -> Lease:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        params = {"stage": key.stage, "host": key.host, "holder": holder, "ttl": float(ttl)}

        def go(execute: Callable[..., list[tuple[Any, ...]]]) -> Lease:
            for _ in range(3):
                rows = execute(_ACQUIRE_SQL, params)
                if rows:
                    return Lease(held=True, holder=rows[0][0], expires_at=rows[0][1])
                rows = execute(_HELD_BY_SQL, params)  # who refused us, unless released since
                if rows:
                    return Lease(held=rows[0][0] == holder, holder=rows[0][0], expires_at=rows[0][1])
            return Lease(held=False, holder="", expires_at=0.0)  # contended beyond reason

        return self._run(go)  # the upsert decides; the read only says who won

    def renew_leases(self, holder: str, ttl: float, keys: Sequence[StageKey]) -> set[StageKey]:
        """Renew the leases of ``keys`` that ``holder`` holds, in one statement (a watcher
        renews its share at every balance: one round trip, not one per stage); the keys
        renewed. A lease another watcher took meanwhile is not ours and stays its."""
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        wanted = sorted(set(keys), key=lambda k: (k.stage, k.host))  # one lock order for all
        if not wanted:
            return set()
        params = {
            "holder": holder,
            "ttl": float(ttl),
            "stages": [k.stage for k in wanted],
            "hosts": [k.host for k in wanted],
        }
        rows = self._run(lambda execute: execute(_RENEW_SQL, params))
        return {StageKey(str(stage), str(host)) for stage, host in rows}

    def release(self, key: StageKey, holder: str) -> None:
        self._run(
            lambda execute: execute(_RELEASE_SQL, {"stage": key.stage, "host": key.host, "holder": holder})
        )

    def announce(self, key: StageKey, run: str, state: str, verdict: Mapping[str, Any]) -> Announcement:
        vd, now = shown(verdict), time.time()
        digest = announce_seal(key, run, state, vd, now)
        stmt = (
            pg_insert(announce_t)
            .values(
                stage=key.stage, host=key.host, run=run, state=state, verdict=vd, decided_at=now, seal=digest
            )
            .on_conflict_do_nothing()
            .returning(*_ANNOUNCE_COLS)
        )
        stored = sa.select(*_ANNOUNCE_COLS).where(
            announce_t.c.stage == key.stage,
            announce_t.c.host == key.host,
            announce_t.c.run == run,
            announce_t.c.state == state,
        )

        def go(c: sa.Connection) -> tuple[bool, tuple[Any, ...]]:
            c.execute(sa.text("SET LOCAL synchronous_commit = on"))
            row = c.execute(stmt).first()
            if row is not None:
                return True, tuple(row)
            return False, tuple(c.execute(stored).one())

        first, row = self._call(go)
        # Retried after a dropped connection whose commit had in fact gone through: the row
        # is ours (same seal, same time), so we were first.
        first = first or row[-1] == digest
        return decode_announcement(key, row, first, self.location)

    def announced(self, key: StageKey, run: str) -> Announcement | None:
        query = (
            sa.select(*_ANNOUNCE_COLS)
            .where(announce_t.c.stage == key.stage, announce_t.c.host == key.host, announce_t.c.run == run)
            .order_by(announce_t.c.decided_at, announce_t.c.state)
            .limit(1)
        )
        row = self._call(lambda c: c.execute(query).first(), single=True)
        return None if row is None else decode_announcement(key, tuple(row), False, self.location)

    def history(self, stage: str, host: str | None = None, *, limit: int | None = None) -> list[HistoryEntry]:
        h = history_t.c
        query = sa.select(h.stage, h.host, h.seq, h.at, h.state, h.verdict, h.seal).where(h.stage == stage)
        if host is None:
            query = query.order_by(h.id.desc())
        else:
            query = query.where(h.host == host).order_by(h.seq.desc())
        if limit is not None:
            query = query.limit(limit)
        try:
            rows = [tuple(r) for r in self._call(lambda c: c.execute(query).all(), single=True)]
        except StoreError as exc:
            if self._readonly:
                raise  # a reader asked for the history: unreadable is not "none"
            warn(f"{exc}: the history of {stage} could not be read")
            return []
        rows.reverse()
        return decode_history(rows, self.location)

    def hand_off(self, handoff: Handoff) -> Handoff:
        stmt = (
            pg_insert(handoff_t)
            .values(dict(zip(HANDOFF_NEW, handoff_row(handoff), strict=True)))
            .on_conflict_do_nothing(index_elements=["ticket"])
        )
        query = _HANDOFF.where(handoff_t.c.ticket == handoff.ticket)

        def go(c: sa.Connection) -> list[tuple[Any, ...]]:
            c.execute(sa.text("SET LOCAL synchronous_commit = on"))  # a gate suspends on it
            c.execute(stmt)
            return [tuple(r) for r in c.execute(query).all()]

        stored = decode_handoffs(self._call(go), self.location)
        if not stored:
            raise StoreError(f"the handoff {handoff.ticket} is unusable", location=self.location)
        return stored[0]

    def handoffs(self) -> list[Handoff]:
        query = _HANDOFF.order_by(handoff_t.c.created_at)
        rows = [tuple(r) for r in self._call(lambda c: c.execute(query).all(), single=True)]
        return decode_handoffs(rows, self.location)

    def handoff(self, ticket: str) -> Handoff | None:
        query = _HANDOFF.where(handoff_t.c.ticket == ticket)
        rows = [tuple(r) for r in self._call(lambda c: c.execute(query).all(), single=True)]
        found = decode_handoffs(rows, self.location)
        return found[0] if found else None

    def record_outcome(self, ticket: str, outcome: Mapping[str, Any], *, replace: bool = False) -> bool:
        doc = shown(outcome)
        where = [handoff_t.c.ticket == ticket] + ([] if replace else [handoff_t.c.outcome.is_(None)])
        stmt = handoff_t.update().where(*where).values(outcome=doc, outcome_seal=outcome_seal(ticket, doc))

        def go(c: sa.Connection) -> bool:
            c.execute(sa.text("SET LOCAL synchronous_commit = on"))
            return c.execute(stmt).rowcount == 1

        return self._call(go)

    def drop_handoff(self, ticket: str) -> None:
        stmt = handoff_t.delete().where(handoff_t.c.ticket == ticket)
        self._call(lambda c: c.execute(stmt), single=True)

    def heartbeat_watcher(self, holder: str, ttl: float, about: str = "") -> None:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        params = {"holder": holder, "about": about, "ttl": float(ttl)}
        self._run(lambda execute: execute(_HEARTBEAT_SQL, params))

    def live_watchers(self) -> list[str]:
        return [str(r[0]) for r in self._run(lambda execute: execute(_LIVE_SQL, {}))]

    def drop_watcher(self, holder: str) -> None:
        self._run(lambda execute: execute(_DROP_SQL, {"holder": holder}))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"


def _execute(conn: psycopg.Connection[Any], sql: _Sql, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    cur = conn.execute(sql.text, {**sql.defaults, **params})
    return cur.fetchall() if cur.description is not None else []


def _why(exc: Exception) -> str:
    """The driver's first line, without SQLAlchemy's statement dump and background link."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
