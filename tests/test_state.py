"""Gates that survive restarts: a stage's memory in the state store (real SQLite, the real CLI).

A watch SIGKILLed and started again goes on from what the first one saw: the same run, a
stall dated from its real start, a job that died while nothing watched is failed, not
unknown. A corrupt store never crashes a watch and never completes a stage by itself.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from sensors import Checker, Says, State, stage_from_dict
from sensors._check.codec import dumps, loads
from sensors._store import open_store
from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent


def _env(state: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(state)}


def _cli(state: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(state),
    )


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _killed_mid_watch(state: Path, stage_file: Path, seconds: float) -> list[dict]:
    """`crosscheck wait --json` for a while, then SIGKILL: the verdicts it printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sensors", "wait", str(stage_file), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(state),
    )
    time.sleep(seconds)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=10)
    return _json_lines(out)


def test_a_wait_killed_and_started_again_keeps_the_run_and_the_stalls_real_start(tmp_path) -> None:
    state = tmp_path / "state.db"
    job = SimulatedJob(tmp_path, scenario="stall", total=6, step=0.02)
    job.start()
    try:
        stage_file = job.write_stage(tmp_path / "s.yaml", interval="300ms", stall_after="6s", timeout="40s")
        before = _killed_mid_watch(state, stage_file, 4.0)
        assert before and before[-1]["verdict"] == "running", before[-1:]
        run = before[-1]["run"]
        assert run["source"] == "process"
        # Started again ~4 s after the stall began: stalled ~2 s later, not stall_after (6 s).
        out = _cli(state, "wait", str(stage_file), "--json", "--timeout", "5s")
        after = _json_lines(out.stdout)
        assert after[0]["run"] == run  # the same run: restored, not found anew
        stalled = [v for v in after if v["verdict"] == "stalled"]
        assert stalled, [v["verdict"] for v in after]
        first, stall = (datetime.fromisoformat(v["checked_at"]) for v in (after[0], stalled[0]))
        assert (stall - first).total_seconds() < 4.0, [v["verdict"] for v in after]
    finally:
        job.stop()


def test_a_job_killed_while_no_watch_ran_is_failed_not_unknown(tmp_path) -> None:
    state = tmp_path / "state.db"
    job = SimulatedJob(tmp_path, scenario="stall", total=8, step=0.02)
    job.start()
    stage_file = job.write_stage(tmp_path / "s.yaml", interval="300ms", exit_grace="300ms", timeout="30s")
    try:
        before = _killed_mid_watch(state, stage_file, 3.0)
        assert before and before[-1]["signals"]["process"]["says"] == "working"
    finally:
        job.stop()  # killed while nothing watched: outputs short (and never left running)
    out = _cli(state, "wait", str(stage_file), "--json", "--timeout", "20s")
    final = _json_lines(out.stdout)[-1]
    assert final["verdict"] == "failed", final["reasons"]
    assert out.returncode == 3
    # Without the store the same watch could not tell an exit from a job never started.
    fresh = _cli(tmp_path / "other.db", "status", str(stage_file), "--json")
    assert _json_lines(fresh.stdout)[-1]["verdict"] == "unknown"


def test_history_lists_each_verdict_change_once(tmp_path) -> None:
    state = tmp_path / "state.db"
    job = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.3)
    since = f"@{time.time() - 1}"  # the job may end before the CLI's first look (a loaded machine)
    job.start()
    try:
        stage_file = job.write_stage(tmp_path / "s.yaml", interval="200ms", timeout="30s")
        out = _cli(state, "wait", str(stage_file), "--json", "--since", since)
        assert out.returncode == 0, out.stderr
        checks = _json_lines(out.stdout)
    finally:
        job.stop()
    history = _cli(state, "history", job.tag, "--json")
    changes = _json_lines(history.stdout)
    states = [c["verdict"] for c in changes]
    assert states[-1] == "complete"
    assert all(a != b for a, b in itertools.pairwise(states))  # changes, not checks
    assert len(changes) < len(checks)
    human = _cli(state, "history", job.tag)
    assert "COMPLETE" in human.stdout and human.returncode == 0


