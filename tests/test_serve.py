"""`crosscheck serve DIR`: the real watcher process, stage files added, changed, broken and
removed while it runs; its /metrics and /healthz; SIGTERM ends it cleanly."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sensors.testing import SimulatedJob

REPO = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(what: str, ok: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_serve_picks_up_stage_files_as_they_come_and_go(tmp_path: Path) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    out, err = tmp_path / "out.jsonl", tmp_path / "err.log"
    port = _free_port()
    stuck = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="serve-stuck")
    done = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.3, tag="serve-done")
    stuck.start()
    stuck.write_stage(stages / "stuck.yaml", interval="300ms", stall_after="1h")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db")}
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--rescan", "300ms",
             "--metrics-port", str(port)],
            stdout=fo, stderr=fe, env=env,
        )  # fmt: skip

    def seen(stage: str, verdict: str | None = None) -> list[dict]:
        docs = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
        return [d for d in docs if d["stage"] == stage and (verdict is None or d["verdict"] == verdict)]

    try:
        _until("the first stage", lambda: len(seen("serve-stuck")) >= 2)
        # Added while it runs: a job that completes, and a file that does not load.
        (stages / "broken.yaml").write_text("stage: [not, a, name]\n")
        done.start()
        done.write_stage(stages / "done.yaml", interval="300ms", exit_grace="300ms")
        _until("the added stage to complete", lambda: bool(seen("serve-done", "complete")))
        assert "broken.yaml: skipped" in err.read_text()
        assert proc.poll() is None  # a bad file stops nothing
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'crosscheck_stage_verdict{host="local",stage="serve-done",verdict="complete"} 1.0' in metrics
        assert "crosscheck_check_duration_seconds_bucket" in metrics
        assert "\ncrosscheck_stages 2.0\n" in metrics and "\ncrosscheck_stages_held 2.0\n" in metrics
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()["stages"] == 2
        # Removed while it runs: no more checks of it.
        (stages / "stuck.yaml").unlink()
        _until(
            "the removal",
            lambda: "stuck.yaml: stage serve-stuck is in no stage file any more" in err.read_text(),
        )
        count = len(seen("serve-stuck"))
        time.sleep(1.5)
        assert len(seen("serve-stuck")) <= count + 1  # at most a check already in flight
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert "stopped" in err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stuck.stop()
        done.stop()


def test_a_watcher_renews_its_share_of_leases_in_one_store_call(tmp_path: Path) -> None:
    """Once it holds its stages, a watcher renews their leases together at each balance (one
    store call) and its checks ask the store for no lease of their own."""
    import threading
    from collections import Counter

    from sensors._store import open_store
    from sensors._watch.watcher import Watcher

    jobs = [SimulatedJob(tmp_path / f"j{k}", scenario="stall", total=4, step=0.01) for k in range(6)]
    directory = tmp_path / "stages"
    directory.mkdir()
    for k, job in enumerate(jobs):
        job.start()
        job.write_stage(directory / f"s{k}.yaml", interval="300ms", stall_after="1h")
    calls: Counter[str] = Counter()
    with open_store(tmp_path / "state.db") as store:
        for name in ("acquire", "renew_leases"):
            real = getattr(store, name)

            def counted(*args, _real=real, _name=name, **kwargs):
                calls[_name] += 1
                return _real(*args, **kwargs)

            setattr(store, name, counted)
        verdicts: list = []
        watcher = Watcher(directory, store=store, rescan_every=60.0, lease=4.0, emit=verdicts.append)
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,))
        thread.start()
        try:
            _until("every stage checked", lambda: len({v.stage for v in verdicts}) == len(jobs))
            time.sleep(1.0)  # every stage held, its first lease renewed once
            calls.clear()
            checks = len(verdicts)
            time.sleep(3.0)  # ~four balances (a fifth of the lease each), ten checks a stage
            held = [e.checker.persistence.held for e in watcher.entries.values()]
        finally:
            stop.set()
            thread.join(30)
            for job in jobs:
                job.stop()
        assert len(verdicts) - checks >= 5 * len(jobs)
        assert held == [True] * len(jobs)
        assert 2 <= calls["renew_leases"] <= 6, calls
        # Before: each held stage claimed alone at every balance (~24 here). A tick late on a
        # loaded machine may leave a check to renew its own.
        assert calls["acquire"] <= 2, calls


def test_a_directory_source_offers_one_stage_per_name_from_visible_stage_files(
    tmp_path: Path, caplog
) -> None:
    """Visible *.yaml and *.yml regular files (or links to one), by stage name; hidden files
    (an editor's copies), other names, directories and dangling links are not stages; a bad
    file is left out; a second file naming the same stage is refused, once, in the log."""
    from sensors._watch.watcher import DirectorySource

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=2)
    directory = tmp_path / "stages"
    directory.mkdir()
    job.write_stage(directory / "b.yaml", name="b")
    job.write_stage(directory / "a.yml", name="a")
    job.write_stage(directory / ".hidden.yaml", name="hidden")
    job.write_stage(directory / "notes.txt", name="notes")
    (directory / "dir.yaml").mkdir()
    (directory / "link.yaml").symlink_to(directory / "b.yaml")
    (directory / "dangling.yaml").symlink_to(directory / "nothing.yaml")
    (directory / "bad.yaml").write_text("stage: [")
    source = DirectorySource(directory)
    found = source.scan()
    assert sorted(found) == ["file:a", "file:b"]
    assert found["file:b"].name == "b.yaml"  # the first by path; link.yaml is refused
    source.scan()
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused == ["link.yaml: refused: stage b is already defined by b.yaml (one file per stage name)"]
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped == ["bad.yaml: skipped: line 1: expected the node content, but found '<stream end>'"]
    assert DirectorySource(tmp_path / "missing").scan() == {}


def _backdate(path: Path, seconds: float = 100.0) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_a_stage_file_is_its_content_not_its_times(tmp_path: Path) -> None:
    """A rewrite that keeps the file's times (`cp -p`, `rsync -t`, `touch -r`, or one within
    the filesystem's time granularity) is picked up; a touch, or a comment, changes nothing."""
    from sensors._watch.watcher import DirectorySource

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=40)
    directory = tmp_path / "stages"
    directory.mkdir()
    path = job.write_stage(directory / "s.yaml", name="s")
    _backdate(path)
    clock = [time.time()]
    source = DirectorySource(directory, clock=lambda: clock[0])
    first = source.scan()["file:s"]
    assert first.stage.outputs.expected == 40
    # A comment, a touch: the same definition (the watcher keeps its Checker: same version).
    path.write_text(path.read_text() + "# a comment\n")
    _backdate(path)
    assert source.scan()["file:s"].version == first.version
    # The same size, the same times as before: expected 40 -> 80, as `cp -p` would leave it.
    st = path.stat()
    path.write_text(path.read_text().replace("expected: 40", "expected: 80"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    clock[0] += 1
    assert source.scan()["file:s"].stage.outputs.expected == 80
    # Written again within one timestamp tick of the filesystem (a jiffy here, a second or
    # two elsewhere): every time and the size identical, yet the new content is picked up
    # (a file is read again while its times are too close to its last read to be trusted).
    fresh = DirectorySource(directory)
    same_tick = 0
    for n in range(20):
        before, after = 10 + n % 2, 10 + (n + 1) % 2
        path.write_text(job_text(job, before))
        assert fresh.scan()["file:s"].stage.outputs.expected == 10 + n % 2
        st = path.stat()
        path.write_text(job_text(job, after))
        same_tick += path.stat().st_ctime_ns == st.st_ctime_ns
        assert fresh.scan()["file:s"].stage.outputs.expected == 10 + (n + 1) % 2, n
    # A filesystem whose times never move (some FUSE mounts): the content is still read at
    # least once a minute.
    _backdate(path)
    clock[0] += 10  # its ctime (which utime cannot set) is well before this read
    source.scan()
    path.write_text(job_text(job, 30))
    _backdate(path)
    source._files[str(path)].signature = (
        lambda st: (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    )(path.stat())
    assert source.scan()["file:s"].stage.outputs.expected != 30  # its times say unchanged
    clock[0] += 61
    assert source.scan()["file:s"].stage.outputs.expected == 30


@pytest.fixture
def coarse_fs(tmp_path: Path) -> Iterator[Path]:
    """A filesystem whose times have whole-second granularity (ext2 with 128-byte inodes, as
    ext3 and some network filesystems), loop-mounted; skipped where that cannot be done."""
    import shutil

    if os.geteuid() != 0 or not shutil.which("mkfs.ext2"):
        pytest.skip("needs root and mkfs.ext2 for a loop-mounted filesystem")
    image, mount = tmp_path / "fs.img", tmp_path / "coarse"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    made = subprocess.run(["mkfs.ext2", "-q", "-I", "128", "-F", str(image)], capture_output=True)
    mounted = made.returncode == 0 and subprocess.run(["mount", "-o", "loop", str(image), str(mount)],
                                                      capture_output=True).returncode == 0  # fmt: skip
    if not mounted:
        pytest.skip("cannot loop-mount a filesystem here")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_a_rewrite_within_one_second_is_picked_up_where_times_are_whole_seconds(coarse_fs: Path) -> None:
    from sensors._watch.watcher import DirectorySource

    job = SimulatedJob(coarse_fs / "job", scenario="stall", total=2)
    path = coarse_fs / "s.yaml"
    source = DirectorySource(coarse_fs)
    same_second = 0
    for n in range(6):
        path.write_text(job_text(job, 10 + n % 2))
        assert source.scan()["file:s"].stage.outputs.expected == 10 + n % 2
        st = path.stat()
        path.write_text(job_text(job, 10 + (n + 1) % 2))
        new = path.stat()
        same_second += (new.st_mtime_ns, new.st_ctime_ns, new.st_size) == (
            st.st_mtime_ns,
            st.st_ctime_ns,
            st.st_size,
        )
        assert source.scan()["file:s"].stage.outputs.expected == 10 + (n + 1) % 2, n
    assert same_second >= 1  # the filesystem did hide rewrites from its times


def job_text(job: SimulatedJob, expected: int) -> str:
    """The stage file of ``job``, named s, expecting ``expected`` outputs."""
    import yaml

    data = job.stage_dict(name="s")
    data["outputs"]["expected"] = expected
    return yaml.safe_dump(data, sort_keys=False)


def test_a_directory_source_keeps_its_stages_through_a_missing_directory_and_a_lost_file(
    tmp_path: Path, caplog
) -> None:
    from sensors._watch.watcher import DirectorySource

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=2)
    directory = tmp_path / "stages"
    directory.mkdir()
    for name in ("a", "b"):
        job.write_stage(directory / f"{name}.yaml", name=name)
    source = DirectorySource(directory)
    assert sorted(source.scan()) == ["file:a", "file:b"]
    directory.rename(tmp_path / "away")
    for _ in range(3):  # missing: every stage kept, said once
        assert sorted(source.scan()) == ["file:a", "file:b"]
    assert sum("cannot be listed" in r.getMessage() for r in caplog.records) == 1
    (tmp_path / "away").rename(directory)
    assert sorted(source.scan()) == ["file:a", "file:b"]
    # A file missing from one scan is kept; from two, it is removed.
    (directory / "b.yaml").unlink()
    assert sorted(source.scan()) == ["file:a", "file:b"]
    assert sorted(source.scan()) == ["file:a"]
    # A file that stops loading keeps its last good definition.
    (directory / "a.yaml").write_text("stage: a\nprocess: {match: x}\npolicy: {interval: .nan}\n")
    assert source.scan()["file:a"].stage.process.match != "x"
    assert any("not reloaded" in r.getMessage() for r in caplog.records)


def test_two_stage_files_of_one_name_are_never_merged(tmp_path: Path, caplog) -> None:
    """The first keeps the name; the second is refused (once); when the first goes, the
    second is picked up; a file renamed keeps its stage."""
    from sensors._watch.watcher import DirectorySource

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=2)
    directory = tmp_path / "stages"
    directory.mkdir()
    job.write_stage(directory / "b.yaml", name="dup", interval="1s")
    source = DirectorySource(directory)
    assert source.scan()["file:dup"].name == "b.yaml"
    job.write_stage(directory / "a.yaml", name="dup", interval="2s")  # first by path, but later
    for _ in range(3):
        assert source.scan()["file:dup"].name == "b.yaml"  # the one watched keeps it
    assert sum("a.yaml: refused: stage dup" in r.getMessage() for r in caplog.records) == 1
    (directory / "b.yaml").unlink()
    source.scan()
    got = source.scan()["file:dup"]
    assert got.name == "a.yaml" and got.stage.policy.interval == 2
    (directory / "a.yaml").rename(directory / "c.yaml")
    assert source.scan()["file:dup"].version == got.version  # the same stage, under a new name


def _serve(stages: Path, tmp_path: Path, *args: str, stdout=None, name: str = "serve") -> subprocess.Popen:
    """A real `crosscheck serve` on ``stages``; its stderr in ``tmp_path/<name>.err``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db")}
    with open(tmp_path / f"{name}.err", "w") as fe:
        return subprocess.Popen(
            [sys.executable, "-m", "sensors", "serve", str(stages), *args],
            stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=fe,
            env=env,
        )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.startswith("{")]


def test_a_stage_file_with_a_bad_number_stops_no_other_stage(tmp_path: Path) -> None:
    """`interval: .nan` made serve exit with a traceback (every stage unwatched); `.inf` left
    every other stage unchecked. At start or added later, such a file is logged and skipped."""
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="good-one")
    job.start()
    job.write_stage(stages / "good.yaml", interval="200ms", stall_after="1h")
    bad = "stage: bad-{n}\nprocess: {{match: nothing}}\npolicy: {{{field}: {value}}}\n"
    (stages / "nan.yaml").write_text(bad.format(n=0, field="interval", value=".nan"))
    out = tmp_path / "out.jsonl"
    with open(out, "w") as fo:
        proc = _serve(stages, tmp_path, "--json", "--rescan", "300ms", stdout=fo)
    try:
        _until("the good stage", lambda: len(_jsonl(out)) >= 3)
        for n, (field, value) in enumerate(
            [
                ("interval", ".inf"),
                ("stall_after", "99999999999d"),
                ("timeout", ".nan"),
                ("settle", "1e400"),
                ("interval", "1" + "0" * 400),  # an int past any float: OverflowError ended serve
                ("stall_after", "1" * 5000),  # past Python's int digit limit: ValueError ended serve
            ],
            1,
        ):
            (stages / f"later{n}.yaml").write_text(bad.format(n=n, field=field, value=value))
        _until(
            "the later files to be skipped",
            lambda: (tmp_path / "serve.err").read_text().count("skipped") >= 7,
        )
        count = len(_jsonl(out))
        time.sleep(2.0)
        assert len(_jsonl(out)) >= count + 5  # still checked every 200 ms
        assert proc.poll() is None
        err = (tmp_path / "serve.err").read_text()
        assert "Traceback" not in err
        assert {d["stage"] for d in _jsonl(out)} == {"good-one"}
    finally:
        _stop(proc)
        job.stop()


def test_a_metrics_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _serve(stages, tmp_path, "--metrics-port", str(port))
        assert proc.wait(30) == 2
    err = (tmp_path / "serve.err").read_text()
    lines = [line for line in err.splitlines() if "crosscheck:" in line]
    assert lines == [
        f"crosscheck: --metrics-host 127.0.0.1 --metrics-port {port}: cannot listen there (Address already in use)"
    ], err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--metrics-port", "70000"], "argument --metrics-port: '70000' is not a port (0 to 65535)"),
        (["--metrics-port", "-1"], "argument --metrics-port: '-1' is not a port (0 to 65535)"),
        (
            ["--metrics-port", "0", "--metrics-host", ""],
            "argument --metrics-host: an empty address would listen on every interface",
        ),
        (
            ["--metrics-port", "0", "--metrics-host", "no.such.host.invalid"],
            "--metrics-host no.such.host.invalid --metrics-port 0: cannot listen there",
        ),
    ],
)
def test_a_metrics_address_that_cannot_be_listened_on_is_one_line_and_exit_2(
    flags: list[str], said: str, tmp_path: Path
) -> None:
    """A port past 65535 (or below 0) was a traceback from bind() and exit 1; an empty
    --metrics-host listened on every interface (0.0.0.0), where the default keeps /metrics on
    this machine; a host that does not resolve was blamed on the port."""
    stages = tmp_path / "stages"
    stages.mkdir()
    proc = _serve(stages, tmp_path, *flags)
    assert proc.wait(30) == 2
    err = (tmp_path / "serve.err").read_text()
    assert [line for line in err.splitlines() if "crosscheck" in line and ":" in line][-1].startswith(
        f"crosscheck: {said}"
    ), err
    assert "Traceback" not in err


def test_a_json_reader_that_stops_reading_holds_no_check_and_no_lease(tmp_path: Path) -> None:
    """stdout is a pipe nobody reads: once it is full, the checks go on (the metrics say when
    each stage was last checked) and the watcher's heartbeat and leases are renewed."""
    import sqlite3

    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="unread")
    job.start()
    for n in range(12):
        job.write_stage(stages / f"s{n:02d}.yaml", name=f"unread{n:02d}", interval="100ms", stall_after="1h")
    port = _free_port()
    proc = _serve(
        stages, tmp_path, "--json", "--metrics-port", str(port), "--lease", "2s", stdout=subprocess.PIPE
    )

    def last_checks() -> dict[str, float]:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        return {
            line.split('stage="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("crosscheck_stage_last_check_timestamp_seconds{")
        }

    try:

        def all_checked() -> bool:
            try:
                return len(last_checks()) == 12
            except httpx.TransportError:
                return False  # not listening yet

        _until("every stage checked", all_checked)
        time.sleep(6.0)  # 12 stages x 10 checks/s x ~2 KB: the 64 KiB pipe is long full
        first = last_checks()
        time.sleep(2.0)
        second = last_checks()
        assert all(second[s] > first[s] + 1.0 for s in first), (first, second)
        with sqlite3.connect(tmp_path / "state.db") as conn:
            now = time.time()
            (beat,) = conn.execute("SELECT max(expires_at) FROM crosscheck_watcher").fetchone()
            leases = [e for (e,) in conn.execute("SELECT expires_at FROM crosscheck_lease")]
        assert beat > now and len(leases) == 12 and min(leases) > now
        assert proc.poll() is None
    finally:
        _stop(proc)
        job.stop()
        if proc.stdout is not None:
            proc.stdout.close()


def _serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db"), **extra}


class _Served:
    """A real `crosscheck serve DIR --json` process and what it wrote."""

    def __init__(self, tmp_path: Path, stages: Path, *args: str, name: str = "serve", **env: str) -> None:
        self.out, self.err = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.err"
        with open(self.out, "w") as fo, open(self.err, "w") as fe:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--rescan", "300ms", *args],
                stdout=fo,
                stderr=fe,
                env=_serve_env(tmp_path, **env),
            )

    def docs(self, stage: str | None = None) -> list[dict]:
        return [d for d in _jsonl(self.out) if stage is None or d["stage"] == stage]

    def log(self) -> str:
        return self.err.read_text()

    def stop(self) -> None:
        _stop(self.proc)


