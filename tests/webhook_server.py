"""A real HTTP server on 127.0.0.1 that stands in for a Slack incoming webhook in tests.

It records every request (method, path, headers, body) and answers from a per-test script of
responses: ``200``, ``500``, ``429`` with ``Retry-After``, a slow answer, or one held until the
test releases it (a server that hangs, without the test waiting on a clock).

Example:
    >>> with WebhookServer() as hook:  # doctest: +SKIP
    ...     hook.respond(Reply(500), Reply(200))
    ...     httpx.post(hook.url, json={"text": "hi"})
    ...     hook.requests[0].json()
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Far beyond any test's bound, short enough that a forgotten hold cannot wedge the suite.
_HOLD_LIMIT = 120.0


@dataclass(frozen=True)
class Reply:
    """One scripted answer.

    Attributes:
        status: the HTTP status.
        body: the response body (Slack answers ``ok``).
        headers: extra headers, e.g. ``{"Retry-After": "3"}``.
        delay: seconds to wait before answering (a slow server).
        hold: answer only after the test calls ``WebhookServer.release()`` (a hung server).
        trickle: send the answer one byte at a time, this many seconds apart (a server that
            never lets a read time out); stops when the client or the server goes.
    """

    status: int = 200
    body: str = "ok"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hold: bool = False
    trickle: float = 0.0


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookServer:
    """A threaded HTTP server on 127.0.0.1 with a random, secret-looking webhook path.

    ``url`` looks like a Slack webhook (``/services/T…/B…/<token>``) so tests can assert the
    token never appears in output. Use as a context manager, or call ``close()``.
    """

    def __init__(self) -> None:
        self.token = secrets.token_hex(12)
        self.path = f"/services/TTEST/BTEST/{self.token}"
        self.requests: list[Recorded] = []
        self.answered = 0  # requests whose reply was written (or whose client had gone)
        self._script: deque[Reply] = deque()
        self._default = Reply()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._closed = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-server", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def respond(self, *replies: Reply, default: Reply | None = None) -> None:
        """Script the next answers, in order; after them every request gets ``default``."""
        with self._lock:
            self._script.extend(replies)
            if default is not None:
                self._default = default

    def release(self) -> None:
        """Let every held request (``Reply(hold=True)``) answer now."""
        self._released.set()

    def wait_answered(self, count: int, timeout: float = 30.0) -> bool:
        """Wait until ``count`` requests have been answered (for held or slow replies)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._lock:
                if self.answered >= count:
                    return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        self._closed.set()
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def __enter__(self) -> WebhookServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_reply(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else self._default

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with server._lock:
                    server.requests.append(
                        Recorded(self.command, self.path, dict(self.headers.items()), body)
                    )
                reply = server._next_reply()
                if reply.hold:
                    server._released.wait(_HOLD_LIMIT)
                if reply.delay:
                    time.sleep(reply.delay)
                data = reply.body.encode()
                if reply.trickle:
                    self._trickle(reply, data)
                    return
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "text/plain; charset=utf-8")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout) before we answered: that is the point
                finally:
                    with server._lock:
                        server.answered += 1

            def _trickle(self, reply: Reply, data: bytes) -> None:
                head = (
                    f"HTTP/1.1 {reply.status} OK\r\nContent-Type: text/plain\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n"
                ).encode()
                try:
                    for i in range(len(head + data)):
                        if server._closed.wait(reply.trickle):
                            break
                        self.wfile.write((head + data)[i : i + 1])
                        self.wfile.flush()
                except OSError:
                    pass  # the client gave up: that is the point
                finally:
                    self.close_connection = True
                    with server._lock:
                        server.answered += 1

            do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                # The default writes the request line, secret path included, to stderr.
                pass

        return Handler
