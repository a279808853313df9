"""A Checker's memory in the durable store: restored when a watch starts, saved after each check.

What a watch learns (the job seen alive and as which identity, where its run began, how long
it has made no progress, the settle streak, the GPU window) outlives the process watching:
restart the CLI, the worker or the machine, and the next watch goes on from there.

Rules it keeps:

- Key: stage name + host. A fingerprint per part of the stage definition (each signal's
  section, the policy): a changed part resets only the memory that depends on it, and says so.
- Restored memory never replaces a fresh check: the settle streak starts again at 0, so
  ``complete`` is always earned by checks made after the restore. An unreadable document
  (corrupt, foreign, newer) is fresh memory, with a warning — never a crash.
- One watch holds a stage at a time (a lease with expiry, renewed each check); another watch
  of the same stage follows the stored verdicts instead of probing, and says so.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from sensors._base.model import Verdict
from sensors._base.tolerances import CLOCKS_APART, SINCE_ROUNDING, SINCE_SAME
from sensors._check.codec import VERSION, MemoryFormatError, dumps, fingerprint, loads
from sensors._config.stage import Stage
from sensors._run.run import Run, Since
from sensors._store import Lease, SaveRequest, StageKey, Store, StoreWarning, open_store
from sensors._verdict import VerdictMemory

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # typing's own from Python 3.13; mypy brings this one

log = logging.getLogger("crosscheck")


def holder_id() -> str:
    """Who holds a lease: this machine and process (readable in "watched elsewhere by ...")."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


#: The policy fields a verdict depends on (the interval and the timeout only pace a watch).
_DECISIVE_POLICY = ("stall_after", "settle", "stuck_in_d_after", "exit_grace")


def stage_parts(stage: Stage) -> dict[str, Any]:
    """The parts of a stage definition the memory depends on, for :func:`fingerprint`."""
    parts: dict[str, Any] = {
        name: (spec.model_dump(mode="json") if spec is not None else None)
        for name in ("process", "log", "outputs", "gpu")
        for spec in (getattr(stage, name),)
    }
    # "local" is the machine the watch runs on: one store shared by several machines
    # (PostgreSQL, or the default file in a home directory on NFS) holds one row per stage
    # name, and another machine's memory or verdict of its own job is not this one's.
    parts["host"] = _host_part(stage.host)
    parts["policy"] = {name: getattr(stage.policy, name) for name in _DECISIVE_POLICY}
    if stage.launch is not None:
        # What is launched is part of the definition: a run of another command is no run of
        # this one (its record, its verdict, its "already running").
        parts["launch"] = stage.launch.model_dump(mode="json")
    if stage.hosts is not None:
        # A stage over several hosts: every host, in order (node k is the k-th), and the
        # success policy (``all`` or ``chief`` decide differently from the same readings).
        assert isinstance(stage.hosts, tuple)  # a pattern is expanded when the stage loads
        parts["host"] = [_host_part(host) for host in stage.hosts]
        parts["policy"]["success"] = stage.policy.success
    return parts


def _host_part(host: Any) -> Any:
    return {"local": socket.gethostname()} if host == "local" else host.model_dump(mode="json")


#: What a watch was told of its run: a launch (a Run), a start given with --since, or nothing
#: (it watches the latest run, whichever that is).
OwnRun = Run | Since | None


