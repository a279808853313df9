"""The run model's pure parts (``sensors._run``): its table of tolerances and its moments.

Table tests, no clocks, no processes: what the signals use to tie evidence to a run.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

import pytest

from sensors._base import tolerances
from sensors._base.probe import Meta, build_script, parse_meta
from sensors._base.tolerances import TABLE, Tolerance
from sensors._run.advice import Had
from sensors._signals.procfs import start_precision

SENSORS = Path(__file__).resolve().parent.parent / "sensors"


def _constants() -> dict[str, float]:
    return {
        name: value
        for name, value in vars(tolerances).items()
        if name.isupper() and isinstance(value, float) and name != "TABLE"
    }


def test_every_tolerance_is_a_row_of_the_table_with_its_source() -> None:
    """One table: each module constant is a row (same name, same value) and each row a
    constant, with a unit and where its figure comes from."""
    assert set(_constants()) == set(TABLE)
    for name, value in _constants().items():
        row = TABLE[name]
        assert isinstance(row, Tolerance)
        assert (row.name, row.value) == (name, value)
        assert row.unit in ("s", "s/s"), name  # a time, or a rate (a clock's drift)
        assert row.value > 0
        assert len(row.source.split()) >= 10, f"{name}: say where the figure comes from"


def test_a_quantity_read_with_two_values_is_named_so() -> None:
    """The quantities with two values today (left for a decision: unifying one changes
    verdicts); a new one shows up here. Each second row says which it duplicates."""
    twice = {q for q, n in Counter(row.quantity for row in TABLE.values()).items() if n > 1}
    assert twice == {"proc_start_ticks", "file_time_lag", "since_same"}
    for quantity in twice:
        rows = [row for row in TABLE.values() if row.quantity == quantity]
        assert len({row.value for row in rows}) == len(rows), quantity
        assert any("the same quantity as" in row.source for row in rows), quantity


def test_the_process_start_precision_is_the_tables() -> None:
    assert {
        "ticks": TABLE["PROC_START_TICKS"].value,
        "btime": TABLE["PROC_START_WHOLE_SECONDS"].value,
    } == tolerances.PROCESS_START_PRECISION


def _meta(**kw: object) -> Meta:
    base: dict[str, object] = dict(
        now=1_800_000_000.0,
        uptime=5000.0,
        btime=1_799_995_000,
        boot_id="b",
        clk_tck=100,
        script_pid=1,
        hostname="h",
        uptime_virtualised=False,
    )
    return Meta(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "meta, precision",
    [
        # /proc/uptime read on both sides of `date` in the same 10 ms: 10 ms of /proc/uptime's
        # rounding, one tick of the start's and half a ms of its rounding to the ms, rounded up.
        (_meta(uptime_before=5000.0), 0.021),
        # A `date` that took 80 ms to fork under load: the boot's wall clock is known to that.
        (_meta(uptime_before=4999.92), 0.101),
        # Another tick rate: a tick of 4 ms.
        (_meta(uptime_before=5000.0, clk_tck=250), 0.015),
        # An answer without the read before `date` (an older probe): the fixed worst case.
        (_meta(), tolerances.PROC_START_TICKS),
        (_meta(uptime_before=5000.0, clk_tck=None), tolerances.PROC_START_TICKS),
        # /proc/uptime virtualised: the start stands on btime's whole seconds.
        (_meta(uptime_before=5000.0, uptime_virtualised=True), tolerances.PROC_START_WHOLE_SECONDS),
    ],
)
def test_a_process_starts_precision_is_what_its_probe_measured(meta: Meta, precision: float) -> None:
    assert start_precision(meta) == pytest.approx(precision)


def test_the_probe_reads_proc_uptime_on_both_sides_of_the_clock() -> None:
    """The script's meta section: /proc/uptime, `date`, /proc/uptime, in that order, and the
    answer's fields parsed into the Meta the precision is measured from."""
    script = build_script("n0nce", None, []).decode()
    before = script.index('echo "uptime_before $up0"')
    clock = script.index('echo "now $(date +%s.%N')
    after = script.index('echo "uptime $up"')
    assert before < clock < after
    meta = parse_meta(b"now 1800000000.5\nuptime_before 4999.98\nuptime 5000.01\nclk_tck 100\n")
    assert (meta.uptime_before, meta.uptime) == (4999.98, 5000.01)
    assert start_precision(meta) == pytest.approx(0.051)


