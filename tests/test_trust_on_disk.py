"""Trust on disk (issue 34): an exit record, an exits directory or a state store another user
could have written never decides a stage (sensors/_base/trust.py; docs/run-binding.md, "What
crosscheck trusts on disk").

Each attack is played by a second, unprivileged user (created here when the tests run as
root, as in CI; skipped otherwise): it makes the directory first on a shared HOME, writes an
"exit 0" record for a job that exits 1, puts a symbolic link where the wrapper writes, or
makes the state store first with mode 0666. Every one of them worked before this change.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import sensors
from sensors import Checker, State, stage_from_dict
from sensors._base.errors import ProbeError
from sensors._base.probe import build_script, new_nonce, split_sections
from sensors._hosts import _WRAPPER, LocalHost
from sensors._run.run import Run, exit_record_lines, launch_mark_script, parse_launch_mark, read_launch_end
from sensors.testing import COMPLETE_LINE
from tests.users import useradd

OTHER = "cc-trust"


def _other_user() -> int:
    """The uid of a second, unprivileged user (made once, no home, no login)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a second user (useradd) and act as it (runuser)")
    try:
        return pwd.getpwnam(OTHER).pw_uid
    except KeyError:
        useradd(OTHER, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin")
        return pwd.getpwnam(OTHER).pw_uid


def _as_other(script: str) -> None:
    subprocess.run(["runuser", "-u", OTHER, "--", "sh", "-c", script], check=True, timeout=30)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory like /tmp (root's, mode 1777): a HOME on shared scratch, where another
    user can make what crosscheck would make later."""
    path = Path(tempfile.mkdtemp(prefix="crosscheck-trust-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _one_line(text: str) -> str:
    text = text.strip()
    assert text and "\n" not in text, text
    return text


# ----------------------------------------------------------------- 1. the exits directory


@pytest.mark.parametrize(
    "setup, why",
    [
        ("others", "exits is owned by uid {uid}, not you (uid 0)"),
        ("others-above", "crosscheck is owned by uid {uid}, not you (uid 0)"),
        ("writable", "exits is writable by group and others (mode 0777)"),
        ("symlink", "exits is a symbolic link, not a directory"),
    ],
)
def test_launch_refuses_an_exits_directory_another_user_could_write(
    shared, tmp_path, monkeypatch, setup, why
):
    """HOME on a shared directory: another user made ``~/.local/state/crosscheck/exits``
    first (``mkdir -p`` reused it), and could write "0" as the record of a job that fails.
    Nothing is started; one line names the directory and what to do."""
    uid = _other_user()
    state = shared / ".local" / "state"
    exits = state / "crosscheck" / "exits"
    if setup == "others":
        _as_other(f"umask 022 && mkdir -p {exits}")
    elif setup == "others-above":
        _as_other(f"umask 022 && mkdir -p {exits.parent}")
        exits.mkdir(mode=0o700)  # the user's own, in a directory the other user can rename it out of
    elif setup == "writable":
        exits.mkdir(parents=True)
        exits.chmod(0o777)
    else:
        (tmp_path / "mine").mkdir(mode=0o700)
        exits.parent.mkdir(parents=True, mode=0o700)
        exits.symlink_to(tmp_path / "mine")
    monkeypatch.setenv("HOME", str(shared))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    log = tmp_path / "job.log"
    with pytest.raises(ProbeError) as refused:
        LocalHost().launch(["sh", "-c", "exit 1"], log_path=str(log), name=f"trust-{uuid.uuid4().hex[:8]}")
    message = _one_line(str(refused.value))
    assert why.format(uid=uid) in message, message
    assert "refusing it" in message and "XDG_STATE_HOME" in message, message
    assert not log.exists()  # the job was never started


def test_launch_makes_and_uses_an_exits_directory_of_its_own(tmp_path, monkeypatch):
    """The refusal leaves the ordinary case alone: a fresh 0700 directory, a record read back."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    launched = LocalHost().launch(["sh", "-c", "exit 3"], log_path=str(tmp_path / "job.log"), name="own")
    exits = tmp_path / "state" / "crosscheck" / "exits"
    assert launched.exit_file == str(exits / "own")
    assert exits.stat().st_mode & 0o777 == 0o700
    deadline = time.monotonic() + 10
    while not exits.joinpath("own").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert exits.joinpath("own").read_text().split()[0] == "3"
    assert sorted(p.name for p in exits.iterdir()) == ["own"]  # nothing left aside


# ----------------------------------------------------------------- 2. the wrapper's file aside


@pytest.mark.parametrize("shell", ["dash", "bash", "busybox sh"])
def test_the_wrapper_never_writes_through_a_link_put_where_it_writes(shared, tmp_path, shell):
    """A symbolic link where the wrapper used to write its record aside (``NAME.part``),
    to a file of root's: the wrapper (root's) overwrote it. Now the file aside has a name
    nobody can foretell and is created exclusively: root's file is as it was."""
    _other_user()
    if shutil.which(shell.split()[0]) is None:
        pytest.skip(f"{shell} is not installed")
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    exits = shared / "exits"
    _as_other(f"mkdir -m 777 {exits} && ln -s {secret} {exits}/job.part")
    done = subprocess.run(
        [*shell.split(), "-c", _WRAPPER, str(exits / "job"), "sh", "-c", "exit 1"], timeout=30, check=False
    )
    assert secret.read_text() == "root's own\n"
    assert done.returncode == 0 and (exits / "job").read_text().split()[0] == "1"
    assert (exits / "job.part").is_symlink()  # left where it was, not followed


@pytest.mark.parametrize("shell", ["dash", "bash", "busybox sh"])
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "to-nothing"])
def test_noclobber_refuses_a_link_in_every_shell_the_wrapper_runs_in(tmp_path, shell, dangling):
    """What the wrapper's fallback (no mktemp: a name of its PID) rests on: with ``set -C``,
    ``>`` opens with O_EXCL, and refuses a symbolic link whether it names a file or nothing."""
    if shutil.which(shell.split()[0]) is None:
        pytest.skip(f"{shell} is not installed")
    target = tmp_path / "target"
    if not dangling:
        target.write_text("kept\n")
    (tmp_path / "link").symlink_to(target)
    done = subprocess.run(
        [*shell.split(), "-c", "set -C; echo written > link"], cwd=tmp_path, capture_output=True, timeout=10
    )
    assert done.returncode != 0
    assert (target.read_text() == "kept\n") if not dangling else not target.exists()


