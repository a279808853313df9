"""No false complete (issue 21): each route that once ended in ``complete`` while the job was
running, had not started or was killed, replayed through the real CLI on real processes.

The classes, as the issue names them:

1. memory and verdicts that cross runs or definitions (a followed verdict, ``--since`` as a
   duration, identities restored from an earlier run or process section);
2. a completion line counts only as the last word of this run (later lines, whitespace, a
   file time ahead of the host's clock);
3. what the probe cannot see is not gone (``hidepid``, a PID namespace, a kill that looks
   like an exit).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sensors import LocalHost
from sensors.testing import COMPLETE_LINE, SimulatedJob

REPO = Path(__file__).resolve().parent.parent


def _env(state: Path | None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), **extra}
    if state is not None:
        env["CROSSCHECK_STATE"] = str(state)
    return env


def _cli(
    state: Path | None, *args: str, timeout: float = 90, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(state, **extra),
    )


def _cli_begun(
    state: Path | None, *args: str, wrap: tuple[str, ...] = (), **extra: str
) -> Callable[[], subprocess.CompletedProcess[str]]:
    """``_cli`` begun now, in the background; what it returns waits for its result. For
    reads of a history that stands still (nothing changes on the host meanwhile, no state
    store written), run beside each other or beside the test's own checks: most of a CLI's
    second is its interpreter's start. ``wrap``: a command it runs under (``unshare ...``)."""
    proc = subprocess.Popen(
        [*wrap, sys.executable, "-m", "sensors", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(state, **extra),
    )

    def result() -> subprocess.CompletedProcess[str]:
        try:
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    return result


def _waiting(stage_file: Path, *, timeout: str = "30s") -> subprocess.Popen[str]:
    """``crosscheck wait STAGE --json --state none`` in the background: one JSON line per
    check on its stdout (the first one says the watch has begun)."""
    argv = ["wait", str(stage_file), "--json", "--timeout", timeout, "--state", "none"]
    return subprocess.Popen(
        [sys.executable, "-m", "sensors", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
    )


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _never_complete(out: subprocess.CompletedProcess[str]) -> list[dict]:
    """The CLI's verdicts, asserted: none complete, exit code not 0."""
    verdicts = _json_lines(out.stdout)
    assert verdicts, out.stdout + out.stderr
    said = [(v["verdict"], v["reasons"][:2]) for v in verdicts]
    assert out.returncode != 0, said[-3:]
    assert [v["verdict"] for v in verdicts if v["advance"] or v["verdict"] == "complete"] == [], said[-3:]
    return verdicts


def _write(path: Path, stage: dict) -> Path:
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return path


def _finished(tmp_path: Path, tag: str | None = None, total: int = 6) -> SimulatedJob:
    job = SimulatedJob(tmp_path, scenario="complete", total=total, step=0.01, tag=tag)
    job.start()
    assert job.wait(30) == 0
    return job


def _serve(tmp_path: Path, stages: Path, state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sensors",
            "serve",
            str(stages),
            "--state",
            str(state),
            "--json",
            "--rescan",
            "1s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _stored_verdict(state: Path, stage: str) -> str | None:
    from sensors._store import StageKey, open_store

    with open_store(state) as store:
        row = store.load(StageKey(stage, "local"))
    return None if row is None or row.verdict is None else row.verdict.get("verdict")


def _until(predicate, timeout: float = 60.0, every: float = 0.2) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(every)


# ----------------------------------------------------------------- 1. memory across runs


def test_a_verdict_followed_from_a_watcher_of_another_run_is_not_this_runs(tmp_path) -> None:
    """serve settled run 1 complete; a wait --since run 2's start, run 2 still running,
    exited 0 at once with run 1's verdict ("watched elsewhere by ...")."""
    state, stages = tmp_path / "state.db", tmp_path / "stages"
    stages.mkdir()
    first = SimulatedJob(tmp_path, scenario="complete", total=6, step=0.3)
    # Run 2 goes quiet after its steps: a stall_after longer than the watch keeps its verdict
    # "running" (3 s of quiet read "stalled" on a loaded machine, where the wait took longer).
    stage = first.stage_dict(interval="300ms", exit_grace="300ms", stall_after="1h")
    stage_file = _write(stages / "s.yaml", stage)
    first.start()
    serve = _serve(tmp_path, stages, state)
    try:
        assert first.wait(30) == 0
        _until(lambda: _stored_verdict(state, stage["stage"]) == "complete")
        second = SimulatedJob(tmp_path, scenario="stall", total=6, step=0.01, tag=first.tag)
        started = time.time()
        second.start()
        try:
            out = _cli(
                state,
                "wait",
                str(stage_file),
                "--since",
                f"@{started - 0.5:.3f}",
                "--json",
                "--timeout",
                "4s",
            )
            verdicts = _never_complete(out)
            assert out.returncode == 4, out.stderr
            # What this watch shows is this run's: the job alive, not run 1's exit.
            assert verdicts[-1]["verdict"] == "running", verdicts[-1]
        finally:
            second.stop()
    finally:
        _stop(serve)


def test_a_copy_of_the_stage_with_another_definition_does_not_follow_its_verdict(tmp_path) -> None:
    """A stage file expecting 80 outputs where 40 exist: status said complete with
    ``expected: 40`` in its evidence, following the watcher of the 40-output definition."""
    state, stages = tmp_path / "state.db", tmp_path / "stages"
    stages.mkdir()
    first = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.3)
    stage = first.stage_dict(interval="300ms", exit_grace="300ms")
    _write(stages / "s.yaml", stage)
    first.start()
    serve = _serve(tmp_path, stages, state)
    try:
        assert first.wait(30) == 0
        _until(lambda: _stored_verdict(state, stage["stage"]) == "complete")
        copy = _write(tmp_path / "copy.yaml", {**stage, "outputs": {**stage["outputs"], "expected": 8}})
        for args in (["status"], ["wait", "--timeout", "3s"]):
            out = _cli(state, *args, str(copy), "--json")
            verdicts = _never_complete(out)
            assert all(v["signals"]["outputs"]["evidence"].get("expected") in (8, None) for v in verdicts), (
                verdicts
            )
    finally:
        _stop(serve)


@pytest.mark.parametrize("arg", ["2s", "2", "2.0", " 2s "])
def test_a_since_given_as_a_duration_reaches_the_check_as_one_whatever_its_spelling(arg) -> None:
    """The CLI's ``--since`` reads a bare number as seconds before now, the same duration as
    ``2s``: the real run below (``2s``) then stands for every spelling (its earlier
    duration-as-seconds variant ran the same two real runs again for ``2``)."""
    from sensors._cli.main import _since_arg
    from sensors._run.run import Since

    assert _since_arg(arg) == Since(ago=2.0)


def test_a_since_given_as_a_duration_is_a_new_run_even_when_the_store_remembers_one(tmp_path) -> None:
    """`--since 2s` was ignored when the store held the stage's memory: a re-run still
    queued completed on the earlier run's evidence."""
    state = tmp_path / "state.db"
    first = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.2)
    stage_file = first.write_stage(tmp_path / "s.yaml", interval="200ms", exit_grace="200ms")
    first.start()
    watched = _cli(state, "wait", str(stage_file), "--json", "--timeout", "40s")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    time.sleep(2.5)  # the re-run is queued: given as starting 2 s ago, not started yet
    out = _cli(state, "status", str(stage_file), "--since", "2s", "--json")
    [verdict] = _never_complete(out)
    assert verdict["run"]["source"] == "since", verdict["run"]
    assert "ended" not in verdict["signals"]["process"]["detail"], verdict["signals"]["process"]


def test_a_job_identity_from_an_earlier_process_section_never_reaches_this_runs_gpu(tmp_path) -> None:
    """The GPU signal filed a busy GPU's process as "not the job's" against PIDs restored
    from an earlier definition, read the GPU idle, and a stage whose match no longer found
    the job completed at 100 % utilisation."""
    fake = pytest.importorskip("tests.fake_nvml")
    try:
        lib = fake.build_fake_nvml(tmp_path / "nvml")
    except RuntimeError as exc:
        pytest.skip(str(exc))
    state = tmp_path / "state.db"
    gpu = "GPU-0f2b6c1e-7a3d-4c55-9e21-3b8f0d9a1c01"
    nvml = tmp_path / "nvml-state"
    first = SimulatedJob(tmp_path, scenario="complete", total=4, step=0.4)
    stage = {
        **first.stage_dict(interval="200ms", exit_grace="200ms", settle=2),
        "gpu": {"devices": "all", "idle_below": 5, "idle_for": "600ms"},
    }
    stage_file = _write(tmp_path / "s.yaml", stage)
    first.start()
    nvml.write_text(f"device {gpu} 0 40000 97887 H200\nsample 1000 0\nproc {first.pid} 40000\n")
    env = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(nvml)}
    waiting = subprocess.Popen(
        [sys.executable, "-m", "sensors", "wait", str(stage_file), "--json", "--timeout", "40s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(state, **env),
    )
    assert first.wait(30) == 0
    nvml.write_text(f"device {gpu} 0 0 97887 H200\nsample 1000 0\n")  # its context released
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, (out[-2000:], err[-2000:])
    # The job runs again, busy on the GPU; the stage file's match was edited and no longer
    # finds it.
    second = subprocess.Popen(["sleep", "300"])
    try:
        nvml.write_text(f"device {gpu} 100 40000 97887 H200\nsample 1000 100\nproc {second.pid} 40000\n")
        edited = _write(
            tmp_path / "s.yaml", {**stage, "process": {"match": "--tag no-such-job-anymore( |$)"}}
        )
        out = _cli(state, "wait", str(edited), "--json", "--timeout", "3s", **env)
        verdicts = _never_complete(out)
        assert verdicts[-1]["signals"]["gpu"]["says"] == "working", verdicts[-1]["signals"]["gpu"]
        for v in verdicts:  # no process of the earlier run named as this run's
            assert str(first.pid) not in v["signals"]["process"]["detail"], v["signals"]["process"]
    finally:
        second.kill()
        second.wait()


# ----------------------------------------------------------------- 2. the last word of this run


#: What this run wrote after an earlier run's completion line, by name.
_TAILS = {
    "blank": "\n",
    "spaces": "   \n",
    "blanks": "\n\n  \t\n",
    "progress": "[1/6] 1 extracted, ETA 0 minutes\n",
    "other-text": "Loading model...\n",
    "no-newline": "   ",
}


@pytest.fixture(scope="module")
def rerun_logs(tmp_path_factory) -> tuple[dict[str, SimulatedJob], float]:
    """For each of ``_TAILS``, a log with an earlier run's completion line, then the tail
    written by this run after a start given with --since (the earlier run's lines stay before
    it): the start and the jobs by tail. Made once for the module, every log at the same
    moments (the tests only read them: ``--state none``)."""
    jobs = {}
    for name in _TAILS:
        job = SimulatedJob(tmp_path_factory.mktemp(f"rerun-{name}"), scenario="complete", total=6, step=0.01)
        job.start()
        jobs[name] = job
    assert all(job.wait(30) == 0 for job in jobs.values())
    time.sleep(1.5)
    started = time.time()
    time.sleep(1.5)
    for name, job in jobs.items():
        with open(job.log_path, "a") as log:
            log.write(_TAILS[name])
    return jobs, started


@pytest.mark.parametrize("tail", list(_TAILS))
def test_an_earlier_completion_line_followed_by_this_runs_bytes_is_not_this_runs(
    tmp_path, rerun_logs, tail
) -> None:
    """Whitespace is evidence of nothing, and text after a completion line is a later run's."""
    jobs, started = rerun_logs
    first = jobs[tail]
    stage = first.stage_dict(interval="200ms", exit_grace="200ms", settle=1)
    stage_file = _write(tmp_path / "s.yaml", stage)
    out = _cli(None, "status", str(stage_file), "--since", f"@{started:.3f}", "--json", "--state", "none")
    [verdict] = _never_complete(out)
    assert verdict["signals"]["log"]["says"] != "done", verdict["signals"]["log"]


@pytest.fixture(scope="module")
def killed_rerun(tmp_path_factory) -> tuple[Path, dict[str, float]]:
    """The earlier run's completion line, then a re-run's progress lines, the re-run killed
    half-way: its stage file and the starts a --since may give (made once for the module:
    the tests only read it, ``--state none``)."""
    tmp_path = tmp_path_factory.mktemp("killed-rerun")
    before_both = time.time() - 1
    time.sleep(1.2)
    first = _finished(tmp_path, total=8)
    time.sleep(1.5)
    between = time.time()
    time.sleep(0.5)
    rerun = SimulatedJob(tmp_path, scenario="stall", total=8, step=0.05, tag=first.tag)
    rerun.start()
    stage_file = _write(tmp_path / "s.yaml", rerun.stage_dict(interval="200ms", exit_grace="300ms"))
    _until(lambda: "[2/8]" in first.log_path.read_text().rpartition(COMPLETE_LINE)[2], timeout=30)
    os.killpg(rerun.pid, signal.SIGKILL)
    rerun.wait(5)
    return stage_file, {"between-runs": between, "before-both": before_both}


@pytest.mark.parametrize("since", ["between-runs", "before-both"])
def test_a_rerun_killed_half_way_after_an_earlier_completion_line_is_never_complete(
    killed_rerun, since
) -> None:
    """The earlier run's completion line, then this run's progress lines; the re-run is
    killed half-way; --since given: the stage completed once the process was gone. With a
    start before both runs, every line is "after the start": the latest run decides, and a
    completion line followed by progress that no process seen wrote is not counted."""
    stage_file, starts = killed_rerun
    start = starts[since]
    # status and wait side by side: the history is over, and neither writes a store.
    begun = [
        _cli_begun(None, *args, str(stage_file), "--since", f"@{start:.3f}", "--json", "--state", "none")
        for args in (["status"], ["wait", "--timeout", "4s"])
    ]
    for result in begun:
        verdicts = _never_complete(result())
        log = verdicts[-1]["signals"]["log"]
        assert log["says"] != "done", log
        # The progress after the line: a later run's, or the line's writers' last update,
        # which no process seen tells apart: the line is not counted ("cannot be told").
        said = log["evidence"].get("earlier_complete_line") or log["evidence"].get("followed_by") or ""
        assert said, log


@pytest.mark.parametrize("ahead", [30.0, 3600.0])
def test_a_log_time_ahead_of_the_hosts_clock_is_not_evidence(tmp_path, ahead) -> None:
    """A log on a file server whose clock is ahead: its mtime made an earlier run's last
    completion line this run's."""
    first = _finished(tmp_path)
    time.sleep(1.2)
    started = time.time()
    os.utime(first.log_path, (started + ahead, started + ahead))
    stage_file = _write(tmp_path / "s.yaml", first.stage_dict(interval="200ms", exit_grace="200ms", settle=1))
    out = _cli(None, "status", str(stage_file), "--since", f"@{started:.3f}", "--json", "--state", "none")
    [verdict] = _never_complete(out)
    assert verdict["signals"]["log"]["says"] != "done", verdict["signals"]["log"]


# ----------------------------------------------------------------- 3. what the probe cannot see


#: /proc mounted with hidepid=2 (invisible) in a mount namespace of its own, then the rest.
HIDEPID = ["unshare", "-m", "sh", "-c", 'mount -t proc -o hidepid=2 proc /proc && exec "$@"', "sh"]


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a mount or PID namespace")


def _post_processing(tmp_path: Path) -> tuple[SimulatedJob, float]:
    """A job (root's) that wrote its completion line and outputs and still post-processes."""
    tmp_path.chmod(0o755)
    job = SimulatedJob(tmp_path, scenario="post_process", total=4, step=0.01, spin=60)
    started = time.time()
    job.start()
    _until(lambda: COMPLETE_LINE in job.log_path.read_text(), timeout=30)
    job.log_path.chmod(0o644)
    job.outputs_dir.chmod(0o755)
    return job, started


def test_a_job_outside_the_probes_pid_namespace_is_not_gone(tmp_path) -> None:
    """crosscheck in a PID namespace of its own (a container), the job on the host: no
    process seen, and it was complete with --since."""
    _needs_root()
    job, started = _post_processing(tmp_path)
    try:
        stage = job.stage_dict(interval="200ms", exit_grace="200ms", settle=1)
        stage_file = _write(tmp_path / "s.yaml", stage)
        visible = _write(tmp_path / "v.yaml", {**stage, "process": {**stage["process"], "scope": "visible"}})
        since = ("--since", f"@{started - 1:.3f}", "--json", "--state", "none")
        # The three looks side by side (the job post-processes throughout; none writes a store).
        in_pidns = ("unshare", "--pid", "--fork", "--mount-proc")
        hidden = _cli_begun(None, "status", str(stage_file), *since, wrap=in_pidns)
        seen_visible = _cli_begun(None, "status", str(visible), *since, wrap=in_pidns)
        plain = _cli(None, "status", str(stage_file), *since)
        [verdict] = _never_complete(hidden())
        process = verdict["signals"]["process"]
        assert process["says"] == "unknown" and "PID namespace of its own" in process["detail"], process
        assert "process.scope: visible" in process["detail"]
        # The host's own view: the job at work.
        assert _json_lines(plain.stdout)[0]["verdict"] == "running", plain.stdout[-500:]
        # A user who knows the job always runs where the probe sees it says so.
        out = seen_visible()
        assert _json_lines(out.stdout)[0]["signals"]["process"]["says"] == "done", out.stdout[-500:]
        assert job.running  # at work for all three
    finally:
        job.stop()


class _HidepidHost(LocalHost):
    """The local host, as a probe run as ``nobody`` on a /proc mounted with hidepid=2 sees it."""

    nvml = False
    shell = (*HIDEPID, "runuser", "-u", "nobody", "--", "/bin/sh", "-s")


def test_a_job_hidden_by_hidepid_is_not_gone(tmp_path) -> None:
    """/proc with hidepid=2 and the probe another user than the job: a job still
    post-processing after its completion line was complete (root on a plain /proc says
    running)."""
    from sensors import Checker, State, stage_from_dict

    _needs_root()
    job, started = _post_processing(tmp_path)
    try:
        stage = stage_from_dict(job.stage_dict(interval="200ms", exit_grace="200ms", settle=1))
        checker = Checker(stage, host=_HidepidHost(), since=started - 1)
        verdicts = [checker.check() for _ in range(3)]
        assert [v.state for v in verdicts] == [State.UNKNOWN] * 3, verdicts[-1].reasons
        detail = verdicts[-1].readings["process"].detail
        assert "hidepid=invisible" in detail and "uid 65534" in detail, detail
        assert Checker(stage, since=started - 1).check().state is State.RUNNING
    finally:
        job.stop()


def test_a_job_hidden_by_hidepid_over_ssh_is_not_gone(tmp_path) -> None:
    """The same through the real CLI over SSH: the host's sshd sees /proc with hidepid=2 and
    the probe logs in as a user who is not the job's."""
    from tests.sshd import SSHD, ensure_tcsh_user, sshd_available

    _needs_root()
    if not sshd_available():
        pytest.skip("no sshd")
    server = SSHD(wrap=HIDEPID)
    try:
        user = ensure_tcsh_user(server)
        server.start()
        job, started = _post_processing(tmp_path)
        try:
            stage = {
                **job.stage_dict(interval="200ms", exit_grace="200ms", settle=1),
                "host": server.spec(user=user),
            }
            stage_file = _write(tmp_path / "s.yaml", stage)
            # Root on the same host's hidepid /proc sees every process: the job at work. The
            # two looks side by side (the job post-processes throughout; --state none).
            as_root = _write(tmp_path / "root.yaml", {**stage, "host": server.spec()})
            since = f"@{started - 1:.3f}"
            begun = [
                _cli_begun(None, "status", str(path), "--since", since, "--json", "--state", "none")
                for path in (stage_file, as_root)
            ]
            [verdict] = _never_complete(begun[0]())
            process = verdict["signals"]["process"]
            assert process["says"] == "unknown" and "hidepid=invisible" in process["detail"], process
            out = begun[1]()
            assert _json_lines(out.stdout)[0]["verdict"] == "running", out.stdout[-800:]
        finally:
            job.stop()
    finally:
        server.cleanup()


def test_a_process_only_stage_whose_job_was_killed_is_not_complete(tmp_path) -> None:
    """An exit and a SIGKILL look alike from /proc: a stage whose only signal is the process
    completed when its job was killed."""
    tag = f"only-process-{uuid.uuid4().hex[:8]}"
    job = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", tag], start_new_session=True
    )
    stage = {
        "stage": "only-process",
        "host": "local",
        "process": {"match": tag},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "200ms"},
    }
    stage_file = _write(tmp_path / "s.yaml", stage)
    waiting = _waiting(stage_file, timeout="6s")
    time.sleep(2.0)
    job.kill()
    job.wait()
    out, err = waiting.communicate(timeout=60)
    result = subprocess.CompletedProcess(waiting.args, waiting.returncode, out, err)
    verdicts = _never_complete(result)
    assert verdicts[-1]["verdict"] == "unknown", verdicts[-1]
    assert "success from a crash" in " ".join(verdicts[-1]["reasons"]), verdicts[-1]["reasons"]


