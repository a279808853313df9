"""Whether this run began its log, as the kernel shows it (fuzzer seed 1300210).

A log born within /proc's start precision of the job's process is the job's own under
``nohup job > log`` (the shell opens it between the fork and the exec) — and is equally an
earlier run's where a whole run of a few ms began and ended just before this one, appending
to the same file: the two times cannot tell them apart. The kernel can: which processes hold
the log open, on what kind of description (``/proc/PID/fd``, ``/proc/PID/fdinfo``). The rule
is pure (``opened_in_run``, a table here on made-up starts); the probe's reading of it runs
against real processes holding real files; the fuzzer's seed runs whole in
tests/test_seeds_35.py.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sensors._base.probe import build_script, new_nonce, parse_meta, split_sections
from sensors._hosts import LocalHost
from sensors._run.binding import Holder, opened_in_run
from sensors._signals.log import _HOLDERS_CAP, _holders, holders_lines
from sensors._signals.procfs import elapsed_since

W, A, R, RW = 0o100001, 0o102001, 0o100000, 0o100002  # write-only, appending, read-only, read-write
T0 = 1_800_000_000.0


@pytest.mark.parametrize(
    ("holders", "starts", "began"),
    [
        # `nohup job > log`: the job itself holds the description that began the file.
        ([Holder(10, 1, W, None), Holder(10, 2, W, None)], {10: T0}, True),
        # `job | tee log`: tee, begun in the same tick as the job, began it.
        ([Holder(11, 3, W, T0)], {10: T0}, True),
        # ... or a tick later.
        ([Holder(11, 3, W, T0 + 0.01)], {10: T0}, True),
        # `job >> log`, Python's logging: an appending description says nothing of what was
        # there before it (seed 1300210: a whole earlier run wrote the line).
        ([Holder(10, 1, A, None)], {10: T0}, False),
        ([Holder(10, 3, A, None)], {10: T0}, False),
        # Opened to read and write (`<> log`): it begins nothing.
        ([Holder(10, 1, RW, None)], {10: T0}, False),
        # A wrapper begun before the run holds it to write (`sh -c "old; job" > log`): every
        # run it starts shares that one description.
        ([Holder(11, 1, W, None), Holder(9, 1, W, T0 - 5, 1, True, 1)], {11: T0}, False),
        ([Holder(11, 1, W, None), Holder(9, 1, A, T0 - 5, 1, False)], {11: T0}, False),
        # A reader begun before (`tail -f log`) writes nothing.
        ([Holder(10, 1, W, None), Holder(8, 3, R, T0 - 60)], {10: T0}, True),
        # ... also begun in the same tick: the parent of the run's process, which ran another
        # child before it (11's parent is 9: `{ old; job; } > log`).
        ([Holder(11, 1, W, None), Holder(9, 1, W, T0, 1, True, None)], {11: T0}, False),
        # ... not known to have run none.
        ([Holder(11, 1, W, None), Holder(9, 1, W, T0, 1, None)], {11: T0}, False),
        # ... none of its children ended yet: it ran nothing before this run's.
        ([Holder(11, 1, W, None), Holder(9, 1, W, T0, 1, False)], {11: T0}, True),
        # ... those that ended used less than a tick of CPU (`cd "$(dirname "$0")"`): no run.
        ([Holder(11, 1, W, None), Holder(9, 1, W, T0, 1, True, 0)], {11: T0}, True),
        # ... a tick or more: it may have been a run of the job.
        ([Holder(11, 1, W, None), Holder(9, 1, W, T0, 1, True, 2)], {11: T0}, False),
        # ... unless it began the file and the job is the very next PID: it forked nothing
        # before (`bash run.sh > log`, run.sh running the job).
        ([Holder(9, 1, W, T0 - 0.004, 1, True)], {10: T0}, True),
        ([Holder(9, 1, A, T0 - 0.004, 1, False)], {10: T0}, False),
        # A holder whose start could not be read is not known to have begun with the run.
        ([Holder(10, 1, W, None), Holder(12, 1, W, None)], {10: T0}, False),
        # A tee begun before the job (another pipeline's): not with the run.
        ([Holder(11, 3, W, T0 - 0.05)], {10: T0}, False),
        # Nobody holds it (the job closed it, or BusyBox's find cannot look): not shown.
        ([], {10: T0}, False),
        # No process of this run alive: nothing to compare with.
        ([Holder(10, 1, W, None)], {}, False),
    ],
)
def test_what_the_kernel_shows_of_who_began_the_log(
    holders: list[Holder], starts: dict[int, float], began: bool
) -> None:
    parents = {10: 9, 11: 9}  # the job's parent: the shell that started it
    assert opened_in_run(holders, starts, parents) is began


@pytest.mark.parametrize(
    ("pos", "began_whole"),
    [(300, True), (512, True), (299, False), (None, False)],
)
def test_a_log_the_runs_description_wrote_whole_is_all_its_own(pos: int | None, began_whole: bool) -> None:
    """With the log's size (read just before the holders): the description that began it
    had written up to its end (a re-run's `> log`, the last run's bytes truncated away), or
    another writer's bytes, or bytes older than the open, lie past its offset."""
    holders = [Holder(10, 1, W, None, 9, None, None, pos)]
    assert opened_in_run(holders, {10: T0}, {10: 9}) is True
    assert opened_in_run(holders, {10: T0}, {10: 9}, size=300) is began_whole