# ----------------------------------------------------------------- 3. the state store


def _status(tmp_path: Path, env: dict[str, str], *state: str) -> subprocess.CompletedProcess[str]:
    stage = tmp_path / "stage.yaml"
    stage.write_text(yaml.safe_dump({"stage": "trust", "process": {"match": f"no-job-{uuid.uuid4().hex}"}}))
    env = {**env, "PYTHONPATH": str(Path(sensors.__file__).resolve().parent.parent)}
    return subprocess.run(
        [sys.executable, "-m", "sensors", "status", str(stage), *state],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )


@pytest.mark.parametrize(
    "setup", ["made-first-on-a-shared-home", "others-0666", "mine-0666", "in-a-0777-dir"]
)
def test_a_state_store_another_user_could_write_is_refused(shared, tmp_path, setup):
    """A store made first by another user (mode 0666, adopted and left theirs), or one they
    can write: they could hand a watch a launched run whose exit record is theirs. Refused
    with one line naming it, exit 2, and left as it was."""
    uid = _other_user()
    env = {k: v for k, v in os.environ.items() if k not in ("CROSSCHECK_STATE", "XDG_STATE_HOME")}
    args: tuple[str, ...] = ()
    if setup == "made-first-on-a-shared-home":
        store = shared / ".local" / "state" / "crosscheck" / "state.db"
        _as_other(f"umask 0 && mkdir -p {store.parent} && : > {store}")
        env["HOME"] = str(shared)
        why = f"{store.parent} is owned by uid {uid}, not you (uid 0)"
    else:
        folder = tmp_path / "private"
        folder.mkdir(mode=0o700)
        store = folder / "state.db"
        store.touch()
        store.chmod(0o666)
        args = ("--state", str(store))
        why = f"{store} is writable by group and others (mode 0666)"
        if setup == "others-0666":
            os.chown(store, uid, uid)
            why = f"{store} is owned by uid {uid}, not you (uid 0)"
        elif setup == "in-a-0777-dir":
            store.chmod(0o600)
            folder.chmod(0o777)
            why = f"{folder} is writable by group and others (mode 0777)"
    done = _status(tmp_path, env, *args)
    assert done.returncode == 2, (done.returncode, done.stderr)
    message = _one_line(done.stderr)
    assert message.startswith("crosscheck: ") and why in message, message
    assert "CROSSCHECK_STATE" in message, message
    assert store.stat().st_size == 0 and not Path(f"{store}-wal").exists()  # not adopted


def test_a_store_crosscheck_makes_is_its_users_alone(tmp_path):
    store = tmp_path / "fresh" / "state.db"
    done = _status(tmp_path, dict(os.environ), "--state", str(store))
    assert done.returncode != 2, done.stderr
    assert store.stat().st_mode & 0o777 == 0o600
    assert store.parent.stat().st_mode & 0o777 == 0o700


# ----------------------------------------------------------------- 4. the probe's reading


