"""The Checker: one stage, one host, a memory of earlier checks, one verdict per check.

A check is one probe round trip: the frame (``_base.probe``) plus each configured signal's
snippet; then each signal reads its sections in registry order (``_signals.SIGNALS``),
passing on what it learnt (the job's PIDs, where the run begins), and the verdict
(``_verdict.decide``) turns the readings into one answer.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sensors._base.errors import ConfigError, HostError, HostKeyError
from sensors._base.model import Reading, Says, State, Verdict
from sensors._base.probe import (
    FIRST,
    GARBLED,
    REST,
    TIMED_OUT,
    Meta,
    Static,
    build_script,
    new_nonce,
    parse_meta,
    split_sections,
)
from sensors._base.tolerances import CLOCK_SLEW, CLOCK_STEP, END_WINDOW, JIFFY, SINCE_SAME
from sensors._check.launch import supervised_stage
from sensors._check.persist import FOLLOWED, NotOurs, OwnRun, Persistence, is_this_run, save_all
from sensors._config.stage import PolicySpec, Stage
from sensors._hosts import Host, LocalHost
from sensors._hosts.exits import ExitWatch, SeenEnd, local_exits
from sensors._hosts.ssh_exits import RemoteExitWatch
from sensors._run.run import LaunchEnd, Run, Since, exit_record_lines, parse_since, read_launch_end
from sensors._signals import SIGNALS, CheckFacts, ProbeInputs, Signal
from sensors._signals.base import JobView
from sensors._signals.log import LogMemory, seed_log_memory
from sensors._store import Store
from sensors._verdict import VerdictMemory, decide
from sensors._verdict.stuck import doubt_only

log = logging.getLogger("crosscheck")

_LOCAL = LocalHost()


def host_for(stage: Stage) -> Host:
    """The host a stage lives on; SSH hosts are pooled, one connection per (user, host, port)."""
    if stage.host == "local":
        return _LOCAL
    from sensors._hosts import ssh  # paramiko only when a stage needs it

    return ssh.get_host(stage.host)


@dataclass
class _Memory:
    """Everything a Checker remembers between checks: small values, one per signal."""

    signals: dict[str, Any] = field(default_factory=dict)  # signal name → its memory
    verdict: VerdictMemory = field(default_factory=VerdictMemory)
    static: Static | None = None  # clock tick rate, hostname, lxcfs: read once per boot
    boot_id: str | None = None  # the boot the static facts belong to
    run: Run | None = None  # where the run being watched begins (launch, since, process)
    first_check_at: float | None = None  # the host's clock at this watch's first check


def _owned_by(end: SeenEnd) -> float:
    """The latest file time (host clock) of a change still the ended process's own, from the
    interval its end was seen in (``ExitWatch.end``): where the watch saw the end closely, up
    to the moment it found the process gone; else a tick before the last moment it was known
    alive (the change then surely came while it lived)."""
    return end.gone if end.gone - end.alive <= END_WINDOW else end.alive - JIFFY


def _named_since_first(run: Run | None, mem: _Memory) -> bool:
    """Whether ``run`` is a supervisor's record's run that may have begun after this watch's
    first check (and this is not that check): to the record's precision (systemd's and
    Slurm's whole seconds, rounded down: a start read S may be as late as S + 1)."""
    return (
        run is not None
        and run.source == "supervisor"
        and run.started_at is not None
        and mem.first_check_at is not None
        and run.started_at + (run.slack or 0.0) > mem.first_check_at
    )


def _sent_at(host: Host) -> float | None:
    """When ``host`` sent this thread's last script, where it says (SSH: after connecting)."""
    sent = getattr(host, "sent_at", None)
    return sent() if callable(sent) else None


def probe_script(stage: Stage, nonce: str) -> bytes:
    """The probe script of a first check of ``stage`` on this machine (for tests and tools)."""
    return build_script(nonce, None, Checker(stage, host=_LOCAL).snippets(nonce))


def save_checked(checked: Sequence[tuple[Checker, Verdict]]) -> None:
    """Save each checker's memory after its check (those with a state store): the saves of
    one store in one call where it takes several (see ``sensors._check.persist.save_all``)."""
    save_all(
        [
            (c._persist, c.memory_doc(), verdict)
            for c, verdict in checked
            if c._persist is not None and c.saving
        ]
    )


def _configured(stage: Stage) -> tuple[tuple[Signal[Any, Any], Any], ...]:
    return tuple((signal, spec) for signal in SIGNALS if (spec := getattr(stage, signal.name)) is not None)


