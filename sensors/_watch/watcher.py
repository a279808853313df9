"""``crosscheck serve DIR``: one long-lived watcher for every stage file in a directory.

:class:`Watcher` takes its stages from sources (:class:`StageSource`; the directory is one,
:class:`DirectorySource`, picking files up as they are added, changed or removed), has each
checked at its own interval by the scheduler of :mod:`sensors._watch.schedule`, keeps their
memory in the state store, and splits them with the other watchers on that store by leases
(:meth:`Watcher.balance`; one lease rule, :attr:`Watcher.written_ttl`). Notifications go out
from a thread of their own (:class:`Courier`), ``--json`` lines and the log through spools
(:mod:`sensors._watch.spool`); ``--metrics-port`` serves ``/metrics`` and ``/healthz``. What
it does and why: docs/serve.md (its last section names the parts here).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import math
import os
import queue
import signal
import socket
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sensors._base.errors import ConfigError, CrosscheckError
from sensors._base.model import State, Verdict
from sensors._base.output import on_closed
from sensors._check.batch import check_batch
from sensors._check.checker import Checker
from sensors._check.persist import NotOurs, Persistence, dead_here, holder_id, is_followed, is_store
from sensors._check.span import AnyChecker, SpanChecker, checker_for
from sensors._config.stage import MAX_STAGE_BYTES, Stage, load_stage_bytes
from sensors._run.run import run_from_record
from sensors._store import Handoff, Store
from sensors._watch.gc import tune_for_watching
from sensors._watch.handoff import RESUMES_GATES, Desk, HandoffSeen, watcher_name
from sensors._watch.schedule import Scheduler, begin_span
from sensors._watch.spool import Spool

if TYPE_CHECKING:  # _notify is imported only for stages that notify
    from sensors._notify import Notifier
    from sensors._notify.delivery import Sent

log = logging.getLogger("crosscheck.serve")

#: A finished stage is looked at this many times less often (a new run is still noticed),
#: once it has been finished for that many intervals: a stage that just finished is often
#: run again at once (a fix, a retry), and a re-run shorter than ten intervals begun then came
#: and went between two looks, never seen alive (user s14). Each finish costs at most ten
#: looks more than a slowdown from the first.
FINISHED_SLOWDOWN = 10.0
#: At the end, how long the notifications still waiting may take to be delivered.
DELIVERY_GRACE_S = 10.0


@dataclass(frozen=True)
class Found:
    """A stage a source offers: the stage, a token that changes when its definition does, and
    a name for the log."""

    stage: Stage
    version: object
    name: str
    since: str | float | None = None
    run: Any = None  # a launch record (a handed-off stage that crosscheck launched)
    handoff: Handoff | None = None


class StageSource(Protocol):
    """Where a watcher's stages come from: every call, the stages there now, by an id unique
    across the watcher's sources. One that cannot load a stage logs it and leaves it out."""

    def scan(self) -> dict[str, Found]: ...


#: A file whose time is this close to (or after) the moment it was read may have been
#: written again within the same timestamp tick (whole seconds on ext3, two on FAT, the
#: server's on NFS): it is read again at the next scan, until its time is clearly older.
RACY_S = 2.0
#: Every stage file's content is read at least this often, whatever its times say: some
#: filesystems (object-store FUSE mounts) keep times that never move.
VERIFY_EVERY_S = 60.0


@dataclass
class _File:
    """What a stage file held when last read: its stat signature, the digest of its bytes,
    and the stage it defines (None: it never loaded)."""

    signature: tuple[int, ...]
    digest: bytes
    found: Found | None
    #: Until when an unchanged signature vouches for the content (0: read again next scan).
    trusted_until: float
    gone: int = 0  # consecutive scans that did not list it


