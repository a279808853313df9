"""Readings that stay true on real file systems and real hosts (issue 22).

Each test replays one class through real components — real processes, files and mounts, the
real CLI or ``Checker`` — and asserts what the truth allows:

1. a mount whose directory times never move (object-store and some FUSE mounts): the output
   count read at the first check was kept for good, and a job that wrote 40/40, its
   completion line, and exited 0 was ``failed``; the shared stat's shortcut is taken only on a
   file system that keeps its times (tmpfs, ext4: still taken there);
2. ``outputs.pattern`` means what fnmatch(3) and ``find -name`` mean (bracket expressions,
   character classes), for the count and the in-place-write check alike;
3. a host whose tools are BusyBox's (Alpine, minimal containers, NAS boxes): a finished
   stage's outputs read 0 (``ls -f``, ``find -newermt`` and ``-printf`` are GNU's), locally and
   over SSH; a tool that fails is ``unknown`` with its error, never a zero;
4. a watch begun before its job: the stall clock starts when the job is first seen.

Self-contained (no conftest fixture, the repository found from ``sensors``), so that the file
also runs against an older checkout of the package.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import sensors
from sensors import Checker, LocalHost, Says, State, stage_from_dict
from sensors._base.probe import split_sections
from sensors.testing import SimulatedJob
from tests.test_false_complete import _waiting

REPO = Path(sensors.__file__).resolve().parents[1]
PROBE_ENV = {
    "LC_ALL": "C",
    "LANG": "C",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
}


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _write(path: Path, stage: dict) -> Path:
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return path


def _needs_root() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root, mount and unshare(1)")


class _Recording:
    """A host whose probes' answers are kept, split into their sections."""

    def __init__(self, host) -> None:
        self.host, self.name, self.nvml = host, host.name, getattr(host, "nvml", False)
        self.answers: list[dict[str, bytes]] = []

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        out = self.host.run_script(script, timeout=timeout)
        nonce = next(line[2:] for line in script.decode().splitlines() if line.startswith("N="))
        self.answers.append(split_sections(out, nonce.strip("'")))
        return out

    def close(self) -> None:
        self.host.close()


# ----------------------------------------------------------------- 1. directory times that never move


@pytest.fixture
def frozen(tmp_path) -> Iterator[Path]:
    """A real FUSE mount whose directories' times and sizes never move (an object store's
    "directories"): its mount point."""
    from tests import skewfs

    why = skewfs.available()
    if why is not None:
        pytest.skip(why)
    with skewfs.skewed_mount(tmp_path / "backing", tmp_path / "mnt", 0.0, frozen=True) as mnt:
        yield mnt


def test_a_finished_job_on_a_mount_whose_directory_times_never_move_is_complete(frozen, tmp_path) -> None:
    """The watch starts before the job; the job writes its 40 outputs and its completion
    line on the mount and exits 0. The directory's stamp never moves: a count kept on it
    stayed at what the first listing saw ("outputs short: 0/40": failed)."""
    job = SimulatedJob(frozen, scenario="complete", total=40, step=0.05)
    (frozen / job.outputs_dir.name).mkdir()  # the directory is there before the job
    stage_file = _write(tmp_path / "s.yaml", job.stage_dict(interval="200ms", exit_grace="1s", settle=2))
    watch = _waiting(stage_file, timeout="90s")
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the first check: no job yet, an empty directory
        assert json.loads(first)["signals"]["outputs"]["evidence"]["count"] == 0, first
        time.sleep(0.5)  # listed once more, settled: a stamp a check could keep
        job.start()
        assert job.wait(60) == 0
        rest, err = watch.communicate(timeout=100)
    finally:
        job.stop()
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    verdicts = [json.loads(first), *_json_lines(rest)]
    last = verdicts[-1]
    assert watch.returncode == 0 and last["verdict"] == "complete", (
        last["verdict"],
        last["reasons"],
        err[-500:],
    )
    assert last["signals"]["outputs"]["evidence"]["count"] == 40
    assert not [v["verdict"] for v in verdicts if v["verdict"] == "failed"]


def _outputs_stage(out: Path, expected: int = 5) -> dict:
    return {
        "stage": "listing",
        "host": "local",
        "outputs": {"files": str(out), "pattern": "*.pt", "expected": expected},
    }