def test_a_corrupt_store_never_crashes_a_watch_nor_completes_by_itself(tmp_path) -> None:
    state = tmp_path / "state.db"
    job = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.02)
    job.start()
    assert job.wait(30) == 0
    stage_file = job.write_stage(tmp_path / "s.yaml", interval="200ms", exit_grace="200ms")
    state.write_bytes(os.urandom(4096))  # garbage where the database should be
    out = _cli(state, "status", str(stage_file), "--json")
    assert out.returncode in (0, 1), out.stderr
    assert "Traceback" not in out.stderr
    # Finished before this watch, no run start: not complete, store or no store.
    assert _json_lines(out.stdout)[-1]["verdict"] == "unknown"


def test_restored_memory_of_the_same_run_goes_on_and_a_second_watch_follows_only_its_run(tmp_path) -> None:
    job = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.02)
    job.start()
    assert job.wait(30) == 0
    stage = stage_from_dict(job.stage_dict(interval="100ms", exit_grace="100ms", settle=3))
    store = open_store(tmp_path / "state.db")
    started = time.time() - 600  # the run's start, as a time: every watch given it watches one run
    first = Checker(stage, since=started, state=store)
    states = [first.check().state for _ in range(5)]
    assert states[-1] is State.COMPLETE
    # A second watch of the same run while the first holds it: it follows, it does not probe.
    second = Checker(stage, since=started, state=store)
    followed = second.check()
    assert followed.state is State.COMPLETE and "watched elsewhere" in followed.reasons[0]
    # A watch given the start as a duration resolves it at its own first check: nothing
    # stored can be shown to be of that run, so it checks for itself (issue 21), and leaves
    # the holder's memory as it is.
    saved = store.load(first.persistence.key)
    own = Checker(stage, since="10m", state=store)
    mine = own.check()
    assert "watched elsewhere" not in mine.reasons[0] and mine.state is not State.COMPLETE, mine.reasons
    assert store.load(first.persistence.key) == saved
    # Another definition of the stage (here: another settle) does not follow it either.
    other = Checker(
        stage_from_dict({**job.stage_dict(settle=4), "stage": stage.stage}), since=started, state=store
    )
    assert "watched elsewhere" not in other.check().reasons[0]
    first.close()  # releases the stage
    third = Checker(stage, since=started, state=store)
    again = third.check()
    assert "watched elsewhere" not in again.reasons[0]
    # Restored, the same run and definition: the settle streak goes on, and a fresh check
    # that agrees keeps it complete (no complete -> running -> complete flap).
    assert again.state is State.COMPLETE, again.reasons
    third.close()
    store.close()


def test_a_changed_stage_definition_resets_only_what_it_changes(tmp_path, caplog) -> None:
    log = tmp_path / "x.log"
    log.write_text("Extraction complete\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.pt").write_bytes(b"x")
    spec = {
        "stage": "defs",
        "log": {"path": str(log), "complete": "^Extraction complete"},
        "outputs": {"files": str(out), "pattern": "*.pt", "expected": 1},
    }
    store = open_store(tmp_path / "state.db")
    with Checker(stage_from_dict(spec), since="1h", state=store) as checker:
        checker.check()
        checker.check()
    changed = {**spec, "outputs": {"files": str(out), "pattern": "*.pt", "expected": 2}}
    with (
        caplog.at_level("WARNING", logger="crosscheck"),
        Checker(stage_from_dict(changed), state=store) as again,
    ):
        assert "outputs" not in again._memory.signals and "log" in again._memory.signals
        assert again.run is not None and again.run.source == "since"
        assert again.check().readings["log"].says is Says.DONE
    assert any("definition changed (outputs)" in r.getMessage() for r in caplog.records)
    store.close()


def test_memory_round_trips_and_refuses_foreign_documents() -> None:
    from sensors._check.codec import MemoryFormatError
    from sensors._signals.process import ProcessMemory

    memory = {"signals": {"process": ProcessMemory("boot", {12: 34}, (1,), {"pid": 1}, (12,))}}
    assert loads(dumps(memory)) == memory
    for text in (
        "",
        "[]",
        '{"version": 999, "memory": {}}',
        '{"version": 1, "memory": {"@dc": "os.system"}}',
    ):
        with pytest.raises(MemoryFormatError):
            loads(text)


