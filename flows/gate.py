"""The gate flow: wait until a stage is really finished, then let the pipeline go on.

Deployed from ``deployments/prefect.yaml`` (``entrypoint: sensors.flows.gate``, the flow this
file re-exports) with the stage file path as its parameter; its ``crosscheck.stage.complete``
event is what starts the next stage's deployment, so no worker is held between stages. The
flow is defined in :mod:`sensors.flows`; this file is a copy to read, and the place to start
when writing a gate of your own from the public API:

Example:
    >>> from prefect import flow
    >>> from prefect_crosscheck import wait_for_stage
    >>> @flow
    ... def my_gate(stage: str):
    ...     return wait_for_stage(stage, timeout="12h").to_json()
    >>> gate("/etc/crosscheck/extract.yaml", timeout="12h")  # doctest: +SKIP
    {'stage': 'extract', 'verdict': 'complete', 'advance': True, ...}
"""

from __future__ import annotations

from sensors.flows import gate

__all__ = ["gate"]
