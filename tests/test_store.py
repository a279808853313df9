"""The durable memory's storage layer (sensors/_store), against real SQLite files and a real
PostgreSQL server (tests/postgres.py): round trips, history, leases and announcements across
processes, SIGKILLed writers, and files that were truncated, overwritten or are not ours."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from sensors import ConfigError
from sensors._store import (
    SCHEMA_VERSION,
    Handoff,
    StageKey,
    Stored,
    StoreError,
    StoreMissing,
    StoreWarning,
    default_location,
    open_store,
)

ROOT = Path(__file__).resolve().parent.parent
KEY = StageKey("extract", "local")


def _save(store, key=KEY, i=0, *, changed=True, state="running", version=1):
    store.save(
        key,
        memory=json.dumps({"i": i}),
        fingerprint={"log": f"fp{i}", "outputs": "o"},
        verdict={"verdict": state, "i": i, "readings": {"log": {"says": "working"}}},
        version=version,
        changed=changed,
    )


def _worker(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store_worker", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(proc: subprocess.Popen[str], timeout: float = 60) -> list[dict]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode in (0, -signal.SIGKILL), err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path) -> str:
    """Each shared test runs on a SQLite file and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state" / "state.db")
    return request.getfixturevalue("postgres_url")


# -- both backends ------------------------------------------------------------------------


def test_round_trip(location):
    with open_store(location) as store:
        assert store.load(KEY) is None
        _save(store, i=1, version=3)
        got = store.load(KEY)
        assert isinstance(got, Stored)
        assert got.memory == '{"i": 1}'
        assert got.fingerprint == {"log": "fp1", "outputs": "o"}
        assert got.verdict == {"verdict": "running", "i": 1, "readings": {"log": {"says": "working"}}}
        assert got.version == 3
        assert abs(got.saved_at - time.time()) < 60
        _save(store, i=2, changed=False)
        assert store.load(KEY).memory == '{"i": 2}'
        assert store.load(StageKey("extract", "gpu-box")) is None  # the host is part of the key
    with open_store(location) as again:  # durable: a new Store (a new process) sees it
        assert again.load(KEY).fingerprint["log"] == "fp2"


def test_history_order_retention_and_hosts(location):
    with open_store(location, retention=5) as store:
        for i in range(12):
            _save(store, i=i, state=f"s{i}")
            _save(store, i=i, changed=False, state=f"s{i}")  # a check that changed nothing
        _save(store, StageKey("extract", "other"), i=100, state="complete")
        _save(store, StageKey("train", "local"), i=200)
        mine = store.history("extract", "local")
        assert [e.state for e in mine] == ["s7", "s8", "s9", "s10", "s11"]  # oldest first, 5 kept
        assert [e.verdict["i"] for e in mine] == [7, 8, 9, 10, 11]
        assert all(e.stage == "extract" and e.host == "local" for e in mine)
        assert all(a.at <= b.at for a, b in itertools.pairwise(mine))
        assert [e.state for e in store.history("extract", "local", limit=2)] == ["s10", "s11"]
        both = store.history("extract")
        assert [(e.host, e.state) for e in both][-2:] == [("local", "s11"), ("other", "complete")]
        assert store.history("nothing") == []


def test_lease_in_one_process(location):
    with open_store(location) as store:
        first = store.acquire(KEY, "w1", ttl=0.5)
        assert first.held and first.holder == "w1"
        other = store.acquire(KEY, "w2", ttl=0.5)
        assert not other.held and other.holder == "w1"
        assert other.expires_at == pytest.approx(first.expires_at, abs=0.01)
        renewed = store.acquire(KEY, "w1", ttl=0.5)
        assert renewed.held and renewed.expires_at >= first.expires_at
        assert store.acquire(StageKey("extract", "elsewhere"), "w2", ttl=0.5).held  # per key
        time.sleep(0.6)
        taken = store.acquire(KEY, "w2", ttl=30)
        assert taken.held and taken.holder == "w2"  # expired: taken over
        store.release(KEY, "w1")  # not ours any more: a no-op
        assert not store.acquire(KEY, "w1", ttl=30).held
        store.release(KEY, "w2")
        assert store.acquire(KEY, "w1", ttl=30).held
        with pytest.raises(ValueError):
            store.acquire(KEY, "w1", ttl=0)


