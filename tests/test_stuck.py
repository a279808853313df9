"""A stuck gate says so at once (issue 35, item 4).

An ``unknown`` that no later reading of the run can make complete carries ``Verdict.stuck``
(why, and the fix): ``wait`` ends at once with exit 5, ``serve`` sends one notification, the
advice never repeats what the watch already did. Pure parts are table tests; the CLI ones
run the real ``crosscheck`` against a real process and a real HTTP webhook server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sensors._base.model import Reading, Says, State, Verdict
from sensors._check.codec import dumps, loads
from sensors._config.stage import NotifySpec
from sensors._notify.policy import Notifier
from sensors._run.advice import Fix, Had, advice
from sensors._run.run import Run
from sensors._verdict.gone import HOW_TO_TIE, how_to_tie
from sensors._verdict.stuck import cause, had_of, stuck
from tests.webhook_server import WebhookServer

REPO = Path(__file__).resolve().parent.parent


def _r(signal_: str, says: str, **evidence: object) -> Reading:
    return Reading(signal_, Says(says), f"{signal_} {says}", evidence, 1000.0)


_GONE_SEEN = _r("process", "done", seen_alive=True)
_HOST_DOWN = {"host_error": "ssh: connection refused"}

# --------------------------------------------------------------------------- which are stuck

CAUSES = [
    # (case, readings, cause)
    ("process-only stage, job seen and gone", {"process": _GONE_SEEN}, "nothing_tells"),
    (
        "process-only, with a GPU reading",
        {"process": _GONE_SEEN, "gpu": _r("gpu", "done")},
        "nothing_tells",
    ),
    ("process-only, never seen alive: not started yet?", {"process": _r("process", "done")}, None),
    (
        "process-only, launched: its exit status decides",
        {"process": _r("process", "done", seen_alive=True, launched=True, exit_status=0)},
        None,
    ),
    (
        "process-only, launched, the record not written yet",
        {"process": _r("process", "done", seen_alive=True, exit_record="not written yet: /x")},
        None,
    ),
    ("a log configured: a line may still come", {"process": _GONE_SEEN, "log": _r("log", "unknown")}, None),
    (
        "launched run's process superseded by a later run",
        {
            "process": _r("process", "unknown", superseded_by_pid=42, launched=True),
            "log": _r("log", "working"),
        },
        "launch_superseded",
    ),
    (
        "launched run's log written after its exit",
        {"process": _GONE_SEEN, "log": _r("log", "unknown", launch_superseded="a later run's progress")},
        "launch_superseded",
    ),
    (
        "launched run's outputs written after its exit",
        {"process": _GONE_SEEN, "outputs": _r("outputs", "unknown", written_after_exit=True)},
        "launch_superseded",
    ),
    (
        "launched run's exit recorded before the first read, foreign clock",
        {"process": _GONE_SEEN, "log": _r("log", "unknown", exit_unclear=True)},
        "exit_unclear",
    ),
    (
        "the log's superseded_by_pid is another fact (a later process of this run): not stuck",
        {"process": _GONE_SEEN, "log": _r("log", "unknown", superseded_by_pid=7)},
        None,
    ),
    (
        "a completion line that may be an earlier run's: may still change",
        {"process": _GONE_SEEN, "log": _r("log", "unknown", earlier_complete_line="done")},
        None,
    ),
    (
        "outputs written after the line: hold for that line only",
        {"process": _GONE_SEEN, "outputs": _r("outputs", "unknown", written_after_complete_line=True)},
        None,
    ),
    (
        "launched, exit 0 recorded, the probe cannot see every process",
        {"process": _r("process", "unknown", hidden="hidepid", blind_after_exit=0), "log": _r("log", "done")},
        "blind_after_exit",
    ),
    (
        "the probe cannot see every process, no exit recorded yet: it may still be written",
        {"process": _r("process", "unknown", hidden="hidepid", seen_alive=False), "log": _r("log", "done")},
        None,
    ),
    (
        "the host could not be asked",
        {"process": _r("process", "unknown", **_HOST_DOWN), "log": _r("log", "unknown", **_HOST_DOWN)},
        None,
    ),
]


@pytest.mark.parametrize(("case", "readings", "expected"), CAUSES, ids=[c[0] for c in CAUSES])
def test_which_readings_are_stuck(case: str, readings: dict[str, Reading], expected: str | None) -> None:
    assert cause(readings) == expected, case


_DOUBT = _r(
    "log",
    "unknown",
    line_doubt=True,
    line_fix="watch the job from before it writes its completion line",
    age_seconds=600.0,
)

LINE_DOUBT = [
    # (case, process reading, gone for (s), exit_grace (s), stuck)
    ("seen, gone past exit_grace", _GONE_SEEN, 61.0, 60.0, True),
    ("seen, gone exactly exit_grace", _GONE_SEEN, 60.0, 60.0, True),
    ("seen, gone within exit_grace: the last bytes may lag", _GONE_SEEN, 30.0, 60.0, False),
    ("seen, gone at this check", _GONE_SEEN, 0.0, 0.0, False),
    ("still alive: a later line is read anew", _r("process", "working", seen_alive=True), 99.0, 60.0, False),
    ("never seen alive: the run may not have begun", _r("process", "done"), 99.0, 60.0, False),
]


@pytest.mark.parametrize(
    ("case", "p", "gone_for", "grace", "is_stuck"), LINE_DOUBT, ids=[c[0] for c in LINE_DOUBT]
)
def test_a_line_in_doubt_is_stuck_once_the_seen_job_is_gone_past_exit_grace(
    case: str, p: Reading, gone_for: float, grace: float, is_stuck: bool
) -> None:
    """Whose the completion line is cannot be told, and the run's processes, seen at work,
    are gone with the log's lag over: no later byte is this run's. Stuck, with the log's
    own advice as the fix; alive, or within exit_grace, or never seen: it may still change."""
    readings = {"process": p, "log": _DOUBT}
    assert (cause(readings, gone_for, grace) == "line_doubt") is is_stuck, case
    got = stuck(State.UNKNOWN, readings, None, gone_for=gone_for, grace=grace)
    assert (got is not None) is is_stuck, case
    if got is not None:
        assert got.fix == "watch the job from before it writes its completion line", got
    # A log unknown for another reason (not read, say) is never this cause.
    other = {"process": p, "log": _r("log", "unknown")}
    assert cause(other, gone_for, grace) is None


@pytest.mark.parametrize(
    ("age", "is_stuck"),
    [
        (5.0, False),  # written 5 s ago, the job gone for 120 s: something of the stage writes
        (59.0, False),  # still within exit_grace of its last byte
        (61.0, True),  # quiet for exit_grace: no writer left
        (-3.0, False),  # stamped ahead of the host's clock: how long it is quiet is not known
        (None, False),  # not read
    ],
)
def test_a_line_in_doubt_in_a_log_still_written_is_not_stuck(age: float | None, is_stuck: bool) -> None:
    """The process signal's job is gone (the processes its pattern matched), but the log
    grew since: a process it does not match writes it (`sh run.sh` running train.py, then an
    evaluation that ends with the run's completion line; a rank's orphaned child). A later
    check reads that line anew: not stuck until the log too is quiet for exit_grace
    (adversary 6: wait exited 5 while the evaluation still wrote the log)."""
    doubt = _r(
        "log",
        "unknown",
        line_doubt=True,
        line_fix="watch the job from before it writes its completion line",
        **({"age_seconds": age} if age is not None else {}),
    )
    readings = {"process": _GONE_SEEN, "log": doubt}
    assert (cause(readings, 120.0, 60.0) == "line_doubt") is is_stuck, age


@pytest.mark.parametrize("state", [s for s in State if s is not State.UNKNOWN])
def test_only_an_unknown_is_stuck(state: State) -> None:
    assert stuck(state, {"process": _GONE_SEEN}, None) is None


def test_a_stuck_verdict_is_settled_and_in_its_json_and_memory() -> None:
    got = stuck(State.UNKNOWN, {"process": _GONE_SEEN}, None)
    assert got is not None and "no log, no outputs" in got.why
    v = Verdict("s", State.UNKNOWN, ("why",), {"process": _GONE_SEEN}, 1000.0, "local", stuck=got)
    assert v.settled and not v.advance
    doc = v.to_json()
    assert doc["settled"] is True and doc["stuck"] == {"why": got.why, "fix": got.fix}
    assert loads(dumps(v)) == v  # the store keeps it
    plain = Verdict("s", State.UNKNOWN, ("why",), {"process": _GONE_SEEN}, 1000.0, "local")
    assert not plain.settled and plain.to_json()["stuck"] is None
    with pytest.raises(ValueError, match="cannot be stuck"):
        Verdict("s", State.RUNNING, (), {}, 1000.0, "local", stuck=got)


# --------------------------------------------------------------------------- the advice

ADVICE = [
    # (had, fixes, must contain, must not contain)
    (Had(), (Fix.SINCE, Fix.WATCH_EARLIER, Fix.LAUNCH), ["--since", "before it ends", "launch"], []),
    (Had(since=True), (Fix.SINCE, Fix.WATCH_EARLIER, Fix.LAUNCH), ["before it ends", "launch"], ["--since"]),
    (Had(seen_alive=True), (Fix.SINCE, Fix.WATCH_EARLIER, Fix.LAUNCH), ["--since", "launch"], ["before it"]),
    # A watch there before the job that never saw it: a check inside its life, not an earlier watch.
    (
        Had(before_job=True),
        (Fix.SINCE, Fix.WATCH_EARLIER, Fix.CHECK_OFTEN, Fix.LAUNCH),
        ["--since", "check more often", "launch"],
        ["before it"],
    ),
    (Had(), (Fix.WATCH_EARLIER, Fix.CHECK_OFTEN), ["before it ends"], ["more often"]),
    (
        Had(before_job=True, seen_alive=True),
        (Fix.WATCH_EARLIER, Fix.CHECK_OFTEN),
        [],
        ["before it", "more often"],
    ),
    (
        Had(seen_alive=True, end_seen=True, since=True),
        (Fix.SINCE, Fix.WATCH_EARLIER, Fix.LAUNCH),
        ["launch the job"],
        ["--since", "before it ends"],
    ),
    (
        Had(launched=True),
        (Fix.SINCE, Fix.WATCH_EARLIER, Fix.LAUNCH),
        ["before it ends"],
        ["--since", "launch"],
    ),
    (Had(launched=True), (Fix.OWN_PATHS,), ["its own log and output paths"], ["launch the job"]),
    (Had(launched=True), (Fix.FROM_LAUNCH, Fix.LOCAL_LOG), ["from its launch", "own file system"], []),
    (Had(), (Fix.FROM_LAUNCH, Fix.LOCAL_LOG), ["own file system"], ["from its launch"]),
    (Had(seen_alive=True, end_seen=True), (Fix.ADD_SIGNAL, Fix.LAUNCH), ["add a log section", "launch"], []),
    # serve takes no run start (its stage files have none): never advised there (user s16).
    (
        Had(takes_no_since=True),
        (Fix.SINCE, Fix.WATCH_EARLIER, Fix.LAUNCH),
        ["before it ends", "launch"],
        ["--since"],
    ),
]


@pytest.mark.parametrize(("had", "fixes", "says", "never"), ADVICE)
def test_the_advice_never_repeats_what_the_watch_had(
    had: Had, fixes: tuple[Fix, ...], says: list[str], never: list[str]
) -> None:
    text = advice(fixes, had)
    for word in says:
        assert word in text, (had, text)
    for word in never:
        assert word not in text, (had, text)


def test_every_tie_taken_leaves_no_tie_to_suggest() -> None:
    assert advice((Fix.SINCE, Fix.LAUNCH), Had(since=True, launched=True)) == ""
    assert (
        how_to_tie(Had(since=True, launched=True, seen_alive=True))
        == "the watch had every tie crosscheck knows"
    )
    assert "--since" in HOW_TO_TIE


HAD = [
    # (readings, run, had)
    ({"process": _GONE_SEEN}, None, Had(seen_alive=True, end_seen=True)),
    (
        {"process": _r("process", "working", seen_alive=True)},
        Run("since", 1.0),
        Had(since=True, seen_alive=True),
    ),
    ({"process": _r("process", "done", launched=True)}, None, Had(launched=True)),
    ({"log": _r("log", "unknown")}, Run("launch", 1.0), Had(launched=True)),
    ({"process": _r("process", "done")}, Run("process", 1.0), Had()),
]


@pytest.mark.parametrize(("readings", "run", "had"), HAD)
def test_what_the_watch_had(readings: dict[str, Reading], run: Run | None, had: Had) -> None:
    assert had_of(readings, run) == had


def test_a_since_watch_is_not_told_to_give_a_since() -> None:
    """Rule 8 (no process seen): its advice drops what the watch had."""
    from sensors._config.stage import PolicySpec
    from sensors._verdict import VerdictMemory, decide

    readings = {"process": _r("process", "done"), "log": _r("log", "working")}
    with_since, _ = decide(
        "s", "local", readings, PolicySpec(), VerdictMemory(), 1000.0, run=Run("since", 1.0)
    )
    without, _ = decide("s", "local", readings, PolicySpec(), VerdictMemory(), 1000.0)
    assert with_since.state is State.UNKNOWN and "--since" not in " ".join(with_since.reasons)
    assert "--since" in " ".join(without.reasons)
    # serve: no run start can be given, so none is advised (user s16).
    served, _ = decide("s", "local", readings, PolicySpec(), VerdictMemory(), 1000.0, takes_since=False)
    assert served.state is State.UNKNOWN and "--since" not in " ".join(served.reasons)
    assert "launch the job" in " ".join(served.reasons)


# --------------------------------------------------------------------------- notifications


def test_one_notification_at_once_and_never_a_reminder() -> None:
    now = [0.0]
    sent: list[object] = []
    spec = NotifySpec(remind_every="1m", unknown_after="5m")
    notifier = Notifier(spec, stage="s", send=lambda m: sent.append(m), clock=lambda: now[0])
    reading = {"process": _GONE_SEEN}
    why = stuck(State.UNKNOWN, reading, None)
    v = Verdict("s", State.UNKNOWN, ("r",), reading, 1000.0, "local", stuck=why)
    blip = Verdict("s", State.UNKNOWN, ("host",), {}, None, "local")
    for step in range(20):
        now[0] = step * 120.0  # past remind_every each time
        notifier.observe(blip if step % 3 == 2 else v)
    assert len(sent) == 1
    message = sent[0]
    assert (
        message.kind == "stuck"
        and "the fix: " in message.text
        and why is not None
        and why.fix in message.text
    )
    # A new run at work is a transition again; its own stuck is news once more.
    notifier.observe(Verdict("s", State.STALLED, ("r",), {}, 1000.0, "local"))
    notifier.observe(v)
    assert [m.kind for m in sent] == ["stuck", "transition", "stuck"]


def test_a_watch_restored_on_a_stuck_run_does_not_tell_it_again() -> None:
    sent: list[object] = []
    notifier = Notifier(NotifySpec(), stage="s", send=lambda m: sent.append(m))
    reading = {"process": _GONE_SEEN}
    v = Verdict(
        "s", State.UNKNOWN, ("r",), reading, 1000.0, "local", stuck=stuck(State.UNKNOWN, reading, None)
    )
    notifier.resume(v)
    notifier.observe(v)
    assert sent == []


def test_a_stuck_verdict_is_no_news_where_neither_unknown_nor_failed_is_asked_for() -> None:
    sent: list[object] = []
    notifier = Notifier(NotifySpec(on=("complete",)), stage="s", send=lambda m: sent.append(m))
    reading = {"process": _GONE_SEEN}
    notifier.observe(
        Verdict("s", State.UNKNOWN, ("r",), reading, 1.0, "local", stuck=stuck(State.UNKNOWN, reading, None))
    )
    assert sent == []


# --------------------------------------------------------------------------- the real CLI


def _job(tmp_path: Path, tag: str, seconds: float) -> tuple[subprocess.Popen, Path]:
    """A real job (a shell that sleeps, then exits 0), and a stage that watches it by its
    process alone: nothing there tells a success from a crash once it is gone."""
    script = tmp_path / f"{tag}.sh"
    script.write_text(f"#!/bin/sh\nsleep {seconds}\nexit 0\n")
    script.chmod(0o755)
    stage = tmp_path / f"{tag}.yaml"
    stage.write_text(
        f"stage: {tag}\nhost: local\nprocess:\n  match: {str(script)!r}\n"
        "policy:\n  interval: 300ms\n  timeout: 1h\n  exit_grace: 1s\n"
    )
    return subprocess.Popen([str(script)], start_new_session=True), stage


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "CROSSCHECK_STATE": str(tmp_path / "state.db"), **extra}


def test_wait_on_a_stuck_stage_exits_at_once_with_5(tmp_path: Path) -> None:
    job, stage = _job(tmp_path, "stuck-wait", 5)
    try:
        began = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "sensors", "wait", str(stage), "--json"],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=120,
        )
        took = time.monotonic() - began
    finally:
        job.kill()
        job.wait()
    assert out.returncode == 5, (out.stdout, out.stderr)
    assert took < 40, took  # seconds after the job's end (5 s in), not the hour of its timeout
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["verdict"] == "unknown" and last["settled"] is True
    assert "no log, no outputs" in last["stuck"]["why"]
    lines = [line for line in out.stderr.splitlines() if "stuck" in line]
    assert len(lines) == 1 and "the fix: add a log section" in lines[0], out.stderr
    assert "before it ends" not in lines[0]  # it watched the job end


def test_serve_sends_one_notification_for_a_stuck_stage(tmp_path: Path) -> None:
    stages = tmp_path / "stages"
    stages.mkdir()
    with WebhookServer() as hook:
        job, stage = _job(tmp_path, "stuck-serve", 6)
        text = stage.read_text().replace("timeout: 1h", "timeout: 1h\n  settle: 1")
        text += "notify:\n  slack_webhook: env:XC_STUCK_HOOK\n  remind_every: 1s\n  unknown_after: 1s\n"
        (stages / "s.yaml").write_text(text)
        out = tmp_path / "serve.jsonl"
        with open(out, "w") as fo, open(tmp_path / "serve.err", "w") as fe:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sensors", "serve", str(stages), "--json", "--rescan", "300ms"],
                stdout=fo,
                stderr=fe,
                env=_env(tmp_path, XC_STUCK_HOOK=hook.url),
            )
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not any(
                '"settled": true' in line for line in out.read_text().splitlines()
            ):
                time.sleep(0.2)
            assert hook.wait_answered(1, timeout=30), (tmp_path / "serve.err").read_text()
            time.sleep(4)  # past remind_every and unknown_after several times over
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            job.kill()
            job.wait()
        bodies = [r.json() for r in hook.requests]
        assert len(bodies) == 1, [b.get("text", "")[:120] for b in bodies]
        assert "stuck" in bodies[0]["text"] and "the fix: add a log section" in bodies[0]["text"]
        docs = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
        stuck_docs = [d for d in docs if d["stuck"] is not None]
        assert stuck_docs and all(d["settled"] for d in stuck_docs)
