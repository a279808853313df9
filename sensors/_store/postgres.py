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
- save: the memory upsert takes the row lock of (stage, host) first, so two saves of one
  stage serialise and the history sequence (max + 1, index lookup) cannot collide.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from sensors._store.base import (
    APP,
    SCHEMA_VERSION,
    Announcement,
    Handoff,
    HistoryEntry,
    Lease,
    StageKey,
    Stored,
    StoreError,
    announce_seal,
    check_save_args,
    decode_announcement,
    decode_handoffs,
    decode_history,
    decode_stored,
    dumps,
    handoff_row,
    history_seal,
    memory_seal,
    outcome_seal,
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
# Stages handed over by gates: a table more in schema 1 (create_all adds it to older stores;
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
_HANDOFF = sa.select(
    *(
        handoff_t.c[n]
        for n in (
            "ticket",
            "stage",
            "host",
            "request",
            "deadline",
            "created_at",
            "seal",
            "outcome",
            "outcome_seal",
        )
    )
)

# Built once, with bound parameters: constructing a statement costs about as much as the
# round trip that runs it.
_LOAD = sa.select(
    *(memory_t.c[n] for n in ("memory", "fingerprint", "verdict", "saved_at", "version", "seal"))
).where(memory_t.c.stage == sa.bindparam("stage"), memory_t.c.host == sa.bindparam("host"))
_up = pg_insert(memory_t).values({c.name: sa.bindparam(c.name) for c in memory_t.c})
_UPSERT = _up.on_conflict_do_update(
    index_elements=["stage", "host"],
    set_={c.name: _up.excluded[c.name] for c in memory_t.c if c.name not in ("stage", "host")},
)
_SERVER_NOW = sa.cast(sa.func.extract("epoch", sa.func.clock_timestamp()), sa.Double)
_ANNOUNCE_COLS = (
    announce_t.c.run,
    announce_t.c.state,
    announce_t.c.verdict,
    announce_t.c.decided_at,
    announce_t.c.seal,
)


def adopt(engine: sa.Engine) -> str | None:
    """Create our tables if missing; say what is wrong with a database whose
    ``crosscheck_meta`` is not ours or is newer. Raises SQLAlchemy's errors for the rest."""
    with engine.begin() as conn:
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(SCHEMA_LOCK)))
        ours = {t for t in sa.inspect(conn).get_table_names() if t in md.tables}
        if ours and "crosscheck_meta" not in ours:
            return f"has tables named like crosscheck's ({', '.join(sorted(ours))}) but no crosscheck_meta"
        if ours:
            try:
                with conn.begin_nested():
                    rows = {k: v for k, v in conn.execute(sa.select(meta.c.key, meta.c.value))}
                version = int(rows.get("schema_version", ""))
            except (sa.exc.ProgrammingError, ValueError, TypeError):
                return "has a crosscheck_meta table that crosscheck did not write"
            if rows.get("app") != APP:
                return "has a crosscheck_meta table that crosscheck did not write"
            if version > SCHEMA_VERSION:
                return (
                    f"was written by a newer crosscheck (schema version {version}; this one reads "
                    f"{SCHEMA_VERSION}); it is left untouched"
                )
        md.create_all(conn, checkfirst=True)
        conn.execute(
            pg_insert(meta)
            .values([{"key": "app", "value": APP}, {"key": "schema_version", "value": str(SCHEMA_VERSION)}])
            .on_conflict_do_nothing()
        )
    return None


