"""An adversary's findings on issue 37 (``crosscheck init`` and the words of a stage over
several hosts): each test failed on the code it was written against. Real processes, a real
socket; no mocks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args], capture_output=True, text=True, timeout=90,
        env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=cwd,
    )  # fmt: skip


class _Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, code: str, *args: str, cwd: Path, ready: Path | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], cwd=cwd, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.procs.append(proc)
        deadline = time.monotonic() + 20
        while ready is not None and not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the process did not start"
            time.sleep(0.05)
        time.sleep(0.2)
        return proc


@pytest.fixture
def procs():
    made = _Procs()
    yield made
    for proc in made.procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


#: A job: opens ARGV[1] for appending, writes ARGV[2] to it, touches "ready", sleeps.
_JOB = (
    "import sys, time\n"
    "f = open(sys.argv[1], 'a'); f.write(sys.argv[2] + '\\n'); f.flush()\n"
    "open('ready', 'w').close()\n"
    "time.sleep(120)\n"
)


def test_write_into_a_folder_that_does_not_exist_is_one_line_not_a_traceback(tmp_path, procs) -> None:
    proc = procs.start(_JOB, str(tmp_path / "job.log"), "step 1", cwd=tmp_path, ready=tmp_path / "ready")
    target = tmp_path / "no" / "such" / "stage.yaml"
    result = _cli("init", "--pid", str(proc.pid), "--write", str(target))
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert result.stdout == "" and not target.exists()
    assert len(result.stderr.strip().splitlines()) == 1 and str(target) in result.stderr, result.stderr


def test_write_through_a_dangling_symlink_is_refused_and_writes_nothing(tmp_path, procs) -> None:
    """Held: a dangling link is refused like an existing file; nothing appears where it points."""
    proc = procs.start(_JOB, str(tmp_path / "job.log"), "step 1", cwd=tmp_path, ready=tmp_path / "ready")
    aim = tmp_path / "elsewhere.yaml"
    link = tmp_path / "stage.yaml"
    link.symlink_to(aim)
    result = _cli("init", "--pid", str(proc.pid), "--write", str(link))
    assert result.returncode == 2 and "exists" in result.stderr, result.stderr
    assert not aim.exists() and result.stdout == ""


def test_a_match_over_two_unrelated_jobs_is_not_drafted_as_one_job_with_two_ranks(tmp_path, procs) -> None:
    """``--match`` found an editor-like process (started first, the lower PID) and the job:
    the draft took the first one's command line for ``process.match``, said "2 ranks seen",
    and took the log of one and the outputs of the other. Two command lines that differ in
    more than their numbers are two jobs: init says so and drafts neither."""
    tag = f"advtag{os.getpid()}"
    (tmp_path / "out").mkdir()
    decoy = procs.start("import time; time.sleep(120)", "--view", tag, cwd=tmp_path)
    job = procs.start(_JOB, str(tmp_path / "job.log"), "step 1", "--tag", tag, "--out", str(tmp_path / "out"),
                      cwd=tmp_path, ready=tmp_path / "ready")  # fmt: skip
    result = _cli("init", "--match", tag)
    assert "ranks seen" not in result.stdout, result.stdout
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert f"pid {decoy.pid}" in result.stderr and f"pid {job.pid}" in result.stderr, result.stderr
    assert "--pid" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_ranks_started_alike_but_for_their_numbers_are_still_one_job(tmp_path, procs) -> None:
    """Held (the other side of the test above): two ranks whose command lines differ only in
    a rank's number are one job."""
    tag = f"advrank{os.getpid()}"
    (tmp_path / "r0").mkdir()
    (tmp_path / "r1").mkdir()
    for r in (0, 1):
        procs.start(_JOB, f"../job{r}.log", "step 1", "--tag", tag, "--rank", str(r),
                    cwd=tmp_path / f"r{r}", ready=tmp_path / f"r{r}" / "ready")  # fmt: skip
    result = _cli("init", "--match", tag)
    assert result.returncode == 0, result.stderr
    assert "2 ranks seen" in result.stdout, result.stdout


