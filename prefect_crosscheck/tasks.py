"""The Prefect tasks that gate a pipeline on a verdict (defined in :mod:`sensors.prefect`).

- :func:`wait_for_stage`: check every ``policy.interval`` until every signal agrees the stage
  is complete (returns the verdict), it failed (raises ``StageFailed`` with the evidence), or
  the timeout passes.
- :func:`check_stage`: one check, the verdict as a value.
"""

from sensors.prefect import check_stage, wait_for_stage

__all__ = ["check_stage", "wait_for_stage"]
