"""One verdict for a stage over several hosts, from each host's verdict: pure, as ``decide``.

Each host (a *node*, node 0 first) is checked as a stage of its own (``Stage.nodes``): its
process and GPU signals, its own log where the log path names ``{host}`` or ``{node}``; the
outputs and a shared log are read once, on node 0. Node 0's verdict is the full single-host
verdict (every rule of docs/verdict.md); the other nodes add what only they can tell: whether
their job processes (their *ranks*) are gone, alive, or were lost while others wait.

The rules, first that applies wins (docs/multi-host.md, "One verdict across hosts"):

1. A failure any node's evidence shows (an error line, a recorded non-zero exit; under
   ``success: all`` any node's failed verdict): ``failed``, naming the node.
2. A hung collective: ranks lost on a node (fewer alive than ``process.per_host`` after all
   were seen, or every one gone) while ranks on other nodes are alive and every node with live
   ranks has made no progress for ``stall_after``: ``failed``, naming who is gone and who waits.
   GPU utilisation is never progress here (NCCL spins at 100 % while it waits).
3. A node that cannot be read: ``unknown``, never done.
4. Node 0 complete, and every other node done (its readings all done — under ``chief`` its own
   log need not be — its ranks seen alive in this watch or its own log's completion line
   read, no fewer ranks seen than ``per_host``): ``complete``.
5. Otherwise the gravest of node 0's verdict and of the nodes whose ranks are alive
   (contradiction, stalled, unknown, running), with the reasons that hold a stage back.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sensors._base.model import Reading, Says, State, Verdict
from sensors._config.stage import PolicySpec

__all__ = ["AcrossMemory", "NodeCheck", "decide_across"]


@dataclass(frozen=True)
class NodeCheck:
    """One node's check: its host's name as the verdict writes it, and its verdict."""

    host: str
    verdict: Verdict


@dataclass(frozen=True)
class AcrossMemory:
    """What the verdict across hosts remembers between checks, per host (by name)."""

    most_alive: Mapping[str, int] = field(default_factory=dict)  # the most ranks seen alive at once
    lost_at: Mapping[str, float] = field(default_factory=dict)  # when ranks were first seen lost
    marks: Mapping[str, tuple[object, ...]] = field(default_factory=dict)  # what progress is measured by
    moved_at: Mapping[str, float] = field(default_factory=dict)  # when it last moved


#: Graver first: the state a stage shows when node 0 and the live nodes disagree.
_GRAVITY = (State.CONTRADICTION, State.STALLED, State.UNKNOWN, State.RUNNING)


def decide_across(
    stage: str,
    nodes: Sequence[NodeCheck],
    policy: PolicySpec,
    per_host: int | None,
    memory: AcrossMemory,
    now: float | None,
) -> tuple[Verdict, AcrossMemory]:
    """The stage's verdict from its nodes' verdicts (node 0 first), and the new memory."""
    alive = {n.host: _alive(n.verdict) for n in nodes}
    most = dict(memory.most_alive)
    for host, count in alive.items():
        if count is not None:
            most[host] = max(most.get(host, 0), count)
    lost = {n.host for n in nodes if _lost(n.host, alive[n.host], most.get(n.host, 0), per_host, n.verdict)}
    lost_at = {h: t for h, t in memory.lost_at.items() if h in lost}
    for host in lost:
        if host not in lost_at and now is not None:
            lost_at[host] = now
    marks, moved_at = dict(memory.marks), dict(memory.moved_at)
    for node in nodes:
        mark = _mark(node.verdict)
        if mark is None:
            continue  # not read: neither progress nor its absence
        if marks.get(node.host) != mark and now is not None:
            moved_at[node.host] = now
        marks[node.host] = mark
    new_memory = AcrossMemory(most_alive=most, lost_at=lost_at, marks=marks, moved_at=moved_at)
    idle = {h: (now - t if now is not None else 0.0) for h, t in moved_at.items()}
    state, reasons, shown = _rules(nodes, policy, per_host, alive, most, lost, lost_at, idle)
    hosts = [n.host for n in nodes]
    verdict = Verdict(
        stage=stage,
        state=state,
        reasons=tuple(reasons),
        readings=shown,
        checked_at=now,
        host=", ".join(hosts),
        since=None,
        run=nodes[0].verdict.run,
    )
    return verdict, new_memory


def _rules(
    nodes: Sequence[NodeCheck],
    policy: PolicySpec,
    per_host: int | None,
    alive: Mapping[str, int | None],
    most: Mapping[str, int],
    lost: set[str],
    lost_at: Mapping[str, float],
    idle: Mapping[str, float],
) -> tuple[State, list[str], dict[str, Reading]]:
    chief = nodes[0]
    every = _readings(nodes)
    # Rule 1: a failure some node's own evidence shows.
    for k, node in enumerate(nodes):
        failed = [r for r in node.verdict.readings.values() if r.says is Says.FAILED]
        if failed or (node.verdict.state is State.FAILED and (k == 0 or policy.success == "all")):
            why = failed[0].detail if failed else node.verdict.reasons[0]
            return State.FAILED, [f"{node.host}: {why}", *_others(nodes, node)], every
    # Rule 2: ranks lost on a node while the others wait without progress.
    # Progress is CPU time, I/O, the log and the outputs (``_mark``): a GPU busy is not, for
    # NCCL spins at 100 % while it waits for a peer that is gone.
    waiting = [n for n in nodes if (alive[n.host] or 0) > 0]
    if lost and waiting and all(idle.get(n.host, 0.0) >= policy.stall_after for n in waiting):
        gone = "; ".join(
            _lost_words(h, alive[h], most.get(h, 0), per_host, lost_at.get(h)) for h in sorted(lost)
        )
        live = ", ".join(f"{n.host} ({alive[n.host]})" for n in waiting)
        quiet = min(idle.get(n.host, 0.0) for n in waiting)
        busy = [n.host for n in waiting if _gpu_busy(n.verdict)]
        return (
            State.FAILED,
            [
                f"{gone}; ranks alive on {live} with no progress for {quiet:.0f}s"
                " (CPU time, I/O, log and outputs unchanged)"
                + (f", GPUs busy on {', '.join(busy)}" if busy else "")
                + ": a collective waiting for a lost rank",
                *(f"{n.host}: {n.verdict.reasons[0]}" for n in waiting if n.verdict.reasons),
            ],
            every,
        )
    # Rule 3: a node that cannot be read.
    for node in nodes:
        if _unreadable(node.verdict):
            why = next(iter(node.verdict.readings.values())).detail
            return State.UNKNOWN, [f"{node.host} cannot be read: {why}", *_others(nodes, node)], every
    # Rule 4: node 0 complete and every other node done.
    held = [why for k, node in enumerate(nodes) if (why := _not_done(k, node, policy, per_host, most))]
    if not held:
        shown = {
            key: r
            for key, r in every.items()
            if r.says is Says.DONE or not (policy.success == "chief" and r.signal == "log")
        }
        left_out = sorted(k for k in every if k not in shown)
        notes = [f"{', '.join(left_out)}: not needed under success: chief"] if left_out else []
        hosts = ", ".join(n.host for n in nodes)
        return State.COMPLETE, [f"every host agrees ({hosts})", *chief.verdict.reasons, *notes], shown
    # Rule 5: the gravest of node 0's verdict and those of the nodes alive or holding it back;
    # with no rank alive anywhere, nothing is running: what holds the stage is unknown.
    holding = {h.split(":", 1)[0] for h in held}
    states = [chief.verdict.state] + [
        n.verdict.state for n in nodes[1:] if (alive[n.host] or 0) > 0 or n.host in holding
    ]
    fallback = State.RUNNING if waiting else State.UNKNOWN
    state = next((s for s in _GRAVITY if s in states), fallback)
    if lost and waiting and state is State.RUNNING:
        gone = "; ".join(
            _lost_words(h, alive[h], most.get(h, 0), per_host, lost_at.get(h)) for h in sorted(lost)
        )
        held.insert(
            0,
            f"{gone}; if the others make no progress for {policy.stall_after:g}s,"
            " it is a collective waiting for a lost rank",
        )
    return state, held, every


def _readings(nodes: Sequence[NodeCheck]) -> dict[str, Reading]:
    """Every node's readings, by ``signal@host``; what is read once (the outputs, a shared
    log) by its signal's name alone."""
    out: dict[str, Reading] = {}
    for node in nodes:
        for name, reading in node.verdict.readings.items():
            once = name == "outputs" or (name == "log" and not _per_host_log(nodes))
            out[name if once else f"{name}@{node.host}"] = reading
    return out


