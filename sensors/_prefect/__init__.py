"""The Prefect layer under the public ``sensors.prefect``, ``sensors.flows`` and ``sensors.blocks``.

- :mod:`~sensors._prefect.gate`: ``GateReport``: what a gate shows while it waits (the live
  artifact, the picture, events, the run log) and announces once when it ends.
- :mod:`~sensors._prefect.suspend`: a gate that hands its stage to the watcher and suspends.
- :mod:`~sensors._prefect.bridge`: the watcher's side: resume a suspended gate with its outcome.
- :mod:`~sensors._prefect.artifacts`: artifact keys and the evidence markdown.
- :mod:`~sensors._prefect.compat`: what differs between the Prefect versions we support.
- :mod:`~sensors._prefect.demo`: ``make demo``'s two-stage pipeline.

The only place (with the public modules above it) that imports Prefect at module level; the
core never imports anything from here except inside a function. May import any layer.
"""
