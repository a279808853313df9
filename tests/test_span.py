"""A stage over several hosts (issue 25): several real sshd hosts on 127.0.0.1, simulated
ranks (tests/span_job.py), the real CLI, and the verdict across hosts table-tested.

Each test sshd runs in a mount namespace of its own where /usr/local/sbin (first on the
probe's PATH) holds a fake ``nvidia-smi`` with that host's GPU state: every host has its own
GPUs, as it would. /proc is the machine's, so each host's ranks are told apart by the
``--node N`` in their command lines (``process.match`` names ``{node}``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from sensors import ConfigError, Reading, Says, State, Verdict, stage_from_dict
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across
from tests.wait_cli import WaitCli

REPO = Path(__file__).resolve().parent.parent
JOB = Path(__file__).resolve().parent / "span_job.py"
GPU_UUID = "GPU-5a1e7c3d-0b2f-4e6a-9c11-2d3e4f5a6b{:02d}"


# --------------------------------------------------------------------------- the stage file


def _base(**extra: Any) -> dict[str, Any]:
    return {"stage": "train", "process": {"match": "train.py --node {node} "}, **extra}


def test_hosts_as_a_list_or_a_pattern_with_a_count() -> None:
    listed = stage_from_dict(_base(hosts=[{"ssh": "gpu-01"}, {"ssh": "gpu-02", "port": 2202}]))
    assert listed.host_labels == ("gpu-01", "gpu-02")
    pattern = stage_from_dict(_base(hosts={"ssh": "gpu-{n:02d}", "count": 3, "first": 1, "user": "ml"}))
    assert pattern.host_labels == ("gpu-01", "gpu-02", "gpu-03")
    assert {h.user for h in pattern.hosts} == {"ml"}  # type: ignore[union-attr]
    # Two hosts of one name (one address, two ports) are told apart by port.
    same = stage_from_dict(
        _base(hosts=[{"ssh": "10.0.0.5", "port": 2201}, {"ssh": "10.0.0.5", "port": 2202}])
    )
    assert same.host_labels == ("10.0.0.5:2201", "10.0.0.5:2202")


def test_each_node_reads_its_own_host_and_the_shared_parts_once() -> None:
    stage = stage_from_dict(
        _base(
            hosts=[{"ssh": "gpu-01"}, {"ssh": "gpu-02"}],
            log={"path": "/logs/{host}-rank{node}.log", "complete": "done"},
            outputs={"files": "/shared/out", "expected": 4},
        )
    )
    first, second = stage.nodes
    assert (first.host.ssh, second.host.ssh) == ("gpu-01", "gpu-02")  # type: ignore[union-attr]
    assert first.process.match == "train.py --node 0 " and second.process.match == "train.py --node 1 "  # type: ignore[union-attr]
    assert (first.log.path, second.log.path) == ("/logs/gpu-01-rank0.log", "/logs/gpu-02-rank1.log")  # type: ignore[union-attr]
    # Shared storage is counted once, on node 0.
    assert first.outputs is not None and second.outputs is None
    # A log without a template is one shared file: read on node 0 only.
    shared = stage_from_dict(
        _base(
            hosts=[{"ssh": "gpu-01"}, {"ssh": "gpu-02"}],
            log={"path": "/shared/train.log", "complete": "done"},
        )
    )
    assert shared.nodes[0].log is not None and shared.nodes[1].log is None
    # A node's memory in the state store is never another stage's (a name no stage file may give).
    assert {n.stage for n in stage.nodes} == {"train#gpu-01", "train#gpu-02"}


def test_a_stage_over_several_hosts_is_written_as_it_is_read() -> None:
    """A gate's handoff and a flow's parameters write the stage and read it back: written
    with ``host`` (its default) beside ``hosts``, it was refused as both forms."""
    from sensors import Stage

    stage = stage_from_dict(_base(hosts={"ssh": "gpu-{n:02d}", "count": 2}, policy={"success": "chief"}))
    written = stage.model_dump(mode="json")
    assert "host" not in written
    again = Stage.model_validate(written)
    assert again == stage and again.host_labels == ("gpu-00", "gpu-01")
    assert "host" in stage_from_dict(_base()).model_dump()  # one host: written as before


def test_a_log_per_rank_is_each_hosts_ranks_logs() -> None:
    stage = stage_from_dict(
        _base(
            hosts=[{"ssh": "a"}, {"ssh": "b"}],
            process={"match": "train.py --node {node} ", "per_host": 3},
            log={"path": "/logs/{host}/rank{rank}.log", "complete": "done"},
        )
    )
    assert [n.log.path for n in stage.nodes] == ["/logs/a/rank0.log", "/logs/b/rank3.log"]  # type: ignore[union-attr]
    others = [[(r.stage, r.log.path, r.host.ssh) for r in ranks] for ranks in stage.rank_logs]  # type: ignore[union-attr]
    assert others == [
        [("train#a#rank1", "/logs/a/rank1.log", "a"), ("train#a#rank2", "/logs/a/rank2.log", "a")],
        [("train#b#rank4", "/logs/b/rank4.log", "b"), ("train#b#rank5", "/logs/b/rank5.log", "b")],
    ]
    assert all(r.process is None and r.outputs is None for ranks in stage.rank_logs for r in ranks)


def test_a_host_name_in_a_match_is_matched_as_text() -> None:
    stage = stage_from_dict(
        {"stage": "t", "hosts": [{"ssh": "gpu.01"}], "process": {"match": "train.py --host {host}$"}}
    )
    assert stage.nodes[0].process.match == r"train.py --host gpu\.01$"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"host": "local", "hosts": [{"ssh": "a"}]}, "not both"),
        ({"hosts": [{"ssh": "a"}, {"ssh": "a"}]}, "named twice"),
        ({"hosts": {"ssh": "gpu", "count": 2}}, "{n}"),
        ({"host": "local", "process": {"match": "x", "per_host": 8}}, "several hosts"),
        ({"host": "local", "policy": {"success": "chief"}}, "several hosts"),
        ({"hosts": [{"ssh": "a"}], "launch": {"command": "x"}}, "launch"),
        # A log per rank needs the ranks of each host; {rank} names a log, not a process.
        ({"hosts": [{"ssh": "a"}], "log": {"path": "/l/rank{rank}.log", "complete": "x"}}, "per_host"),
        (
            {"hosts": [{"ssh": "a"}], "process": {"match": "train.py --rank {rank}", "per_host": 2}},
            "only log.path takes {rank}",
        ),
    ],
)
def test_what_a_stage_over_several_hosts_refuses(extra: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("{", r"\{").replace("}", r"\}")):
        stage_from_dict(_base(**extra))


def test_every_host_must_show_its_ranks_gone() -> None:
    with pytest.raises(ConfigError, match=r"needs process\.match"):
        stage_from_dict(
            {"stage": "t", "hosts": [{"ssh": "a"}, {"ssh": "b"}], "outputs": {"files": "/o", "expected": 1}}
        )


def test_a_checker_of_one_host_refuses_a_stage_over_several() -> None:
    from sensors import Checker

    stage = stage_from_dict(_base(hosts=[{"ssh": "a"}, {"ssh": "b"}]))
    with pytest.raises(ConfigError, match="several hosts"):
        Checker(stage)


# --------------------------------------------------------------------------- the verdict, pure

NOW = 1_000_000.0
POLICY = PolicySpec(stall_after=60.0)


def _r(signal: str, says: Says, read_at: float | None = NOW, **evidence: Any) -> Reading:
    return Reading(signal, says, f"{signal} {says}", evidence, read_at)


def _node(host: str, state: State, *readings: Reading, at: float = NOW) -> NodeCheck:
    return NodeCheck(
        host, Verdict("t", state, (f"{host} {state}",), {r.signal: r for r in readings}, at, host)
    )


GONE = _r("process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=9.0)
GONE_UNSEEN = _r("process", Says.DONE, alive=0, seen_alive=False, cpu_seconds=0.0)
LOG_DONE = _r("log", Says.DONE, size=10)
LOG_WORKING = _r("log", Says.WORKING, size=10)
OUT_DONE = _r("outputs", Says.DONE, count=4)


def _alive(n: int, cpu: float = 1.0) -> Reading:
    return _r("process", Says.WORKING, alive=n, seen_alive=True, cpu_seconds=cpu)


def _decide(nodes: list[NodeCheck], *, per_host: int | None = None, success: str = "all", memory=None):
    policy = POLICY.model_copy(update={"success": success})
    return decide_across("t", nodes, policy, per_host, memory or AcrossMemory(), NOW)


@pytest.mark.parametrize(
    ("nodes", "per_host", "success", "state", "reason"),
    [
        # Every host agrees.
        (
            [
                _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
                _node("b", State.COMPLETE, GONE, LOG_DONE),
            ],
            None,
            "all",
            State.COMPLETE,
            "every host agrees",
        ),
        # A host that cannot be read is unknown for the stage, never done.
        (
            [
                _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
                _node("b", State.UNKNOWN, _r("process", Says.UNKNOWN, None, host_error="refused")),
            ],
            None,
            "all",
            State.UNKNOWN,
            "b cannot be read",
        ),
        # Node 0 not complete: its verdict holds the stage.
        (
            [_node("a", State.RUNNING, _alive(2), LOG_WORKING), _node("b", State.COMPLETE, GONE, LOG_DONE)],
            None,
            "all",
            State.RUNNING,
            "a (node 0): running",
        ),
        # Another host with its own log: its own verdict holds (unknown: within its exit grace)...
        (
            [
                _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
                _node("b", State.UNKNOWN, GONE, LOG_WORKING),
            ],
            None,
            "all",
            State.UNKNOWN,
            "b: unknown",
        ),
        # ...and gone without its completion line, under all, it failed (rule 12 on b)...
        (
            [
                _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
                _node("b", State.FAILED, GONE, LOG_WORKING),
            ],
            None,
            "all",
            State.FAILED,
            "b: b failed",
        ),
        # ...under chief, its ranks gone is enough (the log is left out of the evidence, said so).
        (
            [
                _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
                _node("b", State.FAILED, GONE, LOG_WORKING),
            ],
            None,
            "chief",
            State.COMPLETE,
            "every host agrees",
        ),
        # Never seen alive in this watch, nothing of its own says it finished: it may never have run.
        (
            [_node("a", State.COMPLETE, GONE, OUT_DONE), _node("b", State.UNKNOWN, GONE_UNSEEN)],
            None,
            "all",
            State.UNKNOWN,
            "may never have run",
        ),
        # An error line on any host is a failure, whatever node 0 says.
        (
            [_node("a", State.RUNNING, _alive(2)), _node("b", State.FAILED, GONE, _r("log", Says.FAILED))],
            None,
            "chief",
            State.FAILED,
            "b: log failed",
        ),
        # Ranks alive on another host: not done.
        (
            [_node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE), _node("b", State.RUNNING, _alive(2))],
            None,
            "all",
            State.RUNNING,
            "b: running",
        ),
    ],
)
def test_the_verdict_across_hosts(nodes, per_host, success, state, reason) -> None:
    verdict, _ = _decide(nodes, per_host=per_host, success=success)
    assert verdict.state is state, verdict.reasons
    assert reason in verdict.reasons[0], verdict.reasons
    assert verdict.advance is (state is State.COMPLETE)


@pytest.mark.parametrize(
    ("rank1", "success", "state", "reason"),
    [
        (LOG_DONE, "all", State.COMPLETE, "every host agrees"),
        (LOG_WORKING, "all", State.UNKNOWN, "a: log#rank1 working"),  # every rank's line, under all
        (_r("log", Says.FAILED), "all", State.FAILED, "a: log#rank1: log failed"),  # an error line: failed
        (LOG_WORKING, "chief", State.COMPLETE, "every host agrees"),  # rank 0's line is node 0's log
        (
            _r("log", Says.FAILED),
            "chief",
            State.FAILED,
            "a: log#rank1: log failed",
        ),  # an error line, whatever the policy
        (_r("log", Says.UNKNOWN, None), "all", State.UNKNOWN, "a: log#rank1 unknown"),
    ],
)
def test_the_logs_of_a_nodes_other_ranks(rank1: Reading, success: str, state: State, reason: str) -> None:
    """``log.path`` with ``{rank}``: node 0's own log is rank 0's, rank 1's comes with it."""
    a = _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE)
    a = NodeCheck(a.host, a.verdict, {"log#rank1": rank1})
    verdict, _ = _decide([a, _node("b", State.COMPLETE, GONE, LOG_DONE)], success=success)
    assert verdict.state is state and verdict.reasons[0].startswith(reason), verdict.reasons
    if state is State.COMPLETE and success == "chief":
        assert "log#rank1@a" not in verdict.readings  # left out, and said so
        assert any("not needed under success: chief" in r for r in verdict.reasons)