def _reference_encoding(value: object) -> object:
    """The memory's JSON as the module docstring specifies it, written plainly (the
    encoder dispatches by type for speed; it must say exactly this)."""
    import dataclasses
    import enum
    from collections.abc import Mapping

    if isinstance(value, enum.Enum):
        return {"@e": type(value).__name__, "v": value.value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _reference_encoding(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"@dc": type(value).__name__, "f": fields}
    if isinstance(value, Mapping):
        return {"@m": [[_reference_encoding(k), _reference_encoding(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"@t": [_reference_encoding(v) for v in value]}
    if isinstance(value, (frozenset, set)):
        return {"@fs": sorted((_reference_encoding(v) for v in value), key=repr)}
    if isinstance(value, list):
        return [_reference_encoding(v) for v in value]
    assert value is None or isinstance(value, (str, int, float, bool)), value
    return value


def test_a_checkers_memory_is_saved_as_the_format_says(tmp_path) -> None:
    """Real memories (a running job's, a finished one's, a failed one's), each the same text
    as the plain reference encoding gives, and read back equal; what is no memory type is
    refused."""
    import dataclasses

    from sensors._check.codec import VERSION

    memories = []
    for scenario in ("complete", "crash", "stall"):
        job = SimulatedJob(tmp_path / scenario, scenario=scenario, total=6, step=0.02)
        job.start()
        try:
            checker = Checker(stage_from_dict(job.stage_dict(interval="100ms")), since="1m")
            for _ in range(4):
                checker.check()
                memories.append(checker.memory_doc())
                time.sleep(0.1)
        finally:
            job.stop()
    names = frozenset(f"stage-{k}" for k in range(12))  # iterated in an order of the hashes
    memories.append({"sets": {names, (1, "a")}, "says": Says.DONE, 7: [None, 1.5, True], "f": names})
    for memory in memories:
        text = dumps(memory)
        reference = json.dumps(
            {"version": VERSION, "memory": _reference_encoding(memory)}, separators=(",", ":")
        )
        assert text == reference
        if "last" in memory:
            again = loads(text)
            assert again["last"] == memory["last"] and again["verdict"] == memory["verdict"]
            # The readings are the last verdict's and the verdict memory's: the same, twice.
            doc = json.loads(text)["memory"]["@m"]
            last = next(v for k, v in doc if k == "last")
            previous = next(v for k, v in doc if k == "verdict")["f"]["previous"]
            assert [r for _, r in previous["@m"]] == [r for _, r in last["f"]["readings"]["@m"]]

    @dataclasses.dataclass(frozen=True)
    class Foreign:
        x: int = 1

    for bad in (Foreign(), object(), {"k": Foreign()}):
        with pytest.raises(TypeError):
            dumps(bad)


def test_two_watchers_on_postgresql_exactly_one_checks_and_the_other_takes_over(
    tmp_path, postgres_url
) -> None:
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    stage_file = job.write_stage(tmp_path / "s.yaml", interval="300ms", stall_after="1h", timeout="1m")
    env = _env(tmp_path / "unused.db")
    outs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    watchers = []
    try:
        for out in outs:
            with open(out, "w") as fh:
                watchers.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "sensors",
                            "wait",
                            str(stage_file),
                            "--json",
                            "--state",
                            postgres_url,
                        ],
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )
            time.sleep(4.0)

        def lines(path: Path) -> list[dict]:
            return _json_lines(path.read_text())

        a, b = lines(outs[0]), lines(outs[1])
        assert a and b
        assert not any("watched elsewhere" in v["reasons"][0] for v in a)  # it holds the stage
        assert all("watched elsewhere" in v["reasons"][0] for v in b[1:])  # it follows
        watchers[0].send_signal(signal.SIGKILL)
        watchers[0].wait(10)
        seen = len(b)
        time.sleep(4.0)  # a dead holder on this machine is taken over at once; else at expiry
        after = lines(outs[1])[seen:]
        assert after, "the follower stopped"
        assert "watched elsewhere" not in after[-1]["reasons"][0], after[-1]["reasons"]
        assert after[-1]["signals"]["process"]["says"] == "working"
    finally:
        for w in watchers:
            w.kill()
            w.wait(10)
        job.stop()


def test_a_job_run_again_after_a_remembered_complete_run_is_a_new_run(tmp_path) -> None:
    """The store remembers run A complete; the job is run again (B, same paths): a watch of
    the stage must see B running, not return A's complete."""
    store = open_store(tmp_path / "state.db")
    first = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.3, tag="again")
    first.start()
    stage = stage_from_dict(first.stage_dict(interval="200ms", exit_grace="200ms"))
    with Checker(stage, state=store) as checker:
        final = list(checker.watch(timeout=30))[-1]
    assert final.state is State.COMPLETE
    assert checker.announce(final) is True  # A's complete, announced
    time.sleep(2.5)  # B starts clearly after A
    second = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="again")
    second.start()
    try:
        time.sleep(0.5)
        with Checker(stage, state=store) as again:
            assert again.announced() is None  # B is not A: nothing to return at once
            verdict = again.check()
        assert verdict.state is not State.COMPLETE
        assert verdict.readings["process"].says is Says.WORKING
        assert verdict.run["started_at"] != final.run["started_at"]
    finally:
        second.stop()
        store.close()


