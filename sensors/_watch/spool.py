"""Output that never holds a watch: lines for a stream whose reader may stop reading.

``crosscheck serve --json | consumer`` wrote each verdict to stdout from the scheduler's own
thread: a consumer that stopped reading filled the pipe (64 KiB on Linux), the write blocked,
and with it every check and every lease renewal — the other watchers then took the stages
over from a watcher that was alive. The same holds for the log on stderr.

A :class:`Spool` is a file-like object (``write``/``flush``, so ``logging.StreamHandler`` takes
it) whose ``write`` never blocks: it appends the text to a buffer bounded in bytes, and a
thread of its own writes the buffer to the file descriptor with ``os.write`` (no Python-level
lock is held while the kernel blocks, so a stuck writer cannot deadlock interpreter exit).
Text that does not fit is dropped and counted (``dropped``), and ``on_drop(count)`` is called
at the first drop and then at most once a minute; a ``note`` (``note(count) -> str``) is
written into the stream itself once the reader catches up, where that does not break the
stream's format (the log: yes; JSON lines: no, ``on_drop`` logs it instead).

Why drop and not grow: a reader that never comes back would grow the buffer until memory
runs out; a watcher that is alive, keeps its leases and says what it dropped (stderr, the
``crosscheck_output_lines_dropped_total`` metric) is worth more than a complete stream.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections import deque
from collections.abc import Callable

#: Text waiting for a slow reader, at most (a few minutes of a large fleet's JSON lines).
LIMIT_BYTES = 8 * 1024 * 1024
#: ``on_drop`` is called at the first drop, then at most this often.
REPORT_EVERY_S = 60.0


class Spool:
    """Writes text to ``fd`` from a thread of its own; ``write`` never blocks.

    Example:
        >>> spool = Spool(1, "stdout")  # doctest: +SKIP
        >>> spool.write('{"stage": "extract"}\\n')  # doctest: +SKIP
    """

    def __init__(
        self,
        fd: int,
        name: str,
        *,
        limit_bytes: int = LIMIT_BYTES,
        on_drop: Callable[[int], None] | None = None,
        note: Callable[[int], str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fd, self.name = fd, name
        self.limit_bytes = limit_bytes
        self.on_drop, self.note, self.clock = on_drop, note, clock
        #: Lines (writes) dropped so far, and the error that ended the writing, if any.
        self.dropped = 0
        self.broken: OSError | None = None
        #: Called once (from the writing thread) when the reader has gone away (EPIPE): a
        #: watcher whose JSON lines nobody reads any more stops, as `| head` expects.
        self.on_broken: Callable[[], None] | None = None
        self._chunks: deque[bytes] = deque()
        self._pending = 0
        self._inflight = 0  # writes taken by the thread, not yet written
        self._unnoted = 0
        self._reported_at: float | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"crosscheck-{name}")
        self._thread.start()

    # -- the file-like side ------------------------------------------------------------------

    def write(self, text: str) -> int:
        data = text.encode("utf-8", "backslashreplace")
        report = None
        with self._cond:
            if self._closed or self.broken is not None or self._pending + len(data) > self.limit_bytes:
                self.dropped += 1
                self._unnoted += 1
                now = self.clock()
                if self._reported_at is None or now - self._reported_at >= REPORT_EVERY_S:
                    self._reported_at, report = now, self.dropped
            else:
                self._chunks.append(data)
                self._pending += len(data)
                self._cond.notify()
        if report is not None and self.on_drop is not None:
            self.on_drop(report)  # outside the lock: it may log, and the log may be a spool
        return len(text)

    def flush(self) -> None:
        """Nothing to do: the spool's thread writes as soon as it can, and ``write`` never
        waits for it (see :meth:`close` for the end)."""

    def writable(self) -> bool:
        return True

    # -- the writing thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._chunks and not self._closed:
                    self._cond.wait()
                if not self._chunks:
                    return
                batch = list(self._chunks)
                self._chunks.clear()
                self._inflight = len(batch)
                unnoted, self._unnoted = self._unnoted, 0
            data = b"".join(batch)
            if unnoted and self.note is not None:
                data = self.note(unnoted).encode("utf-8", "backslashreplace") + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError as exc:  # the reader went away (EPIPE), the descriptor is gone
                with self._cond:
                    self.broken = exc
                    self.dropped += len(batch) + len(self._chunks)
                    self._chunks.clear()
                    self._pending = self._inflight = 0
                if self.on_broken is not None and exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    self.on_broken()
                return
            with self._cond:
                # The bytes of this batch leave the bound only now that they are written: a
                # blocked write keeps counting against it.
                self._pending -= sum(len(chunk) for chunk in batch)
                self._inflight = 0

    def close(self, timeout: float = 2.0) -> int:
        """Write what is waiting, for at most ``timeout`` seconds; the number of writes that
        never reached the stream (dropped, or still waiting at the end)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._cond:
            return self.dropped + len(self._chunks) + self._inflight
