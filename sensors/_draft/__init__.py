"""``crosscheck init``'s reading of a live job and the stage file drafted from it.

- :mod:`~sensors._draft.survey`: one read-only probe per host (the probe's frame, its nonce
  and escaping) that reads the job's command lines, process tree, open files, working
  directory, rank variables, the tail of the files it writes, the directories its arguments
  name and, where a GPU is read, whose processes hold it; parsed into a :class:`Survey`.
- :mod:`~sensors._draft.draft`: a :class:`Survey` per host to the text of a stage file, each
  guess with a YAML comment saying where it came from.

Nothing here writes on a host or on this machine: the command prints the draft (and writes
it only where ``--write`` asks, in the command).

May import :mod:`sensors._base`, :mod:`sensors._run`, :mod:`sensors._signals`,
:mod:`sensors._config` and :mod:`sensors._hosts`.
"""
