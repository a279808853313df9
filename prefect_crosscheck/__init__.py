"""prefect-crosscheck: Prefect sensors that decide when a long pipeline stage is really finished.

The name Prefect users import and register (``prefect block register -m prefect_crosscheck``).
A thin package: everything here is defined in :mod:`sensors` (the library) and re-exported —
the core (:class:`Checker`, :func:`load_stage`, the verdict and its exceptions), the blocks
(:mod:`prefect_crosscheck.blocks`), the tasks (:mod:`prefect_crosscheck.tasks`) and the flows
(:mod:`prefect_crosscheck.flows`).

Example:
    >>> from prefect import flow
    >>> from prefect_crosscheck import wait_for_stage
    >>> @flow
    ... def pipeline():
    ...     wait_for_stage("stages/extract.yaml", timeout="12h")  # every signal agrees, or raise
    ...     train()
"""

from prefect_crosscheck.blocks import CrosscheckNotifications, CrosscheckSSHHost, CrosscheckStage
from prefect_crosscheck.flows import gate, pipeline, stall_alert, start_stage
from prefect_crosscheck.tasks import check_stage, wait_for_stage
from sensors import (
    Checker,
    ConfigError,
    ConnectError,
    CrosscheckError,
    Host,
    HostError,
    HostKeyError,
    LocalHost,
    NotificationError,
    ProbeError,
    Reading,
    Says,
    SpanChecker,
    Stage,
    StageFailed,
    StageStuck,
    State,
    Verdict,
    __version__,
    checker_for,
    host_for,
    load_stage,
    parse_duration,
    stage_from_dict,
)

__all__ = [
    "Checker",
    "ConfigError",
    "ConnectError",
    "CrosscheckError",
    "CrosscheckNotifications",
    "CrosscheckSSHHost",
    "CrosscheckStage",
    "Host",
    "HostError",
    "HostKeyError",
    "LocalHost",
    "NotificationError",
    "ProbeError",
    "Reading",
    "Says",
    "SpanChecker",
    "Stage",
    "StageFailed",
    "StageStuck",
    "State",
    "Verdict",
    "__version__",
    "check_stage",
    "checker_for",
    "gate",
    "host_for",
    "load_stage",
    "parse_duration",
    "pipeline",
    "stage_from_dict",
    "stall_alert",
    "start_stage",
    "wait_for_stage",
]
