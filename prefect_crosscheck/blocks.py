"""The Prefect blocks: a stage, an SSH host, notification settings (defined in :mod:`sensors.blocks`).

Registered once per server with ``prefect block register -m prefect_crosscheck``; this module
is also the package's ``prefect.collections`` entry point, so Prefect finds the block types
when a document of one is loaded.
"""

from sensors.blocks import (
    CrosscheckNotifications,
    CrosscheckSSHHost,
    CrosscheckStage,
    is_block_ref,
    load_stage_block,
)

__all__ = [
    "CrosscheckNotifications",
    "CrosscheckSSHHost",
    "CrosscheckStage",
    "is_block_ref",
    "load_stage_block",
]
