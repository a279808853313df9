"""Adversary 45: commit 23a79ea, a process of this run that ended between the last two /proc
scans (``JobView.ended``) as a writer of a completion line first found at this check, where
the exit watch saw its end (``JobView.ends``) no earlier than the line's stamp.

The rule rests on one history: the line was written after the previous check's log stat
found none, by a process already known alive, and before that process's seen end. Each row
below is a history where one of those three does not follow from what the rule reads, and
the line, counted as that process's, would be taken for this run's by the `later` demotion
(one host) or by ``sensors._verdict.across._unseen_run_after`` (several: "a later run no
check saw" is what keeps a stage unknown there). Table tests at ``_whose``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sensors._check.checker import _owned_by
from sensors._hosts.exits import SeenEnd
from sensors._signals.base import JobView
from sensors._signals.log import LogMemory, _LogScan, _LogStat, _whose, _Word

P = 4242  # the rank that ended between the last two scans


def _word(
    *,
    at: float = 100.25,
    ends: Mapping[int, float] | None = None,
    live: frozenset[int] = frozenset(),
    starts: Mapping[int, float] | None = None,
    parents: Mapping[int, int] | None = None,
    changed: float = 0.0,
    birth: float = 50.0,
    resolution: float = 1e-9,
    memory: LogMemory | None = None,
    after: bytes = b"",
    now: float = 101.0,
    job: bool = True,
    job_unread: bool = False,
) -> _Word:
    """The word on a completion line 'DONE' (bytes 90-100) first found at this check; ``P``
    alive two checks ago and gone at the last (``JobView.ended``); nothing else of the run
    seen at the last check. ``at``: the log's mtime (``changed``: its ctime); ``after``: what
    follows the line (whitespace is evidence of nothing)."""
    size = 100 + len(after)
    st = _LogStat(inode=1, size=size, mtime=int(at), birth=birth, written=at, resolution=resolution,
                  stamp="s", changed=changed)  # fmt: skip
    text = after.decode().strip()
    scan = _LogScan(
        complete_line="DONE", complete_end=100, error_line=None, earlier_complete=None,
        earlier_is_last=False, progress=None, last_line=text or "DONE", partial=False,
        followed_by=text or None,
    )  # fmt: skip
    view = JobView(
        live=live,
        starts=starts or {},
        parents=parents or {},
        ended=frozenset({P}),
        ends={P: 100.30} if ends is None else ends,
    )
    memory = memory or LogMemory(inode=1, size=90, run_from=0, scanned="1 90")
    return _whose(memory, scan, st, "DONE", 100, view if job else None, None, now, job_unread=job_unread)


def test_control_the_commits_own_history_still_makes_the_rank_a_writer() -> None:
    """Printed its line at 100.25 and ended, seen gone at 100.30: its line."""
    word = _word()
    assert word.writers == (P,) and word.complete_line == "DONE"


# --------------------------------------------------------------------------- PID reuse


def test_an_ended_pid_alive_again_is_another_process_and_no_writer() -> None:
    """PID reuse. ``P`` was gone at the last scan, so a live ``P`` now is another process:
    here a re-run begun at 102.0, clearly after the line (100.25), with no line of its own.
    As one of the line's writers it escaped the `later` demotion (``pid not in writers``),
    so once it too was gone the earlier run's line completed the re-run."""
    word = _word(live=frozenset({P}), starts={P: 102.0}, now=103.0)
    assert P not in word.writers
    assert word.complete_line is None and word.demoted == "DONE" and word.later_pid == P


def test_an_ended_pid_alive_again_gives_its_children_no_writers_cover() -> None:
    """The same reuse, the re-run's worker a child of the reused PID: a writer's child is its
    run's own work (``JobView.descends``), so the worker escaped the demotion too."""
    word = _word(live=frozenset({P, 5000}), starts={P: 102.0, 5000: 102.1}, parents={5000: P}, now=103.0)
    assert word.later_pid is not None and word.complete_line is None


# --------------------------------------------------------------------------- set back


def test_an_mtime_set_back_dates_no_line_before_the_end() -> None:
    """touch -d, cp -p, rsync -t: the mtime (100.25) is older than the write, which came by
    the ctime (105.0), after the rank's seen end (100.30). The text-after rule reads the
    ctime for this reason (fuzzer seed 4701897); the new rule read the mtime, and a line
    written long after the rank was gone was the rank's."""
    word = _word(changed=105.0)
    assert word.writers == ()


def test_a_ctime_a_moment_after_the_write_still_makes_the_rank_a_writer() -> None:
    """Control: the ctime is every write's too; within MTIME_SET_BACK of the mtime it is no
    setting back, and the rank's line is still its own."""
    assert _word(changed=100.26).writers == (P,)


# --------------------------------------------------------------------------- older than the run


