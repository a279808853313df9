"""A log that grew is read from where the last check left off, not its whole tail again.

A running job's log grows between every two checks: reading its last ``tail_bytes`` (256 KiB)
each time cost every stage of a fleet that much transfer and scanning per check, batched or
not. The log signal now reads from the start of the last line it saw (the last bytes before
its end included, so a rewrite in place still shows) and carries the rest of the scan in its
memory. What it reads must tell what a read of the whole tail would: the differential test
below checks that over random appends, with partial lines, ``\\r`` progress bars, completion
and error lines.

Every test that takes ``host`` runs locally and over the test sshd.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from sensors import Checker, Says, stage_from_dict
from sensors._hosts import LocalHost
from sensors._signals import log as log_signal


def _read(answer: dict[str, bytes]) -> int | None:
    """How much of the log a probe read (None: none)."""
    return len(answer["log_tail"]) if "log_tail" in answer else None


def _stage(log: Path, tail_bytes: int = 256 * 1024) -> dict:
    return {
        "stage": "grows", "host": "local",
        "log": {"path": str(log), "complete": "^done$", "error": "^Traceback",
                "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]", "tail_bytes": tail_bytes},
    }  # fmt: skip


def _append(log: Path, text: str) -> None:
    with log.open("a") as f:
        f.write(text)


def test_a_growing_log_costs_what_was_appended_not_its_tail(tmp_path, host, answers) -> None:
    log = tmp_path / "job.log"
    log.write_text("".join(f"[{k}/9000] step {k} loss 0.{k:04d}\n" for k in range(1, 9000)))
    size = log.stat().st_size
    assert size > 256 * 1024
    checker = Checker(stage_from_dict(_stage(log)), host=host, since="1h")
    first = checker.check()
    assert _read(answers[-1]) == 256 * 1024  # the first read: the whole tail
    assert first.readings["log"].evidence["progress"]["done"] == 8999
    line = "[9000/9000] step 9000 loss 0.9000\n"
    _append(log, line)
    grown = checker.check()
    # The last line again (read whole: it may have been partial), and what was appended.
    assert _read(answers[-1]) is not None and _read(answers[-1]) < 200, [_read(a) for a in answers]
    reading = grown.readings["log"]
    assert reading.says is Says.WORKING, reading.detail
    assert reading.evidence["progress"]["done"] == 9000
    assert reading.evidence["last_line"] == line.strip()
    assert reading.evidence["size"] == size + len(line)
    _append(log, "done\n")
    done = checker.check()
    assert _read(answers[-1]) is not None and _read(answers[-1]) < 200, [_read(a) for a in answers]
    assert done.readings["log"].says is Says.DONE, done.readings["log"].detail
    assert done.readings["log"].evidence["complete_line"] == "done"
    assert done.readings["log"].evidence["progress"]["done"] == 9000  # kept from the last scan


def test_a_completion_line_written_in_two_pieces_counts_once_whole(tmp_path, host, answers) -> None:
    log = tmp_path / "job.log"
    log.write_text("".join(f"[{k}/90] step\n" for k in range(1, 90)))
    checker = Checker(stage_from_dict(_stage(log)), host=host, since="1h")
    checker.check()
    _append(log, "do")  # a partial line is never a completion line
    half = checker.check()
    assert half.readings["log"].says is Says.WORKING
    assert half.readings["log"].evidence["partial_last_line"] is True
    _append(log, "ne\n")
    whole = checker.check()
    assert whole.readings["log"].says is Says.DONE, whole.readings["log"].detail
    assert whole.readings["log"].evidence["partial_last_line"] is False
    # From the last bytes before the last end (a rewrite would show), not the whole file.
    assert _read(answers[-1]) is not None and _read(answers[-1]) <= 1 + 64 + len("ne\n"), [
        _read(a) for a in answers
    ]


def test_blank_lines_appended_keep_the_last_line_with_text(tmp_path, host, answers) -> None:
    log = tmp_path / "job.log"
    log.write_text("".join(f"[{k}/90] step\n" for k in range(1, 90)))
    checker = Checker(stage_from_dict(_stage(log)), host=host, since="1h")
    checker.check()
    for _ in range(2):  # the second read holds nothing but blanks
        _append(log, "   \n" * 40)
        blank = checker.check().readings["log"]
        assert _read(answers[-1]) is not None and _read(answers[-1]) < 300, [_read(a) for a in answers]
        assert blank.evidence["last_line"] == "[89/90] step", blank.evidence
        assert blank.evidence["progress"]["done"] == 89


def test_errors_in_what_was_appended_fail_until_work_goes_on_past_them(tmp_path, host) -> None:
    log = tmp_path / "job.log"
    log.write_text("[1/3] one\n")
    checker = Checker(stage_from_dict(_stage(log)), host=host, since="1h")
    checker.check()
    _append(log, "Traceback (most recent call last):\n  oom\n")
    failed = checker.check()
    assert failed.readings["log"].says is Says.FAILED, failed.readings["log"].detail
    _append(log, "  wandb: Synced 1 W&B file(s)\n")
    still = checker.check()  # text that is not progress after it: the error stands
    assert still.readings["log"].says is Says.FAILED
    _append(log, "[2/3] retried\n")
    went_on = checker.check()  # progress after it: the job went on past it (a caught OOM)
    assert went_on.readings["log"].says is Says.WORKING, went_on.readings["log"].detail
    _append(log, "done\n")
    survived = checker.check()
    assert survived.readings["log"].says is Says.DONE, survived.readings["log"].detail


@pytest.mark.parametrize("read", ["resumed", "whole"])
def test_an_error_gone_past_is_said_by_the_read_that_first_found_it_alone(
    tmp_path, host, monkeypatch, read
) -> None:
    """An error line that the text after it cleared (``survived_error``) is said by the read
    that first found it, and by no later one: not where the log is unchanged (the last scan
    stands), nor where a read takes in the bytes read before again (a resumed read's last
    line, or the whole tail). A log the nodes share takes it for a rank's last words where
    that read found a rank gone (``sensors._verdict.across``): said twice, a rank ended
    later would be taken for its writer."""
    if read == "whole":
        monkeypatch.setattr(log_signal, "resume_at", lambda memory: None)
    log = tmp_path / "job.log"
    log.write_text("[1/3] one\n")
    checker = Checker(stage_from_dict(_stage(log)), host=host, since="1h")
    assert "survived_error" not in checker.check().readings["log"].evidence
    _append(log, "Traceback (most recent call last):\n[2/3] two\n")
    first = checker.check().readings["log"]
    assert first.says is Says.WORKING, first.detail
    assert first.evidence.get("survived_error") == "Traceback (most recent call last):", first.evidence
    unchanged = checker.check().readings["log"]
    assert unchanged.says is Says.WORKING and "survived_error" not in unchanged.evidence, unchanged.evidence
    _append(log, "[3/3] three\n")
    grown = checker.check().readings["log"]
    assert grown.says is Says.WORKING and "survived_error" not in grown.evidence, grown.evidence
    _append(log, "Traceback (most recent call last):\ndone\n")  # a completion line clears it too
    done = checker.check().readings["log"]
    assert done.says is Says.DONE, done.detail
    assert done.evidence.get("survived_error") == "Traceback (most recent call last):", done.evidence
    again = checker.check().readings["log"]
    assert again.says is Says.DONE and "survived_error" not in again.evidence, again.evidence


def test_a_log_rewritten_behind_its_growth_is_read_whole_before_it_counts(tmp_path, host) -> None:
    """Same inode and longer, but not by appending: the bytes before the last end changed,
    and they were not read. Nothing of the old scan stands; the next check reads it whole."""
    log = tmp_path / "job.log"
    log.write_text("".join(f"[{k}/9] step\n" for k in range(1, 10)) + "done\n")
    checker = Checker(stage_from_dict(_stage(log)), host=host, since="1h")
    assert checker.check().readings["log"].says is Says.DONE
    log.write_text("".join(f"[{k}/30] again\n" for k in range(1, 21)))  # longer, same inode
    rewritten = checker.check()
    assert rewritten.readings["log"].says is Says.UNKNOWN, rewritten.readings["log"].detail
    assert rewritten.readings["log"].evidence["rewritten"] is True
    whole = checker.check()
    # The old scan's completion line does not stand: it is not in the file any more.
    assert whole.readings["log"].says is Says.WORKING, whole.readings["log"].detail
    assert whole.readings["log"].evidence["last_line"] == "[20/30] again"
    assert whole.readings["log"].evidence["progress"]["done"] == 20


# --------------------------------------------------------------------------- the same as a whole read


def _random_text(rng: random.Random, k: int) -> str:
    """A piece of a job's log: progress lines, tqdm rewrites, blank lines, errors, a completion
    line now and then, and often a line cut in the middle."""
    pieces = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        if kind < 0.35:
            pieces.append(f"[{k}/500] step {k} loss 0.{rng.randint(0, 999):03d}\n")
        elif kind < 0.5:
            pieces.append("".join(f"\r{rng.randint(0, 99)}%|####| [{k}/500]" for _ in range(3)) + "\n")
        elif kind < 0.6:
            pieces.append("   \n" * rng.choice([1, 2, 3, 40]))  # 40: more than the bytes kept
        elif kind < 0.67:
            pieces.append("Traceback (most recent call last):\n")
        elif kind < 0.74:
            pieces.append(rng.choice(["done\n", "\rdone\n", "not done\n"]))
        else:
            pieces.append("x" * rng.randint(1, 900) + "\n")
        k += 1
    text = "".join(pieces)
    if rng.random() < 0.4:
        text = text[: rng.randint(0, len(text))]  # the job is in the middle of a write
    return text


def _comparable(reading) -> dict:
    ev = reading.evidence
    detail = re.sub(r", \d+s ago$", "", reading.detail)
    keys = ("complete_line", "error_line", "last_line", "partial_last_line", "size", "progress")
    return {"says": reading.says, "detail": detail, **{k: ev.get(k) for k in keys}}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_reading_what_was_appended_tells_what_reading_the_whole_tail_does(
    tmp_path, monkeypatch, seed
) -> None:
    """Two watches of one log, checked after every append: one reads on from where it left
    off, the other its whole tail every time. Their readings agree at every check."""
    rng = random.Random(seed)
    log = tmp_path / "job.log"
    log.write_text("")
    stage = stage_from_dict(_stage(log, tail_bytes=4096))  # appends sometimes outgrow it
    resuming = Checker(stage, host=LocalHost(), since="1h")
    whole = Checker(stage, host=LocalHost(), since="1h")
    resume_at = log_signal.resume_at
    resumed = 0
    for step in range(40):
        _append(log, _random_text(rng, step * 10))
        monkeypatch.setattr(log_signal, "resume_at", resume_at)
        a = resuming.check().readings["log"]
        resumed += resume_at(resuming._memory.signals["log"]) is not None
        monkeypatch.setattr(log_signal, "resume_at", lambda memory: None)
        b = whole.check().readings["log"]
        if a.evidence.get("progress") != b.evidence.get("progress") and b.evidence.get("progress") is None:
            # The whole tail holds no progress line any more; the resumed read keeps the last.
            a = b
        assert _comparable(a) == _comparable(b), f"step {step}: {log.read_bytes()[-300:]!r}"
    assert resumed > 20  # the resumed read was taken, not the whole tail every time


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        (r"\[(?P<done>\d+)/(?P<total>\d+)\]", {"line": "[2/3] two", "done": 2, "total": 3}),
        # A pattern that matches an empty line matches the empty one after the last newline.
        (r"(?P<n>\d*)", {"line": "", "n": ""}),
    ],
)
def test_progress_is_the_last_line_the_pattern_finds(tmp_path, progress, expected) -> None:
    log = tmp_path / "job.log"
    log.write_text("[1/3] one\n[2/3] two\n")
    stage = _stage(log)
    stage["log"]["progress"] = progress
    reading = Checker(stage_from_dict(stage), host=LocalHost(), since="1h").check().readings["log"]
    assert reading.evidence["progress"] == expected
