"""The ground-truth fuzzer's bounded run (issue 21, section 4), and tests of the fuzzer itself.

A fixed range of seeds, each a history of one stage run against real processes, files and
watches (``tests/fuzz``); no history may end in a ``complete`` the truth does not allow. A
failure prints each failing seed's replay script and the verdict. The long run is
``make fuzz``; one seed is ``python -m tests.fuzz --seed N [--print]``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fuzz.generate import generate
from tests.fuzz.history import run_seeds
from tests.fuzz.truth import (
    EITHER,
    HARD,
    MUST,
    NOT,
    OK,
    SOFT,
    Definition,
    RunFacts,
    Scope,
    Sighting,
    Snapshot,
    failed_allowed,
    judge,
    obligation,
)
from tests.fuzz.world import JOB

#: The bounded run: the first seed of each kind of history (``generate(seed).cls``) among
#: seeds 0-63 (15 kinds; seeds 0-23, 37 and 60, its set until 2026-12-07, had no `hidden`
#: one), and seed 61, whose history found a false failed (docs/fuzzer.md): 16 histories,
#: 65 s of CPU (98 s beside an 8-worker fuzz run on 2 cores; most of a history waits on real
#: time: since margins, settle gaps). ``make fuzz`` (seeds 0-9,999) runs them all.
#: CROSSCHECK_FUZZ_HISTORIES=N: seeds 0 to N-1 instead.
_ALSO = (61,)


def _bounded_seeds() -> list[int]:
    if first := int(os.environ.get("CROSSCHECK_FUZZ_HISTORIES", "0")):
        return sorted({*range(first), *_ALSO})
    kinds: dict[str, int] = {}
    for seed in range(64):
        kinds.setdefault(generate(seed).cls, seed)
    return sorted({*kinds.values(), *_ALSO})


BOUNDED_SEEDS = _bounded_seeds()
WORKERS = int(os.environ.get("CROSSCHECK_FUZZ_WORKERS", "4"))


@pytest.mark.timeout(600)
def test_no_history_ends_in_a_false_complete() -> None:
    began = time.monotonic()
    records = run_seeds(BOUNDED_SEEDS, WORKERS)
    elapsed = time.monotonic() - began
    failing = [r for r in records if r["hard"] or r["false_failed"] or r["exit_code_errors"] or r["errors"]]
    report = []
    for r in failing[:8]:
        report.append(f"--- seed {r['seed']} ({r['cls']}): python -m tests.fuzz --seed {r['seed']} --print")
        report.append(generate(r["seed"]).script())
        report += [f["text"] for f in (r["findings"] + r["false_failed_findings"])[:2]]
        report += [f"exit code / advance: {e}" for e in r["exit_code_errors"]]
        report += [f"error: {e}" for e in r["errors"]]
    checks = sum(r["checks"] for r in records)
    assert not failing, (
        f"{len(failing)} of {len(records)} histories failed ({checks} checks, {elapsed:.0f}s);"
        f" seeds {[r['seed'] for r in failing]}\n" + "\n".join(report)
    )
    # The run must have exercised complete: a fuzzer whose watches never complete proves nothing.
    assert sum(r["completes"] for r in records) > len(records)


# --------------------------------------------------------------------------- the fuzzer itself


def test_a_seed_is_one_history_every_time() -> None:
    assert generate(7).script() == generate(7).script()
    assert generate(7).script() != generate(8).script()
    for seed in range(40):
        compile(generate(seed).script(), f"seed-{seed}", "exec")  # the replay script is Python


def _snap(*runs: RunFacts, files: int = 4) -> Snapshot:
    return Snapshot(tuple(runs), files, 0)


FINISHED = RunFacts(1, started=100.0, ended=110.0, status=0, text="[4/4]\nExtraction complete\n")
FULL = Definition(signals=("process", "log", "outputs"), expected=4)


@pytest.mark.parametrize(
    ("snap", "definition", "scope", "seen", "kind"),
    [
        pytest.param(_snap(FINISHED), FULL, Scope(), {1}, OK, id="a finished run"),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, text="[1/4]\n")),
            FULL, Scope(), {1}, HARD, id="a re-run writing progress",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9)),
            FULL, Scope(), {1}, OK, id="a re-run that left no trace is no evidence",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9)),
            FULL, Scope(), {1, 2}, HARD, id="a re-run seen alive, killed",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9, count_trace=True)),
            FULL, Scope(), {1}, SOFT, id="a re-run that only rewrote outputs, killed",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9, count_trace=True), files=2),
            FULL, Scope(), {1}, HARD, id="a re-run that cleaned the outputs, killed",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 0)), Definition(signals=("process",)), Scope(), set(), OK,
            id="a run never seen that exited 0: the plain truth allows",
        ),
        pytest.param(_snap(FINISHED), FULL, Scope(since_lo=115.0), {1}, HARD, id="since after the last run: queued"),
        pytest.param(
            _snap(FINISHED), FULL, Scope(since_lo=105.0), {1}, HARD,
            id="since while it ran: a since is the run's start, the run alive at it an earlier one",
        ),
        pytest.param(_snap(FINISHED, files=3), FULL, Scope(), {1}, HARD, id="outputs short"),
        pytest.param(
            _snap(FINISHED), Definition(expected=5), Scope(), {1}, HARD, id="expected raised by an edit",
        ),
        pytest.param(
            _snap(FINISHED), Definition(complete="^Done"), Scope(), {1}, HARD, id="complete regex edited",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, text="Extraction complete\n")),
            FULL, Scope(probe="hidepid"), set(), HARD, id="post-processing, hidden from the probe",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, text="Extraction complete\n")),
            Definition(signals=("log", "outputs")), Scope(), set(), SOFT, id="post-processing, no process section",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, -9)), Definition(signals=("process",)), Scope(), {1}, HARD,
            id="process-only, SIGKILLed",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, -9, text="Extraction complete\n")),
            FULL, Scope(), {1}, SOFT, id="declared, then killed",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 130.0, 0, launched=True, text="Extraction complete\n"),
                  RunFacts(3, 140.0, text="[1/4]\n")),
            FULL, Scope(launched=2), {2}, HARD, id="the launched run superseded",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9, text="shard 0 opened\n")),
            FULL, Scope(), {1}, OK, id="text after the completion line reads as post-processing",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9, text="shard 0 opened\n")),
            Definition(progress=False), Scope(), {1}, HARD, id="any text marks a run without a progress pattern",
        ),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, 121.0, -9, text="\n   \n")),
            Definition(progress=False), Scope(), {1}, OK, id="whitespace is evidence of nothing",
        ),
    ],
)  # fmt: skip
def test_the_truth(snap, definition, scope, seen, kind) -> None:
    assert judge(snap, definition, scope, frozenset(seen)).kind == kind


def test_a_long_run_stopped_with_sigterm_leaves_no_world_behind(tmp_path) -> None:
    """``python -m tests.fuzz`` stopped by SIGTERM mid-history (a CI job cancelled, ``kill``):
    the pool's terminate sends SIGTERM to its workers, and a worker that dies of it at once
    runs no ``finally``: the history's directory (its log, stage files, state store) stays
    behind, with anything its world started that does not end on its own (a ``wait`` runs to
    its timeout). Each worker ends its history as a history ends (``World.close``) first."""
    tmp_path.chmod(0o755)
    mark = f"fuzz-stop-{time.time_ns()}"
    env = {**os.environ, "TMPDIR": str(tmp_path), "CROSSCHECK_FUZZ_STOP_MARK": mark}
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fuzz",
            "--histories",
            "3",
            "--workers",
            "1",
            "--first-seed",
            "987650",
            "--quiet",
        ],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("crosscheck-fuzz-*")):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()[0][-2000:]
            time.sleep(0.1)
        time.sleep(2)  # well into the first history: its job and watches at work
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 1, out[-2000:]
    assert "interrupted: 0 of 3 histories ended; not a whole run" in out, out[-2000:]
    time.sleep(0.5)
    left = [p.name for p in tmp_path.iterdir()]
    assert left == [], left
    assert not _marked(mark), _marked(mark)


def _marked(mark: str) -> list[str]:
    """The live processes whose environment carries ``CROSSCHECK_FUZZ_STOP_MARK=mark``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes()
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"CROSSCHECK_FUZZ_STOP_MARK={mark}".encode() in env.split(b"\0"):
            found.append(f"{proc.name} {cmd[:120]}")
    return found