class Watch(Iterator[Verdict]):
    """The verdicts of one :meth:`Checker.watch`; ``timed_out`` once it ended at its timeout."""

    def __init__(self, verdicts: Iterator[Verdict]) -> None:
        self._verdicts = verdicts
        self.timed_out = False

    def __next__(self) -> Verdict:
        return next(self._verdicts)

    @classmethod
    def of(
        cls,
        check: Callable[[], Verdict],
        policy: PolicySpec,
        *,
        timeout: float | None,
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> Watch:
        """``check()`` every ``policy.interval`` until complete, failed or ``timeout`` (the
        policy's by default): a :class:`Checker`'s watch, or a stage's over several hosts."""
        limit = policy.timeout if timeout is None else timeout
        watch: Watch

        def verdicts() -> Iterator[Verdict]:
            deadline = clock() + limit
            while True:
                started = clock()
                verdict = check()
                yield verdict
                if verdict.settled:  # complete, failed, or an unknown that cannot become complete
                    return
                remaining = deadline - clock()
                if remaining <= 0:
                    watch.timed_out = True
                    return
                sleep(min(max(0.0, policy.interval - (clock() - started)), remaining))

        watch = cls(verdicts())
        return watch


class Following:
    """What a watch of a stage does where another watch holds it: follow the stored verdict
    of its own run and definition, and confirm a final one by checks of its own. One rule for
    :class:`Checker` and a stage over several hosts (``sensors._check.span``); each says how
    it takes over, keeps its own memory aside, and goes on from the holder's.
    """

    stage: Stage
    last: Verdict | None
    _persist: Persistence | None
    _saving: bool
    _told_not_ours: bool
    _checked_here: bool
    #: The holder's memory as this watch's confirmations advanced it: (which save of the
    #: holder's it began from, that memory). See :meth:`_confirmed`.
    _confirming: tuple[Any, Any] | None = None
    #: Whether this watch's memory is that carried memory: it had none of its own when it
    #: began to confirm (it never read the host before). See :meth:`_confirmed`.
    _carried_is_own: bool = False
    #: Whether this watch can be given a run start (``--since``, ``since=``). ``serve`` sets
    #: it False for its stage files, which have none (a gate's handoff takes one).
    takes_since: bool = True

    @property
    def own_run(self) -> OwnRun:
        raise NotImplementedError

    def _check(self) -> Verdict:
        raise NotImplementedError

    def _take_over(self) -> None:
        """Go on from the stored memory: the holder's, the latest of the run."""
        raise NotImplementedError

    def _own_memory(self) -> Any:
        """This watch's memory, set aside while it checks with the holder's."""
        raise NotImplementedError

    def _as_holder(self, memory: Mapping[str, Any]) -> None:
        """Go on from the holder's ``memory`` (of this watch's run) instead of its own."""
        raise NotImplementedError

    def _restore_own(self, kept: Any) -> None:
        """Put back what :meth:`_own_memory` set aside."""
        raise NotImplementedError

    def followed(self) -> Verdict | None:
        """The stored verdict, when another watch holds this stage (this one then only follows).

        Only a verdict of this watch's run and of this very definition is followed
        (``Persistence.followed``). Held elsewhere with nothing of that run to follow, this
        watch checks for itself and keeps what it learns in this process: the stored memory
        is the holder's (see ``saving``).
        """
        persist = self._persist
        self._saving = True
        elsewhere = persist.hold() if persist is not None else None
        if persist is None or elsewhere is None:
            if persist is not None and persist.following:
                # Taken over from the watch this one followed: its memory is the latest of the
                # run (what this watch restored at its start is as old as that start).
                persist.following = False
                self._take_over()
                # Its memory is the stored one now, not the one its confirmations carried.
                self._confirming, self._carried_is_own = None, False
            return None
        followed = persist.followed(elsewhere, self.own_run)
        if not isinstance(followed, Verdict):
            if isinstance(followed, NotOurs) and not self._told_not_ours:
                log.info("%s: held by %s; %s: checked here", self.stage.stage, elsewhere, followed.why)
                self._told_not_ours = True
            self._saving = False
            return None
        if followed.settled:
            return self._confirmed(followed, elsewhere)
        self.last = followed
        return followed

    def _confirmed(self, followed: Verdict, elsewhere: str) -> Verdict:
        """The holder's final verdict (``complete`` or ``failed``), confirmed by this watch's
        own checks, or the least advanced of them where one disagrees.

        A followed verdict is as old as the holder's last check, and a holder looks at a
        stage finished for ten intervals ten times less often (``crosscheck serve``), or may
        be stuck: the job may have been run again since. A final verdict ends a wait and is acted upon (the
        next stage starts, or the pipeline stops), so it is never taken on another watch's
        word alone. This watch checks without saving (the row is the holder's): with the
        holder's memory of the run (the same run and definition, or it would not be
        followed), and — where it has read the host itself before — once more with its own
        memory, which holds what it saw there and the holder may never have (a later run at
        work: fuzzer seed 303081). Both must agree with the holder; where one does not, its
        verdict stands, and never a ``complete`` over one that is not — unless all that holds
        that one back is that its memory cannot tell whose the text after the completion line
        is (``doubt_only``), where the other's saw the line's writer and its end.
        """
        assert self._persist is not None
        memory = self._persist.restore().memory or {}
        self._saving = False
        checks = []
        last = memory.get("last")
        if is_this_run(memory.get("run"), self.own_run, one_clock=self._persist.one_clock) and isinstance(
            last, Verdict
        ):
            # The holder's memory goes on from this watch's last confirmation while the holder
            # has saved nothing since (one gone quiet with its lease still live). Adopted
            # afresh at every check, its "since the last check" stayed the holder's last
            # check: outputs that changed before it were "confirming they stopped changing"
            # at every confirmation, and the watch never completed (fuzzer seed 4300562).
            save = (last.checked_at, last.state, last.reasons)
            carried = self._confirming is not None and self._confirming[0] == save
            # A watch that had no memory of its own at a confirmation kept the carried one as
            # its own: going on from it, "once more with its own memory" would check the memory
            # the first check just advanced, two steps of its settle count a few ms apart
            # (outputs rewritten by a hidden writer every third confirmation were confirmed
            # complete: tests/test_adversary_42.py). One check of it, then; against a new save
            # of the holder's it is what this watch saw, and checked with (seed 303081).
            same = carried and self._carried_is_own
            own = self._own_memory() if self._checked_here and not same else None
            if carried:
                assert self._confirming is not None  # carried: its save is the holder's last
                self._restore_own(self._confirming[1])
            else:
                self._as_holder(memory)
            checks.append(self._check())
            self._confirming = (save, self._own_memory())
            if own is not None:
                self._restore_own(own)  # kept: what this watch saw itself
                checks.append(self._check())
            self._carried_is_own = own is None
        else:
            checks.append(self._check())
        if all(c.state is followed.state and c.settled == followed.settled for c in checks):
            self.last = followed
            return followed
        told = next((c for c in checks if c.state is State.COMPLETE), None)
        if told is not None and all(c.state is State.COMPLETE or doubt_only(c) for c in (*checks, followed)):
            # One memory saw the line's writer at work and its end; the other (a holder that
            # never saw that run's process: it checked before the run and after its end)
            # only cannot tell whose the text after the line is. That doubt is a lack of
            # knowledge, nothing read against the run: it vetoed the check that can tell for
            # as long as the holder kept its lease (fuzzer seed 8800606: for good).
            self.last = told
            return told
        holding_back = [c for c in checks if not c.advance]
        if holding_back:
            return next((c for c in holding_back if c.state is not followed.state), holding_back[0])
        # The holder's failed, while every check of this watch finds the stage done: neither
        # is followed. The holder's word is as old as its last check (a later run may have
        # completed since: fuzzer seed 1200346, a holder gone quiet with its lease still
        # live), and a complete on this watch's check alone, against the holder's failed,
        # is no agreement. Unknown until the two agree, or the lease ends and this watch
        # checks for itself.
        done = checks[-1]
        why = followed.reasons[1] if len(followed.reasons) > 1 else "no reason given"
        # Its final verdict as it is: failed, or an unknown that can never become complete
        # (stuck), never called a failure.
        said = "failed" if followed.state is State.FAILED else f"{followed.state}, never to become complete"
        return replace(
            done,
            state=State.UNKNOWN,
            stuck=None,
            reasons=(
                f"{FOLLOWED} {elsewhere} says {said} ({why}), while a check here finds every signal done:"
                " neither is taken until the two agree",
                *done.reasons,
            ),
        )


class Checker(Following):
    """Checks one stage: each :meth:`check` is one probe round trip and returns a verdict.

    The checker remembers what earlier checks saw (CPU time, log size, output count,
    identities, how long a state has held): progress and stalls are judged across checks.

    Example:
        >>> with Checker(load_stage("extract.yaml")) as checker:  # doctest: +SKIP
        ...     verdict = checker.check()
        ...     print(verdict.state, verdict.reasons)
    """

    def __init__(
        self,
        stage: Stage,
        *,
        host: Host | None = None,
        exclude_pids: frozenset[int] | None = None,
        since: str | float | Since | None = None,
        run: Run | None = None,
        state: Store | str | os.PathLike[str] | None = None,
        began: float | None = None,
    ) -> None:
        """
        Args:
            stage: what to watch.
            host: where (default: the stage's host; SSH connections are pooled).
            exclude_pids: PIDs never matched as the job (default: this process, locally).
            since: when the run began (``2h``, an ISO time, epoch seconds): evidence from
                before it is an earlier run's. See docs/run-binding.md, "What ties evidence to a run".
            run: the run as crosscheck launched it (``launch_stage`` records one).
            state: the durable store (a path, a ``postgresql://`` URL, or an open store) that
                keeps this stage's memory across restarts: restored now, saved after each
                check. None: memory lives with this Checker only.
            began: when this watch began (this machine's clock; default: now). The CLI passes
                its own process's start: a job typed right after ``crosscheck wait`` may be over
                before the command has imported itself, and its log is still this run's.
        """
        if stage.hosts is not None:
            raise ConfigError(
                "a stage over several hosts (hosts:) is checked by sensors.SpanChecker"
                " (sensors.checker_for gives the checker of any stage)",
                field="hosts",
            )
        # A Slurm job a launch created is named by the ID sbatch gave (the launch record's),
        # whatever the stage file says: every consumer of the record watches that job.
        stage = supervised_stage(stage, run)
        self.stage = stage
        self.host = host if host is not None else host_for(stage)
        self.last: Verdict | None = None
        self._signals_of: tuple[Stage, tuple[tuple[Signal[Any, Any], Any], ...]] = (stage, _configured(stage))
        self._memory = _Memory(run=run)
        if run is not None and stage.log is not None:
            self._memory.signals["log"] = seed_log_memory(run) or LogMemory()
        try:
            self._since = parse_since(since)
        except ValueError as exc:
            raise ConfigError(str(exc), field="since") from None
        #: Held for the length of one check: a batch (``sensors._check.batch``) takes every
        #: stage's before its one round trip, so no other check of them runs in between.
        self.lock = threading.Lock()
        self._persist: Persistence | None = None
        self._saving, self._told_not_ours = True, False
        #: Whether, in a batch, this stage's reads run guarded (``sensors._base.probe.guard``):
        #: until a check has found every file of it on a local file system (then nothing of it
        #: can block the host's other stages), and again once one is not.
        self.guarded = bool(self.files)
        # The job's processes this watch asked the host to see end (PID -> start ticks).
        self._watched: dict[int, int] = {}
        # The exit watch those were given to (None: none sees this probe's processes).
        self._exits: ExitWatch | RemoteExitWatch | None = None
        self._own_pidns: str | None = None
        # When this watch began (this machine's clock), and when its probe was sent: the
        # first answer places the start on the host's clock (CheckFacts.watch_began).
        self._began = time.time() if began is None else min(time.time(), began)
        self._sent_at: float | None = None
        self._answered_at: float | None = None
        #: The least and the most the host's clock was ahead of this machine's at the last
        #: check, measured in its round trip (:meth:`_ahead`); None: not measured (no answer
        #: yet, or one whose round trip is not known). A stage over several hosts orders the
        #: hosts' times by it (``sensors._verdict.across``).
        self.clock_ahead: tuple[float, float] | None = None
        self._offset: tuple[float, float, float] | None = None  # clock_ahead, and when (monotonic)
        #: Node 0 of a stage over several hosts whose log the nodes share: the latest moment a
        #: rank of its run on another host was seen alive, on this host's clock at the earliest
        #: (:attr:`JobView.elsewhere`; set by ``sensors._check.span`` after each check).
        self.elsewhere: float | None = None
        #: The watched processes whose end the host let this watch see, and the last moment
        #: each was known alive (the host's clock): a stage over several hosts orders another
        #: node's log by them (``sensors._verdict.across.at_work_elsewhere``).
        self.ended_alive: dict[int, float] = {}
        #: The job as this check's process signal saw it (None: no process section, or not
        #: read): a rank's log of a stage over several hosts is told by its node's processes.
        self.job_seen: JobView | None = None
        self._watch_began: float | None = None
        # Whether this watch has read the host itself: what it saw (a later run at work, say)
        # is in its memory and nowhere else, so a confirmation checks with it too.
        self._checked_here = False
        # What this watch was told of its run (a launch, a start): nothing remembered of
        # another run may stand for it.
        self._own: OwnRun = run if run is not None else self._since
        self._given_run = run
        # The last verdict of the memory this watch went on from (the state store's: an
        # earlier watch's), and this watch's checks since: its words say whose they are.
        self._stored: Verdict | None = None
        self._own_checks = 0
        if state is not None:
            self._persist = Persistence(state, stage, self.host.name)
            self._restore(run)
        # Never match ourselves: on the local host, crosscheck's own process (and its
        # ancestors, found by the probe) are excluded from process matching.
        self._exclude = (
            exclude_pids
            if exclude_pids is not None
            else (frozenset({os.getpid()}) if isinstance(self.host, LocalHost) else frozenset())
        )

    #: Whether the watch's own start may bind what its first check finds (a stage with a
    #: process signal: the job is its own; a rank's log of a span is bound by its node's).
    @property
    def watch_start_binds(self) -> bool:
        return self.stage.process is not None

    @property
    def files(self) -> tuple[str, ...]:
        """The paths this stage reads (its log, its outputs)."""
        stage = self.stage
        paths = [stage.log.path] if stage.log is not None else []
        if stage.outputs is not None:
            paths += [p for p in (stage.outputs.files, stage.outputs.lines) if p]
        return tuple(paths)

    # ------------------------------------------------------------------ one check

    def check(self) -> Verdict:
        """One check: read every signal in one round trip, decide, remember.

        Host failures (connection refused, timeout, garbled answer) never raise: every
        reading is ``unknown`` with the error as evidence. Only :class:`HostKeyError` is
        raised: an unverifiable host key needs a person, not a retry.
        """
        with self.lock:
            followed = self.followed()
            if followed is not None:
                return followed
            return self.save(self._check())

    @property
    def persistence(self) -> Persistence | None:
        """This stage's view of the state store (None: memory lives with this Checker only)."""
        return self._persist

    def _take_over(self) -> None:
        self._restore(self._given_run)

    def _own_memory(self) -> Any:
        return self._memory

    def _as_holder(self, memory: Mapping[str, Any]) -> None:
        self._memory = _Memory()
        self._adopt(memory)

    def _restore_own(self, kept: Any) -> None:
        self._memory = kept

    def _adopt(self, memory: Mapping[str, Any]) -> None:
        """Go on from ``memory`` (a stored memory of this watch's run)."""
        mem = self._memory
        mem.signals = dict(memory.get("signals") or {})
        mem.verdict = memory.get("verdict") or VerdictMemory()
        mem.static, mem.boot_id = memory.get("static"), memory.get("boot_id")
        mem.run, mem.first_check_at = memory.get("run"), memory.get("first_check_at")

    def adopt(self, memory: Mapping[str, Any]) -> None:
        """Go on from ``memory`` whole, its last verdict too: a holder's memory of a run this
        watch was found to share (a confirmation of a stage over several hosts, as
        :meth:`_confirmed` adopts the holder's memory of one host)."""
        self._adopt(memory)
        last = memory.get("last")
        self.last = last if isinstance(last, Verdict) else None

    def kept(self) -> tuple[Any, ...]:
        """What this watch knows (its memory, its last verdict, whether it read the host):
        put back with :meth:`put_back` after checks from another memory (a confirmation of a
        stage over several hosts, ``sensors._check.span``)."""
        return (self._memory, self.last, self._checked_here)

    def put_back(self, kept: tuple[Any, ...]) -> None:
        self._memory, self.last, self._checked_here = kept

    def forget(self) -> None:
        """Start from fresh memory (what this watch was told of its run stays)."""
        self._memory, self.last, self._checked_here = _Memory(run=self._given_run), None, False
        if self._given_run is not None and self.stage.log is not None:
            self._memory.signals["log"] = seed_log_memory(self._given_run) or LogMemory()

    @property
    def own_run(self) -> OwnRun:
        """What this watch was told of its run: a launch, a start given with ``since``, or
        None (the latest run)."""
        return self._own

    @property
    def saving(self) -> bool:
        """Whether this check's memory goes to the state store (not while another watch holds
        the stage: its row is the holder's)."""
        return self._persist is not None and self._saving

    def save(self, verdict: Verdict) -> Verdict:
        """``verdict``, after saving this stage's memory (when a state store keeps it)."""
        save_checked([(self, verdict)])
        return verdict

    def announced(self) -> Verdict | None:
        """This run's complete or failed verdict, when the state store says it was announced
        already (a gate started again on a finished run): announce it no second time.

        One fresh check first: a job run again since (a newer process) is a new run, and a
        job alive is no finished run, whatever the store remembers.
        """
        if self._persist is None:
            return None
        run, last = self._memory.run, self.last
        known = self._persist.announced(run, last)
        if known is None:
            return None
        fresh = self.check()
        process = fresh.readings.get("process")
        if self._memory.run != run or (process is not None and process.says is Says.WORKING):
            return None
        return known

    def announce(self, verdict: Verdict) -> bool:
        """Record ``verdict`` as this run's final one; False when it was announced before."""
        if self._persist is None:
            return True
        return self._persist.announce(self._memory.run, verdict)

    def memory_doc(self) -> dict[str, Any]:
        """What the store keeps of this stage (the memory of every part, encoded by the codec)."""
        mem = self._memory
        return {
            "signals": mem.signals,
            "verdict": mem.verdict,
            "static": mem.static,
            "boot_id": mem.boot_id,
            "run": mem.run,
            "first_check_at": mem.first_check_at,
            "last": self.last,
        }

    def _restore(self, run: Run | None) -> None:
        """Go on from the stored memory of this stage, when it is of this watch's run.

        A launch is its own run; a start given with ``--since`` (as a time or as a duration:
        a duration is resolved anew by every watch) is a new run unless the stored one began
        at that very time. Memory of another run is not used at all: its identities, offsets,
        counts and verdicts are that run's.
        """
        assert self._persist is not None
        restored = self._persist.restore()
        for note in restored.notes:
            log.warning("%s: %s", self.stage.stage, note)
        self.go_on_from(restored.memory, run)

    def go_on_from(self, memory: Mapping[str, Any] | None, run: Run | None = None) -> None:
        """Go on from a stored memory of this stage (:meth:`memory_doc`), when it is of this
        watch's run (see :meth:`_restore`); a stage over several hosts keeps its nodes'
        memories in its own document (``sensors._check.span``)."""
        if not memory:
            return
        stored_run = memory.get("run")
        if run is not None:
            same = stored_run is not None and is_this_run(stored_run, run)
        elif self._since is not None:
            same = (
                self._since.at is not None
                and stored_run is not None
                and stored_run.source == "since"
                and stored_run.started_at is not None
                and abs((stored_run.given or stored_run.started_at) - self._since.at) <= SINCE_SAME
            )
        else:
            same = True
        if not same:
            log.info("%s: a new run: the stored memory of the last one is not used", self.stage.stage)
            if memory.get("static") is not None:
                self._memory.static, self._memory.boot_id = memory.get("static"), memory.get("boot_id")
            return
        self._adopt(memory)
        self.last = memory.get("last")
        self._stored = self.last if isinstance(self.last, Verdict) else None
        self._own_checks = 0
        log.info("%s: memory restored from the state store", self.stage.stage)

    @property
    def run(self) -> Run | None:
        """Where the run being watched begins, once known (launch, ``since``, or the job's
        process first seen alive)."""
        return self._memory.run

    def _check(self) -> Verdict:
        nonce = new_nonce()
        script = build_script(nonce, self._memory.static, self.snippets(nonce))
        timeout = self.stage.check_timeout
        self._sent_at = time.time()
        try:
            output = self.host.run_script(script, timeout=timeout)
            self._sent_at = _sent_at(self.host) or self._sent_at
            self._answered_at = time.time()
        except HostKeyError:
            # Not transient and not "unknown": a host whose key does not verify is never
            # asked again until a person decides to trust it.
            raise
        except HostError as exc:
            return self.host_failed(exc)
        static = self._memory.static
        return self.absorb(split_sections(output, nonce, sed_nul=static.sed_nul if static else None), nonce)

    def snippets(self, nonce: str, *, table: bool = True) -> list[list[str]]:
        """This check's probe snippets, one per configured signal (``table``: the process
        signal's reads the process table; a batch reads it once, see ``sensors._check.batch``)."""
        mem, inputs = self._memory, self._probe_inputs(nonce, table)
        self._warm_exits()
        snippets = [
            signal.snippet(spec, mem.signals.get(signal.name) or signal.new_memory(), inputs)
            for signal, spec in self._configured()
        ]
        if inputs.exit_file:
            # The launched job's exit record, whatever the signals: every one of them needs
            # to know that the launched run is over (what is written after is a later run's).
            # Read first: a log or a directory read after it holds all the job wrote if it
            # finds the job over. Read after them, a job that wrote its last line and exited
            # in between was found over with its log as it was before that line, and the line
            # was then taken for a later run's (a stage unknown for good).
            # Before the shared stat too (FIRST): a log found "unchanged" by a stat taken before
            # the record was read is the log as it was then (the user's review of issue 34: a
            # launched job's last line, written between the two, read as a later run's).
            lines = exit_record_lines(inputs.exit_file, mem.run.pid if mem.run else None)
            snippets.insert(0, [FIRST, *lines, REST])
        return snippets

    def _configured(self) -> tuple[tuple[Signal[Any, Any], Any], ...]:
        """The stage's configured signals and their specs, in registry order (twice per check:
        listed once per stage, not once per use)."""
        stage, configured = self._signals_of
        if stage is not self.stage:
            self._signals_of = stage, configured = self.stage, _configured(self.stage)
        return configured

    def absorb(self, sections: dict[str, bytes], nonce: str, meta: Meta | None = None) -> Verdict:
        """The verdict from this check's probe sections: read every signal, decide, remember.

        ``meta``: the meta section already parsed with this checker's static facts (a batch
        parses it once for the stages that share them).
        """
        stage, mem = self.stage, self._memory
        if meta is None:
            meta = parse_meta(sections.get("meta"), mem.static, sections.get("end"))
        if TIMED_OUT in sections:
            budget = sections[TIMED_OUT].decode("ascii", "replace").strip()
            return self.host_failed(
                HostError(
                    f"this stage's reads did not finish within {budget} s (a file system that does not"
                    " answer?): ended, and the host's other stages read on",
                    host=self.host.name,
                )
            )
        if GARBLED in sections:
            why = sections[GARBLED].decode("utf-8", "replace")
            return self.host_failed(HostError(f"the probe's answer was garbled: {why}", host=self.host.name))
        if "end" not in sections or meta.now is None:
            return self.host_failed(
                HostError("the probe's answer was cut short or garbled", host=self.host.name)
            )
        self._remember_static(meta)
        self._checked_here = True
        measured = type(self.host) is LocalHost or self._answered_at is not None
        self.clock_ahead = self._kept_offset(self._ahead(meta), time.monotonic()) if measured else None
        first = mem.first_check_at is None and mem.run is None and self.watch_start_binds
        if mem.first_check_at is None:
            mem.first_check_at = meta.now
        if mem.run is None and self._since is not None:
            start = self._since.resolve(meta.now, self._ahead(meta))
            mem.run = Run(source="since", started_at=start.at, given=self._since.at, slack=start.early)
        facts = CheckFacts(
            meta=meta,
            nonce=nonce,
            host=self.host.name,
            nvml=self.host.nvml,
            run=mem.run,
            first_check_at=mem.first_check_at,
            job=self._borrowed_job(),
            exclude_pids=self._exclude,
            outputs_tie=not (stage.log or stage.process),
            launch=_launch_end(sections, mem.run, meta),
            # Only for what the watch's first check finds: once a run is seen, or a later
            # check binds a log (a new run's memory, a rank's log), it is no run start.
            watch_began=self._host_began(meta) if first else None,
            takes_since=self.takes_since,
        )
        readings: dict[str, Reading] = {}
        for signal, spec in self._configured():
            memory = mem.signals.get(signal.name) or signal.new_memory()
            known = facts.run
            reading, mem.signals[signal.name], facts = signal.read(spec, sections, memory, facts)
            readings[signal.name] = reading
            if signal.name == "process" and facts.job is not None:
                job = self._seen_ends(facts.job, reading, meta)
                facts = facts._replace(job=job._replace(elsewhere=self.elsewhere))
                self.job_seen = facts.job
            if facts.run is not known and (known is not None or _named_since_first(facts.run, mem)):
                # A new run of the job (see the process signal): nothing remembered of the
                # last one (its log offsets, its outputs, its settle streak) holds for it.
                # So too for the first run a supervisor's record names, where it began after
                # this watch's first check: what the watch bound then (a log absent at its
                # first look, taken as wholly the next run's) may hold a whole earlier run
                # begun and ended between two checks (fuzzer seed 3000987: a container's
                # exit 0 completed on the line of the container before it).
                log.info("%s: a new run of the job began; the last run's memory is set aside", stage.stage)
                set_aside = mem.signals
                mem.signals = {signal.name: mem.signals[signal.name]}
                mem.verdict, self.last, self._stored = VerdictMemory(), None, None
                facts = facts._replace(first_check_at=meta.now, set_aside=set_aside)
                mem.first_check_at = meta.now
        mem.run = facts.run
        verdict, mem.verdict = decide(
            stage.stage,
            self.host.name,
            readings,
            stage.policy,
            mem.verdict,
            meta.now,
            run=mem.run,
            launch=facts.launch,
            takes_since=self.takes_since,
        )
        self._own_checks += 1
        verdict = _earlier_watch_words(
            verdict, mem.verdict.done_streak, self._own_checks, self._stored, latest=self._own is None
        )
        self.last = verdict
        return verdict

    @property
    def _one_clock(self) -> bool:
        """The host is this machine: one clock reads both, and no offset is measured."""
        return type(self.host) is LocalHost

    def _ahead(self, meta: Meta) -> tuple[float, float]:
        """The least and the most the host's clock can be ahead of this machine's (negative:
        behind): its clock was read after the probe was sent and before the answer came back,
        so the offset lies between its reading less the answer's arrival and its reading less
        the sending (0 on this machine itself; (0, 0) where the round trip is not known yet:
        clocks taken as one, as the first probe of a host has nothing better)."""
        if self._one_clock or self._answered_at is None or meta.now is None:
            return 0.0, 0.0
        sent = self._sent_at if self._sent_at is not None else self._answered_at
        return meta.now - self._answered_at, meta.now - sent

    def _borrowed_job(self) -> JobView | None:
        """The job's processes as another check saw them, for a stage with no process section
        of its own (None here; a rank's log: its node's, ``sensors._check.span``)."""
        return None

    def _kept_offset(self, ahead: tuple[float, float], now: float) -> tuple[float, float]:
        """The host's clock offset as this check's round trip bounds it, narrowed by the last
        checks' bounds where they meet (one offset, drifted by at most
        :data:`~sensors._base.tolerances.CLOCK_SLEW` since): each round trip alone bounds it
        only as closely as it was short, and an order decided by one check's bounds was
        undone by the next's (multi-host fuzzer seed 6766: complete, unknown, complete,
        unknown). Bounds that do not meet are a clock stepped since: measured afresh. Bounds
        as wide as the least step (:data:`~sensors._base.tolerances.CLOCK_STEP`) may hold a
        step and the offset before it: they are this check's alone, and the next narrow ones
        begin afresh. ``now``: this machine's monotonic clock."""
        lo, hi = ahead
        if hi - lo >= CLOCK_STEP:
            self._offset = None
            return lo, hi
        if self._offset is not None:
            kept_lo, kept_hi, at = self._offset
            slack = CLOCK_SLEW * (now - at)
            kept_lo, kept_hi = kept_lo - slack, kept_hi + slack
            if kept_lo <= hi and lo <= kept_hi:
                lo, hi = max(lo, kept_lo), min(hi, kept_hi)
        self._offset = (lo, hi, now)
        return lo, hi

    def sent(self, at: float, answered: float | None = None) -> None:
        """A batch sent this checker's probe at ``at`` and had its answer at ``answered``
        (this machine's clock)."""
        self._sent_at = at
        if answered is not None:
            self._answered_at = answered

    def _host_began(self, meta: Meta) -> float | None:
        """When this watch began on the host's clock, at the latest: its start on this
        machine's clock, plus the most the host's clock can be ahead of it (its answer read
        after the probe was sent)."""
        if self._watch_began is None and self._sent_at is not None and meta.now is not None:
            # On this machine itself the probe's own time until it read the clock is no
            # offset. Added, a log born 12 ms after the watch began read as born before it,
            # and a job begun just after `wait` and over before its first check never
            # completed (ML engineer's trial, notes/ml44.md).
            ahead = 0.0 if self._one_clock else meta.now - self._sent_at
            self._watch_began = self._began + max(0.0, ahead)
        return self._watch_began

    def _seen_ends(self, job: JobView, reading: Reading, meta: Meta) -> JobView:
        """``job`` with the ends of this run's processes that the host let this watch see
        (``sensors._hosts.exits``): its live processes are watched from now on."""
        watch = self._exits = self._exit_watch(meta)
        if watch is None:
            return job
        watched = self._watched
        for entry in reading.evidence.get("processes") or ():
            pid, ticks = entry.get("pid"), entry.get("start_ticks")
            if pid in job.live and isinstance(ticks, int) and pid not in watched:
                watch.watch(pid, ticks)
                watched[pid] = ticks
                if len(watched) > 256:
                    watched.pop(next(iter(watched)))
        seen = {
            pid: between for pid, ticks in watched.items() if (between := watch.end(pid, ticks)) is not None
        }
        self.ended_alive = {pid: between.alive for pid, between in seen.items()}
        ends = {pid: _owned_by(between) for pid, between in seen.items()}
        return job._replace(ends=ends) if ends else job

    def _warm_exits(self) -> None:
        """An SSH host's exit watch opens its channel beside this check's probe, while the
        stage may have processes to watch: one this probe finds is then in view within a
        poll, and not a login shell later (a job that ends in that second ends unseen)."""
        exit_watch = getattr(self.host, "exit_watch", None)
        if exit_watch is not None and (self.stage.process is not None or self.stage.log is not None):
            exit_watch().warm()

    def _exit_watch(self, meta: Meta) -> ExitWatch | RemoteExitWatch | None:
        """The exit watch of the host, where the probe's processes are the ones it sees: this
        machine's, for the plain local host in this process's own PID namespace; an SSH
        host's own (one channel of its connection), in the probe's PID namespace."""
        if not meta.view:
            return None
        exit_watch = getattr(self.host, "exit_watch", None)
        if exit_watch is not None:
            remote: RemoteExitWatch = exit_watch()
            return remote if remote.sees(meta.view) else None
        if type(self.host) is not LocalHost:
            return None
        if self._own_pidns is None:
            try:
                self._own_pidns = os.readlink("/proc/self/ns/pid")
            except OSError:
                self._own_pidns = ""
        watch = local_exits()
        return watch if watch.available and meta.view.startswith(self._own_pidns + " ") else None

    def _probe_inputs(self, nonce: str, table: bool = True) -> ProbeInputs:
        mem, stage = self._memory, self.stage
        process = mem.signals.get("process")
        run_start = mem.run.started_at if mem.run is not None and mem.run.started_at else mem.first_check_at
        pids = tuple(process.job_pids) if process is not None else ()
        exits, watched = self._exits, self._watched
        return ProbeInputs(
            nonce=nonce,
            nvml=self.host.nvml,
            job_alive=bool(pids),
            job_pids=pids,
            # Every one of them seen to end since (the exit watch): what only a check that
            # finds the job gone asks, this one asks (the outputs' last change), a check sooner.
            job_ended=bool(pids)
            and exits is not None
            and all(p in watched and exits.end(p, watched[p]) is not None for p in pids),
            run_start=run_start,
            outputs_tie=not (stage.log or stage.process),
            table=table,
            exit_file=mem.run.exit_file if mem.run is not None else None,
            has_log=stage.log is not None,
        )

    def _remember_static(self, meta: Meta) -> None:
        mem = self._memory
        if mem.static is not None and meta.boot_id != mem.boot_id:
            # Rebooted: what was static may not be any more (read again next check).
            mem.static, mem.boot_id = None, None
        elif meta.clk_tck:
            static = mem.static
            if (
                static is None
                or static.clk_tck != meta.clk_tck
                or static.hostname != meta.hostname
                or static.uptime_virtualised != meta.uptime_virtualised
                or static.sed_nul != meta.sed_nul
            ):
                mem.static = Static(meta.clk_tck, meta.hostname, meta.uptime_virtualised, meta.sed_nul)
            mem.boot_id = meta.boot_id

    @property
    def static(self) -> Static | None:
        """What this checker knows of its host that does not change while it is up (clock
        ticks, hostname; None: not read yet): a batch sends it to skip reading it again."""
        return self._memory.static

    def host_failed(self, exc: HostError) -> Verdict:
        """Every reading unknown, the error as evidence: a dead link is not a dead process."""
        evidence = {"host_error": str(exc), "error_type": type(exc).__name__}
        readings = {
            name: Reading(name, Says.UNKNOWN, f"host unreachable: {exc}", evidence, None, self.host.name)
            for name in self.stage.signals
        }
        # Keep the memory of earlier readings: a blip must not reset progress tracking.
        prev = self._memory.verdict
        verdict, new_mem = decide(
            self.stage.stage, self.host.name, readings, self.stage.policy, prev, None, run=self._memory.run
        )
        self._memory.verdict = VerdictMemory(
            previous=prev.previous,
            last_progress_at=prev.last_progress_at,
            d_since=prev.d_since,
            gone_since=prev.gone_since,
            done_streak=0,
            state=new_mem.state,
            state_since=new_mem.state_since or time.time(),
        )
        verdict = Verdict(
            stage=verdict.stage,
            state=verdict.state,
            reasons=verdict.reasons,
            readings=verdict.readings,
            checked_at=time.time(),
            host=verdict.host,
            since=self._memory.verdict.state_since,
            run=verdict.run,
        )
        self.last = verdict
        return verdict

    # ------------------------------------------------------------------ waiting

    def watch(
        self,
        *,
        timeout: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Watch:
        """Check every ``policy.interval``; yield each verdict; stop after complete or failed.

        Stops at ``timeout`` (default: the policy's); the returned :class:`Watch` then says
        ``timed_out``. Host errors never end the wait: they are ``unknown`` verdicts, and the
        next check reconnects.

        Example:
            >>> watch = checker.watch(timeout=3600)  # doctest: +SKIP
            >>> for verdict in watch: ...  # doctest: +SKIP
            >>> watch.timed_out  # doctest: +SKIP
        """
        return Watch.of(self.check, self.stage.policy, timeout=timeout, sleep=sleep, clock=clock)

    def close(self) -> None:
        """Release this stage's lease, and close the state store if this Checker opened it
        (given a path or URL as ``state``). Pooled SSH connections are shared between stages:
        the pool closes them."""
        if self._persist is not None:
            self._persist.close()

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _earlier_watch_words(
    verdict: Verdict, streak: int, own: int, stored: Verdict | None, *, latest: bool = False
) -> Verdict:
    """``verdict`` in words that say what of it an earlier watch decided (``stored``: the last
    verdict of the memory this watch went on from, the state store's; ``own``: this watch's
    checks since; ``streak``: the checks every signal said done in a row; ``latest``: this
    watch was told nothing of its run, and goes on with the latest the store knows: how to
    gate a run about to start is said). Only the words change. A wait begun before a re-run
    opened on the last run's ``complete``, "agreed for 3 consecutive checks" of which it made
    1, an old PID the only clue (notes/ml44.md, item 5)."""
    if stored is None or stored.checked_at is None:
        return verdict
    reasons = list(verdict.reasons)
    earlier = streak - own
    agreed = f"agreed for {streak} consecutive checks"
    if earlier > 0 and agreed in reasons:
        reasons[reasons.index(agreed)] = f"{agreed}, {earlier} of them an earlier watch's"
    if stored.state.final and stored.state is verdict.state and reasons:
        at = _dt.datetime.fromtimestamp(stored.checked_at, tz=_dt.UTC).strftime("%H:%M:%S UTC")
        how = "; to gate a run about to start, give its start (--since)" if latest else ""
        reasons.insert(
            1,
            f"decided {stored.state} by an earlier watch at {at}, of the run it saw (its memory, from"
            f" the state store){how}",
        )
    return replace(verdict, reasons=tuple(reasons)) if reasons != list(verdict.reasons) else verdict


def _launch_end(sections: Mapping[str, bytes], run: Run | None, meta: Meta) -> LaunchEnd | None:
    """How the launched job ended, as far as this check found (None: not launched so)."""
    if run is None or not run.exit_file:
        return None
    return read_launch_end(sections, meta.hidden is not None)
