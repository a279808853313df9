"""Whose process is the job (``process.user``, issue 34): another user's look-alike never
decides a stage.

Real processes of a second, unprivileged user (created here when running as root), read
through the real CLI, locally and over the test sshd; and table tests of the owner logic.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from sensors import ConfigError, stage_from_dict
from sensors._signals.process import (
    OWNERS_CAP,
    ProcessMemory,
    ProcessSpec,
    _Found,
    _owned,
    _Owners,
    _ProcessTable,
    _resolve_user,
)
from sensors._signals.procfs import CMDLINE_PER_PROCESS, ProcStat
from tests.users import run_as, second_user

REPO = Path(__file__).resolve().parent.parent
OTHER = "ccmallory"


# --------------------------------------------------------------------------- real processes


@pytest.fixture(scope="module")
def other_user() -> pwd.struct_passwd:
    """A second, unprivileged user (see tests/users.py)."""
    return second_user(OTHER)


def _as(user: pwd.struct_passwd, *argv: str, **kw) -> subprocess.Popen:
    """``argv`` run as ``user`` (see tests/users.py)."""
    return run_as(user, *argv, **kw)


def _lookalike(user: pwd.struct_passwd, marker: str) -> subprocess.Popen:
    # `; :` keeps the shell (its command line holds the marker) from exec'ing sleep.
    return _as(user, "/bin/sh", "-c", "sleep 300; :", f"python train.py {marker}", stdin=subprocess.DEVNULL)


def _job(tmp_path: Path, marker: str) -> subprocess.Popen:
    """The job, run as this test's user: writes its completion line and exits 0 once told
    (:func:`_finish`). It waits on a FIFO, forking nothing: a child forked to poll carries the
    job's command line until it execs, and one gone between the probe's reads is unknown."""
    os.mkfifo(tmp_path / "go")
    script = f"read -r _ < {tmp_path}/go; echo done >> {tmp_path}/job.log"
    return subprocess.Popen(["/bin/sh", "-c", script, f"python train.py {marker}"], start_new_session=True)


def _finish(tmp_path: Path, job: subprocess.Popen) -> None:
    with open(tmp_path / "go", "w") as fifo:
        fifo.write("go\n")
    assert job.wait(30) == 0


def _stop(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.fixture(params=["local", "ssh"])
def where(request) -> object:
    """The stage's ``host:``: this machine, or the test sshd on 127.0.0.1 (the same processes)."""
    return "local" if request.param == "local" else request.getfixturevalue("ssh_spec")


def _stage(tmp_path: Path, where: object, marker: str, user: object = None) -> Path:
    process: dict[str, object] = {"match": f"train\\.py {marker}$"}
    if user is not None:
        process["user"] = user
    stage = {
        "stage": f"owner-{marker[:8]}",
        "host": where,
        "process": process,
        "log": {"path": str(tmp_path / "job.log"), "complete": "^done$"},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "1s", "stall_after": "1h"},
    }
    path = tmp_path / "stage.yaml"
    path.write_text(yaml.safe_dump(stage))
    return path


