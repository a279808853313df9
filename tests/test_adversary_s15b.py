"""An adversary's round on the s15 words (a39df3d): sentences shown to a person that were
not true of what the watch read.

- "the log is empty" was judged by the size the *last* check left in the log's memory (0 at a
  watch's first check, and after a rewrite), not by the log's size now: a 6000-byte log of
  dots with no newline in its tail, or of blank lines, was "empty", and beside "progress: log
  grew" in the same verdict.
- "error line after the completion line (...)" named a completion line the log had already
  judged an earlier run's (demoted: a later process of this run began after it): a re-run's
  crash mid-run read as this run's crash at exit, after finishing.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

from sensors import Says, State


def _stage(tmp_path: Any, tag: str, log: Any) -> Any:
    from sensors import stage_from_dict

    return stage_from_dict(
        {
            "stage": "a15b",
            "host": "local",
            "process": {"match": f"--tag {tag}( |$)"},
            "log": {"path": str(log), "complete": "^DONE$", "tail_bytes": 4096},
            "policy": {"interval": "100ms", "settle": 2, "exit_grace": "1ms"},
        }
    )


def test_a_log_with_bytes_in_it_is_never_said_empty(tmp_path) -> None:
    """A job printing dots with no newline (6000 bytes, more than tail_bytes: the tail holds
    no whole line), then one that wrote only blank lines, and a log empty at the first check
    that then grew: the first check of each said "the log is empty" (the memory's size, 0 at a
    first read), the third "progress: log grew" beside "the log is empty"."""
    from sensors import Checker
    from tests.test_false_complete_routes import _tagged

    said: list[tuple[int, str, list[str]]] = []
    for kind, before, after in (("dots", "." * 6000, ""), ("blank", "\n\n\n", ""), ("grew", "", "." * 6000)):
        tag = f"a15b-{uuid.uuid4().hex[:8]}"
        log = tmp_path / f"{kind}.log"
        log.write_text(before)
        job = _tagged("sleep 30", tag)
        checker = Checker(_stage(tmp_path, tag, log))
        try:
            time.sleep(0.3)
            for step in range(2):
                verdict = checker.check()
                lg = verdict.readings["log"]
                assert verdict.state is State.RUNNING and lg.says is Says.WORKING, verdict.reasons
                said.append((lg.evidence["size"], lg.detail, list(verdict.reasons)))
                if after and step == 0:
                    with open(log, "a") as f:
                        f.write(after)
                time.sleep(0.2)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(5)
            checker.close()
    assert len(said) == 6, said
    for size, detail, reasons in said:
        assert ("the log is empty" in detail) == (size == 0), (size, detail, reasons)
    # The empty log at the first check of the third job is said empty: the words stand where true.
    assert "the log is empty" in said[4][1], said[4]


def test_an_error_line_after_an_earlier_runs_completion_line_says_whose_the_line_is() -> None:
    """The scan's completion line, demoted by ``_whose`` (a process of this run began after it
    was written: the line is an earlier run's), then this run's traceback: the reason said
    "error line after the completion line (DONE): ...", a crash at exit after finishing, of a
    run that never wrote a completion line. Failed either way; the words say whose the line is."""
    from sensors._signals.log import LogMemory, _log_says, _LogScan, _Word

    scan = _LogScan("DONE", 40, "RuntimeError: CUDA out of memory", None, False, None, "x", False)
    word = _Word(None, None, demoted="DONE", later_pid=4242, demoted_end=40)
    says, detail, _ = _log_says(scan, None, False, LogMemory(inode=1, size=99), 1.0, word)
    assert says is Says.FAILED
    assert detail == (
        "error line after an earlier run's completion line (DONE): RuntimeError: CUDA out of memory"
    ), detail
    # This run's own line, then the error: said as before.
    _, own, _ = _log_says(scan, "DONE", False, LogMemory(inode=1, size=99), 1.0)
    assert own == "error line after the completion line (DONE): RuntimeError: CUDA out of memory", own