def test_under_chief_a_working_log_is_left_out_of_a_complete_verdict_and_said_so() -> None:
    nodes = [
        _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
        _node("b", State.FAILED, GONE, LOG_WORKING),
    ]
    verdict, _ = _decide(nodes, success="chief")
    assert "log@b" not in verdict.readings and "process@b" in verdict.readings
    assert any("log@b: not needed under success: chief" in r for r in verdict.reasons)


def test_fewer_ranks_than_expected_is_not_all_gone() -> None:
    memory = AcrossMemory()
    # Only 7 of 8 ranks were ever seen on b; all gone now.
    _, memory = _decide(
        [_node("a", State.RUNNING, _alive(8)), _node("b", State.RUNNING, _alive(7))],
        per_host=8,
        memory=memory,
    )
    verdict, _ = _decide(
        [_node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE), _node("b", State.COMPLETE, GONE, LOG_DONE)],
        per_host=8,
        memory=memory,
    )
    assert verdict.state is not State.COMPLETE
    assert "at most 7 of 8 ranks seen" in verdict.reasons[0]


def test_a_lost_rank_with_the_others_quiet_for_stall_after_is_a_hung_collective() -> None:
    busy = _r("gpu", Says.WORKING, job_gpu_busy=True)
    memory = AcrossMemory()
    # Each host's times are its own clock's (its check's checked_at).
    nodes = [
        _node("a", State.RUNNING, _alive(2, cpu=5.0), busy, at=NOW - 70),
        _node("b", State.RUNNING, _alive(2, cpu=5.0), busy, at=NOW - 70),
    ]
    _, memory = decide_across("t", nodes, POLICY, 2, memory, NOW - 70)

    # b lost a rank; nothing moves anywhere (the GPUs spin at 100 %: not progress).
    def quiet(at: float) -> list[NodeCheck]:
        return [
            _node("a", State.RUNNING, _alive(2, cpu=5.0), busy, at=at),
            _node("b", State.RUNNING, _alive(1, cpu=5.0), busy, at=at),
        ]

    verdict, memory = decide_across("t", quiet(NOW - 30), POLICY, 2, memory, NOW - 30)
    assert verdict.state is State.RUNNING  # not yet stall_after without progress
    assert "1 of 2 ranks on b gone" in verdict.reasons[0]
    verdict, memory = decide_across("t", quiet(NOW + 1), POLICY, 2, memory, NOW + 1)
    assert verdict.state is State.FAILED, verdict.reasons
    assert (
        "1 of 2 ranks on b gone" in verdict.reasons[0]
        and "a collective waiting for a lost rank" in verdict.reasons[0]
    )
    assert "GPUs busy on a, b" in verdict.reasons[0]
    # CPU time that moves is progress: not a hang.
    moving = [
        _node("a", State.RUNNING, _alive(2, cpu=50.0), busy, at=NOW + 2),
        _node("b", State.RUNNING, _alive(1, cpu=5.0), busy),
    ]
    again, _ = decide_across("t", moving, POLICY, 2, memory, NOW + 2)
    assert again.state is State.RUNNING, again.reasons