def test_watcher_registry(location):
    with open_store(location) as store, open_store(location) as other:
        assert store.live_watchers() == []
        store.heartbeat_watcher("w1", ttl=0.5, about="box-1 /stages")
        other.heartbeat_watcher("w2", ttl=30)
        assert store.live_watchers() == other.live_watchers() == ["w1", "w2"]
        time.sleep(0.6)
        assert store.live_watchers() == ["w2"]  # w1's heartbeat expired
        store.heartbeat_watcher("w1", ttl=30)  # and it came back
        assert other.live_watchers() == ["w1", "w2"]
        other.drop_watcher("w2")
        assert store.live_watchers() == ["w1"]
        with pytest.raises(ValueError):
            store.heartbeat_watcher("w1", ttl=0)


def test_announce_once(location):
    with open_store(location) as store, open_store(location) as other:
        assert store.announced(KEY, "r1") is None
        a = store.announce(KEY, "r1", "complete", {"verdict": "complete", "n": 1})
        b = other.announce(KEY, "r1", "complete", {"verdict": "complete", "n": 2})
        assert (a.first, b.first) == (True, False)
        assert b.verdict == {"verdict": "complete", "n": 1}  # the stored one, not ours
        assert b.decided_at == pytest.approx(a.decided_at)
        assert store.announce(KEY, "r1", "failed", {"verdict": "failed"}).first  # another state
        assert store.announce(KEY, "r2", "complete", {"verdict": "complete"}).first  # another run
        assert store.announced(KEY, "r1").state == "complete"  # the earliest for the run
        assert other.announced(KEY, "r2").verdict == {"verdict": "complete"}
        assert store.announced(StageKey("extract", "other"), "r1") is None


def test_handoffs(location):
    """A gate's handoff: stored once per ticket, listed, settled once, dropped."""
    request = {"stage": {"stage": "extract"}, "since": 12.5}
    first = Handoff("run-1", "extract", "local", request, deadline=time.time() + 60, created_at=time.time())
    with open_store(location) as store, open_store(location) as other:
        assert store.handoffs() == [] and store.handoff("run-1") is None
        stored = store.hand_off(first)
        assert stored == first
        # The same ticket again (a gate's flow run started again): the first request stands.
        again = other.hand_off(replace(first, request={"other": True}, deadline=1.0))
        assert again == first
        store.hand_off(Handoff("run-2", "train", "gpu-1", {}, deadline=2.0, created_at=first.created_at + 1))
        assert [h.ticket for h in other.handoffs()] == ["run-1", "run-2"]
        assert store.record_outcome("run-1", {"verdict": "complete"}) is True
        assert other.record_outcome("run-1", {"verdict": "failed"}) is False  # written once
        assert other.handoff("run-1").outcome == {"verdict": "complete"}
        assert other.handoff("run-2").outcome is None
        store.drop_handoff("run-1")
        assert [h.ticket for h in other.handoffs()] == ["run-2"]


def test_a_save_renews_the_lease_in_its_round_trip(location):
    """``save(renew=(holder, ttl))``: the lease is renewed with the save (one round trip per
    check), and a save by anyone else never takes it."""
    with open_store(location) as store, open_store(location) as other:
        first = store.acquire(KEY, "w1", ttl=2)
        lease = store.save(
            KEY, memory="{}", fingerprint={}, verdict={"verdict": "running"}, version=1, changed=True,
            renew=("w1", 60),
        )  # fmt: skip
        assert lease is not None and lease.held and lease.expires_at > first.expires_at + 50
        refused = other.save(
            KEY, memory='{"x": 1}', fingerprint={}, verdict={"verdict": "running"}, version=1, changed=False,
            renew=("w2", 60),
        )  # fmt: skip
        assert refused is not None and not refused.held
        assert other.acquire(KEY, "w2", ttl=60).holder == "w1"  # still w1's, 60 s more
        # A save riding on a refused renewal (a watcher frozen past its lease, the stage now
        # another's) writes nothing over the holder's memory and history.
        assert store.load(KEY).memory == "{}"
        news = other.save(
            KEY, memory='{"x": 2}', fingerprint={}, verdict={"verdict": "stalled"}, version=1, changed=True,
            renew=("w2", 60),
        )  # fmt: skip
        assert news is not None and not news.held
        assert store.load(KEY).memory == "{}"
        assert [e.state for e in store.history(KEY.stage, KEY.host)] == ["running"]
        plain = store.save(
            KEY, memory="{}", fingerprint={}, verdict={"verdict": "running"}, version=1, changed=False
        )
        assert plain is None  # no renew asked, no lease answer