def _listing_kept(out: Path) -> tuple[list[bool], int]:
    """Whether each of three checks of a directory nobody added to kept the last count (no
    listing), then the count after one more entry (the directory 3 of 5, then 4)."""
    out.mkdir(exist_ok=True)
    for k in range(3):
        (out / f"part-{k}.pt").write_bytes(b"x")
    host = _Recording(LocalHost())
    checker = Checker(stage_from_dict(_outputs_stage(out)), host=host)
    kept = []
    for _ in range(3):
        time.sleep(0.3)
        assert checker.check().readings["outputs"].evidence["count"] == 3
        kept.append("outputs_same" in host.answers[-1])
    (out / "part-3.pt").write_bytes(b"x")
    return kept, checker.check().readings["outputs"].evidence["count"]


def test_the_listing_is_kept_only_where_directory_times_move(frozen, tmp_path) -> None:
    """On the frozen mount every check lists the directory (and sees the new entry); on tmpfs
    and on an ext4 loop mount, an unchanged directory is not listed again (and a new entry
    is seen at once)."""
    kept, count = _listing_kept(frozen / "out")
    assert kept == [False, False, False] and count == 4
    _needs_root()
    with _mounted(tmp_path / "tmpfs", "tmpfs") as tmpfs:
        kept, count = _listing_kept(tmpfs / "out")
        assert kept[1:] == [True, True] and count == 4
    with _mounted(tmp_path / "ext4", "ext4") as ext4:
        kept, count = _listing_kept(ext4 / "out")
        assert kept[1:] == [True, True] and count == 4