@dataclass
class DirectorySource:
    """Every ``*.yaml``/``*.yml`` stage file of a directory (not hidden ones), by stage name.

    A file is its content, not its times: it is read again when its stat signature changes,
    while it is racy (written too close to its last read to trust the signature: ``cp -p``,
    ``rsync -t``, ``touch -r`` and rewrites within the filesystem's time granularity are
    caught), and at least every :data:`VERIFY_EVERY_S`; it is parsed again only when its
    bytes changed, and the watcher compares the *definition* (a comment added, the directory
    swapped for identical files: nothing changes).

    One stage name, one file: a second file naming a watched stage is refused (logged once);
    among files found at once, the first by path. When the file that has it goes, the next
    one is picked up. A file that stops loading keeps its last good definition (logged once
    per content): an editor saving in place must not drop the stage. A file missing from one
    scan is kept until a second scan misses it too, and a directory that cannot be listed
    (missing, renamed for a moment) keeps every stage until it is back: neither is "every
    stage file removed".
    """

    directory: Path
    _files: dict[str, _File] = field(default_factory=dict)
    _owners: dict[str, str] = field(default_factory=dict)  # stage name -> the path that has it
    _refused: dict[str, str] = field(default_factory=dict)  # path -> the stage name refused
    _last: dict[str, Found] = field(default_factory=dict)
    _unlisted: str | None = None  # why the directory could not be listed, while it cannot
    clock: Callable[[], float] = time.time

    def scan(self) -> dict[str, Found]:
        listed = self._list()
        if listed is None:
            return dict(self._last)  # the directory is not there: nothing is known removed
        now = self.clock()
        changed = False
        for path in sorted(set(self._files) - set(listed)):
            known = self._files[path]
            known.gone += 1
            changed = True
            if known.gone >= 2:
                del self._files[path]
                self._refused.pop(path, None)
        for path, st in listed.items():
            changed |= self._read(path, st, now)
        if changed:  # who defines which stage is decided again only when a file changed
            self._last = self._by_name()
        return dict(self._last)

    def _list(self) -> dict[str, os.stat_result] | None:
        """Each visible stage file's stat (one directory read, one stat per file: a directory
        of 2,500 stage files is scanned every few seconds); None when it cannot be listed."""
        files: dict[str, os.stat_result] = {}
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
                            files[entry.path] = entry.stat()
                    except OSError:
                        continue  # removed since the listing
        except OSError as exc:
            why = exc.strerror or str(exc)
            if self._unlisted is None:
                log.warning(
                    "%s: cannot be listed (%s): its %d stages are kept as they are until it is back",
                    self.directory,
                    why,
                    len(self._last),
                )
            self._unlisted = why
            return None
        if self._unlisted is not None:
            log.info("%s: listed again", self.directory)
            self._unlisted = None
        return files

    def _read(self, path: str, st: os.stat_result, now: float) -> bool:
        """Read the file again if its times cannot vouch for it; whether what it offers changed
        (another definition, or it is listed again after a scan that missed it)."""
        signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._files.get(path)
        back = known is not None and known.gone > 0
        if known is not None:
            known.gone = 0
            if known.signature == signature and now < known.trusted_until:
                return back  # unchanged, and its times can be trusted to say so
        # Its times vouch for what is read now only if they are clearly older than this scan
        # (``now`` was taken before any read): a write in the same tick would not move them.
        trusted_until = now + VERIFY_EVERY_S if max(st.st_mtime, st.st_ctime) < now - RACY_S else 0.0
        file = Path(path)
        try:
            with open(file, "rb") as f:
                data = f.read(MAX_STAGE_BYTES + 1)  # not a 10 GB *.yaml into memory
        except OSError as exc:
            if known is None and not isinstance(exc, FileNotFoundError):
                log.error("%s: skipped: cannot read: %s", file.name, exc.strerror or exc)
            return back  # gone since the listing, or unreadable for now: what was known stays
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if known is not None and known.digest == digest:
            known.signature, known.trusted_until = signature, trusted_until
            return back
        found: Found | None
        try:
            found = Found(load_stage_bytes(data, file=str(file)), None, file.name)
            found = replace(found, version=found.stage)  # the definition is the version
        except CrosscheckError as exc:
            if known is not None and known.found is not None:
                why = _problem(exc)
                log.error("%s: not reloaded: %s; its last good definition is still watched", file.name, why)
                found = known.found
            else:
                log.error("%s: skipped: %s", file.name, _problem(exc))
                found = None
        self._files[path] = _File(signature, digest, found, trusted_until)
        return True

    def _by_name(self) -> dict[str, Found]:
        """One file per stage name: the one that has it keeps it while it is listed; else the
        first listed file by path; a file missing from one scan only when no other has it."""
        candidates: dict[str, list[str]] = defaultdict(list)
        for path in sorted(self._files):
            found = self._files[path].found
            if found is not None:
                candidates[found.stage.stage].append(path)
        owners: dict[str, str] = {}
        for name, paths in candidates.items():
            listed = [p for p in paths if not self._files[p].gone]
            owner = self._owners.get(name)
            if owner not in listed:
                owner = (listed or paths)[0]
                if name in self._owners and self._owners[name] != owner:
                    log.info(
                        "%s: now defines stage %s (%s, which did, is gone)",
                        Path(owner).name,
                        name,
                        Path(self._owners[name]).name,
                    )
            owners[name] = owner
            for path in listed:
                if path != owner and self._refused.get(path) != name:
                    log.error(
                        "%s: refused: stage %s is already defined by %s (one file per stage name)",
                        Path(path).name,
                        name,
                        Path(owner).name,
                    )
                    self._refused[path] = name
            if self._refused.get(owner) == name:
                del self._refused[owner]
        self._owners = owners
        return {f"file:{name}": self._files[path].found for name, path in owners.items()}  # type: ignore[misc]


