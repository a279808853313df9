"""crosscheck: decide when a long pipeline stage is really finished.

Four independent signals — process, log, outputs, GPU — read locally or over SSH in one round
trip per check, and one verdict with its evidence: complete, running, stalled, failed,
contradiction or unknown. ``complete`` only when every configured signal agrees.

Example:
    >>> from sensors import Checker, load_stage
    >>> with Checker(load_stage("extract.yaml")) as checker:  # doctest: +SKIP
    ...     verdict = checker.check()
    >>> verdict.advance  # doctest: +SKIP
    False

Prefect tasks live in :mod:`sensors.prefect` (imported only when you ask for it); test
helpers in :mod:`sensors.testing`.
"""

from sensors._base import started as _started  # noqa: F401 (first: the time of this import)
from sensors._base.errors import (
    ConfigError,
    ConnectError,
    CrosscheckError,
    HostError,
    HostKeyError,
    NotificationError,
    ProbeError,
    StageFailed,
    StageStuck,
)
from sensors._base.model import Reading, Says, State, Verdict
from sensors._check.checker import Checker, host_for
from sensors._check.span import SpanChecker, checker_for
from sensors._config.stage import Stage, load_stage, parse_duration, stage_from_dict
from sensors._hosts import Host, LocalHost
from sensors._version import __version__

__all__ = [
    "Checker",
    "ConfigError",
    "ConnectError",
    "CrosscheckError",
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
    "checker_for",
    "host_for",
    "load_stage",
    "parse_duration",
    "stage_from_dict",
]
