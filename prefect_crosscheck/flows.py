"""The deployable flows (defined in :mod:`sensors.flows`): the gate, the example pipeline,
starting a stage, the stall alert.

A deployment may name them here (``entrypoint: prefect_crosscheck.flows.gate``) or where
they are defined (``sensors.flows.gate``): the same flow objects.
"""

from sensors.flows import gate, launch_stage, pipeline, stall_alert, start_stage, with_pid

__all__ = ["gate", "launch_stage", "pipeline", "stall_alert", "start_stage", "with_pid"]