def is_this_run(stored: Run | None, own: OwnRun, *, one_clock: bool = True) -> bool:
    """Whether memory or a verdict of the ``stored`` run may stand for the run a watch was
    told of (``own``).

    - Told nothing: the stored run is the latest one known, so it is this watch's.
    - A launch: exactly that launch.
    - A start given as a time: a run that began at or after it (the latest run since then
      decides; a stored run of the same start is the same run), but not a launch: a launched
      run's watch answers for that launch alone, never for a later run begun after the time
      too (fuzzer seed 5007569: a `status --since` followed the launched run's `failed`, its
      exit 1 recorded, while run 2 was at work).
      A stored run whose start is itself a ``--since`` (another watch's) is no run's start
      found: only the same start given stands for it. One given later excludes a run begun
      between the two, which this watch's own includes: a gate given the job's start followed
      a gate given a later one by mistake, whose run had not begun ("started before this run
      began"), and stayed ``unknown`` until its timeout (ML engineer's trial,
      tests/test_user_s14.py).
      A run found on another host (``one_clock`` False) began on that host's clock, the
      ``--since`` on this machine's: compared as they are, a host ahead put a run begun just
      before the start after it. The stored run keeps no measured offset: the two clocks are
      taken to be up to :data:`CLOCKS_APART` apart, as where a watch has measured none (a
      host a minute ahead is told apart only by a watch's own probe: it follows nothing
      begun within that second, and checks for itself).
    - A start given as a duration: resolved at this watch's own first check, on the host's
      clock; until then nothing stored can be shown to be of that run.
    """
    if own is None:
        return True
    if stored is None:
        return False
    if isinstance(own, Run):
        return run_key(stored) == run_key(own) and stored.exit_file == own.exit_file
    if own.at is None or stored.started_at is None or stored.source in ("watch", "launch"):
        return False
    if stored.source == "since":
        return abs((stored.given if stored.given is not None else stored.started_at) - own.at) <= SINCE_SAME
    return stored.started_at - (0.0 if one_clock else CLOCKS_APART) >= own.at - SINCE_ROUNDING