def _expected(doc: dict) -> int:
    return doc["signals"]["outputs"]["evidence"]["expected"]


def test_serve_reloads_a_stage_file_rewritten_with_its_old_times(tmp_path: Path) -> None:
    """`cp -p`, `rsync -t`, `touch -r`: the new content with the old mtime. The stage kept
    `expected: 40` after the file said 80; now the content decides."""
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=40, step=0.01, tag="kept-times")
    job.start()
    path = job.write_stage(stages / "s.yaml", interval="200ms", stall_after="1h")
    served = _Served(tmp_path, stages)
    try:
        _until("the first check", lambda: bool(served.docs()))
        assert _expected(served.docs()[-1]) == 40
        # rsync -t: a new file with the old times, renamed over the old one.
        new = stages / ".s.yaml.tmp"
        new.write_text(path.read_text().replace("expected: 40", "expected: 80"))
        st = path.stat()
        os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(new, path)
        _until("the new definition", lambda: _expected(served.docs()[-1]) == 80)
        # cp -p onto the file itself: rewritten in place, its times put back.
        st = path.stat()
        path.write_text(path.read_text().replace("expected: 80", "expected: 60"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        _until("the rewrite in place", lambda: _expected(served.docs()[-1]) == 60)
    finally:
        served.stop()
        job.stop()


def test_a_reload_that_does_not_change_the_definition_changes_nothing(tmp_path: Path) -> None:
    """A comment added to a completed stage's file, then the directory swapped for a copy with
    identical files: no new Checker, no complete -> running -> complete, no second "complete"
    notification, no new history entry."""
    import shutil
    import sqlite3

    from tests.webhook_server import WebhookServer

    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.05, tag="settled-one")
    data = job.stage_dict(interval="100ms", exit_grace="300ms")
    data["notify"] = {"slack_webhook": "env:CROSSCHECK_TEST_HOOK", "on": ["complete", "stalled"]}
    import yaml

    path = stages / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with WebhookServer() as hook:
        served = _Served(tmp_path, stages, CROSSCHECK_TEST_HOOK=hook.url)

        def history() -> list[str]:
            with sqlite3.connect(tmp_path / "state.db") as conn:
                return [s for (s,) in conn.execute("SELECT state FROM crosscheck_history ORDER BY id")]

        try:
            _until("the watch to begin", lambda: bool(served.docs()))
            job.start()  # seen alive by this watch: its completion is this run's
            _until("complete", lambda: any(d["verdict"] == "complete" for d in served.docs()), timeout=60)
            _until("its notification", lambda: len(hook.requests) == 1)
            time.sleep(2.5)  # a completed stage is checked every 10 intervals: a few of them
            settled = history()
            checks = len(served.docs())
            path.write_text(path.read_text() + "# reviewed by ops\n")
            time.sleep(2.0)
            copy = tmp_path / "stages.new"
            shutil.copytree(stages, copy)
            stages.rename(tmp_path / "stages.old")
            copy.rename(stages)
            time.sleep(4.0)
            after = served.docs()[checks:]
            assert len(after) >= 2, "checked meanwhile"
            assert {d["verdict"] for d in after} == {"complete"}, (
                [(d["verdict"], d.get("reasons", [])[:2]) for d in after],
                served.log()[-3000:],
            )
            assert history() == settled
            assert len(hook.requests) == 1
            assert served.log().count("watching stage settled-one") == 1
            assert served.proc.poll() is None
        finally:
            served.stop()
            job.stop()


def test_two_stage_files_of_one_name_are_one_stage_in_serve(tmp_path: Path) -> None:
    """`status`/`wait` refuse two files of one stage name; serve merged them into one memory,
    lease and history. Now the second is refused, with a log line, until the first goes."""
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=40, step=0.01, tag="one-name")
    job.start()
    first = job.write_stage(stages / "a.yaml", interval="200ms", stall_after="1h")
    served = _Served(tmp_path, stages)
    try:
        _until("the first check", lambda: bool(served.docs()))
        (stages / "b.yaml").write_text(first.read_text().replace("expected: 40", "expected: 80"))
        _until(
            "the refusal",
            lambda: "b.yaml: refused: stage one-name is already defined by a.yaml" in served.log(),
        )
        count = len(served.docs())
        time.sleep(2.0)
        assert {_expected(d) for d in served.docs()[count:]} == {40}  # never b's definition
        first.unlink()
        _until("the second file to take over", lambda: _expected(served.docs()[-1]) == 80)
        assert served.log().count("refused") == 1
    finally:
        served.stop()
        job.stop()


