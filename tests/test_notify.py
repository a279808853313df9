"""Notifications: message content, the when-policy, delivery against a real local HTTP server,
and Prefect notification/secret blocks inside the Prefect test harness.

Every request goes to 127.0.0.1 (tests/webhook_server.py). No test waits on a wall clock for
its assertion: retries use an injected sleep, and a hung server is proven bounded by the
delivery returning while the server still holds the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from sensors._base.model import Reading, Says, State, Verdict
from sensors._config.stage import NotifySpec
from sensors._notify import (
    EMOJI,
    Delivery,
    Message,
    Notifier,
    PrefectBlockSender,
    SlackWebhookSender,
    build_message,
    evidence_line,
    fmt_duration,
    resolve_slack_webhook,
    retry_after_seconds,
)
from tests.webhook_server import Reply, WebhookServer

T0 = 1_771_872_843.0  # 2026-02-23 18:54:03 UTC, on the monitored host's clock


# ----------------------------------------------------------------------------- builders


def readings(state: State) -> dict[str, Reading]:
    """The four signals of incident 2, shaped for each verdict."""
    if state is State.COMPLETE:
        return {
            "process": Reading("process", Says.DONE, "exited 0", {"pid": 4455, "exit_code": 0}),
            "log": Reading(
                "log",
                Says.DONE,
                "completion line seen",
                {"last_line": "[37312] 37312 extracted; done", "age_seconds": 40.0},
            ),
            "outputs": Reading("outputs", Says.DONE, "37312 of 37312", {"count": 37312, "expected": 37312}),
        }
    working = Says.WORKING if state is State.RUNNING else Says.UNKNOWN
    return {
        "process": Reading(
            "process",
            Says.WORKING,
            "pid 4455 state Rl",
            {"pid": 4455, "state": "Rl", "cpu_seconds": 2761.0, "elapsed_seconds": 8_940.0},
        ),
        "log": Reading(
            "log",
            working,
            "no new line for 16m",
            {"last_line": "[37300] 18880 extracted, ETA 0 min", "age_seconds": 960.0},
        ),
        "outputs": Reading("outputs", working, "37300 of 37312", {"count": 37300, "expected": 37312}),
        "gpu": Reading(
            "gpu",
            Says.UNKNOWN,
            "8 GPUs idle, 92 GB allocated",
            {
                "devices": [
                    {"index": i, "utilization_pct": u, "memory_used_mib": 94208.0}
                    for i, u in enumerate([0.0, 0.0, 3.0, 0.0])
                ],
                "job_memory_mib": 376832.0,
                "idle": True,
                "error": None,
            },
        ),
    }


def verdict(
    state: State | str,
    *,
    checked_at: float = T0,
    since: float | None = T0 - 1800.0,
    reasons: tuple[str, ...] | None = None,
    stage: str = "extract",
    host: str = "gpu-host",
) -> Verdict:
    state = State(state)
    if reasons is None:
        reasons = (f"the stage is {state}: log quiet 16m while the process works",)
    return Verdict(stage, state, reasons, readings(state), checked_at, host, since)


def all_text(message: Message) -> str:
    return json.dumps(message.payload, ensure_ascii=False)


def blocks_text(message: Message) -> str:
    return json.dumps(message.blocks, ensure_ascii=False)


class FakeClock:
    """Monotonic seconds that only ``sleep`` advances; records each sleep."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Recorder:
    """A ``send`` that records messages and reports success."""

    channel = "recorder"

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> Delivery:
        self.messages.append(message)
        return Delivery(self.channel, True)

    @property
    def kinds(self) -> list[tuple[str, str]]:
        return [(m.kind, str(m.state)) for m in self.messages]