class _Counting:
    """A real store, with its calls counted (what a check costs in round trips)."""

    def __init__(self, store):
        self._store, self.calls = store, []

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls.append(name)
            return attr(*args, **kwargs)

        return counted


def test_a_check_costs_one_store_call_once_the_lease_is_held(tmp_path: Path) -> None:
    """The save renews the lease (one round trip); the next check skips its own renewal."""
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01)
    job.start()
    try:
        with open_store(tmp_path / "state.db") as real:
            store = _Counting(real)
            stage = stage_from_dict(job.stage_dict(name="counted", interval="1s"))
            with Checker(stage, state=store) as checker:
                checker.check()
                store.calls.clear()
                for _ in range(5):
                    checker.check()
                calls = list(store.calls)
                with Checker(stage, state=real) as other:  # another watch meanwhile: it follows
                    assert "watched elsewhere" in other.check().reasons[0]
    finally:
        job.stop()
    assert calls == ["save"] * 5, calls


def test_a_batch_of_stages_is_saved_in_one_store_call(tmp_path: Path) -> None:
    """A host's stages checked by one probe are saved together (one SQLite transaction):
    each row as a save of its own would write it, the changes in the history."""
    from sensors._check.batch import check_batch

    jobs = [SimulatedJob(tmp_path / f"j{k}", scenario="stall", total=4, step=0.01) for k in range(5)]
    for job in jobs:
        job.start()
    try:
        with open_store(tmp_path / "state.db") as real:
            store = _Counting(real)
            checkers = [
                Checker(stage_from_dict(job.stage_dict(name=f"b{k}", interval="1s")), state=store)
                for k, job in enumerate(jobs)
            ]
            check_batch(checkers)
            store.calls.clear()
            verdicts = check_batch(checkers)
            calls = list(store.calls)
            stored = [real.load(c.persistence.key) for c in checkers]
            history = [real.history(f"b{k}") for k in range(len(jobs))]
            for checker in checkers:
                checker.close()
    finally:
        for job in jobs:
            job.stop()
    assert calls == ["save_many"], calls
    for verdict, row, changes in zip(verdicts, stored, history, strict=True):
        assert row is not None and row.verdict["verdict"] == verdict.state.value
        assert json.loads(row.memory)["version"] == 1
        assert [h.state for h in changes][-1] == verdict.state.value


# -- where a store may be, and what reading one touches -------------------------------------


