"""Prefect flows built on :mod:`sensors.prefect`: the gate, and an example pipeline.

``flows.gate.gate`` waits for one stage; ``flows.pipeline`` launches stages and gates them
(``pipeline``, ``start_stage``), raises the stall alert, and runs ``crosscheck demo``.
"""
