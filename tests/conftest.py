"""Shared fixtures. Prefect is quiet and local in every test process."""

from __future__ import annotations

import os

os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "CRITICAL")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import pytest

from sensors import LocalHost


@pytest.fixture(params=["local"])
def host(request):
    """The monitored host. The SSH suite adds an ``ssh`` parameter (see tests/sshd.py)."""
    if request.param == "local":
        return LocalHost()
    raise NotImplementedError(request.param)