@contextlib.contextmanager
def _mounted(where: Path, kind: str) -> Iterator[Path]:
    where.mkdir()
    if kind == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "crosscheck-test", str(where)], check=True)
    else:
        image = where.with_suffix(".img")
        with open(image, "wb") as f:
            f.truncate(16 * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


# ----------------------------------------------------------------- 2. one matcher: fnmatch(3)

NAMES = [
    "sample_1.pt", "sample_12.pt", "sample_x.pt", "sample_.pt", "abc.pt", "acz", "x^y$z",
    "file(1).pt", "a.pt.tmp", "b.ppt", "a.p+t", "aa.pt", "sp ace.pt", "ümlaut.pt", "7.pt",
    "[x].pt", "]x.pt", "!x.pt", "Caps.PT", "tab\tname.pt", "new\nline.pt", "back\\slash.pt",
    "-dash.pt", "a-b.pt", "{a,b}.pt", ".hidden.pt", "x.pt.tmp", "y.pt~", "z.tmp", "w.part", ".swp",
]  # fmt: skip

#: Patterns Python's fnmatch reads as fnmatch(3) does.
SHARED_PATTERNS = [
    "*.pt", "sample_?.pt", "[!s]*", "a[bc]*", "*[0-9].pt", "x^y$*", "*(1).pt", "*.p+t", "*",
    "[]x]*", "[!]]*", "[a-c]*", "*[-]*", "[[]x].pt", "{a,b}.pt", "*[!.]pt", "?", "*.PT",
    "ü*", "*l?ut.pt", "*\t*",
]  # fmt: skip

#: Patterns only fnmatch(3) (and find -name) reads so: character classes, a caret negation.
POSIX_PATTERNS = [
    ("sample_[[:digit:]]*.pt", {"sample_1.pt", "sample_12.pt"}),
    ("[[:alpha:]]*.pt", {"sample_1.pt", "sample_12.pt", "sample_x.pt", "sample_.pt", "abc.pt", "file(1).pt",
                         "aa.pt", "sp ace.pt", "back\\slash.pt", "tab\tname.pt", "new\nline.pt", "a-b.pt"}),
    ("*[[:space:]]*", {"sp ace.pt", "tab\tname.pt", "new\nline.pt"}),
    ("[[:upper:]]*", {"Caps.PT"}),
    ("[^s]*.pt", None),  # GNU's fnmatch and BusyBox's read '^' as '!'
    ("*[[:punct:]]pt", None),
]  # fmt: skip


def _find_count(directory: Path, pattern: str, exclude: tuple[str, ...] = ()) -> int:
    excluded = [word for glob in exclude for word in ("!", "-name", glob)]
    out = subprocess.run(
        ["find", str(directory), "-mindepth", "1", "-maxdepth", "1", "-name", pattern, *excluded, "-print0"],
        capture_output=True,
        check=True,
        env=PROBE_ENV,
    ).stdout
    return out.count(b"\0")


@pytest.fixture(scope="module")
def names_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("names") / "d"
    d.mkdir()
    for n in NAMES:
        (d / n).write_bytes(b"")
    return d


def _count(directory: Path, pattern: str, exclude: tuple[str, ...] = ()) -> int | None:
    stage = {
        "stage": "g",
        "host": "local",
        "outputs": {"files": str(directory), "pattern": pattern, "expected": 1, "exclude": list(exclude)},
    }
    return Checker(stage_from_dict(stage)).check().readings["outputs"].evidence["count"]


@pytest.mark.parametrize("pattern", [*SHARED_PATTERNS, *(p for p, _ in POSIX_PATTERNS), "*.tmp", ".*", "*~"])
def test_the_default_exclusions_are_what_find_name_excludes(names_dir, pattern) -> None:
    """The default exclusions (temp names, dotfiles) as ``! -name`` tests: the count is
    find's with every one of them."""
    from sensors._signals.outputs import DEFAULT_EXCLUDES

    expected = _find_count(names_dir, pattern, DEFAULT_EXCLUDES)
    assert _count(names_dir, pattern, DEFAULT_EXCLUDES) == expected
    assert expected == len(
        [
            n
            for n in fnmatch.filter(NAMES, pattern)
            if not any(fnmatch.fnmatchcase(n, x) for x in DEFAULT_EXCLUDES)
        ]
    ) or pattern in dict(POSIX_PATTERNS)


@pytest.mark.parametrize("pattern", SHARED_PATTERNS)
def test_the_pattern_counts_what_fnmatch_and_find_name_match(names_dir, pattern) -> None:
    expected = len(fnmatch.filter(NAMES, pattern))
    assert _find_count(names_dir, pattern) == expected  # the table itself: three readers agree
    assert _count(names_dir, pattern) == expected


@pytest.mark.parametrize(("pattern", "names"), POSIX_PATTERNS)
def test_bracket_expressions_and_character_classes_mean_what_find_name_means(
    names_dir, pattern, names
) -> None:
    found = _find_count(names_dir, pattern)
    if names is not None:
        assert found == len(names)
    assert found > 0 and _count(names_dir, pattern) == found


@pytest.mark.parametrize("tools", ["gnu", "busybox"])
def test_the_count_and_the_in_place_check_use_one_matcher(tmp_path, tools) -> None:
    """``sample_[[:digit:]]*.pt``: 40 outputs. The count finds them; at the expected number a
    file of them written in place (no new entry) is seen, and one the pattern does not match
    is not. With BusyBox's tools too (file times in whole seconds there: a second apart)."""
    out = tmp_path / "out"
    out.mkdir()
    for k in range(40):
        (out / f"sample_{k:03d}.pt").write_bytes(b"x")
    (out / "sample_best.pt").write_bytes(b"x")
    stage = {
        "stage": "digits",
        "host": "local",
        "outputs": {"files": str(out), "pattern": "sample_[[:digit:]]*.pt", "expected": 40},
        "policy": {"interval": "200ms", "settle": 1},
    }
    host, pause = (None, 0.2) if tools == "gnu" else (_BusyBoxHost(_applets(tmp_path / "bb")), 1.1)
    checker = Checker(stage_from_dict(stage), since=time.time() - 3600, host=host)
    time.sleep(pause)  # each check a clock tick (BusyBox: a second) after the last write
    first = checker.check().readings["outputs"]
    assert first.evidence["count"] == 40, first.detail
    time.sleep(pause)
    assert checker.check().readings["outputs"].says is Says.DONE
    time.sleep(pause)
    (out / "sample_best.pt").write_bytes(b"yy")  # not an output: the pattern does not match it
    assert checker.check().readings["outputs"].says is Says.DONE
    time.sleep(pause)
    (out / "sample_017.pt").write_bytes(b"yy")  # an output, written in place
    moved = checker.check().readings["outputs"]
    assert moved.says is Says.WORKING and "sample_017.pt was modified" in moved.detail, moved.detail
    assert moved.evidence["in_place_writes"].endswith("/sample_017.pt")


# ----------------------------------------------------------------- 3. BusyBox's tools


def _busybox() -> str:
    found = shutil.which("busybox") or next(
        (p for p in ("/bin/busybox", "/usr/bin/busybox") if os.path.exists(p)), None
    )
    if found is None:
        pytest.skip("no busybox (apt-get install -y busybox-static)")
    return found


def _applets(where: Path, *, without: tuple[str, ...] = (), bash: bool = False) -> list[str]:
    """A directory of BusyBox's applets, and the command prefix that runs a command with it
    bound over /usr/bin (and /bin, where that is not a link to it) in a mount namespace of its
    own: a host whose tools are BusyBox's. ``bash``: a real bash beside them (the test
    sshd's user logs in with bash; the probe itself runs /bin/sh, BusyBox's)."""
    _needs_root()
    binary = _busybox()
    where.mkdir(parents=True)
    shutil.copy2(binary, where / "busybox")
    listed = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True).stdout.split()
    for applet in listed:
        if applet != "busybox" and applet not in without:
            (where / applet).symlink_to("busybox")
    if bash:
        shutil.copy2(shutil.which("bash") or "/bin/bash", where / "bash")
    binds = [f"mount --bind {where} /usr/bin"]
    if not os.path.islink("/bin"):
        binds.append(f"mount --bind {where} /bin")
    return ["unshare", "-m", "sh", "-c", " && ".join(binds) + ' && exec "$@"', "sh"]


