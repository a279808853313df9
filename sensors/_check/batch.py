"""One probe for several stages of one host: one round trip, /proc scanned once.

The process signal's table (every ``/proc/PID/stat`` and command line) does not depend on the
stage — each stage's regex is matched here — so it is read once and shared; every other
section (a stage's log, outputs, GPU, its job's /proc/PID/io) is written under the stage's
prefix (``P=k3.`` before its snippet; the frame's ``sec`` adds it), and each Checker reads its
own view: the shared sections plus its own, unprefixed.

Example:
    >>> verdicts = check_batch([checker_a, checker_b])  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

from sensors._base.errors import HostError, HostKeyError
from sensors._base.model import Verdict
from sensors._base.probe import (
    GARBLED,
    Meta,
    Static,
    build_script,
    guard,
    new_nonce,
    on_local_fs,
    parse_meta,
    sections_of,
)
from sensors._base.text import redaction_shared
from sensors._check.checker import Checker, save_checked
from sensors._signals.process import owner_lines, parse_table_once, table_lines

#: Sections every stage of the batch reads as they are (not prefixed).
#: The longest a guarded stage's reads may take in a batch (seconds; a quarter of its
#: check's deadline when that is less): a read of a healthy network file system takes
#: milliseconds, and the host's other stages wait for it.
GUARD_BUDGET = 10.0

SHARED = ("meta", "stats", "statfs", "stat", "tasks", "taskcmd", "cmdline", "owners", "end")


def check_batch(checkers: Sequence[Checker]) -> list[Verdict]:
    """One check of each checker, all on one host, in one probe round trip (the nodes of a
    stage over several hosts among them: ``SpanChecker.nodes``, see ``sensors._watch.schedule``).

    A checker whose stage another watch holds follows the stored verdict (not probed). Host
    failures make every probed stage ``unknown``; an unverifiable host key is raised.
    """
    # A checker given twice (one stage watched under two keys, a span's node also watched as a
    # stage of its own) is checked once: its lock taken twice by this thread was a deadlock.
    singles = list(dict.fromkeys(checkers))
    verdicts: dict[int, Verdict] = {}
    locks = [c.lock for c in singles]
    for lock in locks:
        lock.acquire()
    try:
        probed = []
        for k, checker in enumerate(singles):
            followed = checker.followed()
            if followed is not None:
                verdicts[k] = followed
            else:
                probed.append(k)
        if probed:
            probed_verdicts = _probe([singles[k] for k in probed])
            # The host's stages saved together (one store transaction where it can).
            save_checked([(singles[k], v) for k, v in zip(probed, probed_verdicts, strict=True)])
            verdicts.update(zip(probed, probed_verdicts, strict=True))
    finally:
        for lock in locks:
            lock.release()
    by_checker = {c: verdicts[k] for k, c in enumerate(singles)}
    return [by_checker[c] for c in checkers]


def _probe(checkers: Sequence[Checker]) -> list[Verdict]:
    host = checkers[0].host
    nonce = new_nonce()
    static = None if any(c.static is None for c in checkers) else checkers[0].static
    parts: list[list[str]] = []
    table = False
    for k, checker in enumerate(checkers):
        if not table and checker.stage.process is not None:
            # The process table: once for the whole batch, unprefixed.
            parts.append(["P=", *table_lines()])
            table = True
        lines = [f"P=k{k}."]
        if checker.guarded and len(checkers) > 1:
            # Its files may be where a read blocks: not at the cost of the other stages.
            lines.append(guard(min(GUARD_BUDGET, checker.stage.check_timeout / 4)))
        for snippet in checker.snippets(nonce, table=False):
            lines += snippet
        parts.append(lines)
    if any(c.stage.process is not None and c.stage.process.match is not None for c in checkers):
        # Whose process each is (for process.user, and matches of several users): once too,
        # unprefixed, after the table (a process it lists has its owner read after it).
        parts.append(["P=", *owner_lines()])
    parts.append(["P="])
    timeout = max(c.stage.check_timeout for c in checkers)
    sent = time.time()
    try:
        output = host.run_script(build_script(nonce, static, parts), timeout=timeout)
        sent, answered = getattr(host, "sent_at", lambda: None)() or sent, time.time()
        for checker in checkers:
            checker.sent(sent, answered)
    except HostKeyError:
        raise
    except HostError as exc:
        return [c.host_failed(exc) for c in checkers]
    views = _views(output, nonce, len(checkers), static.sed_nul if static is not None else None)
    # The shared process table: parsed once, not once per stage; the evidence the stages
    # repeat (the host's boot id, the table's command lines, common lines): redacted once.
    metas: dict[Static | None, Meta] = {}
    with parse_table_once(), redaction_shared():
        verdicts = []
        for k, checker in enumerate(checkers):
            known = checker.static
            if known not in metas:
                metas[known] = parse_meta(views[k].get("meta"), known, views[k].get("end"))
            verdicts.append(checker.absorb(views[k], nonce, metas[known]))
            # Guarded next time unless every file of it was found on a local file system.
            checker.guarded = not all(on_local_fs(p, views[k]) for p in checker.files)
        return verdicts


def _views(output: bytes, nonce: str, n: int, sed_nul: bool | None = None) -> list[dict[str, bytes]]:
    """Each stage's sections: the shared ones, and its own without the ``k<index>.`` prefix
    (one pass over the probe's answer, whatever the number of stages).

    A name met twice, or one no stage's (a prefix past the batch, a shared name the probe
    does not write), garbles the whole answer: every stage gets ``{GARBLED: why}`` (its
    signals ``unknown``), never the last body of a name. No job text can write a section
    (see ``sensors._base.probe.ESCAPE``): this is what a broken answer looks like, whatever
    broke it.
    """
    shared: dict[str, bytes] = {}
    own: list[dict[str, bytes]] = [{} for _ in range(n)]
    prefixes = _prefixes(n)
    for name, body in sections_of(output, nonce, sed_nul):
        prefix, dot, rest = name.partition(".")
        k = prefixes.get(prefix) if dot else None
        into = own[k] if k is not None else shared if name in SHARED else None
        key = rest if k is not None else name
        if into is None:
            return [{GARBLED: f"an unexpected section {name[:40]!r}".encode()}] * n
        if key in into:
            return [{GARBLED: f"the section {name[:40]!r} appears twice".encode()}] * n
        into[key] = body
    return [{**shared, **mine} for mine in own]


@functools.lru_cache(maxsize=64)
def _prefixes(n: int) -> dict[str, int]:
    """``k0`` … ``k<n-1>``, each with its index: the only prefixes a view takes (``k07`` or
    ``k40`` of a batch of 40 is no stage's)."""
    return {f"k{k}": k for k in range(n)}