def test_a_watcher_renews_its_leases_in_one_call(location):
    """``renew_leases``: every lease of the holder among the keys, renewed together; one
    another watcher holds, one released, and one never taken are left as they are."""
    keys = [StageKey(f"s{k}", "h") for k in range(300)]
    with open_store(location) as store, open_store(location) as other:
        first = {key: store.acquire(key, "w1", ttl=2) for key in keys[:250]}
        assert all(lease.held for lease in first.values())
        store.release(keys[0], "w1")
        assert other.acquire(keys[0], "w2", ttl=60).held  # now w2's
        store.release(keys[1], "w1")  # nobody's
        renewed = store.renew_leases("w1", 60, keys)
        assert renewed == set(keys[2:250])
        for key in keys[2:250:37]:
            again = other.acquire(key, "w2", ttl=60)
            assert again.holder == "w1" and again.expires_at > first[key].expires_at + 50
        assert other.acquire(keys[0], "w2", ttl=60).holder == "w2"
        assert other.renew_leases("w2", 60, keys) == {keys[0]}
        assert store.renew_leases("w1", 60, []) == set()
        with pytest.raises(ValueError):
            store.renew_leases("w1", 0, keys)


def test_announce_race_across_processes(location):
    start_at = time.time() + 1.5  # both processes are imported and connected by then
    procs = [_worker("announce", location, "40", str(start_at)) for _ in range(2)]
    results = [_lines(p) for p in procs]
    assert all(len(r) == 40 for r in results)
    for run in range(40):
        firsts = [r[run]["first"] for r in results]
        assert firsts.count(True) == 1, (run, firsts)
        assert results[0][run]["pid"] == results[1][run]["pid"]  # both see the winner's verdict


def test_lease_across_processes_exactly_one_holds(location):
    # Begun together once both are ready: under make test's load an interpreter could start
    # after a start time set beforehand and its whole second (seen: neither printed a line).
    procs = [_worker("lease", location, f"w{n}", "30", "1.0", "go") for n in range(2)]
    for p in procs:
        assert p.stdout is not None and json.loads(p.stdout.readline()) == {"ready": True}
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [_lines(p) for p in procs]
    holders = {line["holder"] for r in results for line in r}
    assert len(holders) == 1, holders  # everyone agrees on one holder all along
    (winner,) = holders
    for n, r in enumerate(results):
        assert r and all(line["held"] == (f"w{n}" == winner) for line in r)


def test_lease_takeover_after_sigkill(location):
    """The holder is SIGKILLed; the other watcher takes the stage over within the ttl."""
    ttl, margin = 2.0, 1.0
    start_at = time.time() + 1.5
    holder = _worker("lease", location, "a", str(ttl), "60", str(start_at))
    time.sleep(start_at - time.time() + 0.5)  # "a" holds it now
    other = _worker("lease", location, "b", str(ttl), str(ttl + 6), str(time.time() + 1.5))
    time.sleep(2.5)
    holder.kill()
    killed_at = time.time()
    a_lines, b_lines = _lines(holder), _lines(other)
    assert a_lines and all(line["held"] for line in a_lines)
    held_by_b = [line["t"] for line in b_lines if line["held"]]
    assert held_by_b, b_lines
    assert [line["holder"] for line in b_lines if line["t"] < killed_at] == ["a"] * sum(
        1 for line in b_lines if line["t"] < killed_at
    )
    assert killed_at <= held_by_b[0] <= killed_at + ttl + margin


# -- SQLite: crashes and damaged files ----------------------------------------------------