@pytest.mark.parametrize(
    ("ending", "state", "said"),
    [
        ("exit 0", "complete", "exited with status 0"),
        ("exit 3", "failed", "exited with status 3"),
        ("SIGKILL", "failed", "killed by SIGKILL"),
        ("wrapper killed", "unknown", "exit status is not recorded"),
    ],
)
def test_a_launched_jobs_recorded_exit_status_tells_a_crash_from_a_success(
    tmp_path, host, ending, state, said
) -> None:
    """When crosscheck launched the job, its wrapper records the exit status on the host (read
    only by the probe), and the verdict uses it: the stage's only signal is the process."""
    from sensors import Checker, stage_from_dict

    tag = f"launched-{uuid.uuid4().hex[:8]}"
    code = {"exit 0": 0, "exit 3": 3}.get(ending)
    script = (
        f"import time, sys; time.sleep(1.0); sys.exit({code})"
        if code is not None
        else "import time; time.sleep(60)"
    )
    log_path = str(tmp_path / "job.log")
    pid, exit_file, run = _launch(host, tmp_path, script, tag, log_path)
    spec = {
        "stage": "launched",
        "process": {"pid": pid},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "500ms", "timeout": "30s"},
    }
    if host.name != "local":
        spec["host"] = host.spec.model_dump(exclude_none=True)
    try:
        time.sleep(0.5)
        if ending == "SIGKILL":
            # The job itself (the wrapper's child) is killed: the wrapper records 137.
            children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid]
            assert children, "the job runs as the wrapper's child"
            os.kill(children[0], signal.SIGKILL)
        elif ending == "wrapper killed":
            os.killpg(pid, signal.SIGKILL)  # the whole group: nothing left to record it
        checker = Checker(stage_from_dict(spec), host=host, run=run)
        # A wrapper killed leaves the stage unknown for good: the watch runs to its timeout,
        # 15 checks past the kill here (the others end at their verdict, well within it).
        verdicts = list(checker.watch(timeout=3 if ending == "wrapper killed" else 15))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    final = verdicts[-1]
    assert final.state.value == state, final.reasons
    assert said in " ".join(final.reasons), final.reasons
    assert State_complete_never_before(verdicts, state)
    if ending != "wrapper killed":
        assert Path(exit_file).read_text().split()[0] == str(
            {"exit 0": 0, "exit 3": 3, "SIGKILL": 137}[ending]
        )


