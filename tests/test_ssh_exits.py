"""The SSH host's exit watch (sensors._hosts.ssh_exits): one channel per connection sees
the watched processes end, on the host's clock, and a channel that dies never makes up an end.

Real processes on this machine, watched through the test sshd on 127.0.0.1 (the host's clock
is this machine's, so an end can be compared with when the test saw the process exit). The
protocol's reading is table-tested without a channel.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sensors import Checker, stage_from_dict
from sensors._config.stage import SSHSpec
from sensors._hosts.exits import SeenEnd
from sensors._hosts.ssh import SSHHost
from sensors._hosts.ssh_exits import RemoteExitWatch
from tests.sshd import SLOW_LOGIN_S, SSHD, ensure_slow_login_user
from tests.sshd import _children as _descendants


def _ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rfind(b")") + 2 :].split()[19])


def _until(what: Callable[[], bool], within: float) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.01)
    return what()


@pytest.fixture
def ssh(ssh_spec) -> Iterator[SSHHost]:
    host = SSHHost(SSHSpec(**ssh_spec))
    host.run_script(b"true\n", timeout=20)  # connected: the watch opens its channel on it
    yield host
    host.close()


def _parent(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _parent(int(entry)) == pid:
                    found.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


def test_the_end_is_seen_within_a_poll_of_the_exit(ssh: SSHHost) -> None:
    """Processes that exit on their own are seen to end: each end an interval on the host's
    clock that holds the exit, its last sighting alive within ~100 ms before it, known to
    this machine within half a second."""
    watch = ssh.exit_watch()
    started = time.time()
    procs = [subprocess.Popen(["sleep", f"{1.0 + 0.37 * i:.2f}"]) for i in range(5)]
    keys = [(p.pid, _ticks(p.pid)) for p in procs]
    for key in keys:
        watch.watch(*key)
    assert _until(lambda: all(watch.state(*k) == "watching" for k in keys), 5), [
        watch.state(*k) for k in keys
    ]
    gaps, known_after = [], []
    for i, (proc, key) in enumerate(zip(procs, keys, strict=True)):
        proc.wait()  # a blocking waitpid (with a timeout, Popen polls every few ms up to 50)
        reaped = time.time()  # the exit came before (a zombie counts as ended)
        assert _until(lambda key=key: watch.end(*key) is not None, 2.0), watch.state(*key)
        known_after.append(time.time() - reaped)
        end = watch.end(*key)
        assert isinstance(end, SeenEnd)
        assert end.alive <= reaped, (end, reaped)  # alive before it exited
        assert end.gone >= started + 1.0 + 0.37 * i - 0.01, (end, started)  # gone after it could exit
        assert end.alive <= end.gone
        gaps.append(reaped - end.alive)
    print(f"last seen alive before the exit: {[round(g * 1000) for g in gaps]} ms; known after {known_after}")
    assert statistics.median(gaps) < 0.1, gaps
    assert max(gaps) < 0.3, gaps  # a loaded 2-core machine delays a poll now and then
    assert max(known_after) < 0.5, known_after
    assert watch.channels == 1


def test_one_channel_per_host_however_many_processes_and_stages(ssh: SSHHost, tmp_path: Path) -> None:
    """Two stages on one connection, ten processes each: one watch, one channel (the host's
    sshd has two sessions for this connection: the kept probe shell and the watch); every
    end is seen."""
    procs: dict[str, list[subprocess.Popen[bytes]]] = {}
    checkers = []
    for tag in ("a", "b"):
        mark = f"exits-{tag}-{time.time_ns()}"
        procs[tag] = [
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)", "--tag", mark])
            for _ in range(10)
        ]
        doc = {"stage": f"s{tag}", "host": "local", "process": {"match": f"--tag {mark}$"}}
        checkers.append(Checker(stage_from_dict(doc), host=ssh))
    time.sleep(0.3)
    for checker in checkers:
        found = checker.check().readings["process"].evidence["processes"]
        assert len(found) == 10, found
    watch = ssh.exit_watch()
    keys = [(p.pid, _ticks(p.pid)) for group in procs.values() for p in group]
    assert _until(lambda: all(watch.state(*k) == "watching" for k in keys), 5), [
        watch.state(*k) for k in keys
    ]
    assert watch.channels == 1
    assert watch.remote_pid is not None
    session = _parent(watch.remote_pid)  # sshd's process for this connection
    assert len(_children(session)) == 2, _children(session)  # the probe's shell and the watch
    for group in procs.values():
        for p in group:
            p.wait(20)
    assert _until(lambda: all(watch.state(*k) == "ended" for k in keys), 3), [watch.state(*k) for k in keys]
    assert watch.channels == 1


def test_a_process_that_ends_a_second_after_the_first_check_is_seen_to_end(sshd_server: SSHD) -> None:
    """The user's login shell takes SLOW_LOGIN_S to start (a ``conda init`` in ``.bashrc``),
    for the probe's kept shell and for the watch's channel alike. The checker warms the exit
    watch before its first probe, so its channel starts beside the probe's shell: a process
    the first check found, which ends 0.8 s after that check (well within a login shell's
    start), is seen to end. Opened only when the check handed the process over, the watch
    looked SLOW_LOGIN_S later and found it gone: its end unseen."""
    user = ensure_slow_login_user(sshd_server)
    mark = f"exits-slow-{time.time_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "--tag", mark], stdin=subprocess.PIPE
    )
    host = SSHHost(SSHSpec(**sshd_server.spec(user=user)))
    try:
        time.sleep(0.3)
        checker = Checker(
            stage_from_dict({"stage": "s", "host": "local", "process": {"match": f"--tag {mark}$"}}),
            host=host,
        )
        began = time.monotonic()
        found = checker.check().readings["process"].evidence["processes"]
        assert time.monotonic() - began >= SLOW_LOGIN_S  # the kept shell's login came first
        assert [p["pid"] for p in found] == [proc.pid], found
        key = (proc.pid, _ticks(proc.pid))
        watch = host.exit_watch()
        time.sleep(0.8)
        assert proc.stdin is not None
        proc.stdin.close()  # the job's last step
        proc.wait(10)
        reaped = time.time()
        assert _until(lambda: watch.state(*key) in ("ended", "unseen"), 5), watch.state(*key)
        end = watch.end(*key)
        assert end is not None, watch.state(*key)
        assert end.alive <= reaped and reaped - end.alive < 0.5, (end, reaped)
        assert watch.channels == 1
    finally:
        proc.kill()
        host.close()


@pytest.mark.parametrize("how", ["watcher killed", "connection dropped"])
def test_a_dead_channel_leaves_the_end_unknown(ssh: SSHHost, how: str) -> None:
    """The watch's channel dies (its shell killed on the host, or the connection lost), then
    a watched process ends: no end is reported, ever (the next channel finds it gone, and
    when it was last alive is not known to it). A process still alive when the next channel
    opens is watched afresh, and its end is seen."""
    watch = ssh.exit_watch()
    lost = subprocess.Popen(["sleep", "30"])
    kept = subprocess.Popen(["sleep", "30"])
    lost_key, kept_key = (lost.pid, _ticks(lost.pid)), (kept.pid, _ticks(kept.pid))
    watch.watch(*lost_key)
    watch.watch(*kept_key)
    assert _until(lambda: watch.state(*lost_key) == "watching" and watch.state(*kept_key) == "watching", 5)
    if how == "watcher killed":
        assert watch.remote_pid is not None
        os.killpg(watch.remote_pid, signal.SIGKILL)  # the watch's shell leads its session
    else:
        ssh._drop()  # as a network that goes away looks to the client
    assert _until(lambda: not watch.live, 5)
    lost.kill()
    lost.wait(20)
    if how == "connection dropped":
        ssh.run_script(b"true\n", timeout=20)  # a check connects again; the watch follows
    assert _until(lambda: watch.state(*lost_key) == "unseen", 10), watch.state(*lost_key)
    assert watch.end(*lost_key) is None and watch.ended(*lost_key) is None
    assert watch.channels == 2
    assert _until(lambda: watch.state(*kept_key) == "watching", 5), watch.state(*kept_key)
    kept.kill()
    reaped = (kept.wait(20), time.time())[1]
    assert _until(lambda: watch.end(*kept_key) is not None, 3), watch.state(*kept_key)
    end = watch.end(*kept_key)
    assert end is not None and end.alive <= reaped
    time.sleep(0.3)
    assert watch.end(*lost_key) is None  # still not made up


def test_a_reused_pid_is_another_process(ssh: SSHHost) -> None:
    """A PID is watched with start ticks that are not its process's (the probe's process
    ended and the PID went to another): the watched process has ended, when is not seen."""
    proc = subprocess.Popen(["sleep", "5"])
    try:
        watch = ssh.exit_watch()
        key = (proc.pid, _ticks(proc.pid) - 1)
        watch.watch(*key)
        assert _until(lambda: watch.state(*key) == "unseen", 5), watch.state(*key)
        assert watch.end(*key) is None
    finally:
        proc.kill()
        proc.wait()


NAMED = "import sys, time\nopen('/proc/self/comm', 'w').write(sys.argv[1])\ntime.sleep(float(sys.argv[2]))"


def test_a_name_that_looks_like_stat_fields_is_read_after_the_last_parenthesis(ssh: SSHHost) -> None:
    """A process named ``x) Z 1 2 3`` (a zombie's state, to a parser that stops at the first
    parenthesis) is watched alive, and its real end is seen."""
    proc = subprocess.Popen([sys.executable, "-c", NAMED, "x) Z 1 2 3", "1.5"])
    time.sleep(0.3)  # named by then
    assert "x) Z 1 2 3" in Path(f"/proc/{proc.pid}/stat").read_text()
    watch = ssh.exit_watch()
    key = (proc.pid, _ticks(proc.pid))
    watch.watch(*key)
    assert _until(lambda: watch.state(*key) == "watching", 5), watch.state(*key)
    time.sleep(0.3)
    assert watch.state(*key) == "watching"
    proc.wait()
    reaped = time.time()
    assert _until(lambda: watch.end(*key) is not None, 3), watch.state(*key)
    end = watch.end(*key)
    assert end is not None and end.alive <= reaped


def test_a_name_with_a_newline_is_no_end(ssh: SSHHost) -> None:
    """A process whose name holds a newline (its stat's first line ends inside the name,
    the next one forged to read as another PID's fields) is not taken for ended while it
    lives: it is no longer watched, and its end is never reported."""
    proc = subprocess.Popen([sys.executable, "-c", NAMED, "a\n1 (b", "3"])
    try:
        time.sleep(0.3)
        assert "\n" in Path(f"/proc/{proc.pid}/stat").read_text()
        watch = ssh.exit_watch()
        key = (proc.pid, _ticks(proc.pid))
        watch.watch(*key)
        assert _until(lambda: watch.state(*key) == "unseen", 5), watch.state(*key)
        assert proc.poll() is None  # alive all along
        assert watch.end(*key) is None
    finally:
        proc.kill()
        proc.wait()


def test_the_exit_watch_on_busybox_tools_reads_whole_seconds(tmp_path: Path) -> None:
    """A host whose sh, date and sleep are BusyBox's (its date without %N here): the watcher
    says its clock reads whole seconds, and the end it reports still holds the exit (alive at
    the second it read, or later; gone by the second after)."""
    from tests.sshd import SSHD, sshd_available
    from tests.test_true_readings import _applets

    if not sshd_available():
        pytest.skip("no sshd")
    server = SSHD(wrap=_applets(tmp_path / "bb", bash=True))
    host = None
    try:
        server.start()
        host = SSHHost(SSHSpec(**server.spec()))
        assert host.run_script(b"date +%N\n", timeout=20).split() == [b"%N"]
        watch = host.exit_watch()
        proc = subprocess.Popen(["sleep", "2.5"])
        key = (proc.pid, _ticks(proc.pid))
        began = time.time()
        watch.watch(*key)
        assert _until(lambda: watch.state(*key) == "watching", 5), watch.state(*key)
        assert watch.clock_step == 1.0
        proc.wait(20)
        reaped = time.time()
        assert _until(lambda: watch.end(*key) is not None, 3), watch.state(*key)
        end = watch.end(*key)
        assert end is not None
        assert end.alive <= reaped and end.gone >= began + 2.5 - 0.01, (end, began, reaped)
        assert end.gone - end.alive <= 3.0, end
    finally:
        if host is not None:
            host.close()
        server.cleanup()


# ------------------------------------------------------------------ the protocol, no channel

_A, _B = (101, 5000), (102, 5001)

# Lines from the host's watcher (after its start: nanosecond clock) -> each key's end.
PROTOCOL = [
    (
        "seen alive, then gone",
        ["S 1", "W 101 5000 10.0", "E 101 5000 10.05 10.1"],
        {_A: SeenEnd(10.05, 10.1)},
    ),
    ("gone at the first look: unseen", ["S 1", "E 101 5000 - 10.1"], {_A: None}),
    (
        "a heartbeat moves last-alive on",
        ["S 1", "W 101 5000 10.0", "H 12.0", "S 2", "E 101 5000 - 12.1"],
        {_A: SeenEnd(12.0, 12.1)},
    ),
    (
        "a heartbeat covers only what its poller found alive",
        ["S 1", "W 101 5000 10.0", "H 12.0", "S 2", "W 102 5001 12.05", "H 13.0", "E 101 5000 - 13.1"],
        {_A: SeenEnd(12.0, 13.1), _B: None},
    ),
    (
        "a garbled end is no end",
        ["S 1", "W 101 5000 10.0", "E 101 5000 10.05 10.1x", "E 101 5000"],
        {_A: None},
    ),
    ("an end of a process not watched is ignored", ["S 1", "E 103 5002 10.0 10.1"], {_A: None}),
    (
        "a stat it cannot read: unseen",
        ["S 1", "W 101 5000 10.0", "U 101 5000", "E 101 5000 10.0 10.1"],
        {_A: None},
    ),
]


@pytest.mark.parametrize(("lines", "ends"), [c[1:] for c in PROTOCOL], ids=[c[0] for c in PROTOCOL])
def test_the_watchers_lines_make_ends(lines: list[str], ends: dict) -> None:
    watch = RemoteExitWatch(lambda: None)
    try:
        for key in (_A, _B):
            watch.watch(*key)
        for line in ["C 0", "R", *lines]:
            watch._take(line.split())
        for key, end in ends.items():
            assert watch.end(*key) == end, (key, watch.state(*key))
    finally:
        watch.close()


def test_a_whole_seconds_clock_widens_the_end() -> None:
    """A clock of whole seconds: the first read gone, S, came before S + 1."""
    watch = RemoteExitWatch(lambda: None)
    try:
        watch.watch(*_A)
        for line in ["C 1", "R", "S 1", "W 101 5000 10", "E 101 5000 11 12"]:
            watch._take(line.split())
        assert watch.end(*_A) == SeenEnd(11.0, 13.0)
    finally:
        watch.close()


def test_a_lost_channel_forgets_when_its_processes_were_alive() -> None:
    """After a channel is lost, a new one that finds the process gone has not seen it end."""
    watch = RemoteExitWatch(lambda: None)
    try:
        watch.watch(*_A)
        for line in ["C 0", "R", "S 1", "W 101 5000 10.0", "H 11.0"]:
            watch._take(line.split())
        watch._lost()
        for line in ["C 0", "R", "S 2", "E 101 5000 - 30.0"]:
            watch._take(line.split())
        assert watch.end(*_A) is None and watch.state(*_A) == "unseen"
    finally:
        watch.close()


def test_a_server_of_one_session_keeps_it_for_the_checks() -> None:
    """A server that allows one session per connection (``MaxSessions 1``, a hardened host):
    the checks' kept shell holds it and the exit watch is refused, harmlessly. Once that
    shell ends (killed on the host, OOM) the warm watch, retrying every second, took the
    session first, and held it while the stage was checked: every later check was refused a
    channel ("the server refused a channel"), unknown for good. The watch gives its channel
    up to a check the server refused, and stands aside until a check has its own again."""
    server = SSHD()
    server.config.write_text(server.config.read_text().replace("MaxSessions 10\n", "MaxSessions 1\n"))
    server.start()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--tag", "one-session"])
    host = SSHHost(SSHSpec(**server.spec()))
    try:
        checker = Checker(
            stage_from_dict({"stage": "s", "host": "local", "process": {"match": "--tag one-session$"}}),
            host=host,
        )
        assert checker.check().state.value == "running"
        assert server.proc is not None
        shells = [p for p in _descendants(server.proc.pid) if _cmdline(p) == b"/bin/sh\0-s\0"]
        assert len(shells) == 1, shells  # the checks' kept shell: the watch was refused
        os.kill(shells[0], signal.SIGKILL)  # it ends on the host
        time.sleep(2.5)  # the watch's retries: a second apart
        said = []
        for _ in range(4):
            verdict = checker.check()
            said.append(verdict.state.value + ": " + " ".join(verdict.reasons)[:120])
            time.sleep(0.3)
        assert all(s.startswith("running") for s in said[1:]), said
    finally:
        proc.kill()
        proc.wait()
        host.close()
        server.cleanup()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