def test_sigkilled_writer_leaves_a_store_that_loads(tmp_path):
    path = tmp_path / "state.db"
    rng = random.Random(11)
    last = -1
    for _ in range(5):
        proc = _worker("save-loop", str(path))
        assert proc.stdout is not None
        # Its first acknowledged save (a worker's start took over a second under load, and
        # five kills before any save proved nothing), then somewhere in the loop: mid-commit,
        # mid-checkpoint.
        first = proc.stdout.readline()
        time.sleep(0.1 + rng.random() * 0.6)
        proc.kill()
        lines = [json.loads(first), *_lines(proc)] if first.strip() else _lines(proc)
        acked = lines[-1]["i"] if lines else -1
        with warnings.catch_warnings():
            warnings.simplefilter("error", StoreWarning)  # a crash is not corruption
            with open_store(path) as store:
                got = store.load(StageKey("s", "local"))
                assert got is not None or acked < 0
                if got is not None:
                    i = json.loads(got.memory)["i"]
                    assert i >= acked  # every acknowledged save survived (and maybe one more)
                    assert got.fingerprint == {"i": str(i)} and got.verdict["i"] == i
                    history = store.history("s", "local")
                    assert [e.verdict["i"] % 3 for e in history] == [0] * len(history)
                    assert [e.verdict["i"] for e in history] == sorted({e.verdict["i"] for e in history})
                    last = i
    assert last > 0


def _wal_frames(wal: bytes, page_size: int) -> list[tuple[int, int]]:
    """(page number, offset of its data) of each frame in a WAL file, in order (the format:
    a 32-byte header, then frames of a 24-byte header and one page)."""
    frames, at = [], 32
    while at + 24 + page_size <= len(wal):
        frames.append((int.from_bytes(wal[at : at + 4], "big"), at + 24))
        at += 24 + page_size
    return frames


def test_a_checkpoint_cut_short_by_a_kill_leaves_a_store_that_loads(tmp_path):
    """A writer killed mid-checkpoint: the checkpoint copies the WAL's pages into the main file
    in page order, page 1 first, whose header then counts pages the file does not have yet.
    The main file alone reads as malformed; with its WAL it is the last commit, intact."""
    live = tmp_path / "live" / "state.db"
    with open_store(live) as store:
        for i in range(40):  # the file grows: each commit's pages, page 1 among them, in the WAL
            store.save(
                StageKey(f"s{i}", "local"),
                memory=json.dumps({"i": i, "pad": "p" * 3000}),
                fingerprint={"i": str(i)},
                verdict={"i": i},
                version=1,
                changed=True,
            )
        # Killed here, before its close's checkpoint: the files as the kill left them.
        torn = tmp_path / "torn"
        torn.mkdir(mode=0o700)
        for suffix in ("", "-wal"):
            shutil.copyfile(f"{live}{suffix}", torn / f"state.db{suffix}")
    path = torn / "state.db"
    page_size = int.from_bytes(path.read_bytes()[16:18], "big")
    wal = (torn / "state.db-wal").read_bytes()
    last_page_1 = max(at for page, at in _wal_frames(wal, page_size) if page == 1)
    with open(path, "r+b") as f:  # the checkpoint's first write, and no more
        f.write(wal[last_page_1 : last_page_1 + page_size])
    alone = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)  # the main file alone
    with contextlib.closing(alone), pytest.raises(sqlite3.DatabaseError, match="malformed"):
        alone.execute("SELECT count(*) FROM crosscheck_meta").fetchall()
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)  # a crash is not corruption
        with open_store(path) as store:
            assert json.loads(store.load(StageKey("s39", "local")).memory)["i"] == 39


def _populated(path: Path) -> dict[str, set[str]]:
    """A closed store with five stages, each saved several times; the memories saved."""
    saved: dict[str, set[str]] = {}
    with open_store(path) as store:
        for round_ in range(6):
            for s in "abcde":
                memory = json.dumps({"stage": s, "round": round_, "pad": "p" * 700})
                store.save(
                    StageKey(s, "local"),
                    memory=memory,
                    fingerprint={"f": s},
                    verdict={"verdict": "running", "round": round_},
                    version=1,
                    changed=True,
                )
                saved.setdefault(s, set()).add(memory)
    return saved


