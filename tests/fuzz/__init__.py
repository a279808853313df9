"""The ground-truth fuzzer (issue 21, section 4): histories of one stage against the product.

- :mod:`tests.fuzz.job`: the job, a real process that writes only when told (stdin).
- :mod:`tests.fuzz.truth`: whether ``complete`` is allowed, from what the fuzzer knows.
- :mod:`tests.fuzz.world`: a history's world: the job, files, watches; every step a method.
- :mod:`tests.fuzz.generate`: a seed → a history.
- :mod:`tests.fuzz.history`: a history as data, its replay script, running it.
- :mod:`tests.fuzz.report`, :mod:`tests.fuzz.__main__`: findings in words; the command
  (``python -m tests.fuzz --histories N``, ``--seed N [--print]``).
"""
