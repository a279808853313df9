"""``crosscheck serve DIR``: one long-lived watcher for every stage file in a directory.

Stage files are picked up as they are added, changed or removed (the directory is scanned
every few seconds); a file that does not load is logged once and skipped, the others go on.
Every stage is checked at its own interval by the scheduler of ``sensors._schedule`` (a
bounded pool; the stages due on one host share one probe), its memory kept in the state store,
so a restart loses nothing. A stage that reached complete or failed is looked at ten times
less often, so a new run of its job is still noticed.

Several watchers on one store split the stages (:meth:`Watcher.balance`): each heartbeats in
the store's watcher registry every cycle and holds at most ``ceil(stages / live watchers)``
leases — renewing its share, releasing the excess, claiming stages nobody holds (or whose
lease expired, or whose holder died on this machine) up to its share. The store's lease upsert
decides a contested claim (a row lock on PostgreSQL). A stage held elsewhere is never probed
here: its stored verdict is followed ("watched elsewhere by ..."). Stages come from sources
(:class:`StageSource`, keyed by a string id; the directory is one).
SIGTERM (or SIGINT) ends it cleanly: the checks in flight finish, leases are released.

``--metrics-port`` serves ``/metrics`` (Prometheus: per-stage verdict, seconds since the last
check, check duration, host errors, stages held, notifications sent and failed) and
``/healthz``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import signal
import socket
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sensors._batch import check_batch
from sensors._check import Checker
from sensors._config import Stage, load_stage
from sensors._errors import CrosscheckError
from sensors._gc import tune_for_watching
from sensors._handoff import RESUMES_GATES, Desk
from sensors._model import State, Verdict
from sensors._persist import Persistence, _is_store, dead_here, holder_id, is_followed
from sensors._run import run_from_record
from sensors._schedule import Scheduler
from sensors._store import Handoff

if TYPE_CHECKING:  # _notify is imported only for stages that notify
    from sensors._notify.delivery import Sent

log = logging.getLogger("crosscheck.serve")

#: A finished stage is looked at this many times less often (a new run is still noticed).
FINISHED_SLOWDOWN = 10.0


@dataclass(frozen=True)
class Found:
    """A stage a source offers: the stage, a token that changes when its definition does, and
    a name for the log."""

    stage: Stage
    version: object
    name: str
    since: str | float | None = None
    run: Any = None  # a launch record (a handed-over stage that crosscheck launched)
    handoff: Handoff | None = None


class StageSource(Protocol):
    """Where a watcher's stages come from: every call, the stages there now, by an id unique
    across the watcher's sources. One that cannot load a stage logs it and leaves it out."""

    def scan(self) -> dict[str, Found]: ...


@dataclass
class DirectorySource:
    """Every ``*.yaml``/``*.yml`` stage file of a directory (not hidden ones); a file is
    loaded again when its mtime changes, and a bad one is logged once per mtime."""

    directory: Path
    _known: dict[str, tuple[float, Found | None]] = field(default_factory=dict)

    def scan(self) -> dict[str, Found]:
        # One directory read and one stat per file (os.scandir), names sorted as text: a
        # directory of 2,500 stage files is scanned every few seconds.
        files: dict[str, float] = {}
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    name = entry.name
                    # A regular file (or a link to one); not a hidden one (an editor's
                    # ".name.yaml" copy is no stage of its own).
                    if name.startswith(".") or not name.endswith((".yaml", ".yml")):
                        continue
                    try:
                        if entry.is_file():
                            files[entry.path] = entry.stat().st_mtime
                    except OSError:
                        continue  # removed since the listing
        except OSError:
            pass  # no directory (yet, or any more): no stage files
        for path in set(self._known) - set(files):
            del self._known[path]
        out: dict[str, Found] = {}
        for path in sorted(files):
            mtime = files[path]
            known = self._known.get(path)
            if known is None or known[0] != mtime:
                file = Path(path)
                try:
                    known = (mtime, Found(load_stage(file), mtime, file.name))
                except CrosscheckError as exc:
                    log.error("%s: skipped: %s", file.name, exc)
                    known = (mtime, None)
                self._known[path] = known
            if known[1] is not None:
                out[f"file:{path}"] = known[1]
        return out


