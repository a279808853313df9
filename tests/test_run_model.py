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
