"""The ``crosscheck`` command (the console script is ``sensors._cli:main``).

- :mod:`~sensors._cli.main`: the parser and the subcommands (``status``, ``wait``, ``serve``,
  ``history``, ``schema``, ``demo``, ...).
- :mod:`~sensors._cli.init`: ``crosscheck init``: a stage file drafted from a running job.
- :mod:`~sensors._cli.validate`: ``crosscheck validate``: what a stage file will do.
- :mod:`~sensors._cli.nagios`: ``crosscheck check``: a verdict as a Nagios/Icinga check.
- :mod:`~sensors._cli.completion`: ``crosscheck completion bash|zsh``.

May import :mod:`sensors._base`, :mod:`sensors._run`, :mod:`sensors._config`,
:mod:`sensors._check`, :mod:`sensors._present`, :mod:`sensors._watch` and
:mod:`sensors._version`; only inside a function, when a command asks for it:
:mod:`sensors._hosts` (SSH routes), :mod:`sensors._draft` (init's survey),
:mod:`sensors._store`, :mod:`sensors._notify` and the
Prefect layer (:mod:`sensors._prefect`'s demo, :mod:`sensors.blocks`).
"""

from __future__ import annotations

from sensors._cli.main import main

__all__ = ["main"]