class NotOurs:
    """What :meth:`Persistence.followed` returns for a stored verdict of another run or
    another definition of the stage: never followed; the watch checks for itself."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"NotOurs({self.why!r})"


@dataclass
class Restored:
    """What a restore gave back, and what it had to leave behind (for the log)."""

    memory: dict[str, Any] | None
    notes: list[str]


def save_all(saves: Sequence[tuple[Persistence, dict[str, Any], Verdict]]) -> None:
    """Save each (persistence, memory, verdict) after its check: the saves of one store in
    one call where it takes several (``save_many``: a SQLite store writes them in one
    transaction, where one transaction per stage cost ~0.2 ms of CPU each). A failed save
    never fails a check: the store is a memory aid."""
    by_store: dict[int, list[tuple[Persistence, SaveRequest]]] = {}
    for persist, memory, verdict in saves:
        try:
            request = persist._request(memory, verdict)
        except Exception as exc:  # a memory that cannot be encoded: this stage's, not the batch's
            warnings.warn(f"state store: cannot save {persist.key.stage}: {exc}", StoreWarning, stacklevel=2)
            continue
        by_store.setdefault(id(persist.store), []).append((persist, request))
    for group in by_store.values():
        store = group[0][0].store
        many = getattr(store, "save_many", None)
        try:
            if many is not None and len(group) > 1:
                leases = many([request for _, request in group])
            else:
                leases = [store.save(r.key, **_save_args(r)) for _, r in group]
        except Exception as exc:
            for persist, _ in group:
                warnings.warn(
                    f"state store: cannot save {persist.key.stage}: {exc}", StoreWarning, stacklevel=2
                )
            continue
        for (persist, request), lease in zip(group, leases, strict=True):
            persist._after_save(request, lease)


def _save_args(r: SaveRequest) -> dict[str, Any]:
    """The keyword arguments of ``Store.save`` for one request (all its fields but the key)."""
    return {f.name: getattr(r, f.name) for f in fields(r) if f.name != "key"}


class Persistence:
    """The store seen from one Checker: load once, save after each check, hold the lease."""

    def __init__(self, store: Store | str | os.PathLike[str] | None, stage: Stage, host: str) -> None:
        # A store given open is the caller's to close; one opened here from a location is ours.
        self.store: Store
        if is_store(store):
            self._owns_store, self.store = False, store
        else:
            self._owns_store, self.store = True, open_store(store)
        self.key = StageKey(stage.stage, host)
        self.holder = holder_id()
        self.ttl = max(3 * stage.policy.interval, 30.0)
        self._parts = fingerprint(stage_parts(stage))
        # Where the stage's run starts are read on this machine's clock (see is_this_run).
        self.one_clock = stage.host == "local" and stage.hosts is None
        #: The whole definition's digest: what announcements are keyed by, with the run.
        self.definition = fingerprint({"stage": sorted(self._parts.items())})["stage"]
        self._last_state: str | None = None
        #: Whether :meth:`hold` may take a lease nobody holds (False: only :meth:`claim` does).
        self.take = True
        #: The lease as the last acquire left it: ours, or whose.
        self.held = False
        #: Whether the last verdict of this stage came from the holder (followed): a watch
        #: that then takes the stage over goes on from the holder's memory, not its own.
        self.following = False
        self.elsewhere: str | None = None
        # When the lease was last renewed (monotonic): a save renews it in its own round trip,
        # so the check after it need not (see :meth:`hold`).
        self._renewed_at: float | None = None
        self._ever_held = False

    # ------------------------------------------------------------------ restore

    def restore(self) -> Restored:
        """The stored memory of this stage, minus what a changed definition invalidates."""
        try:
            stored = self.store.load(self.key)
        except Exception as exc:  # a store that cannot be read is fresh memory, never a crash
            warnings.warn(f"state store: cannot load {self.key.stage}: {exc}", StoreWarning, stacklevel=2)
            return Restored(None, [])
        if stored is None:
            return Restored(None, [])
        if stored.version != VERSION:
            return Restored(
                None, [f"stored memory is of format {stored.version}, not {VERSION}: fresh memory"]
            )
        try:
            memory = loads(stored.memory)
        except MemoryFormatError as exc:
            warnings.warn(f"state store: {self.key.stage}: {exc}; fresh memory", StoreWarning, stacklevel=2)
            return Restored(None, [])
        self._last_state = (stored.verdict or {}).get("verdict")
        changed = [p for p, digest in self._parts.items() if stored.fingerprint.get(p) != digest]
        return Restored(_without(memory, changed), _notes(changed))

    def stored_run(self) -> tuple[Run | None, bool]:
        """The run the stored memory belongs to, whatever the definition says now (a launched
        stage is saved with its PID filled in), and whether it was saved under this stage's
        ``launch`` section as it is now (True where nothing tells otherwise): one read."""
        try:
            stored = self.store.load(self.key)
            memory = loads(stored.memory) if stored is not None and stored.version == VERSION else None
        except Exception:  # unreadable: no run on record
            return None, True
        run = memory.get("run") if isinstance(memory, dict) else None
        parts = dict(stored.fingerprint) if stored is not None else {}
        same_launch = "launch" not in parts or parts["launch"] == self._parts.get("launch")
        return (run if isinstance(run, Run) else None), same_launch

    # ------------------------------------------------------------------ save

    def _request(self, memory: dict[str, Any], verdict: Verdict) -> SaveRequest:
        """What saving this check means (see :func:`save_all`); a verdict change also goes
        into the history."""
        doc = verdict.to_json()
        return SaveRequest(
            self.key,
            memory=dumps(memory),
            fingerprint=self._parts,
            verdict=doc,
            version=VERSION,
            changed=doc["verdict"] != self._last_state,
            renew=(self.holder, self.ttl) if self.held else None,
        )

    def _after_save(self, request: SaveRequest, lease: Lease | None) -> None:
        self._last_state = request.verdict["verdict"]
        if request.renew is not None:
            self._lease_is(lease)

    # ------------------------------------------------------------------ lease

    def hold(self) -> str | None:
        """Take or renew this stage's lease; the other holder's name when it is watched elsewhere.

        With ``take`` False (a watcher that splits the stages with others: ``crosscheck
        serve``), a lease not held is never taken here: only :meth:`claim`, called by the
        split, takes one; the stage is followed meanwhile.
        """
        if not self.take and not self.held:
            return self.elsewhere or "another watcher"
        if self.held and self._renewed_at is not None and time.monotonic() - self._renewed_at < self.ttl / 4:
            # Renewed by the last save a moment ago, with three quarters of its time left: no
            # round trip to renew it again. Nobody else can take a lease before it expires.
            return None
        return self.claim()

    def claim(self) -> str | None:
        """Take or renew the lease, whatever ``take`` says; the holder's name when refused.
        The store's conditional upsert decides (a row lock for PostgreSQL): never two holders."""
        # Held before, but not renewed for a whole lease: another watch may have held the
        # stage meanwhile, and its memory is then the latest of the run (an adversary's review:
        # a holder frozen past its lease came back on the memory it froze with).
        lapsed = self._ever_held and (
            self._renewed_at is None or time.monotonic() - self._renewed_at >= self.ttl
        )
        try:
            lease = self.store.acquire(self.key, self.holder, self.ttl)
            if not lease.held and dead_here(lease.holder):
                # Held by a watch of this machine that died (SIGKILL, OOM): no need to wait
                # for the lease to expire.
                self.store.release(self.key, lease.holder)
                lease = self.store.acquire(self.key, self.holder, self.ttl)
        except Exception as exc:
            warnings.warn(f"state store: lease for {self.key.stage}: {exc}", StoreWarning, stacklevel=2)
            return None
        self._lease_is(lease)
        if self.held:
            if lapsed:
                self.following = True  # go on from the stored memory (Checker.followed)
            self._ever_held = True
        return self.elsewhere

    def renewed(self) -> None:
        """The store renewed this stage's lease for ``holder`` (a watcher renews its share
        in one call)."""
        self.held, self.elsewhere, self._renewed_at = True, None, time.monotonic()

    def _lease_is(self, lease: Lease | None) -> None:
        if lease is None:  # the store could not answer: ask again at the next check
            self._renewed_at = None
            return
        self.held, self.elsewhere = lease.held, (None if lease.held else (lease.holder or None))
        self._renewed_at = time.monotonic() if lease.held else None

    def followed(self, elsewhere: str, own: OwnRun = None) -> Verdict | NotOurs | None:
        """The verdict the watch holding this stage saved last, marked as followed; None when
        nothing is stored yet.

        Only a verdict of this run (:func:`is_this_run` with ``own``, what this watch was told
        of its run) and of this very definition (every part's fingerprint, the policy's too)
        is followed; another is :class:`NotOurs` (the watch checks for itself).
        """
        try:
            stored = self.store.load(self.key)
        except Exception as exc:  # unreadable: nothing to follow
            warnings.warn(f"state store: cannot load {self.key.stage}: {exc}", StoreWarning, stacklevel=2)
            return None
        if stored is None:
            return None
        if dict(stored.fingerprint) != self._parts:
            return NotOurs("the stored verdict is of another definition of the stage")
        try:
            memory = loads(stored.memory) if stored.version == VERSION else None
        except MemoryFormatError:
            memory = None
        last = memory.get("last") if isinstance(memory, dict) else None
        if not isinstance(last, Verdict):
            return None
        if not is_this_run(memory.get("run"), own, one_clock=self.one_clock):  # type: ignore[union-attr]
            return NotOurs("the stored verdict is of another run")
        note = f"{FOLLOWED} {elsewhere}: its verdict, not a check of this watch"
        self.following = True
        return replace(last, reasons=(note, *last.reasons))

    # ------------------------------------------------------------------ announcements

    def announced(self, run: Run | None, last: Verdict | None) -> Verdict | None:
        """``last`` when it is this run's complete or failed verdict and was announced."""
        if run is None or last is None or not last.state.final:
            return None
        try:
            known = self.store.announced(self.key, self.announcement_key(run))
        except Exception as exc:
            warnings.warn(
                f"state store: announcements of {self.key.stage}: {exc}", StoreWarning, stacklevel=2
            )
            return None
        return last if known is not None and known.state == last.state.value else None

    def announce(self, run: Run | None, verdict: Verdict) -> bool:
        """Record this run's final verdict; True only the first time (across processes)."""
        if run is None:
            return True
        try:
            return self.store.announce(
                self.key, self.announcement_key(run), verdict.state.value, verdict.to_json()
            ).first
        except Exception as exc:  # unrecorded: announce rather than stay silent
            warnings.warn(f"state store: announce {self.key.stage}: {exc}", StoreWarning, stacklevel=2)
            return True

    def announcement_key(self, run: Run) -> str:
        """A run's final verdict is announced once per run *and* definition: a verdict under
        another definition of the stage (say another expected count) is news of its own."""
        return f"{run_key(run)}#{self.definition}"

    def release(self) -> None:
        self.held, self._renewed_at = False, None
        try:
            self.store.release(self.key, self.holder)
        except Exception:  # expiry releases it anyway
            log.debug("state store: release failed", exc_info=True)

    def close(self) -> None:
        """Release the lease, and close the store when it was opened here (from a path or a
        URL): a store given open stays open for its owner."""
        self.release()
        if self._owns_store:
            try:
                self.store.close()
            except Exception:  # closing is best effort: nothing is lost with the connection
                log.debug("state store: close failed", exc_info=True)