def test_a_line_stamped_before_a_check_found_no_log_is_not_the_ended_ranks() -> None:
    """The log was absent at the last check (``absent_at`` 200.0), and appears now holding a
    line stamped 100.25, not set back (a symlink pointed at an earlier run's log, or its
    directory renamed into place: neither moves the file's ctime). Written at 100.25, it
    was not written at this path while the rank lived: the file came from elsewhere, and
    whose its line is cannot be told. The rank, seen to end at 205.0, counted as its writer
    (``at <= end`` holds for any old line): nothing asked that it was written after the
    rank was known alive."""
    memory = LogMemory(absent=True, absent_at=200.0, run_from=0, inode=1)
    assert _word(ends={P: 205.0}, memory=memory).writers == ()


def test_a_log_absent_at_the_last_check_and_written_since_is_the_ranks() -> None:
    """Control: the commit's own history with a log the rank made at its end (absent at the
    last check's stat, 100.10; its line stamped 100.25, the rank seen gone at 100.30)."""
    memory = LogMemory(absent=True, absent_at=100.10, run_from=0, inode=1)
    assert _word(memory=memory).writers == (P,)


# --------------------------------------------------------------------------- held


def test_held_a_foreign_clock_an_unread_job_and_a_coarse_mtime_make_no_writer() -> None:
    """Routes that hold: a file server's clock (its times are not the exit watch's), the
    process signal unread (no ``JobView``), a whole-second mtime (the line undated), a line
    stamped after the seen end, an end not seen."""
    foreign = LogMemory(inode=1, size=90, run_from=0, foreign_clock=True, scanned="1 90")
    assert _word(memory=foreign).writers == ()
    assert _word(job=False, job_unread=True).writers == ()
    assert _word(resolution=1.0).writers == ()
    assert _word(at=100.31).writers == ()
    assert _word(ends={}).writers == ()


def test_held_an_end_seen_loosely_dates_the_rank_by_its_last_sighting() -> None:
    """An exit watch starved past END_WINDOW (found gone 0.4 s after its last sighting
    alive): the rank's own is only what was stamped a jiffy before that sighting, and a
    line stamped after it (a re-run's, in that gap) is not its."""
    end = _owned_by(SeenEnd(alive=100.20, gone=100.60))
    assert end < 100.20
    assert _word(ends={P: end}).writers == ()  # stamped 100.25
    assert _word(at=100.18, ends={P: end}).writers == (P,)


# --------------------------------------------------------------------------- the other side


def test_a_blank_line_after_the_line_still_lets_the_ended_rank_be_its_writer() -> None:
    """The commit's history with ``print("DONE\\n")``: a blank line ends the log. Whitespace
    is evidence of nothing, but the line is then not the log's last bytes, undated, and the
    rule needs its stamp: no writer, and over several hosts unknown for good. The log's
    mtime (100.25) is when its last byte was written, the line no later: before the seen
    end (100.30)."""
    assert _word(after=b"\n").writers == (P,)


def test_a_blank_line_after_the_line_in_a_log_absent_at_the_last_check_is_dated_by_its_birth() -> None:
    """Undated, the line is no older than the file: born after the check that found no log
    (100.10), the rank's; born before it (an earlier run's log put in place since), not."""
    memory = LogMemory(absent=True, absent_at=100.10, run_from=0, inode=1)
    assert _word(after=b"\n", memory=memory, birth=100.2).writers == (P,)
    assert _word(after=b"\n", memory=memory, birth=50.0).writers == ()


# --------------------------------------------------------------------------- ended, not set aside


def test_a_process_of_the_run_found_an_earlier_runs_is_not_ended() -> None:
    """``run_ended`` is 'alive two checks ago and gone at the last', but was computed as 'this
    run's two checks ago and not this run's at the last': a process found an earlier run's at
    the last check (under --since: its start unreadable then readable, or its parent found an
    earlier run's), still alive, read as ended. Had it then written the line and exited, the
    next check counted that earlier run's process a writer of this run's line, and the line
    was not demoted as written while only an earlier run was at work (``_whose``)."""
    from types import SimpleNamespace
    from typing import Any, cast

    from sensors._config.stage import stage_from_dict
    from sensors._signals.process import ProcessMemory, _Job, _remember
    from tests.test_run_model import _meta

    spec = stage_from_dict({"stage": "s", "host": "local", "process": {"match": "x"}}).process
    assert spec is not None
    job = _Job([], [P], set(), None, None, None, None, earlier=(P,))
    table = cast(Any, SimpleNamespace(stats={}))  # the /proc table: no live identity to keep
    memory = _remember(spec, ProcessMemory(run_pids=(P,)), job, table, _meta())
    assert memory.run_pids == () and memory.run_ended == ()
    gone = _remember(
        spec, ProcessMemory(run_pids=(P,)), _Job([], [], set(), None, None, None, None), table, _meta()
    )
    assert gone.run_ended == (P,)  # control: gone, it ended
