"""The world a history runs in: a real job, a real log and outputs, real watches of them.

Each public method of :class:`World` is one step of a history (the generator writes them, the
replay script calls them): start a run, tell the job to write, end or kill it, edit the stage
definition, skew a file clock, start, check, stop or abandon a watch. Watches are the product
itself: ``sensors.Checker`` in this process (through the plain local host, or a probe that
runs in its own PID namespace, or as another user under ``hidepid=2``), ``crosscheck
status`` and ``crosscheck wait`` as subprocesses, and ``sensors._watch.watcher.Watcher`` (the
machinery of ``crosscheck serve``) on a thread. Every ``complete`` any of them says is
judged against :mod:`tests.fuzz.truth`.

A check made in this thread is judged against the world as it is (nothing moves between
steps). A verdict of a watch running beside the steps (``wait``, ``serve``) is judged over
the window from its probe (``checked_at``, or the watch's own start if later: a followed
verdict may be older) to the moment it reached us: it is false only if the truth forbade
``complete`` for every state the world was in during that window.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from sensors import Checker, LocalHost, State, stage_from_dict
from sensors._hosts import _WRAPPER
from sensors._run.run import Run, launch_mark_script, parse_launch_mark
from sensors._store import StoreWarning, open_store
from tests.fuzz.truth import (
    EITHER,
    HARD,
    MUST,
    NOT,
    OK,
    SEVERITY,
    SOFT,
    SUPERVISED_NAME,
    Definition,
    Judgement,
    RunFacts,
    Scope,
    Sighting,
    Snapshot,
    failed_allowed,
    judge,
    obligation,
    process_sees,
    record_read,
)
from tests.supervisors import DOCKER_PERMISSION_DENIED, Stand

JOB = str(Path(__file__).with_name("job.py"))
REPO = str(Path(__file__).resolve().parents[2])
#: No run starts or ends within this many seconds of a since a watch was given.
MARGIN = 1.5
STAGE = "fuzz-stage"
#: How long a ``late_log`` run takes to open its log (a job's imports): far beyond /proc's
#: start precision, so the log it creates is born clearly after it began.
LATE_LOG = 0.3


# --------------------------------------------------------------------------- probes that cannot see


class PidNamespaceHost(LocalHost):
    """The probe in its own PID namespace (crosscheck in a container, the job on the host)."""

    shell = ("unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-s")


class HidepidHost(LocalHost):
    """The probe as another user (nobody) on a /proc mounted with ``hidepid=2``."""

    shell = (
        "unshare",
        "-m",
        "/bin/sh",
        "-c",
        "mount -t proc -o hidepid=2 proc /proc && exec runuser -u nobody -- /bin/sh -s",
    )


PROBES = {"local": LocalHost, "pidns": PidNamespaceHost, "hidepid": HidepidHost}
_AVAILABLE: dict[str, bool] = {}


def probe_available(name: str) -> bool:
    """Whether this machine can run that probe (namespaces and mounts need root): where it
    cannot, a watch that names it probes locally, and the history's notes say so (``watch NAME:
    no PROBE probe on this machine (needs root): probed locally``)."""
    if name == "local":
        return True
    if name not in _AVAILABLE:
        try:
            out = PROBES[name]().run_script(b"echo ok\n", timeout=10)
            _AVAILABLE[name] = out.strip() == b"ok"
        except Exception:
            _AVAILABLE[name] = False
    return _AVAILABLE[name]


# --------------------------------------------------------------------------- since


@dataclass(frozen=True)
class SinceSpec:
    """A since as the generator asks for it; the world turns it into a time and a form.

    ``anchor``: ``before_first`` (before run 1: nothing earlier exists), ``now`` (after
    waiting until no run started or ended within MARGIN; no run starts or ends within
    MARGIN after it either), or ``gap:K`` (inside the gap before run K, which the history
    made at least 2 * MARGIN wide). ``form``: how it is written (see :func:`since_value`).
    ``u``: where in the allowed interval, 0..1.
    """

    anchor: str
    form: str
    u: float = 0.5


API_FORMS = (
    "duration_s",
    "duration_ms",
    "duration_bare",
    "duration_frac",
    "iso_z",
    "iso_offset",
    "iso_seconds",
    "epoch_at",
    "float",
    "int",
    "datetime",
    "datetime_naive",
)
CLI_FORMS = API_FORMS[:8]


def since_value(form: str, p: float, first_check: float) -> tuple[Any, float | None]:
    """``p`` written in ``form``: (the value, the duration it is if it is one, else None).

    A duration is measured back from the watch's first check, expected at ``first_check``.
    """
    d = first_check - p
    if form == "duration_s":
        return f"{max(1, round(d))}s", float(max(1, round(d)))
    if form == "duration_ms":
        return f"{max(1, round(d * 1000))}ms", max(1, round(d * 1000)) / 1000
    if form == "duration_bare":
        return f"{max(1, round(d))}", float(max(1, round(d)))
    if form == "duration_frac":
        return f"{max(0.001, d):.3f}s", max(0.001, round(d, 3))
    utc = dt.datetime.fromtimestamp(p, tz=dt.UTC)
    if form == "iso_z":
        return utc.isoformat(timespec="microseconds").replace("+00:00", "Z"), None
    if form == "iso_offset":
        return utc.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))).isoformat(), None
    if form == "iso_seconds":
        return utc.replace(microsecond=0).isoformat(), None
    if form == "epoch_at":
        return f"@{p:.3f}", None
    if form == "float":
        return p, None
    if form == "int":
        return int(p), None
    if form == "datetime":
        return utc, None
    if form == "datetime_naive":
        return dt.datetime.fromtimestamp(p), None
    raise ValueError(form)


def absolute_of(form: str, value: Any) -> float:
    """The time an absolute since written in ``form`` names (parsed here, not by the product)."""
    if form in ("iso_z", "iso_offset", "iso_seconds"):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    if form == "epoch_at":
        return float(value[1:])
    if form in ("float", "int"):
        return float(value)
    if form in ("datetime", "datetime_naive"):
        return value.timestamp()
    raise ValueError(form)


# --------------------------------------------------------------------------- watches


@dataclass
class Watch:
    name: str
    kind: str  # checker, wait (the CLI), serve
    definition: Definition
    scope: Scope
    started: float
    since_text: str | None = None
    checker: Checker | None = None
    proc: subprocess.Popen[bytes] | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)
    reader: threading.Thread | None = None
    stop_event: threading.Event | None = None
    thread: threading.Thread | None = None
    verdicts: list[tuple[float, Any]] = field(default_factory=list)
    stores: list[Any] = field(default_factory=list)
    ended_by_us: bool = False
    done: bool = False
    seen_alive: set[int] = field(default_factory=set)  # runs its own probes saw alive
    #: Every verdict of its own or followed, in order: what the two-sided grading reads.
    record: list[CheckRecord] = field(default_factory=list)
    gave_up: bool = False  # a wait that ended by itself without complete
    said_failed: bool = False  # its first failed verdict has been graded


@dataclass(frozen=True)
class CheckRecord:
    """One verdict of a watch: when its probe ran, what it said, the world then."""

    at: float
    state: str
    followed: bool
    reasons: tuple[str, ...]
    seen: frozenset[int]  # runs the verdict's process evidence shows alive
    snaps: tuple[Snapshot, ...]  # the states of the world its probe may have read
    definitions: tuple[Definition, ...]
    clean_clock: bool


@dataclass
class Finding:
    """A ``complete`` the truth did not allow."""

    seed: int
    step: int
    watch: str
    kind: str
    judgement: Judgement
    verdict: dict[str, Any]
    followed: bool
    context: dict[str, Any]

    @property
    def route(self) -> str:
        c = self.context
        parts = [
            self.judgement.route,
            self.kind + ("-followed" if self.followed else ""),
            f"since={c.get('since_family') or 'none'}",
        ]
        if c.get("store"):
            parts.append("store")
        if c.get("skew"):
            parts.append("skew")
        if c.get("prelude"):
            parts.append("prelude")
        if c.get("probe", "local") != "local":
            parts.append(c["probe"])
        return " ".join(parts)


class HistoryError(RuntimeError):
    """The world could not do what a step asked (a bug in the generator or the harness)."""


class World:
    """One history's world. Every public method but :meth:`close` and :meth:`summary` is a step.

    Example (a replay script is made of such calls):
        >>> w = World(seed=1)  # doctest: +SKIP
        >>> w.define(signals=("process", "log"), complete="^Extraction complete")  # doctest: +SKIP
        >>> w.start_run()  # doctest: +SKIP
        >>> w.job("log Extraction complete"); w.exit(0)  # doctest: +SKIP
        >>> w.watch("a", since=SinceSpec("before_first", "iso_z")); w.check("a", times=3, gap=0.15)  # doctest: +SKIP
        >>> w.close()  # doctest: +SKIP
    """

    def __init__(self, seed: int, *, verbose: bool = False) -> None:
        self.seed = seed
        self.verbose = verbose
        self.tag = f"fz{seed}x{uuid.uuid4().hex[:8]}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"crosscheck-fuzz-{seed}-"))
        os.chmod(self.dir, 0o755)  # a probe running as nobody reads the log and outputs
        self.log_path = self.dir / "job.log"
        self.out_dir = self.dir / "out"
        self.out_dir.mkdir(mode=0o755)
        self.lines_path = self.dir / "records.jsonl"
        self.stage_dir = self.dir / "stages"
        self.stage_dir.mkdir(mode=0o755)
        self.stage_file = self.stage_dir / "stage.yaml"
        self.definition = Definition()
        self.definitions: list[tuple[float, Definition]] = []
        self.runs: list[RunFacts] = []
        self.proc: subprocess.Popen[str] | None = None
        self.launch_run: Run | None = None
        self.launches = 0
        self.exit_file: str | None = None  # the running run's launch wrapper's record
        self.launched_index: int | None = None
        self.watches: dict[str, Watch] = {}
        self.barrier = 0.0
        self.skews = (0.0, 0.0)
        self.preludes = 0
        self.log_tail = ""  # the log's unfinished last line, whoever wrote it
        self.pending_text = ""  # whole lines a launcher wrote: the next run's first ones
        self.stand: Stand | None = None  # a supervised history's docker stand-in
        self.containers = 0
        self.step_no = 0
        self.timeline: list[tuple[float, float, Snapshot]] = []
        self.findings: list[Finding] = []
        self.soft: list[Finding] = []
        self.checks = 0
        self.by_kind: Counter[str] = Counter()  # checks (and "KIND:complete") by kind of watch
        self.completes = 0  # complete verdicts the truth allowed
        self.exit_code_errors: list[str] = []
        self.false_failed: list[Finding] = []
        #: One per (watch, run) the truth allowed to complete: its class and what the watch did.
        self.obligations: list[dict[str, Any]] = []
        self.skewed_at: float | None = None  # when a file clock was first skewed
        self.errors: list[str] = []
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._snap(time.time(), time.time())
        logging.getLogger("crosscheck").setLevel(logging.CRITICAL)
        warnings.simplefilter("ignore", StoreWarning)

    # ------------------------------------------------------------------ the world's facts

    def _count(self) -> tuple[int, int]:
        files = sum(
            1
            for e in os.scandir(self.out_dir)
            if e.name.endswith(".pt") and not e.name.startswith(".") and e.is_file(follow_symlinks=False)
        )
        try:
            records = self.lines_path.read_bytes().count(b"\n")
        except FileNotFoundError:
            records = 0
        return files, records

    def _snap(self, began: float, ended: float) -> None:
        files, records = self._count()
        snap = Snapshot(tuple(self.runs), files, records)
        with self._lock:
            self.timeline.append((began, ended, snap))

    def snapshot(self) -> Snapshot:
        return self.timeline[-1][2]

    def _set_run(self, run: RunFacts) -> None:
        self.runs[-1] = run

    def _wait_barrier(self) -> None:
        delay = self.barrier - time.time()
        if delay > 0:
            time.sleep(delay)

    def _sup_bin(self, d: Definition) -> str:
        if not d.supervisor:
            return ""
        if self.stand is None:
            # Its folder is root's and writable by root only, as the probe's trust rule asks.
            self.stand = Stand(self.dir / "supervisor")
        return str(self.stand.bin)

    def _container(self, **kw: Any) -> None:
        """Write the container's record as docker keeps it (the stand-in prints it to the
        probe's ``docker inspect``): the harness is the daemon, since the job is driven
        through its stdin and cannot be detached by the stand-in's ``docker run -d``."""
        if self.stand is None or not self.definition.supervisor:
            return
        if not self.definition.record_readable:
            self.stand.docker_error(SUPERVISED_NAME, DOCKER_PERMISSION_DENIED)
            return
        self.stand.container(SUPERVISED_NAME, **kw)

    def _write_stage(self) -> None:
        d = self.definition.stage_dict(
            name=STAGE,
            tag=self.tag,
            log=str(self.log_path),
            out=str(self.out_dir),
            lines=str(self.lines_path),
            sup_bin=self._sup_bin(self.definition),
        )
        tmp = self.stage_dir / ".stage.yaml.tmp"
        tmp.write_text(yaml.safe_dump(d, sort_keys=False))
        os.replace(tmp, self.stage_file)

    def stage(self, definition: Definition | None = None):
        d = (definition or self.definition).stage_dict(
            name=STAGE,
            tag=self.tag,
            log=str(self.log_path),
            out=str(self.out_dir),
            lines=str(self.lines_path),
            sup_bin=self._sup_bin(definition or self.definition),
        )
        return stage_from_dict(d)

    # ------------------------------------------------------------------ steps: the definition

    def define(self, **changes: Any) -> None:
        """Set (first call) or edit the stage definition; new watches use it, running ones
        keep the one they loaded (``serve`` rereads its file)."""
        self.step_no += 1
        began = time.time()
        if "signals" in changes:
            changes["signals"] = tuple(changes["signals"])
        first = not self.definitions
        self.definition = replace(self.definition, **changes)
        self._write_stage()
        if first and self.definition.supervisor and not self.definition.record_readable:
            self._container()  # permission denied from the start
        self.definitions.append((time.time(), self.definition))
        self._snap(began, time.time())

    # ------------------------------------------------------------------ steps: runs

    def prelude(self, text: str = "") -> None:
        """The launcher writes a line to the log before the job starts (a blank line, a banner)."""
        self.step_no += 1
        began = time.time()
        with open(self.log_path, "ab") as f:
            f.write(text.encode() + b"\n")
        self._stamp(self.log_path, 0)
        self.preludes += 1
        self.pending_text += self._lines_ended(text + "\n")
        self._snap(began, time.time())

    def start_run(
        self, outputs: str = "overwrite", atomic: bool = False, launch: bool = False, late_log: bool = False
    ) -> None:
        """Start the next run of the job; ``outputs``: overwrite, skip (resume) or clean (the
        launcher empties the outputs first); ``launch``: as crosscheck's launch does (the log
        marked first, the job run under its wrapper, which records its exit status and time),
        so that watches can be given the launch record; ``late_log``: the job opens its log
        only after its imports (LATE_LOG seconds), as Python's `logging` does."""
        self.step_no += 1
        if self.proc is not None:
            raise HistoryError("a run is still alive")
        self._wait_barrier()
        began = time.time()
        counts = self._count()
        if outputs == "clean":
            for e in os.scandir(self.out_dir):
                os.unlink(e.path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lines_path)
        cleaned = self._count() != counts
        mark = (
            parse_launch_mark(LocalHost().run_script(launch_mark_script(str(self.log_path)), timeout=30))
            if launch
            else None
        )
        argv = [
            sys.executable, "-I", "-S", "-u", JOB, "--tag", self.tag, "--log", str(self.log_path),
            "--out", str(self.out_dir), "--lines", str(self.lines_path),
            "--mode", "skip" if outputs == "skip" else "overwrite",
            "--log-skew", str(self.skews[0]), "--out-skew", str(self.skews[1]),
        ]  # fmt: skip
        if atomic:
            argv.append("--atomic")
        # Created by this run, well after its start: its own, whatever /proc's precision.
        began_log = late_log and not self.log_path.exists()
        if late_log:
            argv += ["--open-late", str(LATE_LOG)]
        exit_file = None
        if launch:
            # Through crosscheck's own launch wrapper (the command it runs on the host, see
            # sensors._hosts.launch_script): it records the job's exit status and time in a
            # file the watch reads. Only its stdin differs (the job takes commands from us).
            self.launches += 1
            exit_file = str(self.dir / f"exit-{self.launches}")
            argv = ["/bin/sh", "-c", _WRAPPER, exit_file, *argv]
        started = time.time()
        cid = ""
        if self.definition.supervisor:
            # A new container (a re-run: a new ID under the same name), created before its
            # process starts, as docker does: no probe reads the last container's exit while
            # this run lives.
            self.containers += 1
            cid = uuid.UUID(int=self.seed * 1000 + self.containers).hex + uuid.uuid4().hex
            self._container(status="created", cid=cid, started=None)
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            start_new_session=True,
            cwd=self.dir,
        )
        if cid:
            self._container(status="running", cid=cid, started=started, pid=self.proc.pid)
        if self._ack() != "ready":
            raise HistoryError("the job did not start")
        index = len(self.runs) + 1
        self.runs.append(
            RunFacts(
                index=index,
                started=started,
                launched=launch,
                text=self.pending_text,
                line_times=(started,) * self.pending_text.count("\n"),
                count_trace=cleaned,
                pid=self.proc.pid,
                container=cid,
                began_log=began_log,
            )
        )
        self.pending_text = ""
        if mark is not None:
            self.launch_run = replace(mark, pid=self.proc.pid, exit_file=exit_file)
            self.launched_index = index
        self.exit_file = exit_file
        self._snap(began, time.time())

    def _ack(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise HistoryError("the job's pipe closed")
        return line.strip()

    def job(self, command: str) -> None:
        """Tell the running job one command (see ``tests/fuzz/job.py``) and wait for its ack."""
        self.step_no += 1
        if self.proc is None or self.proc.stdin is None:
            raise HistoryError("no run is alive")
        began = time.time()
        counts = self._count()
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self._ack()
        if answer != "ok":
            raise HistoryError(f"job: {command!r}: {answer}")
        verb, _, rest = command.partition(" ")
        run = self.runs[-1]
        if verb == "log":
            run = self._appended(run, rest + "\n")
        elif verb == "write":
            run = self._appended(run, rest)
        elif verb in ("out", "rec") and self._count() != counts:
            run = replace(run, count_trace=True)
        self._set_run(run)
        self._snap(began, time.time())

    def _appended(self, run: RunFacts, written: str) -> RunFacts:
        """``run`` with the lines ``written`` ended, each timed now (after the job's ack: no
        earlier than its newline was written)."""
        ended = self._lines_ended(written)
        times = (time.time(),) * ended.count("\n")
        return replace(run, text=run.text + ended, line_times=run.line_times + times)

    def _lines_ended(self, written: str) -> str:
        """The whole lines of the log that ``written`` (appended to it) ended, each with its
        newline; what is left unfinished waits for the next writer."""
        whole, newline, self.log_tail = (self.log_tail + written).rpartition("\n")
        return whole + newline

    def exit(self, status: int = 0, last: str | None = None) -> None:
        """The job exits with ``status`` (reaped at once); with ``last``, it writes that line
        to the log first and exits at once, within microseconds (``lastexit``): the end falls
        inside whatever probe a watch beside the steps is running."""
        self.step_no += 1
        if self.proc is None or self.proc.stdin is None:
            raise HistoryError("no run is alive")
        self._wait_barrier()
        began = time.time()
        self.proc.stdin.write(f"exit {status}\n" if last is None else f"lastexit {status} {last}\n")
        self.proc.stdin.flush()
        self._ack()
        if last is not None:
            run = self.runs[-1]
            self._set_run(self._appended(run, last + "\n"))
        code = self.proc.wait(10)
        self._ended(code, began)

    def kill(self, sig: str = "KILL", oom: bool = False) -> None:
        """SIGKILL (or SIGTERM) the job's process group, at whatever point it is; ``oom``: a
        supervised run's record says the kernel's OOM killer did it (docker's ``OOMKilled``)."""
        self.step_no += 1
        if self.proc is None:
            raise HistoryError("no run is alive")
        self._wait_barrier()
        began = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, getattr(signal, f"SIG{sig}"))
        code = self.proc.wait(10)
        self._ended(code, began, oom=oom)

    def _ended(self, code: int, began: float, oom: bool = False) -> None:
        assert self.proc is not None
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]
        self.proc = None
        recorded = False
        if self.exit_file is not None:
            # Launched: the job's own status is what its wrapper recorded (the wrapper's is
            # the mv's); killed with it (the group), the wrapper recorded nothing.
            with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
                code = int(Path(self.exit_file).read_text().split()[0])
                code = 128 - code if code > 128 else code  # 128 + N: killed by signal N
                recorded = True
        run = self.runs[-1]
        if run.container:
            # The daemon records the exit once it reaps the process: 128 + N for signal N.
            self._container(
                status="exited",
                cid=run.container,
                started=run.started,
                finished=time.time(),
                exit_code=128 - code if code < 0 else code,
                oom=oom and code < 0,
            )
        self._set_run(
            replace(self.runs[-1], ended=time.time(), ending_from=began, status=code, recorded=recorded)
        )
        self._snap(began, time.time())

    def pause(self, seconds: float) -> None:
        """Let time pass (watches running beside the steps go on checking)."""
        self.step_no += 1
        time.sleep(seconds)

    def skew(self, log: float = 0.0, out: float = 0.0) -> None:
        """From now on, the log's (and outputs') file times are this many seconds ahead of
        the host clock (negative: behind), as a file server with its own clock stamps them;
        the files there now are stamped so at once (a skew of 0 leaves their times as they
        are: the server's clock was set right, its old stamps stay)."""
        self.step_no += 1
        began = time.time()
        self.skews = (log, out)
        if (log or out) and self.skewed_at is None:
            self.skewed_at = began
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.write(f"skew {log} {out}\n")
            self.proc.stdin.flush()
            self._ack()
        if self.log_path.exists():
            self._stamp(self.log_path, 0)
        for e in os.scandir(self.out_dir):
            self._stamp(Path(e.path), 1)
        if self.lines_path.exists():
            self._stamp(self.lines_path, 1)
        self._stamp(self.out_dir, 1)
        self._snap(began, time.time())

    def _stamp(self, path: Path, which: int) -> None:
        if self.skews[which]:
            t = time.time() + self.skews[which]
            os.utime(path, (t, t))

    # ------------------------------------------------------------------ steps: watches

    def _since_point(self, spec: SinceSpec) -> float:
        """The time ``spec`` names; waits, and sets the barrier, so MARGIN holds around it."""
        now = time.time()
        if spec.anchor == "before_first":
            first = self.runs[0].started if self.runs else now
            return first - MARGIN - 0.2 - spec.u * 30
        if spec.anchor == "now":
            last = self.runs[-1] if self.runs else None
            if last is not None:
                event = last.started if last.ended is None else last.ended
                delay = event + MARGIN - time.time()
                if delay > 0:
                    time.sleep(delay)
            return time.time()
        if spec.anchor.startswith("gap:"):
            k = int(spec.anchor[4:])
            if k > len(self.runs):
                raise HistoryError(f"since before run {k}: it has not started")
            if k == 1:
                return self.runs[0].started - MARGIN - 0.2 - spec.u * 30
            lo, hi = self.runs[k - 2].ended, self.runs[k - 1].started
            assert lo is not None
            if hi - lo < 2 * MARGIN:
                return (lo + hi) / 2  # too narrow: the truth's slack decides (should not happen)
            return lo + MARGIN + spec.u * (hi - lo - 2 * MARGIN)
        raise HistoryError(f"unknown since anchor {spec.anchor!r}")

    def _hold_events_after(self, p: float, duration: float | None) -> None:
        """No run starts or ends until MARGIN after the since just given: ``p``, or for a
        duration the latest time it can have resolved to (its first check is back now)."""
        latest = time.time() - duration if duration is not None else p
        self.barrier = max(self.barrier, latest + MARGIN)

    def _open_store(self, name: str | None) -> Any:
        if name is None:
            return None
        return open_store(str(self.dir / f"{name}.db"))

    def watch(
        self,
        name: str,
        kind: str = "checker",
        since: SinceSpec | None = None,
        store: str | None = None,
        probe: str = "local",
        launch: bool = False,
        timeout: float = 5.0,
    ) -> None:
        """Start a watch and (a checker) check once. ``kind``: checker (``sensors.Checker``),
        wait (``crosscheck wait --json`` in a subprocess, ``timeout`` its --timeout), serve
        (``sensors._watch.watcher.Watcher`` on a thread). ``store``: a name; watches naming the same
        store share one SQLite file. ``probe``: local, pidns or hidepid (checkers).
        ``launch``: give the watch the last launched run's record (checkers)."""
        self.step_no += 1
        if name in self.watches:
            raise HistoryError(f"watch {name} exists")
        if not probe_available(probe):
            self.notes.append(f"watch {name}: no {probe} probe on this machine (needs root): probed locally")
            probe = "local"
        p = self._since_point(since) if since is not None else None
        started = time.time()
        value, duration = (None, None)
        if since is not None and p is not None:
            value, duration = since_value(since.form, p, started)
        since_lo = None
        if value is not None:
            since_lo = started - duration if duration is not None else absolute_of(since.form, value)
        run = None
        launched = None
        if launch:
            if self.launch_run is None:
                raise HistoryError("no launched run")
            run, launched = self.launch_run, self.launched_index
        scope = Scope(since_lo=since_lo, launched=launched, probe=probe)
        w = Watch(
            name, kind, self.definition, scope, started, since_text=None if value is None else str(value)
        )
        self.watches[name] = w
        if kind == "checker":
            st = self._open_store(store)
            if st is not None:
                w.stores.append(st)
            w.checker = Checker(self.stage(), host=PROBES[probe](), since=value, run=run, state=st)
            self._check_once(w)
            if p is not None:
                self._hold_events_after(p, duration)
        elif kind == "wait":
            # Its own copy of the stage file: the definition it loads is the one of now, not
            # one written while its process starts (a wait reads its file once, when it is up).
            own = self.dir / f"stage-{name}.yaml"
            shutil.copyfile(self.stage_file, own)
            argv = [
                sys.executable, "-m", "sensors", "wait", str(own), "--json",
                "--timeout", f"{timeout}s", "--state", str(self.dir / f"{store}.db") if store else "none",
            ]  # fmt: skip
            if value is not None:
                argv += ["--since", str(value)]
            w.proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": REPO},
            )
            w.reader = threading.Thread(target=self._read_lines, args=(w,), daemon=True)
            w.reader.start()
            if p is not None:
                # The duration is resolved at its first check: hold every run event until
                # that check is back (or the wait is), and MARGIN more.
                deadline = time.time() + 20
                while not w.lines and w.proc.poll() is None and time.time() < deadline:
                    time.sleep(0.02)
                self._hold_events_after(p, duration)
        elif kind == "serve":
            from sensors._watch.watcher import Watcher

            st = self._open_store(store)
            if st is not None:
                w.stores.append(st)
            w.stop_event = threading.Event()

            def emit(verdict: Any, w: Watch = w) -> None:
                w.verdicts.append((time.time(), verdict))

            watcher = Watcher(self.stage_dir, store=st, rescan_every=0.3, workers=2, per_host=2, emit=emit)
            w.thread = threading.Thread(target=watcher.run, args=(w.stop_event,), daemon=True)
            w.thread.start()
        else:
            raise HistoryError(f"unknown watch kind {kind!r}")

    def _read_lines(self, w: Watch) -> None:
        assert w.proc is not None and w.proc.stdout is not None
        for raw in w.proc.stdout:
            w.lines.append((time.time(), raw.decode(errors="replace")))

    def check(self, name: str, times: int = 1, gap: float = 0.0) -> None:
        """``times`` checks of a checker watch, ``gap`` seconds apart."""
        self.step_no += 1
        w = self.watches[name]
        if w.kind != "checker" or w.done:
            return
        for i in range(times):
            if i:
                time.sleep(gap)
            self._check_once(w)

    def check_all(self, times: int = 1, gap: float = 0.0) -> None:
        """``times`` rounds of checks of every live checker watch, rounds ``gap`` seconds apart."""
        self.step_no += 1
        live = [w for w in self.watches.values() if w.kind == "checker" and not w.done]
        for i in range(times):
            if i:
                time.sleep(gap)
            for w in live:
                self._check_once(w)

    def _check_once(self, w: Watch) -> None:
        assert w.checker is not None
        at = time.time()
        verdict = w.checker.check()
        self._count_check("checker")
        data = verdict.to_json()
        followed = _followed(data)
        seen = self._seen_in(data)
        if not followed and self._sees_job(w.definition, w.scope):
            seen |= {self.runs[-1].index}
        w.seen_alive |= seen
        self._record(w, data, at, seen, [self.snapshot()], [w.definition])
        if verdict.advance != (verdict.state is State.COMPLETE):
            self.exit_code_errors.append(f"{w.name}: advance {verdict.advance} with {verdict.state.value}")
        if verdict.state is State.COMPLETE:
            self._judge(w, data, [self.snapshot()], [w.definition], arrived=time.time())
        elif verdict.state is State.FAILED:
            self._judge_failed(w, data, [self.snapshot()], [w.definition])

    def _seen_in(self, verdict: dict[str, Any]) -> frozenset[int]:
        """The runs a verdict's own process evidence shows alive (by PID: the job's, or its
        launch wrapper's child); none for a followed verdict (another watch's probe)."""
        if _followed(verdict):
            return frozenset()
        signals = verdict.get("signals") or {}
        ev = (signals.get("process") or {}).get("evidence") or {}
        pids: set[int] = set()
        for p in ev.get("processes") or []:
            pids.update(x for x in (p.get("pid"), p.get("ppid")) if isinstance(x, int))
        sup = (signals.get("supervisor") or {}).get("evidence") or {}
        if sup.get("supervisor_phase") == "running":
            # The record said the container was running, its host PID the job's.
            pids.update(x for x in sup.get("supervisor_pids") or [] if isinstance(x, int))
        return frozenset(r.index for r in self.runs if r.pid is not None and r.pid in pids)

    def _record(
        self,
        w: Watch,
        verdict: dict[str, Any],
        at: float,
        seen: frozenset[int],
        snaps: list[Snapshot],
        definitions: list[Definition],
    ) -> None:
        if w.scope.first_check is None:
            # The first verdict's check, whatever it said (a holder's, for a followed one: no
            # later than this watch's own first, so no run counts out of its view that was in).
            w.scope = replace(w.scope, first_check=at)
        w.record.append(
            CheckRecord(
                at=at,
                state=str(verdict.get("verdict")),
                followed=_followed(verdict),
                reasons=tuple(str(r) for r in (verdict.get("reasons") or [])[:3]),
                seen=seen,
                snaps=tuple(snaps),
                definitions=tuple(definitions),
                clean_clock=self.skewed_at is None or self.skewed_at > at,
            )
        )

    def _judge_failed(
        self, w: Watch, verdict: dict[str, Any], snaps: list[Snapshot], definitions: list[Definition]
    ) -> None:
        """A ``failed`` verdict is false when the truth forbade it in every state of its window
        (the run it can be about was alive and clean, or exited 0 meeting the definition)."""
        if time.time() - w.started > 55 or w.said_failed:
            # The stage's policy.timeout (1m) fails a watch by design; and ``failed`` is
            # final: a watch that said it says it again after the world moves on (a re-run),
            # so only its first ``failed`` is graded.
            return
        w.said_failed = True
        seen = self._seen(w, time.time(), _followed(verdict))
        why = ""
        for snap in snaps:
            for d in definitions:
                allowed, why = failed_allowed(snap, d, w.scope, *seen)
                if allowed:
                    return
        self.false_failed.append(
            Finding(
                seed=self.seed,
                step=self.step_no,
                watch=w.name,
                kind=w.kind,
                judgement=Judgement(HARD, why, "false-failed"),
                verdict=verdict,
                followed=_followed(verdict),
                context={
                    "since": w.since_text,
                    "since_family": _since_family(w.since_text),
                    "probe": w.scope.probe,
                    "launch": w.scope.launched is not None,
                },
            )
        )

    def _count_check(self, kind: str) -> None:
        self.checks += 1
        self.by_kind[kind] += 1

    def _sees_job(self, d: Definition, scope: Scope) -> bool:
        """Whether a probe of this watch now sees a run alive (the world is still meanwhile)."""
        return self.proc is not None and (process_sees(d, scope) or record_read(d, scope))

    def status(self, since: SinceSpec | None = None, store: str | None = None) -> None:
        """``crosscheck status --json`` once (a subprocess); its exit code must match ``advance``."""
        self.step_no += 1
        p = self._since_point(since) if since is not None else None
        argv = [
            sys.executable, "-m", "sensors", "status", str(self.stage_file), "--json",
            "--state", str(self.dir / f"{store}.db") if store else "none",
        ]  # fmt: skip
        started = time.time()
        value, duration = (None, None)
        if since is not None and p is not None:
            value, duration = since_value(since.form, p, started + 0.4)
            argv += ["--since", str(value)]
        since_lo = None
        if value is not None:
            since_lo = started - duration if duration is not None else absolute_of(since.form, value)
        done = subprocess.run(
            argv, capture_output=True, timeout=60, env={**os.environ, "PYTHONPATH": REPO}, check=False
        )
        if p is not None:
            self._hold_events_after(p, duration)
        self._count_check("status")
        try:
            verdict = json.loads(done.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.errors.append(f"status: rc {done.returncode}, no JSON: {done.stderr.decode()[-300:]}")
            return
        if (done.returncode == 0) != bool(verdict.get("advance")):
            self.exit_code_errors.append(
                f"status: exit {done.returncode} with advance {verdict.get('advance')}"
            )
        if verdict.get("verdict") == "complete":
            w = Watch(f"status@{self.step_no}", "status", self.definition, Scope(since_lo=since_lo), started)
            w.since_text = None if value is None else str(value)
            if not _followed(verdict) and self._sees_job(w.definition, w.scope):
                w.seen_alive.add(self.runs[-1].index)
            self._judge(w, verdict, [self.snapshot()], [self.definition], store=store, arrived=time.time())
        elif verdict.get("verdict") == "failed":
            w = Watch(f"status@{self.step_no}", "status", self.definition, Scope(since_lo=since_lo), started)
            w.since_text = None if value is None else str(value)
            self._judge_failed(w, verdict, [self.snapshot()], [self.definition])

    def stop(self, name: str) -> None:
        """End a watch cleanly (a checker is closed: its lease released; a wait gets SIGTERM)."""
        self.step_no += 1
        self._end(self.watches[name], clean=True)

    def abandon(self, name: str) -> None:
        """End a watch as a crash does: a checker is dropped without closing (its lease stays
        until it expires), a wait is SIGKILLed."""
        self.step_no += 1
        self._end(self.watches[name], clean=False)

    def _end(self, w: Watch, *, clean: bool) -> None:
        if w.done:
            return
        w.done = True
        if w.kind == "checker" and clean and w.checker is not None:
            w.checker.close()
        elif w.kind == "wait" and w.proc is not None:
            if w.proc.poll() is None:
                w.ended_by_us = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGTERM if clean else signal.SIGKILL)
            try:
                w.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(w.proc.pid, signal.SIGKILL)
                w.proc.wait(5)
            if w.reader is not None:
                w.reader.join(5)
            self._judge_wait(w)
            w.gave_up = not w.ended_by_us and w.proc.returncode != 0
        elif w.kind == "serve" and w.stop_event is not None and w.thread is not None:
            w.stop_event.set()
            w.thread.join(20)
            self._judge_background(w, [(t, v.to_json()) for t, v in w.verdicts])
        self._grade_obligations(w)

    def _grade_obligations(self, w: Watch) -> None:
        """The other side: for each run the truth allowed ``w`` to complete on, whether it
        had to (MUST) or might (EITHER), and for MUST whether ``w`` said ``complete`` within 3
        of its own checks once the evidence settled (the run's end, and the stage's
        ``exit_grace`` after it)."""
        pairs: dict[int, dict[str, Any]] = {}
        sightings: list[Sighting] = []
        # The run the watch's last check was of: a wait that gave up gave up on that one (a
        # wait whose timeout came while a later run was at work did not on an earlier one,
        # seed 2400136: one check of run 1, then run 2 began; the wait timed out in run 2).
        last_run = next((c.snaps[-1].runs[-1].index for c in reversed(w.record) if c.snaps[-1].runs), None)
        for c in w.record:
            snap = c.snaps[-1]
            sightings.append(Sighting(c.at, c.seen, snap, tuple(c.definitions)))
            if not snap.runs:
                continue
            seen = self._seen(w, c.at, c.followed)
            classes = set()
            for s in c.snaps:
                for d in c.definitions:
                    lenient = judge(s, d, w.scope, *seen).kind == OK
                    cls, why = obligation(
                        s, d, w.scope, tuple(sightings), clean_clock=c.clean_clock, lenient_ok=lenient
                    )
                    classes.add((cls, why))
            kinds = {k for k, _ in classes}
            run = snap.runs[-1]
            if kinds == {MUST} and len(c.definitions) == 1:
                d = c.definitions[0]
                p = pairs.setdefault(run.index, {"class": MUST, "checks": 0, "hit": None, "followed": 0})
                p["class"] = MUST
                assert run.ended is not None
                settled = run.ended + d.exit_grace
                if c.followed:
                    p["followed"] += 1
                    continue
                if c.at < settled and c.state != "complete":
                    continue
                p["checks"] += 1
                if c.state == "complete" and p["hit"] is None:
                    p["hit"] = p["checks"]
                if p["hit"] is None:
                    p["last"] = [c.state, *c.reasons]
                    p.setdefault("settled", settled)
            elif MUST in kinds or EITHER in kinds:
                p = pairs.setdefault(run.index, {"class": EITHER, "checks": 0, "hit": None, "followed": 0})
                if p["class"] == EITHER:
                    p["why"] = next(why for k, why in classes if k != NOT)
                    if c.state == "complete" and p["hit"] is None:
                        p["hit"] = 0
        for index, p in pairs.items():
            outcome = "either"
            if p["class"] == MUST:
                if p["hit"] is not None:
                    outcome = "within3" if p["hit"] <= 3 else "late"
                elif p["checks"] >= 3 or (w.gave_up and p["checks"] and index == last_run):
                    outcome = "missed"
                elif p["followed"] and not p["checks"]:
                    outcome = "followed"
                else:
                    outcome = "short"
            self.obligations.append(
                {
                    "watch": w.name,
                    "kind": w.kind,
                    "run": index,
                    "class": p["class"],
                    "outcome": outcome,
                    "hit": p["hit"],
                    "checks": p["checks"],
                    "last": p.get("last"),
                    "why": p.get("why"),
                    "probe": w.scope.probe,
                    "since": w.since_text,
                    "launch": w.scope.launched is not None,
                }
            )

    # ------------------------------------------------------------------ judging

    def _judge_wait(self, w: Watch) -> None:
        objects = []
        for t, line in w.lines:
            with contextlib.suppress(ValueError):
                objects.append((t, json.loads(line)))
        self._judge_background(w, objects)
        assert w.proc is not None
        rc = w.proc.returncode
        stuck = bool(objects and objects[-1][1].get("stuck"))
        if not w.ended_by_us and rc == 5 and not stuck:
            self.errors.append(f"wait {w.name}: exit 5 (stuck) but its last verdict is not stuck")
        elif not w.ended_by_us and rc not in (0, 1, 3, 4, 5):
            self.errors.append(f"wait {w.name}: exit {rc} (a usage or config error?)")
        if not w.ended_by_us and objects:
            advance = bool(objects[-1][1].get("advance"))
            if (rc == 0) != advance:
                self.exit_code_errors.append(f"wait {w.name}: exit {rc} with advance {advance}")

    def _judge_background(self, w: Watch, objects: list[tuple[float, dict[str, Any]]]) -> None:
        for arrived, verdict in objects:
            self._count_check(w.kind)
            if verdict.get("advance") != (verdict.get("verdict") == "complete"):
                self.exit_code_errors.append(
                    f"{w.name}: advance {verdict.get('advance')} with {verdict.get('verdict')}"
                )
            checked = _epoch(verdict.get("checked_at")) or arrived
            seen = self._seen_in(verdict)
            w.seen_alive |= seen
            self._record(
                w,
                verdict,
                checked,
                seen,
                self._snaps_between(checked - 0.05, checked),
                [w.definition] if w.kind != "serve" else self._definitions_between(checked - 1.0, checked),
            )
            if verdict.get("verdict") == "failed":
                lo = max(checked - 0.05, w.started)
                defs = [w.definition] if w.kind != "serve" else self._definitions_between(lo - 1.0, arrived)
                self._judge_failed(w, verdict, self._snaps_between(lo, arrived), defs)
            if verdict.get("verdict") != "complete":
                continue
            if _followed(verdict):
                # Another watch's verdict, as of its probe: judged at the moment it reached us
                # (a stale one is graded below).
                snaps = self._snaps_between(arrived, arrived)
                lo = arrived
            else:
                # This watch's own probe, reported a moment later: any state in between.
                checked = _epoch(verdict.get("checked_at")) or w.started
                lo = max(checked - 0.05, w.started)
                snaps = self._snaps_between(lo, arrived)
            defs = [w.definition] if w.kind != "serve" else self._definitions_between(lo - 1.0, arrived)
            self._judge(w, verdict, snaps, defs, arrived=arrived)

    def _seen(self, w: Watch, upto: float, followed: bool) -> tuple[frozenset[int], frozenset[int]]:
        """The runs ``w``'s probes surely saw alive, and those they may have seen.

        Checks made in this thread record what they saw. A watch checking beside the steps
        surely saw the runs its verdicts' process evidence showed alive (read back in order,
        so only those up to the verdict being judged), and may have seen any run alive while
        it lived. A followed verdict's holder may have seen any run.
        """
        every = frozenset(r.index for r in self.runs)
        d = w.definition
        if not (process_sees(d, w.scope) or record_read(d, w.scope)):
            return frozenset(), every if followed else frozenset()
        if w.kind not in ("wait", "serve"):
            return frozenset(w.seen_alive), every if followed else frozenset()
        surely = frozenset(w.seen_alive)
        maybe = frozenset(
            r.index for r in self.runs if min(upto, r.ended or upto) > max(w.started, r.started)
        )
        return surely, every if followed else maybe

    def _snaps_between(self, lo: float, hi: float) -> list[Snapshot]:
        """Every state the world was in at some moment of [lo, hi]."""
        with self._lock:
            timeline = list(self.timeline)
        found = []
        for i, (began, _ended, snap) in enumerate(timeline):
            valid_to = timeline[i + 1][1] if i + 1 < len(timeline) else float("inf")
            if began <= hi and valid_to >= lo:
                found.append(snap)
        return found or [timeline[-1][2]]

    def _definitions_between(self, lo: float, hi: float) -> list[Definition]:
        found = []
        for i, (t, d) in enumerate(self.definitions):
            valid_to = self.definitions[i + 1][0] if i + 1 < len(self.definitions) else float("inf")
            if t <= hi and valid_to >= lo:
                found.append(d)
        return found or [self.definition]

    def _judge(
        self,
        w: Watch,
        verdict: dict[str, Any],
        snaps: list[Snapshot],
        definitions: list[Definition],
        store: str | None = None,
        arrived: float = 0.0,
    ) -> None:
        followed = _followed(verdict)
        seen = self._seen(w, arrived, followed)
        best = _best(snaps, definitions, w.scope, seen)
        if best.kind == OK:
            self.completes += 1
            self.by_kind[w.kind + ":complete"] += 1
            return
        if followed and best.kind == HARD:
            # The holder's verdict may have been right, for this watch's run and definition,
            # when the holder checked (even before this watch began): stale, not wrong. A
            # holder here checks only when the history says, a real one every interval; a
            # verdict of another run or definition is wrong at any time.
            checked = _epoch(verdict.get("checked_at")) or w.started
            then = _best(
                self._snaps_between(checked - 0.05, arrived),
                definitions,
                w.scope,
                seen,
            )
            if then.kind in (OK, SOFT):
                # Right when its holder checked, or as right as the signals let it be then (a
                # soft false complete, judged so where the holder's own check is): a follower
                # showing it later, marked as the holder's, says nothing new (seed 5002586:
                # the holder's complete of run 1, which wrote its line and exited 1, shown
                # while run 2 was at work, graded hard).
                best = Judgement(
                    SOFT,
                    f"{best.why} (the followed verdict was "
                    + ("right" if then.kind == OK else f"soft-false: {then.why}")
                    + " when its holder checked)",
                    f"stale-follow/{best.route}",
                )
        finding = Finding(
            seed=self.seed,
            step=self.step_no,
            watch=w.name,
            kind=w.kind,
            judgement=best,
            verdict=verdict,
            followed=followed,
            context={
                "since": w.since_text,
                "since_family": _since_family(w.since_text),
                "store": bool(w.stores) or store is not None,
                "skew": self.skews != (0.0, 0.0),
                "prelude": self.preludes > 0,
                "probe": w.scope.probe,
                "launch": w.scope.launched is not None,
                "runs": len(self.runs),
            },
        )
        (self.findings if best.kind == HARD else self.soft).append(finding)

    # ------------------------------------------------------------------ the end

    def close(self) -> None:
        """End every watch (judging what the background ones said), kill the job, remove the files."""
        try:
            # Checks enough after the last step for a watch that must complete to show it
            # does (the other side of the oracle: within 3 checks of the evidence settling).
            live = [w for w in self.watches.values() if w.kind == "checker" and not w.done]
            if live and not self.errors:
                with contextlib.suppress(Exception):
                    time.sleep(0.25)
                    for _ in range(3 + max(w.definition.settle for w in live)):
                        for w in live:
                            self._check_once(w)
                        time.sleep(0.12)
            for w in list(self.watches.values()):
                try:
                    self._end(w, clean=True)
                except Exception as exc:  # report, and go on cleaning up
                    self.errors.append(f"ending {w.name}: {exc!r}")
        finally:
            if self.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    self.proc.wait(5)
                for pipe in (self.proc.stdin, self.proc.stdout):
                    with contextlib.suppress(OSError):
                        pipe.close()  # type: ignore[union-attr]
                self.proc = None
            for w in self.watches.values():
                if w.proc is not None and w.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(w.proc.pid, signal.SIGKILL)
                    w.proc.wait(5)
                if w.proc is not None and w.proc.stdout is not None:
                    w.proc.stdout.close()
                for st in w.stores:
                    with contextlib.suppress(Exception):
                        st.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "steps": self.step_no,
            "checks": self.checks,
            "completes": self.completes,
            "hard": len(self.findings),
            "soft": len(self.soft),
            "by_kind": dict(self.by_kind),
            "exit_code_errors": list(self.exit_code_errors),
            "false_failed": len(self.false_failed),
            "obligations": list(self.obligations),
            "errors": list(self.errors),
            "notes": list(self.notes),
        }


def _best(
    snaps: list[Snapshot],
    definitions: list[Definition],
    scope: Scope,
    seen: tuple[frozenset[int], frozenset[int]],
) -> Judgement:
    """The most lenient judgement over every (state, definition) pair."""
    best: Judgement | None = None
    for snap in snaps:
        for d in definitions:
            j = judge(snap, d, scope, *seen)
            # Ties go to the latest state: the name of a finding is the world as it ended.
            if best is None or SEVERITY[j.kind] <= SEVERITY[best.kind]:
                best = j
    assert best is not None
    return best


def _followed(verdict: dict[str, Any]) -> bool:
    reasons = verdict.get("reasons") or [""]
    return str(reasons[0]).startswith("watched elsewhere by")


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    with contextlib.suppress(ValueError):
        return dt.datetime.fromisoformat(iso).timestamp()
    return None


def _since_family(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.strip()
    if t.startswith("@"):
        return "epoch"
    if len(t) >= 10 and t[4] == "-" and t[7] == "-":
        return "iso"
    if t.replace(".", "", 1).isdigit() and float(t) > 10 * 365 * 86400:
        return "number"
    return "duration"
