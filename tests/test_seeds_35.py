"""Histories the fuzzer found, replayed whole through its world (real processes, files, a
stand-in supervisor; the real Checker), each graded by its two-sided oracle: no false
``complete`` or ``failed``, and every watch the evidence settles completes within 3 checks.
One history each (~5-10 s): the class each stands for is tested on the real CLI elsewhere.
"""

from __future__ import annotations

import pytest

from tests.fuzz.history import run_seeds

#: The found histories, each with what it found and what became of it.
SEEDS = [
    # A launched run 2 exits 0; run 3 (not launched) begins at once, appends its progress and
    # its own completion line, all before a watch bound to the launch reads the log again,
    # whose file times are an hour ahead (another clock: they date nothing against the
    # recorded exit). The last line was taken for the launched run's word: complete while
    # run 3 worked on. A second completion line read after the exit on such a clock is no
    # longer the launched run's.
    8001198,
    # Run 1 writes its line and exits; run 2 begins ~20 ms later, appends text and no line,
    # exits 0. Its start within /proc's precision of the log's birth passed for the
    # log's opener (7 hard false completes) until the kernel's view of who began the log
    # was asked for (tests/test_log_holders.py).
    1300210,
    # A docker job watched with a since: its summary after its completion line, written
    # before the container's recorded end, is the run's own, whatever names the run
    # (missed: unknown for good, the recorded end counted only for a run the record began).
    1800023,
    # A docker job writing JSONL records, watched with a since: the check that finds the
    # new container counted the records on from the last run's memory, then set it aside
    # and said unknown; the count goes on from it now (it cost a check, settle 2).
    159,
    # A launched re-run watched late by a watch given a since, not the launch: its line
    # the log's last when first read, dated by its mtime 0.4 s after the run's start, then
    # text after it. Its process, begun clearly before the line, is its writer (it needed
    # a whole second: unknown for good).
    2000017,
    # A re-run appending to the log, watched from the moment its completion line was half
    # written ("all s", its newline not yet): the line's end written while watched, the
    # file last written after the run began when first read. It stayed unknown for good,
    # the line begun before the watch's first byte.
    1900030,
    # The log's file times set 30 s back (touch -d: its ctime now), and a watch given a
    # since between two runs: run 2's lines, dated by the mtime before the since, read
    # as an earlier run's, and its exit 0 as "no completion line of this run": failed.
    # A set-back mtime dates nothing now (the line in doubt, as the clock is).
    3001164,
    # A docker job's stage (a log only), a watch whose first look found no log: run 1's
    # container came and went between two checks, run 2's was the first the watch saw,
    # and it exited 0 with no line of its own. The log, absent at the first look, was
    # wholly "the run's": run 1's line completed run 2 (8 hard false completes). The
    # first run a record names, begun after the first check, binds afresh.
    3000987,
    # A docker job's stage with a process match, watched from a probe in a PID namespace
    # of its own: the container's recorded exit 0 takes every process of it along, but
    # "no match" from a probe that cannot see every process stayed unknown (3 missed).
    3000996,
    # A docker job's log-only stage, a --since 1.5 s into the container's life: the
    # container wrote a CUDA error after the since and exited 1. Its record said "an
    # earlier run's end", but the log failed the run the since asked for, not yet begun
    # (false failed). An error line while the supervisor's latest record is an earlier
    # run's is that run's.
    4000132,
    # Three watches on one store; the holder, gone quiet with its lease live, had saved
    # run 2's failed (4 of 6 records). Run 3 wrote all 6 and exited 0. A follower confirms
    # a holder's final verdict by a check from the holder's memory, adopted afresh at every
    # check: run 2's count stayed its "last check", and the follower said "outputs 6/6;
    # confirming they stopped changing" for good (missed). The holder's memory goes on from
    # the follower's last confirmation now; the two disagree until the lease ends.
    4300562,
    # The log's file times set 30 s behind the host's clock (touch -d after each write), a
    # watch given a since (epoch seconds) that saw run 1 write its line and never saw run 2:
    # run 2's progress lines after run 1's line, dated by the set-back mtime before run 1's
    # end, read as run 1's own post-processing, and run 1's line completed run 2, which wrote
    # none (9 hard false completes). A set-back mtime dates the text after the line no
    # earlier than its ctime.
    4701897,
    # An outputs-only stage: run 1 launched and exited 1, run 2 started by hand wrote
    # every output; a watch of the launch whose probe (another user) could not read the
    # exit record completed (12 hard false completes). An unreadable record is unknown.
    4001078,
    # An outputs-only stage, run 2 launched: a resumable job that found every output
    # there, skipped them and exited 0 (recorded). "Nothing ties it to this run", for
    # good: its own exit 0 on record does.
    4000781,
    # A docker stage watched first after container 2 ended, with a since before
    # container 1: container 1's completion line completed container 2, which wrote none
    # (2 hard false completes). The first record a since-bound watch reads is the run.
    4101729,
    # The same route through an edited definition and three runs (7 hard false completes).
    4102031,
    # The same route again (since+docker, serve+docker): 1 and 7 hard false completes at
    # 6f0b386, 0 since 15e895b.
    4102295,
    4102355,
    # Two watches on one store. The holder checked just after run 1, then not until run 3
    # had written its line, text after it ("cleanup done") and exited; the other watched run
    # 3 at work and saw its end, so it could tell the text was run 3's own. The holder, from
    # its memory alone, could not ("which run wrote the line": unknown for good) and kept
    # its lease; its follower's confirmation needed the holder's memory to agree, and said
    # unknown for good too (missed). A doubt of whose the line is vetoes no longer a check
    # that saw its writer and its end.
    8800606,
]


@pytest.fixture(scope="module")
def records() -> dict[int, dict]:
    """Every seed's history, 2 at a time (each waits on real time far more than it works:
    ~8 s, most of it settle gaps and since margins), graded one test each below."""
    return {r["seed"]: r for r in run_seeds(SEEDS, 2)}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_found_history_is_graded_right_on_both_sides(seed: int, records: dict[int, dict]) -> None:
    record = records[seed]
    assert record["errors"] == [], record["errors"]
    assert record["hard"] == 0, [f["text"] for f in record["findings"]][:2]
    assert record["false_failed"] == 0, [f["text"] for f in record["false_failed_findings"]][:2]
    missed = [o for o in record["obligations"] if o["class"] == "must" and o["outcome"] in ("missed", "late")]
    assert not missed, missed
