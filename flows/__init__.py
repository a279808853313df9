"""Prefect flows built on :mod:`sensors.prefect`: the gate, and an example pipeline.

``flows.gate.gate`` waits for one stage; ``flows.pipeline`` launches stages and gates them
(``pipeline``, ``start_stage``) and raises the stall alert. Both re-export the flows defined in
:mod:`sensors.flows`, as files to read and copy; ``deployments/prefect.yaml``'s entrypoints are
the installed ``sensors.flows.gate``, ``sensors.flows.start_stage`` and ``sensors.flows.stall_alert``.
"""