def test_a_directory_missing_for_a_moment_removes_no_stage(tmp_path: Path) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="stall", total=4, step=0.01, tag="dir-away")
    job.start()
    for n in range(2):
        job.write_stage(stages / f"s{n}.yaml", name=f"dir-away{n}", interval="200ms", stall_after="1h")
    served = _Served(tmp_path, stages)
    try:
        _until("both stages", lambda: {d["stage"] for d in served.docs()} == {"dir-away0", "dir-away1"})
        stages.rename(tmp_path / "elsewhere")
        time.sleep(1.5)  # several scans
        (tmp_path / "elsewhere").rename(stages)
        count = len(served.docs())
        time.sleep(1.5)
        assert {d["stage"] for d in served.docs()[count:]} == {"dir-away0", "dir-away1"}
        log = served.log()
        assert "removed" not in log and log.count("watching stage") == 2
        assert log.count("cannot be listed") == 1
    finally:
        served.stop()
        job.stop()


def test_one_lease_rule_whatever_the_interval(tmp_path: Path) -> None:
    """--lease (30 s by default) is the lease of every stage a watcher holds: a 15 s interval
    gave 45 s leases (three intervals) and a takeover after 46 s."""
    import threading

    from sensors._store import open_store
    from sensors._watch.watcher import Watcher

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=2)
    directory = tmp_path / "stages"
    directory.mkdir()
    for name, interval in (("slow", "15s"), ("slower", "2m"), ("quick", "1s")):
        job.write_stage(directory / f"{name}.yaml", name=name, interval=interval)
    with open_store(tmp_path / "state.db") as store:
        for lease, rescan in ((None, 5.0), (10.0, 5.0), (60.0, 1.0)):
            watcher = Watcher(directory, store=store, lease=lease, rescan_every=rescan)
            expected = (lease or 30.0) - min(rescan, (lease or 30.0) / 5)
            assert watcher.written_ttl == expected
            watcher.rescan()
            assert {e.checker.persistence.ttl for e in watcher.entries.values()} == {expected}
            stop = threading.Event()
            stop.set()
            watcher.run(stop)  # releases what it took