class _BusyBoxHost:
    """This machine as a host whose tools are BusyBox's: each probe's ``/bin/sh -s`` runs
    under :func:`_applets`' prefix."""

    name = "local"
    nvml = False

    def __init__(self, wrap: list[str]) -> None:
        self.wrap = wrap

    def run_script(self, script: bytes, *, timeout: float) -> bytes:
        cmd = [*self.wrap, "/bin/sh", "-s"]
        done = subprocess.run(
            cmd, input=script, capture_output=True, timeout=timeout, env=PROBE_ENV, check=False
        )
        return done.stdout

    def close(self) -> None:
        pass


def test_the_probe_runs_under_busybox(tmp_path) -> None:
    """The applets are what the probe gets: its sh, stat, find and date are BusyBox's."""
    host = _BusyBoxHost(_applets(tmp_path / "bb"))
    out = host.run_script(
        b"readlink -f /bin/sh; date +%N; ls -f / >/dev/null 2>&1 || echo no-ls-f\n", timeout=20
    )
    assert out.split() == [b"/usr/bin/busybox", b"%N", b"no-ls-f"], out


def _watch_together(job: SimulatedJob, checkers: list[Checker], timeout: float = 60) -> list[list]:
    """Check every checker in turn until the job ended and each said complete (or failed)."""
    seen: list[list] = [[] for _ in checkers]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for k, checker in enumerate(checkers):
            seen[k].append((job.running, checker.check()))
        if all(v[-1][1].state in (State.COMPLETE, State.FAILED) for v in seen):
            break
        time.sleep(0.2)
    return seen


def _same_story(seen: list[list]) -> None:
    """Every watch ended complete with the same facts, none complete or failed before the job
    had ended, and each read the job's start (the tick rate) while it ran."""
    for watched in seen:
        last = watched[-1][1]
        assert last.state is State.COMPLETE, [(v.state.value, v.reasons[:2]) for _, v in watched[-4:]]
        assert not [v for running, v in watched if running and v.state in (State.COMPLETE, State.FAILED)]
        assert not [v for _, v in watched if v.state is State.FAILED]
        assert last.readings["outputs"].evidence["count"] == 20
        assert last.readings["log"].evidence["complete_line"].startswith("Extraction complete")
        alive = [
            v.readings["process"] for running, v in watched if v.readings["process"].says is Says.WORKING
        ]
        assert alive and all(isinstance(r.evidence.get("elapsed_seconds"), (int, float)) for r in alive)
    finals = [{name: r.says for name, r in w[-1][1].readings.items()} for w in seen]
    assert all(f == finals[0] for f in finals), finals


def test_a_finished_stage_reads_the_same_under_busybox_locally(tmp_path) -> None:
    """The same job watched by GNU's tools and by BusyBox's, check by check: both complete
    with 20/20 outputs (BusyBox's read 0/20: ``ls -f`` is not BusyBox's, and its error was
    taken for an empty directory)."""
    host = _BusyBoxHost(_applets(tmp_path / "bb"))
    job = SimulatedJob(tmp_path, scenario="complete", total=20, step=0.1)
    stage = stage_from_dict(job.stage_dict(interval="200ms", exit_grace="1s", settle=2))
    gnu, busybox = Checker(stage), Checker(stage, host=host)
    job.start()
    try:
        seen = _watch_together(job, [gnu, busybox])
    finally:
        job.stop()
    _same_story(seen)