def test_the_job_writes_only_when_told(tmp_path) -> None:
    log, out = tmp_path / "job.log", tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-I",
            "-S",
            "-u",
            JOB,
            "--tag",
            "t",
            "--log",
            str(log),
            "--out",
            str(out),
            "--mode",
            "skip",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    assert log.read_bytes() == b""
    for command, answer in [("log [1/2]", "ok"), ("write Extr", "ok"), ("out 2", "ok"), ("exit 3", "bye")]:
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == answer
    assert proc.wait(10) == 3
    assert log.read_bytes() == b"[1/2]\nExtr"
    assert sorted(p.name for p in out.iterdir()) == ["00000.pt", "00001.pt"]


# --------------------------------------------------------------------------- the other side


def _saw(*runs: int, at: float = 105.0, snap: Snapshot | None = None) -> tuple[Sighting, ...]:
    return (Sighting(at, frozenset(runs), snap or _snap(RunFacts(1, 100.0, text="[1/4]\n"))),)


RERUN = RunFacts(2, started=120.0, ended=130.0, status=0, text="[4/4]\nExtraction complete\n")


@pytest.mark.parametrize(
    ("snap", "definition", "scope", "sightings", "clean", "kind"),
    [
        pytest.param(_snap(FINISHED), FULL, Scope(), _saw(1), True, MUST, id="seen alive, exited 0: must"),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 0, text="Extraction complete\nwandb: Synced\n")),
            FULL, Scope(), _saw(1), True, MUST, id="text after the completion line: still must",
        ),
        pytest.param(_snap(FINISHED), FULL, Scope(), (), True, EITHER, id="never seen, nothing names it"),
        pytest.param(_snap(FINISHED), FULL, Scope(since_lo=90.0), (), True, MUST, id="wholly after the since"),
        pytest.param(
            _snap(FINISHED), FULL, Scope(since_lo=100.5), _saw(1), True, EITHER,
            id="begun within the since's slack: either, a sighting does not override it",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 0, launched=True, recorded=True, text="Extraction complete\n")),
            Definition(signals=("process",)), Scope(launched=1, probe="pidns"), (), True, EITHER,
            id="launched, exit recorded, its processes out of the probe's sight: either (what it left at work is unseen)",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 0, launched=True, recorded=True, text="Extraction complete\n")),
            Definition(signals=("process",)), Scope(launched=1, probe="hidepid"), (), True, EITHER,
            id="launched, exit recorded where the probe's user cannot read it: either (seed 2200111)",
        ),
        pytest.param(
            _snap(FINISHED), Definition(signals=("process",)), Scope(), _saw(1), True, EITHER,
            id="process-only, no record: an exit and a kill look alike",
        ),
        pytest.param(_snap(FINISHED), FULL, Scope(probe="pidns"), _saw(1), True, EITHER, id="a probe that cannot see"),
        pytest.param(_snap(FINISHED), FULL, Scope(), _saw(1), False, EITHER, id="a skewed file clock"),
        pytest.param(
            _snap(FINISHED, replace(RERUN, started=110.02)), FULL, Scope(), _saw(2), True, EITHER,
            id="begun within 50 ms of the last run's end",
        ),
        pytest.param(
            _snap(FINISHED, RERUN), FULL, Scope(),
            _saw(2, snap=_snap(FINISHED, RunFacts(2, 120.0, text="[1/4]\n"))), True, MUST,
            id="an earlier line, the run seen before its own",
        ),
        pytest.param(
            _snap(FINISHED, RERUN), FULL, Scope(), _saw(2, snap=_snap(FINISHED, RERUN)), True, EITHER,
            id="an earlier line, the run first seen after its own",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 101.0, 0, text="[4/4]\n"), replace(RERUN, started=102.0, ended=103.0)),
            FULL, Scope(since_lo=100.2), (), True, EITHER,
            id="a since inside run 1, which wrote after it, run 2 never seen: either (seed 2300028)",
        ),
        pytest.param(
            _snap(replace(FINISHED, line_times=(100.01, 100.03))), FULL, Scope(),
            _saw(1, snap=_snap(replace(FINISHED, ended=None))), True, EITHER,
            id="first seen after its line, written 30 ms after its start: either (seed 2300015)",
        ),
        pytest.param(
            _snap(replace(FINISHED, line_times=(100.5, 101.0))), FULL, Scope(),
            _saw(1, snap=_snap(replace(FINISHED, ended=None))), True, MUST,
            id="first seen after its line, written 1 s after its start: must",
        ),
        pytest.param(_snap(FINISHED, files=3), FULL, Scope(), _saw(1), True, NOT, id="outputs short: must not"),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 1, text="Traceback\n"), replace(RERUN, text="Extraction complete\n[4/4]\n")),
            replace(FULL, supervisor="docker"), Scope(),
            _saw(2, snap=_snap(RunFacts(1, 100.0, 110.0, 1, text="Traceback\n"),
                               RunFacts(2, 120.0, text="Extraction complete\n[4/4]\n"))),
            True, EITHER,
            id="a docker run first seen after its line and more: either, the record dates no line (seed 4700464)",
        ),
    ],
)  # fmt: skip
def test_the_obligation(snap, definition, scope, sightings, clean, kind) -> None:
    lenient = judge(snap, definition, scope).kind == OK
    assert obligation(snap, definition, scope, sightings, clean_clock=clean, lenient_ok=lenient)[0] == kind


