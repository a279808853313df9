"""Files nobody wrote to since the last check are not read again (issue 12: cheap checks).

One ``stat`` in the probe (``sensors._base.probe``: the shared stat) covers every log and output
directory a check would otherwise read again; a file whose whole line (inode, size, mtime and
ctime to the nanosecond, type, name) is what it was is not tailed, listed or counted: the last
reading stands. Every test that takes ``host`` runs locally and over the test sshd.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from sensors import Checker, Says, State, stage_from_dict
from sensors._base.probe import Meta, settled, shared_stats
from sensors._check.batch import check_batch

#: Longer than the moment a stamp needs to be trusted (sensors._base.probe._SETTLED_FINE).
SETTLE = 0.3


# --------------------------------------------------------------------------- the shared stat's lines


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"1 2 3 0 3.5 3.5 regular file /a/job.log\n", {"/a/job.log": "1 2 3 0 3.5 3.5 regular file"}),
        # a type with a space and a name with spaces: the name is what follows a known type
        (
            b"7 0 9 0 9.1 9.2 regular empty file /d/my log\n8 4096 9 0 9.1 9.3 directory /d/out dir\n",
            {"/d/my log": "7 0 9 0 9.1 9.2 regular empty file", "/d/out dir": "8 4096 9 0 9.1 9.3 directory"},
        ),
        # a name that ends like another's is its own line, and only its own
        (
            b"1 2 3 0 3.1 3.1 regular file /x /b\n",
            {"/x /b": "1 2 3 0 3.1 3.1 regular file"},
        ),
        # garbage, a cut line and an unknown type are no file's line
        (b"stat: cannot statx\n1 2 3 0 3.1\n1 2 3 0 3.1 3.1 strange /p\n", {}),
        (b"", {}),
    ],
)
def test_the_shared_stat_is_read_by_whole_names(body: bytes, expected: dict[str, str]) -> None:
    assert shared_stats(body) == expected


@pytest.mark.parametrize(
    ("stamp", "now", "trusted"),
    [
        ("1 2 100 0 100.123456789 100.123456789 regular file", 100.5, True),
        # written a moment before the probe began: a later write may fall in the same tick
        ("1 2 100 0 100.123456789 100.123456789 regular file", 100.2, False),
        # the ctime counts too (a touch that set the mtime back is a change now)
        ("1 2 100 0 100.123456789 100.45 regular file", 100.5, False),
        # no fraction: perhaps a filesystem of whole seconds (FAT: two)
        ("1 2 100 0 100.000000000 100.000000000 regular file", 101.5, False),
        ("1 2 100 0 100.000000000 100.000000000 regular file", 103.0, True),
        ("1 2 100 0 100 100 regular file", 101.5, False),
        # a stat without precisions, or nothing to compare
        ("1 2 100 0 ? ? regular file", 500.0, False),
        ("1 2 100 0 100.1 100.1 regular file", None, False),
        ("1 2 100", 500.0, False),
    ],
)
def test_a_stamp_is_trusted_only_once_nothing_can_share_its_clock_tick(
    stamp: str, now: float | None, trusted: bool
) -> None:
    assert settled(stamp, now) is trusted


# --------------------------------------------------------------------------- the log


def _log_stage(log: Path, name: str = "idle") -> dict:
    return {
        "stage": name, "host": "local",
        "log": {"path": str(log), "complete": "^done$", "error": "^Traceback",
                "progress": r"\[(?P<done>\d+)/(?P<total>\d+)\]"},
    }  # fmt: skip


def test_an_idle_log_is_not_read_again_and_a_changed_one_is(tmp_path, host, answers) -> None:
    log = tmp_path / "job.log"
    log.write_text("[1/3] one\nCUDA warning: ok\n")
    checker = Checker(stage_from_dict(_log_stage(log)), host=host, since="1h")
    time.sleep(SETTLE)
    first, second = checker.check(), checker.check()
    # The first check reads the tail; the shared stat says which file system the log is on
    # (whether a stamp of it may be kept: sensors._base.probe.keeps_times).
    assert "log_tail" in answers[0] and "log_same" not in answers[0] and b"ef53" in answers[0]["statfs"]
    assert "log_same" in answers[1] and not {"log_stat", "log_tail", "log_prev"} & answers[1].keys()
    for key in ("last_line", "progress", "size", "inode", "mtime", "complete_line", "error_line"):
        assert second.readings["log"].evidence[key] == first.readings["log"].evidence[key], key
    assert second.readings["log"].says is Says.WORKING
    assert second.readings["log"].detail == first.readings["log"].detail.replace(
        f"{first.readings['log'].evidence['age_seconds']:.0f}s ago",
        f"{second.readings['log'].evidence['age_seconds']:.0f}s ago",
    )

    # An append is read, and the bytes before the last end come with the tail.
    with log.open("a") as f:
        f.write("Traceback (most recent call last):\n")
    failed = checker.check()
    assert failed.readings["log"].says is Says.FAILED, failed.readings["log"].detail
    assert "log_tail" in answers[-1] and "log_prev" not in answers[-1] and "log_same" not in answers[-1]
    # Written in the moment before that check: its stamp was not trusted, read again;
    # a moment later the stamp read is, and the next check reads nothing.
    checker.check()
    assert "log_tail" in answers[-1]
    time.sleep(SETTLE)
    checker.check()
    assert "log_tail" in answers[-1]
    checker.check()
    assert "log_same" in answers[-1]

    # The same size, other bytes, the mtime set back: the ctime moved, so it is read and
    # found rewritten (an earlier watch could take the same stat for the same bytes).
    before = log.stat()
    log.write_text(log.read_text().replace("Traceback", "Tracebacc"))
    os.utime(log, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (log.stat().st_size, log.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    rewritten = checker.check()
    assert "log_tail" in answers[-1] and "log_same" not in answers[-1]
    assert rewritten.readings["log"].evidence.get("rewritten") is True
    assert rewritten.readings["log"].says is not Says.FAILED, rewritten.readings["log"].detail


def test_a_log_rewritten_and_regrown_past_its_old_end_is_seen_from_the_tail(tmp_path, host, answers) -> None:
    """The bytes before the last end are read apart only when the tail does not hold them;
    from the tail they still show a file truncated and written again, longer."""
    log = tmp_path / "job.log"
    log.write_text("".join(f"[{k}/50] step\n" for k in range(1, 11)))
    checker = Checker(stage_from_dict(_log_stage(log, "regrown")), host=host, since="1h")
    checker.check()
    log.write_text("".join(f"[{k}/50] other\n" for k in range(1, 21)))  # same inode, longer
    again = checker.check()
    assert "log_prev" not in answers[-1] and "log_tail" in answers[-1]
    assert again.readings["log"].evidence.get("rewritten") is True, again.readings["log"].evidence
    # Read from the last end (it grew): what is before it was not read, and is new too.
    assert again.readings["log"].says is Says.UNKNOWN and "read whole" in again.readings["log"].detail
    whole = checker.check()
    assert whole.readings["log"].says is Says.WORKING, whole.readings["log"].detail
    assert whole.readings["log"].evidence["last_line"] == "[20/50] other"
    # A big append: the tail begins after the last end, so those bytes are read apart.
    with log.open("a") as f:
        f.write("x" * 300_000 + "\n")
    grown = checker.check()
    assert "log_prev" in answers[-1] and "rewritten" not in grown.readings["log"].evidence


# --------------------------------------------------------------------------- the outputs


def test_an_output_directory_nobody_added_to_is_not_listed_again(tmp_path, host, answers) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for k in range(3):
        (out / f"part-{k}.pt").write_bytes(b"x")
    stage = stage_from_dict({
        "stage": "dir", "host": "local",
        "outputs": {"files": str(out), "pattern": "*.pt", "expected": 5},
    })  # fmt: skip
    checker = Checker(stage, host=host)
    time.sleep(SETTLE)
    first, second = checker.check(), checker.check()
    assert "outputs" in answers[0] and "outputs_same" in answers[1] and "outputs" not in answers[1]
    assert first.readings["outputs"].evidence["count"] == second.readings["outputs"].evidence["count"] == 3
    assert second.readings["outputs"].detail == "3/5 outputs"

    # A file written in place adds no entry: the count it cannot change stands.
    (out / "part-0.pt").write_bytes(b"xy")
    time.sleep(SETTLE)
    assert checker.check().readings["outputs"].evidence["count"] == 3 and "outputs_same" in answers[-1]

    (out / "part-3.pt").write_bytes(b"x")
    (out / "part-4.tmp").write_bytes(b"x")
    assert checker.check().readings["outputs"].evidence["count"] == 4 and "outputs" in answers[-1]
    os.rename(out / "part-4.tmp", out / "part-4.pt")
    time.sleep(SETTLE)
    at = checker.check()
    assert at.readings["outputs"].evidence["count"] == 5 and "outputs" in answers[-1]
    # At the expected number the count may decide completion: listed every check.
    for _ in range(2):
        time.sleep(SETTLE)
        done = checker.check()
        assert "outputs" in answers[-1] and "outputs_same" not in answers[-1]
    assert done.readings["outputs"].says is Says.DONE
    # An entry removed from a directory below the number is seen at once, too.
    os.unlink(out / "part-4.pt")
    assert checker.check().readings["outputs"].evidence["count"] == 4


def test_at_the_expected_number_the_count_is_kept_only_while_the_job_lives(tmp_path, host, answers) -> None:
    """A job alive at the last check and still alive now (its PID's /proc entry): an output
    directory at the expected number that nobody added to is not listed again (the stage is
    running whatever its outputs say); an entry added is listed at once; the job gone, every
    check lists."""
    out = tmp_path / "out"
    out.mkdir()
    for k in range(3):
        (out / f"part-{k}.pt").write_bytes(b"x")
    job = subprocess.Popen(["sleep", "3141.5"], start_new_session=True)
    try:
        stage = stage_from_dict({
            "stage": "kept", "host": "local",
            "process": {"match": r"^sleep 3141\.5$"},
            "outputs": {"files": str(out), "pattern": "*.pt", "expected": 3},
        })  # fmt: skip
        checker = Checker(stage, host=host)
        time.sleep(SETTLE)
        first = checker.check()
        assert first.readings["process"].evidence["pid"] == job.pid and "outputs" in answers[-1]
        for _ in range(2):
            kept = checker.check()
            assert "outputs_same" in answers[-1] and "outputs" not in answers[-1]
            assert kept.readings["outputs"].evidence["count"] == 3 and kept.state is State.RUNNING
        # An entry added (even one the pattern excludes) moves the stamp: listed at once.
        (out / "part-3.tmp").write_bytes(b"x")
        assert checker.check().readings["outputs"].evidence["count"] == 3 and "outputs" in answers[-1]
        time.sleep(SETTLE)
        checker.check()  # a stamp settled now: kept from the next check on
        assert "outputs" in answers[-1]
        checker.check()
        assert "outputs_same" in answers[-1]
    finally:
        job.kill()
        job.wait()
    # The job gone: its PID has no /proc entry, the directory is listed (and every check after).
    for _ in range(2):
        gone = checker.check()
        assert "outputs" in answers[-1] and "outputs_same" not in answers[-1]
        assert gone.readings["outputs"].evidence["count"] == 3


def test_a_count_kept_at_the_expected_number_decides_nothing_once_the_job_is_gone(tmp_path) -> None:
    """The probe kept the last count (the job's PID still had a /proc entry: reused, or the
    job ended after that test): with the job alive at this check it says done as a fresh
    count would; found gone, the count that may decide is the next check's own listing."""
    from sensors._signals import outputs as O

    out = tmp_path / "out"
    stamp = "12 4096 1700000000 0 1700000000.100000000 1700000000.100000000 directory"
    sections = {"outputs_same": b"", "stats": f"{stamp} {out}\n".encode()}
    meta = Meta(1800000000.0, 100.0, 1, "boot", 100, 1, "h", False)
    spec = stage_from_dict({
        "stage": "x", "host": "local", "outputs": {"files": str(out), "pattern": "*.pt", "expected": 3},
    }).outputs  # fmt: skip
    assert spec is not None
    memory = O.OutputsMemory(count=3, stamp=stamp, first_count=3, checked_at=1.0, at_expected=True)
    says = {}
    for alive in (True, False, True, False):  # the cached reading of one is never the other's
        reading, _ = O.read_outputs(spec, sections, meta, memory, host="h", job_alive=alive)
        says.setdefault(alive, set()).add((reading.says, reading.detail))
    assert says[True] == {(Says.DONE, "3/3 outputs, unchanged since last check")}
    assert len(says[False]) == 1 and next(iter(says[False]))[0] is Says.WORKING
    # Below the expected number a kept count says what it always said, job or no job.
    low = O.OutputsMemory(count=2, stamp=stamp, first_count=2, checked_at=1.0)
    for alive in (True, False):
        reading, _ = O.read_outputs(spec, sections, meta, low, host="h", job_alive=alive)
        assert (reading.says, reading.detail) == (Says.WORKING, "2/3 outputs")


def test_a_jsonl_file_nobody_wrote_to_is_not_counted_again(tmp_path, host, answers) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps({"i": k}) + "\n" for k in range(4)))
    stage = stage_from_dict({
        "stage": "jsonl", "host": "local", "outputs": {"lines": str(records), "expected": 10},
    })  # fmt: skip
    checker = Checker(stage, host=host)
    time.sleep(SETTLE)
    first, second = checker.check(), checker.check()
    assert "lines" in answers[0] and "outputs_same" in answers[1] and "lines" not in answers[1]
    for key in ("count", "size", "partial_record"):
        assert first.readings["outputs"].evidence[key] == second.readings["outputs"].evidence[key], key
    with records.open("a") as f:
        f.write('{"i": 4}\n{"i": 5')
    grown = checker.check()
    assert "lines" in answers[-1] and grown.readings["outputs"].evidence["count"] == 5
    assert grown.readings["outputs"].evidence["partial_record"] is True
    time.sleep(SETTLE)
    checker.check()
    time.sleep(SETTLE)
    kept = checker.check()
    assert "outputs_same" in answers[-1] and kept.readings["outputs"].evidence["partial_record"] is True
    assert kept.readings["outputs"].evidence["count"] == 5


