"""What the Prefect layer shows a person, without Prefect: facts in words, the incident-2
line, the picture of a wait. Table-driven, on hand-built readings."""

from __future__ import annotations

import base64
import re
import time
import xml.etree.ElementTree as ET

import pytest

from sensors._base.model import Reading, Says, State, Verdict
from sensors._present.evidence import age, facts, still_working
from sensors._present.picture import WaitHistory, data_url, wait_svg

NOW = time.time()


@pytest.mark.parametrize(
    ("signal", "evidence", "expected"),
    [
        (
            "process",
            {"pid": 4455, "state": "R", "cpu_seconds": 2761.0, "elapsed_seconds": 9120, "io_bytes": None},
            "pid 4455 · R · CPU 2,761 s · 2 h 32 m old",
        ),
        ("process", {"alive": 0, "matched": 0, "pid": None}, "no process running"),
        (
            "log",
            {
                "last_line": "[5/6] ETA 0 minutes",
                "age_seconds": 12.4,
                "mtime": 1796112373,
                "error_line": None,
            },
            'last "[5/6] ETA 0 minutes" · written 12 s ago',
        ),
        (
            "outputs",
            {"count": 37311, "expected": 37312, "pattern": "*.pt"},
            "37,311 of 37,312 (99.99 %) · *.pt",
        ),
        (
            "gpu",
            {
                "devices": [{"utilization_pct": 97.0}, {"utilization_pct": None}],
                "job_memory_mib": 12288,
                "samples": 3,
            },
            "util 97/? % · job holds 12 GiB · 3 samples",
        ),
    ],
)
def test_facts_are_words_and_units(signal: str, evidence: dict, expected: str) -> None:
    text = facts(Reading(signal, Says.WORKING, "", evidence))
    assert text == expected
    assert "None" not in text and "{" not in text and not re.search(r"\b1[6-9]\d{8}\b", text)


def test_age_reads_in_units() -> None:
    assert [age(s) for s in (12, 2761, 9120, 3 * 86400 + 4 * 3600)] == [
        "12 s",
        "46 m 1 s",
        "2 h 32 m",
        "3 d 4 h",
    ]


def _verdict(
    state: State, cpu: float, line: str = "[5/6] ETA 0 minutes", count: int = 5, at: float = NOW
) -> Verdict:
    readings = {
        "process": Reading("process", Says.WORKING, "", {"pid": 4455, "state": "R", "cpu_seconds": cpu}),
        "log": Reading("log", Says.WORKING, "", {"last_line": line, "age_seconds": 30.0}),
        "outputs": Reading("outputs", Says.WORKING, "", {"count": count, "expected": 6}),
    }
    return Verdict("extract", state, ("r",), readings, at, "local")


def test_still_working_says_incident_2_only_while_it_happens() -> None:
    first, later = _verdict(State.RUNNING, 10.0), _verdict(State.RUNNING, 12.0)
    line = still_working(later, first)
    assert line == (
        "log says '[5/6] ETA 0 minutes', outputs 5/6, but pid 4455 is in state R with CPU 12 s, "
        "up 2.0 s since the last check: still working, the gate waits"
    )
    assert still_working(_verdict(State.RUNNING, 10.0), later) is None  # CPU did not rise
    # "Still working" claims progress: never on a first check (nothing to compare) nor for a
    # job asleep whose CPU time stands still (issue 22: "CPU 0.0 s and rising", state S).
    assert still_working(first, None) is None
    asleep = _verdict(State.RUNNING, 0.0)
    assert still_working(asleep, _verdict(State.RUNNING, 0.0)) is None
    other = Verdict(
        "extract",
        State.RUNNING,
        ("r",),
        {
            **first.readings,
            "process": Reading("process", Says.WORKING, "", {"pid": 9999, "state": "R", "cpu_seconds": 1.0}),
        },
        NOW,
        "local",
    )
    assert still_working(later, other) is None  # another process: no rise of this one measured
    assert still_working(_verdict(State.STALLED, 13.0), later) is None
    assert still_working(_verdict(State.RUNNING, 13.0, line="[2/6] ETA 9 minutes", count=2), later) is None


def test_the_picture_is_one_small_svg_with_a_band_per_verdict() -> None:
    history = WaitHistory(limit=16)
    states = [State.RUNNING] * 10 + [State.STALLED] * 30 + [State.COMPLETE]
    for i, state in enumerate(states):
        if state is State.COMPLETE:
            done = {n: Reading(n, Says.DONE, "", {}) for n in ("process", "log", "outputs")}
            history.add(Verdict("extract", state, ("every signal says done",), done, NOW + i, "local"))
        else:
            history.add(_verdict(state, float(i), at=NOW + i))
    assert len(history.samples) <= 16  # bounded: old samples thinned
    svg = wait_svg(history.samples, title='extract <&> "x"')
    root = ET.fromstring(svg)  # well-formed XML, the title escaped
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert {"running", "stalled", "complete"} <= set(texts)
    assert "CPU time (s)" in texts and "outputs written" in texts and "log age (s)" in texts
    assert "GPU utilisation (%)" not in texts  # no GPU readings: no empty panel
    assert len(svg) < 20_000
    assert base64.b64decode(data_url(svg).split(",", 1)[1]).decode() == svg