_BEFORE_ITS_LINE = _snap(FINISHED, RunFacts(2, 120.0, text="[1/4]\n"))


@pytest.mark.parametrize(
    ("under", "kind"),
    [
        pytest.param((FULL,), MUST, id="seen under this definition: must"),
        pytest.param((replace(FULL, expected=6),), MUST, id="under an outputs edit: the sighting stands"),
        pytest.param((replace(FULL, settle=3),), MUST, id="under a policy edit: the sighting stands"),
        pytest.param(
            (replace(FULL, signals=("log", "outputs")),), EITHER,
            id="before a process section was added: set aside, either (seed 8800630)",
        ),
        pytest.param((replace(FULL, match_hits=False),), EITHER, id="under another match: set aside"),
        pytest.param(
            (replace(FULL, complete="^Done"),), EITHER,
            id="under another completion regex: the log's memory set aside (seed 8600405)",
        ),
        pytest.param((FULL, replace(FULL, match_hits=False)), EITHER, id="a serve check near the edit: either one"),
    ],
)  # fmt: skip
def test_a_sighting_under_another_version_of_the_stage_names_no_run(under, kind) -> None:
    """The run seen at work before its line, then its line after an earlier run's: must
    complete where the sighting is this definition's. The product sets aside the memory of
    another version's process or log section (docs/state-store.md), and so does the oracle."""
    sightings = (Sighting(125.0, frozenset({2}), _BEFORE_ITS_LINE, under),)
    lenient = judge(_snap(FINISHED, RERUN), FULL, Scope()).kind == OK
    assert obligation(_snap(FINISHED, RERUN), FULL, Scope(), sightings, lenient_ok=lenient)[0] == kind


