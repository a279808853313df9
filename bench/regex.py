"""Stage regexes under RE2 and under Python's backtracking ``re``, side by side.

Cases (each the median of N runs in this one process, no match unless said):

- ``.*(Traceback|CUDA error)`` searched in one long log line (no newline, no match): ``re``
  is quadratic in the line's length, RE2 linear. ``re`` is timed on lines up to
  ``--re-max-kb`` (default 16 KiB: 64 KiB takes tens of seconds); RE2 on all of them.
- ``read_log`` on a full ``log.tail_bytes`` tail (64 MiB, the largest allowed) of 80-byte
  lines whose last line is the completion marker, so every line is examined: the whole
  parsing cost of one check at the bound, with the RE2 engine crosscheck uses.

Run: ``python bench/regex.py [--repeat 3] [--re-max-kb 16] [--tail-mib 64]``.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sensors._signals.log as log_signal
from sensors._base.probe import Meta
from sensors._base.regex import compile_user_regex
from sensors._config.stage import LogSpec
from sensors._signals.log import read_log

PATTERN = r".*(Traceback|CUDA error)"


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class _BacktrackingOnly:
    """``compile_user_regex`` as it was before RE2: Python's re, whole text."""

    def __init__(self, pattern: str, *, multiline: bool = False) -> None:
        self._rx = re.compile(pattern, re.MULTILINE if multiline else 0)

    def search(self, text: str) -> re.Match[str] | None:
        return self._rx.search(text)


@contextlib.contextmanager
def _engine(factory):
    saved = log_signal.compile_user_regex
    log_signal.compile_user_regex = factory
    try:
        yield
    finally:
        log_signal.compile_user_regex = saved


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--re-max-kb", type=int, default=16)
    ap.add_argument("--tail-mib", type=int, default=64)
    args = ap.parse_args()

    linear = compile_user_regex(PATTERN)
    assert linear.engine == "re2"
    backtracking = re.compile(PATTERN)
    print(f"pattern {PATTERN!r}, one line of N KiB, no match (median of {args.repeat})")
    print(f"{'line':>8} {'re (s)':>10} {'RE2 (s)':>10} {'re / RE2':>10}")
    for kb in (4, 8, 16, 32, 64, 1024, 65536):
        line = "x" * (kb * 1024)
        t_re2 = _median_s(lambda line=line: linear.search(line), args.repeat)
        if kb <= args.re_max_kb:
            t_re = _median_s(lambda line=line: backtracking.search(line), args.repeat)
            print(f"{kb:>6}Ki {t_re:>10.4f} {t_re2:>10.6f} {t_re / t_re2:>9.0f}x")
        else:
            print(f"{kb:>6}Ki {'(skipped)':>10} {t_re2:>10.6f} {'':>10}")

    size = args.tail_mib << 20
    line = "step 123/456 loss 0.1234 lr 3e-4 " + "." * 46 + "\n"  # 80 bytes
    tail = (line * (size // len(line))).encode()[: size - 32] + b"Extraction complete\n"
    sections = {"log_stat": f"1 {len(tail)} 0\n".encode(), "log_tail": tail}
    spec = LogSpec(
        path="/x.log",
        complete=r"^Extraction complete",
        error=PATTERN,
        progress=r"step (?P<done>\d+)/(?P<total>\d+)",
        tail_bytes=max(4096, min(size, 64 << 20)),
    )
    meta = Meta(100.0, None, None, None, 100, None, None, False)
    t = _median_s(lambda: read_log(spec, sections, meta, None, host="bench"), args.repeat)
    # The same with Python's re in RE2's place (what crosscheck did before RE2): the lines
    # are short, so re's quadratic cost does not show; this is the per-call overhead.
    with _engine(_BacktrackingOnly):
        t_re = _median_s(lambda: read_log(spec, sections, meta, None, host="bench"), args.repeat)
    lines = tail.count(b"\n")
    print(f"\nread_log on a {args.tail_mib} MiB tail of 80-byte lines ({lines:,}, every line examined)")
    print(f"  RE2 (crosscheck): {t:.2f}s   re (before): {t_re:.2f}s   re / RE2: {t_re / t:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
