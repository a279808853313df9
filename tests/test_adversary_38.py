"""Adversary 38: the measured precision of a /proc start (procfs.start_precision, commit
b3d712c) against the kernel's facts and the rules that use it.

The derivation: start = now - uptime + starttime/CLK_TCK, where /proc/uptime is
CLOCK_BOOTTIME rounded down to 10 ms (fs/proc/uptime.c), starttime is start_boottime
rounded down to a tick (nsec_to_clock_t), and /proc/uptime is read before (U0) and after
(U1) `date`: the truth lies in (start - 10 ms, start + (U1 - U0) + 1 tick). It holds only
where ``now`` is to the ns, ``uptime`` is the kernel's boot clock, and the start is read
against /proc/uptime at all (not btime's whole seconds). Table tests on Meta where the
host cannot be made so; real processes where it can.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from sensors._base import tolerances
from sensors._base.probe import Meta, parse_meta
from sensors._signals.base import JobView
from sensors._signals.log import LogMemory, _LogScan, _LogStat, _whose
from sensors._signals.procfs import elapsed, parse_stat_line, start_lead, start_precision
from tests.test_run_model import _meta as model_meta


def _meta(**kw: object) -> Meta:
    # A consistent host: now - uptime - btime within [0, 1 s) (btime is the boot's wall
    # clock rounded down), /proc/uptime read on both sides of `date` within 10 ms.
    return model_meta(**{"now": 1_800_000_000.4, "uptime_before": 5000.0, **kw})


def test_a_consistent_idle_host_measures_about_20_ms() -> None:
    """The commit's claim stands where its premises hold (a control for the rows below)."""
    assert 0.02 <= start_precision(_meta()) <= 0.022


def test_a_date_without_nanoseconds_is_no_20_ms_clock() -> None:
    """BusyBox's `date +%s.%N` prints "1800000000.%N": parse_meta keeps the whole seconds,
    rounded down, so a start read against it is up to a second early. It said 20 ms (the
    span of two /proc/uptime reads); it is good to a second."""
    for shown in (b"1800000000.%N", b"1800000000.N", b"1800000000"):
        meta = parse_meta(b"now " + shown + b"\nuptime_before 5000.00\nuptime 5000.00\nclk_tck 100\n")
        assert meta.now == 1_800_000_000.0
        assert start_precision(meta) >= tolerances.WHOLE_SECOND, shown
    # GNU date's nine digits are the clock to the ns: the measured precision stands.
    meta = parse_meta(b"now 1800000000.400000000\nuptime_before 5000.00\nuptime 5000.00\nclk_tck 100\n")
    assert start_precision(meta) < tolerances.PROC_START_TICKS


def test_a_start_standing_on_btime_alone_is_good_to_a_second() -> None:
    """/proc/uptime unread after `date` (the read before it answered, or neither did), not
    virtualised: elapsed() dates the process by btime's whole seconds, yet the precision
    said 50 ms (PROC_START_TICKS), as if /proc/uptime were there."""
    st = parse_stat_line("42 (job) S 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 400000 0 0")
    for meta in (_meta(uptime=None), _meta(uptime=None, uptime_before=None)):
        age, why = elapsed(st, meta)
        assert why is None and age is not None  # dated, by btime alone
        assert start_precision(meta) >= tolerances.PROC_START_WHOLE_SECONDS


def test_a_proc_uptime_that_runs_backwards_measures_nothing() -> None:
    """/proc/uptime read 300 ms lower after `date` than before it (no kernel's
    CLOCK_BOOTTIME does: a file served by something else, unseen in mountinfo): the span
    was clamped to 0 and the start claimed the tightest precision there is, 20 ms."""
    meta = _meta(uptime_before=5000.3, uptime=5000.0)
    assert start_precision(meta) >= tolerances.PROC_START_WHOLE_SECONDS