@pytest.mark.parametrize(
    ("snap", "definition", "scope", "allowed"),
    [
        pytest.param(_snap(FINISHED), FULL, Scope(), False, id="exited 0, meets the definition"),
        pytest.param(_snap(RunFacts(1, 100.0, text="[1/4]\n")), FULL, Scope(), False, id="alive and clean"),
        pytest.param(_snap(RunFacts(1, 100.0, 110.0, 1)), FULL, Scope(), True, id="exited 1"),
        pytest.param(_snap(RunFacts(1, 100.0, text="Traceback\n")), FULL, Scope(), True, id="an error line"),
        pytest.param(_snap(FINISHED, files=2), FULL, Scope(), True, id="exited 0, outputs short"),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 1), RunFacts(2, 120.0, text="[0/4]\n")), FULL, Scope(), False,
            id="a re-run alive after a failed run",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 110.0, 1)), FULL, Scope(since_lo=115.0), False,
            id="a run begun before the since failed: not the run asked for",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 120.0, 1, text="[3/4]\nTraceback\n")), FULL, Scope(since_lo=115.0), False,
            id="alive at the since, failed after it, a process section sees it: not the run asked for",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, 120.0, 1, text="[3/4]\nTraceback\n")),
            Definition(signals=("log", "outputs"), expected=4), Scope(since_lo=115.0), True,
            id="alive at the since, failed after it, no process section: reads as the run asked for",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, text="[4/4]\nExtraction complete\n"), files=2),
            replace(FULL, match_hits=False), Scope(), True,
            id="alive after its line, outputs short, a match that misses it: reads as ended short (seed 4202171)",
        ),
        pytest.param(
            _snap(RunFacts(1, 100.0, text="[4/4]\nExtraction complete\n"), files=2), FULL, Scope(), False,
            id="alive after its line, outputs short, its process in sight: not failed",
        ),
    ],
)  # fmt: skip
def test_failed_allowed(snap, definition, scope, allowed) -> None:
    assert failed_allowed(snap, definition, scope, frozenset({1, 2}))[0] is allowed


def test_a_since_inside_an_earlier_run_excludes_it() -> None:
    j = judge(
        _snap(RunFacts(1, 100.0, 110.0, 0, text="Extraction complete\n")),
        FULL,
        Scope(since_lo=105.0),
        frozenset({1}),
    )
    assert (j.kind, j.route) == (HARD, "since-inside-earlier-run")


