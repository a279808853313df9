"""Seeing a process end over SSH: one exit watch per host, in one channel of its connection.

The local host sees an end with a pidfd (:mod:`sensors._hosts.exits`); a remote one has no
such thing, and a check only finds a process gone. This watch keeps one extra channel per
connection (one of :data:`~sensors._hosts.ssh.MAX_CHANNELS`, however many processes or
stages it watches) with a small POSIX sh on the host (:data:`WATCHER`): it is told the
processes to watch on its stdin, reads each one's ``/proc/PID/stat`` every
:data:`POLL_S` seconds, and writes when one went: the last time it found it alive, and the
first time it found it gone, both on the host's clock. Read-only: it reads /proc and the
clock, and signals nothing but its own poller (restarted when the list changes).

- **A process, not a PID**: each is named by its PID and its start ticks (the probe's read);
  a PID whose start ticks differ is another process (the PID was reused): the watched one
  has ended. A zombie (``Z``, ``X``) has ended though ``/proc/PID`` remains.
- **The clock**: the host's ``date +%s.%N`` where its ``date`` prints nanoseconds (GNU
  coreutils), read by the poller before each round of reads (a process found alive was alive
  at that read) and after a round that found one gone. Where ``date`` has no ``%N`` (BusyBox
  built without it) whole seconds from ``date +%s``: the last sighting alive is then known to
  the second (a lower bound: the read was at or after it), the first gone to the second after.
  The end is thus known within the poll (~50 ms, plus a fork of ``date`` and a round of
  reads) on a host with ``%N``, within ~1 s without.
- **In view from the first answer**: a checker that may find processes to watch warms the
  watch (:meth:`RemoteExitWatch.warm`) before its first probe: the channel is opened as soon
  as the connection is up, beside the probe's own shell, and not when the first process is
  handed over. Each channel starts the user's login shell (a ``conda init`` in ``.bashrc``
  takes a second or more); a job that ends within that second of the check that found it
  would otherwise end before its watch looked, its end unseen.
- **No round trip to a check**: a check hands its processes over (:meth:`RemoteExitWatch.watch`)
  and reads what is known (:meth:`RemoteExitWatch.ended`); a thread per connection opens the
  channel, sends the list and reads the answers.
- **Never a false end**: an end is only what the poller reported, with its own clock reads.
  A channel that dies (the connection lost, the watcher killed) forgets when its processes
  were last seen alive: a later channel that finds one gone has not seen it end (its end
  stays unknown, as before this watch: found gone at the next check), and one it finds alive
  is watched afresh.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import select
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sensors._hosts.exits import SeenEnd

__all__ = ["WATCHER", "RemoteExitWatch"]

log = logging.getLogger("crosscheck.ssh")

#: How often the host's poller reads each watched process's stat (s).
POLL_S = 0.05

#: The most processes one host's watch keeps in view at once; past it, new ones are not
#: watched. Measured here (2 shared cores, loaded): a poll of 100 processes took ~65 ms and
#: ~9 % of a core, of 500 130-220 ms (sh matches each against awk's whole answer).
MAX_WATCHED = 256

#: The most ends remembered (the oldest are forgotten first).
MAX_ENDS = 4096

#: How long the channel stays open with nothing to watch (the next job's processes reuse it,
#: and the host's login shell is not started again per job).
LINGER_S = 60.0

#: How long to wait before opening a channel again after one could not be opened or died.
RETRY_S = 1.0

#: The host's side. One compound command, so that the shell has parsed all of it (and read
#: nothing past it from stdin) before it says ``R``; only then is it sent lines to read.
#:
#: In: ``GEN PID:TICKS PID:TICKS ...``, the whole list each time it changes; the poller is
#: restarted with it. Out: ``P`` the shell's PID, ``N`` its PID namespace, ``C`` the clock's
#: step (s), ``I`` the poll (s), ``R`` ready; then from each poller ``S GEN`` (started),
#: ``W PID TICKS T`` (found alive at T, its first round), ``E PID TICKS LAST GONE`` (ended:
#: found alive at LAST, ``-`` where this poller never did, and gone at GONE), ``U PID TICKS``
#: (its stat cannot be read as a process's: no longer watched, its end unseen), ``H T`` (every
#: process it found alive and has not reported ended was alive at T: every 20 rounds, and when
#: it is stopped). The invariant behind ``H``: every key in ``__w_L`` was found alive at
#: ``__w_h``; the list is narrowed before ``__w_h`` moves on, so a TERM between them keeps it.
#:
#: Each poll costs three forks (``date``, ``awk``, ``sleep``) however many processes: one
#: ``awk`` reads every watched stat (sh's ``read`` takes a byte per system call). ``awk``
#: takes the PID from the file's name and only a file's first line, parsed after its last
#: ``) `` and only with all 20 fields there: a name with a newline (up to 15 bytes) cannot
#: pass for another process's fields; it reads as ``?``, not as an end. A file gone before
#: ``awk`` opened it stops mawk and BusyBox's awk: that poll tells nothing of the others
#: (``/proc/PID`` tested first; only an ``awk`` that succeeded says a process is alive).
WATCHER = rb"""{
set -f
export LC_ALL=C
echo "P $$"
echo "N $(readlink /proc/self/ns/pid 2>/dev/null)"
case $(date +%s.%N 2>/dev/null) in
*.[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) __w_f=+%s.%N; echo "C 0" ;;
*) __w_f=+%s; echo "C 1" ;;
esac
if sleep 0.05 2>/dev/null; then __w_s=0.05; else __w_s=1; fi
echo "I $__w_s"
__w_awk='FNR == 1 {
  p = FILENAME; sub(/^\/proc\//, "", p); sub(/\/stat$/, "", p)
  l = $0; i = 0
  while ((j = index(substr(l, i + 1), ") ")) > 0) i += j
  n = split(substr(l, i + 2), f, " ")
  if (i > 0 && n >= 20 && f[20] ~ /^[0-9]+$/ && length(f[1]) == 1) printf "%s:%s:%s ", p, f[20], f[1]
  else printf "%s:?:? ", p
}'
__w_poll() {
  trap '[ -n "$__w_h" ] && echo "H $__w_h"; exit 0' TERM
  echo "S $1"
  __w_h= __w_n=0 __w_1=1
  while [ -n "$__w_L" ]; do
    __w_t=$(date $__w_f) || exit 1
    case $__w_t in *[!0-9.]* | '') exit 1 ;; esac
    __w_keep= __w_gone= __w_lost= __w_files= __w_look=
    for __w_k in $__w_L; do
      if [ -e "/proc/${__w_k%:*}/stat" ]; then
        __w_files="$__w_files /proc/${__w_k%:*}/stat"; __w_look="$__w_look $__w_k"
      else
        __w_gone="$__w_gone $__w_k"
      fi
    done
    __w_ok=1
    if [ -n "$__w_files" ]; then
      __w_o=$(awk "$__w_awk" $__w_files 2>/dev/null) || __w_ok=
    fi
    if [ -n "$__w_ok" ]; then
      __w_o=" $__w_o "
      for __w_k in $__w_look; do
        case $__w_o in
        *" $__w_k:"[ZXx]" "*) __w_gone="$__w_gone $__w_k" ;;
        *" $__w_k:"?" "*)
          __w_keep="$__w_keep $__w_k"
          [ -z "$__w_1" ] || echo "W ${__w_k%:*} ${__w_k#*:} $__w_t" ;;
        *" ${__w_k%:*}:"[0-9]*) __w_gone="$__w_gone $__w_k" ;;
        *) __w_lost="$__w_lost $__w_k" ;;
        esac
      done
    else
      __w_keep=$__w_look
    fi
    if [ -n "$__w_gone" ]; then
      __w_g=$(date $__w_f) || exit 1
      for __w_k in $__w_gone; do echo "E ${__w_k%:*} ${__w_k#*:} ${__w_h:--} $__w_g"; done
    fi
    for __w_k in $__w_lost; do echo "U ${__w_k%:*} ${__w_k#*:}"; done
    __w_L=$__w_keep
    if [ -n "$__w_ok" ]; then
      __w_h=$__w_t
      __w_1=
      __w_n=$((__w_n + 1))
      if [ "$__w_n" -ge 20 ]; then echo "H $__w_h"; __w_n=0; fi
    fi
    [ -z "$__w_L" ] || sleep $__w_s
  done
}
echo R
__w_bg=
while IFS= read -r __w_in; do
  if [ -n "$__w_bg" ]; then kill "$__w_bg" 2>/dev/null; wait "$__w_bg"; fi
  __w_L=${__w_in#* }
  case $__w_in in *' '*) ;; *) __w_L= ;; esac
  __w_poll "${__w_in%% *}" &
  __w_bg=$!