class PostgresStore:
    """A store in a PostgreSQL database (``url``: a SQLAlchemy URL, driver psycopg)."""

    def __init__(self, url: sa.URL, *, retention: int) -> None:
        self.location = url.render_as_string(hide_password=True)
        self._retention = retention
        # Round trips are the cost (bench/store.py): no pre-ping (a connection the server
        # dropped is retried once instead, SQLAlchemy's "optimistic" disconnect handling), and
        # synchronous_commit off for the session: memory and leases are re-derived by the next
        # check, so a server crash may lose the last writes (never corrupt them) and no fsync
        # is waited for. announce() turns it back on: exactly-once must survive a crash.
        self.engine = sa.create_engine(
            url,
            pool_size=2,
            connect_args={"connect_timeout": 10, "options": "-c synchronous_commit=off"},
        )
        try:
            self.problem = adopt(self.engine)
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
                        return fn(conn.execution_options(isolation_level="AUTOCOMMIT"))
                    with conn.begin():
                        return fn(conn)
            except sa.exc.DBAPIError as exc:
                if attempt == 1 and exc.connection_invalidated:
                    continue  # the server dropped a pooled connection (restart): once more
                raise StoreError(_why(exc), location=self.location) from exc
            except sa.exc.SQLAlchemyError as exc:
                raise StoreError(_why(exc), location=self.location) from exc
        raise AssertionError("unreachable")

    def load(self, key: StageKey) -> Stored | None:
        params = {"stage": key.stage, "host": key.host}
        try:
            row = self._call(lambda c: c.execute(_LOAD, params).first(), single=True)
        except StoreError as exc:
            warn(f"{exc}: the memory of {key.stage}@{key.host} could not be read; starting fresh")
            return None
        return None if row is None else decode_stored(key, tuple(row), self.location)

    def save(
        self,
        key: StageKey,
        *,
        memory: str,
        fingerprint: Mapping[str, str],
        verdict: Mapping[str, Any],
        version: int,
        changed: bool,
    ) -> None:
        check_save_args(memory, fingerprint, verdict, version)
        fp, vd, now, state = dumps(dict(fingerprint)), dumps(dict(verdict)), time.time(), state_of(verdict)
        params = {
            "stage": key.stage,
            "host": key.host,
            "memory": memory,
            "fingerprint": fp,
            "verdict": vd,
            "saved_at": now,
            "version": version,
            "seal": memory_seal(key, memory, fp, vd, now, version),
        }
        this = (history_t.c.stage == key.stage, history_t.c.host == key.host)

        def write(c: sa.Connection) -> None:
            c.execute(_UPSERT, params)
            if not changed:
                return
            seq = c.execute(
                sa.select(sa.func.coalesce(sa.func.max(history_t.c.seq), 0) + 1).where(*this)
            ).scalar_one()
            c.execute(
                history_t.insert().values(
                    stage=key.stage,
                    host=key.host,
                    seq=seq,
                    at=now,
                    state=state,
                    verdict=vd,
                    seal=history_seal(key.stage, key.host, seq, now, state, vd),
                )
            )
            c.execute(history_t.delete().where(*this, history_t.c.seq <= seq - self._retention))

        try:
            self._call(write, single=not changed)  # unchanged: the upsert alone
        except StoreError as exc:
            warn(f"{exc}: the memory of {key.stage}@{key.host} was not saved")

    def acquire(self, key: StageKey, holder: str, ttl: float) -> Lease:
        if not ttl > 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        stmt = pg_insert(lease_t).values(
            stage=key.stage, host=key.host, holder=holder, expires_at=_SERVER_NOW + ttl
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["stage", "host"],
            set_={"holder": stmt.excluded.holder, "expires_at": stmt.excluded.expires_at},
            where=(lease_t.c.holder == holder) | (lease_t.c.expires_at <= _SERVER_NOW),
        ).returning(lease_t.c.holder, lease_t.c.expires_at)
        held_by = sa.select(lease_t.c.holder, lease_t.c.expires_at).where(
            lease_t.c.stage == key.stage, lease_t.c.host == key.host
        )

        def go(c: sa.Connection) -> Lease:
            for _ in range(3):
                row = c.execute(stmt).first()
                if row is not None:
                    return Lease(held=True, holder=row.holder, expires_at=row.expires_at)
                row = c.execute(held_by).first()  # who refused us, unless released since
                if row is not None:
                    return Lease(held=row.holder == holder, holder=row.holder, expires_at=row.expires_at)
            return Lease(held=False, holder="", expires_at=0.0)  # contended beyond reason

        return self._call(go, single=True)  # the upsert decides; the read only says who won

    def release(self, key: StageKey, holder: str) -> None:
        stmt = lease_t.delete().where(
            lease_t.c.stage == key.stage, lease_t.c.host == key.host, lease_t.c.holder == holder
        )
        self._call(lambda c: c.execute(stmt), single=True)

    def announce(self, key: StageKey, run: str, state: str, verdict: Mapping[str, Any]) -> Announcement:
        vd, now = dumps(dict(verdict)), time.time()
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
            warn(f"{exc}: the history of {stage} could not be read")
            return []
        rows.reverse()
        return decode_history(rows, self.location)

    def hand_over(self, handoff: Handoff) -> Handoff:
        names = ("ticket", "stage", "host", "request", "deadline", "created_at", "seal")
        stmt = (
            pg_insert(handoff_t)
            .values(dict(zip(names, handoff_row(handoff), strict=True)))
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

    def settle(self, ticket: str, outcome: Mapping[str, Any]) -> bool:
        doc = dumps(dict(outcome))
        stmt = (
            handoff_t.update()
            .where(handoff_t.c.ticket == ticket, handoff_t.c.outcome.is_(None))
            .values(outcome=doc, outcome_seal=outcome_seal(ticket, doc))
        )

        def go(c: sa.Connection) -> bool:
            c.execute(sa.text("SET LOCAL synchronous_commit = on"))
            return c.execute(stmt).rowcount == 1

        return self._call(go)

    def drop_handoff(self, ticket: str) -> None:
        stmt = handoff_t.delete().where(handoff_t.c.ticket == ticket)
        self._call(lambda c: c.execute(stmt), single=True)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r})"


def _why(exc: sa.exc.SQLAlchemyError) -> str:
    """The driver's first line, without SQLAlchemy's statement dump and background link."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