@pytest.mark.parametrize(
    ("ending_from", "ended", "seen", "kind"),
    [
        # Seed 8701256: told to end 0.15 s before the first check's clock read, reaped
        # (under load) 0.05 s after it. Gone from the scan: nothing tells it from a run begun
        # after the since.
        pytest.param(104.5, 104.7, frozenset(), SOFT, id="ended before the first check, reaped after"),
        pytest.param(104.8, 104.9, frozenset(), SOFT, id="ended while the first check scanned"),
        pytest.param(106.0, 106.1, frozenset(), HARD, id="outlived the first check's scan"),
        pytest.param(104.5, 104.7, frozenset({1}), HARD, id="the watch saw it alive"),
        pytest.param(None, 105.3, frozenset(), HARD, id="no exit step recorded: reaped well after the scan"),
    ],
)
def test_a_run_inside_the_since_is_in_view_only_if_it_outlived_the_first_scan(
    ending_from: float | None, ended: float, seen: frozenset[int], kind: str
) -> None:
    run = RunFacts(1, 100.0, ended, 0, ending_from=ending_from, text="Extraction complete\n")
    j = judge(_snap(run), FULL, Scope(since_lo=102.0, first_check=104.65), seen)
    assert j.kind == kind, j.why


def test_a_launched_run_with_its_exit_recorded_is_hard_not_soft() -> None:
    run = RunFacts(1, 100.0, 110.0, 1, launched=True, recorded=True, text="Extraction complete\n")
    assert judge(_snap(run), FULL, Scope(launched=1), frozenset({1})).kind == HARD
    assert judge(_snap(replace(run, recorded=False)), FULL, Scope(launched=1), frozenset({1})).kind == SOFT


# --------------------------------------------------------------------------- supervised runs (issue 36)

SUP = Definition(signals=("process",), supervisor="docker", process_any=True)
SUP_FULL = replace(FULL, supervisor="docker")
UNREADABLE = replace(SUP, record_readable=False)


@pytest.mark.parametrize(
    ("snap", "definition", "scope", "kind"),
    [
        pytest.param(_snap(FINISHED), SUP, Scope(), MUST, id="process: {}, record exited 0: must, never seen"),
        pytest.param(
            _snap(FINISHED), replace(SUP, process_any=False), Scope(probe="pidns"), MUST,
            id="process-only with a match, a probe that cannot see it: the record still says",
        ),
        pytest.param(
            _snap(FINISHED), replace(SUP, process_any=False), Scope(probe="hidepid"), EITHER,
            id="a probe that cannot run the supervisor's tool: no record",
        ),
        pytest.param(_snap(FINISHED), UNREADABLE, Scope(), EITHER, id="an unreadable record: unknown by design"),
        pytest.param(
            _snap(FINISHED), replace(SUP_FULL, record_readable=False), Scope(), EITHER,
            id="an unreadable record with every other signal done: still unknown by design",
        ),
        pytest.param(_snap(RunFacts(1, 100.0, 110.0, -9)), SUP, Scope(), NOT, id="killed (137): never complete"),
        pytest.param(
            _snap(FINISHED, RunFacts(2, 120.0, text="[1/4]\n")), SUP_FULL, Scope(), NOT,
            id="a new container at work: the earlier one's exit never decides",
        ),
    ],
)  # fmt: skip
def test_the_obligation_of_a_supervised_run(snap, definition, scope, kind) -> None:
    lenient = judge(snap, definition, scope).kind == OK
    assert obligation(snap, definition, scope, (), lenient_ok=lenient)[0] == kind


def test_a_supervised_run_that_declared_then_died_is_hard_where_the_record_reads() -> None:
    run = RunFacts(1, 100.0, 110.0, -9, text="Extraction complete\n")
    assert judge(_snap(run), SUP_FULL, Scope()).kind == HARD
    assert judge(_snap(run), replace(SUP_FULL, record_readable=False), Scope()).kind == SOFT
    # Alive where no process section looks: the record says running.
    alive = RunFacts(1, 100.0, text="Extraction complete\n")
    assert judge(_snap(alive), replace(SUP_FULL, signals=("log", "outputs")), Scope()).kind == HARD
    assert judge(_snap(alive), replace(FULL, signals=("log", "outputs")), Scope()).kind == SOFT
    # A container that died without a trace is still the latest run: the record names it.
    gone = RunFacts(2, 120.0, 121.0, -9)
    assert judge(_snap(FINISHED, gone), SUP_FULL, Scope(), frozenset({1})).kind == HARD
    assert failed_allowed(_snap(FINISHED, gone), SUP_FULL, Scope(), frozenset({1}))[0]
