"""What differs between the Prefect releases crosscheck supports, in one place.

pyproject.toml's range (``prefect>=3.1.12,<4``) is tested at both ends by ``make test-compat``:
the oldest pinned by constraints/oldest.txt, the newest resolved anew into ``.venv-newest`` on
each run. Names a later release added are imported here with the older spelling, or a
stand-in, behind them:

- ``NO_CACHE`` (3.1.x): the same policy as ``NONE``, which every 3.x has.
- ``EventTooLarge`` (3.6): before it, no event's size is checked before it is sent, so
  nothing raises it.
"""

from __future__ import annotations

try:
    from prefect.cache_policies import NO_CACHE
except ImportError:  # Prefect before 3.1.x
    from prefect.cache_policies import NONE as NO_CACHE

try:
    from prefect.exceptions import EventTooLarge
except ImportError:  # Prefect before 3.6

    class EventTooLarge(Exception):  # type: ignore[no-redef]
        """Never raised: this Prefect checks no event's size before sending it."""


__all__ = ["NO_CACHE", "EventTooLarge"]