@pytest.mark.parametrize(
    ("per_second", "hung"),
    [
        (0.0, True),  # nothing at all
        (0.01, True),  # a poll loop charged a tick a second a rank (a quiet host's wakeups)
        (0.04, True),  # four ticks a second a rank: still under 5 % of a core
        (0.06, False),  # above it: work, however slow
        (1.0, False),  # a core a rank
    ],
)
def test_a_trickle_of_cpu_is_no_progress_but_work_is(per_second: float, hung: bool) -> None:
    """Ranks blocked in a collective are still charged CPU: each wakeup of a waiting loop that
    lands on a clock tick costs a whole tick. Under 5 % of a core a rank, measured since the
    last progress (not check by check, where a slow job's step is under a tick), CPU time is
    no progress; above it, it is."""
    memory = AcrossMemory()
    cpu = {"a": 5.0, "b": 5.0}
    state = State.RUNNING
    why: tuple[str, ...] = ()
    for k, at in enumerate(range(0, 71, 5)):
        ranks = {"a": 2, "b": 2 if k == 0 else 1}
        nodes = [
            _node(h, State.RUNNING, _alive(ranks[h], cpu=round(cpu[h], 2)), at=NOW + at) for h in ("a", "b")
        ]
        verdict, memory = decide_across("t", nodes, POLICY, 2, memory, NOW + at)
        state, why = verdict.state, verdict.reasons
        for h in cpu:
            cpu[h] += per_second * ranks[h] * 5
    if hung:
        assert state is State.FAILED and "CPU under 5% of a core a rank" in why[0], why
    else:
        assert state is State.RUNNING and "1 of 2 ranks on b gone" in why[0], why