@dataclass
class HandoffSource:
    """The stages gates handed over (:mod:`sensors._handoff`), until each is settled."""

    desk: Desk
    _bad: set[str] = field(default_factory=set)

    def scan(self) -> dict[str, Found]:
        out: dict[str, Found] = {}
        for ticket, handoff in self.desk.scan().items():
            try:
                stage = self.desk.stage(handoff)
            except CrosscheckError as exc:
                if ticket not in self._bad:
                    log.error("handoff %s (stage %s): skipped: %s", ticket, handoff.stage, exc)
                    self._bad.add(ticket)
                continue
            out[f"handoff:{ticket}"] = Found(
                stage,
                ticket,
                f"stage {stage.stage} of flow run {handoff.request.get('flow_run_id')}",
                since=handoff.request.get("since"),
                run=handoff.request.get("run"),
                handoff=handoff,
            )
        return out


@dataclass
class _Entry:
    key: str
    name: str
    version: object
    stage: Stage
    checker: Checker
    notifier: Callable[[Verdict], Any] | None
    last: Verdict | None = None
    checked_at: float | None = None
    handoff: Handoff | None = None  # a stage a gate handed over (not a file)

    @property
    def path(self) -> Path:  # the stage file, for a directory's entries
        return Path(self.key.removeprefix("file:"))