def _load_all(path: Path, saved: dict[str, set[str]]) -> dict[str, str | None]:
    """Every operation once on a damaged file; the memory each stage loads."""
    with open_store(path) as store:
        got = {}
        for s in saved:
            stored = store.load(StageKey(s, "local"))
            got[s] = None if stored is None else stored.memory
            store.history(s)
        store.acquire(StageKey("a", "local"), "me", 5)
        store.announce(StageKey("a", "local"), "r", "complete", {})
        _save(store, StageKey("z", "local"), i=7)  # the store is usable afterwards
        assert store.load(StageKey("z", "local")).memory == '{"i": 7}'
    return got


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``directory``: its bytes, inode and mtime (ns)."""
    return {
        str(f.relative_to(directory)): (f.read_bytes(), f.stat().st_ino, f.stat().st_mtime_ns)
        for f in sorted(directory.rglob("*"))
        if f.is_file()
    }


STAGE_YAML = "stage: extract\nhost: local\nprocess: {match: extract.py}\n"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(STAGE_YAML.encode(), id="a-stage-file"),
        pytest.param(random.Random(1).randbytes(10_000), id="garbage"),
        pytest.param(b"SQLite format 3", id="almost-a-header"),
        pytest.param(b"\n", id="one-newline"),
    ],
)
def test_a_file_that_is_not_a_database_is_never_renamed_replaced_or_written(tmp_path, content):
    """`--state my-stage.yaml` (a typo) moved the user's stage file aside and put a database
    in its place. A file that is not SQLite is left exactly as it is: same bytes, inode, mtime,
    no file beside it; memory is kept in the process, with a warning that says so."""
    path = tmp_path / "my-stage.yaml"
    path.write_bytes(content)
    before = _snapshot(tmp_path)
    with (
        pytest.warns(StoreWarning, match="not a SQLite database; it is left untouched"),
        open_store(path) as store,
    ):
        assert store.load(KEY) is None
        _save(store, i=1)
        assert store.load(KEY).memory == '{"i": 1}'  # in this process
        store.history("extract")
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (["PRAGMA user_version = 7"], "no tables"),
        (["PRAGMA journal_mode = WAL", "CREATE TABLE users (name TEXT)"], "something else"),
        (["CREATE TABLE crosscheck_meta (key TEXT, value TEXT)"], "did not write"),
    ],
    ids=["no-tables", "someone-elses-in-wal-mode", "a-lookalike-meta"],
)
def test_a_sqlite_database_that_is_not_ours_gets_no_byte_and_no_file_beside_it(tmp_path, setup, why):
    """A SQLite database with no tables (someone's new database) is not an empty file; one in
    WAL mode gets no -wal or -shm file created beside it; none is adopted or switched to WAL."""
    path = tmp_path / "theirs.db"
    conn = sqlite3.connect(path)
    for statement in setup:
        conn.execute(statement)
    conn.commit()
    conn.close()
    before = _snapshot(tmp_path)
    with pytest.warns(StoreWarning, match=why), open_store(path) as store:
        _save(store, i=1)
    assert _snapshot(tmp_path) == before
    with pytest.raises(StoreError, match=why):
        open_store(path, readonly=True)
    assert _snapshot(tmp_path) == before


def test_an_empty_file_or_no_file_becomes_a_store(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (empty, tmp_path / "new" / "state.db"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", StoreWarning)
            with open_store(path) as store:
                _save(store, i=1)
            with open_store(path) as store:  # durable
                assert store.load(KEY).memory == '{"i": 1}'


def test_a_dangling_symlink_or_a_directory_is_left_as_it_is(tmp_path):
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "nowhere" / "state.db")
    folder = tmp_path / "folder"
    folder.mkdir()
    for path, why in ((link, "symbolic link to nothing"), (folder, "is a directory")):
        with pytest.warns(StoreWarning, match=why), open_store(path) as store:
            _save(store, i=1)
    assert not (tmp_path / "nowhere").exists() and list(folder.iterdir()) == []


def test_a_symlink_to_a_store_of_ours_is_used(tmp_path):
    real = tmp_path / "real.db"
    with open_store(real) as store:
        _save(store, i=1)
    link = tmp_path / "link.db"
    link.symlink_to(real)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)
        with open_store(link) as store:
            assert store.load(KEY).memory == '{"i": 1}'
            _save(store, i=2)
    assert link.is_symlink()
    with open_store(real) as store:
        assert store.load(KEY).memory == '{"i": 2}'


def test_a_store_of_ours_found_corrupt_after_it_was_opened_is_set_aside(tmp_path):
    """Shown to be ours (its crosscheck_meta read from that inode), then SQLite reports pages
    corrupt: set aside under a new name (the bytes kept) and a fresh store goes on."""
    path = tmp_path / "state.db"
    _populated(path)
    size = path.stat().st_size
    with open_store(path) as store:  # ours: meta read, history pages not yet
        with open(path, "r+b") as f:
            f.seek(4096 * 2)
            f.write(random.Random(5).randbytes(size - 4096 * 2))
        with pytest.warns(StoreWarning, match="a crosscheck store, is corrupt.*set aside"):
            for s in "abcde":
                store.history(s)
        _save(store, i=1)
        assert store.load(KEY).memory == '{"i": 1}'
    assert len(list(tmp_path.glob("state.db.corrupt-*"))) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreWarning)
        with open_store(path) as store:  # the fresh store is durable
            assert store.load(KEY).memory == '{"i": 1}'


def test_a_store_corrupt_before_it_can_be_shown_ours_is_left_untouched(tmp_path):
    """Garbage over the first page: SQLite cannot say whose it is, so nothing may rename it."""
    path = tmp_path / "state.db"
    _populated(path)
    with open(path, "r+b") as f:
        f.seek(16)
        f.write(random.Random(6).randbytes(4000))
    before = _snapshot(tmp_path)
    with pytest.warns(StoreWarning, match="left untouched"), open_store(path) as store:
        _save(store, i=1)
        store.history("a")
    assert _snapshot(tmp_path) == before


def test_damaged_payload_reads_as_fresh_memory_for_that_stage_only(tmp_path):
    path = tmp_path / "state.db"
    saved = _populated(path)
    data = bytearray(path.read_bytes())
    at = data.find(json.dumps({"stage": "c", "round": 5, "pad": "p" * 700}).encode())
    assert at > 0
    data[at + 100 : at + 110] = b"GARBAGE!!!"
    path.write_bytes(bytes(data))
    with pytest.warns(StoreWarning, match="c@local is unusable"):
        got = _load_all(path, saved)
    assert got["c"] is None
    assert all(got[s] in saved[s] for s in "abde")  # the other stages keep their memory


def test_header_garbage_warns(tmp_path):
    path = tmp_path / "state.db"
    saved = _populated(path)
    with open(path, "r+b") as f:
        f.seek(0)
        f.write(b"\xde\xad" * 50)
    with pytest.warns(StoreWarning):
        got = _load_all(path, saved)
    assert got == dict.fromkeys(saved)


def test_truncated_and_overwritten_files_never_raise(tmp_path):
    """Random truncations and garbage: open_store/load never raise; each stage reads as None
    or a memory that was saved; a lost memory is always announced by a StoreWarning (for
    truncation: garbage may also rename a key, which reads as "never saved")."""
    original = tmp_path / "original.db"
    saved = _populated(original)
    size = original.stat().st_size
    rng = random.Random(2024)
    warned = 0
    for case in range(30):
        case_dir = tmp_path / f"case{case}"
        case_dir.mkdir()
        path = case_dir / "state.db"
        shutil.copy(original, path)
        truncate = case % 2 == 0
        with open(path, "r+b") as f:
            if truncate:
                f.truncate(rng.randrange(1, size))
            else:
                for _ in range(rng.randrange(1, 4)):
                    f.seek(rng.randrange(0, size))
                    f.write(rng.randbytes(rng.randrange(8, 300)))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = _load_all(path, saved)
        caught = [w for w in caught if issubclass(w.category, StoreWarning)]
        warned += bool(caught)
        for s, memory in got.items():
            assert memory is None or memory in saved[s], (case, s)
            if truncate and memory is None:
                assert caught, (case, s)
    assert warned >= 10  # most damage is noticed; the rest landed where nothing was read


def test_garbage_in_the_wal_is_ignored(tmp_path):
    """A crash copy (db + -wal with uncheckpointed commits); garbage over the WAL's tail:
    SQLite's frame checksums drop the damaged frames, and an earlier commit loads."""
    path = tmp_path / "state.db"
    copy = tmp_path / "copy" / "state.db"
    copy.parent.mkdir()
    memories = set()
    with open_store(path) as store:
        for i in range(20):
            _save(store, i=i)
            memories.add(json.dumps({"i": i}))
        shutil.copy(path, copy)
        shutil.copy(f"{path}-wal", f"{copy}-wal")
    wal = Path(f"{copy}-wal")
    with open(wal, "r+b") as f:
        f.seek(wal.stat().st_size // 2)
        f.write(random.Random(3).randbytes(5000))
    with open_store(copy) as store:
        got = store.load(KEY)
        assert got is not None and got.memory in memories


def test_newer_schema_is_left_alone(tmp_path):
    path = tmp_path / "state.db"
    with open_store(path) as store:
        _save(store, i=1)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE crosscheck_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.warns(StoreWarning, match="newer crosscheck"), open_store(path) as store:
        assert store.load(KEY) is None  # fresh memory
        _save(store, i=2)  # kept in this process
        assert store.load(KEY).memory == '{"i": 2}'
        assert store.acquire(KEY, "me", 5).held
    with sqlite3.connect(path) as conn:  # untouched
        assert conn.execute("SELECT memory FROM crosscheck_memory").fetchall() == [('{"i": 1}',)]


def test_foreign_database_is_left_alone(tmp_path):
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    with pytest.warns(StoreWarning, match="something else"), open_store(path) as store:
        assert store.load(KEY) is None
        _save(store, i=1)
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"users"}
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_unopenable_path_falls_back_to_memory(tmp_path):
    path = tmp_path / "is-a-directory"
    path.mkdir()
    with pytest.warns(StoreWarning, match="this process only"), open_store(path) as store:
        _save(store, i=1)
        assert store.load(KEY).memory == '{"i": 1}'


def test_sqlite_file_settings(tmp_path):
    path = tmp_path / "deep" / "er" / "state.db"
    with open_store(f"sqlite:///{path}") as store:
        _save(store)
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


# -- PostgreSQL specifics -----------------------------------------------------------------


def test_postgres_newer_schema_warns(postgres_url):
    import sqlalchemy as sa

    with open_store(postgres_url) as store:
        _save(store, i=1)
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE crosscheck_meta SET value = '99' WHERE key = 'schema_version'"))
    with pytest.warns(StoreWarning, match="newer crosscheck"), open_store(postgres_url) as store:
        assert store.load(KEY) is None
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE crosscheck_meta"))
        conn.execute(sa.text("CREATE TABLE crosscheck_meta (x int)"))
    with pytest.warns(StoreWarning, match="did not write"), open_store(postgres_url) as store:
        assert store.load(KEY) is None
    engine.dispose()


def test_postgres_damaged_row(postgres_url):
    import sqlalchemy as sa

    with open_store(postgres_url) as store:
        _save(store, i=1)
        _save(store, StageKey("other", "local"), i=2)
        engine = sa.create_engine(postgres_url)
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE crosscheck_memory SET memory = 'tampered' WHERE stage = 'extract'"))
        engine.dispose()
        with pytest.warns(StoreWarning, match="unusable"):
            assert store.load(KEY) is None
        assert store.load(StageKey("other", "local")).memory == '{"i": 2}'


def _history_seqs(url: str, stage: str) -> list[int]:
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        query = sa.text("SELECT seq FROM crosscheck_history WHERE stage = :stage ORDER BY id")
        seqs = [r[0] for r in conn.execute(query, {"stage": stage})]
    engine.dispose()
    return seqs


def test_postgres_changed_saves_racing_in_two_processes_never_share_a_seq(postgres_url):
    """A changed save is one statement that guesses its seq; two writers of one stage (what
    the lease prevents) make guesses fail, never two history rows with one seq."""
    from tests.store_worker import KEY as RACED

    with open_store(postgres_url) as store:
        _save(store, RACED, i=0)  # the stage's row exists: both writers race on its counter
    procs = [_worker("save-loop", postgres_url) for _ in range(2)]
    time.sleep(4.0)
    for proc in procs:
        proc.kill()
    counts = [len(_lines(proc)) for proc in procs]
    assert min(counts) > 30, counts  # both wrote, interleaved
    seqs = _history_seqs(postgres_url, RACED.stage)
    assert len(seqs) > 20
    assert sorted(seqs) == list(range(1, len(seqs) + 1))  # unique, no gaps, in id order too
    assert seqs == sorted(seqs)
    with open_store(postgres_url) as store:
        assert len(store.history(RACED.stage, RACED.host)) == len(seqs)


def test_postgres_version_1_store_without_the_counter_gains_it_and_goes_on(postgres_url):
    """A store written before the seq counter (schema version 1, history rows by max + 1):
    opening adds the column; the next changed save carries on after the history's last seq."""
    import sqlalchemy as sa

    with open_store(postgres_url, retention=5) as store:
        for i in range(3):
            _save(store, i=i)
    engine = sa.create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE crosscheck_memory DROP COLUMN seq"))
    with open_store(postgres_url, retention=5) as store:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT seq FROM crosscheck_memory")).scalar_one() == 0
        for i in range(3, 8):
            _save(store, i=i)
        assert [e.verdict["i"] for e in store.history("extract", "local")] == [3, 4, 5, 6, 7]
    assert _history_seqs(postgres_url, "extract") == [4, 5, 6, 7, 8]  # after 3, pruned to 5 by seq
    # The counter deleted with its row (by hand): caught from the history, not reused.
    with engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM crosscheck_memory"))
    with open_store(postgres_url, retention=5) as store:
        _save(store, i=8)
    assert _history_seqs(postgres_url, "extract") == [5, 6, 7, 8, 9]
    engine.dispose()


def test_postgres_read_only_open_creates_nothing_and_writes_nothing(postgres_url):
    import sqlalchemy as sa

    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://", 1))

    def tables() -> set[str]:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())

    try:
        with pytest.raises(StoreMissing, match="no crosscheck store in this database"):
            open_store(postgres_url, readonly=True)
        assert tables() == set()  # a reader created nothing
        with open_store(postgres_url) as store:
            _save(store, i=1)
        with open_store(postgres_url, readonly=True) as store:
            assert [e.verdict["i"] for e in store.history("extract")] == [1]
            with pytest.raises(StoreError, match="read-only"):
                store.acquire(KEY, "me", 5)
    finally:
        engine.dispose()


