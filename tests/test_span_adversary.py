"""Adversarial tests of a stage over several hosts (issue 25): pure, no sshd, no GPU.

Each test asserts what the verdict across hosts (``decide_across``) or the stage file
(``stage_from_dict``) SHOULD do; a failing test is a finding. Tests marked "withstood" pin
attacks the code resisted. Synthetic node verdicts mirror what each node's single-host
``decide`` says for the same readings (docs/verdict.md's rule numbers are given).
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import pytest

from sensors import ConfigError, Reading, Says, State, Verdict, stage_from_dict
from sensors._config.stage import PolicySpec
from sensors._verdict.across import AcrossMemory, NodeCheck, decide_across

NOW = 1_000_000.0
POLICY = PolicySpec(stall_after=60.0)


def _r(signal: str, says: Says, read_at: float | None = NOW, **evidence: Any) -> Reading:
    return Reading(signal, says, f"{signal} {says}", evidence, read_at)


def _node(
    host: str,
    state: State,
    *readings: Reading,
    reasons: tuple[str, ...] | None = None,
    run: dict[str, Any] | None = None,
    at: float = NOW,
) -> NodeCheck:
    return NodeCheck(
        host,
        Verdict(
            "t",
            state,
            reasons or (f"{host} {state}",),
            {r.signal: r for r in readings},
            at,
            host,
            run=run,
        ),
    )


GONE = _r("process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=9.0)
GONE_UNSEEN = _r("process", Says.DONE, alive=0, seen_alive=False, cpu_seconds=None)
LOG_DONE = _r("log", Says.DONE, size=10)
LOG_WORKING = _r("log", Says.WORKING, size=10)
OUT_DONE = _r("outputs", Says.DONE, count=4)
GPU_IDLE = _r("gpu", Says.DONE, idle=True, job_pids_on_gpu=[])
GPU_BUSY = _r("gpu", Says.WORKING, job_gpu_busy=True)


def _alive(n: int, cpu: float = 1.0, at: float = NOW, **extra: Any) -> Reading:
    return _r("process", Says.WORKING, at, alive=n, seen_alive=True, cpu_seconds=cpu, **extra)


def _decide(nodes, *, per_host=None, success="all", memory=None, now=NOW):
    policy = POLICY.model_copy(update={"success": success})
    return decide_across("t", nodes, policy, per_host, memory or AcrossMemory(), now)


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).isoformat(timespec="milliseconds")


# =========================================================================== findings


# --- F1: a node read only through its GPU (hosts + gpu + a shared log) ------------------------


def test_F1_a_node_read_only_through_its_gpu_is_refused() -> None:
    """hosts + gpu + a shared log: node 1 would be read through its GPU alone, idle whether its
    job finished, is in a CPU phase (incident 2), or never started. Every host must show its
    ranks gone: a stage over several hosts needs process.match."""
    with pytest.raises(ConfigError, match=r"needs process\.match"):
        stage_from_dict(
            {
                "stage": "t",
                "hosts": [{"ssh": "a"}, {"ssh": "b"}],
                "gpu": {"idle_for": "30s"},
                "log": {"path": "/shared/train.log", "complete": "finished"},
                "policy": {"interval": "10s"},
            }
        )


def test_F1b_chief_a_node_with_gpu_and_its_own_log_but_no_process_never_seen_is_not_done() -> None:
    """No process signal, a per-host log: under chief that log is skipped, so node b is done
    on an idle GPU alone, never having been seen at work."""
    nodes = [
        _node("a", State.COMPLETE, GPU_IDLE, LOG_DONE),
        _node("b", State.FAILED, GPU_IDLE, LOG_WORKING),
    ]
    verdict, _ = _decide(nodes, success="chief")
    assert verdict.state is not State.COMPLETE, verdict.reasons


# --- F2: a non-chief node's own verdict is ignored once its readings say done -----------------


def test_F2_nonchief_gone_while_its_pids_still_hold_gpu_memory_is_not_complete() -> None:
    """Rule 7: the ranks are gone from /proc but their PIDs still hold a GPU context (the
    process table and the driver disagree): node b's own verdict is contradiction. The GPU
    reading says done ("idle; job holds 20000 MiB, memory is not activity")."""
    gpu_held = _r("gpu", Says.DONE, idle=True, job_pids_on_gpu=[4242], job_memory_mib=20000.0)
    nodes = [
        _node("a", State.COMPLETE, GONE, GPU_IDLE, LOG_DONE),
        _node("b", State.CONTRADICTION, GONE, gpu_held, LOG_DONE),
    ]
    verdict, _ = _decide(nodes)
    assert verdict.state is not State.COMPLETE, verdict.reasons


def test_F2b_chief_nonchief_log_inside_exit_grace_is_not_complete() -> None:
    """Under chief a non-chief's log is read for error lines; its ranks just exited and its
    own decide waits exit_grace for buffered writes (rule 9: an "NCCL error" flushed at exit
    would make it failed). Across completes at once, before that line can land."""
    nodes = [
        _node("a", State.COMPLETE, GONE, LOG_DONE),
        _node(
            "b",
            State.UNKNOWN,
            GONE,
            LOG_WORKING,
            reasons=("waiting up to 60s after the exit for writes to land (2s so far)",),
        ),
    ]
    verdict, _ = _decide(nodes, success="chief")
    assert verdict.state is not State.COMPLETE, verdict.reasons


# --- F3: what a watch saw across hosts, and a restart ---------------------------------------


# F3 itself (a second watch forgot the ranks a first one saw: the nodes' memories were restored
# from the store without the memory across hosts) is tried on real hosts and a real store in
# tests/test_span.py, test_a_restarted_watch_goes_on_from_what_it_saw_across_hosts: the stage
# is one row now, every node's memory and the memory across them together.


def test_F3b_a_nonchief_seen_alive_only_in_an_earlier_run_is_not_this_runs() -> None:
    """Node memories persist per node (STAGE#HOST). Node 0 found a new run (started an hour
    ago) and reset its memory; node b never saw a process of it (its ranks never started
    today) and still carries yesterday's last_seen: seen_alive=True. Sharded work (no
    collective) lets node 0 finish alone."""
    started = NOW - 3600
    b_stale = _r(
        "process", Says.DONE, alive=0, seen_alive=True, cpu_seconds=None,
        last_seen_alive={"pid": 77, "cpu_seconds": 500.0, "at": NOW - 86_400},
    )  # fmt: skip
    nodes = [
        _node("a", State.COMPLETE, GONE, LOG_DONE, run={"source": "process", "started_at": _iso(started)}),
        _node("b", State.UNKNOWN, b_stale),
    ]
    verdict, _ = _decide(nodes, success="chief")
    assert verdict.state is not State.COMPLETE, verdict.reasons


# --- F4: per_host counts every matched process, not ranks ------------------------------------


def _procs(ranks: list[int], workers: dict[int, int]) -> list[dict[str, Any]]:
    """Matched processes: ranks (ppid 1) and forked DataLoader workers (same command line)."""
    rows = [{"pid": p, "ppid": 1, "state": "S", "cmdline": "python train.py --node 1"} for p in ranks]
    rows += [
        {"pid": w, "ppid": p, "state": "S", "cmdline": "python train.py --node 1"} for w, p in workers.items()
    ]
    return rows


def test_F4_dataloader_workers_hide_a_lost_rank() -> None:
    """per_host: 4 ranks, each with one forked DataLoader worker (same argv: it matches):
    alive is 8. A rank and its worker die: alive 6, still >= 4, so no rank is 'lost' and the
    headline hung collective is never named, however long the rest wait."""
    full = _procs([10, 11, 12, 13], {20: 10, 21: 11, 22: 12, 23: 13})
    less = _procs([10, 11, 12], {20: 10, 21: 11, 22: 12})
    memory = AcrossMemory()
    first = [
        _node("a", State.RUNNING, _alive(4, cpu=5.0), at=NOW - 70),
        _node("b", State.RUNNING, _alive(8, cpu=5.0, processes=full, matched=8), at=NOW - 70),
    ]
    _, memory = _decide(first, per_host=4, memory=memory, now=NOW - 70)

    def hung(at: float) -> list[NodeCheck]:
        return [
            _node("a", State.RUNNING, _alive(4, cpu=5.0), at=at),
            _node("b", State.RUNNING, _alive(6, cpu=5.0, processes=less, matched=6), at=at),
        ]

    _, memory = _decide(hung(NOW - 30), per_host=4, memory=memory, now=NOW - 30)
    verdict, _ = _decide(hung(NOW + 1), per_host=4, memory=memory, now=NOW + 1)
    assert verdict.state is State.FAILED, verdict.reasons


def test_F4b_workers_make_half_the_ranks_look_like_all() -> None:
    """Only 2 of 4 ranks ever started on b, each with one worker: 'at most 4 of 4 seen'."""
    half = _procs([10, 11], {20: 10, 21: 11})
    _, memory = _decide(
        [
            _node("a", State.RUNNING, _alive(4)),
            _node("b", State.RUNNING, _alive(4, processes=half, matched=4)),
        ],
        per_host=4,
    )
    verdict, _ = _decide(
        [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.UNKNOWN, GONE, LOG_DONE)],
        per_host=4,
        memory=memory,
    )
    assert verdict.state is not State.COMPLETE, verdict.reasons


# --- F5: labels with a port lose their node's state in rule 5 ---------------------------------


@pytest.mark.parametrize("labels", [("a", "b"), ("h:2201", "h:2202"), ("gpu-01", "fe80::2")])
def test_F5_a_holding_node_counts_whatever_its_label(labels: tuple[str, str]) -> None:
    """Node b's ranks are gone but the GPU is still busy with their PIDs (rule 7:
    contradiction). Rule 5 keeps the gravest of the nodes holding the stage back, found by
    ``held.split(":", 1)[0]``: a label 'h:2202' (two hosts of one name) or an IPv6 address
    becomes 'h' / 'fe80' and b's contradiction is dropped for node 0's 'running'."""
    a, b = labels
    nodes = [
        _node(a, State.RUNNING, GONE, LOG_WORKING),
        _node(b, State.CONTRADICTION, GONE, GPU_BUSY),
    ]
    verdict, _ = _decide(nodes)
    assert verdict.state is State.CONTRADICTION, verdict.reasons


# --- F6: a node whose ranks finished is called "lost" ----------------------------------------


def test_F6_a_node_that_finished_with_its_completion_line_is_not_a_lost_rank() -> None:
    """Node 0's ranks wrote their completion line and exited; node b's ranks stay alive
    without progress. That is a stall on b (its own verdict: stalled), not "every rank on a
    gone ... a collective waiting for a lost rank" — and not a final failed."""
    memory = AcrossMemory()
    _, memory = _decide(
        [
            _node("a", State.RUNNING, _alive(2, cpu=5.0), LOG_WORKING),
            _node("b", State.RUNNING, _alive(2, cpu=5.0), LOG_WORKING),
        ],
        memory=memory,
        now=NOW - 70,
    )
    quiet = _node("b", State.RUNNING, _alive(2, cpu=5.0), LOG_WORKING)
    verdict, memory = _decide(
        [_node("a", State.COMPLETE, GONE, LOG_DONE), quiet], memory=memory, now=NOW - 30
    )
    assert verdict.state is State.RUNNING
    assert not any("lost rank" in r for r in verdict.reasons), verdict.reasons
    stalled = _node("b", State.STALLED, _alive(2, cpu=5.0), LOG_WORKING)
    verdict, _ = _decide([_node("a", State.COMPLETE, GONE, LOG_DONE), stalled], memory=memory, now=NOW + 1)
    assert verdict.state is not State.FAILED, verdict.reasons


