"""The stage file: pydantic at the config boundary, plain frozen values inside.

- :mod:`~sensors._config.stage`: ``Stage``, ``load_stage``, ``stage_from_dict``: a YAML file
  or a dict becomes a validated ``Stage`` (each signal's section is that signal's own spec),
  and every error is one line naming the file, the field and what is wrong.

May import :mod:`sensors._base` and the signals' specs (:mod:`sensors._signals`).
"""