# The names the tolerances had before the table: none may come back as a module's own.
_OLD = {
    "_TICK_SLACK",
    "_WRITTEN_BY_TICK",
    "_JIFFY",
    "_START_PRECISION",
    "_PROCESS_START_SLACK",
    "START_SLACK",
    "_TIMESTAMP_TICK",
    "_FILE_CLOCK_TOLERANCE",
    "ELAPSED_TOLERANCE",
    "_CLOCKS_APART",
}


@pytest.mark.parametrize("path", sorted(SENSORS.rglob("*.py")), ids=lambda p: str(p.relative_to(SENSORS)))
def test_no_module_defines_a_tolerance_of_its_own(path: Path) -> None:
    """A tolerance of run binding is defined once, in the table (imported, never redefined)."""
    if path.name == "tolerances.py":
        return
    defined = {
        target.id
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert not defined & (set(TABLE) | _OLD), f"{path}: defines {sorted(defined & (set(TABLE) | _OLD))}"


# --------------------------------------------------------------------------- moments

from sensors._run.moment import Moment  # noqa: E402

_START = Moment.about(100.0, 0.05, source="/proc start ticks")  # truth in [99.95, 100.05]


@pytest.mark.parametrize(
    ("moment", "before", "after"),
    [
        (Moment.within(99.0, 99.01), True, False),  # a write clearly earlier
        (Moment.within(99.90, 99.94), True, False),  # a hundredth clear of the start's slack
        (Moment.within(99.93, 99.95), None, False),  # touches its earliest: equal is not before
        (Moment.within(100.02, 100.04), None, None),  # inside the start's precision: either
        (Moment.about(100.0, 0.0), None, None),  # the start's own reading, exact
        (Moment.within(100.05, 100.06), False, None),  # touches its latest: equal is not after
        (Moment.within(100.06, 100.07), False, True),  # clearly later
        (Moment.within(100.0, 101.0), None, None),  # a whole second's mtime spans the start
    ],
)
def test_a_moment_is_before_or_after_another_only_when_every_truth_says_so(moment, before, after) -> None:
    assert moment.before(_START) is before
    assert moment.after(_START) is after
    assert _START.after(moment) is before  # the same question turned round
    assert _START.before(moment) is after


@pytest.mark.parametrize(
    ("moment", "earliest", "latest"),
    [
        (Moment.about(10.0, 0.5), 9.5, 10.5),
        (Moment.within(10.0, 11.0), 10.0, 11.0),
        (Moment(10.0, early=0.25, late=1.0), 9.75, 11.0),
        (Moment(10.0), 10.0, 10.0),
    ],
)
def test_a_moments_interval(moment, earliest, latest) -> None:
    assert (moment.earliest, moment.latest) == (earliest, latest)


def test_moments_on_two_clocks_are_compared_only_once_on_one() -> None:
    """A --since given on this machine's clock against a host 60 s ahead (issue 35): moved
    onto the host's clock by the offset measured in the round trip, not compared raw."""
    since = Moment(1000.0, clock="checker", source="--since")
    line = Moment.within(1030.0, 1030.02, clock="host", source="mtime")  # run 1's, host 60 s ahead
    with pytest.raises(ValueError, match="moment compared with a"):
        line.after(since)
    on_host = since.moved("host", offset=60.0, uncertainty=0.2)
    assert (on_host.earliest, on_host.latest, on_host.clock) == (
        pytest.approx(1059.8),
        pytest.approx(1060.2),
        "host",
    )
    assert line.after(on_host) is False  # before the run began on the host: not this run's
    assert Moment.within(1060.1, 1060.12, "host").after(on_host) is None  # within the offset's precision


@pytest.mark.parametrize(
    "make",
    [
        lambda: Moment(1.0, early=-0.1),
        lambda: Moment(float("nan")),
        lambda: Moment(1.0, late=float("inf")),
        lambda: Moment.within(2.0, 1.0),
        lambda: Moment(1.0).moved("host", 1.0, uncertainty=-1.0),
    ],
)
def test_a_moment_refuses_what_no_clock_reads(make) -> None:
    with pytest.raises(ValueError):
        make()


# --------------------------------------------------------------------------- binding rules

from typing import NamedTuple  # noqa: E402

from sensors._run.binding import file_time_ahead, last_write, time_impossible, written_by  # noqa: E402
from sensors._run.run import Run  # noqa: E402


class _Times(NamedTuple):
    inode: int = 7
    size: int = 10
    birth: float = 0.0
    written: float = 1000.0
    resolution: float = 0.02


@pytest.mark.parametrize(
    ("written", "resolution", "source", "slack", "when"),
    [
        (998.0, 0.02, "process", 0.05, "before"),
        (999.93, 0.02, "process", 0.05, "before"),  # its span ends at the start's earliest
        (999.94, 0.02, "process", 0.05, "unclear"),
        (1000.05, 0.02, "process", 0.05, "after"),
        (1000.04, 0.02, "process", 0.05, "unclear"),
        (1000.5, 0.02, "process", None, "unclear"),  # no precision known: a second either way
        (999.0, 1.0, "since", None, "before"),  # whole seconds, a --since is exact
        (999.5, 1.0, "since", None, "unclear"),
        (1000.0, 0.02, "since", None, "after"),
    ],
)
def test_when_a_file_was_last_written_against_a_runs_start(written, resolution, source, slack, when) -> None:
    assert last_write(written, resolution, 1000.0, source, None, slack) == when


@pytest.mark.parametrize(
    ("times", "latest", "own", "ahead"),
    [
        (_Times(written=1000.0), 1000.0, True, None),
        (_Times(written=1000.05), 1000.0, True, None),  # within the probe's own clock read
        (_Times(written=1000.2), 1000.0, True, 0.2),  # set ahead by a tool
        (_Times(written=1000.9), 1000.0, False, None),  # a file server's clock, within its tolerance
        (_Times(birth=1002.0), 1000.0, False, 2.0),
    ],
)
def test_a_file_time_ahead_of_the_hosts_clock(times, latest, own, ahead) -> None:
    assert file_time_ahead(times, latest, own) == (pytest.approx(ahead) if ahead is not None else None)


@pytest.mark.parametrize(
    ("times", "run", "impossible"),
    [
        (_Times(), None, False),
        (_Times(birth=1001.0), None, True),  # last written before it was born
        (_Times(), Run(source="launch", started_at=1005.0, log_inode=7, log_offset=10), False),  # unchanged
        (_Times(size=20), Run(source="launch", started_at=1005.0, log_inode=7, log_offset=10), True),
        (_Times(size=20), Run(source="process", started_at=1005.0), False),  # only a launch is exact
    ],
)
def test_file_times_no_clock_can_have_given(times, run, impossible) -> None:
    assert time_impossible(times, run, 1010.0, True) is impossible


def test_written_by_a_moment_takes_the_whole_span_of_the_mtime() -> None:
    assert written_by(_Times(written=999.0, resolution=1.0), 1000.0)
    assert not written_by(_Times(written=999.5, resolution=1.0), 1000.0)
    assert written_by(_Times(written=1000.0), 1000.0)  # to the kernel's tick
    assert not written_by(_Times(), None)


@pytest.mark.parametrize(
    ("had", "offered", "not_offered"),
    [
        (Had(), ["--since", "watch the job from before it writes its completion line", "launch the job"], []),
        (Had(since=True), ["watch the job from before it writes", "launch the job"], ["--since"]),
        (Had(seen_alive=True), ["--since", "launch the job"], ["watch the job from before"]),
        (Had(launched=True, seen_alive=True), [], ["--since", "watch the job", "launch the job"]),
    ],
)
def test_the_logs_advice_never_repeats_what_the_watch_did(had, offered, not_offered) -> None:
    """A log's "cannot be told" ends with what would tell it, less what the watch already did
    (issue 35: a watch that saw the job at work was told to watch it from before it ends)."""
    from sensors._run.advice import Fix
    from sensors._signals.log import _advise

    said = _advise((Fix.SINCE, Fix.WATCH_BEFORE_LINE, Fix.LAUNCH), had)
    for words in offered:
        assert words in said, (had, said)
    for words in not_offered:
        assert words not in said, (had, said)
    if not offered:
        assert said == ". No other tie crosscheck knows would tell it"


@pytest.mark.parametrize(
    ("source", "started", "follows"),
    [
        ("process", 1_000.0, True),  # begun after the since: the latest run since then, as far as stored
        # Another watch's later --since is no run's start: a run begun between the two is this
        # watch's and not that one's (tests/test_user_s14.py: followed, never opened).
        ("since", 1_000.0, False),
        ("since", 990.0, True),  # the same --since given
        ("launch", 1_000.0, False),  # a launched run's watch answers for that launch, not a later run
        ("watch", 1_000.0, False),
    ],
)
def test_a_since_follows_a_stored_run_begun_after_it_but_never_a_launch(
    source: str, started: float, follows: bool
) -> None:
    """Fuzzer seed 5007569: a `status --since TIME` followed the launched run's stored `failed`
    (its exit 1 recorded) while run 2, begun after the time too, was at work: false failed."""
    from sensors._check.persist import is_this_run
    from sensors._run.run import Run, Since

    stored = Run(source=source, started_at=started, pid=7 if source == "launch" else None)
    assert is_this_run(stored, Since(at=990.0)) is follows


@pytest.mark.parametrize(("source", "started"), [("process", 990.5), ("supervisor", 990.5)])
def test_a_since_follows_no_run_found_on_another_hosts_clock(source: str, started: float) -> None:
    """A run found on an SSH host began on its clock, the --since on this machine's: a host
    ahead puts a run begun just before the since after it. Followed, a watch of the next run
    took the last run's complete (an adversary's review of 5b23126). The clocks are taken to be
    up to CLOCKS_APART apart (the stored run keeps no offset); the same given --since is still
    followed: it was given on this machine's clock too."""
    from sensors._base.tolerances import CLOCKS_APART
    from sensors._check.persist import is_this_run
    from sensors._run.run import Run, Since

    near, far = started - 990.0 < CLOCKS_APART, 990.0 + CLOCKS_APART + 0.5
    assert near and is_this_run(Run(source=source, started_at=started), Since(at=990.0)) is True
    assert is_this_run(Run(source=source, started_at=started), Since(at=990.0), one_clock=False) is False
    assert is_this_run(Run(source=source, started_at=far), Since(at=990.0), one_clock=False) is True
    given = Run(source="since", started_at=1_050.0, given=990.0)  # moved onto a host a minute ahead
    assert is_this_run(given, Since(at=990.0), one_clock=False) is True


@pytest.mark.parametrize(
    ("started", "older"),
    [
        (100.2, False),  # begun inside the probe that first read the log: its bytes may be the run's
        (100.45, False),  # begun just before that probe's second clock read
        (100.7, True),  # begun after the latest that read can have been: what it found is older
    ],
)
def test_a_run_begun_after_the_logs_first_read_is_after_the_latest_that_read_can_have_been(
    started: float, older: bool
) -> None:
    """Fuzzer seed 6000214 (a false failed): a `wait` whose first probe read its clock at
    100.0, then, while it ran (slow, under load), the job's container started, wrote its
    completion line and teardown text, and the probe read the log. The log's bytes counted
    as older than the run, because the run began after the probe's clock was read: `failed`,
    "the completion line in it is an earlier run's", with the run's own line on disk."""
    from sensors._run.run import Run
    from sensors._signals.log import LogMemory, _bound, _LogStat

    # Its times in whole seconds (the last write in [100, 101)): they date none of its bytes
    # against these starts, the read's bound does (where they do, a start clearly after the
    # last write is after every byte: tests/test_adversary_44.py).
    st = _LogStat(
        inode=7, size=106, mtime=100, birth=50.0, written=100.0, resolution=1.0, stamp="s", changed=100.0
    )
    first, _ = _bound(LogMemory(), st, None, None, 100.0, latest=100.5)
    assert first.before_uncertain and first.run_from == 106  # no run start yet: dated by the watch
    run = Run(source="supervisor", started_at=started, slack=0.001)
    then, _ = _bound(first, st, None, run, 101.0, unchanged=True, latest=101.1)
    assert then.before_uncertain is not older


def test_a_log_bound_with_no_run_start_says_so_in_the_past() -> None:
    """Adversary 44: a log bound before any run start was known kept saying "no run start is
    known" after a supervisor's start was: untrue then. What is true whenever it is said: no
    start was known when the watch first read the log."""
    from sensors._base.model import Says
    from sensors._signals.log import LogMemory, _log_says, _LogScan

    scan = _LogScan(None, None, None, "done", True, None, "done", False)
    memory = LogMemory(inode=1, size=5, run_from=5, before_uncertain=True, bound_by="watch")
    says, detail, _ = _log_says(scan, None, False, memory, 1.0)
    assert says is Says.UNKNOWN
    assert "no run start was known when this watch first read the log" in detail, detail


# --------------------------------------------------------------------------- ended in the probe

from sensors._signals.base import JobView  # noqa: E402
from sensors._signals.log import LogMemory, _LogScan, _LogStat, _whose  # noqa: E402
from sensors._signals.process import _job_view  # noqa: E402


def _line_found(
    ended: frozenset[int], ends: dict[int, float], at: float | None, read: int = 90
) -> tuple[int, ...]:
    """The writers of a completion line found at this check, none of the job's processes
    alive now or at the previous check; ``ended``: those alive two checks ago and gone at
    the previous one; ``ends``: where the exit watch saw them end (latest own write); the
    line is the log's last bytes, stamped ``at`` (None: text after it, undated); ``read``: the
    log's size at the last read (the line ends at 100)."""
    written = 100.0 if at is None else at
    st = _LogStat(inode=1, size=100 if at is not None else 130, mtime=int(written), birth=50.0,
                  written=written, resolution=1e-9, stamp="s")  # fmt: skip
    scan = _LogScan(
        complete_line="DONE", complete_end=100, error_line=None, earlier_complete=None,
        earlier_is_last=False, progress=None, last_line="DONE" if at is not None else "bye",
        partial=False, followed_by=None if at is not None else "bye",
    )  # fmt: skip
    job = JobView(ended=ended, ends=ends)
    memory = LogMemory(inode=1, size=read, run_from=0, scanned=f"1 {read}")  # read at the last check
    word = _whose(memory, scan, st, "DONE", 100, job, None, 101.0)
    return word.writers


@pytest.mark.parametrize(
    ("ended", "ends", "at", "writers"),
    [
        # Printed its line and exited after the last check's stat (taken before its /proc
        # scan): found a zombie there. The exit watch saw it end after the line was stamped.
        ({4242}, {4242: 100.30}, 100.25, (4242,)),
        ({4242}, {4242: 100.25}, 100.25, (4242,)),  # stamped at its end: still its own
        # Its seen end before the line was written: a later writer's, not its.
        ({4242}, {4242: 100.20}, 100.25, ()),
        ({4242}, {}, 100.25, ()),  # its end not seen: it may have ended before the stat
        # Text after the line (the line undated): every byte before its seen end is its own.
        ({4242}, {4242: 100.30}, None, (4242,)),
        ({4242}, {4242: 99.90}, None, ()),  # the log last written after its seen end
        (set(), {4242: 100.30}, 100.25, ()),  # not one of this run's ended processes
    ],
)
def test_a_process_that_ended_inside_the_last_probe_wrote_a_line_stamped_before_its_seen_end(
    ended: set[int], ends: dict[int, float], at: float | None, writers: tuple[int, ...]
) -> None:
    assert _line_found(frozenset(ended), ends, at) == writers


def test_a_line_already_in_the_log_at_the_last_read_is_not_an_ended_process_s() -> None:
    """Found anew (the log's memory set aside), a line that was there at the last read is no
    sign that a process alive at the check before lived when it was written: a re-run's rank
    begun after run 1's line and killed later, its end after that line, took it for its own
    (tests/test_fuzz_span_routes.py seed 195: complete on run 1's line)."""
    assert _line_found(frozenset({4242}), {4242: 100.30}, 100.25, read=100) == ()
    assert _line_found(frozenset({4242}), {4242: 100.30}, 100.25, read=99) == (4242,)


def test_the_processes_gone_since_the_check_before_are_the_next_checks_ended(tmp_path: Path) -> None:
    """ProcessMemory.run_ended, read from real processes: alive at one check and gone at the
    next is that check's ``run_ended`` (the check after reads it as ``JobView.ended``); gone
    two checks ago is no longer, also once no process of the run is left."""
    import subprocess
    import uuid

    from sensors._check.checker import Checker
    from sensors._config.stage import stage_from_dict

    tag = f"ended-{uuid.uuid4().hex[:8]}"
    script = f"import time; time.sleep(60)  # {tag}"
    jobs = [subprocess.Popen([sys.executable, "-c", script]) for _ in range(2)]
    try:
        stage = stage_from_dict({"stage": tag, "host": "local", "process": {"match": tag}})
        with Checker(stage) as checker:
            checker.check()
            first = checker._memory.signals["process"]
            assert set(first.run_pids) == {j.pid for j in jobs} and first.run_ended == ()
            jobs[0].kill()
            jobs[0].wait()
            checker.check()
            second = checker._memory.signals["process"]
            assert second.run_pids == (jobs[1].pid,) and second.run_ended == (jobs[0].pid,)
            view = _job_view(checker.last.readings["process"], second, second)
            assert view is not None and view.ended == frozenset({jobs[0].pid})
            checker.check()
            assert checker._memory.signals["process"].run_ended == ()
            # The last one gone: found so once, then no longer (no process of the run left).
            jobs[1].kill()
            jobs[1].wait()
            checker.check()
            assert checker._memory.signals["process"].run_ended == (jobs[1].pid,)
            checker.check()
            assert checker._memory.signals["process"].run_ended == ()
    finally:
        for job in jobs:
            job.kill()
            job.wait()


def _writers_of_a_new_line(job: JobView, memory: LogMemory | None = None) -> tuple[int, ...]:
    """The writers of a completion line the log's last bytes (stamped 100.25, ending at 100),
    appended since the last read (the log then 90 bytes: ``memory``)."""
    st = _LogStat(inode=1, size=100, mtime=100, birth=50.0, written=100.25, resolution=1e-9, stamp="s")
    scan = _LogScan(
        complete_line="DONE", complete_end=100, error_line=None, earlier_complete=None,
        earlier_is_last=False, progress=None, last_line="DONE", partial=False,
    )  # fmt: skip
    memory = memory or LogMemory(inode=1, size=90, run_from=0, scanned="1 90")
    return _whose(memory, scan, st, "DONE", 100, job, None, 101.0).writers


@pytest.mark.parametrize(
    ("at_read", "memory", "writers"),
    [
        # Alive when the last check read the log without the line: its writer.
        ({4242}, None, (4242,)),
        # Found by that check's /proc scan only, begun after its read of the log: a re-run
        # begun between the stat and the scan may find its predecessor's line, written in
        # between (fuzzer seed 8200018, a slow probe under load).
        (set(), None, ()),
        # The log not read by this memory before (added to the stage since: the process's
        # memory kept, the log's fresh): that check found no line of nothing.
        ({4242}, LogMemory(), ()),
        # The line already there at the last read: no sign it came after.
        ({4242}, LogMemory(inode=1, size=100, run_from=0, scanned="1 100"), ()),
        # The log absent at the last read: every line of it came since.
        ({4242}, LogMemory(absent=True, run_from=0), (4242,)),
    ],
)
def test_a_process_alive_at_the_last_check_wrote_a_new_line_only_if_alive_at_its_read(
    at_read: set[int], memory: LogMemory | None, writers: tuple[int, ...]
) -> None:
    job = JobView(previous=frozenset({4242}), at_read=frozenset(at_read))
    assert _writers_of_a_new_line(job, memory) == writers


def test_alive_at_the_read_is_seen_at_the_check_before_or_begun_clearly_before_the_clock_read() -> None:
    """ProcessMemory.run_at_read: a process of this run alive at this check, and at the check
    before (the same identity) or begun clearly before this probe's clock read, to the
    start's measured precision (the files are read after that clock read). One begun within
    that precision (or after) is too, unless a process of the job seen at the last check is
    gone: then the line may be that one's, left between the read and the scan."""
    from types import SimpleNamespace
    from typing import Any, cast

    from sensors._signals.process import ProcessMemory, _alive_at_read

    meta = Meta(now=1000.0, uptime=500.0, btime=500, boot_id="b", clk_tck=100, script_pid=1,
                hostname="h", uptime_virtualised=False, uptime_before=499.995)  # fmt: skip
    slack = start_precision(meta)
    starts = {1: 990.0, 2: 1000.0 - slack / 2, 3: 1000.2, 4: 1000.2, 5: 900.0}
    job = SimpleNamespace(
        alive=frozenset(starts),
        pids=frozenset(starts),
        earlier=frozenset({5}),  # an earlier run's: no process of this run
        processes=[{"pid": pid, "started_at": at} for pid, at in starts.items()],
    )
    # Pid 6, seen at the last check, is gone: only those seen then, or begun clearly before.
    gone = ProcessMemory(run_pids=(4, 6), job_pids=(4, 6))
    assert _alive_at_read(cast(Any, job), gone, meta) == (1, 4)
    # Nothing of the job gone since: every live process of this run.
    assert _alive_at_read(cast(Any, job), ProcessMemory(run_pids=(4,), job_pids=(4,)), meta) == (1, 2, 3, 4)
    assert _alive_at_read(cast(Any, job), ProcessMemory(), meta) == (1, 2, 3, 4)