def _tree(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``directory``: bytes, inode, mtime (ns)."""
    return {
        str(f.relative_to(directory)): (f.read_bytes(), f.stat().st_ino, f.stat().st_mtime_ns)
        for f in sorted(directory.rglob("*"))
        if f.is_file()
    }


def _recorded(tmp_path: Path) -> tuple[Path, str]:
    """A store with a real history: a finished job watched to complete."""
    state = tmp_path / "store" / "state.db"
    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.02)
    job.start()
    try:
        stage_file = job.write_stage(tmp_path / "s.yaml", interval="100ms", exit_grace="200ms")
        out = _cli(state, "wait", str(stage_file), "--json", "--since", "10m", "--timeout", "60s")
        assert out.returncode == 0, out.stderr
    finally:
        job.stop()
    return state, job.tag


def test_a_stage_file_given_as_the_state_store_is_never_moved_or_written(tmp_path) -> None:
    """`crosscheck history x --state my-stage.yaml` (a typo) renamed the stage file aside and
    put a database in its place; `status --state` did the same. Both leave it as it is."""
    job = SimulatedJob(tmp_path, scenario="complete", total=2, step=0.01)
    stages = tmp_path / "stages"
    stages.mkdir()
    stage_file = job.write_stage(stages / "my-stage.yaml", interval="100ms")
    other = job.write_stage(stages / "other.yaml", name="other", interval="100ms")
    before = _tree(stages)
    history = _cli(tmp_path / "unused.db", "history", "x", "--state", str(stage_file))
    assert history.returncode == 2, history.stderr
    assert history.stderr.count("\n") == 1 and "not a crosscheck state store" in history.stderr
    status = _cli(tmp_path / "unused.db", "status", str(other), "--state", str(stage_file), "--json")
    assert status.returncode in (0, 1), status.stderr
    assert "left untouched" in status.stderr and "Traceback" not in status.stderr
    assert _tree(stages) == before
    assert not (tmp_path / "unused.db").exists()


def test_history_opens_the_store_read_only_and_creates_nothing(tmp_path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CROSSCHECK_STATE", None)
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")

    def history(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sensors", "history", "x", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=work,
        )

    # --state none: there is no store to read; no file named "none" appears.
    none = history("--state", "none")
    assert none.returncode == 2 and none.stderr.count("\n") == 1 and "no store" in none.stderr, none.stderr
    # No store at the path, or at the default location: no history, and nothing created.
    for args in (("--state", "missing.db"), ("--state", str(tmp_path / "deep" / "state.db")), ()):
        out = history(*args)
        assert out.returncode == 1 and "no state store here" in out.stderr, (args, out.stderr)
    assert list(work.iterdir()) == [] and not (tmp_path / "deep").exists() and not (tmp_path / "xdg").exists()
    # An empty file stays empty; a directory is not a store.
    (work / "empty.db").touch()
    assert history("--state", "empty.db").returncode == 1
    assert (work / "empty.db").stat().st_size == 0
    assert history("--state", str(tmp_path)).returncode == 2


def test_history_has_one_exit_rule_for_text_and_json(tmp_path) -> None:
    state, tag = _recorded(tmp_path)
    before = _tree(state.parent)
    for form in ((), ("--json",)):
        found = _cli(state, "history", tag, *form)
        assert found.returncode == 0 and found.stdout.strip(), (form, found.stderr)
        missing = _cli(state, "history", "never-watched", *form)
        assert missing.returncode == 1 and missing.stdout == "", (form, missing.stdout)
        assert missing.stderr.count("\n") == 1 and "no history for stage never-watched" in missing.stderr
    # Read, never written: the database and its WAL are as they were (the -shm file is
    # SQLite's shared memory between connections, where every reader marks what it reads).
    after = _tree(state.parent)
    assert {k: v for k, v in after.items() if not k.endswith("-shm")} == {
        k: v for k, v in before.items() if not k.endswith("-shm")
    }


def test_history_leaves_no_wal_or_shm_file_beside_a_store_nobody_has_open(tmp_path) -> None:
    """With no writer at work (the store's -wal and -shm gone with its last connection),
    `history` opened it with mode=ro, which creates both and leaves them: files the reader
    made, owned by the reader (another user's -shm stops the owner's watchers writing)."""
    state, tag = _recorded(tmp_path)
    import sqlite3

    conn = sqlite3.connect(state)  # the last connection: its close checkpoints, removes both
    conn.execute("SELECT count(*) FROM crosscheck_history").fetchone()
    conn.close()
    assert not Path(f"{state}-wal").exists() and not Path(f"{state}-shm").exists()
    before = _tree(state.parent)
    for form in ((), ("--json",)):
        found = _cli(state, "history", tag, *form)
        assert found.returncode == 0 and found.stdout.strip(), (form, found.stderr)
    assert _tree(state.parent) == before, sorted(_tree(state.parent))


def test_history_reads_a_store_on_a_read_only_filesystem(tmp_path) -> None:
    """The same store, its directory bind-mounted read-only (a user and mount namespace):
    history shows every entry, where it said "no history" before."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespaces here: {probe.stderr.decode().strip()}")
    state, tag = _recorded(tmp_path)
    expected = _cli(state, "history", tag, "--json")
    assert expected.returncode == 0
    script = (
        f'mount --bind -o ro "{state.parent}" "{state.parent}" && '
        f'! touch "{state.parent}/probe" 2>/dev/null && '
        f'exec "{sys.executable}" -m sensors history {tag} --json --state "{state}"'
    )
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected.stdout


def test_a_watch_that_takes_a_stage_over_goes_on_from_the_holders_memory(tmp_path) -> None:
    """A second watch followed the first (it restored the store's memory when it began, before
    the job started); the first saw the job at work and stopped; the job finished; the second
    took over. It went on from what it had restored at its start (the job never seen: unknown),
    not from what the holder had learnt since (the job seen alive: its exit is this run's)."""
    store = open_store(tmp_path / "state.db")
    job = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.3)
    stage = stage_from_dict(job.stage_dict(interval="100ms", exit_grace="200ms", settle=2))
    first = Checker(stage, state=store)
    second = Checker(stage, state=store)  # restored now: nothing yet
    first.check()
    assert "watched elsewhere" in second.check().reasons[0]
    job.start()
    time.sleep(0.5)
    assert first.check().state is State.RUNNING
    followed = second.check()
    assert "watched elsewhere" in followed.reasons[0] and followed.state is State.RUNNING
    first.close()
    assert job.wait(30) == 0
    verdicts = [second.check() for _ in range(4)]
    assert all("watched elsewhere" not in v.reasons[0] for v in verdicts)
    assert verdicts[-1].state is State.COMPLETE, verdicts[-1].reasons
    assert verdicts[-1].readings["process"].evidence["seen_alive"] is True
    second.close()
    store.close()


