"""Secrets never leave crosscheck: one redaction (``sensors._base.text.redact``) for every output.

- the pure table: what :func:`redact` must hide and what it must keep, one row per case;
- a launched job whose command carries an ``--hf-token``, ``PGPASSWORD=``, an
  ``Authorization: Bearer`` header and a Prefect ``pnu_`` key: none of them in the task's
  return value, its artifact, ``status --json``, ``serve --json``, ``history`` or the store
  file's bytes;
- ``--state``: a mistyped scheme or a port that is not a number is one line and exit 2, the
  password masked; a password from ``$PGPASSWORD`` or a password file, none in the URL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from sensors._base import text as _text
from sensors._base.text import redact, redact_argv, redact_command, redact_deep

CROSSCHECK = str(Path(sys.executable).with_name("crosscheck"))

HF = "hf_abcdefghijklmnopqrstuvwxyz0123"
PG = "pgSecret0451"
BEARER = "eyJhbGciOiJIUzI1NiJ9abcdef0123"
PNU = "pnu_ZYXWVUTSRQPONMLKJIHGFEDCBA98765432"
DBPW = "dbPass7781"
SECRETS = (HF, PG, BEARER, PNU, DBPW, HF[3:], PNU[4:])


# --------------------------------------------------------------------------- the table

HIDE = [
    # flag style
    ("--hf-token hf_x", "--hf-token ***"),
    ("--hf-token=abc", "--hf-token=***"),
    ("--db-password hunter2", "--db-password ***"),
    ("--db-pass hunter2", "--db-pass ***"),
    ("--pass hunter2", "--pass ***"),
    ("--api-key k1", "--api-key ***"),
    ("--apiKey=k1", "--apiKey=***"),
    ("--client-secret s", "--client-secret ***"),
    ("--aws-secret-access-key s", "--aws-secret-access-key ***"),
    ("--private-key-passphrase p", "--private-key-passphrase ***"),
    ("--credentials c", "--credentials ***"),
    ("--auth-token t", "--auth-token ***"),
    ("--license-key L", "--license-key ***"),
    ("--pwd p", "--pwd ***"),
    # env style
    ("PGPASSWORD=pw psql", "PGPASSWORD=*** psql"),
    ("MYSQL_PWD=pw", "MYSQL_PWD=***"),
    ("HF_TOKEN=abc", "HF_TOKEN=***"),
    ("HFTOKEN=abc", "HFTOKEN=***"),
    ("GITHUB_TOKEN=abc", "GITHUB_TOKEN=***"),
    ("AWS_SECRET_ACCESS_KEY=abc", "AWS_SECRET_ACCESS_KEY=***"),
    ("PREFECT_API_KEY=abc", "PREFECT_API_KEY=***"),
    ("WANDB_API_KEY=abc", "WANDB_API_KEY=***"),
    ("OPENAI_APIKEY=abc", "OPENAI_APIKEY=***"),
    ("DB_PASS=abc", "DB_PASS=***"),
    ("CLIENTSECRET=abc", "CLIENTSECRET=***"),
    ("env PGPASSWORD=pw python t.py", "env PGPASSWORD=*** python t.py"),
    # JSON / YAML / Python-dict style
    ('{"password": "x", "user": "u"}', '{"password": "***", "user": "u"}'),
    ('{"password":"x"}', '{"password":"***"}'),
    ("{'api_key': 'x'}", "{'api_key': '***'}"),
    ("password: hunter2", "password: ***"),
    ("HF_TOKEN: abc", "HF_TOKEN: ***"),
    ("{token: abc, n: 1}", "{token: ***, n: 1}"),
    # URL credentials
    ("postgresql://u:pw@db:5432/x", "postgresql://u:***@db:5432/x"),
    ("postgresql://u:p@ss@db/x", "postgresql://u:***@db/x"),
    ("redis://:pw@cache:6379", "redis://:***@cache:6379"),
    ("https://user:tok@git.example/x", "https://user:***@git.example/x"),
    # Authorization headers and bearer tokens
    ("Authorization: Bearer abcdefgh123", "Authorization: Bearer ***"),
    ("-H 'Authorization: Bearer abcdefgh123'", "-H 'Authorization: Bearer ***'"),
    ("authorization=Basic dXNlcjpwYXNz", "authorization=Basic ***"),
    ('"Authorization": "token abcdefgh123"', '"Authorization": "token ***"'),
    ("Bearer abcdefgh123", "Bearer ***"),
    ("sent bearer abcdefgh.123-x", "sent bearer ***"),
    # known key prefixes, anywhere
    ("login hf_abcdefghijklmnopqrstuvwx", "login hf_***"),
    ("key pnu_abcdefghijklmnopqrstuvwxyz0123456789", "key pnu_***"),
    ("ghp_abcdefghijklmnopqrstuvwx", "ghp_***"),
    ("gho_abcdefghijklmnopqrstuvwx", "gho_***"),
    ("github_pat_11ABCDEFG0abcdefghijklmn", "github_pat_***"),
    ("glpat-abcdefghijklmnopqrst", "glpat-***"),
    ("xoxb-123456789012-abcdefghij", "xoxb-***"),
    ("xoxp-123456789012-abcdefghij", "xoxp-***"),
    ("sk-abcdefghijklmnopqrstuvwx", "sk-***"),
    ("sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-***"),
    ("sk-ant-api03-abcdefghijklmnopqrst", "sk-ant-***"),
    ("sk_live_abcdefghijklmnopqrstuv", "sk_live_***"),
    ("npm_abcdefghijklmnopqrstuvwxyz", "npm_***"),
    ("AIzaSyabcdefghijklmnopqrstuvwxyz012345", "AIza***"),
    ("id AKIAABCDEFGHIJKLMNOP", "id ***"),
    ("https://hooks.slack.com/services/T0/B0/XYZ", "https://hooks.slack.com/***"),
    # INI / TOML / .env with spaces around the separator
    ("password = hunter2", "password = ***"),
    ('hf_token = "abc123"', 'hf_token = "***"'),
    ("DB_PASSWORD =hunter2", "DB_PASSWORD =***"),
    ("aws_secret_access_key = wJalr/K7MDENG", "aws_secret_access_key = ***"),
    ("secret : s3", "secret : ***"),
    ("--password = hunter2", "--password = ***"),
    ("token = 1234567", "token = ***"),  # seven digits: more than a vocabulary id
    ("token: abc512", "token: ***"),
    # user:password as a flag's value; a quoted one whole
    ("curl -u admin:pw https://x", "curl -u admin:*** https://x"),
    ("curl --user admin:pw https://x", "curl --user admin:*** https://x"),
    ("curl -U proxy:p@ss:w", "curl -U proxy:***"),
    ("curl -u 'admin:two words' x", "curl -u 'admin:***' x"),
    # quoted values: any length, escaped quotes, never closed
    ('--token="' + "a" * 300 + ' tail"', "--token=***"),
    ('{"password": "ab\\"cd tail", "n": 1}', '{"password": "***", "n": 1}'),
    ("{'api_key': 'it\\'s x'}", "{'api_key': '***'}"),
    ('--password "never closed', "--password ***"),
    ("PGPASSWORD=\"a b\"c'd e' psql", "PGPASSWORD=*** psql"),  # one shell word
    # the password of a MySQL client's -p, sshpass -p
    ("mysql -u root -phunter2 db", "mysql -u root -p*** db"),
    (
        "/usr/bin/mysqldump --single-transaction -p'pw x' db",
        "/usr/bin/mysqldump --single-transaction -p*** db",
    ),
    ("mariadb -h h -pPW", "mariadb -h h -p***"),
    ("sshpass -p hunter2 ssh host", "sshpass -p *** ssh host"),
    ("sshpass -v -phunter2 ssh host", "sshpass -v -p*** ssh host"),
    # a bare JSON Web Token
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl x", "jwt *** x"),
    ("id_token=eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIn0.", "id_token=***"),
    # a URL whose user is a token
    ("https://ghx0123456789abcdefXYZ@github.com/o/r", "https://***@github.com/o/r"),
    ("git clone https://oauth2tokenabcdef0123@gitlab.example/r", "git clone https://***@gitlab.example/r"),
    # XML elements
    ("<password>hunter2</password>", "<password>***</password>"),
    ("<db><apiKey>k 1</apiKey><host>h</host></db>", "<db><apiKey>***</apiKey><host>h</host></db>"),
    # Rails
    ("secret_key_base=abc123", "secret_key_base=***"),
    ("SECRET_KEY_BASE = abc123", "SECRET_KEY_BASE = ***"),
]

KEEP = [
    "--tokenizer /shared/kimi",
    "--tokenizer-path /shared/kimi",
    "--max-tokens 512",
    "--max-new-tokens 128",
    "--pad-token-id 0",
    "--eos-token </s>",
    "--bos-token <s>",
    "--max-token 512",
    "--keys-file /etc/keys",
    "--keys 3",
    "--key-file /k",
    "--sort-key name",
    "--primary-key id",
    "--cache-key abc",
    "sample_key_order=3",
    "--password-file /run/pw",
    "--token-file /run/t",
    "--two-pass yes",
    "--bypass x",
    "PWD=/home/u OLDPWD=/tmp",
    "MAX_TOKENS=5 NUM_TOKENS=7",
    "--author me",
    "--oauth-provider github",
    "tokens: 512",
    "time: 12:30:45 step: 5",
    "ssh://root@gpu-box:22/x",
    "http://localhost:8080/x",
    "the bearer of bad news",
    "--password -x",  # the next word is a flag, not the value
    "--password",
    "hf_short",  # under 16 characters: not a token's shape
    # INI / config dumps: a name must END in a secret word (``key`` only with a qualifier)
    "tokens = 4096",
    "max_new_tokens = 256",
    "num_tokens: 8192",
    "token: 512",  # a count or a vocabulary id, not a credential
    "eos token = 2",
    "token_id = 50256",
    "key = value",
    "sort_key = name",
    "password_file = /run/pw",
    "tokenizer = gpt2",
    "PWD = /home/u",
    "a == b and password == other",  # a comparison, not an assignment
    "x <= 3",
    # -u, -p and @ in ordinary commands
    "python -u train.py -p 8080",
    "docker run -u 1000:1000 img",
    "pip install --user torch",
    "ssh -p 2222 host",
    "mysql -p db",  # -p alone prompts; the next word is the database
    "mysql --port 3306 db",
    "mkdir -p /out && python t.py -pfoo",  # -p glued, but no mysql
    "git@github.com:o/r.git ssh://git@gitlab.example/r https://user@host.example/x",
    "eyJhbGciOiJIUzI1NiJ9 alone",  # one part: not a JWT
    "<token>hello world",  # an element that never closes: prose
    "use <password> here, not </pass>",
    "",
]


@pytest.mark.parametrize(("text", "expected"), HIDE, ids=[t for t, _ in HIDE])
def test_redact_hides(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert redact(expected) == expected  # idempotent: a redacted document redacts as itself
    assert text not in _text._clean  # what held a secret is never remembered


@pytest.mark.parametrize("text", KEEP)
def test_redact_keeps(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["t.py", "--db-password", "two words"], ["t.py", "--db-password", "***"]),
        (["PGPASSWORD=two words", "psql"], ["PGPASSWORD=***", "psql"]),
        (["--hf-token=a b"], ["--hf-token=***"]),
        (["curl", "-H", "Bearer", "tok with space"], ["curl", "-H", "Bearer", "***"]),
        (["--password", "--verbose"], ["--password", "--verbose"]),
        (["--tokenizer", "/shared/kimi", "--keys", "3"], ["--tokenizer", "/shared/kimi", "--keys", "3"]),
        (["x", "--api-key", HF], ["x", "--api-key", "***"]),
        (["echo", HF], ["echo", "hf_***"]),
        (["curl", "-u", "admin:two words", "x"], ["curl", "-u", "admin:***", "x"]),
        (["docker", "run", "-u", "1000:1000"], ["docker", "run", "-u", "1000:1000"]),
        (["python", "-u", "t.py", "-p", "8080"], ["python", "-u", "t.py", "-p", "8080"]),
        (["/usr/bin/mysql", "-uroot", "-ptwo words", "db"], ["/usr/bin/mysql", "-uroot", "-p***", "db"]),
        (["mysql", "-p", "db"], ["mysql", "-p", "db"]),
        (["sshpass", "-p", "two words", "ssh", "h"], ["sshpass", "-p", "***", "ssh", "h"]),
        (["sshpass", "-pab", "ssh", "h", "t.py", "-pX"], ["sshpass", "-p***", "ssh", "h", "t.py", "-pX"]),
        (["mkdir", "-pv", "/x"], ["mkdir", "-pv", "/x"]),
    ],
)
def test_redact_argv_hides_a_value_whole(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == expected


def test_redact_command_and_redact_deep() -> None:
    line = redact_command(["curl", "-H", "Authorization:", "Bearer", BEARER, "--max-tokens", "5"])
    assert line == "curl -H Authorization: Bearer *** --max-tokens 5"
    doc = {"a": [f"--hf-token {HF}", 1, None, {"b": (f"PGPASSWORD={PG}",)}], "n": 2.5}
    assert redact_deep(doc) == {"a": ["--hf-token ***", 1, None, {"b": ("PGPASSWORD=***",)}], "n": 2.5}


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: " * 20000,
        "Bearer " * 40000,
        '"password": ' * 20000,
        "a: " * 80000,
        "PGPASSWORD" * 25000,
        "a = " * 65536,
        "password = " * 24000,
        '--token="' * 29000,
        '"password": "\\' * 18000,
        "--token=a'b\"" * 26000,
        "-u a:" * 52000,
        "mysql " * 43000 + "-p",  # each command scans its next 32 words, no further
        "mysql -u x " * 24000 + "-p",
        "sshpass -v " * 24000 + "-p",
        "<password>" * 26000,
        "<password>x" * 24000 + "</password>",
        "eyJ" * 87000,
        "eyJaaaa." * 32000,
        "https://" * 32000,
        "a://" + "x" * 262144,
    ],
    ids=[
        "headers",
        "bearers",
        "json-keys",
        "yaml-keys",
        "one-piece-names",
        "ini-names",
        "ini-secrets",
        "open-quotes",
        "escapes",
        "shell-word-pieces",
        "user-flags",
        "mysql-words",
        "mysql-options",
        "sshpass-options",
        "xml-opens",
        "xml-unclosed",
        "jwt-heads",
        "jwt-parts",
        "schemes",
        "long-user",
    ],
)
def test_the_new_patterns_are_linear(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 2.0


# --------------------------------------------------------------------------- --state


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(CROSSCHECK_STATE=str(tmp_path / "state.db"), NO_COLOR="1", **extra)
    return env


def _idle_stage(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"stage": name, "host": "local", "process": {"match": f"--tag {name}( |$)"}})
    )
    return path


@pytest.mark.parametrize(
    ("state", "says"),
    [
        (f"postgresq://u:{DBPW}@db.example/x", "unknown store location (scheme 'postgresq'"),
        (
            f"postgresql+asyncpg://u:{DBPW}@db.example/x",
            "unknown store location (scheme 'postgresql+asyncpg'",
        ),
        (f"mysql://u:{DBPW}@db/x", "unknown store location (scheme 'mysql'"),
        (f"postgres://u:{DBPW}@127.0.0.1:abc/x", "not a PostgreSQL URL"),
        (f"postgresql://u:{DBPW}@127.0.0.1:5x2/x", "not a PostgreSQL URL"),
        (f"postgresq://u:pa/ss{DBPW}@db/x", "unknown store location (scheme 'postgresq'"),
    ],
)
def test_a_bad_state_location_is_one_line_exit_2_with_the_password_masked(
    tmp_path: Path, state: str, says: str
) -> None:
    stage = _idle_stage(tmp_path, "badstate")
    for args in (["status", str(stage)], ["history", "badstate"]):
        out = subprocess.run(
            [CROSSCHECK, *args, "--state", state],
            capture_output=True,
            text=True,
            env=_env(tmp_path),
            timeout=60,
        )
        both = out.stdout + out.stderr
        assert out.returncode == 2, both
        assert DBPW not in both and "Traceback" not in both
        assert says in out.stderr and ":***@" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_postgresql_password_comes_from_pgpassword_or_a_passfile_not_the_url(tmp_path: Path) -> None:
    """A cluster that asks for a password (scram-sha-256; the shared fixture's trusts): the
    store connects with the password from $PGPASSWORD or $PGPASSFILE, none in the URL, and is
    refused without one, so the password is what let it in."""
    from tests.postgres import Postgres, why_unavailable

    if (reason := why_unavailable()) is not None:
        pytest.skip(reason)
    password = "pg-" + uuid.uuid4().hex
    server = Postgres(password=password)
    try:
        server.start()
        url = server.create_database().replace("postgresql+psycopg://", "postgresql://")
        assert ":" not in url.split("://", 1)[1].split("@", 1)[0]  # no password in it
        stage = _idle_stage(tmp_path, "pgpass")
        passfile = tmp_path / "pgpass"
        passfile.write_text(f"127.0.0.1:{server.port}:*:crosscheck:{password}\n")
        passfile.chmod(0o600)
        for extra in ({"PGPASSWORD": password}, {"PGPASSFILE": str(passfile)}):
            out = subprocess.run(
                [CROSSCHECK, "status", str(stage), "--json", "--state", url],
                capture_output=True,
                text=True,
                env=_env(tmp_path, **extra),
                timeout=120,
            )
            assert json.loads(out.stdout.splitlines()[0])["stage"] == "pgpass", out.stderr
            assert "StoreWarning" not in out.stderr and "in this process only" not in out.stderr, out.stderr
            shown = subprocess.run(
                [CROSSCHECK, "history", "pgpass", "--json", "--state", url],
                capture_output=True,
                text=True,
                env=_env(tmp_path, **extra),
                timeout=120,
            )
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout.splitlines()[0])["stage"] == "pgpass"
        refused = subprocess.run(
            [CROSSCHECK, "history", "pgpass", "--state", url],
            capture_output=True,
            text=True,
            env=_env(tmp_path, PGPASSFILE=str(tmp_path / "none")),
            timeout=120,
        )
        assert refused.returncode == 2 and "password" in refused.stderr.lower(), refused.stderr
        assert password not in refused.stdout + refused.stderr
    finally:
        server.stop()


# --------------------------------------------------------------------------- a launched job


@pytest.mark.prefect
@pytest.mark.usefixtures("prefect_harness")
def test_a_launched_commands_secrets_reach_no_output(tmp_path: Path) -> None:
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from sensors._config.stage import stage_from_dict
    from sensors.flows import launch_stage

    name = f"secret-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "job.log"
    db = tmp_path / "state.db"
    command = [
        sys.executable,
        "-c",
        "import time; print('working', flush=True); time.sleep(120)",
        "--tag",
        name,
        "--hf-token",
        HF,
        f"PGPASSWORD={PG}",
        "--db-password",
        DBPW,
        "-H",
        f"Authorization: Bearer {BEARER}",
        "--prefect",
        PNU,
    ]
    spec = {
        "stage": name,
        "host": "local",
        "process": {"match": f"--tag {name}( |$)"},
        "log": {"path": str(log), "complete": "^all done"},
        "launch": {"command": command, "log": str(log)},
        "policy": {"interval": "200ms", "settle": 1},
    }
    stage_file = tmp_path / f"{name}.yaml"
    stage_file.write_text(yaml.safe_dump(spec))

    @flow
    def start() -> dict:
        return launch_stage(stage_from_dict(spec), state=str(db))

    record = start()
    try:
        assert record["pid"] > 0
        seen: dict[str, str] = {"return value": json.dumps(record)}
        assert "--hf-token ***" in record["command"] and "PGPASSWORD=***" in record["command"]
        with get_client(sync_client=True) as client:
            artifacts = client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"crosscheck-{name}-%"))
            )
        assert artifacts, "the launch artifact"
        seen["artifacts"] = json.dumps([a.data for a in artifacts], default=str)
        env = _env(tmp_path)
        status = subprocess.run(
            [CROSSCHECK, "status", str(stage_file), "--json", "--state", str(db)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        doc = json.loads(status.stdout.splitlines()[0])
        assert "--hf-token ***" in json.dumps(doc["signals"]["process"]["evidence"]), doc  # the job was read
        seen["status --json"] = status.stdout + status.stderr
        serve_dir = tmp_path / "serve"
        serve_dir.mkdir()
        (serve_dir / stage_file.name).write_text(stage_file.read_text())
        serve = subprocess.Popen(
            [CROSSCHECK, "serve", str(serve_dir), "--json", "--state", str(tmp_path / "serve.db")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert serve.stdout is not None
            first = serve.stdout.readline()
            assert json.loads(first)["stage"] == name
        finally:
            serve.send_signal(signal.SIGTERM)
            rest, err = serve.communicate(timeout=60)
        seen["serve --json"] = first + rest + err
        history = subprocess.run(
            [CROSSCHECK, "history", name, "--json", "--state", str(db)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert history.returncode == 0, history.stderr
        seen["history"] = history.stdout + history.stderr
        # The store file's bytes, its write-ahead log included.
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("*.db*"))
        assert name.encode() in raw
        seen["store"] = raw.decode("latin-1")
        for where, text in seen.items():
            for secret in SECRETS:
                assert secret not in text, f"{secret!r} in {where}"
    finally:
        os.killpg(record["pid"], signal.SIGKILL)


def test_a_hand_off_request_and_a_stored_verdict_keep_no_secret(tmp_path: Path) -> None:
    """The hand-off request (written to the store) carries the stage and the run record;
    the store's rows a person is shown pass through the store's own redaction."""
    from sensors._config.stage import stage_from_dict
    from sensors._run.run import Run, launch_record
    from sensors._store import open_store
    from sensors._store.base import StageKey
    from sensors._watch.handoff import request_for

    command = ["python", "t.py", "--hf-token", HF, f"PGPASSWORD={PG}", "--tokenizer", "/shared/kimi"]
    stage = stage_from_dict(
        {
            "stage": "handed",
            "host": "local",
            "process": {"match": "t.py"},
            "launch": {"command": command, "log": str(tmp_path / "x.log")},
        }
    )
    run = launch_record("handed", "local", Run(source="launch", pid=1), log=None, command=command, cwd=None)
    request = request_for(stage, reference=None, since=None, run=run)
    assert request["stage"]["launch"]["command"] == [
        "python",
        "t.py",
        "--hf-token",
        "***",
        "PGPASSWORD=***",
        "--tokenizer",
        "/shared/kimi",
    ]
    assert stage_from_dict(request["stage"]).stage == "handed"  # the watcher still reads it
    text = json.dumps(request)
    assert HF not in text and PG not in text and "/shared/kimi" in text
    db = tmp_path / "rows.db"
    with open_store(str(db)) as store:
        verdict = {
            "stage": "handed",
            "verdict": "working",
            "reasons": [f"saw --hf-token {HF} PGPASSWORD={PG}"],
        }
        store.save(
            StageKey("handed", "local"), memory="{}", fingerprint={}, verdict=verdict, version=1, changed=True
        )
        shown = [entry.verdict for entry in store.history("handed")]
    assert shown and shown[-1]["reasons"] == ["saw --hf-token *** PGPASSWORD=***"]
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("rows.db*"))
    assert HF.encode() not in raw and PG.encode() not in raw
