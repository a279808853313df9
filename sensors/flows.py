"""The deployable flows: the gate, the example pipeline, starting a stage, the stall alert.

The Prefect layer's flows, built on the tasks in :mod:`sensors.prefect`. The deployments
import them from here (``entrypoint: sensors.flows.gate``, ``sensors.flows.start_stage``,
``sensors.flows.stall_alert`` in ``deployments/prefect.yaml``), so a worker needs only the
installed package; ``flows/gate.py`` and ``flows/pipeline.py`` at the repository root
re-export them as files a user reads and copies. The library itself never imports ``flows``.

- :func:`gate` waits until a stage is really finished; its ``crosscheck.stage.complete``
  event is what starts the next stage's deployment, so no worker is held between stages.
- :func:`pipeline`: extraction → gate → training, each stage launched from its stage file's
  ``launch:`` section; only a ``complete`` verdict launches the next (docs/prefect.md).
- :func:`start_stage` launches (and gates) one stage: what the completion trigger runs.
- :func:`stall_alert` fails loudly when a gate stops sending heartbeats.

Example:
    >>> pipeline("stages/extract.yaml", "stages/train.yaml")  # doctest: +SKIP
"""

# No `from __future__ import annotations` here: Prefect before 3.6 builds a flow's parameter
# model from its annotations as they are, and a string ("Stage | str") it cannot resolve
# fails every run ("GateModel is not fully defined"); later releases resolve them.

import time
import uuid
from collections.abc import Callable
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact

from sensors._base.errors import ConfigError
from sensors._base.model import Says
from sensors._check.checker import Checker, host_for
from sensors._check.launch import launch_supervised, supervised_stage
from sensors._check.persist import Persistence
from sensors._config.stage import Stage, parse_duration, stage_from_dict
from sensors._prefect.compat import NO_CACHE
from sensors._prefect.suspend import can_hand_off, handed_off_launch, reference_of, wait_handed_off
from sensors._run.run import Run, launch_mark_script, launch_record, parse_launch_mark, run_from_record
from sensors.prefect import (
    artifact_key,
    as_stage,
    opened_store,
    run_slug,
    stage_label,
    state_store,
    task_run_name,
    wait_for_stage,
)

__all__ = ["gate", "launch_stage", "pipeline", "stall_alert", "start_stage", "with_pid"]


def _named(template: str, *params: str) -> Callable[[], str]:
    """A flow-run name from the run's stage parameters, e.g. ``gate-extract``: the runs list
    reads as the pipeline, not as random adjectives."""

    def name() -> str:
        from prefect.runtime import flow_run

        values = flow_run.parameters
        return template.format(*(stage_label(values.get(p)) for p in params))

    return name