#: How a followed verdict's first reason begins (:meth:`Persistence.followed`).
FOLLOWED = "watched elsewhere by"


def is_followed(verdict: Verdict) -> bool:
    """Whether ``verdict`` is another watch's, followed here (not a check of this one)."""
    return bool(verdict.reasons) and verdict.reasons[0].startswith(FOLLOWED + " ")


def dead_here(holder: str) -> bool:
    """Whether ``holder`` (from :func:`holder_id`) is a process of this machine that is gone."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def run_key(run: Run) -> str:
    """The identity of a run, for "announced once per run"."""
    started = "?" if run.started_at is None else f"{run.started_at:.0f}"
    return (
        f"{run.source}:{started}"
        + (f":{run.pid}" if run.pid is not None else "")
        + (f":{run.supervised}" if run.supervised is not None else "")
    )


def is_store(value: object) -> TypeIs[Store]:
    return all(hasattr(value, name) for name in ("load", "save", "acquire"))


#: What each signal's memory depends on besides its own part of the definition: the GPU's
#: (the job's PIDs, for attribution) on which process is the job.
_ALSO_DEPENDS = {"gpu": ("process",)}


def _without(memory: Any, changed: list[str]) -> dict[str, Any] | None:
    """The memory without what depends on the changed parts of the definition.

    - ``host``: nothing known of another host.
    - ``process``: another process is the job: the run it began, the identities learnt, and
      everything tied to that run (log offsets, counts, the GPU's PIDs) go; only the host's
      static facts stay.
    - ``log``, ``outputs``, ``gpu``: that signal's memory (the GPU's also with the process),
      and the verdict's memory and last verdict (made under the old definition), but for when
      the process was first found gone: a fact of the same process, which an edited count
      does not move (user s15: an ``expected`` edited 14 minutes after the job's end waited
      ``exit_grace`` again, "0s so far" beside "last seen alive 829s ago").
    - ``policy``: the same.

    Nothing changed: all of it, the settle streak included (a restored streak counts only
    with a fresh check that agrees: ``complete`` still needs a check made now).
    """
    if not isinstance(memory, dict):
        return None
    if "host" in changed:
        return None  # another host: nothing known of this one
    if "nodes" in memory:
        # A stage over several hosts (``sensors._check.span``): each node's memory as a
        # stage's, and the last verdict (made under the old definition) goes. The memory
        # across hosts is what the hosts' processes showed (how many ranks each, when they
        # were lost, when each last moved): it goes with the nodes' process memory, never
        # without it. Dropped alone (a policy or log edit), a node's ranks still counted as
        # seen alive while the count of them was gone: the per-host check had nothing to
        # compare, and a host that never showed all its ranks was done (an adversary's review).
        if not changed:
            return memory
        # Each rank's log (``log.path`` with ``{rank}``) as a stage's too, never kept whole: its
        # completion line found under another ``log`` stood under this one (an adversary's
        # review). Under another ``process`` (``per_host``) the rank numbers move to other
        # hosts and files: none of it.
        nodes = {label: _without(doc, changed) for label, doc in dict(memory["nodes"]).items()}
        ranks = dict(memory.get("ranks") or {}) if "process" not in changed else {}
        ranks = {rank: _without(doc, changed) for rank, doc in ranks.items()}
        across = None if "process" in changed else memory.get("across")
        return {**memory, "nodes": nodes, "ranks": ranks, "across": across, "last": None}
    if "process" in changed:
        return {"static": memory.get("static"), "boot_id": memory.get("boot_id")}
    if not changed:
        return memory
    signals = {
        k: v
        for k, v in dict(memory.get("signals") or {}).items()
        if k not in changed and not any(dep in changed for dep in _ALSO_DEPENDS.get(k, ()))
    }
    kept = memory.get("verdict")
    gone = kept.gone_since if isinstance(kept, VerdictMemory) else None
    verdict = VerdictMemory(gone_since=gone) if gone is not None else None
    return {**memory, "signals": signals, "verdict": verdict, "last": None}


def _notes(changed: list[str]) -> list[str]:
    if not changed:
        return []
    return [f"the stage definition changed ({', '.join(changed)}): that memory starts afresh"]
