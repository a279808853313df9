"""Seeing a process end: when a job's process ended, not only that it was gone at a check.

A check finds a process gone, never when it went: anything written between its last sighting
alive and that check may be a later run's (see ``_whose`` in the log signal). Where the end
itself can be seen, what was written before it is the process's own run's.

On the local host a pidfd (Linux 5.3+) turns readable when its process ends: one thread
polls every pidfd this machine's watches hold, every 5 ms while there are any, and keeps for
each that fires the last time it was found alive: its end came after that (within the poll's
5 ms of it unless the thread ran late), and nothing written by then was written after it.
Never the time the thread woke: it may wake late, and a later run may have written meanwhile.
Read-only (a pidfd only observes), no round trip, one thread and one descriptor per watched
process.

A pidfd is opened for a PID the probe just read, and bound to that process by its start time:
the PID's ``/proc/PID/stat`` start ticks are read after the pidfd is open (a pidfd pins its
process: the PID cannot be reused while it is held), and one that differs from the probe's is
another process, not watched.

Over SSH the host's one exit watch does the same in a channel of its connection
(:mod:`sensors._hosts.ssh_exits`), on the host's clock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("crosscheck")

__all__ = ["ExitWatch", "SeenEnd", "local_exits"]

#: How often the thread looks (ms) while it watches a process: the precision of an end.
_POLL_MS = 5

#: The most processes one watch keeps (a host's job and its workers; past it, the oldest
#: ends are forgotten first and new processes are not watched).
_MAX_WATCHED = 4096


@dataclass(frozen=True)
class SeenEnd:
    """When a watched process ended, as an interval on its host's clock: it was alive at
    ``alive`` (or later: a lower bound of the end) and gone by ``gone``."""

    alive: float
    gone: float


class ExitWatch:
    """The ends of processes on this machine, as a thread saw them (``time.time()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fds: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, start ticks)
        # Watched since the thread last found every pidfd not readable: a process registered
        # after that was not known alive then (its end is no earlier than its registration).
        self._since: dict[int, float] = {}
        self._ends: dict[tuple[int, int], SeenEnd] = {}  # (pid, start ticks) -> when it ended
        self._watched: set[tuple[int, int]] = set()
        self._poll: select.poll | None = None
        self._wake: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self.available = hasattr(os, "pidfd_open")

    def watch(self, pid: int, start_ticks: int) -> None:
        """Watch the process ``pid`` begun at ``start_ticks`` (from the probe's read) for its end."""
        key = (int(pid), int(start_ticks))
        if not self.available:
            return
        with self._lock:
            if key in self._watched or key in self._ends or len(self._watched) >= _MAX_WATCHED:
                return
        try:
            fd = os.pidfd_open(key[0])
        except OSError:
            return  # gone already (or not allowed): its end is not seen
        if proc_start_ticks(key[0]) != key[1]:
            os.close(fd)  # the PID is another process's now
            return
        alive = time.time()
        probe = select.poll()
        probe.register(fd, select.POLLIN)
        if probe.poll(0):
            os.close(fd)  # ended already (a zombie): when is not known
            return
        with self._lock:
            self._ensure_thread()
            assert self._poll is not None and self._wake is not None
            self._fds[fd] = key
            self._watched.add(key)
            # Alive now (its start ticks were just read): never known alive before this.
            self._since[fd] = alive
            self._poll.register(fd, select.POLLIN)
            os.write(self._wake[1], b"x")

    def ended(self, pid: int, start_ticks: int) -> float | None:
        """The last time the process was known alive, once it has ended (None: not seen to
        end, or not watched): what was written by then was written while it lived."""
        end = self.end(pid, start_ticks)
        return end.alive if end is not None else None

    def end(self, pid: int, start_ticks: int) -> SeenEnd | None:
        """When the process ended, as an interval (None: not seen to end, or not watched)."""
        with self._lock:
            return self._ends.get((int(pid), int(start_ticks)))

    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        self._poll = select.poll()
        self._wake = os.pipe()
        os.set_blocking(self._wake[0], False)
        self._poll.register(self._wake[0], select.POLLIN)
        self._thread = threading.Thread(target=self._run, name="crosscheck-exits", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._poll is not None and self._wake is not None
        wake = self._wake[0]
        # Every watched process is alive at ``alive``: a time read before a poll that then
        # found its pidfd not readable. When one turns readable, the last such time is what
        # is known of its end: it was alive then, and ended before now. Never the time the
        # thread woke (it may wake late, and a later run may have written meanwhile).
        alive = time.time()
        while True:
            before = time.time()
            try:
                events = self._poll.poll(_POLL_MS if self._fds else None)
            except InterruptedError:
                continue
            ended = {fd for fd, _ in events if fd != wake}
            gone = time.time()
            if any(fd == wake for fd, _ in events):
                with contextlib.suppress(BlockingIOError):
                    os.read(wake, 4096)
            for fd in ended:
                with self._lock:
                    key = self._fds.pop(fd, None)
                    if key is None:
                        continue
                    self._poll.unregister(fd)
                    self._watched.discard(key)
                    self._ends[key] = SeenEnd(min(alive, self._since.pop(fd, alive)), gone)
                    while len(self._ends) > _MAX_WATCHED:
                        self._ends.pop(next(iter(self._ends)))
                os.close(fd)
            if not ended:
                alive = before
                with self._lock:
                    self._since.clear()


def proc_start_ticks(pid: int) -> int | None:
    """The start of a process, in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


_LOCAL: ExitWatch | None = None
_LOCAL_LOCK = threading.Lock()


def local_exits() -> ExitWatch:
    """The one exit watch of this machine (every local watch shares its thread)."""
    global _LOCAL
    with _LOCAL_LOCK:
        if _LOCAL is None:
            _LOCAL = ExitWatch()
        return _LOCAL