def test_the_holders_answer_is_digits_or_no_holder() -> None:
    """The section's lines are numbers each (``f PID FD FLAGS``, ``s PID PPID TICKS``), then
    ``whole``; anything else is nothing, the flags are octal, a process read two ways has no
    start, and a list not whole (cut, or ended early) shows nothing."""
    meta = parse_meta(None)
    raw = (
        b"f 123 1 0100001\np 123 1 77\nf 123 2 0100001\nf x 1 0100001\nf 124 3 0102001\n"
        b"s 123 1 4242 0 0\ns 124 1 4243 5 1\ns 124 7 9 5 1\nwhole\n"
    )
    hs = _holders(raw, meta)
    assert hs is not None
    assert [(h.pid, h.fd, h.flags, h.ppid) for h in hs] == [(123, 1, W, 1), (123, 2, W, 1), (124, 3, A, None)]
    assert hs[0].began_the_file and not hs[2].began_the_file and hs[2].started is None
    assert _holders(b"whole\n", meta) == [] and _holders(b"", meta) == []
    assert _holders(b"f 123 1 0100001\ncut\n", meta) is None
    assert _holders(b"f 123 1 0100001\ns 123 1 4242 0 0\n", meta) is None  # awk stopped short
    assert hs[0].reaped is False and hs[0].pos == 77 and hs[1].pos is None


# --------------------------------------------------------------------------- the probe, for real


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(5)


def _read(log: Path, pid: int | None = None) -> tuple[list[Holder], float | None]:
    """The holders section as the probe's own snippet reads it on this host, and when
    ``pid`` began, read in the same probe (as the process signal's table is)."""
    nonce = new_nonce()
    lines = holders_lines(str(log))
    if pid is not None:
        lines += ["sec job", f"cat /proc/{pid}/stat"]
    sections = split_sections(LocalHost().run_script(build_script(nonce, None, [lines]), timeout=30), nonce)
    meta = parse_meta(sections.get("meta"))
    started = None
    if pid is not None:
        age, _ = elapsed_since(int(sections["job"].rsplit(b") ", 1)[1].split()[19]), meta)
        started = None if age is None or meta.now is None else round(meta.now - age, 3)
    inode = log.stat().st_ino if log.exists() else None  # the log's, as its stat reads it
    return _holders(sections.get("log_holders"), meta, inode), started


def _job(cmd: str, procs: list[subprocess.Popen[bytes]]) -> int:
    """Run ``cmd`` (JOB in it: a Python job named uniquely) from sh; the job's PID."""
    marker = f"cc-holders-{uuid.uuid4().hex[:8]}"
    job = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(30)' {marker}"
    burn = f"{shlex.quote(sys.executable)} -c 'sum(i * i for i in range(300000))'"
    procs.append(
        subprocess.Popen(["sh", "-c", cmd.replace("JOB", job).replace("BURN", burn)], start_new_session=True)
    )
    for _ in range(100):
        out = subprocess.run(["pgrep", "-f", f" {marker}$"], capture_output=True, text=True)
        if out.stdout.split():
            time.sleep(0.1)  # the shell's redirections are open by now (they precede the exec)
            return int(out.stdout.split()[0])
        time.sleep(0.05)
    raise AssertionError(f"the job never started: {cmd}")