class _PidnsHost(LocalHost):
    """The local host, as a probe in a PID namespace of its own sees it: no process outside."""

    nvml = False
    shell = ("unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-s")


@pytest.mark.parametrize(("ending", "state"), [("exit 0", "unknown"), ("exit 3", "failed")])
def test_a_launched_jobs_recorded_exit_where_the_probe_cannot_see_it(tmp_path, ending, state) -> None:
    """A probe that cannot see the job's processes (a PID namespace of its own; hidepid) and
    a stage that matches them: while the launched job works, nothing is assumed (unknown).
    Once its wrapper has recorded exit 0, whether the job left a process at work (a worker it
    double-forked, still writing an output: the adversary's, a false complete when the record
    decided alone) still cannot be told from here: unknown, and stuck at once with the fix,
    never polled to the timeout. Another status fails the run, seen or not."""
    from sensors import Checker, stage_from_dict

    _needs_root()
    host = LocalHost()
    tag = f"hidden-launch-{uuid.uuid4().hex[:8]}"
    code = {"exit 0": 0, "exit 3": 3}[ending]
    gate = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "print('step 1/2', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
        "print('Done', flush=True)\n"
        f"sys.exit({code})\n"
    )
    log_path = str(tmp_path / "job.log")
    pid, exit_file, run = _launch(host, tmp_path, script, tag, log_path)
    spec = {
        "stage": "hidden-launch",
        "process": {"match": tag},
        "log": {"path": log_path, "complete": "^Done"},
        "policy": {"interval": "200ms", "settle": 1, "exit_grace": "300ms", "timeout": "30s"},
    }
    try:
        checker = Checker(stage_from_dict(spec), host=_PidnsHost(), run=run)
        while_at_work = [checker.check() for _ in range(3)]
        assert [v.state.value for v in while_at_work] == ["unknown"] * 3, while_at_work[-1].reasons
        assert all(v.stuck is None for v in while_at_work)  # it may yet end either way
        assert "cannot see every process" in while_at_work[-1].readings["process"].detail
        gate.touch()
        _until(lambda: Path(exit_file).exists() and Path(exit_file).read_text().strip() != "", timeout=30)
        after = [checker.check() for _ in range(3)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    states = [v.state.value for v in while_at_work + after]
    assert "complete" not in states, states
    assert after[-1].state.value == state, after[-1].reasons
    if state == "unknown":
        assert all(v.stuck is not None for v in after), [v.stuck for v in after]
        stuck = after[-1].stuck
        assert stuck is not None and "cannot see every process" in stuck.why, stuck
        assert "where it sees the job's processes" in stuck.fix and "launch" not in stuck.fix, stuck
        assert "exit is recorded (status 0)" in after[-1].readings["process"].detail
    else:
        assert "exited with status 3" in " ".join(after[-1].reasons), after[-1].reasons


def test_a_launched_run_whose_record_the_probe_cannot_read_is_not_completed_by_a_later_runs_outputs(
    tmp_path,
) -> None:
    """A launched run exits 1 having written nothing; a run started by hand after it writes
    every output and exits 0. A watch of the launched run whose probe cannot read the exit
    record (another user: the launcher's own directory) had nothing against the outputs,
    written since the launch: complete (fuzzer seed 4001078, 12 hard false completes). Now
    unknown; the same watch with a probe that reads the record says failed."""
    from sensors import Checker, stage_from_dict

    _needs_root()
    host = LocalHost()
    tag = f"unread-launch-{uuid.uuid4().hex[:8]}"
    # Outputs the probe's user can reach (pytest's own tmp dirs are root's alone).
    shared = Path(tempfile.mkdtemp(prefix="crosscheck-unread-"))
    try:
        shared.chmod(0o755)
        out = shared / "out"
        out.mkdir()
        out.chmod(0o755)
        log_path = str(tmp_path / "job.log")
        _pid, exit_file, run = _launch(host, tmp_path, "import sys; sys.exit(1)", tag, log_path)
        _until(lambda: Path(exit_file).exists() and Path(exit_file).read_text().strip() != "", timeout=30)
        for i in range(2):  # the run started by hand, after the launched one's exit 1
            (out / f"{i}.pt").write_text("x")
        spec = {
            "stage": "unread-launch",
            "outputs": {"files": str(out), "pattern": "*.pt", "expected": 2},
            "policy": {"interval": "200ms", "settle": 1},
        }
        blind = Checker(stage_from_dict(spec), host=_HidepidHost(), run=run)
        verdicts = [blind.check() for _ in range(4)]
        states = [v.state.value for v in verdicts]
        assert "complete" not in states and states[-1] == "unknown", (states, verdicts[-1].reasons)
        assert "exit record cannot be read by the probe's user" in verdicts[-1].reasons[0]
        sighted = Checker(stage_from_dict(spec), host=host, run=run)
        assert sighted.check().state.value == "failed"
    finally:
        shutil.rmtree(shared)


def _launch(host, tmp_path: Path, script: str, tag: str, log_path: str):
    """``python -c script tag`` launched on ``host`` as crosscheck launches a job (its wrapper
    records the exit): its PID, its exit file, and the run a gate of it watches."""
    from sensors._run.run import Run, launch_mark_script, parse_launch_mark

    tmp_path.chmod(0o755)
    mark = parse_launch_mark(host.run_script(launch_mark_script(log_path), timeout=30))
    pid, exit_file = host.launch([sys.executable, "-c", script, tag], log_path=log_path, name=tag)
    run = Run(
        "launch", mark.started_at, mark.log_inode, mark.log_offset, mark.log_fingerprint, pid, exit_file
    )
    return pid, exit_file, run


def State_complete_never_before(verdicts, state) -> bool:
    """No complete verdict anywhere but (for a success) at the end."""
    states = [v.state.value for v in verdicts]
    return "complete" not in (states if state != "complete" else states[:-1])


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError):
        return -1