def test_a_proc_uptime_that_is_not_this_clocks_boot_clock_is_not_20_ms() -> None:
    """/proc/uptime 12 s off the kernel's boot clock (virtualised where no mount shows it;
    elapsed() believes it within BOOT_CLOCKS_APART, 30 s, and uses it first): a start read
    against it is 12 s off, and it claimed 20 ms. btime, the boot's wall clock to the
    second, shows it: now - uptime must lie within about a second of it."""
    meta = _meta(uptime=4988.0, uptime_before=4988.0)
    assert start_precision(meta) >= 12.0
    # Where it agrees with btime to the second (btime rounded down, read after `date`), the
    # measured precision stands, whatever fraction of the second the boot began at.
    for now in (1_800_000_000.0, 1_800_000_000.5, 1_800_000_000.999):
        assert start_precision(_meta(now=now)) < tolerances.PROC_START_TICKS


def test_the_precision_covers_the_starts_rounding_to_the_ms() -> None:
    """The start is kept rounded to the ms (process._describe): half a ms more either way
    than the derivation's interval; the precision is never rounded below it."""
    for before, tck in ((5000.0, 100), (4999.99, 100), (5000.0, 300), (4999.92, 250)):
        meta = _meta(uptime_before=before, clk_tck=tck)
        bound = (meta.uptime - before) + 0.01 + 1.0 / tck + 0.0005
        assert start_precision(meta) >= bound - 1e-9, (before, tck)


def _log_word(
    birth: float, start: float, followed: bool = True, meta: Meta | None = None, opened: bool = True
):
    """_whose at the first check that finds the line, the job first seen at that check (no
    previous sighting), `nohup job > log`: the log born by the job's shell between its fork
    and its exec, which the kernel shows (``opened``: the job holds it write-only, not
    appending; False: `>> log`, which shows nothing of who began it)."""
    line = "DONE"
    size = 200 if followed else 100
    st = _LogStat(
        inode=1,
        size=size,
        mtime=int(birth) + 30,
        birth=birth,
        written=birth + 30.0,
        resolution=1e-9,
        stamp="s",
    )
    scan = _LogScan(
        complete_line=line,
        complete_end=100,
        error_line=None,
        earlier_complete=None,
        earlier_is_last=False,
        progress=None,
        last_line="cleanup done" if followed else line,
        partial=False,
        followed_by="cleanup done" if followed else None,
    )
    job = JobView(live=frozenset({4242}), starts={4242: start})
    return _whose(
        LogMemory(inode=1, size=0, run_from=0, opened_in_run=opened),
        scan,
        st,
        line,
        100,
        job,
        None,
        birth + 31.0,
        start_slack=start_precision(meta or _meta()),
        lead=start_lead(meta or _meta()),
    )


def test_nohup_job_gt_log_is_its_logs_writer_when_the_births_stamp_lags_a_jiffy() -> None:
    """The headline: `nohup job > log`. The log's birth is stamped from the kernel's coarse
    clock, up to a jiffy or two behind (FILE_TIME_TICK, 20 ms), and the start read from /proc
    up to 10 ms (+ half a ms of rounding) after the truth: the start may read ~30 ms after
    the log's birth. With the measured 20 ms (the fixed 50 ms before), the job was not its
    own log's writer, and its post-processing line after the completion line could not be
    told its own (unattributed: the gate never opens)."""
    truth = 1_800_000_000.0
    word = _log_word(birth=truth - 0.0195, start=round(truth + 0.0099, 3))
    assert word.writers == (4242,)
    assert not word.unattributed
    assert word.complete_line == "DONE"
    # The same times with a log the kernel does not show the job began (`>> log`): a whole
    # earlier run of a few ms fits them as well (fuzzer seed 1300210).
    assert _log_word(birth=truth - 0.0195, start=round(truth + 0.0099, 3), opened=False).writers == ()


def test_a_rerun_begun_well_after_the_logs_birth_is_no_writer_of_it() -> None:
    """The other side stays: a process begun 60 ms after the log was born (a re-run that
    appends to it) is not taken for the writer of every line of it."""
    truth = 1_800_000_000.0
    word = _log_word(birth=truth, start=truth + 0.06)
    assert word.writers == ()


