"""A spool (sensors/_watch/spool.py) on a real pipe that nobody reads: writing never blocks, what
does not fit is dropped and counted, and the reader who comes back is told how much."""

from __future__ import annotations

import fcntl
import os
import re
import time

from sensors._watch.spool import Spool


def test_a_pipe_nobody_reads_never_blocks_a_write_and_the_drops_are_counted() -> None:
    read_end, write_end = os.pipe()
    try:
        size = fcntl.fcntl(write_end, 1032)  # F_GETPIPE_SZ: what the kernel holds before blocking
        reported: list[int] = []
        spool = Spool(
            write_end,
            "stdout",
            limit_bytes=64 * 1024,
            on_drop=reported.append,
            note="[{} lines dropped]\n".format,
        )
        line = "x" * 999 + "\n"
        slowest = 0.0
        for _ in range(size // 1000 + 500):  # the pipe, the spool's bound, and then some
            began = time.monotonic()
            spool.write(line)
            slowest = max(slowest, time.monotonic() - began)
        assert slowest < 0.05  # no write waited for the reader
        time.sleep(0.2)
        assert spool.dropped > 0
        assert reported == [1]  # said at the first drop, then at most once a minute
        # The reader comes back: what was spooled arrives, preceded by how much was not.
        os.set_blocking(read_end, False)
        got = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and b"lines dropped]" not in got:
            try:
                got += os.read(read_end, 1 << 20)
            except BlockingIOError:
                spool.write(line)  # the next write after the drops carries the note
                time.sleep(0.05)
        noted = re.search(rb"\[(\d+) lines dropped\]", got)
        assert noted is not None and 1 <= int(noted.group(1)) <= spool.dropped
        assert spool.close(timeout=2.0) == spool.dropped
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_reader_that_went_away_ends_the_writing_not_the_writer() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    spool = Spool(write_end, "stdout")
    try:
        spool.write("one\n")
        deadline = time.monotonic() + 5
        while spool.broken is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert isinstance(spool.broken, BrokenPipeError)
        spool.write("two\n")  # dropped, counted, never raised
        assert spool.close() == 2
    finally:
        os.close(write_end)