def _problem(exc: CrosscheckError) -> str:
    """What is wrong, without the file name the log line already starts with."""
    if isinstance(exc, ConfigError):
        return ": ".join(p for p in (exc.field, exc.message) if p)
    return str(exc)


@dataclass
class HandoffSource:
    """The stages gates handed off (:mod:`sensors._watch.handoff`), until each is settled."""

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
    checker: AnyChecker
    notifier: Notifier | None
    last: Verdict | None = None
    checked_at: float | None = None
    handoff: Handoff | None = None  # a stage a gate handed off (not a file)
    #: Its file changed or went while a check of it ran: that check is of a definition the
    #: file no longer holds (see ``Watcher._finished``).
    superseded: bool = False
    #: When (monotonic) its verdicts became settled, none unsettled since; None while not.
    settled_at: float | None = None


class GateBridge(Protocol):
    """A watcher's Prefect side (the Prefect layer's
    :class:`~sensors._prefect.bridge.PrefectBridge`): after each check of a stage, its events
    and the waiting gate's artifact; when the stage goes, what it kept of it."""

    def observe(
        self,
        verdict: Verdict,
        *,
        flow_run_id: str | None,
        announce: Callable[[Verdict], bool],
        waiting_for: str = ...,
        watched: HandoffSeen | None = ...,
    ) -> None: ...

    def forget(self, stage: str, host: str, flow_run_id: str | None) -> None: ...


class WatchMetrics(Protocol):
    """What a watcher tells its metrics (:class:`Metrics`): each check, each delivery."""

    def observe(self, entry: _Entry, verdict: Verdict, took: float) -> None: ...

    def delivered(self, stage: str, sent: Sequence[Sent]) -> None: ...


