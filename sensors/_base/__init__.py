"""The ground every other layer stands on. May import nothing else of ``sensors``.

- :mod:`~sensors._base.model`: readings and verdicts, small frozen values (``Reading``,
  ``Says``, ``State``, ``Verdict``).
- :mod:`~sensors._base.errors`: the one exception tree (``CrosscheckError`` and below).
- :mod:`~sensors._base.text`: job text as data (redaction, inert text per medium).
- :mod:`~sensors._base.regex`: user regexes in linear time (RE2, a bounded fallback).
- :mod:`~sensors._base.schema`: the value types of a stage file (durations, regexes, paths).
- :mod:`~sensors._base.secrets`: ``env:``/``block:`` secret references.
- :mod:`~sensors._base.probe`: the probe's frame: the POSIX sh helpers, the host's clocks and
  the tagged sections every signal's snippet writes into.
- :mod:`~sensors._base.tolerances`: every tolerance run binding uses, with its unit and source
  (one table; plain figures, so the ground holds it and every layer reads it).
- :mod:`~sensors._base.output`: the command's standard streams, safe for pipes that close.
- :mod:`~sensors._base.started`: when the package was first imported (a command's start).
- :mod:`~sensors._base.trust`: trust on disk, as OpenSSH's StrictModes (an exit record, a
  state store no other user can have written).
"""