@dataclass
class Watcher:
    """Watches every ``*.yaml``/``*.yml`` stage file in ``directory`` (and the stages of any
    other ``sources``) until ``stop`` is set.

    With a state store that has a watcher registry, the stages are split with the other
    watchers of that store: see :meth:`balance`. ``lease`` is how long this watcher's
    heartbeat and its stages' leases last unrenewed (how soon a dead watcher's stages are
    taken over); None: 30 s, and each stage's own lease rule.
    """

    directory: Path
    store: Any = None
    rescan_every: float = 5.0
    workers: int = 16
    per_host: int = 4
    emit: Callable[[Verdict], None] = field(default=lambda verdict: None)
    metrics: Any = None
    lease: float | None = None
    #: Stages handed over by gates (read from the store), and the Prefect side (events,
    #: resuming gates): both None for a watcher of files only.
    desk: Desk | None = None
    bridge: Any = None
    sources: list[StageSource] = field(default_factory=list)
    entries: dict[str, _Entry] = field(default_factory=dict)
    holder: str = field(default_factory=holder_id)

    def __post_init__(self) -> None:
        self.scheduler = Scheduler(
            workers=self.workers, per_host=self.per_host, batch=self._batch, phased=True
        )
        self._sources: list[StageSource] = [DirectorySource(Path(self.directory)), *self.sources]
        if self.desk is not None:
            self._sources.append(HandoffSource(self.desk))
        self._next_scan = self._next_balance = 0.0
        self._store = self.store if _is_store(self.store) else None
        # The split needs the registry; a store without one (in-process) watches everything.
        self._split = self._store is not None and hasattr(self._store, "live_watchers")

    @property
    def heartbeat_ttl(self) -> float:
        return self.lease if self.lease is not None else 30.0

    def run(self, stop: threading.Event) -> None:
        try:
            self.scheduler.run(stop, on_verdict=self._finished, on_error=self._failed, tick=self._tick)
        finally:
            for key in list(self.entries):
                self._drop(key)
            if self._split:
                try:
                    self._store.drop_watcher(self.holder)
                except Exception:  # its heartbeat expires anyway
                    log.debug("state store: drop_watcher failed", exc_info=True)

    def _tick(self) -> float:
        now = time.monotonic()
        if now >= self._next_scan:
            self.rescan()
            self._next_scan = now + self.rescan_every
        if self._split and now >= self._next_balance:
            self.balance()
            # A fifth of the lease time at most: a check's own renewal (Persistence.hold, due
            # after a quarter) then finds its lease renewed moments ago, and asks nothing.
            self._next_balance = now + min(self.rescan_every, self.heartbeat_ttl / 5)
        return max(0.05, min(self._next_scan, self._next_balance if self._split else self._next_scan) - now)

    # ------------------------------------------------------------------ stages

    def rescan(self) -> None:
        """Add new and changed stages, drop removed ones; a bad stage file is logged, skipped."""
        found: dict[str, Found] = {}
        for source in self._sources:
            found.update(source.scan())
        for key in set(self.entries) - set(found):
            if self.scheduler.running(key):
                continue  # dropped at the next scan, once its check is back
            entry = self.entries[key]
            log.info(
                "%s: %s",
                entry.name,
                "settled or gone" if entry.handoff else "stage file removed: no longer watched",
            )
            self._drop(key)
        for key, item in found.items():
            known = self.entries.get(key)
            if known is not None and known.version == item.version:
                continue
            if known is not None:
                if self.scheduler.running(key):
                    continue  # taken at the next scan, once its check is back
                self._drop(key)
            try:
                checker = Checker(
                    item.stage, state=self.store, since=item.since, run=run_from_record(item.run)
                )
            except CrosscheckError as exc:  # a handed-over `since` that does not parse
                log.error("%s: skipped: %s", item.name, exc)
                continue
            persist = checker.persistence
            if persist is not None:
                persist.holder = self.holder  # one holder: leases are read against the registry
                if self.lease is not None:
                    persist.ttl = self.lease
                persist.take = not self._split
            self.entries[key] = _Entry(
                key, item.name, item.version, item.stage, checker, _notifier(item.stage), handoff=item.handoff
            )
            self.scheduler.add(key, checker)
            self._next_balance = 0.0  # its share is decided at once, not at the next balance
            log.info("%s: watching stage %s on %s", item.name, item.stage.stage, item.stage.host_name)

    def _drop(self, key: str) -> None:
        entry = self.entries.pop(key, None)
        self.scheduler.remove(key)
        if entry is not None:
            entry.checker.close()  # releases its lease
            if self.bridge is not None:
                flow_run_id = entry.handoff.request.get("flow_run_id") if entry.handoff else None
                self.bridge.forget(entry.stage.stage, entry.checker.host.name, flow_run_id)

    # ------------------------------------------------------------------ the split

    def balance(self) -> None:
        """Heartbeat, then hold this watcher's share of the stages: ``ceil(stages / live
        watchers)``. The excess is released (not a stage whose check is in flight: next time);
        stages nobody holds, or whose lease expired, are claimed up to the share. Who gets a
        contested stage is the store's conditional upsert (a row lock on PostgreSQL)."""
        store = self._store
        try:
            store.heartbeat_watcher(
                self.holder, self.heartbeat_ttl, f"{socket.gethostname()} {self.directory}"
            )
            live = set(store.live_watchers())
            for other in live - {self.holder}:
                if dead_here(other):  # a watcher of this machine that died: no wait for expiry
                    store.drop_watcher(other)
                    live.discard(other)
        except Exception as exc:
            log.warning("state store: watcher registry: %s", exc)
            return
        leased = [e for e in self.entries.values() if e.checker.persistence is not None]
        share = math.ceil(len(leased) / max(1, len(live | {self.holder})))
        mine = sorted((e for e in leased if e.checker.persistence.held), key=lambda e: e.key)
        for entry in mine[share:]:
            if not self.scheduler.running(entry.key):
                entry.checker.persistence.release()
                log.info("%s: released to another watcher (share %d)", entry.stage.stage, share)
        kept = self._renew([entry.checker.persistence for entry in mine[:share]])
        # The others in an order of this watcher's own, so watchers that start together try
        # different stages first.
        others = sorted(
            (e for e in leased if not e.checker.persistence.held),
            key=lambda e: hashlib.blake2b(f"{self.holder}{e.key}".encode(), digest_size=8).digest(),
        )
        for entry in others:
            if kept >= share:
                break
            if entry.checker.persistence.claim() is None:
                kept += 1
                log.info("%s: now checked by this watcher", entry.stage.stage)

    def _renew(self, held: list[Persistence]) -> int:
        """Renew the leases of this watcher's share: one store call per lease time, not one
        per stage (2,500 stages renewed every few seconds were 2,500 write transactions); a
        lease the store did not renew is claimed alone (taken back, or found lost). How many
        are held after."""
        by_ttl: dict[float, list[Persistence]] = defaultdict(list)
        for persist in held:
            by_ttl[persist.ttl].append(persist)
        kept = 0
        for ttl, group in by_ttl.items():
            try:
                renewed = self._store.renew_leases(self.holder, ttl, [p.key for p in group])
            except Exception as exc:
                log.warning("state store: renewing leases: %s", exc)
                renewed = set()
            for persist in group:
                if persist.key in renewed:
                    persist.renewed()
                    kept += 1
                else:
                    kept += persist.claim() is None  # lost meanwhile, or not renewable
        return kept

    # ------------------------------------------------------------------ checks

    def _batch(self, checkers: list[Checker]) -> list[Verdict | None]:
        """One probe for the stages this watcher holds; the others follow the stored verdict
        (None when nothing is stored yet: nothing to say, and no probe of someone else's)."""
        out: list[Verdict | None] = [None] * len(checkers)
        probed = []
        for k, checker in enumerate(checkers):
            persist = checker.persistence
            if persist is None or persist.take or persist.held:
                probed.append(k)
            else:
                out[k] = persist.followed(persist.elsewhere or "another watcher")
        if probed:
            for k, verdict in zip(probed, check_batch([checkers[k] for k in probed]), strict=True):
                out[k] = verdict
        return out

    def _failed(self, keys: list[str], exc: Exception) -> float:
        if not isinstance(exc, CrosscheckError):
            raise exc
        # An unverifiable host key: those stages wait for a person.
        log.error("%s: %s", self.entries[keys[0]].checker.host.name if keys[0] in self.entries else "?", exc)
        return time.monotonic() + 60.0

    def _finished(self, key: str, verdict: Verdict, began: float) -> float | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        took = time.monotonic() - began
        interval = entry.stage.policy.interval
        slow = FINISHED_SLOWDOWN if verdict.state in (State.COMPLETE, State.FAILED) else 1.0
        if entry.last is None or verdict.state is not entry.last.state:
            log.log(
                logging.WARNING if verdict.state in (State.STALLED, State.CONTRADICTION) else logging.INFO,
                "%s: %s — %s",
                verdict.stage,
                verdict.state.value,
                verdict.reasons[0] if verdict.reasons else "",
            )
        entry.last, entry.checked_at = verdict, time.time()
        self.emit(verdict)
        sent = entry.notifier(verdict) if entry.notifier is not None else None
        if self.metrics is not None:
            self.metrics.observe(entry, verdict, took, sent or [])
        handoff = entry.handoff
        if self.bridge is not None and not is_followed(verdict):
            self.bridge.observe(
                verdict,
                flow_run_id=handoff.request.get("flow_run_id") if handoff else None,
                announce=entry.checker.announce,
                waiting_for=f"stage {entry.stage.stage} on {entry.stage.host_name}",
            )
        if (
            handoff is not None
            and self.desk is not None
            and not is_followed(verdict)
            and self.desk.after(handoff, verdict, entry.checker.run)
        ):
            self._drop(key)
            return None  # settled: the scheduler lets it go
        return began + interval * slow