def _rename(template: str, *stages: Stage) -> None:
    """Name the flow run after its stages' own names once they are loaded, where the name it
    started with differs (a block named otherwise than its stage, a file unreadable at the
    start): one name per stage, the one its events and artifacts carry. A rename that
    fails is logged; the run goes on."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    name = template.format(*(s.stage for s in stages))
    flow_run_id = flow_run.get_id()
    if not flow_run_id or flow_run.get_name() == name:
        return
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(uuid.UUID(flow_run_id), name=name)
    except Exception as exc:
        get_run_logger().warning("could not name this flow run %s: %s", name, exc)


@flow(name="crosscheck-gate", flow_run_name=_named("gate-{}", "stage"), log_prints=False)
def gate(
    stage: Stage | str,
    timeout: float | str | None = None,
    since: str | float | None = None,
    state: str | None = None,
    hand_off: bool | None = None,
) -> dict[str, Any]:
    """Wait until every signal of ``stage`` agrees it is complete; fail with the evidence.

    Args:
        stage: path to a YAML stage file (as a deployment parameter), or a ``Stage``.
        timeout: seconds or a duration (``"12h"``); default: the stage's ``policy.timeout``.
        since: when the run began (``"2h"``, an ISO time): evidence from before it is an
            earlier run's. Without it, the run is the job first seen alive by this gate.
        state: the state store (a SQLite path or a ``postgresql://`` URL; default
            ``$CROSSCHECK_STATE``, else ``$XDG_STATE_HOME/crosscheck/state.db``). A gate run
            again on a run the store knows as complete returns at once, announcing nothing.
        hand_off: hand the stage to ``crosscheck serve`` and suspend, so that no worker is
            held while it runs (see :mod:`sensors._prefect.suspend`). Default (None): when the flow
            run has a deployment and a watcher serves the state store; False: wait in the
            worker; True: hand off even if no watcher is alive yet.

    Returns:
        The complete verdict as the CLI's JSON document.

    Raises:
        StageFailed: the stage failed or the timeout passed; the message holds the evidence.

    Example:
        >>> gate("/etc/crosscheck/extract.yaml", timeout="12h")  # doctest: +SKIP
        {'stage': 'extract', 'verdict': 'complete', 'advance': True, ...}
    """
    spec = as_stage(stage)
    _rename("gate-{}", spec)
    return _wait(
        spec,
        reference=reference_of(stage),
        timeout=timeout,
        since=since,
        state=state,
        run=None,
        hand_off=hand_off,
    )


def _wait(
    stage: Stage,
    *,
    reference: str | None,
    timeout: float | str | None,
    since: str | float | None,
    state: str | None,
    run: dict[str, Any] | None,
    hand_off: bool | None,
) -> dict[str, Any]:
    """Gate ``stage``: handed to the watcher (the flow run suspends), or waiting here."""
    limit = stage.policy.timeout if timeout is None else parse_duration(timeout)
    with opened_store(state) as store:
        handing = can_hand_off(hand_off, stage, reference, store, get_run_logger())
    if handing:
        return wait_handed_off(stage, reference=reference, timeout=limit, since=since, run=run, state=state)
    return wait_for_stage(stage, timeout=limit, since=since, run=run, state=state).to_json()


@task(cache_policy=NO_CACHE, task_run_name=task_run_name("launch"))
def launch_stage(stage: Stage, force: bool = False, state: str | None = None) -> dict[str, Any]:
    """Start the stage's ``launch`` command detached on its host; record PID and log path.

    A run of this stage that crosscheck launched and that still runs (the state store keeps
    its record) is not started a second time: its record is returned, with
    ``"existing": True``, unless ``force``. Nor is one started beside a copy of the job that
    runs without such a record (started by hand, or by another store's launch: the stage's
    ``process`` section finds it): that raises :class:`ConfigError`, unless ``force``.

    Args:
        stage: the stage; needs a ``launch`` section.
        force: start a new copy even when the recorded one, or an unrecorded copy, still runs.
        state: the state store (default ``$CROSSCHECK_STATE``, else the default file).

    Returns:
        ``{"stage", "host", "pid", "log", "command", "cwd", "exit_file", "run"}`` (``pid``: the
        launch wrapper's; ``exit_file``: where it records the job's exit status on the host).
    """
    if stage.launch is None:
        raise ConfigError("no launch section: nothing to start", field=f"{stage.stage}.launch")
    log_path = stage.launch.log or (stage.log.path if stage.log else None)
    if log_path is None:
        raise ConfigError(
            "give launch.log (or a log section): the job's output must go somewhere",
            field=f"{stage.stage}.launch.log",
        )
    host = host_for(stage)
    existing = None if force else _live_launch(stage, host, state)
    if existing is not None:
        get_run_logger().info(
            "%s: already running as PID %d on %s (launched earlier): not started again",
            stage.stage,
            existing["pid"],
            stage.host_name,
        )
        return existing
    if not force:
        _refuse_beside_a_copy(stage, host)
    # Mark where this run begins (the host's clock, the log's inode, size and last bytes)
    # before the job starts: its log lines are exactly those written after the mark.
    mark = parse_launch_mark(host.run_script(launch_mark_script(log_path), timeout=30))
    # Under a wrapper that records the job's exit status on the host: an exit and a kill
    # look alike from /proc, and only this tells a crash from a success for a stage whose
    # other signals cannot.
    if stage.supervisor is not None:
        # Started by its supervisor, which records its end: the run is bound to the record
        # it created (a record of another identity is another run's).
        return _launch_supervised(stage, host, mark, log_path, state)
    name = f"{stage.stage}-{int(mark.started_at or time.time())}-{uuid.uuid4().hex[:8]}"
    pid, exit_file = host.launch(stage.launch.command, log_path=log_path, cwd=stage.launch.cwd, name=name)
    launched = Run(
        source="launch",
        started_at=mark.started_at,
        log_inode=mark.log_inode,
        log_offset=mark.log_offset,
        log_fingerprint=mark.log_fingerprint,
        pid=pid,
        exit_file=exit_file,
        pidns=mark.pidns,
    )
    record = _record(stage, launched, log_path)
    get_run_logger().info("%s: launched on %s as PID %d, log %s", stage.stage, stage.host_name, pid, log_path)
    _remember_launch(stage, host, run_from_record(record), state)
    slug = run_slug({"source": "launch", "started_at": _iso(mark.started_at)})
    create_table_artifact(
        key=artifact_key(stage.stage, "launch", run=slug),
        table=[{k: str(v) for k, v in record.items() if k != "run"}],
        description=f"{stage.stage}: launched as PID {pid} on {stage.host_name}",
    )
    return record


def _record(stage: Stage, run: Run, log_path: str | None) -> dict[str, Any]:
    """The launch record of ``run``, launched by ``stage``'s launch section."""
    assert stage.launch is not None
    return launch_record(
        stage.stage, stage.host_name, run, log=log_path, command=stage.launch.command, cwd=stage.launch.cwd
    )


def _launch_supervised(
    stage: Stage, host: Any, mark: Run, log_path: str, state: str | None
) -> dict[str, Any]:
    assert stage.launch is not None and stage.supervisor is not None
    launched = launch_supervised(stage, host, mark, log_path)
    record = _record(stage, launched, log_path)
    get_run_logger().info(
        "%s: launched on %s through %s as %s",
        stage.stage,
        stage.host_name,
        stage.supervisor.kind,
        launched.supervised,
    )
    store = state_store(state)
    if store is not None:
        with Checker(supervised_stage(stage, launched), host=host, run=launched, state=store) as checker:
            checker.check()
        store.close()
    return record


def _remember_launch(stage: Stage, host: Any, run: Run | None, state: str | None) -> None:
    """One check of the launched job, saved in the state store: the run is on record before
    any gate looks (a second launch of this stage finds it)."""
    store = state_store(state)
    if store is None or run is None or run.pid is None:
        return
    with Checker(with_pid(stage, run.pid), host=host, run=run, state=store) as checker:
        checker.check()
    store.close()


def _live_launch(stage: Stage, host: Any, state: str | None) -> dict[str, Any] | None:
    """The record of this stage's last launched run, if the state store has one and it runs."""
    store = state_store(state)
    if store is None:
        return None
    try:
        run, same_launch = Persistence(store, stage, host.name).stored_run()
    finally:
        store.close()
    if run is None or run.source != "launch" or run.pid is None:
        return None
    # By the launch wrapper's PID, whatever the stage's own process section matches: the
    # wrapper lives as long as the job it waits for, and an anchored match that finds the job
    # but not the wrapper found no live launch here (the adversary's review of 6782ef5: its
    # own run then refused as "a copy without a launch record"). A PID reused since the
    # wrapper ended is told by the exit record the wrapper wrote.
    by_pid = stage_from_dict({**stage.model_dump(exclude_none=True), "process": {"pid": run.pid}})
    with Checker(by_pid, host=host, run=run) as checker:
        process = checker.check().readings.get("process")
    if process is None or process.says is not Says.WORKING or not process.evidence.get("launched"):
        return None
    if not same_launch:
        # Still running, but launched under another launch section (the command edited
        # since): handing its record back under this one would let the gate complete on
        # the other command's exit. Nor is a second job started beside it.
        raise ConfigError(
            f"the last launch of {stage.stage} (PID {run.pid} on {stage.host_name}) still runs, but"
            " was launched under another launch section: stop it, or wait for it, before"
            " launching this one (force=True starts this one beside it)",
            field=f"{stage.stage}.launch",
        )
    assert stage.launch is not None
    record = _record(stage, run, stage.launch.log or (stage.log.path if stage.log else None))
    return {**record, "existing": True}


def _refuse_beside_a_copy(stage: Stage, host: Any) -> None:
    """Raise if the stage's process section finds its job alive now (one check, no run).

    A launch takes the log written after its mark for its own run's. A copy already at work
    that writes its completion line there after the mark is indistinguishable from the
    launched job's once it has exited: the gate would open on the other run's line
    (docs/run-binding.md, "What is not told apart"). An unknown reading lets the launch go
    on: nothing was read against it. That includes one that names a process whose command
    line was not read whole: any process on the host with a command line over the probe's
    limit makes the reading unknown, and refusing there refused a pipeline's launch beside an
    unrelated one (tests/test_deployments_e2e.py, beside tests/test_adversary_s19.py's 2.5 MB
    command line); a copy of the job with such a command line is not refused (a strict xfail
    there)."""
    if stage.process is None or stage.process.supervised:
        return
    with Checker(stage, host=host) as checker:
        process = checker.check().readings.get("process")
    if process is None or process.says is not Says.WORKING:
        return
    ev = process.evidence
    alive = ev.get("alive") or 1
    more = f" and {alive - 1} more" if alive > 1 else ""
    raise ConfigError(
        f"{stage.stage} already runs on {stage.host_name} (PID {ev.get('pid')}{more}, found by its"
        " process section), and no launch crosscheck recorded for it still runs: stop it, or"
        " wait for it, before launching. Launched beside it, its lines in the log could be read"
        " as the new run's (force=True launches anyway)",
        field=f"{stage.stage}.launch",
    )


def _iso(epoch: float | None) -> str | None:
    # The run's start as the verdict's JSON writes it, so both key the same run.
    return Run(source="launch", started_at=epoch).to_json()["started_at"] if epoch is not None else None


def with_pid(stage: Stage, pid: int) -> Stage:
    """The stage watching ``pid`` when it names no process of its own.

    A stage that has a ``process`` section keeps it: a ``match`` regex also verifies the
    command line (paths, flags), which a bare PID cannot.

    Example:
        >>> with_pid(stage, 4455).process.pid  # doctest: +SKIP
        4455
    """
    if stage.process is not None:
        return stage
    return stage_from_dict({**stage.model_dump(exclude_none=True), "process": {"pid": pid}})


def _launch_and_wait(
    stage: Stage, *, wait: bool, timeout: float | str | None, hand_off: bool | None = None
) -> dict[str, Any]:
    # A flow run resumed after handing this stage off runs its body again: the job it
    # launched then is the one to wait for, not a second copy.
    launched = handed_off_launch(stage, None) if hand_off is not False else None
    if launched is None and stage.launch is not None:
        launched = launch_stage(stage)
    result: dict[str, Any] = {"stage": stage.stage, "launched": launched, "verdict": None}
    if wait:
        gated = with_pid(stage, launched["pid"]) if launched and launched.get("pid") else stage
        result["verdict"] = _wait(
            gated,
            reference=None,
            timeout=timeout,
            since=None,
            state=None,
            run=launched or None,
            hand_off=hand_off,
        )
    return result


@flow(
    name="crosscheck-pipeline",
    flow_run_name=_named("pipeline-{}-then-{}", "extraction", "training"),
    log_prints=False,
)
def pipeline(
    extraction: Stage | str,
    training: Stage | str,
    timeout: float | str | None = None,
    wait_for_training: bool = True,
    hand_off: bool | None = None,
) -> dict[str, Any]:
    """extraction → gate → training: training starts only after a ``complete`` verdict.

    Args:
        extraction: the first stage (file path or Stage). With a ``launch`` section it is
            started here; without one the gate watches a job that is already running.
        training: the stage started once extraction is complete (needs ``launch``).
        timeout: the gate's timeout (default: the stage's ``policy.timeout``).
        wait_for_training: also gate training (the flow ends when training is complete).
        hand_off: as for :func:`gate`: each wait hands its stage to ``crosscheck serve``.

    Raises:
        StageFailed: a stage failed or its gate timed out; the message holds the evidence.
    """
    first = as_stage(extraction)
    second = as_stage(training)
    _rename("pipeline-{}-then-{}", first, second)
    if second.launch is None:
        raise ConfigError("the training stage needs a launch section", field="training.launch")
    upstream = _launch_and_wait(first, wait=True, timeout=timeout, hand_off=hand_off)
    downstream = _launch_and_wait(second, wait=wait_for_training, timeout=timeout, hand_off=hand_off)
    return {"extraction": upstream, "training": downstream}


@flow(name="crosscheck-start-stage", flow_run_name=_named("start-{}", "stage"), log_prints=False)
def start_stage(
    stage: Stage | str,
    after: str | None = None,
    wait: bool = True,
    timeout: float | str | None = None,
    hand_off: bool | None = None,
) -> dict[str, Any]:
    """Launch one stage (and gate it): what the ``crosscheck.stage.complete`` trigger runs.

    Args:
        stage: the stage to start (file path or Stage); needs a ``launch`` section.
        after: the upstream stage whose completion started this run (for the record).
        wait: gate the launched stage too.
        timeout: the gate's timeout (default: the stage's ``policy.timeout``).
        hand_off: as for :func:`gate`.
    """
    spec = as_stage(stage)
    _rename("start-{}", spec)
    if spec.launch is None:
        raise ConfigError("no launch section: nothing to start", field=f"{spec.stage}.launch")
    if after:
        get_run_logger().info("%s: starting because %s is complete", spec.stage, after)
    return _launch_and_wait(spec, wait=wait, timeout=timeout, hand_off=hand_off)


@flow(name="crosscheck-stall-alert", flow_run_name=_named("no-heartbeat-{}", "stage_name"), log_prints=False)
def stall_alert(stage_name: str, last_verdict: str | None = None) -> None:
    """Run by the proactive automation when a stage's gate stops sending heartbeats.

    The gate itself is gone or hung (its worker died, the flow was cancelled): nobody is
    watching the stage any more. This flow fails so that the alert is visible in the UI and
    reaches whatever notifications are set on failed flow runs.
    """
    message = (
        f"{stage_name}: no crosscheck heartbeat within the expected window "
        f"(last verdict: {last_verdict or 'unknown'}); is its gate still running?"
    )
    get_run_logger().error(message)
    raise RuntimeError(message)
