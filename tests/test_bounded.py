"""Bounded services (issue 34): what one user can make a watcher or a probe spend.

- The metrics endpoint serves a few connections at once, each for a few seconds: idle
  connections from any local user once took every descriptor of the watcher, and every check
  was ``unknown`` ("Too many open files").
- A log that blocks its reader (a FIFO, a file of /proc or of a FUSE mount that says it is
  empty and never answers) costs its own stage ``unknown``, never the other stages of its host.
- A probe past its deadline is ended with all its children on the host, locally and over SSH.
"""

from __future__ import annotations

import json
import os
import re
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sensors import Checker
from sensors._base.errors import ProbeError
from sensors._check.batch import check_batch
from sensors._watch.watcher import MAX_CONNECTIONS, REQUEST_TIMEOUT_S
from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _verdicts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_idle_connections_to_the_metrics_endpoint_cost_the_watcher_no_descriptor_it_needs(
    tmp_path: Path,
) -> None:
    """A watcher limited to 256 descriptors, 300 idle connections to its metrics port (from
    this process, on 127.0.0.1): it holds MAX_CONNECTIONS of them at most, its checks go on
    (none ``unknown``, no "Too many open files"), and /healthz answers once the idle ones
    have had their few seconds. At 0edce7f it held every one it could and ran out."""
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="bounded-serve")
    job.start()
    job.write_stage(stages / "s.yaml", interval="200ms", stall_after="1h")
    port = _free_port()
    out, err = tmp_path / "out.jsonl", tmp_path / "err.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db")}

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--metrics-port", str(port)],
            stdout=fo, stderr=fe, env=env, preexec_fn=limit,
        )  # fmt: skip
    idle: list[socket.socket] = []
    try:
        end = time.monotonic() + 30
        while not _verdicts(out) or not _healthy(port, 1.0):
            assert proc.poll() is None and time.monotonic() < end, err.read_text()
            time.sleep(0.2)
        before = _fds(proc.pid)
        idle += _connected(port, 300)  # connected, say nothing
        opened_at = time.monotonic()
        time.sleep(1.0)  # every connection accepted (or closed) by now
        held = _fds(proc.pid) - before
        assert held <= MAX_CONNECTIONS + 4, held
        opened_wall = time.time() - (time.monotonic() - opened_at)
        # /healthz, the 300 still open: answered once the held ones have timed out.
        answered = None
        while answered is None and time.monotonic() < opened_at + REQUEST_TIMEOUT_S + 10:
            answered = _healthy(port, 2.0)
        assert answered is not None and answered["ok"], "no /healthz answer"
        assert time.monotonic() - opened_at < REQUEST_TIMEOUT_S + 10
        # Checks went on meanwhile, with descriptors to spare: checked since, not unknown.
        time.sleep(1.0)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        last = re.search(r"^crosscheck_stage_last_check_timestamp_seconds\{[^}]*\} (\S+)$", metrics, re.M)
        assert last is not None and float(last.group(1)) > opened_wall, metrics
        assert re.search(r'verdict="unknown"\} 0\.0$', metrics, re.M), metrics
        assert "Too many open files" not in out.read_text() + err.read_text()
        assert proc.poll() is None
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        job.stop()


def _connected(port: int, n: int, timeout: float = 30.0) -> list[socket.socket]:
    """``n`` connections to ``port`` on 127.0.0.1, made as fast as the server meets them.
    Its listen backlog is 5: a connect made while the backlog is full has its SYN dropped and
    waits a second for the retransmit, and 300 connects one after the other took 48 s (about
    6 a second, fewer than the server would hold within its request timeout). A connect not
    made within 50 ms is dropped and made again at once: a flood of idle clients, all of them
    at the server within a second or two."""
    socks: list[socket.socket] = []
    end = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        while len(socks) < n:
            assert time.monotonic() < end, f"{len(socks)} of {n} connections made"
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            sel.register(s, selectors.EVENT_WRITE)
            made = sel.select(0.05) and s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
            sel.unregister(s)
            if made:
                s.setblocking(True)
                socks.append(s)
            else:
                s.close()
    return socks


def _healthy(port: int, timeout: float) -> dict | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=timeout).json()
    except (httpx.HTTPError, ValueError):
        return None


