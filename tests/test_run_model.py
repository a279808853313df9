"""The run model's pure parts (``sensors._run``): its table of tolerances and its moments.

Table tests, no clocks, no processes: what the signals use to tie evidence to a run.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from sensors._run import tolerances
from sensors._run.tolerances import TABLE, Tolerance

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
        assert (row.name, row.value, row.unit) == (name, value, "s")
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
