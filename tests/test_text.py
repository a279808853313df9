"""Job text is data: secrets redacted in all evidence, and every output shows job text inert.

The end-to-end tests run the real ``crosscheck`` command against real processes whose log
lines and command lines carry rich markup, terminal escapes, control characters, invalid
UTF-8, Slack mentions and markdown injections.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from sensors._base import text as _text
from sensors._base.model import Reading, Says, State, Verdict
from sensors._base.text import inert, markdown_escape, redact, slack_code

ROOT = Path(__file__).parent.parent

# Everything a job can write that an output might take for something else.
# (Under 180 characters: a reading's detail keeps the first 200 of a log line.)
HOSTILE = (
    "[/data/out] [bold red]x[/] \x1b[31mred\x1b[0m <!channel> <http://evil|click> %s %(x)s {0}"
    " *b* ~s~ `c` | x | y | [click](http://evil) <img src=x> \x07 \x1b]8;;http://evil\x1b\\click"
)
SECRETS = ("hf_abcdefghijklmnopqrstuvwx", "hunter2", ":pw@", "abc123")


def test_doctests() -> None:
    assert doctest.testmod(_text).failed == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--hf-token hf_abcdefghijklmnopqrstuvwx", "--hf-token ***"),
        ("--hf_token=abc", "--hf_token=***"),
        ("--password=hunter2 --password hunter2", "--password=*** --password ***"),
        ("--api-key k --apiKey=k --access-key k --secret-key k", "--api-key *** --apiKey=*** --access-key *** --secret-key ***"),
        ("--client-secret s --auth-token t --credentials c", "--client-secret *** --auth-token *** --credentials ***"),
        ("--verbose --token abc", "--verbose --token ***"),
        ("--verbose HF_TOKEN=abc db/x AWS_SECRET_ACCESS_KEY=k", "--verbose HF_TOKEN=*** db/x AWS_SECRET_ACCESS_KEY=***"),
        ("FOO=HF_TOKEN=abc== --token  'a b' c", "FOO=HF_TOKEN=*** --token  *** c"),
        ("AWS_SECRET_ACCESS_KEY=abc123 HF_TOKEN=x WANDB_API_KEY=y DB_PASSWORD=z", "AWS_SECRET_ACCESS_KEY=*** HF_TOKEN=*** WANDB_API_KEY=*** DB_PASSWORD=***"),
        ("postgresql://user:pass@db:5432/x", "postgresql://user:***@db:5432/x"),
        ("--secret-key 'two words' --lr 0.1", "--secret-key *** --lr 0.1"),
        ("log: using token hf_abcdefghijklmnopqrstuvwx now", "log: using token hf_*** now"),
        ("ghp_abcdefghijklmnopqrstuvwx sk-ant-api03-abcdefghijklmnopqrst", "ghp_*** sk-ant-***"),
        ("id AKIAABCDEFGHIJKLMNOP", "id ***"),
        ("https://hooks.slack.com/services/T0/B0/XYZ", "https://hooks.slack.com/***"),
        # Not secrets: left alone.
        ("--max-seq-len 8192 --max-tokens 512 --tokenizer gpt2 --pad-token-id 0", None),
        ("MAX_TOKENS=5 --author me --key-file /k --password-file /p -p 22", None),
        ("ssh://root@gpu-box/x --password", None),
        ("--password -x", None),  # the next word is a flag, not the value
        ("", None),
    ],
)  # fmt: skip
def test_redact(text: str, expected: str | None) -> None:
    assert redact(text) == (text if expected is None else expected)
    assert redact(redact(text)) == redact(text)  # idempotent: readings may be rebuilt
    with _text.redaction_shared():  # a batch's cache: the same answer, twice
        assert redact(text) == redact(text) == (text if expected is None else expected)
    assert _text._shared.cache is None  # dropped at the block's end
    # Remembered across checks only when there was nothing to redact: no secret is kept.
    if expected is not None:
        assert text not in _text._clean


def test_the_clean_text_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_text, "_clean", {})
    monkeypatch.setattr(_text, "_CLEAN_MOST", 4)
    for k in range(10):
        assert redact(f"--tag job-{k}") == f"--tag job-{k}"
        assert len(_text._clean) <= 4
    assert redact("x-" * 5000) == "x-" * 5000 and "x-" * 5000 not in _text._clean  # too long to keep
    assert redact("--hf-token hf_abcdefghijklmnopqrstuvwx") == "--hf-token ***"
    assert not any("hf_" in text for text in _text._clean)


def test_redact_skips_only_text_no_pattern_can_match() -> None:
    """The fast path (no ``- = _ :``, no ``AKIA``/``ASIA``) never skips a secret: over random
    text of the characters the patterns are made of, the full redaction leaves it as is."""
    import random

    rng = random.Random(12)
    alphabet = "ahfgpskxoAKISZ0123456789 '\"/@.\t" + "-=_:"
    skipped = 0
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        if _text._inert_to_redaction(text):
            skipped += 1
            assert _text._redact(text) == text
        assert redact(text) == _text._redact(text)
    for text in (
        "hf_abcdefghijklmnopqrstuvwx",
        "id AKIAABCDEFGHIJKLMNOP",
        "x ASIAABCDEFGHIJKLMNOP",
        "a://u:p@h",
    ):
        assert not _text._inert_to_redaction(text)
    assert skipped > 1000


@pytest.mark.parametrize(
    "text",
    [
        "=a" * 131072,
        "--" + "a" * 262144,
        '--x="' * 52428,
        "a://" + ":" * 262144,
        "-a " * 87381,
        "x" * 262144 + "@",
    ],
    ids=["assignments", "long-flag", "open-quotes", "colons", "flags", "no-at"],
)
def test_redact_and_inert_are_linear(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    inert(text)
    assert time.perf_counter() - started < 2.0  # quadratic would take minutes at 256 KiB


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text [/x]", "plain text [/x]"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b]8;;http://evil\x1b\\click", "\\x1b]8;;http://evil\\x1b\\click"),
        ("a\r\nb\tc\x07\x00\x7f\x85", "a\\r\\nb c\\x07\\x00\\x7f\\x85"),
        ("rtl \u202egnp.exe\u2028", "rtl \\u202egnp.exe\\u2028"),
        ("lone \udcff surrogate", "lone \\udcff surrogate"),
        ("\ufffd ünïcode 😀", "\ufffd ünïcode 😀"),
    ],
)
def test_inert(text: str, expected: str) -> None:
    out = inert(text)
    assert out == expected
    out.encode("utf-8")  # never a lone surrogate: printable, JSON-able, sendable
    assert out.isprintable()


def _unescaped_markdown(md: str) -> list[str]:
    """Markdown characters left live: what remains once every backslash escape is removed."""
    return re.findall(r"[\[\]()<>|*_`~!#&]", re.sub(r"\\.", "", md))


def test_media_escapers() -> None:
    s = slack_code(HOSTILE)
    assert "<" not in s and ">" not in s and "`" not in s and "\x1b" not in s
    assert "&lt;!channel&gt;" in s and "&lt;http://evil|click&gt;" in s
    md = markdown_escape(HOSTILE)
    assert not _unescaped_markdown(md), md
    assert "\\[click\\]\\(http://evil\\)" in md and "\\<img src=x\\>" in md and "\\| x \\|" in md


def test_readings_and_verdicts_redact_their_text() -> None:
    r = Reading(
        "process",
        Says.WORKING,
        "pid 1 --password=hunter2",
        {"processes": [{"cmdline": "x --hf-token hf_abcdefghijklmnopqrstuvwx"}], "n": 3, "t": ("u:pw@",)},
    )
    v = Verdict("s", State.RUNNING, ("seen --password hunter2",), {"process": r}, None, "h")
    text = json.dumps(v.to_json())
    assert "hunter2" not in text and "hf_abcdefghij" not in text
    assert "--password=***" in text and "--hf-token ***" in text and r.evidence["n"] == 3


# --------------------------------------------------------------------------- the real CLI


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    # Wide enough that the table never wraps the text being looked for.
    env = {**os.environ, "COLUMNS": "400", "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "sensors", *args], capture_output=True, encoding="utf-8", timeout=120,
        cwd=ROOT, env=env,
    )  # fmt: skip


def _hostile_stage(tmp_path: Path, settle: int) -> Path:
    """A finished job: outputs written, a log full of hostile lines, a hostile completion line."""
    out = tmp_path / "out"
    out.mkdir()
    script = (
        "import os, sys\n"
        "out, log = sys.argv[1], sys.argv[2]\n"
        "open(os.path.join(out, 'a.pt'), 'wb').close()\n"
        "with open(log, 'wb') as f:\n"
        "    f.write(('step 1 ' + os.environ['HOSTILE'] + '\\n').encode())\n"
        "    f.write(b'\\xff\\xfe invalid utf-8 \\xc3\\n')\n"
        "    f.write(('50%\\rExtraction complete ' + os.environ['HOSTILE'] + '\\n').encode())\n"
    )
    log = tmp_path / "job.log"
    subprocess.run(
        [sys.executable, "-c", script, str(out), str(log)], check=True, env={**os.environ, "HOSTILE": HOSTILE}
    )
    stage = {
        "stage": "hostile",
        "host": "local",
        "log": {"path": str(log), "complete": "^Extraction complete", "error": "Traceback"},
        "outputs": {"files": str(out), "pattern": "*.pt", "expected": 1},
        "policy": {"interval": "200ms", "settle": settle, "timeout": "1m"},
    }
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(stage))
    return path


def _assert_inert(stdout: str) -> None:
    assert "\x1b" not in stdout and "\x07" not in stdout  # no escape reaches the terminal
    # The job's text is there, literally, markup and all.
    assert "Extraction complete [/data/out] [bold red]x[/] red" in stdout
    assert "\\x1b]8;;http://evil\\x1b\\click" in stdout  # the hyperlink, shown not followed
    assert "<!channel> <http://evil|click> %s %(x)s {0} *b* ~s~ `c` | x | y |" in stdout


@pytest.mark.parametrize("command", ["status", "wait"])
def test_cli_shows_hostile_job_text_inert_and_a_complete_stage_exits_0(tmp_path: Path, command: str) -> None:
    stage = _hostile_stage(tmp_path, settle=1 if command == "status" else 2)
    # The job finished before the check: --since makes its completion line this run's.
    human = _cli(command, str(stage), "--since", "10m")
    assert human.returncode == 0, human.stdout + human.stderr
    assert "COMPLETE" in human.stdout and "Traceback" not in human.stderr
    _assert_inert(human.stdout)
    as_json = _cli(command, str(stage), "--json", "--since", "10m")
    assert as_json.returncode == 0, as_json.stderr
    final = json.loads(as_json.stdout.splitlines()[-1])
    assert final["verdict"] == "complete"
    assert final["signals"]["log"]["evidence"]["last_line"] == "Extraction complete " + HOSTILE
    assert "\x1b" not in as_json.stdout  # JSON escapes it: \u001b


def test_secrets_on_a_real_command_line_never_reach_the_output(tmp_path: Path) -> None:
    tag = f"xc-secret-{uuid.uuid4().hex[:8]}"
    argv = [
        sys.executable, "-c", "import time; time.sleep(60)", tag,
        "--hf-token", "hf_abcdefghijklmnopqrstuvwx", "--password=hunter2",
        "postgresql://u:pw@db/x", "AWS_SECRET_ACCESS_KEY=abc123", "[/data/out]\x1b[31m\r<!channel>",
    ]  # fmt: skip
    job = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        stage = tmp_path / "s.yaml"
        stage.write_text(
            yaml.safe_dump({"stage": "secret", "host": "local", "process": {"match": f"{tag} "},
                            "policy": {"interval": "200ms"}})
        )  # fmt: skip
        out = _cli("status", str(stage), "--json")
        data = json.loads(out.stdout)
        assert data["verdict"] == "running", out.stdout + out.stderr
        cmdline = data["signals"]["process"]["evidence"]["processes"][0]["cmdline"]
        assert "--hf-token ***" in cmdline and "--password=***" in cmdline
        assert "postgresql://u:***@db/x" in cmdline and "AWS_SECRET_ACCESS_KEY=***" in cmdline
        assert "[/data/out]\x1b[31m\r<!channel>" in cmdline  # data, kept as data in JSON
        human = _cli("status", str(stage))
        assert human.returncode == 1 and "RUNNING" in human.stdout, human.stderr
        for text in (out.stdout, out.stderr, human.stdout, human.stderr):
            for secret in SECRETS:
                assert secret not in text
    finally:
        job.kill()
        job.wait(5)


# --------------------------------------------------------------------------- Prefect markdown


def test_prefect_markdown_and_rows_are_inert() -> None:
    pytest.importorskip("prefect")
    from sensors.prefect import evidence_rows, failure_message, summary_markdown

    log = Reading("log", Says.DONE, "completion line: " + HOSTILE + "\nsecond", {"last_line": HOSTILE})
    v = Verdict("s", State.COMPLETE, ("every signal says done", log.detail), {"log": log}, time.time(), "h")
    md = summary_markdown(v, checks=2)
    assert "\x1b" not in md
    reasons = md.split("## Reasons\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(reasons) == 2 and all(not _unescaped_markdown(r.removeprefix("- ")) for r in reasons), reasons
    (row,) = [line for line in md.splitlines() if line.startswith("| log |")]
    cells = re.split(r"(?<!\\)\|", row)
    assert len(cells) == 5, cells  # signal, says, facts: no injected cell
    assert not _unescaped_markdown(cells[3]), cells
    assert "\\[click\\]\\(http://evil\\)" in md and "completion line: \\[/data/out\\]" in md
    for row in evidence_rows(v):
        assert all(cell.isprintable() for cell in row.values())
    assert all(line.isprintable() for line in failure_message("stage s: failed", v).splitlines())