def test_a_restarted_watcher_and_a_status_do_not_announce_a_settled_stage_again(tmp_path: Path) -> None:
    """A serve restarted on a stage it settled complete (and a `status` of it meanwhile) said
    complete -> running ("confirming 1/2") -> complete, sent a second "complete" and added
    history entries: a restored settled verdict of the same run and definition is not news."""
    import sqlite3

    import yaml

    from tests.webhook_server import WebhookServer

    stages = tmp_path / "stages"
    stages.mkdir()
    job = SimulatedJob(tmp_path, scenario="complete", total=3, step=0.05, tag="settled-restart")
    data = job.stage_dict(interval="100ms", exit_grace="300ms")
    data["notify"] = {"slack_webhook": "env:CROSSCHECK_TEST_HOOK", "on": ["complete", "stalled"]}
    path = stages / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))

    def history() -> list[str]:
        with sqlite3.connect(tmp_path / "state.db") as conn:
            return [s for (s,) in conn.execute("SELECT state FROM crosscheck_history ORDER BY id")]

    with WebhookServer() as hook:
        served = _Served(tmp_path, stages, CROSSCHECK_TEST_HOOK=hook.url)
        try:
            _until("the watch to begin", lambda: bool(served.docs()))
            job.start()
            _until("complete", lambda: any(d["verdict"] == "complete" for d in served.docs()), timeout=60)
            _until("its notification", lambda: len(hook.requests) == 1)
        finally:
            served.stop()
            job.stop()
        settled = history()
        assert settled[-1] == "complete", settled
        status = subprocess.run(
            [sys.executable, "-m", "sensors", "status", str(path), "--json"],
            capture_output=True,
            text=True,
            env=_serve_env(tmp_path),
            timeout=60,
        )
        assert status.returncode == 0 and json.loads(status.stdout)["verdict"] == "complete", status.stdout[
            -500:
        ]
        again = _Served(tmp_path, stages, name="again", CROSSCHECK_TEST_HOOK=hook.url)
        try:
            _until("checks after the restart", lambda: len(again.docs()) >= 2, timeout=60)
            time.sleep(1.5)
            assert {d["verdict"] for d in again.docs()} == {"complete"}, [d["verdict"] for d in again.docs()]
        finally:
            again.stop()
        assert history() == settled
        assert len(hook.requests) == 1