@pytest.mark.parametrize(
    ("how", "cmd", "began"),
    [
        ("> log", "exec JOB > LOG 2>&1", True),
        (">> log", "exec JOB >> LOG 2>&1", False),
        ("| tee log", "JOB | tee LOG > /dev/null", True),
        # A wrapper that ran a job's worth of work (a tick or more of CPU) before this one.
        ("a wrapper's > log", "{ BURN; JOB; true; } > LOG", False),
        # ... one that ran only a quick command (`cd "$(dirname "$0")"`, `date`): no run.
        ("a script's quick command, > log", "{ /bin/true; JOB; true; } > LOG", True),
        ("a script's > log", "{ JOB; true; } > LOG", True),
    ],
)
def test_the_probe_reads_who_holds_the_log(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]], how: str, cmd: str, began: bool
) -> None:
    """Real processes holding a real file, read by the probe's own snippet: each redirection
    reads as the kernel has it, and only `> log` and `tee log` show the run began its log."""
    log = tmp_path / "job.log"
    pid = _job(cmd.replace("LOG", shlex.quote(str(log))), spawned)
    holders, started = _read(log, pid)
    assert started is not None
    parent = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b") ", 1)[1].split()[1])
    assert opened_in_run(holders, {pid: started}, {pid: parent}) is began, holders
    if how == "> log":
        assert {(h.fd, h.began_the_file) for h in holders if h.pid == pid} == {(1, True), (2, True)}
    if how == "| tee log":
        assert [h.fd for h in holders if h.pid != pid and h.began_the_file] == [3], holders
    if how == "a wrapper's > log":
        # The shell that opened it for every command it runs holds it too, begun first, and
        # ran a command before this one.
        assert [h.pid for h in holders if h.pid != pid and h.writes] == [parent], holders