@pytest.fixture
def hook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_secret_absent(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text


# ----------------------------------------------------------------------------- messages


def test_message_carries_stage_verdict_and_evidence() -> None:
    url = "http://127.0.0.1:4200/runs/flow-run/0b5e"
    msg = build_message(verdict("stalled"), flow_run_url=url)
    blocks = blocks_text(msg)
    for text in (blocks, msg.text):
        assert "extract" in text and "gpu-host" in text
        assert "stalled" in text
        assert "log quiet 16m" in text  # the reason
        assert "pid 4455" in text and "state Rl" in text
        assert "cpu 46m 1s" in text and "elapsed 2h 29m" in text
        assert "18880 extracted, ETA 0 min" in text and "age 16m" in text
        assert "count 37300/37312" in text and "99.96%" in text  # rounded down
        assert "util 0/0/3/0%" in text and "mem 92 GiB/92 GiB/92 GiB/92 GiB" in text
        assert "job holds 368 GiB" in text and "idle" in text and "error" not in text
        assert "2026-02-23 18:24:03 UTC (30m)" in text  # since, and how long it has held
    assert url in blocks and f"Flow run: {url}" in msg.text
    assert msg.payload["blocks"][0]["type"] == "header"
    assert "⏸️" in msg.payload["blocks"][0]["text"]["text"]
    assert msg.payload["attachments"][0]["color"] == "#ECB22E"
    assert msg.payload["text"] == msg.text
    json.dumps(msg.payload)  # the body is JSON as given
    # A channel with a subject gets the title there and the rest as its body: once each.
    assert msg.text == f"{msg.title}\n{msg.body}" and msg.title not in msg.body


@pytest.mark.parametrize(
    ("state", "emoji"),
    [
        ("complete", "✅"),
        ("running", "▶️"),
        ("stalled", "⏸️"),
        ("failed", "❌"),
        ("contradiction", "🔀"),
        ("unknown", "❔"),
    ],
)
def test_each_verdict_has_its_emoji(state: str, emoji: str) -> None:
    msg = build_message(verdict(state))
    assert msg.title.startswith(emoji) and state in msg.title
    assert msg.state is State(state)


def test_reminder_and_resolved_titles() -> None:
    reminder = build_message(verdict("stalled"), kind="reminder", held_for=7200.0)
    assert "still stalled for 2h" in reminder.title and reminder.kind == "reminder"
    resolved = build_message(verdict("running"), kind="resolved", previous=State.STALLED, held_for=600.0)
    assert "resolved, running again (was stalled for 10m)" in resolved.title
    assert resolved.payload["attachments"][0]["color"] == "#2EB67D"
    done = build_message(verdict("complete"), kind="resolved", previous=State.CONTRADICTION)
    assert "resolved, completed (was contradiction" in done.title


def test_evidence_read_defensively() -> None:
    odd = {
        "process": Reading("process", Says.UNKNOWN, "host unreachable", {"error": "timed out"}),
        "log": Reading("log", Says.UNKNOWN, "", {}),
        "outputs": Reading("outputs", Says.WORKING, "", {"count": None, "expected": 10}),
        "gpu": Reading("gpu", Says.UNKNOWN, "", {"utilisation": "n/a", "memory": {"0": 1.5}}),
        "custom": Reading("custom", Says.WORKING, "x", {"rate": 3, "nested": {"a": 1}}),
    }
    v = Verdict("s", State.UNKNOWN, (), odd, None, "h", None)
    msg = build_message(v)
    assert "error: timed out" in msg.text
    assert "count ?/10" in msg.text
    assert "util n/a" in msg.text and "mem 1.5" in msg.text
    assert "rate 3" in msg.text
    assert "since" not in msg.text  # nothing known about since when


def test_log_line_is_escaped_and_truncated() -> None:
    line = "<!channel> & `rm -rf` " + "x" * 500
    r = Reading("log", Says.WORKING, "tail", {"last_line": line, "age_seconds": 3})
    v = Verdict("s", State.RUNNING, ("ok",), {"log": r}, T0, "h", T0)
    msg = build_message(v)
    blocks = blocks_text(msg)
    assert "<!channel>" not in blocks and "&lt;!channel&gt; &amp;" in blocks
    assert len(evidence_line(r)) <= 400
    assert "x" * 200 not in msg.text


def test_helpers() -> None:
    assert [fmt_duration(s) for s in (5, 60, 2761, 7200, 90_000)] == [
        "5s",
        "1m",
        "46m 1s",
        "2h",
        "1d 1h",
    ]
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds("Mon, 23 Feb 2026 19:54:13 GMT", now=T0 + 3600) == 10.0
    assert retry_after_seconds("soon") is None


def test_message_from_a_real_check(tmp_path) -> None:
    # The evidence keys of a real probe (not only hand-built readings) reach the message.
    from sensors._check.checker import Checker
    from sensors._config.stage import stage_from_dict
    from sensors.testing import SimulatedJob

    job = SimulatedJob(tmp_path, scenario="stall", total=6, step=0.01)
    pid = job.start()
    try:
        with Checker(stage_from_dict(job.stage_dict(name="extract"))) as checker:
            for _ in range(300):  # readiness, not timing: until the job has written something
                v = checker.check()
                if (
                    v.readings["outputs"].evidence.get("count")
                    and v.readings["log"].evidence.get("last_line")
                    and v.readings["process"].evidence.get("pid") == pid
                ):
                    break
                time.sleep(0.05)
    finally:
        job.stop()
    msg = build_message(v)
    assert msg.title.startswith(EMOJI[v.state]) and "extract on local" in msg.title
    for text in (msg.text, blocks_text(msg)):
        assert f"pid {pid}" in text and "count " in text and "/6" in text and "last " in text


# ----------------------------------------------------------------------------- policy


def test_one_message_per_transition_over_many_checks() -> None:
    send, clock = Recorder(), FakeClock()
    n = Notifier(NotifySpec(), stage="extract", send=send, clock=clock)
    for state in ["running"] * 50 + ["stalled"] * 50 + ["failed"] * 5:
        n.observe(verdict(state))
        clock.now += 30
    # running is not in the default `on`; stalled and failed are announced once each.
    assert send.kinds == [("transition", "stalled"), ("transition", "failed")]


def test_unknown_only_after_unknown_after() -> None:
    send, clock = Recorder(), FakeClock()
    n = Notifier(NotifySpec(unknown_after="5m"), stage="extract", send=send, clock=clock)
    n.observe(verdict("running"))
    clock.now += 30
    for _ in range(10):  # unknown from 0s to 4m30s: a blip, not news
        assert n.observe(verdict("unknown", since=None)) == []
        clock.now += 30
    sent = n.observe(verdict("unknown", since=None))  # unknown for 5m: news
    assert [s.message.kind for s in sent] == ["transition"]
    assert "unknown" in sent[0].message.title and "5m ago" in sent[0].message.text
    clock.now += 30
    assert n.observe(verdict("unknown", since=None)) == []
    clock.now += 30
    assert [s.message.kind for s in n.observe(verdict("running"))] == ["resolved"]


def test_unknown_blip_does_not_repeat_a_stall() -> None:
    send, clock = Recorder(), FakeClock()
    n = Notifier(NotifySpec(), stage="extract", send=send, clock=clock)
    for state in ["stalled", "unknown", "unknown", "stalled", "stalled"]:
        n.observe(verdict(state))
        clock.now += 30
    assert send.kinds == [("transition", "stalled")]


def test_reminders_while_a_problem_persists() -> None:
    send, clock = Recorder(), FakeClock()
    n = Notifier(NotifySpec(remind_every="1h"), stage="extract", send=send, clock=clock)
    for _ in range(int(2.2 * 3600 / 30)):
        n.observe(verdict("stalled"))
        clock.now += 30
    assert send.kinds == [
        ("transition", "stalled"),
        ("reminder", "stalled"),
        ("reminder", "stalled"),
    ]
    assert "still stalled for 1h" in send.messages[1].title
    assert "still stalled for 2h" in send.messages[2].title


def test_resolved_when_a_stall_clears() -> None:
    send, clock = Recorder(), FakeClock()
    n = Notifier(NotifySpec(), stage="extract", send=send, clock=clock)
    n.observe(verdict("stalled"))
    clock.now += 600
    sent = n.observe(verdict("running"), flow_run_url="http://127.0.0.1:4200/runs/flow-run/1")
    assert [s.message.kind for s in sent] == ["resolved"]
    msg = sent[0].message
    assert "running again (was stalled for 10m)" in msg.title
    assert "http://127.0.0.1:4200/runs/flow-run/1" in msg.text
    for _ in range(20):
        clock.now += 30
        n.observe(verdict("running"))
    assert len(send.messages) == 2  # no reminders once resolved


def test_completion_after_contradiction_is_one_message() -> None:
    send, clock = Recorder(), FakeClock()
    n = Notifier(NotifySpec(), stage="extract", send=send, clock=clock)
    for state in ["running", "contradiction", "contradiction", "complete", "complete"]:
        n.observe(verdict(state))
        clock.now += 30
    assert send.kinds == [("transition", "contradiction"), ("resolved", "complete")]


def test_states_not_in_on_stay_quiet() -> None:
    send, clock = Recorder(), FakeClock()
    spec = NotifySpec(on=("failed",))
    n = Notifier(spec, stage="extract", send=send, clock=clock)
    for state in ["running", "stalled", "contradiction", "running", "failed"]:
        n.observe(verdict(state))
        clock.now += 30
    assert send.kinds == [("transition", "failed")]


def test_a_failing_sender_never_reaches_the_wait_loop(caplog: pytest.LogCaptureFixture) -> None:
    def broken(message: Message) -> Delivery:
        raise RuntimeError("boom")

    n = Notifier(NotifySpec(), stage="extract", send=broken, clock=FakeClock())
    with caplog.at_level(logging.WARNING, logger="crosscheck.notify"):
        sent = n.observe(verdict("failed"))
    assert not sent[0].ok and sent[0].deliveries[0].error == "RuntimeError"
    assert "could not deliver the transition notification (failed) for stage extract" in caplog.text


# ----------------------------------------------------------------------------- delivery


def sender(url: str, clock: FakeClock, **kw) -> SlackWebhookSender:
    return SlackWebhookSender(lambda: url, sleep=clock.sleep, clock=clock, **kw)


def test_delivers_block_kit_json(hook: WebhookServer) -> None:
    clock = FakeClock()
    result = sender(hook.url, clock)(build_message(verdict("stalled")))
    assert result == Delivery("the Slack webhook", True, 200, 1)
    (req,) = hook.requests
    assert req.method == "POST" and req.path == hook.path
    assert req.headers["Content-Type"] == "application/json"
    body = req.json()
    assert body["blocks"][0]["type"] == "header" and "extract" in body["text"]
    assert "pid 4455" in json.dumps(body["attachments"])


def test_retries_after_500(hook: WebhookServer) -> None:
    hook.respond(Reply(500, "internal"), Reply(200))
    clock = FakeClock()
    result = sender(hook.url, clock)(build_message(verdict("stalled")))
    assert result.ok and result.attempts == 2 and len(hook.requests) == 2
    assert clock.sleeps == [0.5]  # one backoff wait, never actually slept
    assert hook.requests[0].body == hook.requests[1].body


def test_429_retry_after_is_honoured_and_capped(hook: WebhookServer) -> None:
    hook.respond(
        Reply(429, "rate_limited", {"Retry-After": "3"}),
        Reply(429, "rate_limited", {"Retry-After": "3600"}),
        Reply(200),
    )
    clock = FakeClock()
    result = sender(hook.url, clock, retry_after_max=12.0)(build_message(verdict("failed")))
    assert result.ok and result.attempts == 3
    assert clock.sleeps == [3.0, 12.0]


def test_retries_stay_within_the_total_time(hook: WebhookServer) -> None:
    hook.respond(default=Reply(503, "unavailable", {"Retry-After": "10"}))
    clock = FakeClock()
    result = sender(hook.url, clock, total_timeout=30.0, max_attempts=100)(build_message(verdict("failed")))
    assert not result.ok and result.status == 503 and result.error == "HTTP 503"
    assert sum(clock.sleeps) <= 30.0 and result.attempts == 3  # 0s, 10s, 20s; 30s is the end


def test_permanent_failure_is_logged_not_raised(
    hook: WebhookServer, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    hook.respond(default=Reply(500, "internal"))
    clock = FakeClock()
    send = sender(hook.url, clock)
    n = Notifier(NotifySpec(), stage="extract", send=send, clock=clock)
    with caplog.at_level(logging.DEBUG):
        (sent,) = n.observe(verdict("stalled"))
    (delivery,) = sent.deliveries
    assert not delivery.ok and delivery.status == 500 and delivery.attempts == 6
    assert "HTTP 500" in caplog.text and "the Slack webhook" in caplog.text
    assert "after 6 attempt(s)" in caplog.text
    out, err = capsys.readouterr()
    assert_secret_absent(hook.token, caplog.text, out, err, repr(delivery), repr(sent), repr(send), repr(n))


def test_client_error_is_not_retried(hook: WebhookServer) -> None:
    hook.respond(Reply(404, "no_service"))
    result = sender(hook.url, FakeClock())(build_message(verdict("stalled")))
    assert not result.ok and result.status == 404 and result.attempts == 1


def test_connection_refused_is_retried_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{closed_port()}/services/T/B/secret-token-xyz"
    clock = FakeClock()
    with caplog.at_level(logging.DEBUG):
        result = sender(url, clock, max_attempts=3)(build_message(verdict("stalled")))
    assert not result.ok and result.error == "could not connect" and result.attempts == 3
    assert "secret-token-xyz" not in caplog.text


def test_a_hung_server_cannot_hold_the_wait(hook: WebhookServer) -> None:
    hook.respond(default=Reply(200, hold=True))
    # Real clock and sleep, small bounds: the proof is causal, not a stopwatch. The delivery
    # returns while the server still holds every request it received.
    send = SlackWebhookSender(lambda: hook.url, total_timeout=1.0, request_timeout=0.3)
    result = send(build_message(verdict("stalled")))
    assert not result.ok and result.error == "timed out" and result.attempts >= 1
    assert hook.answered == 0
    hook.release()
    assert hook.wait_answered(len(hook.requests))


def _notify_workers(limit: float) -> list[threading.Thread]:
    """The delivery worker threads still alive after up to ``limit`` seconds."""
    end = time.monotonic() + limit
    while True:
        alive = [t for t in threading.enumerate() if t.name == "crosscheck-notify"]
        if not alive or time.monotonic() > end:
            return alive
        time.sleep(0.05)


def test_a_trickling_server_cannot_hold_the_wait(hook: WebhookServer) -> None:
    # One byte every 0.2 s: no read ever times out, and the whole answer would take ~15 s.
    # The total deadline holds anyway: the sender returns a failure at 1 s (+ a margin for
    # a loaded machine), and the abandoned attempt's thread ends soon after.
    hook.respond(default=Reply(200, trickle=0.2))
    send = SlackWebhookSender(lambda: hook.url, total_timeout=1.0, request_timeout=0.5)
    start = time.monotonic()
    result = send(build_message(verdict("stalled")))
    elapsed = time.monotonic() - start
    assert not result.ok and result.error == "timed out" and result.attempts == 1
    assert elapsed < 1.0 + 1.5, elapsed
    assert hook.requests and hook.answered == 0  # the server was still trickling
    assert _notify_workers(5.0) == []


def test_a_trickling_server_cannot_hold_a_watch_through_the_notifier(hook: WebhookServer) -> None:
    hook.respond(default=Reply(200, trickle=0.2))
    send = SlackWebhookSender(lambda: hook.url, total_timeout=0.8, request_timeout=0.5)
    n = Notifier(NotifySpec(), stage="extract", send=send, clock=FakeClock())
    start = time.monotonic()
    (sent,) = n.observe(verdict("failed"))
    assert time.monotonic() - start < 0.8 + 1.5
    assert not sent.ok and sent.deliveries[0].error == "timed out"


def test_a_prefect_block_that_hangs_is_bounded_too() -> None:
    # The block's own client is out of reach (apprise, slack_sdk): the attempt is abandoned at
    # the deadline and the caller goes on. A stand-in block; no Prefect server needed.
    release = threading.Event()

    class HangingBlock:
        def notify(self, body: str, subject: str | None = None) -> None:
            release.wait(30)

    send = PrefectBlockSender("stuck", total_timeout=0.5)
    send._block = HangingBlock()
    start = time.monotonic()
    result = send(build_message(verdict("stalled")))
    assert time.monotonic() - start < 0.5 + 1.5
    assert not result.ok and result.error == "timed out"
    release.set()
    assert _notify_workers(5.0) == []


def test_env_secret(hook: WebhookServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XC_TEST_SLACK_URL", hook.url)
    secret = resolve_slack_webhook("env:XC_TEST_SLACK_URL")
    assert hook.token not in repr(secret) and hook.token not in str(secret)
    assert hook.token not in f"{secret}"
    monkeypatch.delenv("XC_TEST_SLACK_URL")
    result = SlackWebhookSender("env:XC_TEST_SLACK_URL")(build_message(verdict("stalled")))
    assert not result.ok and "XC_TEST_SLACK_URL is not set" in (result.error or "")


def test_end_to_end_from_spec(
    hook: WebhookServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XC_TEST_SLACK_URL", hook.url)
    spec = NotifySpec(slack_webhook="env:XC_TEST_SLACK_URL", remind_every="1h")
    clock = FakeClock()
    n = Notifier(spec, stage="extract", clock=clock)
    hook.respond(Reply(500))  # the first delivery needs a retry: real sleep of 0.5s
    with caplog.at_level(logging.DEBUG):
        for state in ["running"] * 3 + ["stalled"] * 130 + ["running"] * 3:
            n.observe(verdict(state))
            clock.now += 30
    bodies = [r.json()["text"].splitlines()[0] for r in hook.requests]
    assert bodies == [
        "⏸️ extract on gpu-host: stalled",
        "⏸️ extract on gpu-host: stalled",  # the retry of the same message
        "⏸️ extract on gpu-host: still stalled for 1h",
        "▶️ extract on gpu-host: resolved, running again (was stalled for 1h 5m)",
    ]
    assert all(s.ok for s in n.sent) and len(n.sent) == 3
    out, err = capsys.readouterr()
    assert_secret_absent(hook.token, caplog.text, out, err, repr(n))


# ----------------------------------------------------------------------------- Prefect blocks

_QUIET = {
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}


@pytest.fixture(scope="module")
def block_hook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
class TestThroughPrefectBlocks:
    """Needs the Prefect test harness: saved blocks, loaded by name, pointed at 127.0.0.1."""

    def test_custom_webhook_notification_block(
        self,
        block_hook: WebhookServer,
        caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        from prefect.blocks.notifications import CustomWebhookNotificationBlock

        CustomWebhookNotificationBlock(
            name="crosscheck-test",
            url=block_hook.url,
            json_data={"text": "{{subject}}\n{{body}}"},
        ).save("xc-ops-alerts", overwrite=True)
        block_hook.requests.clear()
        block_hook.respond(Reply(502), Reply(200))
        clock = FakeClock()
        spec = NotifySpec(prefect_block="xc-ops-alerts")
        send = PrefectBlockSender("xc-ops-alerts", sleep=clock.sleep, clock=clock)
        n = Notifier(spec, stage="extract", send=send, clock=clock)
        with caplog.at_level(logging.DEBUG):
            for state in ["running", "stalled", "stalled", "running"]:
                n.observe(verdict(state))
                clock.now += 600
        assert [s.ok for s in n.sent] == [True, True]
        assert n.sent[0].deliveries[0].attempts == 2 and clock.sleeps == [0.5]
        texts = [r.json()["text"] for r in block_hook.requests]
        assert len(texts) == 3  # the 502, its retry, the resolved message
        assert texts[1].startswith("⏸️ extract on gpu-host: stalled\n")
        assert texts[1].count("extract on gpu-host: stalled") == 1  # subject and body, the title once
        assert "pid 4455" in texts[1] and "count 37300/37312" in texts[1]
        assert "resolved, running again (was stalled for 20m)" in texts[2]
        out, err = capsys.readouterr()
        assert_secret_absent(block_hook.token, caplog.text, out, err)

    def test_block_slug_and_failure(
        self, block_hook: WebhookServer, caplog: pytest.LogCaptureFixture
    ) -> None:
        from prefect.blocks.notifications import CustomWebhookNotificationBlock

        CustomWebhookNotificationBlock(
            name="crosscheck-test", url=block_hook.url, json_data={"text": "{{body}}"}
        ).save("xc-failing", overwrite=True)
        block_hook.respond(default=Reply(500))
        try:
            clock = FakeClock()
            send = PrefectBlockSender("custom-webhook/xc-failing", sleep=clock.sleep, clock=clock)
            n = Notifier(NotifySpec(), stage="extract", send=send, clock=clock)
            with caplog.at_level(logging.DEBUG):
                (sent,) = n.observe(verdict("failed"))
        finally:
            block_hook.respond(default=Reply(200))
        (delivery,) = sent.deliveries
        assert not delivery.ok and delivery.status == 500 and delivery.attempts == 4
        assert "HTTP 500" in caplog.text and "Prefect block custom-webhook/xc-failing" in caplog.text
        assert_secret_absent(block_hook.token, caplog.text, repr(delivery))

    def test_missing_block_is_a_failed_delivery(self) -> None:
        result = PrefectBlockSender("xc-no-such-block")(build_message(verdict("failed")))
        assert not result.ok and "no Prefect notification block named" in (result.error or "")

    def test_slack_webhook_from_a_secret_block(
        self, block_hook: WebhookServer, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from prefect.blocks.system import Secret

        Secret(value=block_hook.url).save("xc-slack-url", overwrite=True)
        block_hook.requests.clear()
        result = SlackWebhookSender("block:xc-slack-url")(build_message(verdict("complete")))
        assert result.ok and len(block_hook.requests) == 1
        assert block_hook.requests[0].json()["text"].startswith("✅ extract on gpu-host: complete")
        out, err = capsys.readouterr()
        assert_secret_absent(block_hook.token, out, err)

    def test_slack_webhook_from_a_prefect_slack_block(self, block_hook: WebhookServer) -> None:
        from prefect_slack import SlackWebhook

        SlackWebhook(url=block_hook.url).save("xc-slack-hook", overwrite=True)
        block_hook.requests.clear()
        result = SlackWebhookSender("block:xc-slack-hook")(build_message(verdict("stalled")))
        assert result.ok and len(block_hook.requests) == 1

    def test_a_prefect_slack_block_as_prefect_block_shows_the_title_once(
        self, block_hook: WebhookServer
    ) -> None:
        """Issue 23: ``notify: {prefect_block: NAME}`` naming prefect-slack's SlackWebhook
        showed the title line twice (the block posts ``subject\\nbody``, and the body began
        with the title). The real block, loaded by name, posting to the real server."""
        from prefect_slack import SlackWebhook

        SlackWebhook(url=block_hook.url).save("xc-slack-notify", overwrite=True)
        block_hook.requests.clear()
        message = build_message(verdict("stalled"))
        result = PrefectBlockSender("xc-slack-notify")(message)
        assert result.ok, result.error
        (request,) = block_hook.requests
        text = request.json()["text"]
        assert text.count(message.title) == 1, text
        assert text.startswith(message.title + "\nVerdict: stalled"), text
        assert "pid 4455" in text and "count 37300/37312" in text

    def test_unknown_secret_block(self) -> None:
        result = SlackWebhookSender("block:xc-nope")(build_message(verdict("stalled")))
        assert not result.ok and "no Prefect SlackWebhook or Secret block named" in (result.error or "")

    def test_inside_sync_and_async_flows(
        self, block_hook: WebhookServer, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # In an async run Prefect 3.9's `notify`/`load` return coroutines (async_dispatch):
        # the sender must still deliver from its sync call. A failure inside a run goes to the
        # run logger and the flow goes on.
        from prefect import flow
        from prefect.blocks.notifications import CustomWebhookNotificationBlock

        CustomWebhookNotificationBlock(
            name="crosscheck-test", url=block_hook.url, json_data={"text": "{{body}}"}
        ).save("xc-in-flow", overwrite=True)
        block_hook.requests.clear()

        def watch() -> list[bool]:
            n = Notifier(NotifySpec(prefect_block="xc-in-flow"), stage="extract", clock=FakeClock())
            return [s.ok for s in n.observe(verdict("stalled"))]

        @flow
        def sync_flow() -> list[bool]:
            return watch()

        @flow
        async def async_flow() -> list[bool]:
            return watch()

        @flow
        def failing_flow() -> bool:
            send = SlackWebhookSender("env:XC_UNSET_VARIABLE")
            n = Notifier(NotifySpec(), stage="extract", send=send, clock=FakeClock())
            (sent,) = n.observe(verdict("failed"))
            return sent.ok

        run_log: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: run_log.append(record.getMessage())  # type: ignore[method-assign]
        flow_runs = logging.getLogger("prefect.flow_runs")  # where get_run_logger() writes
        flow_runs.addHandler(handler)
        try:
            assert sync_flow() == [True]
            assert asyncio.run(async_flow()) == [True]
            assert failing_flow() is False
        finally:
            flow_runs.removeHandler(handler)
        assert len(block_hook.requests) == 2
        assert any("could not deliver the transition notification (failed)" in m for m in run_log)
        out, err = capsys.readouterr()
        assert_secret_absent(block_hook.token, out, err, *run_log)


def test_one_output_short_never_reads_100_percent() -> None:
    from sensors._notify import _outputs_values
    from sensors.prefect import progress_percent
    from sensors.testing import reading as make_reading

    assert _outputs_values({"count": 37311, "expected": 37312})[-1] == "99.99%"
    verdict = Verdict(
        "s",
        State.RUNNING,
        ("x",),
        {"outputs": make_reading("outputs", "working", count=37311, expected=37312)},
        0.0,
        "h",
    )
    assert progress_percent(verdict) == 99.99


@pytest.mark.parametrize("spelling", ["upper-scheme", "upper-host", "space"])
def test_the_url_as_httpx_normalises_it_is_redacted_too(
    hook: WebhookServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, spelling: str
) -> None:
    """httpx logs the URL it normalised (scheme and host lowercased, spaces escaped), not the
    string it was given: the credential must be hidden in that form too."""
    url = hook.url
    if spelling == "upper-scheme":
        url = "HTTP" + url[len("http") :]
    elif spelling == "upper-host":
        url = url.replace("127.0.0.1", "LocalHost", 1)
    else:
        url = url + " x"
    monkeypatch.setenv("XC_TEST_SLACK_URL", url)
    with caplog.at_level(logging.DEBUG):
        SlackWebhookSender("env:XC_TEST_SLACK_URL", total_timeout=5)(build_message(verdict("stalled")))
    assert hook.requests, "nothing was sent"
    assert any("HTTP Request" in r.getMessage() for r in caplog.records)
    assert hook.token not in caplog.text


def test_hostile_job_text_reaches_slack_as_inert_text(hook: WebhookServer) -> None:
    # A log line and a detail that try every mrkdwn trick: a mention, a link, formatting,
    # a code span break-out, a terminal escape; delivered to a real HTTP server.
    line = "<!channel> <http://evil|click> *bold* ~s~ `x` &amp; \x1b[31mred\x1b]8;;http://evil\x1b\\"
    r = Reading("log", Says.WORKING, f"no completion line yet; last: {line}", {"last_line": line})
    v = Verdict("s", State.STALLED, (f"log: {r.detail}",), {"log": r}, T0, "h", T0)
    assert sender(hook.url, FakeClock())(build_message(v)).ok
    body = hook.requests[0].json()
    raw = json.dumps(body, ensure_ascii=False)
    assert "<!channel>" not in raw and "<http://evil" not in raw and "\x1b" not in raw
    assert "&lt;!channel&gt;" in body["text"] and body["mrkdwn"] is False
    for block in body["attachments"][0]["blocks"][:2]:  # Why and Evidence
        text = block["text"]["text"]
        assert block["text"]["verbatim"] is True and "&lt;http://evil|click&gt;" in text
        # Job text sits inside code (no formatting there) and cannot close it early.
        assert text.count("`") % 2 == 0 and "&amp;amp;" in text
        outside_code = "".join(text.split("`")[0::2])
        assert "channel" not in outside_code and "evil" not in outside_code and "bold" not in outside_code