def _notifier(stage: Stage) -> Callable[[Verdict], Any] | None:
    from sensors._notify import notifier_for  # imported only for stages that notify

    return notifier_for(stage) if stage.notify is not None else None


# --------------------------------------------------------------------------- metrics


class Metrics:
    """Prometheus metrics of one watcher, and a tiny HTTP server for /metrics and /healthz."""

    def __init__(self, watcher: Watcher) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.watcher = watcher
        self.registry = CollectorRegistry()
        labels = ("stage", "host")
        self.verdict = Gauge(
            "crosscheck_stage_verdict",
            "1 for the stage's current verdict",
            (*labels, "verdict"),
            registry=self.registry,
        )
        self.last_check = Gauge(
            "crosscheck_stage_last_check_timestamp_seconds",
            "when the stage was last checked",
            labels,
            registry=self.registry,
        )
        self.duration = Histogram(
            "crosscheck_check_duration_seconds",
            "one probe round trip (all stages due on a host)",
            ("host",),
            registry=self.registry,
        )
        self.host_errors = Counter(
            "crosscheck_host_errors_total",
            "checks whose host could not be asked",
            ("host",),
            registry=self.registry,
        )
        self.stages = Gauge("crosscheck_stages", "stage files watched", registry=self.registry)
        self.held = Gauge(
            "crosscheck_stages_held", "stages this watcher checks (the others follow)", registry=self.registry
        )
        # Counted when scraped, not at every verdict (each count is over every stage: per
        # verdict, 2,500 stages made 6 million steps a tick).
        self.stages.set_function(lambda: len(self.watcher.entries))
        self.held.set_function(self._held)
        self.sent = Counter(
            "crosscheck_notifications_sent_total",
            "notifications delivered, per stage and channel",
            ("stage", "channel"),
            registry=self.registry,
        )
        self.failed = Counter(
            "crosscheck_notifications_failed_total",
            "notifications a channel did not take (after its retries), per stage and channel",
            ("stage", "channel"),
            registry=self.registry,
        )

    def observe(self, entry: _Entry, verdict: Verdict, took: float, sent: Sequence[Sent] = ()) -> None:
        for state in State:
            self.verdict.labels(verdict.stage, verdict.host, state.value).set(
                1 if state is verdict.state else 0
            )
        self.last_check.labels(verdict.stage, verdict.host).set(time.time())
        self.duration.labels(verdict.host).observe(took)
        if any("host_error" in r.evidence for r in verdict.readings.values()):
            self.host_errors.labels(verdict.host).inc()
        for message in sent:
            for delivery in message.deliveries:
                (self.sent if delivery.ok else self.failed).labels(verdict.stage, delivery.channel).inc()

    def _held(self) -> int:
        entries = list(self.watcher.entries.values())  # a copy: the watcher adds and drops meanwhile
        return sum(1 for e in entries if e.checker.persistence is None or e.checker.persistence.held)

    def serve(self, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    body, kind = generate_latest(metrics.registry), CONTENT_TYPE_LATEST
                elif self.path == "/healthz":
                    body = json.dumps({"ok": True, "stages": len(metrics.watcher.entries)}).encode()
                    kind = "application/json"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # quiet
                pass

        server = ThreadingHTTPServer((host, port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True, name="crosscheck-metrics").start()
        return server


# --------------------------------------------------------------------------- entry point


def serve(
    directory: str,
    *,
    store: Any,
    as_json: bool,
    metrics_port: int | None,
    rescan_every: float,
    lease: float | None = None,
    prefect: bool | None = None,
    heartbeat: float | None = None,
) -> int:
    """Run the watcher until SIGTERM or SIGINT; exit 0.

    ``prefect``: send events and resume gates through the Prefect API (default: when
    ``PREFECT_API_URL`` is set); ``heartbeat``: at most one heartbeat event per stage per
    this many seconds (default 60)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per Prefect API call otherwise
    path = Path(directory)
    if not path.is_dir():
        print(f"crosscheck: {directory}: not a directory", file=sys.stderr)
        return 2
    stop = threading.Event()
    emit = (
        (lambda v: (sys.stdout.write(json.dumps(v.to_json()) + "\n"), sys.stdout.flush()))
        if as_json
        else (lambda v: None)
    )
    bridge = None
    if prefect is None:
        prefect = bool(os.environ.get("PREFECT_API_URL"))
    if prefect:
        from sensors._serve_prefect import PrefectBridge  # the Prefect layer, only when asked

        bridge = PrefectBridge() if heartbeat is None else PrefectBridge.every(heartbeat)
    desk = None
    # A watcher that can resume gates says so in its name: only then do gates hand over to it.
    holder = holder_id() + (RESUMES_GATES if bridge is not None else "")
    if store is not None and hasattr(store, "handoffs"):
        desk = Desk(
            store,
            by=holder,
            resume=bridge.resume if bridge else None,
            over=bridge.over if bridge else None,
            resolve_block=bridge.resolve_block if bridge else None,
        )
    watcher = Watcher(
        path,
        store=store,
        rescan_every=rescan_every,
        emit=emit,
        lease=lease,
        desk=desk,
        bridge=bridge,
        holder=holder,
    )
    server = None
    if metrics_port is not None:
        watcher.metrics = Metrics(watcher)
        server = watcher.metrics.serve(metrics_port)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    tune_for_watching()  # a long-lived process: see sensors._gc
    log.info("watching %s (pid %d, as %s)", path, os.getpid(), watcher.holder)
    try:
        watcher.run(stop)
    finally:
        if server is not None:
            server.shutdown()
    log.info("stopped")
    return 0