def _mark(verdict: Verdict) -> tuple[object, ...] | None:
    """What moves when a node's job makes progress: its CPU time and I/O, its log's size, the
    output count (None: the node could not be read)."""
    if _unreadable(verdict):
        return None
    r = verdict.readings
    p, lg, o = r.get("process"), r.get("log"), r.get("outputs")
    return (
        p.evidence.get("cpu_seconds") if p else None,
        p.evidence.get("io_bytes") if p else None,
        (lg.evidence.get("inode"), lg.evidence.get("size")) if lg else None,
        o.evidence.get("count") if o else None,
    )


def _gpu_busy(verdict: Verdict) -> bool:
    g = verdict.readings.get("gpu")
    return g is not None and g.says is Says.WORKING


def _per_host_log(nodes: Sequence[NodeCheck]) -> bool:
    return sum(1 for n in nodes if "log" in n.verdict.readings) > 1


def _alive(verdict: Verdict) -> int | None:
    """How many job processes the node's probe saw alive (None: not read)."""
    p = verdict.readings.get("process")
    if p is None or p.says is Says.UNKNOWN:
        return None
    count = p.evidence.get("alive")
    return count if isinstance(count, int) else None


def _lost(host: str, alive: int | None, most: int, per_host: int | None, verdict: Verdict) -> bool:
    if alive is None or most == 0:
        return False
    if per_host is not None:
        return most >= per_host and alive < per_host
    return alive == 0


