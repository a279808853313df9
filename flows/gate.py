"""The gate flow: wait until a stage is really finished, then let the pipeline go on.

Deployed from ``deployments/prefect.yaml`` with the stage file path as its parameter; its
``crosscheck.stage.complete`` event is what starts the next stage's deployment, so no worker
is held between stages.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from sensors._config import Stage
from sensors.prefect import as_stage, wait_for_stage


def _run_name() -> str:
    from prefect.runtime import flow_run

    stage = flow_run.parameters.get("stage")
    if isinstance(stage, Stage):
        return f"gate-{stage.stage}"
    if isinstance(stage, dict) and "stage" in stage:
        return f"gate-{stage['stage']}"
    # A path: the file's stem is what people call the stage; loading it here would turn a
    # bad file into a naming error instead of a flow failure with the real message.
    return f"gate-{str(stage).rsplit('/', 1)[-1].rsplit('.', 1)[0]}"


@flow(name="crosscheck-gate", flow_run_name=_run_name, log_prints=False)
def gate(
    stage: Stage | str, timeout: float | str | None = None, since: str | float | None = None
) -> dict[str, Any]:
    """Wait until every signal of ``stage`` agrees it is complete; fail with the evidence.

    Args:
        stage: path to a YAML stage file (as a deployment parameter), or a ``Stage``.
        timeout: seconds or a duration (``"12h"``); default: the stage's ``policy.timeout``.
        since: when the run began (``"2h"``, an ISO time): evidence from before it is an
            earlier run's. Without it, the run is the job first seen alive by this gate.

    Returns:
        The complete verdict as the CLI's JSON document.

    Raises:
        StageFailed: the stage failed or the timeout passed; the message holds the evidence.

    Example:
        >>> gate("/etc/crosscheck/extract.yaml", timeout="12h")  # doctest: +SKIP
        {'stage': 'extract', 'verdict': 'complete', 'advance': True, ...}
    """
    return wait_for_stage(as_stage(stage), timeout=timeout, since=since).to_json()