def test_a_check_in_flight_when_its_stage_file_changes_is_neither_shown_nor_announced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage file is edited while a check of it runs: that check is of a definition the
    file no longer holds. Its verdict is not emitted (nor announced), and the next check is the
    new definition's. Before, each scan that found a check in flight put the change off, and a
    stage checked back to back kept its old definition for seconds: fuzzer seed 4600596, serve
    completed on 2 outputs of 2 with the file asking for 3."""
    import threading

    from sensors._watch import watcher as watcher_module

    job = SimulatedJob(tmp_path / "job", scenario="stall", total=4, step=0.01)
    directory = tmp_path / "stages"
    directory.mkdir()
    path = job.write_stage(directory / "s.yaml", interval="100ms", stall_after="1h")
    entered, release = threading.Event(), threading.Event()
    made: list[Any] = []
    by: dict[int, int] = {}  # id(verdict) -> which checker (0: the first definition's)
    real_checker_for, real_batch = watcher_module.checker_for, watcher_module.check_batch

    def checker_for(stage: Any, **kwargs: Any) -> Any:
        made.append(real_checker_for(stage, **kwargs))
        return made[-1]

    def check_batch(checkers: list[Any]) -> list[Any]:
        if checkers[0] is made[0] and not entered.is_set():  # the first definition's first check
            entered.set()
            assert release.wait(30)
        verdicts = real_batch(checkers)
        for checker, verdict in zip(checkers, verdicts, strict=True):
            by[id(verdict)] = made.index(checker)
        return verdicts

    monkeypatch.setattr(watcher_module, "checker_for", checker_for)
    monkeypatch.setattr(watcher_module, "check_batch", check_batch)
    emitted: list[Any] = []
    job.start()
    watcher = watcher_module.Watcher(directory, store=None, rescan_every=0.2, emit=emitted.append)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,))
    thread.start()
    try:
        assert entered.wait(30)
        job.write_stage(path, interval="100ms", stall_after="2h")  # another definition
        time.sleep(1.0)  # several scans, each with the first check in flight
        release.set()
        _until("three checks of the new definition", lambda: sum(by.get(id(v)) == 1 for v in emitted) >= 3)
    finally:
        stop.set()
        thread.join(30)
        job.stop()
    assert [c.stage.policy.stall_after for c in made] == [3600.0, 7200.0]
    # Every verdict shown is the new definition's: the held check, of the old one, was not.
    assert [by.get(id(v)) for v in emitted] == [1] * len(emitted), [by.get(id(v)) for v in emitted]


# ----------------------------------------------------------------- a finished stage's cadence


def _cadence(states: list[str], interval: float = 1.0) -> list[float]:
    """The gaps serve leaves between looks at one stage whose checks say ``states`` in turn
    (a simulated clock: each check begins when the last one asked; no process, no probe)."""
    from types import SimpleNamespace

    from sensors import State
    from sensors._base.model import Verdict
    from sensors._watch.watcher import Watcher, _Entry

    watcher = Watcher(directory=Path("/nonexistent"))
    stage = SimpleNamespace(stage="s", policy=SimpleNamespace(interval=interval))
    entry = _Entry("k", "s", 1, stage, SimpleNamespace(persistence=None), None)  # type: ignore[arg-type]
    watcher.entries["k"] = entry
    gaps, began = [], 1000.0
    for state in states:
        verdict = Verdict("s", State(state), ("r",), {}, None, "local")
        due = watcher._finished("k", verdict, began)
        assert due is not None
        gaps.append(round(due - began, 6))
        began = due
    return gaps


def test_a_stage_just_finished_is_looked_at_its_interval_ten_times_then_ten_times_less_often() -> None:
    """A stage that just finished is often run again at once (a fix, a retry): a re-run of 4 s,
    begun at its finish, came and went between two looks 10 s apart and was never seen alive
    (user s14). Ten looks at the interval, then ten times less often."""
    assert _cadence(["running"] * 3 + ["complete"] * 13) == [1.0] * 13 + [10.0] * 3
    # A new run (any verdict not settled) starts the count again.
    assert _cadence(["complete"] * 11 + ["running"] + ["complete"] * 11) == [1.0] * 10 + [10.0] + [
        1.0
    ] * 11 + [10.0]
    assert _cadence(["failed"] * 12, interval=2.0) == [2.0] * 10 + [20.0] * 2