# --------------------------------------------------------------------------- a batch


def test_a_batch_stats_its_idle_files_in_one_process_and_reads_none_of_them(tmp_path, host) -> None:
    checkers = []
    for k in range(12):
        work = tmp_path / f"s{k}"
        (work / "out").mkdir(parents=True)
        (work / "job.log").write_text(f"[1/9] stage {k}\n")
        (work / "out" / "a.pt").write_bytes(b"x")
        spec = _log_stage(work / "job.log", f"batch-{k}")
        spec["outputs"] = {"files": str(work / "out"), "pattern": "*.pt", "expected": 9}
        checkers.append(Checker(stage_from_dict(spec), host=host, since="1h"))
    answers: list[tuple[bytes, bytes]] = []
    run_script = host.run_script

    def keep(script: bytes, *, timeout: float) -> bytes:
        answers.append((script, run_script(script, timeout=timeout)))
        return answers[-1][1]

    host.run_script = keep
    try:
        time.sleep(SETTLE)
        check_batch(checkers)
        time.sleep(SETTLE)
        check_batch(checkers)
        verdicts = check_batch(checkers)
        script, answer = (x.decode() for x in answers[-1])
        # One stat process for the 24 files (the frame's); each stage's own reads (its stat,
        # tail, listing) sit in the branch for a changed file, and none of them ran.
        shared = [line for line in script.splitlines() if line.startswith('SEEN="$SEEN$(stat -L -c ')]
        assert len(shared) == 1
        for k in range(12):
            assert (
                f"{tmp_path / f's{k}' / 'job.log'} " in shared[0]
                and f"{tmp_path / f's{k}' / 'out'} " in shared[0]
            )
        names = {line.split()[-1] for line in answer.splitlines() if line.startswith("@@crosscheck ")}
        assert {f"k{k}.log_same" for k in range(12)} | {f"k{k}.outputs_same" for k in range(12)} <= names
        assert not any(n.endswith((".log_tail", ".log_stat", ".outputs")) for n in names), names
        for k, v in enumerate(verdicts):
            log, outputs = v.readings["log"], v.readings["outputs"]
            progress = {"line": f"[1/9] stage {k}", "done": 1, "total": 9}
            assert log.says is Says.WORKING and log.evidence["progress"] == progress
            assert outputs.evidence["count"] == 1 and outputs.detail == "1/9 outputs"
    finally:
        del host.run_script
