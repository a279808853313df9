"""The command's standard streams, made safe for pipes that close early.

:func:`guarded_streams` wraps ``sys.stdout`` and ``sys.stderr`` for the length of a command,
so that a reader that goes away early (``crosscheck status s.yaml | head -1``) ends the
command quietly, with the exit code of what it had decided, where the next write would have
raised ``BrokenPipeError`` (a traceback and exit code 1): a write to a closed pipe is dropped,
the stream's file descriptor is pointed at ``/dev/null``, and the callbacks registered with
:func:`on_closed` run once. Why, and what goes through it: docs/architecture.md, "Design
notes".

Example:
    >>> import io
    >>> class Closed(io.StringIO):
    ...     def write(self, s):
    ...         raise BrokenPipeError(32, "Broken pipe")
    >>> out = Guarded(Closed())
    >>> out.write("a verdict\\n"), out.closed_pipe
    (10, True)
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["Guarded", "guarded_streams", "is_terminal", "on_closed", "stdout_closed"]


class Guarded:
    """A text stream whose writes to a closed pipe are dropped instead of raised."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.closed_pipe = False

    @property
    def wrapped(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        if not self.closed_pipe:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._closed(exc)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.closed_pipe:
            try:
                self._stream.flush()
            except OSError as exc:
                self._closed(exc)

    def isatty(self) -> bool:
        return not self.closed_pipe and self._stream.isatty()

    def on_closed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when this stream's pipe closes (at once if it already has)."""
        with self._lock:
            if not self.closed_pipe:
                self._callbacks.append(callback)
                return
        callback()

    def _closed(self, exc: OSError) -> None:
        if not isinstance(exc, BrokenPipeError) and exc.errno not in (errno.EPIPE, errno.ECONNRESET):
            raise exc
        with self._lock:
            if self.closed_pipe:
                return
            self.closed_pipe = True
            callbacks, self._callbacks = self._callbacks, []
        # Whatever is still buffered would be flushed (and fail) when the interpreter exits.
        with contextlib.suppress(Exception):
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        for callback in callbacks:
            callback()

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, buffer, ...: the stream's
        return getattr(self._stream, name)


def on_closed(callback: Callable[[], None]) -> None:
    """Call ``callback`` once when standard output's pipe closes (while guarded)."""
    if isinstance(sys.stdout, Guarded):
        sys.stdout.on_closed(callback)


def stdout_closed() -> bool:
    """Whether standard output's reader has gone away (while guarded)."""
    return isinstance(sys.stdout, Guarded) and sys.stdout.closed_pipe


def is_terminal() -> bool:
    """Whether standard output is a terminal (a person reading), not a pipe or a file."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def guarded_streams() -> Iterator[Guarded]:
    """``sys.stdout`` and ``sys.stderr`` guarded for the block; restored after it (the
    stdout guard is what it yields). What is buffered is flushed before the block ends, while
    a closed pipe can still be dropped quietly."""
    saved = sys.stdout, sys.stderr
    out = sys.stdout if isinstance(sys.stdout, Guarded) else Guarded(sys.stdout)
    err = sys.stderr if isinstance(sys.stderr, Guarded) else Guarded(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        yield out
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved
