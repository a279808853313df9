"""A launch through a supervisor (docker, systemd, Slurm): the run bound to the record it
created (``Run.supervised``), so that a later container, invocation or job under the same
name is never taken for it. See docs/supervisors.md, "Launching through a supervisor"."""

from __future__ import annotations

from dataclasses import replace

from sensors._config.stage import Stage, stage_from_dict
from sensors._hosts import Host, parsed_supervised_launch, supervised_launch_script
from sensors._run.run import Run


def launch_supervised(stage: Stage, host: Host, mark: Run, log_path: str | None) -> Run:
    """Start the stage's ``launch.command`` through its supervisor on ``host``; the launched
    :class:`Run` (``mark``: the log as it was just before, ``launch_mark_script``'s)."""
    assert stage.launch is not None and stage.supervisor is not None
    sup = stage.supervisor
    script = supervised_launch_script(
        sup.kind,
        sup.docker or sup.systemd,
        stage.launch.command,
        log_path=log_path,
        cwd=stage.launch.cwd,
        user=sup.user,
        bin=sup.bin,
    )
    identity = parsed_supervised_launch(host.run_script(script, timeout=60), host.name)
    # The job runs where its supervisor starts it (a container, a unit), not where the mark ran.
    return replace(mark, source="launch", supervised=identity, pid=None, exit_file=None, pidns=None)


def supervised_stage(stage: Stage, run: Run | None) -> Stage:
    """``stage`` naming the Slurm job a launch created (sbatch gives the ID: the stage file
    cannot name it before); any other stage as it is."""
    if (
        stage.supervisor is None
        or stage.supervisor.slurm is None
        or run is None
        or run.source != "launch"
        or not run.supervised
    ):
        return stage
    job = run.supervised.partition("@")[0]
    if job == stage.supervisor.slurm:
        return stage
    data = stage.model_dump(exclude_none=True)
    data["supervisor"] = {**data["supervisor"], "slurm": job}
    return stage_from_dict(data)
