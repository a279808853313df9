"""Run binding: which evidence belongs to the run being watched. Pure: no I/O, no processes.

The model. A **run** has an identity, a start interval, an end interval and its processes:

- identity: a launch record (crosscheck started it), a ``--since`` (the user said when it
  began), the watch's own start, or the first sighting of the job's process (``Run.source``);
- start: an interval, not a point: the moment read and how far it may be off by where it was
  read (/proc start ticks against the boot clock, whole seconds where /proc/uptime is
  virtualised; a ``--since`` is exact; a launch is the host's clock read just before);
- end: the launch wrapper's exit record, a process end the host let the watch see, or the
  span between the last check that saw it alive and the first that found it gone;
- processes: the job's PIDs of this run, with their start intervals.

Every moment is read on some clock (the host's, a file server's, the checking machine's) with
a precision (:mod:`~sensors._run.moment`); every precision is one row of one table
(:mod:`~sensors._base.tolerances`, in the ground layer so that the probe's frame reads it
too), with where its figure comes from. A piece of evidence (the
bytes of a log, a line, an output, a GPU process) **belongs** to the run: yes, no, or cannot
tell; "cannot tell" only where another history fits within the measured precisions.

- :mod:`~sensors._run.run`: ``Run``, ``Since``, launch marks and records, exit records.
- :mod:`~sensors._run.moment`: ``Moment``, a time on one clock with its interval.
- :mod:`~sensors._run.binding`: when a file was written against a run's start.
- :mod:`~sensors._run.supervisor`: a supervisor's record (docker, systemd, Slurm), parsed:
  the run's identity, its end and its processes as the supervisor keeps them.

Signals read facts and ask here whether they belong; the verdict combines. The rules that
follow from the model are in docs/run-binding.md.

May import :mod:`sensors._base` only.
"""
