"""``crosscheck init`` on real processes: draft a stage file from a running job, check that it
validates, fill in ``expected``, and see ``crosscheck wait`` reach complete once the job ends.
Locally, over the test sshd, over two loopback hosts (ranks), and under the fake NVML."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from sensors._base.regex import compile_user_regex
from sensors._config.stage import load_stage_text
from sensors._draft.draft import EXIT_GRACE, EXPECTED_PLACEHOLDER
from sensors._draft.survey import Survey

REPO = Path(__file__).resolve().parent.parent

#: The job: ``job.py MODE FOLDER --out OUT [--node N --rank R] [--tag T]``. It writes two
#: outputs at once and two more when FOLDER/finish appears, then its last line and exits 0.
JOB = textwrap.dedent(
    """\
    import logging, multiprocessing, os, sys, time
    mode, folder = sys.argv[1], sys.argv[2]
    out = sys.argv[sys.argv.index("--out") + 1]
    node = int(sys.argv[sys.argv.index("--node") + 1]) if "--node" in sys.argv else 0
    rank = int(sys.argv[sys.argv.index("--rank") + 1]) if "--rank" in sys.argv else 0
    os.makedirs(out, exist_ok=True)
    def say(line):
        if mode == "print":
            print(line, flush=True)
        else:
            logging.info(line)
    if mode != "print" and rank == 0:
        name = f"node{node}.log" if mode == "rank" else "job.log"
        logging.basicConfig(filename=os.path.join(folder, name), level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(message)s")
    def nap(_):
        while not os.path.exists(os.path.join(folder, "finish")):
            time.sleep(0.05)
    if __name__ == "__main__":
        pool = multiprocessing.Pool(2) if mode == "pool" else None
        if node == 0 and rank == 0:
            for k in range(2):
                open(os.path.join(out, f"part-{k:05d}.npy"), "wb").write(b"x")
        say("step 1")
        if pool is not None:
            pool.map(nap, range(2))
        nap(0)
        if node == 0 and rank == 0:
            for k in range(2, 4):
                open(os.path.join(out, f"part-{k:05d}.npy"), "wb").write(b"x")
        if rank == 0:
            say(f"extraction complete")
        if pool is not None:
            pool.close(); pool.join()
    """
)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), **extra}


def _cli(*args: str, timeout: float = 90, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(**extra),
    )


class Job:
    """A job in its own folder (mode 0755: an sshd's user reads it too)."""

    def __init__(self, root: Path, mode: str, *extra: str, nohup: bool = False, name: str = "job") -> None:
        self.folder = root / name
        self.folder.mkdir(parents=True)
        self.folder.chmod(0o755)
        (self.folder / "job.py").write_text(JOB)
        self.out = self.folder / "out"
        self.tag = f"tag{os.getpid()}x{time.monotonic_ns() % 10**9}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.argv = [sys.executable, str(self.folder / "job.py"), mode, str(self.folder), "--out", str(self.out),
                     "--tag", self.tag, *extra]  # fmt: skip
        self.nohup = nohup

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        argv = [*self.argv, *extra]
        if self.nohup:
            cmd = f"exec nohup {shlex.join(argv)} > {shlex.quote(str(self.folder / 'job.log'))} 2>&1"
            proc = subprocess.Popen(["sh", "-c", cmd], start_new_session=True)
        else:
            proc = subprocess.Popen(
                argv, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        self.procs.append(proc)
        deadline = time.monotonic() + 20
        while not (self.out / "part-00001.npy").exists() and self.procs[0] is proc:
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.05)
        time.sleep(0.3)  # its log open, its workers started
        return proc

    def finish(self) -> None:
        (self.folder / "finish").touch()
        for proc in self.procs:
            assert proc.wait(30) == 0

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def jobs(tmp_path):
    made: list[Job] = []

    def make(*args, **kwargs) -> Job:
        made.append(Job(tmp_path, *args, **kwargs))
        return made[-1]

    yield make
    for job in made:
        job.stop()


def _drafted(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    assert ": valid" in result.stderr, result.stderr
    assert "next: " in result.stderr and "crosscheck wait" in result.stderr
    load_stage_text(result.stdout, file="draft.yaml")  # stdout alone is the stage file
    return yaml.safe_load(result.stdout)


def _gate(tmp_path: Path, text: str, job: Job, expected: int = 4, timeout: float = 60, **env: str) -> float:
    """Fill in expected, wait until the watch has seen the job running, finish the job: wait
    says complete (exit 0). Returns how long after the job's exit the gate opened (seconds)."""
    assert f"expected: {EXPECTED_PLACEHOLDER}" in text
    stage = tmp_path / "stage.yaml"
    stage.write_text(text.replace(f"expected: {EXPECTED_PLACEHOLDER}", f"expected: {expected}"))
    waiting = subprocess.Popen(
        [sys.executable, "-m", "sensors", "wait", str(stage), "--json", "--timeout", f"{timeout:g}s", "--state", "none"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(**env),
    )  # fmt: skip
    killer = threading.Timer(timeout + 60, waiting.kill)
    killer.start()
    try:
        assert waiting.stdout is not None
        seen: list[str] = []
        # Not a sleep: the job ends only once a check has seen it running (a watch that never
        # saw it could not tell this run's end from an earlier one's, and should not).
        while not seen or json.loads(seen[-1])["verdict"] != "running":
            line = waiting.stdout.readline()
            assert line, (
                "wait ended before it saw the job running",
                seen[-3:],
                waiting.stderr.read()[-2000:],
            )
            seen.append(line)
        job.finish()
        ended = time.monotonic()
        out, err = waiting.communicate(timeout=timeout + 30)
        opened = time.monotonic() - ended
    finally:
        killer.cancel()
        if waiting.poll() is None:
            waiting.kill()
    last = json.loads(out.splitlines()[-1])
    assert waiting.returncode == 0, (last["reasons"], err[-2000:])
    assert last["verdict"] == "complete"
    return opened


def _check_common(stage: dict, job: Job, log: Path) -> None:
    assert stage["log"]["path"] == str(log)
    assert stage["outputs"]["files"] == str(job.out)
    assert stage["outputs"]["pattern"] == "part-*.npy"
    match = compile_user_regex(stage["process"]["match"].replace("{node}", "0"))
    assert match.search(" ".join(job.argv)), stage["process"]["match"]
    assert stage["process"]["match"].startswith("job\\.py "), stage["process"]["match"]  # not the interpreter


def test_a_python_job_logging_to_a_file(tmp_path, jobs) -> None:
    job = jobs("logging")
    proc = job.start()
    result = _cli("init", "--pid", str(proc.pid), "--interval", "300ms")
    stage = _drafted(result)
    _check_common(stage, job, job.folder / "job.log")
    assert f"# from /proc/{proc.pid}/fd/" in result.stdout
    _gate(tmp_path, result.stdout, job)


def test_a_nohup_job_with_stdout_to_a_log(tmp_path, jobs) -> None:
    job = jobs("print", nohup=True)
    job.start()
    result = _cli("init", "--match", job.tag, "--interval", "300ms")
    stage = _drafted(result)
    _check_common(stage, job, job.folder / "job.log")
    assert "/fd/1 (stdout)" in result.stdout
    _gate(tmp_path, result.stdout, job)


def test_a_job_with_worker_children(tmp_path, jobs) -> None:
    job = jobs("pool")
    proc = job.start()
    result = _cli("init", "--match", f"{job.tag}", "--interval", "300ms")
    stage = _drafted(result)
    _check_common(stage, job, job.folder / "job.log")
    assert f"matches pid {proc.pid} and 2 of its children" in result.stdout, result.stdout
    _gate(tmp_path, result.stdout, job)


def test_a_job_over_the_test_sshd(tmp_path, jobs, sshd_server) -> None:
    job = jobs("logging")
    job.start()
    spec = sshd_server.spec()
    result = _cli(
        "init", "--match", job.tag, "--interval", "300ms", "--host", f"{spec['user']}@127.0.0.1:{spec['port']}",
        "--key", spec["key"], "--known-hosts", spec["known_hosts"],
    )  # fmt: skip
    stage = _drafted(result)
    assert stage["host"]["port"] == spec["port"]
    _check_common(stage, job, job.folder / "job.log")
    _gate(tmp_path, result.stdout, job)


def test_ranks_on_two_hosts(tmp_path, jobs, hosts) -> None:
    job = jobs("rank")
    for node in range(2):
        for rank in range(2):
            job.start("--node", str(node), "--rank", str(rank))
    # One key and one known_hosts for both hosts, as an operator's own ~/.ssh has.
    hosts[1].sshd.authorize(hosts[1].sshd.user, hosts[0].sshd.user_pub)
    known = tmp_path / "known_hosts"
    known.write_text("".join(h.sshd.known_hosts.read_text() for h in hosts))
    specs = [h.sshd.spec(known_hosts=str(known)) for h in hosts]
    args = []
    for spec in specs:
        args += ["--host", f"{spec['user']}@127.0.0.1:{spec['port']}"]
    result = _cli(
        "init", "--match", job.tag, "--interval", "300ms", *args,
        "--key", specs[0]["key"], "--known-hosts", specs[0]["known_hosts"],
    )  # fmt: skip
    stage = _drafted(result)
    assert stage["process"]["per_host"] == 2, result.stdout
    assert "--node {node}" in stage["process"]["match"], result.stdout
    assert stage["log"]["path"] == str(job.folder / "node{node}.log"), result.stdout
    assert stage["outputs"]["files"] == str(job.out), result.stdout  # named by node 0's own ranks
    assert stage["policy"]["exit_grace"] == "60s", result.stdout
    # The comment on exit_grace is the wait a person sees: node 1 is done only exit_grace after
    # its ranks were last seen alive (they were seen up to one interval before their exit).
    # Shortened to 5 s here, as a person may (the draft's 60 s is asserted above): the gate's
    # wait follows the value, not the default.
    grace = 5.0
    drafted = result.stdout.replace(f"exit_grace: {EXIT_GRACE:g}s", f"exit_grace: {grace:g}s")
    assert drafted != result.stdout, result.stdout
    opened = _gate(tmp_path, drafted, job, timeout=120)
    assert grace - 1 <= opened <= grace + 30, opened


def test_a_job_on_a_gpu(tmp_path, jobs) -> None:
    from tests.test_gpu import build_fake_nvml

    try:
        lib = build_fake_nvml(tmp_path / "nvml")
    except RuntimeError as exc:
        pytest.skip(str(exc))
    job = jobs("logging")
    proc = job.start()
    nvml = tmp_path / "nvml-state"
    gpu = "GPU-00000000-0000-0000-0000-000000000037"
    nvml.write_text(
        f"driver 550.54.15\ndevice {gpu} 97 40000 97887 H200\nsample 1000 97\nproc {proc.pid} 40000\n"
    )
    env = {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_STATE": str(nvml)}
    result = _cli("init", "--pid", str(proc.pid), "--interval", "300ms", **env)
    stage = _drafted(result)
    assert stage["gpu"]["devices"] == [0], result.stdout
    assert f"from NVML on local: the job's processes on GPU 0 (pid {proc.pid})" in result.stdout
    nvml.write_text(f"driver 550.54.15\ndevice {gpu} 0 0 97887 H200\nsample 1000 0\n")  # released at the end
    _gate(tmp_path, result.stdout, job, **env)


def test_a_job_it_cannot_see_is_one_line_and_exit_1(tmp_path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    result = _cli("init", "--pid", str(gone.pid))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip() == f"crosscheck: local: no process {gone.pid}", result.stderr
    result = _cli("init", "--match", "no-such-job-anywhere-37")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_another_users_job_is_one_line_and_exit_1(tmp_path, jobs) -> None:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser, to look as another user")
    job = jobs("logging")
    proc = job.start()
    probe = subprocess.run(
        ["runuser", "-u", "nobody", "--", sys.executable, "-c", "import sensors"],
        capture_output=True, env=_env(), cwd="/", timeout=60,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.skip("nobody cannot import this checkout")
    result = subprocess.run(
        ["runuser", "-u", "nobody", "--", sys.executable, "-m", "sensors", "init", "--pid", str(proc.pid)],
        capture_output=True, text=True, env=_env(CROSSCHECK_STATE="none"), cwd="/", timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert f"cannot read /proc/{proc.pid}/fd (permission denied" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_write_refuses_to_overwrite(tmp_path, jobs) -> None:
    job = jobs("logging")
    proc = job.start()
    target = tmp_path / "extract.yaml"
    result = _cli("init", "--pid", str(proc.pid), "--write", str(target))
    _drafted(result)
    assert target.read_text() == result.stdout
    assert f"crosscheck wait {target}" in result.stderr
    target.write_text("mine\n")
    again = _cli("init", "--pid", str(proc.pid), "--write", str(target))
    assert again.returncode == 2
    assert again.stdout == ""
    assert "exists: init never overwrites a file" in again.stderr
    assert target.read_text() == "mine\n"


def test_hostile_command_line_and_log_text_stay_inert(tmp_path, jobs) -> None:
    nasty = "x\n@@crosscheck 00 survey\nkey: 'v' # {a: [b]} \"q\" \\ *alias &anchor !tag %"
    job = jobs("logging", "--label", nasty, "--other", "pid 1\0" if False else "pid 1")
    proc = job.start()
    with open(job.folder / "job.log", "a") as f:
        f.write(f"{nasty}\n\\@@crosscheck x end\nfd 1 0100001 /etc/passwd\n")
    result = _cli("init", "--pid", str(proc.pid), "--interval", "300ms")
    stage = _drafted(result)
    _check_common(stage, job, job.folder / "job.log")
    for line in result.stdout.splitlines():  # no job text starts a line or a key
        assert not line.startswith(("@@", "x", "key:", "\\")), line
    assert "/etc/passwd" not in result.stdout
    _gate(tmp_path, result.stdout, job)


def test_a_match_with_no_literal_text_is_a_usage_error() -> None:
    result = _cli("init", "--match", "(?i).*")
    assert result.returncode == 2
    assert "needs some literal text" in result.stderr


def _needs_root_unshare() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a namespace of its own)")


def test_a_job_in_another_pid_namespace_is_one_line_and_exit_1(jobs) -> None:
    """crosscheck in a container of its own, the job on the host: /proc lists neither."""
    _needs_root_unshare()
    job = jobs("logging")
    proc = job.start()
    for which in (["--pid", str(proc.pid)], ["--match", job.tag]):
        result = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "sensors", "init", *which],
            capture_output=True, text=True, env=_env(), timeout=60,
        )  # fmt: skip
        assert result.returncode == 1, result.stderr
        assert result.stdout == ""
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1, line
        assert line.startswith("crosscheck: local: no process"), line
        assert "the probe runs in a PID namespace of its own" in line, line
        assert line.endswith(
            "run crosscheck init in the job's PID namespace (on the host, not in a container of its own)"
        )


def test_a_job_hidden_by_hidepid_is_one_line_and_exit_1(jobs) -> None:
    """Over SSH as a user who is not the job's, on a host whose /proc is mounted hidepid=2."""
    from tests.sshd import SSHD, ensure_tcsh_user, sshd_available

    _needs_root_unshare()
    if not sshd_available():
        pytest.skip("no sshd")
    job = jobs("logging")
    proc = job.start()
    wrap = [
        "unshare", "-m", "--propagation", "private", "sh", "-c",
        'mount -t proc -o hidepid=2 proc /proc && exec "$@"', "sh",
    ]  # fmt: skip
    with SSHD(wrap=wrap) as server:
        user = ensure_tcsh_user(server)
        spec = server.spec()
        result = _cli(
            "init", "--pid", str(proc.pid), "--host", f"{user}@127.0.0.1:{spec['port']}",
            "--key", spec["key"], "--known-hosts", spec["known_hosts"],
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith(f"crosscheck: 127.0.0.1: no process {proc.pid} the probe can see"), line
    # The kernel names the option as it was given (2) or by its name (invisible).
    assert re.search(r"/proc is mounted with hidepid=(2|invisible) and the probe runs as uid \d+", line), line
    assert line.endswith("run crosscheck init as the job's user, or as root"), line


# --------------------------------------------------------------------------- the draft, pure


def _survey(host: str, root: int, log: str, *, candidates=(), node: int = 0) -> Survey:
    from sensors._base.probe import Meta
    from sensors._draft.survey import Fd, Proc

    argv = ("python3", "/srv/train.py", "--out", "/data/out", "--node", str(node))
    proc = Proc(root, 1, argv, "/srv", (Fd(1, 0o100001, log),))
    meta = Meta(now=0.0, uptime=1.0, btime=0, boot_id="b", clk_tck=100, script_pid=None, hostname=host,
                uptime_virtualised=False)  # fmt: skip
    return Survey(
        host, meta, root, {root: proc}, {}, {log: b"step 1\n"}, {"/data/out": (("part-00000.npy",), 1)},
        tuple(candidates) or (("arg", root, "/data/out"),), None,
    )  # fmt: skip


def _hosts_named(*names: str) -> list[dict[str, object]]:
    return [{"ssh": name, "user": "ml"} for name in names]


@pytest.mark.parametrize(
    ("names", "logs", "path", "why"),
    [
        # The node's number, the host's stage-file name, one shared log, neither.
        (("gpu-a", "gpu-b"), ("/logs/node0.log", "/logs/node1.log"), "/logs/node{node}.log", "{node}: each host's own"),
        (("gpu-a", "gpu-b"), ("/logs/gpu-a/train.log", "/logs/gpu-b/train.log"), "/logs/{host}/train.log",
         "{host}: each host's own"),
        (("gpu-a", "gpu-b"), ("/logs/train.log", "/logs/train.log"), "/logs/train.log", "(stdout)"),
        (("gpu-a", "gpu-b"), ("/logs/x.log", "/logs/y.log"), "/logs/x.log", "CHECK: each host logs elsewhere"),
        # {host} is the name in hosts: the name a machine calls itself may differ, and is no template.
        (("10.0.0.1", "10.0.0.2"), ("/logs/gpu-a.log", "/logs/gpu-b.log"), "/logs/gpu-a.log", "CHECK"),
    ],
)  # fmt: skip
def test_a_log_per_host_is_a_template(names, logs, path, why) -> None:
    from sensors._draft.draft import draft

    surveys = [_survey(n, 100 + k, log, node=k) for k, (n, log) in enumerate(zip(names, logs, strict=True))]
    text = draft(surveys, _hosts_named(*names), now=0).text
    stage = yaml.safe_load(text)
    assert stage["log"]["path"] == path, text
    assert why in next(line for line in text.splitlines() if line.startswith("  path: ")), text
    load_stage_text(text, file="draft.yaml")  # the template validates


def test_outputs_named_by_another_nodes_process_first_are_still_this_jobs() -> None:
    """The script names a directory once, after the first process that named it: on a host
    running both nodes' ranks that may be node 1's; node 0's own argument names it too."""
    from sensors._draft.draft import draft

    surveys = [
        _survey("gpu-a", 100, "/logs/node0.log", candidates=[("arg", 999, "/data/out")]),
        _survey("gpu-b", 200, "/logs/node1.log", node=1),
    ]
    text = draft(surveys, _hosts_named("gpu-a", "gpu-b"), now=0).text
    assert yaml.safe_load(text)["outputs"]["files"] == "/data/out", text
    assert "from an argument of pid 100 (--out /data/out)" in text, text
    lone = _survey("gpu-a", 100, "/logs/x.log", candidates=[("arg", 999, "/elsewhere")])
    lone = dataclasses.replace(lone, dirs={"/elsewhere": (("a.npy",), 1)})
    assert "\noutputs:" not in draft([lone], ["local"], now=0).text  # named by no process of this job


def test_a_log_of_its_own_beside_stdout_is_named_and_expected_from_an_argument_is_a_to_do() -> None:
    """``nohup python job.py --num-samples 400 > out.log 2>&1`` with ``logging`` to train.log
    and 40 files of 10 samples: the draft names both logs, and says the 400 is a guess."""
    from sensors._base.probe import Meta
    from sensors._draft.draft import draft
    from sensors._draft.survey import Fd, Proc

    argv = ("python", "job.py", "--out-dir", "/d/out", "--num-samples", "400")
    fds = (Fd(1, 0o102001, "/d/out.log"), Fd(2, 0o102001, "/d/out.log"), Fd(3, 0o102001, "/d/train.log"))
    meta = Meta(now=0.0, uptime=1.0, btime=0, boot_id="b", clk_tck=100, script_pid=None, hostname="h",
                uptime_virtualised=False)  # fmt: skip
    s = Survey(
        "local", meta, 7, {7: Proc(7, 1, argv, "/d", fds)}, {},
        {"/d/out.log": b"Extracting:  12%|##  | 50/400\r", "/d/train.log": b"x INFO Processed 50/400 samples\n"},
        {"/d/out": (tuple(f"part-{k:05d}.npy" for k in range(5)), 5)}, (("arg", 7, "/d/out"),), None,
    )  # fmt: skip
    made = draft([s], ["local"], now=0)
    path = next(line for line in made.text.splitlines() if line.startswith("  path: "))
    assert path.startswith(
        "  path: '/d/out.log'  # from /proc/7/fd/1 (stdout); it also writes /d/train.log"
    ), path
    assert "CHECK which one its last line goes to" in path
    assert "from an argument of pid 7 (--out-dir /d/out)" in made.text
    assert any(t.startswith("log.path: the job writes two logs") for t in made.todo), made.todo
    assert (
        "outputs.expected: 400 is a guess (from the argument --num-samples 400 of pid 7); check it counts"
        " the files matching part-*.npy (5 now), not samples or steps"
    ) in made.todo, made.todo
