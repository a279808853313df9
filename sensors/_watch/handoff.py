"""A stage a gate hands to the watcher service, and the watcher's final word on it.

A Prefect gate that hands its stage off writes a :class:`~sensors._store.Handoff` into the
state store (keyed by its flow run id) and suspends: its worker process exits. ``crosscheck
serve`` on the same store picks the handoff up, checks the stage like any other, and when
the stage is complete or failed, or the gate's deadline passed, writes the *outcome* (the
verdict with its evidence, the run it belongs to, whether the deadline passed) and resumes the
flow run; the resumed gate reads the outcome, announces it (once per run) and ends.

This module is the core's half: what goes into a request and an outcome, and back. No
Prefect here (the resume is the Prefect layer's, in :mod:`sensors._prefect.bridge`).

A request holds the stage *definition*, not a path: the watcher may run on another machine.
A definition with a secret inline (an SSH private key or passphrase from a block) is never
written to the store: the gate hands off the block's name instead (``block:NAME``, resolved
by the watcher through the Prefect API), or, given a bare ``Stage`` with a key in it, waits
in its worker as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sensors._base.errors import ConfigError
from sensors._base.model import Verdict
from sensors._base.text import redact_argv, redact_deep
from sensors._check.codec import MemoryFormatError, dumps, loads
from sensors._config.stage import Stage, stage_from_dict
from sensors._present.picture import WaitHistory
from sensors._run.run import Run
from sensors._store import Handoff, Store

log = logging.getLogger("crosscheck.serve")

#: The end of the registry name of a watcher that resumes gates (``crosscheck serve
#: --prefect``): a gate hands its stage off by default only when such a watcher is alive.
RESUMES_GATES = "+gates"


def watcher_name(holder: str) -> str:
    """A watcher's registry name (``host:pid:nonce``, maybe ``+gates``) for a person.

    Example:
        >>> watcher_name("gpu-box:4455:1a2b3c+gates")
        'crosscheck serve on gpu-box (pid 4455)'
    """
    host, _, rest = holder.removesuffix(RESUMES_GATES).partition(":")
    pid = rest.partition(":")[0]
    if not host:
        return "crosscheck serve"
    return f"crosscheck serve on {host}" + (f" (pid {pid})" if pid.isdigit() else "")


def has_inline_secret(stage: Stage) -> bool:
    """Whether the stage carries key material itself (from a ``CrosscheckSSHHost`` block),
    not a reference to a key file or a secret."""
    hosts = stage.hosts if isinstance(stage.hosts, tuple) else (stage.host,)
    return any(host != "local" and host.material is not None for host in hosts)


def request_for(
    stage: Stage,
    *,
    reference: str | None,
    since: str | float | None,
    run: dict[str, Any] | None,
) -> dict[str, Any]:
    """What a gate asks the watcher to watch. ``reference`` is ``block:NAME`` when the stage
    came from a block (the only way a stage with a secret inline is handed off).

    The request is written to the state store: the launch command in it (the stage's and
    the run record's) is kept redacted. The watcher watches and never launches, so a
    redacted command costs it nothing."""
    run = redact_deep(run) if run is not None else None
    if reference is not None and reference.startswith("block:"):
        return {"block": reference, "since": since, "run": run}
    if has_inline_secret(stage):
        raise ConfigError(
            f"stage {stage.stage}: its host holds key material (from a block); it is not "
            "written to the state store (hand off the block's name, or use a key file)"
        )
    doc = stage.model_dump(mode="json")
    if isinstance(doc.get("launch"), dict) and isinstance(doc["launch"].get("command"), list):
        doc["launch"]["command"] = redact_argv(doc["launch"]["command"])
    return {"stage": doc, "since": since, "run": run}


def new_handoff(ticket: str, stage: Stage, host: str, request: dict[str, Any], timeout: float) -> Handoff:
    now = time.time()
    return Handoff(
        ticket=ticket,
        stage=stage.stage,
        host=host,
        request=request,
        deadline=now + timeout,
        created_at=now,
    )


class ResumeGate(Protocol):
    """``resume(flow_run_id, stage)``: resume the gate's flow run if it is suspended on
    ``stage``: ``"resumed"``, ``"waiting"`` (asked again later) or ``"gone"`` (the Prefect
    layer's :meth:`~sensors._prefect.bridge.PrefectBridge.resume`)."""

    def __call__(self, flow_run_id: str, stage: str, /) -> str: ...


class FlowRunOver(Protocol):
    """``over(flow_run_id)``: whether the gate's flow run has ended, or is gone (the Prefect
    layer's :meth:`~sensors._prefect.bridge.PrefectBridge.over`)."""

    def __call__(self, flow_run_id: str, /) -> bool: ...


class ResolveBlock(Protocol):
    """``resolve_block(reference)``: the stage a ``block:NAME`` request names (the Prefect
    layer's :meth:`~sensors._prefect.bridge.PrefectBridge.resolve_block`)."""

    def __call__(self, reference: str, /) -> Stage: ...


def stage_of(handoff: Handoff, resolve_block: ResolveBlock | None = None) -> Stage:
    """The stage a handoff asks for. ``resolve_block(name) -> Stage`` loads ``block:NAME``
    requests (the Prefect layer's); without it such a request is a :class:`ConfigError`."""
    request = handoff.request
    if "block" in request:
        if resolve_block is None:
            raise ConfigError(
                f"{request['block']}: a block needs the Prefect API (crosscheck serve --prefect)"
            )
        return resolve_block(str(request["block"]))
    if not isinstance(request.get("stage"), dict):
        raise ConfigError(f"handoff {handoff.ticket}: no stage definition")
    return stage_from_dict(request["stage"])


@dataclass
class HandoffSeen:
    """What the watcher saw of a handed-off stage, kept for the gate that reports it: every
    check (counted, and the picture's samples, bounded) and when the watcher last sent the
    stage's heartbeat (epoch seconds), so the resumed gate tells the whole wait and keeps
    the heartbeats' cadence. A watcher that took the stage over (or restarted) tells what it
    saw from then on: ``history.first_at`` says when that was.
    """

    history: WaitHistory = field(default_factory=WaitHistory)
    heartbeat_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"history": self.history.to_json(), "heartbeat_at": self.heartbeat_at}

    @classmethod
    def from_json(cls, doc: Any) -> HandoffSeen | None:
        """What :meth:`to_json` wrote; None for anything else (an older outcome has none)."""
        if not isinstance(doc, dict):
            return None
        history = WaitHistory.from_json(doc.get("history"))
        if history is None:
            return None
        beat = doc.get("heartbeat_at")
        if isinstance(beat, bool) or not isinstance(beat, (int, float)):  # a number, or no time
            return cls(history, None)
        return cls(history, float(beat))


@dataclass(frozen=True)
class Outcome:
    """The watcher's final word on a handoff."""

    verdict: Verdict
    run: Run | None
    timed_out: bool
    decided_at: float
    by: str
    watched: HandoffSeen | None = None


def outcome_doc(
    verdict: Verdict, run: Run | None, *, timed_out: bool, by: str, watched: HandoffSeen | None = None
) -> dict[str, Any]:
    """The outcome as stored (the memory codec keeps the Verdict and Run whole)."""
    doc = {
        "verdict": dumps(verdict),
        "run": dumps(run),
        "state": str(verdict.state),
        "timed_out": timed_out,
        "decided_at": time.time(),
        "by": by,
    }
    if watched is not None:
        doc["watched"] = watched.to_json()
    return doc


def read_outcome(handoff: Handoff) -> Outcome | None:
    """The outcome of ``handoff``, or None when there is none yet (or it is unreadable: the
    watcher is asked again rather than a verdict guessed)."""
    doc = handoff.outcome
    if not doc:
        return None
    try:
        verdict = loads(doc["verdict"])
        run = loads(doc["run"])
    except (KeyError, TypeError, MemoryFormatError):
        return None
    if not isinstance(verdict, Verdict) or (run is not None and not isinstance(run, Run)):
        return None
    return Outcome(
        verdict=verdict,
        run=run,
        timed_out=bool(doc.get("timed_out")),
        decided_at=float(doc.get("decided_at") or 0.0),
        by=str(doc.get("by") or ""),
        watched=HandoffSeen.from_json(doc.get("watched")),
    )


@dataclass
class Desk:
    """The watcher's side of handoffs: which stages gates handed off, and what to do after
    each check of one (settle it when final or past its deadline, then resume its gate).

    ``resume(flow_run_id, stage) -> "resumed" | "waiting" | "gone"`` (resumes the run only
    while it is suspended *on that stage*: a pipeline's run suspends again on its next stage,
    and a watcher restarted since must not wake it for this one) and ``resolve_block`` come from
    the Prefect layer (``crosscheck serve`` with Prefect); without them handoffs are still
    watched and settled, and a gate resumed by hand (or by its pause timeout) reads the outcome.
    ``over(flow_run_id) -> bool`` says whether the gate's flow run has ended (then the
    handoff is dropped).
    """

    store: Store
    by: str
    resume: ResumeGate | None = None
    over: FlowRunOver | None = None
    resolve_block: ResolveBlock | None = None
    clock: Callable[[], float] = time.time
    resumed: set[str] = field(default_factory=set)  # tickets whose gate this watcher resumed
    watched: dict[str, HandoffSeen] = field(default_factory=dict)  # by ticket, until settled

    def scan(self) -> dict[str, Handoff]:
        """The handoffs still to watch (no outcome yet), by ticket; settled ones are resumed
        (again, until their gate runs) and dropped once their flow run has ended."""
        try:
            handoffs = self.store.handoffs()
        except Exception as exc:  # the store cannot answer now: try at the next scan
            log.warning("handoffs: the state store cannot answer: %s", exc)
            return {}
        open_: dict[str, Handoff] = {}
        for handoff in handoffs:
            flow_run_id = str(handoff.request.get("flow_run_id") or "")
            if handoff.outcome is None:
                open_[handoff.ticket] = handoff
                continue
            if self.over is not None and flow_run_id and self.over(flow_run_id):
                self.store.drop_handoff(handoff.ticket)
                self.resumed.discard(handoff.ticket)
                continue
            self._resume(handoff.ticket, flow_run_id, handoff.stage)
        for ticket in [t for t in self.watched if t not in open_]:
            del self.watched[ticket]  # settled by another watcher, or dropped
        return open_

    def stage(self, handoff: Handoff) -> Stage:
        return stage_of(handoff, self.resolve_block)

    def saw(self, handoff: Handoff, verdict: Verdict) -> HandoffSeen:
        """Record a check of a handed-off stage (this watcher's own, not a followed one);
        what was seen so far, for the Prefect side (its heartbeats) and the outcome."""
        watched = self.watched.setdefault(handoff.ticket, HandoffSeen())
        watched.history.add(verdict, at=time.time())
        return watched

    def after(self, handoff: Handoff, verdict: Verdict, run: Run | None) -> bool:
        """After a check of a handed-off stage: True when it is settled (stop watching it)."""
        timed_out = self.clock() >= handoff.deadline
        if not verdict.settled and not timed_out:  # a stuck stage is settled too: its gate ends
            return False
        doc = outcome_doc(
            verdict,
            run,
            timed_out=timed_out and not verdict.settled,
            by=self.by,
            watched=self.watched.get(handoff.ticket),
        )
        try:
            if not self.store.record_outcome(handoff.ticket, doc):
                # An outcome is stored already. Unusable (its seal fails: it read as none, so
                # the stage was watched again)? Then this one replaces it; else it stands.
                stored = self.store.handoff(handoff.ticket)
                if stored is not None and stored.outcome is None:
                    self.store.record_outcome(handoff.ticket, doc, replace=True)
        except Exception as exc:
            log.warning(
                "%s: the outcome could not be stored (%s): asked again next check", handoff.stage, exc
            )
            return False
        log.info(
            "%s: handed off by flow run %s: %s%s; resuming it",
            handoff.stage,
            handoff.request.get("flow_run_id"),
            verdict.state,
            " (its deadline passed)" if doc["timed_out"] else "",
        )
        self.watched.pop(handoff.ticket, None)
        self._resume(handoff.ticket, str(handoff.request.get("flow_run_id") or ""), handoff.stage)
        return True

    def _resume(self, ticket: str, flow_run_id: str, stage: str) -> None:
        if self.resume is None or not flow_run_id or ticket in self.resumed:
            return
        try:
            said = self.resume(flow_run_id, stage)
        except Exception as exc:  # the Prefect API is down: resumed at the next scan
            log.warning("flow run %s: could not be resumed (%s): tried again", flow_run_id, exc)
            return
        if said == "resumed":
            self.resumed.add(ticket)