def test_sqlite_read_only_open_raises_what_stands_in_the_way(tmp_path):
    with pytest.raises(StoreMissing):
        open_store(tmp_path / "no.db", readonly=True)
    assert not (tmp_path / "no.db").exists()
    (tmp_path / "stage.yaml").write_text(STAGE_YAML)
    with pytest.raises(StoreError, match="not a SQLite database"):
        open_store(tmp_path / "stage.yaml", readonly=True)
    path = tmp_path / "state.db"
    with open_store(path) as store:
        _save(store, i=1)
    with open_store(path, readonly=True) as store:
        assert len(store.history("extract")) == 1
        with pytest.raises(StoreError, match="readonly"):
            store.acquire(KEY, "me", 5)


def test_postgres_unreachable_is_a_store_error():
    from sensors._store import StoreError

    with pytest.raises(StoreError, match=r"127\.0\.0\.1") as caught:
        open_store("postgresql://nobody:secret@127.0.0.1:1/none")
    assert "secret" not in str(caught.value)  # the URL is shown with its password masked


# -- locations and imports ----------------------------------------------------------------


def test_locations(tmp_path, monkeypatch):
    monkeypatch.delenv("CROSSCHECK_STATE", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_location() == str(tmp_path / "xdg" / "crosscheck" / "state.db")
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_location() == os.path.expanduser("~/.local/state/crosscheck/state.db")
    monkeypatch.setenv("CROSSCHECK_STATE", str(tmp_path / "env.db"))
    with open_store() as store:
        _save(store)
    assert (tmp_path / "env.db").exists()
    with open_store(":memory:") as store:
        assert store.location == ":memory:"
    with pytest.raises(ConfigError, match="unknown store location"):
        open_store("mysql://x/y")
    with pytest.raises(ConfigError, match="retention"):
        open_store(":memory:", retention=0)


def test_core_imports_without_sqlalchemy():
    code = (
        "import sys; import sensors._store as s; s.open_store(':memory:').close();"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'psycopg', 'prefect')];"
        "assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True
    )