# --- F7: chief, a non-chief lost while node 0 went on --------------------------------------------


def test_F7_chief_a_nonchief_gone_before_the_chief_ends_does_not_hold_it() -> None:
    """The chief policy as chosen (docs/multi-host.md): rank 0's completion line and every
    other rank gone. b's ranks were found gone while node 0's were still at work, no error
    line: under chief that is workers done before the chief (sharded work the chief then
    gathers); a hung collective (the chief waiting, no progress) would be failed by rule 2,
    and an error line on b by rule 1. Under all, b's own verdict (no completion line) fails it."""
    memory = AcrossMemory()
    _, memory = _decide(
        [_node("a", State.RUNNING, _alive(2, cpu=1.0)), _node("b", State.RUNNING, _alive(2, cpu=1.0))],
        success="chief",
        memory=memory,
        now=NOW - 60,
    )
    mid, memory = _decide(
        [_node("a", State.RUNNING, _alive(2, cpu=20.0)), _node("b", State.FAILED, GONE, LOG_WORKING)],
        success="chief",
        memory=memory,
        now=NOW - 30,
    )
    assert "every rank on b gone" in mid.reasons[0]  # the verdict itself said so
    verdict, _ = _decide(
        [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.FAILED, GONE, LOG_WORKING)],
        success="chief",
        memory=memory,
    )
    assert verdict.state is State.COMPLETE, verdict.reasons
    under_all, _ = _decide(
        [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.FAILED, GONE, LOG_WORKING)],
        memory=memory,
    )
    assert under_all.state is State.FAILED, under_all.reasons


