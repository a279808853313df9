"""A check: one probe round trip, each signal's reading, one verdict, and the memory kept.

- :mod:`~sensors._check.checker`: the ``Checker`` (one stage, one host, its memory).
- :mod:`~sensors._check.batch`: one probe for several stages of one host (the watcher's).
- :mod:`~sensors._check.span`: a stage over several hosts, one Checker per host, one verdict.
- :mod:`~sensors._check.sampling`: how many quick checks ``crosscheck status`` takes.
- :mod:`~sensors._check.codec`: a Checker's memory as JSON text and back (what a store keeps).
- :mod:`~sensors._check.launch`: a launch through a supervisor, bound to the record it made.
- :mod:`~sensors._check.persist`: that memory in the durable store, keyed by stage, host, run
  and the definition's fingerprint.

May import :mod:`sensors._base`, :mod:`sensors._run`, :mod:`sensors._config`,
:mod:`sensors._hosts`, :mod:`sensors._signals`, :mod:`sensors._verdict` and
:mod:`sensors._store`.
"""
