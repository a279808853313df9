"""A verdict for a person: evidence in words, pictures and terminal output.

- :mod:`~sensors._present.facts`: one fact in words (numbers with units, ages, clock times).
- :mod:`~sensors._present.evidence`: a verdict's evidence for each reader (terminal, Slack,
  Prefect): styles, key values, one line per signal, evidence tables.
- :mod:`~sensors._present.picture`: a wait as one self-contained SVG.
- :mod:`~sensors._present.terminal`: verdict lines, tables and the live progress bar.

May import :mod:`sensors._base` and :mod:`sensors._config`; nothing here probes or stores.
"""