# --- F8: the span's clock mixes hosts' clocks ---------------------------------------------------


def test_F8_a_host_blip_with_skewed_clocks_is_not_a_hung_collective() -> None:
    """SpanChecker takes now = max(node checked_at): each host's own clock, or this machine's
    for a host that could not be read. b's clock is 1 h ahead; b blips once. Node a made
    progress 30 s ago (its own clock), yet its idle time reads 3630 s and a lost rank on b
    becomes a final 'failed' after 60 s instead of stall_after without progress."""
    from sensors._check.span import SpanChecker

    stage = stage_from_dict(
        {
            "stage": "t",
            "hosts": [{"ssh": "a"}, {"ssh": "b"}],
            "process": {"match": "train --node {node}", "per_host": 2},
            "policy": {"stall_after": "60s", "interval": "30s"},
        }
    )
    T, SKEW = NOW, 3600.0
    script = {
        "a": [
            _node("a", State.RUNNING, _alive(2, cpu=1.0, at=T), at=T),
            # 9 s of CPU in 30 s, 2 ranks: work (a trickle under 5 % of a core a rank is not).
            _node("a", State.RUNNING, _alive(2, cpu=10.0, at=T + 30), at=T + 30),
            _node("a", State.RUNNING, _alive(2, cpu=10.0, at=T + 60), at=T + 60),
        ],
        "b": [
            _node("b", State.RUNNING, _alive(2, cpu=1.0, at=T + SKEW), at=T + SKEW),
            _node(
                "b", State.UNKNOWN, _r("process", Says.UNKNOWN, None, host_error="timeout"), at=T + 30
            ),  # host_failed stamps this machine's time
            _node("b", State.RUNNING, _alive(1, cpu=1.0, at=T + SKEW + 60), at=T + SKEW + 60),
        ],
    }

    class Fake:
        run = None  # a node's run, once known (SpanChecker starts its memory across hosts anew on another)
        clock_ahead = None  # its host's clock offset, not measured: the scripts' clocks are skewed by hand
        ended_alive: ClassVar[dict[int, float]] = {}  # no exit watch
        elsewhere = None  # what span tells node 0 of ranks at work elsewhere

        def __init__(self, label: str) -> None:
            self.seq = iter(script[label])

        def check(self) -> Verdict:
            return next(self.seq).verdict

    span = SpanChecker.__new__(SpanChecker)
    span.stage, span.labels = stage, ("a", "b")
    span.nodes = (Fake("a"), Fake("b"))  # type: ignore[assignment]
    span.rank_logs, span.probes = (), span.nodes
    # Each host's verdict from its script (the subject is the clock across hosts, not a probe).
    span._probe_nodes = lambda: [n.check() for n in span.nodes]  # type: ignore[method-assign]
    span.lock = __import__("threading").Lock()
    span.last, span._memory = None, AcrossMemory()
    span._persist, span._saving, span._checked_here = None, True, False
    span._across_run = None
    span._pool = ThreadPoolExecutor(2)
    try:
        span.check()
        span.check()
        verdict = span.check()
    finally:
        span._pool.shutdown()
    assert verdict.state is not State.FAILED, verdict.reasons