def test_a_finished_stage_reads_the_same_under_busybox_over_ssh(tmp_path) -> None:
    """The same through a real sshd whose host's tools are BusyBox's (its login shell bash,
    the probe's /bin/sh and every tool BusyBox's)."""
    from tests.sshd import SSHD, sshd_available

    if not sshd_available():
        pytest.skip("no sshd")
    server = SSHD(wrap=_applets(tmp_path / "bb", bash=True))
    try:
        server.start()
        job = SimulatedJob(tmp_path, scenario="complete", total=20, step=0.1)
        stage = {**job.stage_dict(interval="200ms", exit_grace="1s", settle=2), "host": server.spec()}
        gnu = Checker(stage_from_dict({**stage, "host": "local"}))
        busybox = Checker(stage_from_dict(stage))
        probe = busybox.host.run_script(b"readlink -f /bin/sh; date +%N\n", timeout=20)
        assert probe.split()[-2:] == [b"/usr/bin/busybox", b"%N"], probe
        job.start()
        try:
            seen = _watch_together(job, [gnu, busybox])
        finally:
            job.stop()
            busybox.close()
        _same_story(seen)
    finally:
        server.cleanup()


def test_a_jsonl_file_reads_the_same_under_busybox(tmp_path) -> None:
    """Records counted incrementally, a record being written, a rewrite counted again: the
    same readings from BusyBox's tail, head, wc and od as from GNU's."""
    records = tmp_path / "train.jsonl"
    records.write_text('{"a": 1}\n{"a": 2}\n{"a": 3')
    stage = stage_from_dict(
        {"stage": "l", "host": "local", "outputs": {"lines": str(records), "expected": 3}}
    )
    checkers = [Checker(stage), Checker(stage, host=_BusyBoxHost(_applets(tmp_path / "bb")))]

    def read() -> list[tuple]:
        out = []
        for checker in checkers:
            r = checker.check().readings["outputs"]
            out.append((r.says, r.evidence.get("count"), r.evidence.get("partial_record")))
        return out

    first = read()
    assert first[0] == first[1] == (Says.WORKING, 2, True), first
    with open(records, "a") as f:
        f.write("}\n")
    second = read()
    assert second[0] == second[1] and second[0][1:] == (3, False), second
    assert read() == [(Says.DONE, 3, False)] * 2
    records.write_text("{}\n")  # rewritten smaller: counted again from the start
    assert [r[1] for r in read()] == [1, 1]


def _failing(where: Path, tools: tuple[str, ...]) -> list[str]:
    """The command prefix that runs a command with each of ``tools`` (in /usr/bin) replaced
    by one that fails as an old or minimal one does (an option it does not know), in a mount
    namespace of its own. (BusyBox's sh runs its own applets whatever PATH holds: a GNU host.)"""
    _needs_root()
    where.mkdir(parents=True)
    fake = where / "fails"
    fake.write_text('#!/bin/sh\necho "${0##*/}: unrecognized option" >&2\nexit 1\n')
    fake.chmod(0o755)
    binds = [f"mount --bind {fake} /usr/bin/{tool}" for tool in tools]
    return ["unshare", "-m", "sh", "-c", " && ".join(binds) + ' && exec "$@"', "sh"]