# --------------------------------------------------------------------------- over several sshd


def _needs_sshd_root() -> None:
    from tests.sshd import sshd_available

    if not sshd_available():
        pytest.skip("no sshd")
    if os.geteuid() != 0:
        pytest.skip("needs root (a mount namespace per test host for its GPUs)")


class _Host:
    """One test host: an sshd whose own /usr/local/sbin holds a fake nvidia-smi."""

    def __init__(self, root: Path, index: int) -> None:
        from tests.fake_nvml import install_fake_smi
        from tests.sshd import SSHD

        self.bin = root / f"bin{index}"
        self.smi = install_fake_smi(self.bin)
        self.index = index
        self.pids: list[int] = []
        self.busy = 0
        wrap = [
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            f'mount --bind {self.bin} /usr/local/sbin && exec "$@"', "sh",
        ]  # fmt: skip
        self.sshd = SSHD(wrap=wrap)
        self.sshd.start()
        self.write_gpu()

    def write_gpu(self) -> None:
        at = time.strftime("%Y/%m/%d %H:%M:%S.000", time.gmtime())
        uuid_ = GPU_UUID.format(self.index)
        (self.smi / "gpu.csv").write_text(
            f"{at}, 0, {uuid_}, NVIDIA H200, {self.busy}, 40000, 143771, 580.82.07\n"
        )
        (self.smi / "apps.csv").write_text("".join(f"{uuid_}, {pid}, python3, 20000\n" for pid in self.pids))


class _Ranks:
    """The ranks of one simulated job: ``per_host`` on each node."""

    def __init__(self, folder: Path, nodes: int, per_host: int, *, rank_logs: bool = False) -> None:
        self.folder = folder
        self.tag = f"span-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        env = {**os.environ, "SPAN_RANK_LOGS": str(per_host)} if rank_logs else None
        self.procs = {
            (node, rank): subprocess.Popen(
                [
                    sys.executable,
                    str(JOB),
                    self.tag,
                    "--node",
                    str(node),
                    "--local_rank",
                    str(rank),
                    str(folder),
                ],
                start_new_session=True,
                env=env,
            )
            for node in range(nodes)
            for rank in range(per_host)
        }

    @property
    def match(self) -> str:
        return f"{self.tag} --node {{node}} "

    def finish(self) -> None:
        (self.folder / "finish").touch()

    def wait(self) -> None:
        for proc in self.procs.values():
            assert proc.wait(30) == 0

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _stage(tmp_path: Path, hosts: list[_Host], ranks: _Ranks, **policy: Any) -> Path:
    stage = {
        "stage": "train",
        "hosts": [h.sshd.spec() for h in hosts],
        "process": {"match": ranks.match, "per_host": 2},
        "log": {
            "path": str(ranks.folder / "node{node}.log"),
            "complete": r"node \d+ done",
            "progress": r"^step",
        },
        "outputs": {"files": str(ranks.folder / "out"), "expected": 2},
        "policy": {"interval": "300ms", "settle": 1, "exit_grace": "300ms", "stall_after": "2s", **policy},
    }
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(stage, sort_keys=False))
    return path


def _wait(stage_file: Path, timeout: str) -> WaitCli:
    """``crosscheck wait --json`` on the stage file, no store."""
    return WaitCli(stage_file, "--timeout", timeout, "--state", "none")


def _alive_everywhere(verdict: dict[str, Any], hosts: list[_Host], per_host: int = 2) -> bool:
    keys = [f"process@127.0.0.1:{h.sshd.port}" for h in hosts]
    signals = verdict["signals"]
    return all(signals.get(k, {}).get("evidence", {}).get("alive") == per_host for k in keys)