# --- F9..F12: the stage file ---------------------------------------------------------------------


def test_F9_host_template_with_two_hosts_of_one_name_gives_each_its_own_log() -> None:
    """Two hosts of one name (a bastion's forwarded ports): {host} is the ssh name, the same
    for both, so both nodes read one log (shared storage: node 1's 'own' completion line is
    node 0's, which also passes the 'never seen running' check) and one match."""
    try:
        stage = stage_from_dict(
            {
                "stage": "t",
                "hosts": [{"ssh": "bastion", "port": 2201}, {"ssh": "bastion", "port": 2202}],
                "process": {"match": "train.py --host {host}"},
                "log": {"path": "/shared/logs/train-{host}.log", "complete": "done"},
            }
        )
    except ConfigError:
        return  # refusing it is fine
    paths = [n.log.path for n in stage.nodes]  # type: ignore[union-attr]
    assert len(set(paths)) == len(paths), paths


@pytest.mark.parametrize(
    "section",
    [
        {"log": {"path": "/l/{node}.log", "complete": "^node {node} done"}},
        {"log": {"path": "/l/{node}.log", "complete": "done", "error": "rank {node} error"}},
        {
            "outputs": {"files": "/shared/out-{host}/*", "expected": 1},
            "log": {"path": "/l/{node}.log", "complete": "d"},
        },
    ],
)
def test_F10_a_template_where_it_is_not_filled_is_refused(section: dict[str, Any]) -> None:
    """{host}/{node} are filled in log.path and process.match only; elsewhere they stay
    literal: a completion regex '^node {node} done' never matches, and every node's log
    'has no completion line' (rule 12: failed, under all a final false failure)."""
    data = {"stage": "t", "hosts": [{"ssh": "a"}, {"ssh": "b"}], "process": {"match": "x {node}"}, **section}
    try:
        stage = stage_from_dict(data)
    except ConfigError:
        return
    for node in stage.nodes:
        for spec in (node.log, node.outputs):
            if spec is not None:
                assert "{node}" not in str(spec.model_dump()) and "{host}" not in str(spec.model_dump())