@pytest.mark.parametrize("kind", ["files", "lines"])
def test_an_output_dated_in_the_hosts_future_is_not_written_during_the_run(tmp_path, kind) -> None:
    """An outputs-only stage completes only with an output written during the run: one whose
    mtime is ahead of the host's clock (a file server's own clock) is no such output."""
    out = tmp_path / "out"
    out.mkdir()
    for i in range(3):
        (out / f"{i}.pt").write_bytes(b"x")
    records = tmp_path / "train.jsonl"
    records.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    time.sleep(1.2)
    started = time.time()
    ahead = started + 3600
    os.utime(out / "2.pt", (ahead, ahead))
    os.utime(records, (ahead, ahead))
    where = {"files": str(out), "pattern": "*.pt"} if kind == "files" else {"lines": str(records)}
    stage = {
        "stage": "future-outputs",
        "outputs": {**where, "expected": 3},
        "policy": {"interval": "200ms", "settle": 1},
    }
    stage_file = _write(tmp_path / "s.yaml", stage)
    # status and wait side by side: nothing changes meanwhile, and neither writes a store.
    begun = [
        _cli_begun(None, *args, str(stage_file), "--since", f"@{started:.3f}", "--json", "--state", "none")
        for args in (["status"], ["wait", "--timeout", "3s"])
    ]
    for result in begun:
        verdicts = _never_complete(result())
        assert verdicts[-1]["signals"]["outputs"]["evidence"]["written_this_run"] is False, verdicts[-1]