def _lost_words(host: str, alive: int | None, most: int, per_host: int | None, at: float | None) -> str:
    when = f" (found gone at {_hms(at)})" if at is not None else ""
    if per_host is not None and alive:
        return f"{per_host - alive} of {per_host} ranks on {host} gone{when}"
    return f"every rank on {host} gone{when}"


def _hms(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).strftime("%H:%M:%S UTC")


def _unreadable(verdict: Verdict) -> bool:
    """The host could not be asked (no reading has a time on its clock)."""
    return all(r.read_at is None for r in verdict.readings.values())


def _not_done(
    k: int, node: NodeCheck, policy: PolicySpec, per_host: int | None, most: Mapping[str, int]
) -> str:
    """Why node ``k`` is not done ("" when it is)."""
    v = node.verdict
    if k == 0 and v.state is not State.COMPLETE:
        return f"{node.host} (node 0): {v.state}: {v.reasons[0] if v.reasons else ''}".rstrip(": ")
    chief_only = policy.success == "chief" and k > 0
    for name, r in v.readings.items():
        if r.says is Says.DONE or (chief_only and name == "log"):
            continue
        return f"{node.host}: {name} {r.says}: {r.detail}"
    p, own_log = v.readings.get("process"), v.readings.get("log")
    unseen = p is not None and not (p.evidence.get("seen_alive") or p.evidence.get("launched"))
    if k > 0 and unseen and (own_log is None or own_log.says is not Says.DONE):
        return (
            f"{node.host}: no job process seen in this watch, and nothing of its own says its"
            " ranks finished (a log path with {host} or {node}); they may never have run"
        )
    seen = most.get(node.host, 0)
    if per_host is not None and 0 < seen < per_host:
        return f"{node.host}: at most {seen} of {per_host} ranks seen alive: the others were never seen"
    return ""


def _others(nodes: Sequence[NodeCheck], but: NodeCheck) -> list[str]:
    return [f"{n.host}: {n.verdict.state}" for n in nodes if n is not but]