def test_a_job_over_two_hosts_completes_when_every_host_agrees(tmp_path: Path, hosts: list[_Host]) -> None:
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    try:
        waiting = _wait(_stage(tmp_path, hosts, ranks), "60s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        ranks.finish()
        ranks.wait()
        assert waiting.end() == 0, waiting.verdicts[-3:]
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert last["verdict"] == "complete" and last["advance"] is True
    assert last["reasons"][0].startswith("every host agrees")
    a, b = (f"127.0.0.1:{h.sshd.port}" for h in hosts)
    assert last["host"] == f"{a}, {b}"
    # Each host's process and log as its own row; the shared outputs once, counted once.
    assert {f"process@{a}", f"process@{b}", f"log@{a}", f"log@{b}", "outputs"} <= set(last["signals"])
    assert last["signals"]["outputs"]["evidence"]["count"] == 2
    assert not [v for v in waiting.verdicts[:-1] if v["verdict"] == "complete"]


def test_a_rank_killed_while_the_others_wait_is_a_hung_collective_named(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    stop = threading.Event()
    for k, host in enumerate(hosts):
        host.pids = [ranks.procs[(k, r)].pid for r in range(2)]
        host.busy = 100

    def gpus() -> None:  # the fake GPUs' clock follows the host's, 100 % busy all along
        while not stop.is_set():
            for host in hosts:
                host.write_gpu()
            stop.wait(0.2)

    refresher = threading.Thread(target=gpus, daemon=True)
    refresher.start()
    stage_file = _stage(tmp_path, hosts, ranks)
    stage = yaml.safe_load(stage_file.read_text())
    stage["gpu"] = {"devices": "all", "idle_below": 5, "idle_for": "1s"}
    stage_file.write_text(yaml.safe_dump(stage, sort_keys=False))
    try:
        waiting = _wait(stage_file, "60s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        (ranks.folder / "hang").touch()
        victim = ranks.procs[(1, 1)]
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        rc = waiting.end()
    finally:
        stop.set()
        ranks.stop()
    last = waiting.verdicts[-1]
    assert rc == 3 and last["verdict"] == "failed", [
        (v["verdict"], v["reasons"][:1]) for v in waiting.verdicts[-3:]
    ]
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    why = last["reasons"][0]
    assert f"1 of 2 ranks on {b} gone" in why and "a collective waiting for a lost rank" in why, why
    assert "GPUs busy on" in why, why  # named, and not taken for progress
    took = waiting.times[-1] - killed_at
    # stall_after (2 s) + an interval, with room for a loaded 2-CPU machine's SSH checks.
    assert took < 2.0 + 0.3 + 8.0, took
    assert not [v for v in waiting.verdicts if v["verdict"] == "complete"]


@pytest.mark.parametrize("log", ["per host", "shared"])
def test_a_host_rebooted_while_the_others_wait_is_a_hung_collective_named(
    tmp_path: Path, hosts: list[_Host], log: str
) -> None:
    """Host 1 reboots mid-run (its sshd goes down, its ranks with it, and it comes back with
    another boot id: bind-mounted over /proc/sys/kernel/random/boot_id in its namespace) while
    node 0's ranks block in a collective: ``failed``, every rank on host 1 named gone."""
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    stage_file = _stage(tmp_path, hosts, ranks)
    if log == "shared":  # node 0's log only: host 1 has nothing of its own to say it failed
        doc = yaml.safe_load(stage_file.read_text())
        doc["log"]["path"] = str(ranks.folder / "node0.log")
        stage_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        waiting = _wait(stage_file, "60s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        b = hosts[1].sshd
        b.stop()
        (ranks.folder / "hang").touch()
        for rank in range(2):
            ranks.procs[(1, rank)].kill()
            ranks.procs[(1, rank)].wait()
        boot_id = tmp_path / "boot_id"
        boot_id.write_text(f"{uuid.uuid4()}\n")
        b.wrap[-2] = f"mount --bind {boot_id} /proc/sys/kernel/random/boot_id && {b.wrap[-2]}"
        b.start()
        rc = waiting.end()
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert rc == 3 and last["verdict"] == "failed", [
        (v["verdict"], v["reasons"][:1]) for v in waiting.verdicts[-3:]
    ]
    # Named: with a log of its own, host 1's job is gone without its line (rule 1), and its
    # ranks lost while node 0's are alive are said; without, the hung collective (rule 2).
    why = " ".join(last["reasons"][:2])
    assert f"every rank on 127.0.0.1:{b.port} gone" in why and "a collective" in why, last["reasons"]
    assert not [v for v in waiting.verdicts if v["verdict"] == "complete"]


def test_a_host_that_cannot_be_read_is_unknown_never_complete(tmp_path: Path, hosts: list[_Host]) -> None:
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    try:
        waiting = _wait(_stage(tmp_path, hosts, ranks), "8s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        hosts[1].sshd.stop()  # host 2 goes down; the job finishes everywhere
        ranks.finish()
        ranks.wait()
        rc = waiting.end()
    finally:
        ranks.stop()
    assert rc == 4, waiting.verdicts[-1]  # timed out: never complete
    assert not [v for v in waiting.verdicts if v["verdict"] == "complete" or v["advance"]]
    last = waiting.verdicts[-1]
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    assert last["verdict"] == "unknown" and last["reasons"][0].startswith(f"{b} cannot be read"), last[
        "reasons"
    ]


@pytest.mark.parametrize(("success", "rc"), [("chief", 0), ("all", 3)])
def test_the_chief_policy(tmp_path: Path, hosts: list[_Host], success: str, rc: int) -> None:
    """Only rank 0 writes its completion line (as many jobs do): complete under chief once
    every rank is gone; under all, node 1's job ended without its line: failed."""
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    try:
        waiting = _wait(_stage(tmp_path, hosts, ranks, success=success), "30s")
        waiting.until(lambda v: _alive_everywhere(v, hosts))
        # Node 1's log will never get its line: its ranks are told to end before they write it.
        for rank in range(2):
            ranks.procs[(1, rank)].send_signal(signal.SIGTERM)
        ranks.procs[(1, 0)].wait(10)
        ranks.finish()
        code = waiting.end()
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert code == rc, (last["verdict"], last["reasons"][:2])
    if success == "chief":
        assert last["verdict"] == "complete"
        b = f"127.0.0.1:{hosts[1].sshd.port}"
        assert f"process@{b}" in last["signals"] and f"log@{b}" not in last["signals"]
    else:
        assert last["verdict"] == "failed"


@pytest.mark.parametrize(
    ("rank3", "rc", "verdict"),
    [(None, 0, "complete"), ("mute", 4, "unknown"), ("error", 3, "failed")],
    ids=["every rank done", "rank 3 writes no line", "rank 3 errors"],
)
def test_a_log_per_rank_is_read_for_every_rank(
    tmp_path: Path, hosts: list[_Host], rank3: str | None, rc: int, verdict: str
) -> None:
    """``log.path: rank{rank}.log`` with 2 ranks a host: ranks 0-1 on node 0, 2-3 on node 1,
    each log read on its rank's host, in its probe. Under ``all`` every rank's log must show
    its line: rank 3 (node 1's second rank, whose log no node reads as its own) ending
    without one is never complete, and an error line in it fails the stage, named."""
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2, rank_logs=True)
    path = _stage(tmp_path, hosts, ranks)
    doc = yaml.safe_load(path.read_text())
    doc["log"] = {
        "path": str(ranks.folder / "rank{rank}.log"),
        "complete": r"rank \d+ done",
        "error": r"^ERROR",
        "progress": r"^step",
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    try:
        waiting = _wait(path, "12s")
        waiting.until(lambda v: _alive_everywhere(v, hosts) and f"log#rank3@{b}" in v["signals"])
        if rank3 == "error":
            (ranks.folder / "error-rank3").touch()
            assert ranks.procs[(1, 1)].wait(10) == 1
        elif rank3 == "mute":
            (ranks.folder / "mute-rank3").touch()
        ranks.finish()
        code = waiting.end()
    finally:
        ranks.stop()
    last = waiting.verdicts[-1]
    assert (code, last["verdict"]) == (rc, verdict), (last["reasons"][:3], waiting.proc.stderr.read()[-3000:])
    assert not [v for v in waiting.verdicts if v["verdict"] == "complete"] or verdict == "complete"
    if verdict == "complete":
        a = f"127.0.0.1:{hosts[0].sshd.port}"
        assert {f"log@{a}", f"log#rank1@{a}", f"log@{b}", f"log#rank3@{b}"} <= set(last["signals"])
        assert last["signals"][f"log#rank3@{b}"]["says"] == "done"
    elif verdict == "failed":
        assert last["reasons"][0].startswith(f"{b}: log#rank3: "), last["reasons"]
        assert "ERROR rank 3" in last["reasons"][0], last["reasons"]
    else:
        assert any(r.startswith(f"{b}: log#rank3") for r in last["reasons"]), last["reasons"]


def test_validate_says_where_each_part_of_a_stage_over_several_hosts_is_read(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text(
        yaml.safe_dump(
            _base(
                hosts={"ssh": "gpu-{n:02d}", "count": 6, "first": 1, "user": "ml"},
                process={"match": "train.py --node {node} ", "per_host": 8},
                log={"path": "/shared/train.log", "complete": "done"},
                outputs={"files": "/shared/out", "expected": 4},
                policy={"success": "chief"},
            )
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "sensors", "validate", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "this machine" not in text  # the one-host wording would be false here
    assert "6 hosts, each checked as a stage of its own" in text and "ml@gpu-01:22" in text
    assert "and 2 more" in text
    assert "8 per host (ranks)" in text
    assert "one shared file, read on node 0" in text and "read once, on node 0 (shared storage)" in text
    assert "success: chief" in text


def test_a_watch_checks_until_final_or_its_timeout_whatever_checks() -> None:
    """``Watch.of``: the loop a Checker's and a SpanChecker's ``watch`` share."""
    from sensors._check.checker import Watch

    states = iter([State.RUNNING, State.RUNNING, State.COMPLETE, State.RUNNING])
    now = [0.0]
    slept: list[float] = []

    def check() -> Verdict:
        state = next(states)
        readings = {"process": _r("process", Says.DONE)} if state is State.COMPLETE else {}
        return Verdict("t", state, ("r",), readings, NOW, "a")

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    policy = PolicySpec(interval=5.0)
    watch = Watch.of(check, policy, timeout=None, sleep=sleep, clock=lambda: now[0])
    assert [v.state for v in watch] == [State.RUNNING, State.RUNNING, State.COMPLETE]
    assert slept == [5.0, 5.0] and not watch.timed_out
    short = Watch.of(lambda: Verdict("t", State.RUNNING, ("r",), {}, NOW, "a"), policy, timeout=7.0,
                     sleep=sleep, clock=lambda: now[0])  # fmt: skip
    assert len(list(short)) == 3 and short.timed_out  # at 0, 5 and the deadline, 7


# --------------------------------------------------------------------------- the store, serve


def test_a_restarted_watch_goes_on_from_what_it_saw_across_hosts(tmp_path: Path, hosts: list[_Host]) -> None:
    """The state store keeps a stage over several hosts as one row: every node's memory and
    the memory across them. A first watch saw only one of node 1's two ranks; a second watch
    (a new process, as a restarted `wait` or a watcher taking over) finds every rank gone and
    node 0's line written. It remembers that node 1 never showed both ranks: not complete,
    and it says so (before, the nodes' memories were restored without the memory across
    hosts, and the count had nothing to compare: complete)."""
    from sensors import SpanChecker, load_stage

    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    db = tmp_path / "state.db"
    try:
        ranks.procs[(1, 1)].kill()  # one of node 1's ranks never runs with the others
        ranks.procs[(1, 1)].wait()
        stage = load_stage(_stage(tmp_path, hosts, ranks))
        with SpanChecker(stage, state=db) as first:
            seen = [first.check() for _ in range(3)]
        assert not [v for v in seen if v.state is State.COMPLETE]
        ranks.finish()
        for key, proc in ranks.procs.items():
            if key != (1, 1):
                assert proc.wait(30) == 0
        time.sleep(0.4)  # past exit_grace (0.3s): four checks may all fall inside it
        with SpanChecker(stage, state=db) as second:
            after = [second.check() for _ in range(4)]
    finally:
        ranks.stop()
    assert [v.state for v in after if v.state is State.COMPLETE] == [], after[-1].reasons
    b = f"127.0.0.1:{hosts[1].sshd.port}"
    assert f"{b}: at most 1 of 2 ranks seen alive" in " ".join(after[-1].reasons), after[-1].reasons


def _count_probes(host: _Host, counts: Path) -> None:
    """Restart the host's sshd so that what its shells are given (a probe is one script to a
    kept ``sh -s``) is also written to ``counts``: the round trips as the monitored host saw
    them, one ``printf '\\n@@crosscheck-done`` line each."""
    host.sshd.stop()
    with open(host.sshd.config, "a") as config:
        config.write(f"ForceCommand tee -a {counts} | /bin/sh -s\n")
    host.sshd.start()


def _probes(counts: Path) -> int:
    """The probes among the scripts: not the empty one each kept shell answers first, once
    (``sensors._hosts.ssh_shell.Session._start``: its login shell's start kept out of a
    probe's clock bound)."""
    lines = counts.read_text().splitlines()
    done = sum(1 for line in lines if line.startswith("printf '\\n@@crosscheck-done"))
    warmups = sum(1 for a, b in itertools.pairwise(lines) if "<<'@@crosscheck-script-" in a and b == ":")
    return done - warmups


@pytest.mark.parametrize("phased", [True, False], ids=["serve", "wait"])
def test_a_host_with_a_node_and_stages_of_its_own_is_probed_once_a_cycle(
    tmp_path: Path, hosts: list[_Host], phased: bool
) -> None:
    """Each host carries a node of a stage over both and a stage of its own: one round trip
    per host and cycle, as a host of single stages has (before, the stage over several hosts
    was a group of its own: two round trips a cycle on each host). Counted by the sshd
    hosts themselves, with the phases of ``crosscheck serve`` and with ``crosscheck wait``'s
    schedule; the stage over several hosts is added last, after the hosts' own stages were
    given their hosts' phases."""
    from sensors import checker_for, load_stage
    from sensors._watch.schedule import Scheduler

    counts = [tmp_path / f"probes{k}" for k in range(2)]
    for host, count in zip(hosts, counts, strict=True):
        _count_probes(host, count)
    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    own = []
    for k, host in enumerate(hosts):
        doc = {
            "stage": f"own{k}",
            "host": host.sshd.spec(),
            "process": {"match": f"{ranks.tag} --node {k} --rank 0 "},
            "log": {"path": str(ranks.folder / f"node{k}.log"), "complete": r"^never$", "progress": r"^step"},
            "policy": {"interval": "1s"},
        }
        own.append(stage_from_dict(doc))
    span = load_stage(_stage(tmp_path, hosts, ranks, interval="1s"))
    checkers = [checker_for(stage) for stage in [*own, span]]
    seen: dict[str, list[Verdict]] = {}

    def record(key: str, verdict: Verdict, began: float) -> float:
        seen.setdefault(key, []).append(verdict)
        return began + 1.0

    scheduler = Scheduler(phased=phased)
    for k, checker in enumerate(checkers):
        scheduler.add(str(k), checker)
    stop = threading.Event()
    runner = threading.Thread(target=scheduler.run, args=(stop,), kwargs={"on_verdict": record})
    try:
        runner.start()
        time.sleep(6.5)
        stop.set()
        runner.join(30)
    finally:
        stop.set()
        ranks.stop()
        for checker in checkers:
            checker.close()
    assert not runner.is_alive()
    rounds = len(seen.get("2", []))
    assert rounds >= 4, {k: len(v) for k, v in seen.items()}
    # Every round of the stage over both hosts read both hosts, and was a real reading.
    assert all(v.state is not State.UNKNOWN for v in seen["2"]), [v.reasons[:1] for v in seen["2"]]
    for k, count in enumerate(counts):
        probes = _probes(count)
        own_rounds = len(seen.get(str(k), []))
        assert own_rounds >= rounds - 1, (own_rounds, rounds)
        # One round trip a cycle: the stage's own checks and the node's in the same probe
        # (a first one apart, at most, where the host's phase was its own before the stage
        # over several hosts was added).
        assert probes <= max(rounds, own_rounds) + 1, (k, probes, rounds, own_rounds)


def test_serve_watches_a_stage_over_several_hosts_as_one_stage(tmp_path: Path, hosts: list[_Host]) -> None:
    """`crosscheck serve` on a directory holding a stage over two hosts: one stage, one
    stored verdict (its host: every host), complete once every host agrees, and its history
    one row per change of that verdict."""
    import sqlite3

    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    stages = tmp_path / "stages"
    stages.mkdir()
    _stage(tmp_path, hosts, ranks).rename(stages / "train.yaml")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db")}
    out = tmp_path / "serve.jsonl"
    with open(out, "w") as fo, open(tmp_path / "serve.err", "w") as fe:
        served = subprocess.Popen(
            [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--rescan", "300ms"],
            stdout=fo,
            stderr=fe,
            env=env,
        )

    def docs() -> list[dict[str, Any]]:
        return [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]

    def until(ok: Any, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ok():
                return
            assert served.poll() is None, (tmp_path / "serve.err").read_text()[-2000:]
            time.sleep(0.2)
        raise AssertionError(((tmp_path / "serve.err").read_text()[-2000:], docs()[-2:]))

    try:
        until(lambda: any(_alive_everywhere(d, hosts) for d in docs()))
        ranks.finish()
        ranks.wait()
        until(lambda: any(d["verdict"] == "complete" for d in docs()))
    finally:
        served.send_signal(signal.SIGTERM)
        served.wait(30)
        ranks.stop()
    a, b = (f"127.0.0.1:{h.sshd.port}" for h in hosts)
    seen = docs()
    assert {d["stage"] for d in seen} == {"train"} and {d["host"] for d in seen} == {f"{a}, {b}"}
    first_complete = next(k for k, d in enumerate(seen) if d["verdict"] == "complete")
    assert all(_alive_everywhere(d, hosts) is False for d in seen[first_complete:])
    log = (tmp_path / "serve.err").read_text()
    assert f"watching stage train on {a}, {b}" in log, log[-2000:]
    with sqlite3.connect(tmp_path / "state.db") as conn:
        rows = conn.execute("SELECT stage, host FROM crosscheck_memory").fetchall()
        history = [s for (s,) in conn.execute("SELECT state FROM crosscheck_history ORDER BY id")]
    assert rows == [("train", f"{a}, {b}")], rows  # one row: no node keeps a row of its own
    assert history[-1] == "complete" and history.count("complete") == 1, history
    assert all(x != y for x, y in itertools.pairwise(history)), history  # one row per change


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
def test_a_gate_on_a_stage_over_several_hosts_completes_on_a_prefect_server(
    tmp_path: Path, hosts: list[_Host]
) -> None:
    """The Prefect gate (``wait_for_stage`` in a flow run on a real Prefect API) on a stage
    over two hosts: it waits while the ranks run, completes once every host agrees, and its
    evidence artifact and events name the stage, with a row per host's signal."""
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from sensors import load_stage
    from sensors.prefect import wait_for_stage

    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    name = f"train-{uuid.uuid4().hex[:6]}"
    stage = load_stage(_stage(tmp_path, hosts, ranks)).model_copy(update={"stage": name})

    def finish_later() -> None:
        time.sleep(3.0)
        ranks.finish()

    @flow
    def gate_over_hosts() -> Any:
        threading.Thread(target=finish_later, daemon=True).start()
        return wait_for_stage(stage, timeout=90)

    try:
        verdict = gate_over_hosts()
        ranks.wait()
    finally:
        ranks.stop()
    a, b = (f"127.0.0.1:{h.sshd.port}" for h in hosts)
    assert verdict.state is State.COMPLETE and verdict.advance, verdict.reasons
    assert verdict.host == f"{a}, {b}" and verdict.reasons[0].startswith("every host agrees")
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"crosscheck-{name}-%"))
        )
    (evidence,) = [x for x in found if x.key.endswith("-evidence")]
    assert f"# {name}: complete" in evidence.data, evidence.data
    for host in (a, b):
        assert f"process@{host}" in evidence.data.replace("\\", ""), evidence.data


def test_a_gate_hands_a_stage_over_several_hosts_to_the_watcher(tmp_path: Path, hosts: list[_Host]) -> None:
    """A suspending gate's handoff (what its hand-off task writes into the store) of a stage
    over two hosts: the watcher watches it as one stage, settles it once complete, and
    resumes the gate with an outcome whose verdict is across hosts."""
    from sensors import load_stage
    from sensors._store import open_store
    from sensors._watch.handoff import Desk, new_handoff, read_outcome, request_for
    from sensors._watch.watcher import Watcher

    ranks = _Ranks(tmp_path / "job", nodes=2, per_host=2)
    stage = load_stage(_stage(tmp_path, hosts, ranks))
    resumed: list[tuple[str, str]] = []
    empty = tmp_path / "stages"
    empty.mkdir()
    with open_store(tmp_path / "state.db") as store:
        request = {**request_for(stage, reference=None, since=None, run=None), "flow_run_id": "run-1"}
        store.hand_off(new_handoff("run-1:train", stage, stage.host_name, request, timeout=90))
        desk = Desk(
            store, by="test-watcher", resume=lambda run, name: resumed.append((run, name)) or "resumed"
        )
        watcher = Watcher(empty, store=store, rescan_every=0.2, desk=desk)
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
        thread.start()
        try:
            end = time.monotonic() + 30
            while not any(
                e.checker.last is not None and e.checker.last.state is State.RUNNING
                for e in list(watcher.entries.values())
            ):
                assert time.monotonic() < end, "never watched"
                time.sleep(0.1)
            ranks.finish()
            ranks.wait()
            end = time.monotonic() + 60
            while not resumed:
                assert time.monotonic() < end, "never settled"
                time.sleep(0.1)
        finally:
            stop.set()
            thread.join(30)
            ranks.stop()
        handoff = store.handoff("run-1:train")
        assert handoff is not None
        outcome = read_outcome(handoff)
    a, b = (f"127.0.0.1:{h.sshd.port}" for h in hosts)
    assert resumed == [("run-1", "train")]
    assert outcome is not None and outcome.verdict.state is State.COMPLETE, outcome
    assert outcome.verdict.host == f"{a}, {b}"
    assert {f"process@{a}", f"process@{b}"} <= set(outcome.verdict.readings)


def test_one_rank_at_work_among_waiting_ones_is_progress() -> None:
    """The floor is 5 % of a core a rank, but work need not be spread over the ranks: rank 0
    alone at 30 % of a core (an evaluation, a checkpoint's upload in its own thread) while its
    7 peers wait at a barrier is 3.75 % a rank on average. Measured rank by rank, it is work:
    not a hung collective, however many peers wait (adversary 6: failed after 60 s)."""
    memory = AcrossMemory()
    cpu0 = 5.0
    state, why = State.RUNNING, ()
    for k, at in enumerate(range(0, 121, 5)):
        procs = [
            {"pid": 100 + r, "ppid": 1, "state": "S", "cpu_seconds": round(cpu0 if r == 0 else 5.0, 2)}
            for r in range(8)
        ]
        a = _r(
            "process",
            Says.WORKING,
            alive=8,
            ranks=8,
            seen_alive=True,
            matched=8,
            processes=procs,
            cpu_seconds=round(cpu0 + 35.0, 2),
        )
        b = _alive(8 if k == 0 else 7, cpu=40.0)
        nodes = [_node("a", State.RUNNING, a, at=NOW + at), _node("b", State.RUNNING, b, at=NOW + at)]
        verdict, memory = decide_across("t", nodes, POLICY, 8, memory, NOW + at)
        state, why = verdict.state, verdict.reasons
        cpu0 += 0.3 * 5
    assert state is State.RUNNING, why
