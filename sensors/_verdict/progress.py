"""What moved between two checks, and the clocks the rules read (idle, D, gone since)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from sensors._base.model import Reading, Says
from sensors._config.stage import PolicySpec


def ev(r: Reading | None, key: str) -> object:
    return None if r is None else r.evidence.get(key)


def short(o: Reading) -> bool:
    count, expected = ev(o, "count"), ev(o, "expected")
    return isinstance(count, int) and isinstance(expected, int) and count < expected


def ran(p: Reading | None, lg: Reading | None) -> bool:
    """Whether the job is known to have run in this watch: seen alive, launched by it, or
    its run's completion line read. A process signal that finds no process then says the
    job is over, not that it has not started yet."""
    return bool(ev(p, "seen_alive") or ev(p, "launched")) or (lg is not None and lg.says is Says.DONE)


def details(readings: Mapping[str, Reading]) -> list[str]:
    return [f"{r.signal}: {r.detail}" for r in readings.values()]


def progress(readings: Mapping[str, Reading], previous: Mapping[str, Reading]) -> list[str]:
    """What moved since the previous check (empty list: nothing did, or no previous)."""
    moved: list[str] = []
    p, pp = readings.get("process"), previous.get("process")
    if p and pp and p.says is Says.WORKING and pp.says is Says.WORKING:
        now, before = p.evidence.get, pp.evidence.get
        if now("pid") == before("pid"):
            cpu, pcpu = now("cpu_seconds"), before("cpu_seconds")
            if isinstance(cpu, (int, float)) and isinstance(pcpu, (int, float)) and cpu > pcpu:
                moved.append(f"CPU time +{cpu - pcpu:.2f}s")
            io, pio = now("io_bytes"), before("io_bytes")
            if isinstance(io, int) and isinstance(pio, int) and io > pio:
                moved.append(f"I/O +{io - pio} bytes")
    lg, plg = readings.get("log"), previous.get("log")
    if lg and plg:
        now, before = lg.evidence.get, plg.evidence.get
        size, psize = now("size"), before("size")
        if size is not None and psize is not None and (size != psize or now("inode") != before("inode")):
            # Said as it happened: a log rotated or replaced (another inode) or truncated did
            # not grow (user s15: "log grew" of one that went from 768 to 192 bytes).
            if now("inode") != before("inode") or now("rotated"):
                moved.append("log rotated or replaced")
            elif size < psize or now("truncated"):
                moved.append("log truncated")
            else:
                moved.append("log grew")
        elif size is not None and before("absent"):
            moved.append("log appeared")
    o, po = readings.get("outputs"), previous.get("outputs")
    if o and po:
        count, pcount = o.evidence.get("count"), po.evidence.get("count")
        if count is not None and pcount is not None and count != pcount:
            moved.append(f"outputs {pcount} → {count}")
        elif count is not None and po.evidence.get("absent"):
            moved.append("outputs appeared")
    g = readings.get("gpu")
    if g and g.says is Says.WORKING and g.evidence.get("job_gpu_busy") is True:
        # A long kernel with the host thread blocked moves no counter: the job's own GPU
        # work is progress too (only when attributed to its PIDs, not any busy device).
        moved.append("the job's GPU busy")
    return moved


class Clocks(NamedTuple):
    """The times the rules judge by, updated for this check (monitored host's clock)."""

    moved: list[str]  # what progressed since the previous check
    last_progress_at: float
    idle_for: float  # seconds without progress
    d_since: float | None  # in state D since
    stuck_d: bool  # in D beyond stuck_in_d_after: no progress, whatever moved
    gone_since: float | None  # the process signal says gone since
    gone_for: float
    #: The previous check already found the job over (gone, after it was known to have
    #: run): every reading of this check was taken after its end. A probe counts outputs
    #: before it reads the process table, so at the check that first finds the job over its
    #: outputs may predate the job's last writes.
    over_before: bool = False
    #: The stall clock (re)started at this check with nothing moved: the job first seen at
    #: work here (a first check, or begun again), nothing of it to compare with yet.
    started: bool = False


def clocks(
    readings: Mapping[str, Reading],
    previous: Mapping[str, Reading],
    policy: PolicySpec,
    last_progress_at: float | None,
    d_since: float | None,
    gone_since: float | None,
    now: float,
) -> Clocks:
    p, pp = readings.get("process"), previous.get("process")
    moved = progress(readings, previous)
    first = not previous
    # The stall clock starts when the job is first seen alive: a watch begun before its job
    # (or a job started again after it was gone) has seen no progress of it, nor any lack
    # of it, before then. A process unknown at the last check is no such start: a host that
    # answers every other check must not hide a hung job.
    appeared = p is not None and p.says is Says.WORKING and (pp is None or pp.says is Says.DONE)
    restart = moved or first or appeared or last_progress_at is None
    # restart covers last_progress_at is None; said again for mypy, which cannot see through it.
    last_progress = now if restart or last_progress_at is None else last_progress_at
    in_d = p is not None and p.says is Says.WORKING and ev(p, "state") == "D"
    d_since = (d_since or now) if in_d else None
    stuck_d = in_d and d_since is not None and now - d_since >= policy.stuck_in_d_after
    if stuck_d:
        # Uninterruptible sleep this long is the kernel's hung-task territory: it does not
        # count as progress, whatever counters moved (the Ceph hang in incident 2).
        last_progress = last_progress_at if last_progress_at is not None else now
    if p is not None and p.says is Says.DONE:
        gone_since = gone_since or now
    elif p is not None and p.says is Says.WORKING:
        gone_since = None
    gone_for = now - (gone_since or now)
    over_before = pp is not None and pp.says is Says.DONE and ran(pp, previous.get("log"))
    return Clocks(
        moved,
        last_progress,
        now - last_progress,
        d_since,
        stuck_d,
        gone_since,
        gone_for,
        over_before,
        started=restart and not moved and not stuck_d,
    )