def test_a_real_nohup_job_reads_as_begun_by_its_logs_birth(tmp_path) -> None:
    """Real processes: `nohup sleep > log &` many times; the start read as the probe reads it
    (now - (uptime - starttime/CLK_TCK), /proc/uptime on both sides of `date`) is within the
    log rules' margin of the log's birth (statx btime) every time: late by /proc/uptime's
    rounding at most, the birth early by the coarse clock's lag at most."""
    tck = os.sysconf("SC_CLK_TCK")
    worst = -1.0
    for i in range(40):
        log = tmp_path / f"log{i}"
        proc = subprocess.Popen(["sh", "-c", f"nohup sleep 5 > {log} 2>&1 & echo $!"], stdout=subprocess.PIPE)
        pid = int(proc.stdout.read().strip())  # type: ignore[union-attr]
        proc.wait()
        try:
            time.sleep(0.01)
            out = subprocess.run(
                [
                    "sh",
                    "-c",
                    'read -r a _ </proc/uptime; echo "$a"; date +%s.%N; read -r b _ </proc/uptime; echo "$b";'
                    f" cat /proc/{pid}/stat",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split("\n")
            u0, now, u1 = float(out[0]), float(out[1]), float(out[2])
            st = parse_stat_line(out[3])
            meta = _meta(now=now, uptime=u1, uptime_before=u0, btime=None, clk_tck=tck)
            age, why = elapsed(st, meta)
            assert why is None and age is not None
            start = round(now - age, 3)
            birth = _birth(str(log))
            if birth is None:
                pytest.skip("no birth time on this file system")
            worst = max(worst, start - birth)
            assert start <= birth + start_lead(meta) + tolerances.FILE_TIME_TICK, (
                start,
                birth,
            )
        finally:
            os.kill(pid, 9)
    assert worst > -1.0


def _birth(path: str) -> float | None:
    out = subprocess.run(["stat", "-c", "%.9W", path], capture_output=True, text=True).stdout.strip()
    try:
        value = float(out)
    except ValueError:
        return None
    return value or None


def _bound(birth: float, start: float, meta: Meta | None = None, opened: bool = True, **run: object):
    from sensors._run.run import Run
    from sensors._signals.log import _bind

    st = _LogStat(
        inode=1, size=100, mtime=int(start) + 5, birth=birth, written=start + 5.0, resolution=1e-9, stamp="s"
    )
    if meta is not None:
        run = {"slack": start_precision(meta), "lead": start_lead(meta), **run}
    return _bind(  # type: ignore[arg-type]
        LogMemory(opened_in_run=opened),
        st,
        Run(source="process", started_at=start, **run),
        start + 6.0,
        start + 6.0,
    )


#: A probe whose `date` took 80 ms to fork (a loaded host), and one whose `date` has no %N.
_SLOW_DATE = _meta(uptime_before=4999.92)
_BUSYBOX_DATE = _meta(now=1_800_000_000.0, now_coarse=True)


def test_nohup_job_gt_log_is_bound_whole_when_date_was_slow_at_its_first_sighting() -> None:
    """`nohup job > log`, first seen by a probe whose `date` took 80 ms to fork: the run's
    start carries 101 ms. The log, born a ms after the job's start, was not bound whole (the
    rule asked run.slack <= PROC_START_TICKS, the fixed 50 ms it was written for): the
    completion line the job wrote before this watch first looked was before the run's bytes,
    the gate never opened on it. The span only widens how early the truth may be; how late
    the start may read (10 ms of /proc/uptime's rounding) is the same."""
    truth = 1_800_000_000.0
    assert start_precision(_SLOW_DATE) > tolerances.PROC_START_TICKS
    assert _bound(birth=truth + 0.001, start=round(truth + 0.0099, 3), meta=_SLOW_DATE).run_from == 0


def test_nohup_job_gt_log_is_bound_whole_when_the_births_stamp_lags() -> None:
    """The same, on an idle host (21 ms): the birth stamped from the coarse clock up to
    FILE_TIME_TICK behind, the start read up to 10.5 ms late: ~30 ms apart, past 21 ms."""
    truth = 1_800_000_000.0
    assert _bound(birth=truth - 0.0195, start=round(truth + 0.0099, 3), meta=_meta()).run_from == 0
    # Not where the kernel does not show the job began it (`>> log`): seed 1300210.
    assert (
        _bound(birth=truth - 0.0195, start=round(truth + 0.0099, 3), meta=_meta(), opened=False).run_from != 0
    )


def test_nohup_job_gt_log_is_bound_whole_where_date_has_no_nanoseconds() -> None:
    """BusyBox's date: the start is good to a second (read early, never late: ``now``
    rounded down), yet its own log, born with it, is still its own, as with the fixed 50 ms
    before (a precision of a second would have turned the rule off)."""
    truth = 1_800_000_000.0
    assert start_precision(_BUSYBOX_DATE) >= tolerances.WHOLE_SECOND
    assert _bound(birth=truth - 0.0195, start=round(truth - 0.4, 3), meta=_BUSYBOX_DATE).run_from == 0


def test_a_run_stored_before_the_lead_binds_its_own_log_as_before() -> None:
    """A run kept in a store from before (no lead): its slack stands for both sides."""
    truth = 1_800_000_000.0
    assert _bound(birth=truth - 0.001, start=truth + 0.005, slack=0.05).run_from == 0
    assert _bound(birth=truth - 0.1, start=truth, slack=0.05).run_from != 0


def test_a_log_born_well_before_a_start_is_not_bound_whole_however_slow_date_was() -> None:
    """The other side: a log born 100 ms before the job's start (an earlier run's, appended
    to) is not the job's own, even where `date` was slow and the start's precision wide."""
    truth = 1_800_000_000.0
    for meta in (_meta(), _SLOW_DATE, _meta(uptime_before=4999.7), _BUSYBOX_DATE):
        assert _bound(birth=truth - 0.1, start=truth, meta=meta).run_from != 0, meta
    # Where the start stands on whole seconds (lxcfs), the rule is none of its business.
    assert _bound(birth=truth - 0.001, start=truth, meta=_meta(uptime_virtualised=True)).run_from != 0


def test_a_rerun_begun_a_while_after_the_logs_birth_is_no_writer_however_slow_date_was() -> None:
    """The _whose side of the same: with a slow `date` (precision 0.3 s) a process begun
    200 ms after the log's birth was taken for the writer of every line of it (the window
    was the symmetric precision): it may be a re-run appending to an earlier run's log."""
    truth = 1_800_000_000.0
    word = _log_word(birth=truth, start=truth + 0.2, meta=_meta(uptime_before=4999.7))
    assert word.writers == ()
    # And the job born with its log is its writer, however slow `date` was.
    word = _log_word(birth=truth - 0.0195, start=round(truth + 0.0099, 3), meta=_meta(uptime_before=4999.7))
    assert word.writers == (4242,)


class _Following:
    """Following's confirmation rule alone: a stored final verdict, and the checks this
    watch makes of its own (a table, no store, no host)."""

    def __init__(self, checks):
        from types import SimpleNamespace

        from sensors._check.checker import Following

        class _Rule(Following):
            own_run = None  # told nothing of the run

        self.rule = _Rule()
        self.rule.stage = None  # type: ignore[assignment]
        self.rule.last = None
        self.rule._persist = SimpleNamespace(restore=lambda: SimpleNamespace(memory={}), one_clock=True)  # type: ignore[assignment]
        self.rule._saving = True
        self.rule._told_not_ours = False
        self.rule._checked_here = False
        answers = iter(checks)
        self.rule._check = lambda: next(answers)  # type: ignore[method-assign]

    def confirm(self, followed):
        return self.rule._confirmed(followed, "hostB:42")


def _verdict(state, *reasons, stuck=None):
    from sensors._base.model import State, Verdict

    return Verdict(
        stage="s", state=State(state), reasons=reasons, readings={}, checked_at=1.0, host="h", stuck=stuck
    )


def test_a_holders_stuck_unknown_against_a_check_that_finds_done_is_not_called_failed() -> None:
    """e0f581d: where every check of this watch finds the stage done and the holder's final
    verdict is not complete, the reason says the holder "says failed". A holder's final
    verdict may be an unknown that can never become complete (stuck: a launched run taken
    over by a later one): the sentence shown to a person said the holder failed the stage."""
    from sensors._base.model import State, Stuck

    followed = _verdict(
        "unknown",
        "watched elsewhere by hostB:42: its verdict, not a check of this watch",
        "the launched run's log was taken over by a later run",
        stuck=Stuck("a later run took the log over", "launch it again"),
    )
    got = _Following([_verdict("complete", "every signal done")]).confirm(followed)
    assert got.state is State.UNKNOWN and not got.advance
    assert "says failed" not in got.reasons[0], got.reasons[0]
    assert "unknown" in got.reasons[0], got.reasons[0]


def test_a_holders_failed_against_a_check_that_finds_done_is_unknown_and_says_so() -> None:
    """The commit's own case, as a table (a control for the row above)."""
    from sensors._base.model import State

    followed = _verdict(
        "failed", "watched elsewhere by hostB:42: its verdict, not a check of this watch", "exit 1"
    )
    got = _Following([_verdict("complete", "every signal done")]).confirm(followed)
    assert got.state is State.UNKNOWN and got.stuck is None
    assert got.reasons[0].startswith("watched elsewhere by hostB:42 says failed (exit 1)"), got.reasons[0]


@pytest.mark.parametrize("slow_date", [False, True], ids=["idle", "date-slow-to-fork"])
def test_the_headline_nohup_job_gt_log_first_seen_after_its_line_completes(
    tmp_path, monkeypatch, slow_date
) -> None:
    """Real processes, the real Checker, told nothing: `nohup job > log &`, the job writing
    its completion line and a post-processing line after it before this watch first looks,
    then exiting 0. The job's start is read to the measured precision: its own log is bound
    whole, it is the writer of every line, and the stage completes (several times over, so a
    start read at another moment of the tick is tried). ``date-slow-to-fork``: the probe's
    `date` takes 80 ms (a loaded host), so the start's precision is ~0.1 s: the log-binding
    rule for a job's own log asked for 50 ms at most, and the stage never completed."""
    import uuid

    host = None
    if slow_date:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        date = bin_dir / "date"
        date.write_text('#!/bin/sh\nsleep 0.08\nexec /bin/date "$@"\n')
        date.chmod(0o755)
        if os.geteuid() != 0:
            pytest.skip("needs root to make a mount namespace")
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            pytest.skip(f"no mount namespace here: unshare -m says {probe.stderr.strip()[:200]!r}")
        from sensors._hosts.local import LocalHost

        class _SlowDateHost(LocalHost):
            # The probe sets its own PATH (/usr/local/bin first): in a mount namespace of its
            # own, a `date` that takes 80 ms to start is mounted there, for the probe alone.
            shell = (
                "unshare",
                "-m",
                "sh",
                "-c",
                f"mount --bind {bin_dir} /usr/local/bin && exec /bin/sh -s",
            )

        host = _SlowDateHost()

    from sensors import Checker, State, stage_from_dict
    from sensors.testing import COMPLETE_LINE

    for attempt in range(3):
        tag = f"adv38-{uuid.uuid4().hex[:8]}"
        log = tmp_path / f"job{attempt}.log"
        stage = stage_from_dict(
            {
                "stage": "adv38",
                "host": "local",
                "process": {"match": f"--tag {tag}( |$)"},
                "log": {"path": str(log), "complete": f"^{COMPLETE_LINE}"},
                "policy": {"interval": "100ms", "settle": 1, "exit_grace": "1ms"},
            }
        )
        job = f"printf 'step 1\\n{COMPLETE_LINE}: 6 files\\n'; printf 'cleanup done\\n'; sleep 1.2"
        launcher = subprocess.Popen(
            ["/bin/sh", "-c", f"nohup /bin/sh -c {job!r} --tag {tag} > {log} 2>&1 &"], start_new_session=True
        )
        launcher.wait(5)
        checker = Checker(stage, host=host) if host is not None else Checker(stage)
        try:
            time.sleep(0.4)  # the line and the text after it are there before the first check
            first = checker.check()
            assert first.readings["process"].says.value == "working", first.readings["process"].detail
            assert first.state is not State.COMPLETE
            precision = (first.run or {}).get("precision_s")
            assert precision is not None and (precision >= 0.08) is slow_date, first.run
            deadline = time.monotonic() + 15
            verdict = first
            while time.monotonic() < deadline and not verdict.settled:
                time.sleep(0.2)
                verdict = checker.check()
        finally:
            checker.close()
        assert verdict.state is State.COMPLETE, (attempt, verdict.reasons)