def _cli(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def _status(path: Path) -> dict:
    out = _cli("status", str(path), "--json")
    assert out.returncode in (0, 1, 3), out.stderr
    return json.loads(out.stdout)


def test_without_user_another_users_lookalike_holds_the_stage_and_both_users_are_named(
    tmp_path, where, other_user
) -> None:
    marker = uuid.uuid4().hex
    (tmp_path / "job.log").write_text("start\n")
    path = _stage(tmp_path, where, marker)
    me = pwd.getpwuid(os.geteuid()).pw_name
    job, other = _job(tmp_path, marker), _lookalike(other_user, marker)
    try:
        time.sleep(0.3)
        first = _status(path)
        assert first["verdict"] == "running", first["reasons"]
        process = first["signals"]["process"]
        assert process["evidence"]["users"] == sorted([me, OTHER], key=lambda n: pwd.getpwnam(n).pw_uid)
        text = " ".join(first["reasons"])
        assert f"belong to 2 users ({me}, {OTHER})" in text or f"belong to 2 users ({OTHER}, {me})" in text
        assert "set process.user to say whose job this is" in text
        # The job ends as it should (exit 0, its completion line): the other user's look-alike
        # still holds the stage, since which of the two is the job cannot be told.
        _finish(tmp_path, job)
        for _ in range(3):
            later = _status(path)
            assert later["verdict"] == "running", later["reasons"]
            assert later["signals"]["process"]["evidence"]["pid"] == other.pid
            assert "set process.user" in " ".join(later["reasons"])
            assert OTHER in later["signals"]["process"]["evidence"]["users"]
            assert me in later["signals"]["process"]["evidence"]["users"]
    finally:
        _stop(job, other)


@pytest.mark.parametrize("by", ["name", "uid"])
def test_with_user_the_job_completes_while_another_users_lookalike_runs(
    tmp_path, where, other_user, by
) -> None:
    marker = uuid.uuid4().hex
    (tmp_path / "job.log").write_text("start\n")
    user = pwd.getpwuid(os.geteuid()).pw_name if by == "name" else os.geteuid()
    path = _stage(tmp_path, where, marker, user=user)
    job, other = _job(tmp_path, marker), _lookalike(other_user, marker)
    try:
        time.sleep(0.3)
        first = _status(path)
        assert first["verdict"] == "running", first["reasons"]
        evidence = first["signals"]["process"]["evidence"]
        assert evidence["pid"] == job.pid and evidence["alive"] == 1
        assert evidence["ignored"] == [f"pid {other.pid} owned by uid {other_user.pw_uid} (user {OTHER})"]
        assert "users" not in evidence
        waiting = subprocess.Popen(
            [sys.executable, "-m", "sensors", "wait", str(path), "--json", "--timeout", "60s"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        time.sleep(0.5)
        _finish(tmp_path, job)
        out, err = waiting.communicate(timeout=90)
        verdicts = [json.loads(line) for line in out.splitlines()]
        assert waiting.returncode == 0, (err, verdicts[-1:])
        assert verdicts[-1]["verdict"] == "complete"
        assert other.poll() is None, "the look-alike must still run: it is what was set aside"
        last = verdicts[-1]["signals"]["process"]
        assert last["evidence"]["ignored"] == [
            f"pid {other.pid} owned by uid {other_user.pw_uid} (user {OTHER})"
        ]
    finally:
        _stop(job, other)


def test_an_unknown_user_is_unknown_never_no_match(tmp_path, where) -> None:
    marker = uuid.uuid4().hex
    (tmp_path / "job.log").write_text("done\n")  # a completion line: only the process can hold it
    path = _stage(tmp_path, where, marker, user="nosuchuser-cc")
    verdict = _status(path)
    process = verdict["signals"]["process"]
    assert process["says"] == "unknown"
    assert "process.user 'nosuchuser-cc' is no user on" in process["detail"]
    assert verdict["verdict"] == "unknown"


def test_a_setuid_program_under_a_forged_name_is_its_callers(tmp_path, other_user) -> None:
    """Owner is the real uid: ``su`` run by another user under the job's argv[0] has an
    effective uid of 0 (and /proc/PID is root's), but it is not root's job."""
    su, bash = shutil.which("su"), shutil.which("bash")
    if su is None or bash is None or not os.stat(su).st_mode & 0o4000:
        pytest.skip("needs bash and a setuid-root su")
    marker = uuid.uuid4().hex
    (tmp_path / "job.log").write_text("done\n")
    path = _stage(tmp_path, "local", marker, user="root")
    # su waits for a password on its stdin (a pipe this test holds open).
    forged = _as(other_user, bash, "-c", f'exec -a "python train.py {marker}" {su}', stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            status = Path(f"/proc/{forged.pid}/status").read_text()
            uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
            # setpriv first (root's), then bash (the user's), then su: its uid 0 is effective only.
            if uids[:2] == [str(other_user.pw_uid), "0"] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert uids[0] == str(other_user.pw_uid) and uids[1] == "0", uids  # the premise
        verdict = _status(path)
        process = verdict["signals"]["process"]
        assert "ignored" in process["evidence"], process
        assert process["evidence"]["ignored"] == [
            f"pid {forged.pid} owned by uid {other_user.pw_uid} (user {OTHER})"
        ]
        assert process["evidence"]["alive"] == 0
    finally:
        _stop(forged)


def test_a_batch_reads_the_owners_once_for_every_stage(tmp_path, other_user) -> None:
    """One probe for several stages of a host: the owners section is shared, and each stage
    reads it as its own check does (with process.user: the look-alike set aside; a name the
    host does not know: unknown; without: both users named)."""
    from sensors import Checker
    from sensors._check.batch import check_batch

    marker = uuid.uuid4().hex
    me = pwd.getpwuid(os.geteuid()).pw_name
    match = f"train\\.py {marker}$"
    users: list[object] = [me, None, "nosuchuser-cc"]
    job, other = _job(tmp_path, marker), _lookalike(other_user, marker)
    try:
        time.sleep(0.3)
        checkers = [
            Checker(
                stage_from_dict({"stage": f"b{k}", "process": {"match": match, **({"user": u} if u else {})}})
            )
            for k, u in enumerate(users)
        ]
        own, anyone, unknown = (v.readings["process"] for v in check_batch(checkers))
        assert own.says.value == "working" and own.evidence["pid"] == job.pid and own.evidence["alive"] == 1
        assert own.evidence["ignored"] == [f"pid {other.pid} owned by uid {other_user.pw_uid} (user {OTHER})"]
        assert anyone.says.value == "working" and anyone.evidence["alive"] == 2
        assert set(anyone.evidence["users"]) == {me, OTHER}
        assert unknown.says.value == "unknown" and "'nosuchuser-cc' is no user" in unknown.detail
    finally:
        _stop(job, other)


# --------------------------------------------------------------------------- table tests


@pytest.mark.parametrize(
    ("user", "error"),
    [
        ("alice", None),
        ("svc.backup-01", None),
        ("host$", None),
        (0, None),
        (4294967294, None),
        ("1000", "give a uid as a number"),
        (-1, "out of range"),
        (4294967295, "out of range"),
        (True, "expected a user name"),
        ("-rf", "expected a user name"),
        ("a b", "expected a user name"),
        ("x;touch /tmp/p", "expected a user name"),
        ("", "expected a user name"),
    ],
)
def test_process_user_values(user, error) -> None:
    data = {"stage": "s", "process": {"match": "x", "user": user}}
    if error is None:
        assert stage_from_dict(data).process.user == user
    else:
        with pytest.raises(ConfigError, match=error):
            stage_from_dict(data)


def test_process_user_with_pid_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"process\.user narrows a match"):
        stage_from_dict({"stage": "s", "process": {"pid": 4, "user": "root"}})


@pytest.mark.parametrize(
    ("owners", "names", "uids", "labels", "whole"),
    [
        (b"1 0\n20 1000\n", b"0 root\n", {1: 0, 20: 1000}, {0: "root", 1000: "uid 1000"}, True),
        # Two Uid lines that disagree (a forged one): that PID's owner is not known.
        (b"7 0\n7 1003\n8 5\n", b"", {8: 5}, {}, True),
        (b"7 0\n7 0\n", b"", {7: 0}, {}, True),
        (b"x 0\n9\n10 1a\n 11 0\n12 3\n", b"3 bob\nq z\n", {12: 3}, {3: "bob"}, True),
        (b"1 0\n", None, {1: 0}, {}, False),  # cut before the names: not whole
        (None, None, {}, {}, False),
        (b"1 0\n" * (OWNERS_CAP // 4), b"", {1: 0}, {}, False),
    ],
)
def test_owners_section(owners, names, uids, labels, whole) -> None:
    # The probe writes the names after a "names" line and ends them with "done".
    body = owners if owners is None or names is None else owners + b"names\n" + names + b"done\n"
    parsed = _Owners._parse(body)
    assert dict(parsed.uids) == uids
    assert parsed.whole is whole
    for uid, label in labels.items():
        assert parsed.label(uid) == label


def _table(*pids: int) -> _ProcessTable:
    stats = {p: ProcStat(p, "x", "S", 1, 0, 0, 1, 100 + p) for p in pids}
    return _ProcessTable(stats, {p: "train.py" for p in pids}, frozenset(), {})


@pytest.mark.parametrize(
    ("uids", "remembered", "boot_changed", "kept", "ignored"),
    [
        ({10: 0, 11: 1003}, {}, False, [10], ((11, 1003),)),
        ({10: 0, 11: 0}, {}, False, [10, 11], ()),
        ({10: 1003, 11: 1003}, {}, False, [], ((10, 1003), (11, 1003))),
        # An owner not read (begun or gone between the reads): it may be the job, it stays.
        ({10: 0}, {}, False, [10, 11], ()),
        # Taken for the job before (same start ticks): it stays, whoever owns it now.
        ({10: 1003, 11: 1003}, {10: 110}, False, [10], ((11, 1003),)),
        # ... but not another process under its PID (other start ticks), nor after a reboot.
        ({10: 1003}, {10: 999}, False, [11], ((10, 1003),)),
        ({10: 1003}, {10: 110}, True, [11], ((10, 1003),)),
    ],
)
def test_owned(uids, remembered, boot_changed, kept, ignored) -> None:
    owners = _Owners(uids, {1003: "mallory"}, True)
    found = _Found([10, 11], "match 'train.py'")
    memory = ProcessMemory(identities=remembered)
    got = _owned(found, 0, owners, _table(10, 11), memory, boot_changed)
    assert got.candidates == kept
    assert got.ignored == ignored


@pytest.mark.parametrize(
    ("user", "answer", "want"),
    [
        ("alice", b"1000\n", 1000),
        (7, None, 7),
        ("alice", b"none 1\n", "process.user 'alice' is no user on h (id -u alice knows none)"),
        ("alice", b"none 127\n", "process.user 'alice' cannot be resolved on h: it has no id command"),
        ("alice", None, "process.user 'alice' could not be resolved on h (the probe's answer was cut short)"),
        ("alice", b"", "process.user 'alice' could not be resolved on h (the probe's answer was cut short)"),
    ],
)
def test_resolve_user(user, answer, want) -> None:
    spec = ProcessSpec(match="x", user=user)
    sections = {} if answer is None else {"procuser": answer}
    assert _resolve_user(spec, sections, "h") == want


def _sections(nonce: str, procs: dict[int, tuple[int, bytes]]) -> dict[str, bytes]:
    """A probe's process sections for ``procs``: PID → (real uid, command line)."""
    stat, cmd = ["==> /dev/null <==\n"], []
    for pid, (_, line) in procs.items():
        stat.append(f"\n==> /proc/{pid}/stat <==\n{pid} (x) S 1 1 1 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 77 0 0\n")
        # grep -z -H's pieces: one per NUL-ended argument.
        cmd += [f"/proc/{pid}/cmdline:".encode() + arg + b"\0" for arg in line.rstrip(b"\0").split(b"\0")]
    return {
        "stat": "".join(stat).encode(),
        "cmdline": b"".join(cmd),
        "owners": "".join(f"{pid} {uid}\n" for pid, (uid, _) in procs.items()).encode()
        + b"names\n0 root\n1003 mallory\ndone\n",
    }


_LONG = b"train.py " + b"x" * CMDLINE_PER_PROCESS  # longer than a command line is read: cut


@pytest.mark.parametrize(
    ("procs", "user", "says", "ignored"),
    [
        # The job's and a look-alike: with process.user, only the job is alive.
        (
            {7: (0, b"train.py\0"), 9: (1003, b"train.py\0")},
            0,
            "working",
            ["pid 9 owned by uid 1003 (user mallory)"],
        ),
        ({7: (0, b"train.py\0"), 9: (1003, b"train.py\0")}, None, "working", None),
        # Only the look-alike: no process of the job's (never seen: "no process found").
        ({9: (1003, b"train.py\0")}, 0, "done", ["pid 9 owned by uid 1003 (user mallory)"]),
        ({9: (1003, b"train.py\0")}, None, "working", None),
        # A command line too long to read: whether it is the job is unknown, unless it is
        # another user's and process.user names the job's.
        ({8: (1003, _LONG)}, None, "unknown", None),
        ({8: (1003, _LONG)}, 0, "done", None),
        ({8: (0, _LONG)}, 0, "unknown", None),
    ],
)
def test_read_process_by_owner(procs, user, says, ignored) -> None:
    from sensors._base.probe import Meta, new_nonce
    from sensors._signals.process import read_process

    nonce = new_nonce()
    spec = ProcessSpec(match="train\\.py", **({"user": user} if user is not None else {}))
    meta = Meta(
        now=1000.0, uptime=500.0, btime=500, boot_id="b", clk_tck=100, script_pid=None, hostname="h",
        uptime_virtualised=False,
    )  # fmt: skip
    reading, _, _ = read_process(spec, _sections(nonce, procs), meta, None, host="h", nonce=nonce)
    assert reading.says.value == says, reading.detail
    assert reading.evidence.get("ignored") == ignored
    if ignored:
        assert "other users' matches ignored (process.user is 0): pid 9 owned by uid 1003" in reading.detail