done
if [ -n "$__w_bg" ]; then kill "$__w_bg" 2>/dev/null; wait "$__w_bg"; fi
}
"""

_NUM = re.compile(r"\d+(?:\.\d+)?$")

Key = tuple[int, int]


class _Channel(Protocol):
    closed: bool
    eof_received: bool

    def fileno(self) -> int: ...
    def recv_ready(self) -> bool: ...
    def recv(self, n: int) -> bytes: ...
    def recv_stderr_ready(self) -> bool: ...
    def recv_stderr(self, n: int) -> bytes: ...
    def sendall(self, data: bytes) -> None: ...
    def close(self) -> None: ...


#: Opens the watch's channel on the host's live connection, its shell started, and returns it
#: with the function that gives its slot back; None where there is no live connection or no
#: free slot now (the watch tries again later; it never connects by itself).
Opener = Callable[[], "tuple[Any, Callable[[], None]] | None"]


class RemoteExitWatch:
    """The ends of processes on one SSH host, as its watcher saw them (the host's clock).

    Same use as :class:`sensors._hosts.exits.ExitWatch`: :meth:`watch` a process the probe
    found alive, then :meth:`ended` says the last time it was known alive once it has ended.
    """

    available = True

    def __init__(self, opener: Opener, *, name: str = "") -> None:
        self._open = opener
        self.name = name
        self._cond = threading.Condition()
        self._pending: dict[Key, None] = {}  # watched, not known ended (ordered)
        self._alive: dict[Key, float] = {}  # the last time known alive, by the live channel
        self._confirmed: set[Key] = set()  # found alive by the current poller (``H`` is theirs)
        self._ends: dict[Key, SeenEnd] = {}
        self._unseen: dict[Key, None] = {}  # ended, when not seen
        self._dirty = False
        self._gen = 0
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None
        self._closed = False
        self._warm_until = 0.0  # time.monotonic(): kept open until then with nothing to watch
        # A check was refused a channel (see make_way): none is opened until one has its own.
        self._aside = False
        #: The watcher's facts, once a channel told them: its shell's PID on the host, its
        #: PID namespace, the clock's step (0: nanoseconds; 1: whole seconds) and the poll.
        self.remote_pid: int | None = None
        self.pidns: str | None = None
        self.clock_step: float | None = None
        self.poll_s: float | None = None
        #: Channels opened so far (tests read it: one per host, however many processes).
        self.channels = 0
        #: Whether a channel is open and its watcher ready now.
        self.live = False

    # -- a check's side (never waits on the host) -----------------------------------------

    def watch(self, pid: int, start_ticks: int) -> None:
        """Watch the process ``pid`` begun at ``start_ticks`` (from the probe's read) for its end."""
        key = (int(pid), int(start_ticks))
        with self._cond:
            if key in self._pending or key in self._ends or key in self._unseen:
                return
            if len(self._pending) >= MAX_WATCHED:
                return
            self._pending[key] = None
            self._dirty = True
            self._closed = False
            self._ensure_thread()
            self._poke()

    def warm(self, for_s: float = LINGER_S) -> None:
        """Open the channel ahead of any process to watch, and keep it open ``for_s`` with
        nothing to watch: a process handed over later is in view within a poll, not after a
        channel and a login shell are started for it. Opened once the host's connection is
        up (the watch never connects by itself); costs one idle shell on the host."""
        with self._cond:
            self._warm_until = max(self._warm_until, time.monotonic() + for_s)
            self._closed = False
            # No poke: a running thread reads the deadline on its own (every check of every
            # stage on the host warms it; a poke each would wake it as often).
            self._ensure_thread()

    def connected(self) -> None:
        """The host's connection is up: a watch waiting for one opens its channel now."""
        with self._cond:
            if self._thread is not None:
                self._poke()

    def make_way(self) -> None:
        """The server refused a check's channel (its MaxSessions below ``MAX_CHANNELS``: 1 on
        some hardened hosts): this watch's channel is given up, and none is opened again until
        a check has a channel of its own (:meth:`seated`). The checks come first: a watch
        that held the server's one session while the stage was checked (warm, retrying every
        second) left every check refused, for good. Its processes stay watched: a channel
        opened later that finds one gone has not seen it end (unseen, never made up)."""
        with self._cond:
            self._aside = True
            self._poke()

    def seated(self) -> None:
        """A check opened a channel of its own: a watch that made way may open one again."""
        with self._cond:
            if not self._aside:
                return
            self._aside = False
            if self._wanted():
                self._ensure_thread()
                self._poke()

    def _wanted(self) -> bool:
        """Whether the channel is wanted now (the lock held): processes to watch, or warm."""
        return (
            not self._closed
            and not self._aside
            and (bool(self._pending) or time.monotonic() < self._warm_until)
        )

    def ended(self, pid: int, start_ticks: int) -> float | None:
        """The last time the process was known alive, once it has been seen to end (None: not
        seen to end, or not watched): what was written by then was written while it lived."""
        end = self.end(pid, start_ticks)
        return end.alive if end is not None else None

    def end(self, pid: int, start_ticks: int) -> SeenEnd | None:
        """When the process ended, as an interval on the host's clock (None: not seen)."""
        with self._cond:
            return self._ends.get((int(pid), int(start_ticks)))

    def state(self, pid: int, start_ticks: int) -> str:
        """``ended``, ``unseen`` (ended, when not seen), ``watching`` (found alive by the
        live channel), ``pending`` (not yet found alive) or ``no`` (not watched)."""
        key = (int(pid), int(start_ticks))
        with self._cond:
            if key in self._ends:
                return "ended"
            if key in self._unseen:
                return "unseen"
            if key in self._pending:
                return "watching" if key in self._alive else "pending"
            return "no"

    def sees(self, view: str | None) -> bool:
        """Whether the processes of a probe with this view (:attr:`Meta.view`) are the ones
        this watch sees: the same PID namespace (True while no channel has said yet)."""
        return self.pidns is None or (view or "").startswith(self.pidns + " ")

    def close(self) -> None:
        """Stop watching: the channel is closed, its processes' ends are no longer seen."""
        with self._cond:
            self._closed = True
            self._warm_until = 0.0
            for key in self._pending:
                self._remember_unseen(key)
            self._pending.clear()
            self._alive.clear()
            self._poke()

    # -- the thread -----------------------------------------------------------------------

    def _poke(self) -> None:
        if self._wake is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")
        self._cond.notify_all()

    def _ensure_thread(self) -> None:
        if self._aside or (self._thread is not None and self._thread.is_alive()):
            return
        if self._wake is None:
            self._wake = os.pipe()
            os.set_blocking(self._wake[0], False)
            os.set_blocking(self._wake[1], False)
        self._thread = threading.Thread(target=self._run, name=f"crosscheck-exits-{self.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._wanted():
                    self._stop()
                    return
            try:
                opened = self._open()
            except Exception:  # the opener says why in the log; the watch tries again
                log.debug("%s: cannot open the exit watch's channel", self.name, exc_info=True)
                opened = None
            if opened is not None:
                chan, release = opened
                self.channels += 1
                try:
                    self._serve(chan)
                except Exception:  # a broken channel may raise anything: its ends are unknown
                    log.debug("%s: the exit watch's channel failed", self.name, exc_info=True)
                finally:
                    with contextlib.suppress(Exception):
                        chan.close()
                    release()
                    self._lost()
            with self._cond:
                if not self._wanted():
                    self._stop()
                    return
                self._cond.wait(RETRY_S)

    def _stop(self) -> None:
        """The thread ends (the lock held): its wake pipe goes with it."""
        self._thread = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None

    def _lost(self) -> None:
        """The channel is gone: when its processes were last seen alive is forgotten (a later
        channel that finds one gone has not seen it end), and the list is sent anew."""
        with self._cond:
            self.live = False
            self._alive.clear()
            self._confirmed.clear()
            self._dirty = True

    def _serve(self, chan: _Channel) -> None:
        assert self._wake is not None
        chan.sendall(WATCHER)
        poller = select.poll()
        poller.register(chan.fileno(), select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        buf = b""
        ready = False
        idle_since: float | None = None
        while True:
            with self._cond:
                if self._closed or self._aside:
                    return
                send = None
                if ready and self._dirty:
                    self._gen += 1
                    keys = " ".join(f"{pid}:{ticks}" for pid, ticks in self._pending)
                    send = f"{self._gen} {keys}\n".encode()
                    self._dirty = False
                if self._pending or time.monotonic() < self._warm_until:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > LINGER_S:
                    return
            if send is not None:
                chan.sendall(send)
            poller.poll(1000)
            with contextlib.suppress(OSError):
                os.read(self._wake[0], 4096)
            while chan.recv_ready():
                buf += chan.recv(1 << 16)
            while chan.recv_stderr_ready():
                chan.recv_stderr(1 << 16)  # the login shell's noise
            *lines, buf = buf.split(b"\n")
            for line in lines:
                ready = self._take(line.decode("ascii", "replace").split()) or ready
            if (chan.eof_received or chan.closed) and not chan.recv_ready():
                return

    def _take(self, words: list[str]) -> bool:
        """One line of the watcher's; True once it is ready for the list."""
        if not words:
            return False
        kind, args = words[0], words[1:]
        with self._cond:
            if kind == "R":
                self.live = True
                return True
            if kind == "P" and args and args[0].isdigit():
                self.remote_pid = int(args[0])
            elif kind == "N":
                pidns = args[0] if args else ""
                if self.pidns is not None and pidns != self.pidns:
                    # Another view of the host's processes than the last channel's: nothing
                    # seen there is known here.
                    self._ends.clear()
                self.pidns = pidns
            elif kind == "C" and args and _NUM.match(args[0]):
                self.clock_step = float(args[0])
            elif kind == "I" and args and _NUM.match(args[0]):
                self.poll_s = float(args[0])
            elif kind == "S":
                self._confirmed.clear()
            elif kind == "W" and len(args) == 3 and _NUM.match(args[2]):
                key = _key(args)
                if key is not None and key in self._pending:
                    self._alive[key] = max(float(args[2]), self._alive.get(key, 0.0))
                    self._confirmed.add(key)
            elif kind == "H" and len(args) == 1 and _NUM.match(args[0]):
                at = float(args[0])
                for key in self._confirmed:
                    if key in self._pending:
                        self._alive[key] = max(at, self._alive.get(key, 0.0))
            elif kind == "U" and len(args) == 2:
                key = _key(args)
                if key is not None and key in self._pending:
                    # Its stat cannot be read as a process's here (a name with a newline):
                    # no longer watched, its end not seen.
                    del self._pending[key]
                    self._alive.pop(key, None)
                    self._remember_unseen(key)
            elif kind == "E" and len(args) == 4 and _NUM.match(args[3]):
                key = _key(args)
                if key is not None and key in self._pending:
                    self._ended(key, args[2], float(args[3]))
        return False

    def _ended(self, key: Key, last: str, gone: float) -> None:
        known = [self._alive[key]] if key in self._alive else []
        if _NUM.match(last):
            known.append(float(last))
        del self._pending[key]
        self._alive.pop(key, None)
        self._confirmed.discard(key)
        if not known or self.clock_step is None:
            self._remember_unseen(key)  # gone when this channel first looked: the end unseen
            return
        # A clock of whole seconds read S: the read came in [S, S + 1).
        self._ends[key] = SeenEnd(alive=max(known), gone=gone + self.clock_step)
        while len(self._ends) > MAX_ENDS:
            self._ends.pop(next(iter(self._ends)))

    def _remember_unseen(self, key: Key) -> None:
        self._unseen[key] = None
        while len(self._unseen) > MAX_ENDS:
            self._unseen.pop(next(iter(self._unseen)))


def _key(args: list[str]) -> Key | None:
    if args[0].isdigit() and args[1].isdigit():
        return int(args[0]), int(args[1])
    return None