@dataclass
class Watcher:
    """Watches every ``*.yaml``/``*.yml`` stage file in ``directory`` (and the stages of any
    other ``sources``) until ``stop`` is set.

    With a state store that has a watcher registry, the stages are split with the other
    watchers of that store: see :meth:`balance`. ``lease`` (``--lease``, 30 s by default) is
    the one lease rule of a watcher: a dead watcher's stages are claimed by another, and
    checked at once, within ``lease`` of its last renewal, whatever the stages' intervals
    (see :attr:`written_ttl`).
    """

    directory: Path
    store: Store | str | os.PathLike[str] | None = None
    rescan_every: float = 5.0
    workers: int = 16
    per_host: int = 4
    emit: Callable[[Verdict], object] = field(default=lambda verdict: None)
    metrics: WatchMetrics | None = None
    lease: float | None = None
    #: Stages handed off by gates (read from the store), and the Prefect side (events,
    #: resuming gates): both None for a watcher of files only.
    desk: Desk | None = None
    bridge: GateBridge | None = None
    sources: list[StageSource] = field(default_factory=list)
    entries: dict[str, _Entry] = field(default_factory=dict)
    holder: str = field(default_factory=holder_id)

    def __post_init__(self) -> None:
        self.courier = Courier(on_sent=self._delivered)
        self.scheduler = Scheduler(
            workers=self.workers, per_host=self.per_host, batch=self._batch, begin=self._begin, phased=True
        )
        self._sources: list[StageSource] = [DirectorySource(Path(self.directory)), *self.sources]
        if self.desk is not None:
            self._sources.append(HandoffSource(self.desk))
        self._next_scan = self._next_balance = 0.0
        self._store = self.store if is_store(self.store) else None
        # The split needs the registry; a store without one (in-process) watches everything.
        self._split = self._store is not None and hasattr(self._store, "live_watchers")

    @property
    def heartbeat_ttl(self) -> float:
        """``--lease``: how soon a dead watcher's stages are taken over."""
        return self.lease if self.lease is not None else 30.0

    @property
    def cycle(self) -> float:
        """How often this watcher heartbeats, renews its share and looks for stages to claim:
        ``--rescan`` or a fifth of ``--lease``, whichever is shorter."""
        return min(self.rescan_every, self.heartbeat_ttl / 5)

    @property
    def written_ttl(self) -> float:
        """What a heartbeat and a stage lease are written to last: ``--lease`` minus one
        cycle. The others look every cycle, so a dead watcher's stages are claimed at most
        ``--lease`` after its last renewal (a lease of ``--lease`` itself took up to a cycle
        more; a stage's own rule, three intervals, took 46 s at a 15 s interval), and checked
        at once when their check is overdue. A live watcher renews every cycle: its leases
        never have less than 3/5 of ``--lease`` left."""
        return self.heartbeat_ttl - self.cycle

    def _delivered(self, stage: str, sent: Sequence[Sent]) -> None:
        if self.metrics is not None:
            self.metrics.delivered(stage, sent)

    def run(self, stop: threading.Event) -> None:
        try:
            self.scheduler.run(stop, on_verdict=self._finished, on_error=self._failed, tick=self._tick)
        finally:
            undelivered = self.courier.close(timeout=DELIVERY_GRACE_S)
            if undelivered:
                log.warning("%d notifications were not delivered before the watcher stopped", undelivered)
            for key in list(self.entries):
                self._drop(key)
            if self._split:
                assert self._store is not None  # a split watcher has a store (__post_init__)
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
            self._next_balance = now + self.cycle
        return max(0.05, min(self._next_scan, self._next_balance if self._split else self._next_scan) - now)

    # ------------------------------------------------------------------ stages

    def rescan(self) -> None:
        """Add new and changed stages, drop removed ones; a bad stage file is logged, skipped."""
        found: dict[str, Found] = {}
        for source in self._sources:
            found.update(source.scan())
        for key in set(self.entries) - set(found):
            if self.scheduler.running(key):
                self.entries[key].superseded = True
                continue  # dropped at the next scan, once its check is back
            entry = self.entries[key]
            if entry.handoff:
                log.info("%s: settled or gone", entry.name)
            else:
                log.info(
                    "%s: stage %s is in no stage file any more (removed, or renamed to another stage):"
                    " no longer watched",
                    entry.name,
                    entry.stage.stage,
                )
            self._drop(key)
        for key, item in found.items():
            known = self.entries.get(key)
            if known is not None and known.version == item.version:
                # The same definition (a comment added, the file rewritten as it was, renamed,
                # the directory swapped for identical files): the watch goes on untouched —
                # no new Checker, no second notification, no history entry.
                known.name = item.name
                continue
            if known is not None:
                if self.scheduler.running(key):
                    known.superseded = True
                    continue  # taken at the next scan, once its check is back
                log.info("%s: stage %s changed: watched with its new definition", item.name, item.stage.stage)
                self._drop(key)
            try:
                checker = checker_for(
                    item.stage, state=self.store, since=item.since, run=run_from_record(item.run)
                )
            except CrosscheckError as exc:  # a handed-off `since` that does not parse
                log.error("%s: skipped: %s", item.name, exc)
                continue
            # A stage file gives no run start, nor does serve: no advice it shows names one. A
            # gate's handoff does: the gate takes a since and hands it on in its request.
            checker.takes_since = item.handoff is not None
            persist = checker.persistence
            if persist is not None:
                persist.holder = self.holder  # one holder: leases are read against the registry
                persist.ttl = self.written_ttl  # one lease rule: --lease, whatever the interval
                persist.take = not self._split
            notifier = _notifier(item.stage)
            if known is not None and notifier is not None and known.stage.notify == item.stage.notify:
                # The same readers, the same news: what was notified stays notified (a stall
                # already sent is not sent again because expected: changed).
                notifier = known.notifier
            elif notifier is not None:
                # What an earlier watch of this run reached (restored) is not news again: a
                # restarted watcher does not re-announce a settled stage.
                notifier.resume(checker.last)
            self.entries[key] = _Entry(
                key, item.name, item.version, item.stage, checker, notifier, handoff=item.handoff
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
        assert store is not None  # balance runs only split (_tick), and a split has a store
        try:
            store.heartbeat_watcher(self.holder, self.written_ttl, f"{socket.gethostname()} {self.directory}")
            live = set(store.live_watchers())
            for other in live - {self.holder}:
                if dead_here(other):  # a watcher of this machine that died: no wait for expiry
                    store.drop_watcher(other)
                    live.discard(other)
        except Exception as exc:
            log.warning("state store: watcher registry: %s", exc)
            return
        # Each stage kept with its lease (its Persistence), the stages without one left out.
        leased = [(e, p) for e in self.entries.values() if (p := e.checker.persistence) is not None]
        share = math.ceil(len(leased) / max(1, len(live | {self.holder})))
        mine = sorted(((e, p) for e, p in leased if p.held), key=lambda ep: ep[0].key)
        for entry, persist in mine[share:]:
            if not self.scheduler.running(entry.key):
                persist.release()
                log.info("%s: released to another watcher (share %d)", entry.stage.stage, share)
        kept = self._renew([persist for _, persist in mine[:share]])
        # The others in an order of this watcher's own, so watchers that start together try
        # different stages first.
        others = sorted(
            ((e, p) for e, p in leased if not p.held),
            key=lambda ep: hashlib.blake2b(f"{self.holder}{ep[0].key}".encode(), digest_size=8).digest(),
        )
        for entry, persist in others:
            if kept >= share:
                break
            if persist.claim() is None:
                kept += 1
                if _overdue(entry):
                    # Its holder stopped checking it (died, hung): checked now, not at its next
                    # due. One a live watcher released was checked moments ago: it waits.
                    self.scheduler.hurry(entry.key)
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
        store = self._store
        assert store is not None  # called by balance only: a split watcher's, which has a store
        for ttl, group in by_ttl.items():
            try:
                renewed = store.renew_leases(self.holder, ttl, [p.key for p in group])
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
            probe, out[k] = _stored(checker)
            if probe:
                probed.append(k)
        if probed:
            for k, verdict in zip(probed, check_batch([checkers[k] for k in probed]), strict=True):
                out[k] = verdict
        return out

    def _begin(self, span: SpanChecker) -> tuple[bool, Verdict | None]:
        """How a check of a stage over several hosts begins here: as :meth:`_batch` decides
        for a stage of one host (its nodes then probed in their hosts' batches)."""
        probe, verdict = _stored(span)
        return begin_span(span) if probe else (False, verdict)

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
        if entry.superseded:
            # Checked with a definition its file no longer holds (changed or removed while the
            # check ran): what it says is that definition's, neither shown nor announced. The
            # next scan takes the file as it is now. Let go on, not checked again: each check
            # in flight at a scan put the change off, and a stage checked back to back kept
            # its old definition for seconds (fuzzer seed 4600596: complete on 2 outputs of 2,
            # the file asking for 3).
            self._next_scan = time.monotonic()
            return None
        took = time.monotonic() - began
        interval = entry.stage.policy.interval
        # A stuck stage (an unknown that cannot become complete) as a finished one: a new run
        # is still noticed, and 48 hours of checks at the fast cadence are not spent on it.
        if not verdict.settled:
            entry.settled_at = None
        elif entry.settled_at is None:
            entry.settled_at = began
        finished_for = 0.0 if entry.settled_at is None else began - entry.settled_at
        slow = FINISHED_SLOWDOWN if finished_for >= FINISHED_SLOWDOWN * interval else 1.0
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
        if entry.notifier is not None:
            messages = entry.notifier.decide(verdict)
            # News is the holder's: a verdict followed from another watcher keeps this one's
            # notifier in step (so a takeover does not announce what the holder announced)
            # and is never sent from here; nor is a check whose save found the lease lost
            # meanwhile (a watcher that was frozen past its lease: another holds it now).
            if messages and _holds(entry.checker) and not is_followed(verdict):
                self.courier.send(entry.notifier, messages, verdict.stage)
        if self.metrics is not None:
            self.metrics.observe(entry, verdict, took)
        handoff = entry.handoff
        # What this watcher saw of a handed-off stage travels to its gate with the outcome.
        # News (events, a gate's outcome) is the holder's, as notifications are: not from a
        # followed verdict, nor from a check whose save found the lease another's.
        own = not is_followed(verdict) and _holds(entry.checker)
        watched = None
        if handoff is not None and self.desk is not None and own:
            watched = self.desk.saw(handoff, verdict)
        if self.bridge is not None and own:
            self.bridge.observe(
                verdict,
                flow_run_id=handoff.request.get("flow_run_id") if handoff else None,
                announce=entry.checker.announce,
                waiting_for=f"stage {entry.stage.stage} on {entry.stage.host_name}",
                watched=watched,
            )
        if (
            handoff is not None
            and self.desk is not None
            and own
            and self.desk.after(handoff, verdict, entry.checker.run)
        ):
            self._drop(key)
            return None  # settled: the scheduler lets it go
        return began + interval * slow


def _overdue(entry: _Entry) -> bool:
    """Whether the stage's last saved check is older than its interval (by the saver's clock:
    watchers' clocks agree to a few seconds), or there is none."""
    persist = entry.checker.persistence
    assert persist is not None  # asked by balance of a leased stage only: it has a Persistence
    try:
        stored = persist.store.load(persist.key)
    except Exception:  # cannot tell: a check now costs one probe
        return True
    return stored is None or time.time() - stored.saved_at >= entry.stage.policy.interval


def _stored(checker: AnyChecker) -> tuple[bool, Verdict | None]:
    """Whether this watcher probes ``checker``'s stage, or its stored verdict instead (None:
    nothing stored yet): probed where it holds the stage, or has no store, or what is stored
    is another run's or definition's (checked here, not saved)."""
    persist = checker.persistence
    if persist is None or persist.take or persist.held:
        return True, None
    followed = persist.followed(persist.elsewhere or "another watcher", checker.own_run)
    if isinstance(followed, NotOurs):
        return True, None
    return False, followed


def _holds(checker: AnyChecker) -> bool:
    """Whether this watcher holds ``checker``'s stage (or watches it alone)."""
    persist = checker.persistence
    return persist is None or persist.take or persist.held


def _notifier(stage: Stage) -> Notifier | None:
    if stage.notify is None:
        return None
    from sensors._notify.policy import notifier_for  # imported only for stages that notify

    return notifier_for(stage)


class Courier:
    """Delivers a watcher's notifications from a thread of its own, in the order decided.

    A delivery may take its whole bound (30 s of retries against a webhook that answers
    slowly or not at all): in the scheduler's thread that held every check and every lease
    renewal, long enough for another watcher to take the stages over and announce the same
    news again. At most ``capacity`` messages wait; beyond that one is dropped and logged."""

    def __init__(
        self, on_sent: Callable[[str, Sequence[Sent]], None] | None = None, capacity: int = 1000
    ) -> None:
        self.on_sent = on_sent
        self.dropped = 0
        self._queue: queue.Queue[tuple[Notifier, Sequence[Any], str] | None] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, daemon=True, name="crosscheck-courier")
        self._thread.start()

    def send(self, notifier: Notifier, messages: Sequence[Any], stage: str) -> None:
        try:
            self._queue.put_nowait((notifier, messages, stage))
        except queue.Full:
            self.dropped += len(messages)
            waiting = self._queue.qsize()
            log.error("%s: a notification was dropped: %d are waiting for delivery", stage, waiting)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            notifier, messages, stage = item
            try:
                sent = notifier.deliver(messages)
            except Exception:  # a delivery never raises (sensors._notify); a bug must not end the thread
                log.exception("%s: notification", stage)
                continue
            if self.on_sent is not None:
                self.on_sent(stage, sent)

    def close(self, timeout: float) -> int:
        """Deliver what waits, for at most ``timeout`` seconds; how many were not delivered."""
        end = time.monotonic() + timeout
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout)
        self._thread.join(max(0.0, end - time.monotonic()))
        waiting = self._queue.qsize() - (1 if self._thread.is_alive() else 0)  # not the end marker
        return max(0, waiting) + self.dropped