def test_a_client_that_trickles_its_request_is_dropped_within_the_request_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One byte a second never ends a request line: the connection is closed once
    REQUEST_TIMEOUT_S have passed since it was accepted, not held while bytes keep coming.
    (The timeout set to 3 s here: what it bounds is the same at any value.)"""
    from sensors._watch.watcher import Metrics, Watcher

    timeout = 3.0
    monkeypatch.setattr("sensors._watch.watcher.REQUEST_TIMEOUT_S", timeout)
    watcher = Watcher(tmp_path)
    server = Metrics(watcher).serve(0)
    try:
        port = server.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            began = time.monotonic()
            closed = False
            while time.monotonic() - began < timeout + 5:
                try:
                    s.sendall(b"G")
                    s.settimeout(0.5)
                    if s.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
            took = time.monotonic() - began
        assert closed, "still open"
        assert timeout - 1 < took < timeout + 3, took
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- a log that blocks


def _probe_processes(
    *needles: str, exact: tuple[str, ...] = (), since: float = 0.0, mark: str | None = None
) -> list[str]:
    """This machine's processes whose command line holds one of ``needles`` (the probe's
    children: its ``tail`` names the log; the SSH host is this machine too), or is one of
    ``exact``, began after ``since`` (a wall-clock time) and, with ``mark``, has it in its
    environment (what the test's own shell handed down: another test's ``sleep 2`` on this
    machine, begun meanwhile, is not this one's)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            began = os.stat(f"/proc/{entry.name}").st_ctime
            if cmd in exact and mark is not None:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    ours = mark.encode() in f.read().split(b"\0")
            else:
                ours = True
        except OSError:
            continue  # gone meanwhile
        named = any(n in cmd for n in needles) and "skewfs" not in cmd
        if named or (cmd in exact and began >= since and ours):
            found.append(f"{entry.name} {cmd}")
    return found


@pytest.mark.timeout(90)
def test_a_log_whose_read_blocks_costs_only_its_own_stage(tmp_path: Path, host) -> None:
    """One batch on one host: a stage whose log is a FUSE file that says it is empty and whose
    reads never answer (as /proc/kmsg does for root), a stage whose log is a FIFO with no
    writer, and a stage with an ordinary log that says it is done. The ordinary stage gets its
    verdict, the other two their ``unknown`` of their own, well within the deadline; nothing
    of the probe is left on the host. At 0edce7f the empty file was read: the probe ran into
    its deadline and all three stages were ``unknown``, the read left behind."""
    from sensors import stage_from_dict
    from tests import skewfs

    why = skewfs.available()
    if why:
        pytest.skip(why)
    fifo = tmp_path / "stall.fifo"
    os.mkfifo(fifo)
    plain = tmp_path / "plain.log"
    plain.write_text("step 1\nExtraction complete\n")
    with skewfs.skewed_mount(tmp_path / "backing", tmp_path / "mnt", 0.0, hang=True) as mnt:
        (tmp_path / "backing" / "kmsg.hang").write_text("never read\n")
        stuck = mnt / "kmsg.hang"
        assert stuck.stat().st_size == 0

        def checker(name: str, log: Path) -> Checker:
            doc = {
                "stage": name,
                "host": "local",
                "log": {"path": str(log), "complete": "^Extraction complete"},
            }
            return Checker(stage_from_dict(doc), host=host, since="1h")

        checkers = [checker("stuck", stuck), checker("fifo", fifo), checker("plain", plain)]
        began = time.monotonic()
        verdicts = check_batch(checkers)
        took = time.monotonic() - began
        by = {v.stage: v.readings["log"] for v in verdicts}
        assert by["plain"].says.value == "done", by["plain"]
        assert by["fifo"].says.value == "unknown" and "not a regular file: fifo" in by["fifo"].detail
        # Says it is empty: read as empty (nothing to read, so nothing read), never done.
        assert by["stuck"].says.value != "done", by["stuck"]
        assert "host_error" not in by["plain"].evidence
        assert took < 10, took
        time.sleep(0.5)
        assert _probe_processes(str(fifo), str(stuck)) == []


_RUNNER_MODES = {"s": "setsid and a watchdog", "g": "GNU timeout"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", sorted(_RUNNER_MODES))
def test_the_kept_shell_ends_a_late_script_with_every_process_it_started(tmp_path: Path, mode: str) -> None:
    """The kept SSH shell's runner (``ssh_shell.wrapped``) run by a real ``/bin/sh``, in each
    way it can bound a script on the host (the test sshd's host has GNU timeout, so the setsid
    way is chosen here by hand): a script whose ``tail`` blocks on a FIFO, under a ``dd`` as a
    probe's, is SIGKILLed at its limit with every process it started, and the next script of
    the same shell runs. A script that ends in time leaves nothing past its limit (its
    watchdog's ``sleep`` is ended with it, but for a rare race in which it ends by itself at
    the limit, without killing anything).
    BusyBox's timeout (what a host without GNU's or setsid had) killed only the script's shell:
    the tail and the dd lived on."""
    from sensors._hosts.ssh_shell import wrapped

    if mode == "s" and shutil.which("setsid") is None:
        pytest.skip("no setsid here")
    fifo = tmp_path / "stall.fifo"
    os.mkfifo(fifo)
    blocked = f"__p() {{ tail -c +1 -- {fifo} | head -c 0; }}\n__p </dev/null | dd 2>/dev/null\n".encode()
    sent = (
        f"__cc_g={mode}\n".encode()
        + wrapped(b"echo first", b"m1", 4)
        + wrapped(blocked, b"m2", 2)
        + wrapped(b"echo third", b"m3", 4)
    )
    began, wall = time.monotonic(), time.time() - 1.0
    mark = f"CROSSCHECK_TEST_SHELL={tmp_path.name}-{os.getpid()}"  # what its processes inherit
    env = {**os.environ, mark.partition("=")[0]: mark.partition("=")[2]}
    done = subprocess.run(["/bin/sh", "-s"], input=sent, capture_output=True, timeout=30, env=env)
    took = time.monotonic() - began
    assert done.stdout == (
        b"first\n\n@@crosscheck-done m1 0\n\n@@crosscheck-done m2 137\nthird\n\n@@crosscheck-done m3 0\n"
    )
    assert 2 <= took < 6, took
    time.sleep(0.3)
    assert _probe_processes(str(fifo), exact=("sleep 2",), since=wall, mark=mark) == []
    # Past the last script's limit (it began before the shell ended), nothing is left: a
    # watchdog's sleep that lost the race ends by itself at its limit (the third script's began
    # 2 s in; under load later), never later.
    last_limit = began + took + 4.0
    left = _probe_processes(str(fifo), exact=("sleep 4", "sleep 2"), since=wall, mark=mark)
    while left and time.monotonic() < last_limit + 1.5:
        time.sleep(0.2)
        left = _probe_processes(str(fifo), exact=("sleep 4", "sleep 2"), since=wall, mark=mark)
    assert left == []


@pytest.mark.timeout(60)
def test_a_probe_past_its_deadline_is_ended_with_its_children(tmp_path: Path, host) -> None:
    """Locally (its own session, the group killed) and over SSH (the kept shell's runner): a
    probe blocked in a child's read is ended at the deadline and none of its processes stays."""
    fifo = tmp_path / "stall.fifo"
    os.mkfifo(fifo)
    script = f"__p() {{ tail -c +1 -- {fifo} | head -c 0; }}\n__p </dev/null | dd 2>/dev/null\n".encode()
    began = time.monotonic()
    with pytest.raises(ProbeError, match="did not finish"):
        host.run_script(script, timeout=3)
    assert time.monotonic() - began < 3 + 3
    time.sleep(0.5)
    assert _probe_processes(str(fifo)) == []
    assert host.run_script(b"echo next\n", timeout=10) == b"next\n"


@pytest.mark.timeout(120)
def test_a_stuck_network_file_system_costs_only_its_own_stage_in_a_batch(
    tmp_path: Path, host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One batch on one host: a stage whose log is on a FUSE mount whose reads no longer answer
    (a file server that stopped: the size is there, the bytes never come) and a stage whose log
    is an ordinary local file that says it is done. The stuck stage's part runs guarded (its
    files are not on a local file system): at its budget it is ended and ``unknown`` with the
    reason, and the ordinary stage gets its verdict in the same probe, long before the check's
    deadline, at every check. Without the guard the probe ran into its deadline and both
    stages were ``unknown``."""
    from sensors import stage_from_dict
    from tests import skewfs

    why = skewfs.available()
    if why:
        pytest.skip(why)
    # The budget set small: a stuck read is ended at any budget (10 s by default, waited
    # twice a host), and a healthy guarded read here takes milliseconds.
    budget = 3.0
    monkeypatch.setattr("sensors._check.batch.GUARD_BUDGET", budget)
    plain = tmp_path / "plain.log"
    plain.write_text("step 1\nExtraction complete\n")
    with skewfs.skewed_mount(tmp_path / "backing", tmp_path / "mnt", 0.0, hang=True) as mnt:
        (tmp_path / "backing" / "train.stuck").write_text("step 1\nExtraction complete\n")
        stuck = mnt / "train.stuck"
        assert stuck.stat().st_size > 0

        def checker(name: str, log: Path) -> Checker:
            doc = {
                "stage": name,
                "host": "local",
                "log": {"path": str(log), "complete": "^Extraction complete"},
            }
            return Checker(stage_from_dict(doc), host=host, since="1h")

        checkers = [checker("stuck", stuck), checker("plain", plain)]
        for _ in range(2):
            began = time.monotonic()
            verdicts = check_batch(checkers)
            took = time.monotonic() - began
            by = {v.stage: v.readings["log"] for v in verdicts}
            assert by["plain"].says.value == "done", by["plain"]
            assert by["stuck"].says.value == "unknown", by["stuck"]
            assert f"did not finish within {int(budget)} s" in by["stuck"].detail, by["stuck"].detail
            assert budget - 1 < took < budget + 8, took
        # The local stage runs unguarded from its second check on; the stuck one stays guarded.
        assert [c.guarded for c in checkers] == [True, False]
