"""``crosscheck serve DIR``: one long-lived watcher for every stage file in a directory.

Stage files are picked up as they are added, changed or removed (the directory is scanned
every few seconds); a file that does not load is logged once and skipped, the others go on.
Every stage is checked at its own interval by the scheduler of ``sensors._schedule`` (a
bounded pool; the stages due on one host share one probe), its memory kept in the state store,
so a restart loses nothing, and several watchers on one PostgreSQL store share the stages
(whoever holds a stage's lease checks it; the others follow). A stage that reached complete
or failed is looked at ten times less often, so a new run of its job is still noticed.
SIGTERM (or SIGINT) ends it cleanly: the checks in flight finish, leases are released.

``--metrics-port`` serves ``/metrics`` (Prometheus: per-stage verdict, seconds since the last
check, check duration, host errors, stages held) and ``/healthz``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from sensors._batch import check_batch
from sensors._check import Checker
from sensors._config import Stage, load_stage
from sensors._errors import CrosscheckError
from sensors._hosts import Host
from sensors._model import State, Verdict

log = logging.getLogger("crosscheck.serve")

#: A finished stage is looked at this many times less often (a new run is still noticed).
FINISHED_SLOWDOWN = 10.0


@dataclass
class _Entry:
    path: Path
    mtime: float
    stage: Stage
    checker: Checker
    notifier: Callable[[Verdict], Any] | None
    due: float = 0.0
    running: bool = False
    last: Verdict | None = None
    checked_at: float | None = None


@dataclass
class Watcher:
    """Watches every ``*.yaml``/``*.yml`` stage file in ``directory`` until ``stop`` is set."""

    directory: Path
    store: Any = None
    rescan_every: float = 5.0
    workers: int = 16
    per_host: int = 4
    emit: Callable[[Verdict], None] = field(default=lambda verdict: None)
    metrics: Any = None
    entries: dict[Path, _Entry] = field(default_factory=dict)
    _bad: dict[Path, float] = field(default_factory=dict)

    def run(self, stop: threading.Event) -> None:
        running: dict[Future[list[Verdict]], tuple[list[_Entry], float]] = {}
        next_scan = 0.0
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_scan:
                    self.rescan()
                    next_scan = now + self.rescan_every
                self._submit(pool, running, now)
                timeout = max(0.05, min(self._next_due(now), next_scan - now, 1.0))
                if not running:
                    stop.wait(timeout)
                    continue
                finished, _ = wait(list(running), timeout=timeout, return_when=FIRST_COMPLETED)
                for fut in finished:
                    self._finished(*running.pop(fut), fut)
            for fut in wait(list(running)).done:
                self._finished(*running.pop(fut), fut)
        for entry in self.entries.values():
            entry.checker.close()

    # ------------------------------------------------------------------ stage files

    def rescan(self) -> None:
        """Add new and changed stage files, drop removed ones; a bad file is logged, skipped."""
        files = {p for p in self.directory.glob("*.y*ml") if p.suffix in (".yaml", ".yml") and p.is_file()}
        for path in set(self.entries) - files:
            log.info("%s: stage file removed: no longer watched", path.name)
            self.entries.pop(path).checker.close()
        for path in sorted(files):
            mtime = path.stat().st_mtime
            known = self.entries.get(path)
            if (known and known.mtime == mtime) or self._bad.get(path) == mtime:
                continue
            try:
                stage = load_stage(path)
            except CrosscheckError as exc:
                log.error("%s: skipped: %s", path.name, exc)
                self._bad[path] = mtime
                continue
            self._bad.pop(path, None)
            if known is not None:
                if known.running:
                    continue  # taken at the next scan, once its check is back
                known.checker.close()
            checker = Checker(stage, state=self.store)
            self.entries[path] = _Entry(path, mtime, stage, checker, _notifier(stage))
            log.info("%s: watching stage %s on %s", path.name, stage.stage, stage.host_name)

    # ------------------------------------------------------------------ checks

    def _next_due(self, now: float) -> float:
        waiting = [e.due - now for e in self.entries.values() if not e.running]
        return min(waiting, default=1.0)

    def _submit(self, pool: ThreadPoolExecutor, running: dict, now: float) -> None:
        # Keyed by the host object, never its name: two SSH hosts may share a name (one
        # address, two ports) and must not share a probe.
        busy: dict[Host, int] = {}
        for entries, _ in running.values():
            host = entries[0].checker.host
            busy[host] = busy.get(host, 0) + 1
        batches: dict[Host, list[_Entry]] = {}
        for entry in self.entries.values():
            host = entry.checker.host
            if (
                entry.running
                or entry.due > now
                or (host not in batches and busy.get(host, 0) >= self.per_host)
            ):
                continue
            batches.setdefault(host, []).append(entry)
        for entries in batches.values():
            for entry in entries:
                entry.running = True
            running[pool.submit(check_batch, [e.checker for e in entries])] = (entries, now)

    def _finished(self, entries: list[_Entry], began: float, fut: Future[list[Verdict]]) -> None:
        took = time.monotonic() - began
        try:
            verdicts = fut.result()
        except CrosscheckError as exc:  # an unverifiable host key: those stages wait for a person
            log.error("%s: %s", entries[0].checker.host.name, exc)
            for entry in entries:
                entry.running, entry.due = False, time.monotonic() + 60.0
            return
        for entry, verdict in zip(entries, verdicts, strict=True):
            entry.running = False
            interval = entry.stage.policy.interval
            slow = FINISHED_SLOWDOWN if verdict.state in (State.COMPLETE, State.FAILED) else 1.0
            entry.due = began + interval * slow
            if entry.last is None or verdict.state is not entry.last.state:
                log.log(
                    logging.WARNING
                    if verdict.state in (State.STALLED, State.CONTRADICTION)
                    else logging.INFO,
                    "%s: %s — %s",
                    verdict.stage,
                    verdict.state.value,
                    verdict.reasons[0] if verdict.reasons else "",
                )
            entry.last, entry.checked_at = verdict, time.time()
            self.emit(verdict)
            if entry.notifier is not None:
                entry.notifier(verdict)
            if self.metrics is not None:
                self.metrics.observe(entry, verdict, took)


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

    def observe(self, entry: _Entry, verdict: Verdict, took: float) -> None:
        for state in State:
            self.verdict.labels(verdict.stage, verdict.host, state.value).set(
                1 if state is verdict.state else 0
            )
        self.last_check.labels(verdict.stage, verdict.host).set(time.time())
        self.duration.labels(verdict.host).observe(took)
        if any("host_error" in r.evidence for r in verdict.readings.values()):
            self.host_errors.labels(verdict.host).inc()
        entries = list(self.watcher.entries.values())
        self.stages.set(len(entries))
        self.held.set(
            sum(1 for e in entries if e.last and "watched elsewhere" not in (e.last.reasons or ("",))[0])
        )

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


def serve(directory: str, *, store: Any, as_json: bool, metrics_port: int | None, rescan_every: float) -> int:
    """Run the watcher until SIGTERM or SIGINT; exit 0."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
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
    watcher = Watcher(path, store=store, rescan_every=rescan_every, emit=emit)
    server = None
    if metrics_port is not None:
        watcher.metrics = Metrics(watcher)
        server = watcher.metrics.serve(metrics_port)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("watching %s (pid %d)", path, os.getpid())
    try:
        watcher.run(stop)
    finally:
        if server is not None:
            server.shutdown()
    log.info("stopped")
    return 0