def _open_fds_to(path: Path) -> int:
    """How many of this process's file descriptors point at ``path`` (or its -wal/-shm)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        found += target.startswith(str(path))
    return found


def test_a_checker_closes_the_store_it_opened_and_leaves_a_given_one_open(tmp_path) -> None:
    """A Checker given a store's path opened a store that nothing closed (a connection and
    its file descriptors per Checker, for the life of the process). The store it opens is
    its own to close; a store given open is its owner's."""
    log = tmp_path / "job.log"
    log.write_text("Done\n")
    stage = stage_from_dict({"stage": "fds", "host": "local", "log": {"path": str(log), "complete": "^Done"}})
    path = tmp_path / "state.db"
    checker = Checker(stage, since="1h", state=str(path))
    checker.check()
    assert _open_fds_to(path) >= 1
    checker.close()
    assert _open_fds_to(path) == 0
    given = open_store(str(tmp_path / "given.db"))
    try:
        with Checker(stage, since="1h", state=given) as other:
            other.check()
        assert given.load(other.persistence.key) is not None  # still open, still answering
    finally:
        given.close()


def test_an_edited_definition_keeps_when_the_process_was_first_found_gone() -> None:
    """A changed ``outputs`` (or ``log``, ``policy``) drops that signal's memory and the
    verdict's, but not when the same process was first found gone: an ``expected`` edited 14
    minutes after the job's end waited ``exit_grace`` again from the edit (user s15). A changed
    ``process`` is another job: nothing of it stays."""
    from sensors._check.persist import _without
    from sensors._verdict import VerdictMemory

    memory = {
        "signals": {"process": {"p": 1}, "outputs": {"o": 1}},
        "verdict": VerdictMemory(gone_since=1000.0, last_progress_at=900.0, done_streak=2),
        "last": object(),
    }
    for changed in (["outputs"], ["policy"], ["log", "outputs"]):
        kept = _without(memory, changed)
        assert kept is not None
        assert kept["verdict"] == VerdictMemory(gone_since=1000.0), changed
        assert kept["last"] is None
        assert ("outputs" in kept["signals"]) == ("outputs" not in changed), changed
    assert "verdict" not in (_without(memory, ["process"]) or {})
    running = {**memory, "verdict": VerdictMemory(last_progress_at=900.0)}
    assert (_without(running, ["outputs"]) or {})["verdict"] is None  # never found gone: nothing