def test_a_log_nobody_holds_shows_nothing(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("Done\n")
    assert _read(log)[0] == []


def test_a_path_with_pattern_characters_is_the_very_file(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """find's pattern is escaped: `*` and `[1]` in the log's path match themselves only."""
    odd, other = tmp_path / "run*[1].log", tmp_path / "run-x1.log"
    other_pid = _job(f"exec JOB > {shlex.quote(str(other))}", spawned)
    odd.write_text("")
    assert _read(odd)[0] == []
    pid = _job(f"exec JOB > {shlex.quote(str(odd))}", spawned)
    assert {h.pid for h in _read(odd)[0]} == {pid} and pid != other_pid


def test_one_scan_of_proc_for_every_log_first_seen_in_a_probe(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """A batch that first sees many logs at once (a fleet's stages, a watcher started over
    them) reads every process's descriptors once, not once a log: one find over /proc, and
    each log's holders are its own."""
    logs = [tmp_path / f"stage{k}.log" for k in range(3)]
    pids = [_job(f"exec JOB > {shlex.quote(str(log))}", spawned) for log in logs[:2]]
    logs[2].write_text("")  # held by none
    nonce = new_nonce()
    parts = [[f"P=s{k}.", *holders_lines(str(log))] for k, log in enumerate(logs)]
    script = build_script(nonce, None, parts)
    assert script.count(b"-printf '%p %m %l") == 1, script.decode()  # the scan (holders_of: none)
    sections = split_sections(LocalHost().run_script(script, timeout=30), nonce)
    meta = parse_meta(sections.get("meta"))
    found = [_holders(sections.get(f"s{k}.log_holders"), meta) for k in range(3)]
    assert [{h.pid for h in held or []} for held in found] == [{pids[0]}, {pids[1]}, set()], found
    assert found[0] is not None and found[1] is not None


def test_a_log_reached_through_a_symlink_is_the_file_it_names(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """The descriptors name the file by its resolved path: a stage whose log path passes
    through a symlink (``/scratch`` to ``/mnt/nvme0``) finds its holders all the same."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    pid = _job(f"exec JOB > {shlex.quote(str(real / 'job.log'))}", spawned)
    assert {h.pid for h in _read(tmp_path / "link" / "job.log")[0]} == {pid}


def test_another_logs_passing_holder_leaves_this_logs_holders_whole(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """A holder of another stage's log that ends between the probe's one scan and this log's
    reading (a job's short-lived children inherit its stdout: `sleep`, `nvidia-smi`, `git`)
    is no holder of this log: this log's list is whole all the same. A list not whole shows
    nothing, read once at the log's first binding: the stage could never be shown begun by
    its run (adversary 6: 20 probes out of 20 lost a held log's holders)."""
    busy, log = tmp_path / "busy.log", tmp_path / "job.log"
    _job(f"JOB & while :; do sleep 0.01; done > {shlex.quote(str(busy))}", spawned)
    pid = _job(f"exec JOB > {shlex.quote(str(log))}", spawned)
    lost = 0
    for _ in range(20):
        nonce = new_nonce()
        parts = [[f"P=s{k}.", *holders_lines(str(p))] for k, p in enumerate((busy, log))]
        sections = split_sections(LocalHost().run_script(build_script(nonce, None, parts), timeout=30), nonce)
        held = _holders(sections.get("s1.log_holders"), parse_meta(sections.get("meta")))
        lost += {h.pid for h in held or []} != {pid}
    assert lost == 0, f"{lost} probes out of 20 lost the holders of a log held by one process"


def test_a_file_of_another_mount_namespace_named_like_the_log_holds_nothing_of_it(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """/proc/PID/fd names a file by its path in its holder's own mount namespace (a
    container's, an `unshare -rm` any user may run): a process begun after the run, holding a
    file of its own at the log's very path, is no holder of the log. Taken as one, it "began"
    an earlier run's log and wrote it whole (its offset past the log's size): the earlier
    run's completion line became this run's (adversary 6)."""
    if os.geteuid() != 0 or not Path("/usr/bin/unshare").exists():
        pytest.skip("needs root's unshare -m")
    d = tmp_path / "data"
    d.mkdir()
    log = d / "job.log"
    log.write_text("Done\n")  # an earlier run's, its completion line in it
    run_pid = _job("exec JOB", spawned)
    _, run_started = _read(log, run_pid)
    script = tmp_path / "ns.sh"
    q = shlex.quote(str(d))
    script.write_text(f'mount -t tmpfs x {q} || exit 1\nexec > {q}/job.log\nprintf 0123456789\nexec "$@"\n')
    ns_pid = _job(f"exec unshare -m sh {shlex.quote(str(script))} JOB", spawned)
    assert os.readlink(f"/proc/{ns_pid}/fd/1") == str(log)  # the path the kernel shows
    holders, _ = _read(log)
    assert run_started is not None
    assert ns_pid not in {h.pid for h in holders}, holders
    assert opened_in_run(holders, {run_pid: run_started}, {}, size=5) is False


def _holding(opens: str, procs: list[subprocess.Popen[bytes]]) -> None:
    """A Python process that runs ``opens`` (its descriptors on the log) and holds them; back
    once they are open."""
    code = f"import os, time\n{opens}\nprint('open', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"open\n"


@pytest.mark.parametrize("probe", ["one scan", "a scan of its own"])
def test_readers_past_the_cap_leave_the_runs_own_writer_seen(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]], probe: str
) -> None:
    """A user who can read the log holds it open 300 times (more than the holders cap), only
    to read (adversary 7): descriptors that cannot write are left out of the list (their
    link's mode), so the run's own ``> log`` is still read whole and shows the run began its
    log. The readers' process, begun before the run, would decide nothing if it were read
    (``opened_in_run`` counts writers only): without them the list is not cut. Read through
    the probe's one scan, and through a scan of its own (the log's path through a symlink)."""
    assert _HOLDERS_CAP < 300
    real = tmp_path / "real"
    real.mkdir()
    log = real / "job.log"
    log.write_text("")
    _holding(f"fds = [open({str(log)!r}) for _ in range(300)]", spawned)
    pid = _job(f"exec JOB > {shlex.quote(str(log))} 2>&1", spawned)
    if probe == "a scan of its own":
        (tmp_path / "link").symlink_to(real)
        log = tmp_path / "link" / "job.log"
    holders, started = _read(log, pid)
    assert holders is not None, "the list was cut"
    assert started is not None
    assert {h.pid for h in holders} == {pid}, holders
    parent = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b") ", 1)[1].split()[1])
    assert opened_in_run(holders, {pid: started}, {pid: parent}, size=0) is True


def test_a_writer_among_readers_begun_before_the_run_is_still_seen(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    """The other side: leaving readers out never hides a writer. A process begun before the
    run that holds the log to read *and* to write (``O_RDWR``: mode 0700) is read, and the
    run is not shown to have begun its log."""
    log = tmp_path / "job.log"
    log.write_text("")
    _holding(f"r = open({str(log)!r}); rw = os.open({str(log)!r}, os.O_RDWR)", spawned)
    time.sleep(0.05)
    pid = _job(f"exec JOB > {shlex.quote(str(log))} 2>&1", spawned)
    holders, started = _read(log, pid)
    assert holders is not None and started is not None
    writers = {h.pid for h in holders if h.writes}
    assert pid in writers and len(writers) == 2, holders
    assert all(h.writes for h in holders), holders  # the reader's descriptor is left out
    parent = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b") ", 1)[1].split()[1])
    assert opened_in_run(holders, {pid: started}, {pid: parent}, size=0) is False


class _AsNobody(LocalHost):
    """The local host, as a probe run by another user than the job's sees it: the job's
    /proc/PID/fd is closed to it (mode 0500, the job's owner's)."""

    nvml = False
    shell = ("runuser", "-u", "nobody", "--", "/bin/sh", "-s")


@pytest.mark.parametrize("probe", ["nobody", "root"])
def test_a_probe_that_cannot_read_the_jobs_descriptors_says_so_not_to_use_a_fresh_log(probe: str) -> None:
    """ML user, `nohup python job.py > job.log` as root, watched by a probe of another user
    (a monitoring account) from after the job's completion line, while it syncs (`wandb:
    Synced`). The kernel would show that the job's `> log` began the log, but /proc/PID/fd of
    root's job is closed to that user: whose the line is cannot be told (unknown, as ever).
    The reading said "no description of this run is shown to have begun it (an appending
    one, `>> log`, never is)" and advised `job > log`, which the job did, and the stuck line
    repeated it: the fix is to run the probe as the job's user or as root. The same watch as
    root reads the job's `> log` and completes."""
    import tempfile

    from sensors import Checker, stage_from_dict

    if os.geteuid() != 0:
        pytest.skip("needs root: the job is root's, the probe nobody's")
    root = Path(tempfile.mkdtemp(prefix="crosscheck-nobody-"))
    root.chmod(0o755)
    log, gate = root / "job.log", root / "go"
    tag = f"probe-as-nobody-{uuid.uuid4().hex[:8]}"
    script = (
        "import os, time\n"
        "print('step 1/2', flush=True)\n"
        "print('Extraction complete', flush=True)\n"
        "print('wandb: Waiting for W&B process to finish...', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
        "print('wandb: Synced run', flush=True)\n"
    )
    job = subprocess.Popen(
        [
            "sh",
            "-c",
            f"exec {shlex.quote(sys.executable)} -c {shlex.quote(script)} {tag} > {shlex.quote(str(log))} 2>&1",
        ],
        start_new_session=True,
    )
    spec = {
        "stage": "probe-as-nobody",
        "process": {"match": tag},
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "300ms", "timeout": "30s"},
    }
    try:
        deadline = time.monotonic() + 20
        while b"wandb: Waiting" not in (log.read_bytes() if log.exists() else b""):
            assert time.monotonic() < deadline, "the job never wrote its line"
            time.sleep(0.05)
        host = _AsNobody() if probe == "nobody" else LocalHost()
        with Checker(stage_from_dict(spec), host=host) as checker:
            alive = checker.check()
            gate.touch()
            job.wait(20)
            after = [checker.check() for _ in range(3)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        for p in root.iterdir():
            p.unlink()
        root.rmdir()
    assert alive.state.value == "running", alive.reasons
    if probe == "root":
        assert after[-1].state.value == "complete", after[-1].reasons
        return
    said = after[-1].readings["log"].detail
    assert after[-1].state.value != "complete", after[-1].reasons  # unknown is not no
    assert "`job > log`" not in said, said  # the job did that: no advice to do it
    assert "as the job's user or as root" in said, said
