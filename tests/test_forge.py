"""A probe no job can forge (issue 34): another user's job, or another stage's text, never
decides a stage.

The probe's answer is framed by ``\\n@@crosscheck <nonce> <name>\\n`` sections and, inside the
process table, by head's ``==> <nonce_path>/proc/PID/NAME <==`` records. The nonce is fresh per
check, but it leaks while the probe runs: it is on the command lines of the probe's own awk
(``-v N=...``) and head (the ``/./`` path prefix), which ``ps`` shows to every user. So each
attacker here KNOWS the nonce of the check, as one reading ``/proc/*/cmdline`` would: the
nonce generator is replaced by one returning a nonce the test chose and gave the attacker
beforehand.

The victim is a real process of this test's user (root) with its log and outputs; the attacker
is a real process of a second, unprivileged user (``cc-mallory``), whose command line, log or
output file names hold the forged framing. The victim's job is alive throughout: its stage
must read ``running``, never ``complete`` (nor ``failed``), and the same check without the
attacker's bytes (the same shape, another nonce) says ``running`` too (the control).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import sensors._base.probe as probe_mod
import sensors._check.batch as batch_mod
import sensors._check.checker as checker_mod
from sensors import Checker, State, stage_from_dict
from sensors._base.probe import sections_of
from sensors._check.batch import check_batch
from tests.users import useradd

REPO = Path(__file__).resolve().parent.parent
MALLORY = "cc-mallory"
#: A python the second user can run (the test's own may live under /root, which it cannot).
PY = "/usr/bin/python3"
#: The attacker's program: it starts harmless (its PID taken now, so the test can place its
#: record before or after the victim's in /proc's order), and when given its argv on stdin
#: (NUL-separated) execs itself with it: exec keeps the PID.
_EXEC_LATER = (
    "import os, sys; a = sys.stdin.buffer.read().split(b'\\0'); "
    "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(600)', *a])"
)
_SLEEP = "import time; time.sleep(600)"


def nonce_path(nonce: str) -> str:
    """The path prefix 0edce7f's probe put on head's command line, spelling the nonce in
    ``/.`` and ``/`` steps (what a ``ps``-reading attacker learned; kept here as a payload:
    the probe no longer uses it, and no framing depends on it)."""
    bits = int(nonce[:10], 16)
    return "/." + "".join("/." if bits >> i & 1 else "/" for i in range(40))


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def mallory() -> str:
    """The second, unprivileged user (created when the test runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the attacker is a second user (cc-mallory) created with useradd")
    if shutil.which("setpriv") is None or not os.access(PY, os.X_OK):
        pytest.skip(f"needs setpriv and {PY} to run the attacker as a second user")
    useradd(MALLORY, "--no-create-home", "--shell", "/bin/sh")
    return MALLORY


@pytest.fixture
def nonce(monkeypatch: pytest.MonkeyPatch) -> str:
    """The nonce of every check in this test, known to the attacker beforehand (as the probe's
    own awk and head show it in ``ps`` while it runs)."""
    chosen = secrets.token_hex(12)
    for module in (probe_mod, checker_mod, batch_mod):
        monkeypatch.setattr(module, "new_nonce", lambda: chosen)
    return chosen


def _other_nonce(nonce: str) -> str:
    """A nonce of the same shape that is not this check's (the control's harmless bytes)."""
    while True:
        other = secrets.token_hex(len(nonce) // 2)
        if other[:10] != nonce[:10]:
            return other


# --------------------------------------------------------------------------- processes


def _as(user: str) -> list[str]:
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _order_key(pid: int) -> bytes:
    """Where ``/proc/PID/...`` comes in the probe's glob (LC_ALL=C: byte order of the path)."""
    return f"{pid}/".encode()


class Attacker:
    """A process of ``user`` that takes the command line it is given (``become``)."""

    def __init__(self, user: str) -> None:
        self.proc = subprocess.Popen(
            [*_as(user), PY, "-c", _EXEC_LATER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self.proc.pid

    def become(self, *args: bytes) -> None:
        """exec with ``args`` after ``python3 -c SLEEP`` (no NUL inside an argument)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"\0".join(args))
        self.proc.stdin.close()
        deadline = time.monotonic() + 10
        while args[0] not in _cmdline(self.pid):
            assert self.proc.poll() is None and time.monotonic() < deadline, "the attacker did not exec"
            time.sleep(0.02)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(10)


class Victim:
    """The victim's job: a live process with a distinctive command line, its log (no
    completion line) and outputs, in a directory only its user (root) can enter."""

    def __init__(self, root: Path, *, outputs: int = 2) -> None:
        self.tag = f"cc-victim-{uuid.uuid4().hex[:10]}"
        self.dir = root / self.tag
        (self.dir / "out").mkdir(parents=True)
        self.dir.chmod(0o700)
        self.log = self.dir / "job.log"
        self.log.write_text("[1/4] working\n[2/4] working\n")
        for k in range(outputs):
            (self.dir / "out" / f"{k}.pt").write_bytes(b"w" * 16)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SLEEP, "--tag", self.tag], start_new_session=True
        )
        deadline = time.monotonic() + 10
        while self.tag.encode() not in _cmdline(self.proc.pid):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return self.proc.pid

    def restart(self) -> Victim:
        """Start (again): the job, as ``_ordered`` takes it."""
        self.stop()
        self.start()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stage(self, *, log: bool = True, outputs: int | None = None, name: str = "victim") -> dict[str, Any]:
        stage: dict[str, Any] = {
            "stage": name,
            "host": "local",
            "process": {"match": f"--tag {self.tag}( |$)"},
        }
        if log:
            stage["log"] = {"path": str(self.log), "complete": "^done$", "error": "^Traceback"}
        if outputs is not None:
            stage["outputs"] = {"files": str(self.dir / "out"), "pattern": "*.pt", "expected": outputs}
        stage["policy"] = {"interval": "200ms", "exit_grace": "500ms", "settle": 1, "stall_after": "1h"}
        return stage


@contextlib.contextmanager
def _ordered(first: Callable[[], Any], second: Callable[[], Any]) -> Iterator[tuple[Any, Any]]:
    """Start ``first``, then ``second`` (each has ``pid`` and ``stop``) until the probe's glob
    lists second's /proc entry after first's (PIDs grow, but /proc is listed in byte order:
    10001 comes before 9999)."""
    a = first()
    made: list[Any] = [a]
    try:
        for _ in range(50):
            b = second()
            made.append(b)
            if _order_key(a.pid) < _order_key(b.pid):
                break
            b.stop()
        else:
            pytest.fail("could not place the two processes in /proc's order")
        yield a, b
    finally:
        for thing in made:
            thing.stop()


# --------------------------------------------------------------------------- verdicts


def _states(checker: Checker, seconds: float) -> list[tuple[State, list[str]]]:
    """Check for ``seconds`` (past the exit grace): each verdict and its first reasons."""
    seen = []
    deadline = time.monotonic() + seconds
    while True:
        verdict = checker.check()
        seen.append((verdict.state, list(verdict.reasons[:2])))
        if time.monotonic() > deadline:
            return seen
        time.sleep(0.25)


def _all_running(seen: list[tuple[State, list[str]]]) -> None:
    assert [s for s, _ in seen if s is not State.RUNNING] == [], seen


# --------------------------------------------------------------------------- attack 1: argv


def _section_payload(nonce: str) -> list[bytes]:
    """A command line that starts the process table again: a ``stat`` and a ``cmdline``
    section of its own (a name met twice: the last one wins) listing only PID 1, then a
    section nobody reads that swallows every real record after the attacker's."""
    pre = nonce_path(nonce)
    init = Path("/proc/1/stat").read_bytes().rstrip(b"\n")
    return [
        b"x\n@@crosscheck " + nonce.encode() + b" stat\n==> /dev/null <==\n\n==> "
        + pre.encode() + b"/proc/1/stat <==\n" + init + b"\n"
        + b"\n@@crosscheck " + nonce.encode() + b" cmdline\n==> /dev/null <==\n\n==> "
        + pre.encode() + b"/proc/1/cmdline <==\n/sbin/init"
        + b"\n@@crosscheck " + nonce.encode() + b" junk\n"
    ]  # fmt: skip


def _record_payload(nonce: str, victim: int) -> list[bytes]:
    """A command line that ends the attacker's record and starts a look-alike record of the
    victim's PID holding a harmless command line (the last record of a PID wins)."""
    return [f"x\n==> {nonce_path(nonce)}/proc/{victim}/cmdline <==\n/bin/harmless".encode()]


@pytest.mark.parametrize("aim", ["complete", "failed"])
def test_a_section_header_on_another_users_command_line_does_not_hide_a_live_job(
    tmp_path: Path, host: Any, mallory: str, nonce: str, aim: str
) -> None:
    """Attack 1, the section header: a process of another user, listed after the victim's,
    carries ``\\n@@crosscheck <nonce> stat\\n`` (and ``cmdline``) in its argv: a process table of
    its own, without the victim. ``complete``: a stage whose outputs
    are all there (the job still at work); ``failed``: one whose log has no completion line."""
    victim = Victim(tmp_path)
    stage = victim.stage(log=aim == "failed", outputs=2 if aim == "complete" else None)
    decoy = Attacker(mallory)
    with _ordered(victim.restart, lambda: Attacker(mallory)) as (_, attacker):
        checker = Checker(stage_from_dict(stage), host=host)
        try:
            _all_running(_states(checker, 0))
            decoy.become(*_section_payload(_other_nonce(nonce)))
            _all_running(_states(checker, 1.2))  # the control: the same bytes, another nonce
            attacker.become(*_section_payload(nonce))
            _all_running(_states(checker, 1.5))
            assert victim.alive()
        finally:
            checker.close()
            decoy.stop()


@pytest.mark.parametrize("aim", ["complete", "failed"])
def test_a_fake_head_record_on_another_users_command_line_does_not_replace_a_live_job(
    tmp_path: Path, host: Any, mallory: str, nonce: str, aim: str
) -> None:
    """Attack 1, the head record: a process of another user, listed after the victim's, carries
    a look-alike ``==> <nonce_path>/proc/<victim>/cmdline <==`` record of the victim's PID
    (harmless text: the last record of a PID wins), there before the watch's first check (a
    watch begun with ``--since``: once seen, a job is followed by its PID and start time)."""
    victim = Victim(tmp_path)
    decoy = Attacker(mallory)
    with _ordered(victim.restart, lambda: Attacker(mallory)) as (_, attacker):
        since = time.time() - 30
        stage = victim.stage(log=aim == "failed", outputs=2 if aim == "complete" else None)
        control = Checker(stage_from_dict({**stage, "stage": "control"}), host=host, since=since)
        watch = Checker(stage_from_dict(stage), host=host, since=since)
        try:
            decoy.become(*_record_payload(_other_nonce(nonce), victim.pid))
            _all_running(_states(control, 1.2))  # the same bytes, another nonce
            attacker.become(*_record_payload(nonce, victim.pid))
            _all_running(_states(watch, 1.5))
            assert victim.alive()
        finally:
            control.close()
            watch.close()
            decoy.stop()


# --------------------------------------------------------------------------- attack 2: batches


class Mallory:
    """The attacker's own stage: a process of the second user, its log and outputs in a
    directory that user owns (the bytes it writes there are its to choose)."""

    def __init__(self, user: str) -> None:
        self.tag = f"cc-mallory-{uuid.uuid4().hex[:10]}"
        # Not under the test's tmp_path: pytest keeps that where only root may enter.
        self.root = Path(tempfile.mkdtemp(prefix="cc-forge-"))
        self.root.chmod(0o755)
        self.dir = self.root / self.tag
        (self.dir / "out").mkdir(parents=True)
        self.log = self.dir / "job.log"
        self.log.write_bytes(b"[1/4] working\n")
        pw = subprocess.run(["id", "-u", user], capture_output=True, text=True, check=True).stdout
        gid = subprocess.run(["id", "-g", user], capture_output=True, text=True, check=True).stdout
        for path in (self.dir, self.dir / "out", self.log):
            os.chown(path, int(pw), int(gid))
        self.proc = Attacker(user)
        self.proc.become(b"--tag", self.tag.encode())
        self.user = user

    def append(self, data: bytes) -> None:
        """The attacker's job appends to its own log (as that user)."""
        subprocess.run(
            [
                *_as(self.user),
                PY,
                "-c",
                "import sys; open(sys.argv[1], 'ab').write(sys.stdin.buffer.read())",
                str(self.log),
            ],
            input=data,
            check=True,
        )

    def name_output(self, name: bytes, *, instead_of: bytes | None = None) -> None:
        """The attacker's job writes an output file with this name (as that user), or renames
        ``instead_of`` to it and writes it again (the count stays)."""
        code = (
            "import os, sys; d = os.fsencode(sys.argv[1]) + b'/'; old, new = sys.stdin.buffer.read().split(b'\\0'); "
            "old and os.rename(d + old, d + new); open(d + new, 'ab').write(b'x')"
        )
        subprocess.run(
            [*_as(self.user), PY, "-c", code, str(self.dir / "out")],
            input=(instead_of or b"") + b"\0" + name,
            check=True,
        )

    def stage(self, expected: int = 1000) -> dict[str, Any]:
        return {
            "stage": "mallory",
            "host": "local",
            "process": {"match": f"--tag {self.tag}( |$)"},
            "log": {"path": str(self.log), "complete": "^done$"},
            "outputs": {"files": str(self.dir / "out"), "pattern": "*", "expected": expected},
            "policy": {"interval": "200ms", "exit_grace": "500ms", "settle": 1, "stall_after": "1h"},
        }

    def stop(self) -> None:
        self.proc.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def _stat_line(path: Path) -> bytes:
    from sensors._base.probe import STAT_FORMAT

    return subprocess.run(
        ["stat", "-L", "-c", STAT_FORMAT, "--", str(path)], capture_output=True, check=True
    ).stdout


def _forged_batch_text(nonce: str, victim: Victim, k: int) -> bytes:
    """What the attacker appends to its log: a process table without the victim (the shared
    ``stat`` and ``cmdline`` sections again: the last of a name wins) and a copy of the
    victim's log (stage ``k``'s sections) ending in its completion line; then a section
    nobody reads swallows the rest of the attacker's own section."""
    tag = b"\n@@crosscheck " + nonce.encode() + b" "
    body = victim.log.read_bytes() + b"done\n"
    st = _stat_line(victim.log).split(b" ")
    st[1] = str(len(body)).encode()  # the size of the copy
    table = _section_payload(nonce)[0].removeprefix(b"x").removesuffix(tag + b"junk\n")
    return (
        table
        + tag + f"k{k}.log_stat\n".encode() + b" ".join(st)
        + tag + f"k{k}.log_from\n0\n".encode()
        + tag + f"k{k}.log_tail\n".encode() + body
        + tag + b"junk\n"
    )  # fmt: skip


def test_one_jobs_log_does_not_decide_another_stage_of_its_batch(
    tmp_path: Path, host: Any, mallory: str, nonce: str
) -> None:
    """Attack 2: the victim's stage (k0) and the attacker's (k1) read by one probe. The
    attacker's job appends to its own log a process table without the victim (the shared
    ``stat`` and ``cmdline`` again) and a copy of the victim's log with a completion line
    (``k0.``-prefixed sections). The victim's stage must still read its own job: running."""
    victim = Victim(tmp_path)
    victim.start()
    attacker = Mallory(mallory)
    checkers = [
        Checker(stage_from_dict(victim.stage(outputs=2)), host=host),
        Checker(stage_from_dict(attacker.stage()), host=host),
    ]
    try:
        assert [v.state for v in check_batch(checkers)] == [State.RUNNING, State.RUNNING]
        attacker.append(_forged_batch_text(_other_nonce(nonce), victim, 0))
        seen = []
        for _ in range(4):  # the control: the same bytes, another nonce
            seen.append(check_batch(checkers)[0].state)
            time.sleep(0.25)
        assert set(seen) == {State.RUNNING}, seen
        with victim.log.open("a") as log:  # the victim's job at work: its log grows
            log.write("[3/4] working\n")
        attacker.append(_forged_batch_text(nonce, victim, 0))
        seen = []
        for _ in range(6):
            verdicts = check_batch(checkers)
            seen.append((verdicts[0].state, verdicts[0].reasons[:2]))
            time.sleep(0.25)
        assert [s for s, _ in seen if s is not State.RUNNING] == [], seen
        assert victim.alive()
    finally:
        for checker in checkers:
            checker.close()
        attacker.stop()
        victim.stop()


def test_an_output_file_name_does_not_decide_another_stage_of_its_batch(
    tmp_path: Path, host: Any, mallory: str, nonce: str
) -> None:
    """Attack 2 through a file name (at most 255 bytes, newlines allowed): the attacker's stage
    has all its outputs and its job is gone, so each check asks for an output written since
    the last one, and the probe prints its NAME. The name holds an empty ``stat`` section (a
    repeated name: the last one wins), so the shared process table has no process at all."""
    victim = Victim(tmp_path)
    victim.start()
    attacker = Mallory(mallory)
    checkers = [
        Checker(stage_from_dict(victim.stage(outputs=2)), host=host),
        Checker(stage_from_dict(attacker.stage(expected=2)), host=host),
    ]
    harmless = b"x\n@@crosscheck " + _other_nonce(nonce).encode() + b" stat\n"
    hostile = b"x\n@@crosscheck " + nonce.encode() + b" stat\n"
    try:
        attacker.name_output(b"a.pt")
        attacker.name_output(harmless)
        assert [v.state for v in check_batch(checkers)] == [State.RUNNING, State.RUNNING]
        attacker.proc.stop()  # the attacker's own job ends: its outputs may decide its stage
        for _ in range(3):
            check_batch(checkers)
            time.sleep(0.2)
        attacker.name_output(harmless, instead_of=harmless)  # written again: "since the last check"
        seen = [check_batch(checkers)[0].state]
        attacker.name_output(hostile, instead_of=harmless)
        time.sleep(0.05)
        for _ in range(4):
            verdicts = check_batch(checkers)
            seen.append(verdicts[0].state)
            if verdicts[0].state is not State.RUNNING:
                seen.append(verdicts[0].reasons[:2])
            attacker.name_output(hostile, instead_of=hostile)
            time.sleep(0.2)
        assert seen == [State.RUNNING] * 5, seen
        assert victim.alive()
    finally:
        for checker in checkers:
            checker.close()
        attacker.stop()
        victim.stop()


# --------------------------------------------------------------------------- the fuzz

#: Every section name the probe writes (``grep -o "sec [a-z_]*" -r sensors`` and its printf's).
_NAMES = (
    "meta", "stats", "statfs", "stat", "tasks", "taskcmd", "cmdline", "io", "end", "exit",
    "launched", "lines", "lines_fs", "log_from", "log_fs", "log_prev", "log_same", "log_stat",
    "log_tail", "outputs", "outputs_same", "outputs_newest", "outputs_recent", "outputs_run",
    "outputs_exit", "outputs_ahead", "gpu_query", "gpu_apps", "gpu_nspid", "junk",
)  # fmt: skip


def _fuzz_seeds() -> list[int]:
    """A few seeds in the normal run; ``FUZZ_FRAME_SEEDS=A-B`` for more."""
    spec = os.environ.get("FUZZ_FRAME_SEEDS")
    if not spec:
        return [34001, 34002, 34003]
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


def _hostile(rng: random.Random, nonce: str, size: int) -> bytes:
    """Job-controlled bytes drawn from every marker, separator and framing token the probe
    uses, this check's nonce among them, and bytes 0x00-0xff."""
    tag = f"\n@@crosscheck {nonce} "
    tokens = [
        tag, "\n@@crosscheck ", nonce, nonce_path(nonce), f"==> {nonce_path(nonce)}/proc/",
        "\n==> /proc/1/stat <==\n", "/proc/1/cmdline:", "\n\\@@crosscheck ", "\\", "|", "|@@exit 0\n",
        "\nnames\n", "\ndone\n",
        "==> ", " <==", "\n==> /dev/null <==\n", "/proc/", "/cmdline <==\n", "/stat <==\n",
        "\0", "\n", "\r", "@@crosscheck-done ", "@@exit 0", "@@stderr ", "status 0", "ok",
        "done\n", "Traceback\n", "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n",
        *(f"k{k}." for k in range(10)), *_NAMES,
    ]  # fmt: skip
    out = bytearray()
    while len(out) < size:
        pick = rng.random()
        if pick < 0.3:
            prefix = rng.choice(["", *(f"k{k}." for k in range(4))])
            out += f"{tag}{prefix}{rng.choice(_NAMES)}\n".encode()
        elif pick < 0.8:
            out += rng.choice(tokens).encode()
        else:
            out += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    return bytes(out[:size])


def _names(data: bytes, count: int) -> list[bytes]:
    """File names cut from ``data`` (no ``/`` or NUL, at most 200 bytes, never . or ..)."""
    clean = data.replace(b"/", b"|").replace(b"\0", b"0")
    names, at = [], 0
    for k in range(count):
        names.append(b"%d-" % k + clean[at : at + 120])
        at += 120
    return names


def _fuzz_run(
    root: Path, host: Any, nonce: str, shown: str, seed: int, run: str
) -> tuple[list[dict[str, str]], list[set[str]]]:
    """One world, built from the seed's draw with ``shown`` as the nonce in it (this check's
    for the hostile run, another for the control), checked twice by one batch of 4 stages:
    each stage's per-signal word, and the section names of each probe's answer."""
    rng = random.Random(seed)
    world = root / run
    plain_tag = f"cc-fuzz-plain-{seed}-{run}"
    procs: list[subprocess.Popen[bytes]] = []
    stages = []
    try:
        for k in range(4):
            d = world / f"s{k}"
            (d / "out").mkdir(parents=True)
            log = d / "job.log"
            if k == 1:  # its log and output names are the job's bytes
                log.write_bytes(b"[1/4] working\n" + _hostile(rng, shown, 3000))
                for name in _names(_hostile(rng, shown, 600), 4):
                    (d / "out").joinpath(os.fsdecode(name)).write_bytes(b"x")
            else:
                log.write_bytes(b"[1/4] working\n")
                (d / "out" / "a.pt").write_bytes(b"x")
            stage: dict[str, Any] = {
                "stage": f"s{k}-{run}",
                "host": "local",
                "log": {"path": str(log), "complete": "^done$", "error": "^Traceback"},
                "outputs": {"files": str(d / "out"), "pattern": "*", "expected": 4 if k == 1 else 2},
                "policy": {"interval": "200ms", "exit_grace": "500ms", "settle": 1, "stall_after": "1h"},
            }
            if k != 1:
                tag = f"{plain_tag}-{k}"
                argv = [sys.executable, "-c", _SLEEP, "--tag", tag]
                if k == 2:  # its command line is the job's bytes
                    argv += [os.fsdecode(a) for a in _hostile(rng, shown, 2000).split(b"\0") if a]
                procs.append(subprocess.Popen(argv, start_new_session=True))
                stage["process"] = {"match": f"--tag {tag}( |$)"}
            stages.append(stage)
        deadline = time.monotonic() + 10
        while not all(f"{plain_tag}".encode() in _cmdline(p.pid) for p in procs):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        # Every file settled (written more than the shared stat's margin before the first
        # check): whether a check reads a file again or finds it unchanged is then the same
        # in both runs, whatever their timing (over SSH the first check comes later).
        time.sleep(0.3)
        checkers = [Checker(stage_from_dict(s), host=host) for s in stages]
        names: list[set[str]] = []
        run_script = host.run_script

        def recording(script: bytes, *, timeout: float) -> bytes:
            out = run_script(script, timeout=timeout)
            names.append({name for name, _ in sections_of(out, nonce)})
            return out

        host.run_script = recording
        try:
            check_batch(checkers)
            time.sleep(0.3)
            verdicts = check_batch(checkers)
        finally:
            del host.run_script
            for checker in checkers:
                checker.close()
        words = [
            {s: r.says.value for s, r in v.readings.items()} | {"verdict": v.state.value} for v in verdicts
        ]
        return words, names
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("seed", _fuzz_seeds())
def test_hostile_bytes_in_a_batch_change_no_reading_and_no_section(
    tmp_path: Path, host: Any, nonce: str, seed: int
) -> None:
    """Random job-controlled bytes (every framing token, this check's nonce among them) in a
    command line, a log and output file names, read by ONE batched probe of 4 stages: every
    stage reads as it does when the same bytes carry another nonce (the control), and the
    probe's answer splits into exactly the sections the control's does."""
    control = _fuzz_run(tmp_path, host, nonce, _other_nonce(nonce), seed, "control")
    hostile = _fuzz_run(tmp_path, host, nonce, nonce, seed, "hostile")
    assert hostile[0] == control[0]
    assert hostile[1] == control[1]


# --------------------------------------------------------------------------- the real CLI

#: The attacker's loop (as the second user): read every process's command line; on finding a
#: probe's nonce (awk's ``N=<nonce>``), start at once a process whose command line holds a
#: process table without the victim (``_section_payload``). Bounded in time and count.
_SNOOP = r"""
import glob, os, re, subprocess, sys, time
end, seen, fired = time.time() + float(sys.argv[1]), set(), 0
pat = re.compile(rb"\0N=([0-9a-f]{24})\0")
init = open("/proc/1/stat", "rb").read().rstrip(b"\n")
def path(n):
    bits = int(n[:10], 16)
    return "/." + "".join("/." if bits >> i & 1 else "/" for i in range(40))
while time.time() < end and fired < 200:
    for f in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            m = pat.search(open(f, "rb").read())
        except OSError:
            continue
        if m is None or m.group(1) in seen:
            continue
        n = m.group(1).decode(); seen.add(m.group(1)); pre = path(n).encode(); tag = b"\n@@crosscheck " + n.encode() + b" "
        payload = (b"x" + tag + b"stat\n==> /dev/null <==\n\n==> " + pre + b"/proc/1/stat <==\n" + init + b"\n"
                   + tag + b"cmdline\n==> /dev/null <==\n\n==> " + pre + b"/proc/1/cmdline <==\n/sbin/init" + tag + b"junk\n")
        subprocess.Popen(["/bin/sh", "-c", "sleep 2; :", "sh", payload])
        fired += 1
print(len(seen), fired)
"""


# For 20 s the snoop attacks every probe on this machine, other tests' too (make test runs
# it after the parallel pass).
@pytest.mark.alone
def test_crosscheck_wait_never_completes_a_live_job_while_another_user_snoops_the_nonce(
    tmp_path: Path, mallory: str
) -> None:
    """The realistic attack through the real CLI: ``crosscheck wait`` on a live job whose
    outputs are all there, while the second user reads every command line for the probe's
    nonce and, on finding one, starts a process carrying a process table without the victim.
    The watch never says ``complete`` (20 s, a check every 200 ms)."""
    victim = Victim(tmp_path)
    victim.start()
    stage_file = tmp_path / "victim.yaml"
    stage_file.write_text(yaml.safe_dump(victim.stage(log=False, outputs=2), sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    snoop = subprocess.Popen(
        [*_as(mallory), PY, "-c", _SNOOP, "20"],
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
        start_new_session=True,
    )
    try:
        wait = subprocess.run(
            [
                sys.executable,
                "-m",
                "sensors",
                "wait",
                str(stage_file),
                "--json",
                "--timeout",
                "18s",
                "--state",
                "none",
            ],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )
        found, _ = snoop.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(snoop.pid, signal.SIGKILL)
        victim.stop()
    verdicts = [json.loads(line) for line in wait.stdout.splitlines() if line.startswith("{")]
    assert verdicts, wait.stdout + wait.stderr
    said = [(v["verdict"], v["reasons"][:2]) for v in verdicts]
    assert [v["verdict"] for v in verdicts if v["advance"] or v["verdict"] == "complete"] == [], (
        found,
        said[-3:],
    )
    assert wait.returncode == 4, (wait.returncode, found, said[-3:])  # timed out: still running
