"""The watcher behind ``crosscheck serve`` (and ``wait`` over many stages).

- :mod:`~sensors._watch.watcher`: ``Watcher``: stage files from a directory, leases on the
  store, notifications, events and the gates' outcomes, once each.
- :mod:`~sensors._watch.schedule`: the ticks: one batch per host per tick, hosts in parallel.
- :mod:`~sensors._watch.handoff`: a stage a Prefect gate hands to the watcher, and the
  watcher's final word on it (the core's half; the resume is :mod:`sensors._prefect.bridge`).
- :mod:`~sensors._watch.spool`: output that never holds a watch.
- :mod:`~sensors._watch.gc`: the garbage collector tuned for a long-running watcher.

May import :mod:`sensors._base`, :mod:`sensors._run`, :mod:`sensors._config`,
:mod:`sensors._hosts`, :mod:`sensors._check`, :mod:`sensors._store` and
:mod:`sensors._present`; only inside a function: :mod:`sensors._notify` (for stages that
notify) and the Prefect layer (:mod:`sensors._prefect`, when a watcher is asked to resume
gates).
"""