def _span_verdict(state: State, at: float, cpu: dict[str, float], gpu: dict[str, float]) -> Verdict:
    """A verdict across hosts as ``decide_across`` writes it: each host's readings keyed
    ``SIGNAL@HOST``, the shared outputs once."""
    readings = {"outputs": Reading("outputs", Says.WORKING, "", {"count": 1, "expected": 2})}
    for host in cpu:
        readings[f"process@{host}"] = Reading("process", Says.WORKING, "", {"cpu_seconds": cpu[host]})
        readings[f"gpu@{host}"] = Reading(
            "gpu", Says.WORKING, "", {"devices": [{"utilization_pct": gpu[host]}, {"utilization_pct": 3.0}]}
        )
    return Verdict("train", state, ("r",), readings, at, ", ".join(cpu))


def test_the_picture_of_a_stage_over_several_hosts_has_a_line_per_host() -> None:
    """Issue 25: the picture of a stage over several hosts draws each host's CPU time and GPU
    use as a line of its own, named (before, no host's readings were drawn at all: they are
    keyed ``process@HOST``), and keeps them through a watcher's handoff (its JSON)."""
    history = WaitHistory(limit=16)
    for i in range(6):
        # gpu-02 stops making progress after the third check: its line goes flat.
        cpu = {"gpu-01": 10.0 * i, "gpu-02:2202": 10.0 * min(i, 2)}
        history.add(_span_verdict(State.RUNNING, NOW + i, cpu, {"gpu-01": 90.0, "gpu-02:2202": 100.0}))
    again = WaitHistory.from_json(history.to_json())
    assert again is not None and again.samples == history.samples
    svg = wait_svg(again.samples, title="train")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert "CPU time (s)" in texts and "GPU utilisation (%)" in texts and "outputs written" in texts
    assert "log age (s)" not in texts  # no log read: no empty panel
    assert texts.count("gpu-01") == 2 and texts.count("gpu-02:2202") == 2  # CPU and GPU panels
    lines = root.findall(f".//{ns}polyline")
    assert len(lines) == 5  # outputs once; CPU and GPU, one line per host
    assert len({line.get("stroke") for line in lines}) >= 2
    # A one-host history from before (six values per sample) still reads.
    old = {"checks": 1, "first_at": NOW, "samples": [[NOW, "running", 1.0, 2.0, 3.0, 4.0]]}
    (sample,) = WaitHistory.from_json(old).samples  # type: ignore[union-attr]
    assert sample.per_host == () and sample.cpu_seconds == 1.0


def test_the_evidence_table_of_a_stage_over_several_hosts_has_a_row_per_host_and_rank() -> None:
    """Issue 25: a row per host's signal, and under each host's process row a row per rank
    (a live match whose parent is not matched: a rank's DataLoader worker is not a rank)."""
    from sensors._present.evidence import evidence_rows

    listed = [
        {"pid": 11, "ppid": 1, "state": "R", "cpu_seconds": 120.0, "elapsed_seconds": 600.0},
        {"pid": 12, "ppid": 1, "state": "S", "cpu_seconds": 118.0, "elapsed_seconds": 600.0},
        {"pid": 13, "ppid": 11, "state": "S", "cpu_seconds": 4.0, "elapsed_seconds": 590.0},  # a worker
    ]
    process = Reading("process", Says.WORKING, "3 alive", {"alive": 3, "matched": 3, "processes": listed})
    verdict = Verdict(
        "train",
        State.RUNNING,
        ("r",),
        {"process@gpu-01": process, "process@gpu-02": Reading("process", Says.UNKNOWN, "unreachable", {})},
        NOW,
        "gpu-01, gpu-02",
    )
    rows = evidence_rows(verdict)
    assert [r["signal"] for r in rows] == [
        "process@gpu-01",
        "process@gpu-01 rank pid 11",
        "process@gpu-01 rank pid 12",
        "process@gpu-02",
    ]
    assert rows[1]["facts"].startswith("pid 11 · R · CPU 120 s"), rows[1]
    # One host's stage keeps its one row.
    one = Verdict("x", State.RUNNING, ("r",), {"process": process}, NOW, "local")
    assert [r["signal"] for r in evidence_rows(one)] == ["process"]


def test_a_hosts_ranks_past_the_listed_processes_are_counted_by_the_probe() -> None:
    """2 ranks with 9 DataLoader workers each: the probe lists 16 of 20 matches. The table
    listed the ranks among those 16 and no word that there were more (the "N more" row counted
    only listed processes, never more than 16): it now gives the probe's own count."""
    from sensors._present.evidence import evidence_rows

    listed = [{"pid": 100, "ppid": 1, "state": "R"}] + [
        {"pid": 101 + k, "ppid": 100, "state": "S"} for k in range(9)
    ]
    listed += [{"pid": 200, "ppid": 1, "state": "R"}] + [
        {"pid": 201 + k, "ppid": 200, "state": "S"} for k in range(5)
    ]
    process = Reading(
        "process", Says.WORKING, "20 alive", {"alive": 20, "matched": 20, "ranks": 2, "processes": listed}
    )
    verdict = Verdict("train", State.RUNNING, ("r",), {"process@gpu-01": process}, NOW, "gpu-01, gpu-02")
    rows = evidence_rows(verdict)
    assert [(r["signal"], r["facts"]) for r in rows[1:] if "rank pid" not in r["signal"]] == [
        ("process@gpu-01 ranks", "2 alive in all; 20 processes matched, 16 listed")
    ]
    assert [r["signal"] for r in rows if "rank pid" in r["signal"]] == [
        "process@gpu-01 rank pid 100",
        "process@gpu-01 rank pid 200",
    ]
