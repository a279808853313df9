"""``crosscheck validate``: load stage files and say what each will do, without probing.

For each file: whether it loads (the one error line a ``status`` would give, if not), what
each configured signal will read and when it counts as done or failed, the policy in words,
and warnings about a stage that loads but will not behave as its author likely expects: a
regex RE2 cannot run (``BacktrackingRegexWarning``); a stage that can never complete on its
own (only a process signal, perhaps with a GPU; no log, no outputs, no launch); the same
stage name in two files; an SSH host that cannot be resolved here through its ssh config (no
connection made). Why each is a warning: docs/stage-file.md, "Checking a stage file before
it runs".

Example:
    >>> from sensors._config.stage import stage_from_dict
    >>> stage = stage_from_dict({"stage": "x", "process": {"match": "train.py"}})
    >>> print(warnings_of(stage)[0])  # doctest: +ELLIPSIS
    never completes on its own: when its process is gone, nothing tells a success from a crash ...
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from sensors._base.errors import ConfigError
from sensors._base.regex import BacktrackingRegexWarning, compile_user_regex
from sensors._base.text import inert, redact_command
from sensors._config.stage import Stage, SupervisorSpec, load_stage

__all__ = ["Explained", "describe", "explain_files", "warnings_of"]


@dataclass(frozen=True)
class Explained:
    """One stage file, loaded (or not) and put in words.

    Attributes:
        file: the path as given.
        stage: the stage, or None when the file does not load.
        error: the one-line error when it does not (as ``status`` prints it).
        parts: ``(part, what it does)``: host, each signal, policy, notify, launch.
        warnings: what loads but will likely not behave as meant.
    """

    file: str
    stage: Stage | None = None
    error: str | None = None
    parts: tuple[tuple[str, str], ...] = ()
    warnings: tuple[str, ...] = field(default=())


def explain_files(paths: Sequence[str]) -> list[Explained]:
    """Load and explain each file; a second file naming a stage already named is a warning."""
    found: list[Explained] = []
    named: dict[str, str] = {}
    for path in paths:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BacktrackingRegexWarning)
            try:
                stage = load_stage(path)
            except ConfigError as exc:
                found.append(Explained(path, error=str(exc)))
                continue
        notes = [
            f"backtracking regex: {w.message}"
            for w in caught
            if issubclass(w.category, BacktrackingRegexWarning)
        ]
        notes.extend(warnings_of(stage))
        unresolved = _route_problem(stage)
        if unresolved is not None:
            notes.append(
                f"host {stage.host_name} cannot be resolved through the ssh config here"
                f" ({unresolved}): a check on this machine would refuse the stage"
            )
        first = named.setdefault(stage.stage, path)
        if first != path:
            notes.append(
                f"stage {stage.stage} is also defined by {first}: serve watches one of them,"
                " status and wait refuse the two together"
            )
        found.append(Explained(path, stage, None, tuple(describe(stage)), tuple(notes)))
    return found


def warnings_of(stage: Stage) -> list[str]:
    """What in ``stage`` loads but will likely not behave as meant (the host's route aside)."""
    notes: list[str] = []
    # A supervisor's record tells the end (its exit status) as a launch's record does.
    told_by_files = stage.log is not None or stage.outputs is not None or stage.supervisor is not None
    if stage.process is not None and not told_by_files:
        if stage.launch is None:
            # A launch section is refused for a stage over several hosts: not offered there.
            launch = (
                ""
                if stage.hosts is not None
                else ", or a launch section (crosscheck then records the exit status)"
            )
            notes.append(
                "never completes on its own: when its process is gone, nothing tells a success"
                " from a crash (an exit and a kill look alike), so the verdict is unknown; add a"
                f" log section (its completion line) or an outputs section{launch}"
            )
        else:
            notes.append(
                "completes only when crosscheck launched the job (its recorded exit status"
                " decides): a job started otherwise is unknown once gone; a log or outputs"
                " section would tell"
            )
    if stage.process is None and not told_by_files:
        notes.append(
            "never completes: a GPU at rest says nothing of which run it was, or whether it"
            " succeeded; add a log or outputs section"
        )
    return notes


def _supervisor(sup: SupervisorSpec) -> str:
    """What the supervisor section reads and decides (docs/supervisors.md), in words."""
    if sup.docker is not None:
        text = f"docker's record of container {_q(sup.docker)} (docker inspect)"
    elif sup.systemd is not None:
        text = f"systemd's record of {'user ' if sup.user else ''}unit {_q(sup.systemd)} (systemctl show)"
    else:
        text = f"Slurm's record of job {_q(sup.slurm or '')} (squeue, sacct, scontrol listpids)"
    if sup.bin is not None:
        text += f", its commands from {_q(sup.bin)}"
    return (
        text + ": the run's identity (a new container, invocation or job is a new run), running"
        " while it says so, done at a recorded exit 0, failed at any other end (a non-zero code,"
        " a signal, an OOM kill, a cancel)"
    )


def describe(stage: Stage) -> list[tuple[str, str]]:
    """What each part of ``stage`` will read and decide, in words, one line per part."""
    if stage.hosts is not None:
        return _describe_span(stage)
    parts = [("host", _host(stage))]
    sup = stage.supervisor
    if sup is not None:
        parts.append(("supervisor", _supervisor(sup)))
    p = stage.process
    if p is not None:
        scope = "every process of the host" if p.scope == "host" else "every process the probe can see"
        if p.supervised:
            parts.append(
                ("process", "the processes the supervisor's record names (their state, CPU time and I/O)")
            )
        elif p.pid is not None:
            parts.append(("process", f"PID {p.pid} on the host (its state, CPU time and I/O)"))
        else:
            matches = f"{scope} whose command line matches {_rx(p.match)}"
            if p.user is not None:
                # Resolved where the job runs: validate connects to no host.
                who = str(p.user) if isinstance(p.user, int) else f"the host's uid of user {_q(p.user)}"
                matches += f" and whose real uid is {who} (other users' matches are ignored)"
            parts.append(("process", f"{matches}: their state, CPU time and I/O"))
    lg = stage.log
    if lg is not None:
        text = f"the last {_bytes(lg.tail_bytes)} of {_q(lg.path)}"
        text += f": done at a whole line matching {_rx(lg.complete)}"
        if lg.error:
            text += f", failed at a line matching {_rx(lg.error)}"
        if lg.progress:
            text += f", progress from {_rx(lg.progress)}"
        parts.append(("log", text))
    o = stage.outputs
    if o is not None:
        if o.files is not None:
            excluded = ", ".join(o.exclude) if o.exclude else "nothing"
            what = f"the entries of {_q(o.files)} matching {_q(o.pattern)} (excluding {excluded})"
        else:
            what = f"the newline-terminated records of {_q(o.lines)}"
        parts.append(("outputs", f"{what}: done at {o.expected:,}, unchanged since the check before"))
    g = stage.gpu
    if g is not None:
        how = "NVML on this machine" if stage.host == "local" else f"nvidia-smi on {stage.host_name}"
        devices = "every GPU" if g.devices == "all" else "GPU " + ", ".join(map(str, g.devices))
        parts.append(
            ("gpu", f"{devices} ({how}): idle below {g.idle_below:g}% in every sample for {_dur(g.idle_for)}")
        )
    pol = stage.policy
    parts.append(
        (
            "policy",
            f"a check every {_dur(pol.interval)}; stalled after {_dur(pol.stall_after)} without"
            f" progress; complete after {pol.settle} agreeing check{'s' if pol.settle != 1 else ''};"
            f" wait and gates give up after {_dur(pol.timeout)}; state D counts as no progress after"
            f" {_dur(pol.stuck_in_d_after)}; the log and outputs may lag the exit by {_dur(pol.exit_grace)}",
        )
    )
    n = stage.notify
    if n is not None:
        to = [f"Slack ({n.slack_webhook})"] if n.slack_webhook else []
        to += [f"the Prefect block {n.prefect_block}"] if n.prefect_block else []
        parts.append(
            (
                "notify",
                f"{' and '.join(to) or 'nobody'} on {', '.join(n.on)}; unknown only after"
                f" {_dur(n.unknown_after)}; reminders every {_dur(n.remind_every)}",
            )
        )
    la = stage.launch
    if la is not None:
        where = f" in {la.cwd}" if la.cwd else ""
        log = la.log or (lg.path if lg is not None else None)
        output = f", output to {log}" if log else ""
        parts.append(("launch", f"{redact_command(la.command)}{where}, detached on the host{output}"))
    return [(part, inert(text)) for part, text in parts]


def _describe_span(stage: Stage) -> list[tuple[str, str]]:
    """A stage over several hosts: its hosts, then node 0's parts with where each is read."""
    nodes = stage.nodes
    shown = [_host(n) for n in nodes[:4]]
    more = f"; and {len(nodes) - 4} more" if len(nodes) > 4 else ""
    parts = [
        (
            "hosts",
            f"{len(nodes)} hosts, each checked as a stage of its own, in parallel: {'; '.join(shown)}{more}",
        )
    ]
    per_host_log = stage.log is not None and nodes[-1].log is not None and len(nodes) > 1
    where = {
        "process": "as node 0 reads it; every host reads its own, {node} and {host} filled in"
        + (
            f"; {stage.process.per_host} per host (ranks)"
            if stage.process is not None and stage.process.per_host
            else ""
        ),
        "log": (
            "as node 0 reads it (its first rank's); every host reads a log per rank, in its probe,"
            " {rank} (node * per_host + local rank), {node} and {host} filled in"
            if any(stage.rank_logs)
            else "as node 0 reads it; every host reads its own, {node} and {host} filled in"
        )
        if per_host_log
        else "one shared file, read on node 0",
        "outputs": "read once, on node 0 (shared storage)",
        "gpu": "on every host",
    }
    success = (
        "complete when every host's signals say done"
        if stage.policy.success == "all"
        else "complete when node 0's signals say done and every other host's job processes are gone"
    )
    for part, text in describe(nodes[0])[1:]:
        if part in where:
            text = f"{text} — {where[part]}"
        elif part == "policy":
            text = f"{text}; success: {stage.policy.success} ({success})"
        parts.append((part, text))
    return [(part, inert(text)) for part, text in parts]


def _host(stage: Stage) -> str:
    if stage.host == "local":
        return "this machine"
    from sensors._hosts.ssh_config import route_for  # paramiko: only for SSH stages

    spec = stage.host
    try:
        route = route_for(spec)
    except ConfigError as exc:
        return f"{spec.ssh} over SSH, which cannot be resolved here: {exc}"
    t = route.target
    via = f" via {', '.join(j.label for j in route.jumps)}" if route.jumps else ""
    return f"{spec.ssh} over SSH: {t.user}@{t.label}{via} (host keys from {spec.known_hosts})"


def _route_problem(stage: Stage) -> str | None:
    """Why an SSH stage's route cannot be worked out here (its ssh config), or None."""
    if stage.hosts is not None:
        return next((why for node in stage.nodes if (why := _route_problem(node)) is not None), None)
    if stage.host == "local":
        return None
    from sensors._hosts.ssh_config import route_for

    try:
        route_for(stage.host)
    except ConfigError as exc:
        return str(exc)
    return None


def _rx(pattern: str | None) -> str:
    if pattern is None:
        return "''"
    rx = compile_user_regex(pattern)
    how = {"re2": "RE2", "regex": "regex, each search bounded"}.get(rx.engine, f"backtracking re: {rx.why}")
    return f"{_q(pattern)} ({how})"


def _q(text: str | None) -> str:
    """A value of the file as it is written there, in quotes (a regex's backslashes single)."""
    return f"'{text}'"


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 1048576), ("KiB", 1024)):
        if n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def _dur(seconds: float) -> str:
    """``30s``, ``15m``, ``48h``, ``7d``, ``1.5s``, ``500ms``: as a stage file writes it."""
    for unit, size, least in (("d", 86400.0, 7 * 86400.0), ("h", 3600.0, 3600.0), ("m", 60.0, 60.0)):
        if seconds >= least and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"