def test_F11_a_pid_is_one_hosts_not_every_hosts() -> None:
    """process.pid with hosts: every node watches that PID on its own host, where it is some
    other process (or none)."""
    with pytest.raises(ConfigError):
        stage_from_dict({"stage": "t", "hosts": [{"ssh": "a"}, {"ssh": "b"}], "process": {"pid": 1234}})


@pytest.mark.parametrize("spec", ["gpu-{n:2d}", "gpu-{n:3d}"])
def test_F12_a_pattern_never_names_a_host_with_a_space(spec: str) -> None:
    """format(1, '2d') is ' 1': 'gpu- 1' is accepted as a host name."""
    try:
        stage = stage_from_dict(
            {"stage": "t", "hosts": {"ssh": spec, "count": 2, "first": 1}, "process": {"match": "x"}}
        )
    except ConfigError:
        return
    assert all(" " not in label for label in stage.host_labels), stage.host_labels


# =========================================================================== withstood


def test_withstood_a_host_unreachable_at_the_final_check_is_unknown() -> None:
    nodes = [
        _node("a", State.COMPLETE, GONE, LOG_DONE, OUT_DONE),
        _node(
            "b",
            State.UNKNOWN,
            _r("process", Says.UNKNOWN, None, host_error="refused"),
            _r("gpu", Says.UNKNOWN, None),
        ),
    ]
    for success in ("all", "chief"):
        verdict, _ = _decide(nodes, success=success)
        assert verdict.state is State.UNKNOWN and "b cannot be read" in verdict.reasons[0]


