"""A launched run watched first during its post-processing (session 18, fuzzer seed 9000193).

The job was launched through crosscheck (its wrapper records the exit, the log is marked
first). A watch of that launch begins late: the job has written its completion line and more
text after it, and works on (an upload, a cleanup). The live process is the launched job's
own: the launch's wrapper or its child. It is no later run begun after the line, so the line
after the launch's mark is the launched run's, and the watch completes once the job exits 0.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from sensors import Checker, LocalHost, State, Verdict, stage_from_dict
from tests.test_false_complete_routes import _launched

JOB = (
    "import sys, time\n"
    "for i in range(1, 4):\n"
    "    print(f'[{i}/3]', flush=True); time.sleep(0.05)\n"
    "print('Extraction complete: 3 files', flush=True)\n"
    "print('   ', flush=True)\n"
    "time.sleep(1.5)\n"
    "print('cleanup done', flush=True)\n"
    "time.sleep(0.3)\n"
)


def test_a_launched_run_first_watched_after_its_line_completes_when_it_exits(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    tag = f"s18late-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    # An earlier run's words, the same line among them: the log is appended to, run after run.
    log.write_text("[3/3]\nExtraction complete: 3 files\n")
    host = LocalHost()
    run, _wrapper = _launched(host, str(log), JOB, tag)
    deadline = time.monotonic() + 20
    while log.read_text().count("Extraction complete") < 2 or not log.read_text().endswith("   \n"):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.02)
    stage = stage_from_dict(
        {
            "stage": "s18-late-launch",
            "host": "local",
            "process": {"match": f"{tag}( |$)"},
            "log": {"path": str(log), "complete": "^Extraction complete"},
            "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
        }
    )
    with Checker(stage, host=host, run=run) as checker:
        first = checker.check()
        assert first.readings["process"].says.value == "working", first.readings["process"].detail
        assert first.state is not State.COMPLETE
        verdicts, over = checks_past_the_end(checker)
    # Complete within 3 checks of the check that found the job gone.
    assert any(v.state is State.COMPLETE for v in verdicts[over - 1 : over + 2]), [
        (v.state.value, v.reasons[:2]) for v in verdicts[over - 1 :]
    ]


def checks_past_the_end(checker: Checker, more: int = 3, timeout: float = 30.0) -> tuple[list[Verdict], int]:
    """Checks 0.1 s apart until the process signal finds the job gone, then ``more``: the
    verdicts, and how many there were up to that first "gone" one."""
    verdicts: list[Verdict] = []
    deadline = time.monotonic() + timeout
    over = None
    while time.monotonic() < deadline:
        verdicts.append(checker.check())
        if over is None and verdicts[-1].readings["process"].says.value == "done":
            over = len(verdicts)
        if over is not None and len(verdicts) >= over + more:
            break
        time.sleep(0.1)
    assert over is not None, [v.reasons[:2] for v in verdicts[-3:]]
    return verdicts, over