# --------------------------------------------------------------------------- metrics


class Metrics:
    """Prometheus metrics of one watcher, and a tiny HTTP server for /metrics and /healthz."""

    def __init__(self, watcher: Watcher, spools: Sequence[Spool] = ()) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.watcher = watcher
        self.registry = CollectorRegistry()
        self.registry.register(_DroppedLines(spools))
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

    def observe(self, entry: _Entry, verdict: Verdict, took: float) -> None:
        for state in State:
            self.verdict.labels(verdict.stage, verdict.host, state.value).set(
                1 if state is verdict.state else 0
            )
        self.last_check.labels(verdict.stage, verdict.host).set(time.time())
        self.duration.labels(verdict.host).observe(took)
        if any("host_error" in r.evidence for r in verdict.readings.values()):
            self.host_errors.labels(verdict.host).inc()

    def delivered(self, stage: str, sent: Sequence[Sent]) -> None:
        """Count what the courier delivered (or could not), per stage and channel."""
        for message in sent:
            for delivery in message.deliveries:
                (self.sent if delivery.ok else self.failed).labels(stage, delivery.channel).inc()

    def _held(self) -> int:
        entries = list(self.watcher.entries.values())  # a copy: the watcher adds and drops meanwhile
        return sum(1 for e in entries if e.checker.persistence is None or e.checker.persistence.held)

    def serve(self, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        metrics = self

        class Handler(BaseHTTPRequestHandler):
            # Each socket operation waits this long at most (StreamRequestHandler.setup sets
            # it on the connection): a client that stops reading its answer is dropped.
            timeout = REQUEST_TIMEOUT_S

            def setup(self) -> None:
                super().setup()
                # The whole request within REQUEST_TIMEOUT_S, not each read: a client that
                # sends a byte every few seconds held its connection (and a slot) for ever.
                self.rfile = io.BufferedReader(_Deadline(self.connection, REQUEST_TIMEOUT_S))

            def do_GET(self) -> None:
                self.connection.settimeout(REQUEST_TIMEOUT_S)  # the answer's own time
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

        class Server(ThreadingHTTPServer):
            # An IPv6 address (`::` for every address, `::1`) needs an IPv6 socket.
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            # A thread and a descriptor per connection, MAX_CONNECTIONS at most: idle
            # connections from any local user once took all 1,024 of the watcher's
            # descriptors, and every check was `unknown` ("Too many open files", issue 34).
            # One more is closed as soon as it is accepted, never queued.
            slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

            def process_request(self, request: Any, client_address: Any) -> None:
                if not self.slots.acquire(blocking=False):
                    self.shutdown_request(request)
                    return
                try:
                    super().process_request(request, client_address)
                except BaseException:
                    self.slots.release()  # no thread took it
                    raise

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    self.slots.release()

        server = Server((host, port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True, name="crosscheck-metrics").start()
        return server


#: Connections the metrics server serves at once (a thread and a descriptor each): far below
#: the watcher's descriptor budget (1,024 by default), which its probes and store need.
MAX_CONNECTIONS = 32

#: Seconds a metrics client has to send its whole request (and, apart, to take the answer).
REQUEST_TIMEOUT_S = 5.0


class _Deadline(io.RawIOBase):
    """A connection's bytes, read until a deadline ``seconds`` from now (then TimeoutError)."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        self._sock = sock
        self._end = time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request was not sent in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _DroppedLines:
    """``crosscheck_output_lines_dropped_total{stream}``: what a slow reader cost (counted by
    each spool; read when scraped)."""

    def __init__(self, spools: Sequence[Spool]) -> None:
        self.spools = list(spools)

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            "crosscheck_output_lines_dropped",
            "lines of --json output (stdout) or of the log (stderr) dropped: their reader did not keep up",
            labels=("stream",),
        )
        for spool in self.spools:
            family.add_metric([spool.name], spool.dropped)
        yield family


# --------------------------------------------------------------------------- entry point


def configure_logging(level: str, stream: Any = None) -> logging.Handler:
    """The watcher's log on ``stream`` (standard error, or its spool) at ``level``; returns
    the handler (removed when the watcher ends). Libraries speak only when they have
    something to say: paramiko's connection lines ("Connected (version 2.0, ...)",
    "Authentication (publickey) successful!") at every reconnect, and httpx's line per Prefect
    API call, are shown only at DEBUG."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    # At DEBUG their INFO lines too, never their own DEBUG traces (packets, sockets).
    chatty = logging.INFO if level == "DEBUG" else logging.WARNING
    for name in ("paramiko", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(chatty)
    return handler


def serve(
    directory: str,
    *,
    store: Store | None,
    as_json: bool,
    metrics_port: int | None,
    rescan_every: float,
    lease: float | None = None,
    prefect: bool | None = None,
    heartbeat: float | None = None,
    metrics_host: str = "127.0.0.1",
    log_level: str = "INFO",
) -> int:
    """Run the watcher until SIGTERM or SIGINT (or, with ``as_json``, until nobody reads its
    standard output); exit 0.

    ``prefect``: send events and resume gates through the Prefect API (default: when
    ``PREFECT_API_URL`` is set); ``heartbeat``: at most one heartbeat event per stage per
    this many seconds (default 60). ``metrics_host``: the address ``/metrics`` listens on;
    ``log_level``: DEBUG, INFO, WARNING or ERROR (paramiko's lines only at DEBUG)."""
    # Neither output may hold the watch (sensors._watch.spool): a reader that stops reading costs
    # lines, counted and said, never a check or a lease renewal.
    err = _spool(sys.stderr, "stderr", note=_DROPPED_LOG_LINES.format)
    handler = configure_logging(log_level, err or sys.stderr)
    logging.captureWarnings(True)  # a StoreWarning goes through the same spool
    out = _spool(sys.stdout, "stdout", on_drop=_warn_dropped_json) if as_json else None
    try:
        return _serve(
            Path(directory),
            store=store,
            out=out,
            as_json=as_json,
            spools=[s for s in (out, err) if s is not None],
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            rescan_every=rescan_every,
            lease=lease,
            prefect=prefect,
            heartbeat=heartbeat,
        )
    finally:
        if out is not None:
            lost = out.close(timeout=2.0)
            if lost:
                log.warning("%d JSON lines never reached stdout: its reader did not read them", lost)
        logging.getLogger().removeHandler(handler)
        if err is not None:
            err.close(timeout=2.0)


def _serve(
    path: Path,
    *,
    store: Store | None,
    out: Spool | None,
    as_json: bool,
    spools: list[Spool],
    metrics_port: int | None,
    metrics_host: str,
    rescan_every: float,
    lease: float | None,
    prefect: bool | None,
    heartbeat: float | None,
) -> int:
    if not path.is_dir():
        print(f"crosscheck: {path}: not a directory", file=sys.stderr)
        return 2
    stop = threading.Event()
    if as_json:
        on_closed(stop.set)  # its JSON lines' reader went away (| head): stop, as on SIGTERM
    if out is not None:
        out.on_broken = stop.set  # the same, seen by the spool's writer
        emit: Callable[[Verdict], object] = lambda v: out.write(json.dumps(v.to_json()) + "\n")  # noqa: E731
    elif as_json and sys.stdout is not None:  # no file descriptor (an embedding replaced sys.stdout)
        emit = lambda v: (sys.stdout.write(json.dumps(v.to_json()) + "\n"), sys.stdout.flush())  # noqa: E731
    else:
        emit = lambda v: None  # noqa: E731
    bridge = None
    if prefect is None:
        prefect = bool(os.environ.get("PREFECT_API_URL"))
    if prefect:
        from sensors._prefect.bridge import PrefectBridge  # the Prefect layer, only when asked

        bridge = PrefectBridge() if heartbeat is None else PrefectBridge.every(heartbeat)
    desk = None
    # A watcher that can resume gates says so in its name: only then do gates hand off to it.
    holder = holder_id() + (RESUMES_GATES if bridge is not None else "")
    if bridge is not None:
        bridge.by = watcher_name(holder)
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
        metrics = Metrics(watcher, spools=spools)
        watcher.metrics = metrics
        try:
            server = metrics.serve(metrics_port, metrics_host)
        except OSError as exc:  # in use, or not ours to take: one line, as for any usage error
            print(
                f"crosscheck: --metrics-host {metrics_host} --metrics-port {metrics_port}: cannot listen"
                f" there ({exc.strerror or exc})",
                file=sys.stderr,
            )
            return 2
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    tune_for_watching()  # a long-lived process: see sensors._watch.gc
    log.info("watching %s (pid %d, as %s)", path, os.getpid(), watcher.holder)
    try:
        watcher.run(stop)
    finally:
        if server is not None:
            server.shutdown()
    log.info("stopped")
    return 0


_DROPPED_LOG_LINES = "crosscheck: {} log lines were dropped here: stderr's reader was not keeping up\n"


def _spool(stream: Any, name: str, **kwargs: Any) -> Spool | None:
    """A spool on ``stream``'s file descriptor, or None when it has none (an embedding that
    replaced sys.stdout): then the stream is written as before."""
    try:
        fd = stream.fileno()
        stream.flush()  # what the stream holds goes first
    except (AttributeError, OSError, ValueError):
        return None
    return Spool(fd, name, **kwargs)


def _warn_dropped_json(count: int) -> None:
    log.warning(
        "--json: stdout's reader is not keeping up (or has gone): %d JSON lines dropped so far;"
        " the watch goes on",
        count,
    )