def _forged(tmp_path: Path, setup: str, uid: int) -> tuple[Path, str]:
    """An "exit 0" record in a directory, as ``setup`` makes it; the reason the probe gives."""
    exits = tmp_path / "exits"
    exits.mkdir(mode=0o700)
    record = exits / "job"
    line = f"0 {time.time():.3f}\n"
    if setup == "symlink":
        mine = tmp_path / "elsewhere"
        mine.write_text(line)
        mine.chmod(0o600)
        record.symlink_to(mine)
        return record, f"{record} is a symbolic link, not a regular file"
    if setup == "fifo":
        os.mkfifo(record, 0o600)
        return record, f"{record} is a FIFO, not a regular file"
    record.write_text(line)
    record.chmod(0o600)
    if setup == "others":
        os.chown(record, uid, uid)
        return record, f"{record} is owned by uid {uid}, not the probe's user (uid 0)"
    if setup == "world-writable":
        record.chmod(0o666)
        return record, f"{record} is writable by group and others (mode 0666)"
    if setup == "group-writable":
        # Another user's group (the user's private group is the user's own: see below).
        os.chown(record, -1, pwd.getpwuid(_other_user()).pw_gid)
        record.chmod(0o620)
        return record, f"{record} is writable by group (mode 0620)"
    if setup == "others-dir":
        os.chown(exits, uid, uid)
        return record, f"{exits} is owned by uid {uid}, not the probe's user (uid 0)"
    exits.chmod(0o733)
    return record, f"{exits} is writable by group and others (mode 0733)"


SETUPS = ["others", "world-writable", "group-writable", "symlink", "fifo", "others-dir", "writable-dir"]


@pytest.mark.parametrize("setup", SETUPS)
def test_the_probe_reads_no_exit_record_another_user_could_have_written(tmp_path, host, setup):
    """The record says "0": read, it was a status. Not trusted, it is no status, not even
    "not written yet"; the reason names the path (locally and over SSH)."""
    record, why = _forged(tmp_path, setup, _other_user() if setup.startswith("others") else -1)
    nonce = new_nonce()
    script = build_script(nonce, None, [exit_record_lines(str(record), None)])
    sections = split_sections(host.run_script(script, timeout=30), nonce)
    end = read_launch_end(sections, hidden=False)
    assert end.status is None and not end.missing, (end, sections.get("exit"))
    assert why in end.untrusted, end.untrusted


def test_the_probe_reads_a_record_of_its_own(tmp_path, host):
    exits = tmp_path / "exits"
    exits.mkdir(mode=0o700)
    (exits / "job").write_text("7 1700000000.25\n")
    (exits / "job").chmod(0o600)
    nonce = new_nonce()
    for name, status in (("job", 7), ("not-yet", None)):
        script = build_script(nonce, None, [exit_record_lines(str(exits / name), None)])
        end = read_launch_end(split_sections(host.run_script(script, timeout=30), nonce), hidden=False)
        assert (end.status, end.untrusted, end.missing) == (status, "", status is None)


@pytest.mark.parametrize("with_process", [True, False], ids=["process-and-log", "log-only"])
def test_a_forged_exit_0_never_makes_a_job_that_exited_1_complete(tmp_path, host, with_process):
    """The reported attack: a launched run pointed at an exit record another user wrote
    ("0"), for a job that printed its completion line and exited 1. It went complete (wait
    exited 0). Now how the job ended is unknown, and the stage is not complete."""
    uid = _other_user()
    log = tmp_path / "job.log"
    mark = parse_launch_mark(host.run_script(launch_mark_script(str(log)), timeout=30))
    pid = host.spawn(["sh", "-c", f"echo '{COMPLETE_LINE}: 1 sample'; exit 1"], log_path=str(log))
    record, why = _forged(tmp_path, "others", uid)
    run = Run(
        "launch", mark.started_at, mark.log_inode, mark.log_offset, mark.log_fingerprint, pid, str(record)
    )
    stage = {
        "stage": "forged",
        "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}"},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "200ms"},
    }
    if with_process:
        stage["process"] = {"pid": pid}
    time.sleep(0.5)  # the job is over: its line written, exit 1
    checker = Checker(stage_from_dict(stage), host=host, run=run)
    verdicts = [checker.check() for _ in range(4)]
    assert State.COMPLETE not in [v.state for v in verdicts], verdicts[-1].reasons
    assert verdicts[-1].state is State.UNKNOWN, verdicts[-1].reasons
    said = " ".join(verdicts[-1].reasons)
    assert why in said and "not trusted" in said, said


def test_a_record_writable_by_the_users_private_group_is_the_users_own(tmp_path, host) -> None:
    """umask 002 under user private groups (RHEL's default; Debian's with usergroups): a
    record or directory writable by the user's own group, of the user's name and with no
    other member, is trusted (as OpenSSH does). The user's test found a launched job that
    exited 0 unknown for good under umask 002."""
    import grp

    me = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(me.pw_gid)
    if group.gr_name != me.pw_name or set(group.gr_mem) - {me.pw_name}:
        pytest.skip(f"{me.pw_name}'s primary group is no private group here")
    exits = tmp_path / "exits"
    exits.mkdir(mode=0o770)
    exits.chmod(0o770)
    record = exits / "job"
    record.write_text("0 1796104800.5\n")
    record.chmod(0o660)
    nonce = new_nonce()
    script = build_script(nonce, None, [exit_record_lines(str(record), None)])
    sections = split_sections(host.run_script(script, timeout=30), nonce)
    assert sections["exit"].startswith(b"0 1796104800.5"), sections["exit"]