def test_expected_is_not_guessed_below_the_files_already_there(tmp_path, procs) -> None:
    """The log's "epoch 1/3" became ``expected: 3`` while 5 files were already there: the
    outputs were "done" the moment the draft was saved, and no to-do line named expected."""
    out = tmp_path / "out"
    out.mkdir()
    for k in range(5):
        (out / f"part-{k:05d}.npy").write_bytes(b"x")
    proc = procs.start(_JOB, str(tmp_path / "job.log"), "epoch 1/3", "--out", str(out), cwd=tmp_path,
                       ready=tmp_path / "ready")  # fmt: skip
    result = _cli("init", "--pid", str(proc.pid))
    assert result.returncode == 0, result.stderr
    stage = yaml.safe_load(result.stdout)
    assert stage["outputs"]["files"] == str(out)
    assert stage["outputs"]["expected"] > 5, result.stdout
    assert any(line.startswith("to do: outputs.expected") for line in result.stderr.splitlines()), (
        result.stderr
    )


def test_a_guessed_expected_is_a_line_to_do(tmp_path, procs) -> None:
    """A total guessed from an argument (``--max-steps``: steps are rarely files) is not a
    placeholder, so nothing in "to do" named it: a person who fills in only what init lists
    leaves a wrong total in the gate."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00000.npy").write_bytes(b"x")
    proc = procs.start(_JOB, str(tmp_path / "job.log"), "step 1", "--out", str(out), "--max-steps", "100",
                       cwd=tmp_path, ready=tmp_path / "ready")  # fmt: skip
    result = _cli("init", "--pid", str(proc.pid))
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["outputs"]["expected"] == 100
    assert any(line.startswith("to do: outputs.expected") for line in result.stderr.splitlines()), (
        result.stderr
    )


def test_a_deleted_log_is_not_taken_for_a_file_named_like_its_link(tmp_path, procs) -> None:
    """The job's log was removed; its fd's link reads "job.log (deleted)". A file of that
    very name (anyone's) is not the job's log: the draft must not point at it."""
    code = (
        "import os, time\n"
        "f = open('job.log', 'a'); f.write('step 1\\n'); f.flush()\n"
        "os.unlink('job.log')\n"
        "open('job.log (deleted)', 'w').write('all done\\n')\n"
        "open('ready', 'w').close(); time.sleep(120)\n"
    )
    proc = procs.start(code, cwd=tmp_path, ready=tmp_path / "ready")
    result = _cli("init", "--pid", str(proc.pid))
    assert result.returncode == 0, result.stderr
    assert "job.log (deleted)" not in result.stdout.split("\n# outputs")[0].replace("# log:", ""), (
        result.stdout
    )
    stage = yaml.safe_load(result.stdout)
    assert "log" not in stage or "(deleted)" not in stage["log"]["path"], result.stdout


def test_a_host_that_sent_its_banner_then_stalled_is_not_said_to_have_said_nothing(tmp_path) -> None:
    """ "no answer from H within N s (it accepted the connection, then said nothing)" for a
    host that did answer (its SSH banner) and then stalled: the words must be true."""
    from sensors._base.errors import CrosscheckError
    from sensors._config.stage import SSHSpec
    from sensors._hosts.ssh import SSHHost

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")  # the banner, then nothing
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = SSHHost(
        SSHSpec(ssh="127.0.0.1", port=port, user="nobody", connect_timeout=1.5, known_hosts=str(known))
    )
    try:
        with pytest.raises(CrosscheckError) as caught:
            host.run_script(b"echo hi\n", timeout=10)
    finally:
        host.close()
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
    said = str(caught.value)
    assert "said nothing" not in said, said
    assert f"127.0.0.1:{port}" in said and "1.5 s" in said, said


def test_a_closed_port_is_not_no_answer(tmp_path) -> None:
    """Held: a refused connection is said as refused, never "no answer ... accepted"."""
    from sensors._base.errors import CrosscheckError
    from sensors._config.stage import SSHSpec
    from sensors._hosts.ssh import SSHHost

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = SSHHost(
        SSHSpec(ssh="127.0.0.1", port=port, user="nobody", connect_timeout=1.5, known_hosts=str(known))
    )
    try:
        with pytest.raises(CrosscheckError) as caught:
            host.run_script(b"echo hi\n", timeout=10)
    finally:
        host.close()
    said = str(caught.value)
    assert "accepted the connection" not in said and "no answer" not in said, said
    assert "refused" in said.lower(), said
