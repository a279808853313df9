"""The Checker: one stage, one host, a memory of earlier checks, one verdict per check."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sensors._config import Stage
from sensors._errors import HostError, HostKeyError
from sensors._hosts import Host, LocalHost
from sensors._model import Reading, Says, Verdict
from sensors._probe import (
    Meta,
    ProbeState,
    build_script,
    new_nonce,
    parse_meta,
    split_sections,
)
from sensors._run import Run, Since, parse_since
from sensors._signals import (
    LogMemory,
    OutputsMemory,
    ProcessMemory,
    read_log,
    read_outputs,
    read_process,
    seed_log_memory,
)
from sensors._verdict import VerdictMemory, decide

_LOCAL = LocalHost()


def host_for(stage: Stage) -> Host:
    """The host a stage lives on; SSH hosts are pooled, one connection per (user, host, port)."""
    if stage.host == "local":
        return _LOCAL
    from sensors._hosts import ssh  # paramiko only when a stage needs it

    return ssh.get_host(stage.host)


@dataclass
class _Memory:
    process: ProcessMemory | None = None
    log: LogMemory | None = None
    outputs: OutputsMemory | None = None
    gpu: object | None = None
    verdict: VerdictMemory = field(default_factory=VerdictMemory)
    job_pids: tuple[int, ...] = ()
    static: Meta | None = None  # clock tick rate, hostname, lxcfs: read once per boot
    run: Run | None = None  # where the run being watched begins (launch, since, process)
    first_check_at: float | None = None  # the host's clock at this watch's first check


class Checker:
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
    ) -> None:
        """
        Args:
            stage: what to watch.
            host: where (default: the stage's host; SSH connections are pooled).
            exclude_pids: PIDs never matched as the job (default: this process, locally).
            since: when the run began (``2h``, an ISO time, epoch seconds): evidence from
                before it is an earlier run's. See the README, "What ties evidence to a run".
            run: the run as crosscheck launched it (``launch_stage`` records one).
        """
        self.stage = stage
        self.host = host if host is not None else host_for(stage)
        self.timed_out = False
        self.last: Verdict | None = None
        self._memory = _Memory(run=run)
        if run is not None and stage.log is not None:
            self._memory.log = seed_log_memory(run)
        try:
            self._since = parse_since(since)
        except ValueError as exc:
            from sensors._errors import ConfigError

            raise ConfigError(str(exc), field="since") from None
        self._lock = threading.Lock()
        # Never match ourselves: on the local host, crosscheck's own process (and its
        # ancestors, found by the probe) are excluded from process matching.
        self._exclude = (
            exclude_pids
            if exclude_pids is not None
            else (frozenset({os.getpid()}) if isinstance(self.host, LocalHost) else frozenset())
        )

    # ------------------------------------------------------------------ one check

    def check(self) -> Verdict:
        """One check: read every signal in one round trip, decide, remember.

        Host failures (connection refused, timeout, garbled answer) never raise: every
        reading is ``unknown`` with the error as evidence. Only :class:`HostKeyError` is
        raised: an unverifiable host key needs a person, not a retry.
        """
        with self._lock:
            return self._check()

    def _check(self) -> Verdict:
        stage, mem = self.stage, self._memory
        nonce = new_nonce()
        extra = self._gpu_sections()
        outputs_mem = mem.outputs or OutputsMemory()
        log_mem = mem.log or LogMemory()
        static = mem.static
        probe_state = ProbeState(
            pids=mem.job_pids,
            lines_inode=outputs_mem.lines_inode,
            lines_size=outputs_mem.lines_size,
            # The in-place-write check stats every entry (O(n)): only worth it when outputs
            # may decide completion — count at the expected number and the job not alive
            # (while it runs the verdict is running anyway, e.g. a long CPU phase after
            # the last output).
            outputs_since=(
                outputs_mem.checked_at
                if stage.outputs and (outputs_mem.count or 0) >= stage.outputs.expected and not mem.job_pids
                else None
            ),
            outputs_run_since=self._outputs_run_since(outputs_mem),
            lines_fingerprint=outputs_mem.lines_fingerprint,
            log_inode=log_mem.inode,
            log_size=log_mem.size,
            clk_tck=static.clk_tck if static else None,
            hostname=static.hostname if static else None,
            uptime_virtualised=static.uptime_virtualised if static else False,
        )
        script = build_script(stage, nonce, probe_state, extra)
        timeout = stage.host.check_timeout if stage.host != "local" else 60.0
        try:
            output = self.host.run_script(script, timeout=timeout)
        except HostKeyError:
            # Not transient and not "unknown": a host whose key does not verify is never
            # asked again until a person decides to trust it.
            raise
        except HostError as exc:
            return self._host_failed(exc)
        sections = split_sections(output, nonce)
        meta = parse_meta(sections.get("meta"), probe_state)
        if "end" not in sections or meta.now is None:
            return self._host_failed(
                HostError("the probe's answer was cut short or garbled", host=self.host.name)
            )
        if static is not None and meta.boot_id != static.boot_id:
            # Rebooted: what was static may not be any more (read again next check).
            mem.static = None
        elif meta.clk_tck:
            mem.static = meta
        if mem.first_check_at is None:
            mem.first_check_at = meta.now
        if mem.run is None and self._since is not None:
            mem.run = Run(source="since", started_at=self._since.resolve(meta.now))
        readings: dict[str, Reading] = {}
        job_pids: frozenset[int] | None = None
        host = self.host.name
        if stage.process:
            r, mem.process, job_pids = read_process(
                stage.process,
                sections,
                meta,
                mem.process,
                host=host,
                nonce=nonce,
                exclude_pids=self._exclude,
                launched_pid=mem.run.pid if mem.run is not None else None,
            )
            readings["process"] = r
            mem.job_pids = tuple(sorted(job_pids))[:64]
            started = r.evidence.get("started_at")
            if mem.run is None and r.says is Says.WORKING and isinstance(started, (int, float)):
                # First seen alive: its start is where this run begins.
                mem.run = Run(source="process", started_at=float(started))
        if stage.log:
            readings["log"], mem.log = read_log(stage.log, sections, meta, mem.log, host=host, run=mem.run)
        if stage.outputs:
            readings["outputs"], mem.outputs = read_outputs(
                stage.outputs, sections, meta, mem.outputs, host=host, run_since=self._run_start()
            )
        if stage.gpu:
            readings["gpu"] = self._read_gpu(sections, meta, job_pids)
        verdict, mem.verdict = decide(
            stage.stage, host, readings, stage.policy, mem.verdict, meta.now, run=mem.run
        )
        self.last = verdict
        return verdict

    @property
    def run(self) -> Run | None:
        """Where the run being watched begins, once known (launch, ``since``, or the job's
        process first seen alive)."""
        return self._memory.run

    def _run_start(self) -> float | None:
        """When this run began, or else this watch's first check (host clock)."""
        mem = self._memory
        if mem.run is not None and mem.run.started_at is not None:
            return mem.run.started_at
        return mem.first_check_at

    def _outputs_run_since(self, outputs: OutputsMemory) -> float | None:
        """Ask the probe for an output written during the run only when nothing else can tie
        the outputs to it (no log, no process signal) and they could decide completion."""
        stage = self.stage
        if stage.log or stage.process or not stage.outputs or not stage.outputs.files:
            return None
        if outputs.written_this_run or (outputs.count or 0) < stage.outputs.expected:
            return None
        return self._run_start()

    def _host_failed(self, exc: HostError) -> Verdict:
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

    # ------------------------------------------------------------------ gpu seam

    def _gpu_sections(self) -> dict[str, str]:
        if not self.stage.gpu or self.host.nvml:
            return {}
        from sensors import _gpu

        return dict(_gpu.remote_sections(self.stage.gpu))

    def _read_gpu(self, sections: dict[str, bytes], meta: Meta, job_pids: frozenset[int] | None) -> Reading:
        assert self.stage.gpu is not None
        from sensors import _gpu

        return _gpu.read_for_checker(self, sections, meta, job_pids)

    # ------------------------------------------------------------------ waiting

    def watch(
        self,
        *,
        timeout: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Iterator[Verdict]:
        """Check every ``policy.interval``; yield each verdict; stop after complete or failed.

        Stops at ``timeout`` (default: the policy's) with ``self.timed_out`` set. Host errors
        never end the wait: they are ``unknown`` verdicts, and the next check reconnects.
        """
        limit = self.stage.policy.timeout if timeout is None else timeout
        deadline = clock() + limit
        self.timed_out = False
        while True:
            started = clock()
            verdict = self.check()
            yield verdict
            if verdict.state.value in ("complete", "failed"):
                return
            remaining = deadline - clock()
            if remaining <= 0:
                self.timed_out = True
                return
            pause = max(0.0, self.stage.policy.interval - (clock() - started))
            sleep(min(pause, remaining))

    def close(self) -> None:
        # Pooled SSH connections are shared between stages: the pool closes them.
        pass

    def __enter__(self) -> Checker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