def test_a_tool_that_fails_is_unknown_with_its_error_never_a_zero(tmp_path) -> None:
    """A host whose ``find`` and ``tail`` fail: the count of a directory and of a JSONL file
    is unknown and says why; never 0 outputs (which, once the job is gone past exit_grace,
    fails a job that succeeded)."""
    out = tmp_path / "out"
    out.mkdir()
    for k in range(20):
        (out / f"sample_{k}.pt").write_bytes(b"x")
    records = tmp_path / "records.jsonl"
    records.write_text("{}\n" * 20)
    host = _BusyBoxHost(_failing(tmp_path / "tools", ("find", "tail")))
    readings = {}
    for section, where in (("files", out), ("lines", records)):
        stage = {"stage": f"s-{section}", "host": "local", "outputs": {section: str(where), "expected": 20}}
        readings[section] = Checker(stage_from_dict(stage), host=host).check().readings["outputs"]
        assert readings[section].says is Says.UNKNOWN, (section, readings[section].detail)
        assert readings[section].evidence["count"] is None, (section, readings[section].evidence)
        assert Checker(stage_from_dict(stage)).check().readings["outputs"].evidence["count"] == 20
    assert "find: unrecognized option" in readings["files"].detail, readings["files"].detail
    assert "read 0 of 60 bytes" in readings["lines"].detail, readings["lines"].detail
    # At the expected number, the check for a file written in place fails: not "none was",
    # which would let the count decide alone.
    stage = {"stage": "in-place", "host": "local", "outputs": {"files": str(out), "expected": 20}}
    host = _BusyBoxHost([])
    checker = Checker(stage_from_dict(stage), host=host)
    assert checker.check().readings["outputs"].evidence["count"] == 20
    host.wrap = _failing(tmp_path / "find", ("find",))
    again = checker.check().readings["outputs"]
    assert again.says is Says.UNKNOWN and "find: unrecognized option" in again.detail, again.detail


# ----------------------------------------------------------------- 4. the stall clock


def test_the_stall_clock_starts_when_the_job_is_first_seen(tmp_path) -> None:
    """A watch begun 3 s before its job, ``stall_after: 2s``: the job appears and works a
    moment, then hangs. No "stalled" before 2 s after it was first seen (it said "stalled: no
    progress for 6s" 0.3 s after it appeared, with 5 s and 4 s); stalled once it has hung
    that long. (A wait longer than stall_after before the job is all the bug needs.)"""
    job = SimulatedJob(tmp_path, scenario="stall", total=10, step=0.05)
    checker = Checker(stage_from_dict(job.stage_dict(interval="300ms", stall_after="2s", exit_grace="1s")))
    begun = time.monotonic()
    while time.monotonic() - begun < 3:
        assert checker.check().state is not State.STALLED
        time.sleep(0.3)
    job.start()
    try:
        seen_at = stalled_at = None
        end = time.monotonic() + 20
        while stalled_at is None and time.monotonic() < end:
            verdict = checker.check()
            now = time.monotonic()
            if seen_at is None and verdict.readings["process"].says is Says.WORKING:
                seen_at = now
            if verdict.state is State.STALLED:
                stalled_at = now
                assert seen_at is not None and now - seen_at >= 2.0, (now - seen_at, verdict.reasons)
            time.sleep(0.3)
    finally:
        job.stop()
    assert stalled_at is not None, "a job hung for longer than stall_after is stalled"


def test_without_a_process_signal_the_stall_clock_starts_when_the_log_and_outputs_appear(tmp_path) -> None:
    """The same for a stage of a log and outputs only: nothing there for 3 s, then the job's
    log and its outputs directory appear at once (and are written for 1 s more)."""
    log, out = tmp_path / "job.log", tmp_path / "out"
    stage = {
        "stage": "appears",
        "host": "local",
        "log": {"path": str(log), "complete": "^done$"},
        "outputs": {"files": str(out), "pattern": "*.pt", "expected": 100},
        "policy": {"interval": "300ms", "stall_after": "2s"},
    }
    checker = Checker(stage_from_dict(stage), since=time.time())
    begun = time.monotonic()
    while time.monotonic() - begun < 3:
        assert checker.check().state is not State.STALLED
        time.sleep(0.3)
    staged = tmp_path / "staged"
    staged.mkdir()
    for k in range(3):
        (staged / f"part-{k}.pt").write_bytes(b"x")
    (tmp_path / "job.tmp").write_text("[1/100] step\n")
    os.rename(staged, out)
    os.rename(tmp_path / "job.tmp", log)
    appeared, writing, stalled_at = time.monotonic(), 0, None
    while stalled_at is None and time.monotonic() - appeared < 15:
        verdict = checker.check()
        if verdict.state is State.STALLED:
            stalled_at = time.monotonic()
            assert stalled_at - appeared >= 2.0, (stalled_at - appeared, verdict.reasons)
        if time.monotonic() - appeared < 1:
            writing += 1
            with log.open("a") as f:
                f.write(f"[{writing + 1}/100] step\n")
        time.sleep(0.3)
    assert stalled_at is not None and stalled_at - appeared >= 3.0, "stalled 2 s after the last write"