def test_withstood_a_node_with_an_unreadable_gpu_but_a_fine_process_is_not_done() -> None:
    nodes = [
        _node("a", State.COMPLETE, GONE, LOG_DONE),
        _node("b", State.UNKNOWN, GONE, _r("gpu", Says.UNKNOWN, NOW)),
    ]
    for success in ("all", "chief"):
        verdict, _ = _decide(nodes, success=success)
        assert verdict.state is State.UNKNOWN, verdict.reasons


def test_withstood_a_host_whose_match_matches_nothing_is_never_done() -> None:
    nodes = [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.UNKNOWN, GONE_UNSEEN)]
    for success in ("all", "chief"):
        verdict, _ = _decide(nodes, success=success)
        assert verdict.state is not State.COMPLETE and "may never have run" in verdict.reasons[0]


def test_withstood_a_shared_log_complete_while_node_1_still_runs() -> None:
    nodes = [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.RUNNING, _alive(8))]
    for success in ("all", "chief"):
        verdict, _ = _decide(nodes, success=success, per_host=8)
        assert verdict.state is State.RUNNING


def test_withstood_a_live_nonchief_contradiction_is_shown() -> None:
    nodes = [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.CONTRADICTION, _alive(2), LOG_DONE)]
    verdict, _ = _decide(nodes)
    assert verdict.state is State.CONTRADICTION


def test_withstood_an_error_line_on_a_nonchief_fails_under_chief() -> None:
    nodes = [
        _node("a", State.COMPLETE, GONE, LOG_DONE),
        _node("b", State.FAILED, GONE, _r("log", Says.FAILED)),
    ]
    verdict, _ = _decide(nodes, success="chief")
    assert verdict.state is State.FAILED


def test_withstood_fewer_ranks_than_per_host_in_one_watch() -> None:
    _, memory = _decide(
        [_node("a", State.RUNNING, _alive(8)), _node("b", State.RUNNING, _alive(3))], per_host=8
    )
    verdict, _ = _decide(
        [_node("a", State.COMPLETE, GONE, LOG_DONE), _node("b", State.UNKNOWN, GONE)],
        per_host=8,
        success="chief",
        memory=memory,
    )
    assert verdict.state is not State.COMPLETE


@pytest.mark.parametrize(
    "hosts",
    [
        [{"ssh": "x"}, {"ssh": "x"}],
        [{"ssh": "x", "port": 22}, {"ssh": "x"}],
        [{"ssh": "x", "user": "u1"}, {"ssh": "x", "user": "u2"}],
        ["local", "local"],
        ["local", {"ssh": "local"}],
    ],
)
def test_withstood_one_host_twice_is_refused(hosts: list[Any]) -> None:
    with pytest.raises(ConfigError, match="named twice"):
        stage_from_dict({"stage": "t", "hosts": hosts, "process": {"match": "x"}})


def test_withstood_templates_stay_literal_on_one_host() -> None:
    stage = stage_from_dict(
        {
            "stage": "t",
            "process": {"match": "train --node {node} {host}"},
            "log": {"path": "/l/{host}.log", "complete": "d"},
        }
    )
    assert stage.nodes[0].process.match == "train --node {node} {host}"  # type: ignore[union-attr]
    assert stage.nodes[0].log.path == "/l/{host}.log"  # type: ignore[union-attr]


def test_withstood_host_names_are_escaped_and_node_ranks_are_numbers() -> None:
    stage = stage_from_dict(
        {
            "stage": "t",
            "hosts": {"ssh": "gpu.{n:03d}+x", "count": 2, "first": 999_999_998},
            "process": {"match": "^train {host} --node {node}$"},
        }
    )
    assert stage.host_labels == ("gpu.999999998+x", "gpu.999999999+x")
    assert stage.nodes[1].process.match == r"^train gpu\.999999999\+x --node 1$"  # type: ignore[union-attr]


def test_withstood_a_pattern_without_a_usable_n_is_refused() -> None:
    for spec in ("gpu-{n:x}", "gpu-{n:100d}", "gpu-{m}"):
        with pytest.raises(ConfigError):
            stage_from_dict({"stage": "t", "hosts": {"ssh": spec, "count": 2}, "process": {"match": "x"}})
