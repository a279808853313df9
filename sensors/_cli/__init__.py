"""The ``crosscheck`` command (the console script is ``sensors._cli:main``).

- :mod:`~sensors._cli.main`: the parser and the subcommands (``status``, ``wait``, ``serve``,
  ``history``, ``schema``, ``demo``, ...).
- :mod:`~sensors._cli.validate`: ``crosscheck validate``: what a stage file will do.
- :mod:`~sensors._cli.nagios`: ``crosscheck check``: a verdict as a Nagios/Icinga check.
- :mod:`~sensors._cli.completion`: ``crosscheck completion bash|zsh``.

May import every core layer; the Prefect layer (``sensors.blocks``, the demo) only inside a
function, when a command asks for it.
"""

from __future__ import annotations

from sensors._cli.main import main

__all__ = ["main"]
