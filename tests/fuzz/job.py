"""The fuzzer's job: a real process driven one command at a time through its stdin.

Run as a script (``python -I -S -u job.py --tag T --log PATH ...``: the standard library only,
no package import, ~20 ms to start), it writes what a pipeline stage writes — log lines
(appended to the log the way a launcher's ``>>`` does), output files in a directory or
records in a JSONL file — but only when told, and acknowledges each command on stdout
(``ok``), so a history is the same sequence of writes every time it is replayed.

Commands, one per line (the text after the verb is taken whole):

=====================  ====================================================================
``log TEXT``           append ``TEXT`` and a newline to the log (``TEXT`` may be empty or
                       spaces: a blank line)
``write TEXT``         append ``TEXT`` without a newline (a line being written)
``out N``              the next ``N`` output indices: each written (``overwrite``) or written
                       only when missing (``skip``, a resuming job); through a temp name and
                       a rename when ``--atomic``
``rec N``              append ``N`` records to the JSONL file (``overwrite``: the file is
                       truncated at the first ``rec`` of this run)
``tmp N``              ``N`` files the outputs pattern must not count: a temp name
                       (``NNNNN.pt.tmp``, a write in flight) and a dotfile (``.NNNNN.pt``)
``child S``            fork a child (the same command line: a worker) that lives ``S``
                       seconds; acknowledged once it has ended
``cpu S``              spin on the CPU for ``S`` seconds (progress the process signal sees)
``skew L O``           from now on stamp the log (``L``) and outputs (``O``) this many
                       seconds ahead of the host clock (negative: behind), as a file server
                       with its own clock would
``exit N``             exit with status ``N`` (acknowledged first)
``lastexit N TEXT``    append ``TEXT`` and a newline to the log and exit with ``N`` at once
                       (one ack): the end falls microseconds after the last write, inside
                       whatever probe is running
=====================  ====================================================================
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag", required=True)  # what the stage's process.match looks for
    ap.add_argument("--log", required=True)
    ap.add_argument("--out", default="")  # a directory of *.pt files
    ap.add_argument("--lines", default="")  # a JSONL file
    ap.add_argument("--mode", choices=("overwrite", "skip"), default="overwrite")
    ap.add_argument("--atomic", action="store_true")
    ap.add_argument("--log-skew", type=float, default=0.0)
    ap.add_argument("--out-skew", type=float, default=0.0)
    # Seconds before the log is opened: a job's imports, before Python's `logging` opens its
    # file (0: at once, as a launcher's `>>` has it open before the job starts).
    ap.add_argument("--open-late", type=float, default=0.0)
    args = ap.parse_args()
    if args.open_late:
        time.sleep(args.open_late)
    log = open(args.log, "ab", buffering=0)  # noqa: SIM115 (open for the job's life)
    skew = [args.log_skew, args.out_skew]
    cursor = 0
    truncated = False

    def stamp(path: str, which: int) -> None:
        if skew[which]:
            t = time.time() + skew[which]
            os.utime(path, (t, t))

    def ack(text: str = "ok") -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    ack("ready")
    for raw in sys.stdin:
        verb, _, rest = raw.rstrip("\n").partition(" ")
        if verb == "log":
            log.write(rest.encode() + b"\n")
            stamp(args.log, 0)
        elif verb == "write":
            log.write(rest.encode())
            stamp(args.log, 0)
        elif verb == "out":
            for _ in range(int(rest)):
                path = os.path.join(args.out, f"{cursor:05d}.pt")
                cursor += 1
                if args.mode == "skip" and os.path.exists(path):
                    continue
                target = path + ".tmp" if args.atomic else path
                with open(target, "wb") as f:
                    f.write(b"x" * 64)
                if args.atomic:
                    os.rename(target, path)
                stamp(path, 1)
            if skew[1]:
                stamp(args.out, 1)
        elif verb == "rec":
            mode = "ab"
            if args.mode == "overwrite" and not truncated:
                mode, truncated = "wb", True
            with open(args.lines, mode) as f:
                for _ in range(int(rest)):
                    f.write(b'{"i": %d}\n' % cursor)
                    cursor += 1
            stamp(args.lines, 1)
        elif verb == "tmp":
            for i in range(int(rest)):
                for name in (f"{i:05d}.pt.tmp", f".{i:05d}.pt"):
                    with open(os.path.join(args.out, name), "wb") as f:
                        f.write(b"partial")
        elif verb == "child":
            pid = os.fork()
            if pid == 0:
                time.sleep(float(rest))
                os._exit(0)
            os.waitpid(pid, 0)
        elif verb == "lastexit":
            code, _, text = rest.partition(" ")
            log.write(text.encode() + b"\n")
            stamp(args.log, 0)
            log.close()
            ack("bye")
            return int(code)
        elif verb == "cpu":
            end = time.monotonic() + float(rest)
            while time.monotonic() < end:
                pass
        elif verb == "skew":
            a, b = rest.split()
            skew[:] = [float(a), float(b)]
        elif verb == "exit":
            log.close()
            ack("bye")
            return int(rest)
        else:
            ack(f"error unknown command {verb!r}")
            continue
        ack()
    return 0  # stdin closed: the fuzzer is gone


if __name__ == "__main__":
    sys.exit(main())
