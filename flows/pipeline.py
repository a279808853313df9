"""The example pipeline: extraction → gate → training, and the flows the deployments chain.

``pipeline`` launches each stage (its stage file's ``launch:`` section) detached on the
stage's host, gates it, and starts the next only after a ``complete`` verdict;
``start_stage`` is what the ``crosscheck.stage.complete`` trigger runs, ``stall_alert`` what
the no-heartbeat automation runs. They are defined in :mod:`sensors.flows`, and
``deployments/prefect.yaml``'s entrypoints are the installed ``sensors.flows.start_stage`` and
``sensors.flows.stall_alert``; this file re-exports them, a copy to read. ``crosscheck demo``
runs ``pipeline`` on this machine with simulated jobs (so does ``python -m flows.pipeline
[WORKDIR]``).

Example:
    >>> pipeline("stages/extract.yaml", "stages/train.yaml")  # doctest: +SKIP
"""

from __future__ import annotations

import runpy
import sys

from sensors.flows import launch_stage, pipeline, stall_alert, start_stage, with_pid

__all__ = ["launch_stage", "pipeline", "stall_alert", "start_stage", "with_pid"]

if __name__ == "__main__":
    # The same as `crosscheck demo [--workdir WORKDIR]` (python -m sensors is the CLI).
    sys.argv = ["crosscheck", "demo", *(["--workdir", sys.argv[1]] if len(sys.argv) > 1 else [])]
    runpy.run_module("sensors", run_name="__main__")
