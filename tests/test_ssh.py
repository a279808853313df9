"""SSHHost against a real OpenSSH server on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sensors._base.errors import ConfigError, ConnectError, HostKeyError, ProbeError
from sensors._config.stage import SSHSpec
from sensors._hosts import Host
from sensors._hosts.ssh import SSHHost, close_all, get_host
from tests.sshd import (
    SLOW_LOGIN_S,
    SSHD,
    TCSH_USER,
    ensure_slow_login_user,
    ensure_tcsh_user,
    ssh_spec,
    sshd_private,
    sshd_server,
    write_keypair,
)

__all__ = ["ssh_spec", "sshd_private", "sshd_server"]  # fixtures, used by name

pytestmark = pytest.mark.timeout(60)


def no_sleep(_: float) -> None:
    pass


def make_host(spec: dict[str, Any], **kw: Any) -> SSHHost:
    return SSHHost(SSHSpec(**spec), sleep=no_sleep, **kw)


@pytest.fixture
def host(ssh_spec: dict[str, Any]):
    with make_host(ssh_spec) as h:
        yield h


def fingerprint(pub_line: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line (computed without paramiko)."""
    blob = base64.b64decode(pub_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# -- running scripts ------------------------------------------------------------------------


def test_is_a_host(host: SSHHost) -> None:
    assert isinstance(host, Host)
    assert host.nvml is False
    assert host.name == "127.0.0.1"


def test_run_script_returns_stdout_only(host: SSHHost) -> None:
    out = host.run_script(b"echo out; echo err >&2; printf 'a\\0b'\n", timeout=10)
    assert out == b"out\na\0b"


def test_sh_features_work_under_a_tcsh_login_shell(sshd_server: SSHD) -> None:
    user = ensure_tcsh_user(sshd_server)
    script = (
        b'f() { echo "f:$1"; }\n'
        b'f "$(echo sub)"\n'
        b'x=; echo "${x:-default}"\n'
        b"ls /nonexistent 2>/dev/null || echo redirected\n"
        b"cat <<'EOF'\nheredoc $HOME\nEOF\n"
        b'getent passwd "$(id -un)" | cut -d: -f7\n'
    )
    with make_host(sshd_server.spec(user=user)) as h:
        out = h.run_script(script, timeout=10).decode()
    assert out.splitlines() == ["f:sub", "default", "redirected", "heredoc $HOME", "/bin/tcsh"]
    assert user == TCSH_USER


def test_a_slow_login_shell_does_not_widen_the_first_probes_clock_bound(sshd_server: SSHD) -> None:
    """The kept shell is started (its login shell's rc files, seconds with ``pyenv init``)
    before the first script is sent, so ``sent_at`` is close before the host reads its clock:
    the bound on how far ahead the host's clock can be is the script's round trip, not the
    shell's start (issue 35: a watch's start placed on the host's clock by that bound landed
    after a log a job began right after ``crosscheck wait``). The host is this machine: one
    clock."""
    user = ensure_slow_login_user(sshd_server)
    with make_host(sshd_server.spec(user=user)) as h:
        began = time.time()
        host_clock = float(h.run_script(b"date +%s.%N\n", timeout=20))
        sent = h.sent_at()
        assert sent is not None
        assert sent - began >= SLOW_LOGIN_S  # the login shell's start came before the script left
        assert 0 <= host_clock - sent < 0.5, (began, sent, host_clock)
        again = float(h.run_script(b"date +%s.%N\n", timeout=20))  # the same kept shell
        assert 0 <= again - h.sent_at() < 0.5


def test_connection_is_reused(host: SSHHost) -> None:
    # The probe's grandparent is the remote shell kept for this connection (its parent, the
    # `timeout` that bounds each probe, is new every time): one PID, one connection, one shell.
    script = b"sed 's/.*) . \\([0-9]*\\).*/\\1/' /proc/$PPID/stat\n"
    parents = {host.run_script(script, timeout=10) for _ in range(5)}
    assert len(parents) == 1
    assert host.connects == 1


def test_concurrent_checks_share_one_connection(host: SSHHost) -> None:
    results: list[bytes] = []
    errors: list[BaseException] = []

    def check(i: int) -> None:
        try:
            results.append(host.run_script(f"echo {i}\n".encode(), timeout=20))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=check, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == sorted(f"{i}\n".encode() for i in range(8))
    assert host.connects == 1


def test_large_stdout_and_stderr_do_not_deadlock(host: SSHHost) -> None:
    # More than the 2 MB channel window on both streams at once.
    script = b"head -c 3000000 /dev/zero >&2; head -c 6000000 /dev/zero; echo end\n"
    out = host.run_script(script, timeout=30)
    assert len(out) == 6_000_004
    assert out.endswith(b"end\n")


def test_hanging_script_times_out_and_the_connection_survives(host: SSHHost) -> None:
    host.run_script(b"true\n", timeout=10)
    with pytest.raises(ProbeError, match="within 1s") as info:
        host.run_script(b"sleep 30\n", timeout=1)
    assert info.value.host == "127.0.0.1"
    assert host.run_script(b"echo after\n", timeout=10) == b"after\n"
    assert host.connects == 1  # the server still answered, so the connection was kept


# -- host keys --------------------------------------------------------------------------------


def assert_refusal_names_the_key(msg: str, server: SSHD) -> str:
    """A host-key refusal says so, names host:port and the offered fingerprint, and how to trust it."""
    assert "host key" in msg
    assert f"127.0.0.1:{server.port}" in msg
    assert f"ssh-ed25519 {fingerprint(server.host_pub)}" in msg
    assert f"ssh-keyscan -p {server.port} 127.0.0.1" in msg
    return msg


def test_wrong_host_key_is_refused_and_known_hosts_untouched(sshd_server: SSHD, tmp_path: Path) -> None:
    other = SSHD(tmp_path / "other")  # never started: only its host key is used
    known = tmp_path / "known_hosts"
    known.write_text(sshd_server.known_hosts_line(other.host_pub))
    before = known.read_bytes()
    with pytest.raises(HostKeyError) as info, make_host(sshd_server.spec(known_hosts=str(known))) as h:
        h.run_script(b"true\n", timeout=10)
    msg = assert_refusal_names_the_key(str(info.value), sshd_server)
    assert fingerprint(other.host_pub) in msg  # what known_hosts expected
    assert known.read_bytes() == before


def test_empty_known_hosts_is_refused_and_stays_empty(sshd_server: SSHD, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_bytes(b"")
    with pytest.raises(HostKeyError) as info, make_host(sshd_server.spec(known_hosts=str(known))) as h:
        h.run_script(b"true\n", timeout=10)
    msg = assert_refusal_names_the_key(str(info.value), sshd_server)
    assert f"ssh-keyscan -p {sshd_server.port} 127.0.0.1 >> {known}" in msg
    assert known.read_bytes() == b""


def test_missing_known_hosts_is_an_error_not_trust(sshd_server: SSHD, tmp_path: Path) -> None:
    known = tmp_path / "absent"
    with (
        pytest.raises(HostKeyError, match="does not exist"),
        make_host(sshd_server.spec(known_hosts=str(known))) as h,
    ):
        h.run_script(b"true\n", timeout=10)
    assert not known.exists()


def test_unknown_user_key_is_a_connect_error(sshd_server: SSHD, tmp_path: Path) -> None:
    other = SSHD(tmp_path / "other")
    with (
        pytest.raises(ConnectError, match="authentication"),
        make_host(sshd_server.spec(key=str(other.key))) as h,
    ):
        h.run_script(b"true\n", timeout=10)


# -- secrets ----------------------------------------------------------------------------------


def test_key_passphrase_from_the_environment(
    sshd_server: SSHD, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "id_locked"
    pub = write_keypair(key, passphrase=b"correct horse")
    (sshd_server.auth_dir / sshd_server.user).write_text(sshd_server.user_pub + pub)
    monkeypatch.setenv("CC_TEST_PASSPHRASE", "correct horse")
    spec = sshd_server.spec(key=str(key), passphrase="env:CC_TEST_PASSPHRASE")
    with make_host(spec) as h:
        assert h.run_script(b"echo unlocked\n", timeout=10) == b"unlocked\n"

    monkeypatch.setenv("CC_TEST_PASSPHRASE", "wrong-secret-value")
    with pytest.raises(ConnectError) as info, make_host(spec) as h:
        h.run_script(b"true\n", timeout=10)
    assert "wrong-secret-value" not in str(info.value)

    monkeypatch.delenv("CC_TEST_PASSPHRASE")
    with pytest.raises(ConfigError, match="CC_TEST_PASSPHRASE is not set"), make_host(spec) as h:
        h.run_script(b"true\n", timeout=10)


def test_block_secrets_go_through_the_resolver(sshd_server: SSHD, tmp_path: Path) -> None:
    key = tmp_path / "id_locked"
    pub = write_keypair(key, passphrase=b"from-a-block")
    (sshd_server.auth_dir / sshd_server.user).write_text(sshd_server.user_pub + pub)
    asked: list[str] = []

    def resolver(ref: str) -> str:
        asked.append(ref)
        return "from-a-block"

    spec = sshd_server.spec(key=str(key), passphrase="block:gpu-box-key")
    with make_host(spec, secret_resolver=resolver) as h:
        assert h.run_script(b"echo ok\n", timeout=10) == b"ok\n"
    assert asked == ["block:gpu-box-key"]


# -- failures and recovery --------------------------------------------------------------------


def test_sshd_down_then_back(sshd_private: SSHD) -> None:
    slept: list[float] = []
    h = SSHHost(SSHSpec(**sshd_private.spec()), sleep=slept.append)
    assert h.run_script(b"echo up\n", timeout=10) == b"up\n"

    sshd_private.stop()  # kills the connection too, like the host going down
    with pytest.raises(ConnectError):
        h.run_script(b"true\n", timeout=10)
    with pytest.raises(ConnectError, match="cannot connect"):
        h.run_script(b"true\n", timeout=10)
    assert slept and all(0 < s <= 2.0 for s in slept)  # tenacity backoff, bounded

    sshd_private.start()
    assert h.run_script(b"echo back\n", timeout=10) == b"back\n"
    assert h.connects == 2
    h.close()


def test_connection_dropped_mid_check_is_a_connect_error(sshd_private: SSHD) -> None:
    with make_host(sshd_private.spec()) as h:
        h.run_script(b"true\n", timeout=10)
        timer = threading.Timer(0.5, sshd_private.stop)
        timer.start()
        start = time.monotonic()
        with pytest.raises(ConnectError):
            h.run_script(b"sleep 20\n", timeout=30)
        timer.join()
        assert time.monotonic() - start < 20  # the drop was noticed, not waited out


# -- ssh config -------------------------------------------------------------------------------


def test_ssh_config_alias_is_applied(sshd_server: SSHD, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(
        "Host gpu-box\n"
        "  HostName 127.0.0.1\n"
        f"  Port {sshd_server.port}\n"
        f"  User {sshd_server.user}\n"
        f"  IdentityFile {sshd_server.key}\n"
        "  IdentitiesOnly yes\n"
    )
    spec = SSHSpec(ssh="gpu-box", config=str(cfg), known_hosts=str(sshd_server.known_hosts))
    with SSHHost(spec) as h:
        assert h.name == "gpu-box"
        assert h.run_script(b"echo via-alias\n", timeout=10) == b"via-alias\n"


def test_explicit_fields_win_over_ssh_config(sshd_server: SSHD, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host gpu-box\n  HostName 127.0.0.1\n  Port 1\n  User nobody-here\n")
    spec = SSHSpec(
        ssh="gpu-box",
        config=str(cfg),
        port=sshd_server.port,
        user=sshd_server.user,
        key=str(sshd_server.key),
        known_hosts=str(sshd_server.known_hosts),
    )
    with SSHHost(spec) as h:
        assert h.run_script(b"id -un\n", timeout=10) == f"{sshd_server.user}\n".encode()


def test_proxy_jump(sshd_server: SSHD, tmp_path: Path) -> None:
    # The same sshd serves as jump host and target: the target is reached by a direct-tcpip
    # channel opened on the jump connection.
    cfg = tmp_path / "config"
    common = (
        f"  HostName 127.0.0.1\n  Port {sshd_server.port}\n  User {sshd_server.user}\n"
        f"  IdentityFile {sshd_server.key}\n"
    )
    cfg.write_text(f"Host jump\n{common}Host inner\n{common}  ProxyJump jump\n")
    spec = SSHSpec(ssh="inner", config=str(cfg), known_hosts=str(sshd_server.known_hosts))
    with SSHHost(spec) as h:
        assert [e.alias for e in h.route.jumps] == ["jump"]
        assert h.run_script(b"echo jumped\n", timeout=10) == b"jumped\n"


def test_proxy_command_is_refused_not_ignored(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host box\n  ProxyCommand nc %h %p\n")
    with pytest.raises(ConfigError, match="ProxyCommand"):
        SSHHost(SSHSpec(ssh="box", config=str(cfg)))


def test_pool_shares_one_host_per_user_host_port(ssh_spec: dict[str, Any]) -> None:
    try:
        a = get_host(SSHSpec(**ssh_spec))
        b = get_host(SSHSpec(**{**ssh_spec, "check_timeout": 5}))
        c = get_host(SSHSpec(**{**ssh_spec, "user": "someone-else"}))
        assert a is b
        assert c is not a
    finally:
        close_all()


# -- injection --------------------------------------------------------------------------------

PAYLOADS = [
    "; touch {m}",
    "$(touch {m})",
    "`touch {m}`",
    "' ; touch {m} ; '",
    '" ; touch {m} ; "',
    "\ntouch {m}\n",
    'a\\" ; touch {m}',
    "%(touch {m})",  # tcsh/fish-style syntax too
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_spawn_argv_is_never_parsed_by_a_shell(host: SSHHost, tmp_path: Path, payload: str) -> None:
    marker = tmp_path / "pwned"
    arg = payload.format(m=marker)
    weird = tmp_path / payload.format(m="x").replace("/", "_").replace("\n", "_")
    weird.mkdir()
    log = weird / "log"
    pid = host.spawn(["/bin/echo", arg], log_path=str(log), cwd=str(weird))
    assert pid > 0
    for _ in range(200):
        if log.exists() and log.read_text().endswith("\n"):
            break
        time.sleep(0.02)
    assert log.read_text() == arg + "\n"
    assert not marker.exists()
    assert {p.name for p in tmp_path.iterdir()} == {weird.name}


def test_spawn_into_a_missing_directory_is_a_probe_error(host: SSHHost, tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match="cannot cd"):
        host.spawn(["/bin/true"], log_path=str(tmp_path / "log"), cwd=str(tmp_path / "nope"))


def test_more_concurrent_checks_than_sshd_allows_channels(host: SSHHost) -> None:
    """sshd's default MaxSessions is 10: 16 stages checked at once on one connection wait
    for a channel instead of failing (and the connection is never dropped for it)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        results = list(
            pool.map(lambda i: host.run_script(f"sleep 0.3; echo {i}\n".encode(), timeout=30), range(16))
        )
    assert results == [f"{i}\n".encode() for i in range(16)]
    assert host.connects == 1


def test_timed_out_checks_give_their_channels_back(host: SSHHost) -> None:
    """Checks stuck on the host (say a stat on a hung NFS mount) time out alone: after more
    of them than sshd has channels, the next check still runs on the same connection."""
    for _ in range(12):
        with pytest.raises(ProbeError):
            host.run_script(b"sleep 30\n", timeout=0.3)
    assert host.run_script(b"echo still\n", timeout=10) == b"still\n"
    assert host.connects == 1


# -- ssh config: Include --------------------------------------------------------------------------


def _openssh_sees(config: Path, alias: str) -> dict[str, str]:
    """What OpenSSH's own client makes of ``alias`` with ``config`` (``ssh -G``: the options
    after every Host, Match and Include is evaluated; no connection)."""
    import subprocess

    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    seen = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    return {"hostname": seen["hostname"], "port": seen["port"], "user": seen["user"]}


def _crosscheck_sees(config: Path, alias: str) -> dict[str, str]:
    from sensors._hosts.ssh_config import endpoint, load_ssh_config

    ep, _ = endpoint(load_ssh_config(str(config)), alias)
    return {"hostname": ep.hostname, "port": str(ep.port), "user": ep.user}


def _include_cases(d: Path) -> dict[str, tuple[str, list[str]]]:
    """ssh configs using Include (absolute paths: ``ssh -F`` resolves relative ones in the
    account's real ~/.ssh), each with the aliases to compare; ``{d}`` is the directory."""
    (d / "conf.d").mkdir()
    (d / "conf.d" / "10-first.conf").write_text("Host box\n  Port 2201\n")
    (d / "conf.d" / "20-second.conf").write_text("Host box\n  Port 2202\n  User second\n")
    (d / "conf.d" / "README").write_text("Host box\n  User not-a-conf-file\n")
    (d / "inner.conf").write_text("HostName inner.example\nHost other\n  Port 9\nHost *\n  Port 2222\n")
    (d / "a.conf").write_text(f"Host nested\n  HostName a.example\nInclude {d}/b.conf\n")
    (d / "b.conf").write_text(f"Host nested\n  Port 2300\n  Include {d}/c.conf\n")
    (d / "c.conf").write_text("User from-c\n")
    (d / "tail.conf").write_text("HostName tail.example\n")
    (d / "match.conf").write_text("Port 2400\nHost *\n  User matched\n")
    return {
        # globs in lexical order, the first value wins; a glob's non-matches ignored
        "glob": (f"Include {d}/conf.d/*.conf\nHost *\n  User default\n", ["box", "elsewhere"]),
        # inside a Host block: its lines belong to the block, its own Host/Match apply only
        # where the block does, and the block goes on after it
        "in-host": (f"Host box\n  Include {d}/inner.conf\n  User outer\n", ["box", "other", "zzz"]),
        # nested three deep, an Include inside an included Host block
        "nested": (f"Include {d}/a.conf\n", ["nested", "box"]),
        # after a Host block, an Include is inside it (a classic surprise)
        "after-host": (f"Host box\n  Port 2500\nInclude {d}/tail.conf\n", ["box", "other"]),
        # inside a Match block
        "in-match": (f"Match originalhost m*\n  Include {d}/match.conf\n", ["mbox", "box"]),
        # a file that does not exist is skipped, as ssh skips it
        "missing": (f"Include {d}/nope.conf {d}/conf.d/10-first.conf\n", ["box"]),
        # a quoted path, Include=value
        "spelling": (f'include="{d}/conf.d/20-second.conf"\n', ["box"]),
    }


@pytest.mark.skipif(not Path("/usr/bin/ssh").exists(), reason="needs OpenSSH's ssh client (ssh -G)")
@pytest.mark.parametrize(
    "case", ["glob", "in-host", "nested", "after-host", "in-match", "missing", "spelling"]
)
def test_ssh_config_include_reads_as_openssh_reads_it(tmp_path: Path, case: str) -> None:
    """Issue 23: Include in ~/.ssh/config was silently ignored. What crosscheck resolves is
    what ``ssh -G`` resolves, for each way an Include can stand."""
    text, aliases = _include_cases(tmp_path)[case]
    config = tmp_path / "config"
    config.write_text(text)
    for alias in aliases:
        assert _crosscheck_sees(config, alias) == _openssh_sees(config, alias), (case, alias)


def test_ssh_config_include_loop_is_one_error_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(f"Host box\n  Include {config}\n")
    with pytest.raises(ConfigError, match=r"line 2: Include nested more than 16 deep") as err:
        _crosscheck_sees(config, "box")
    assert err.value.field == "host.config"


@pytest.mark.parametrize(
    ("match", "refused"),
    [
        ('Match exec "touch {mark}"', True),  # every host reaches it
        ('Match originalhost box exec "touch {mark}"', True),
        ('Match !exec "touch {mark}"', True),
        ('Match originalhost other exec "touch {mark}"', False),  # ssh would not run it for box
    ],
)
def test_ssh_config_match_exec_is_never_run(tmp_path: Path, match: str, refused: bool) -> None:
    """A config is data: paramiko ran a ``Match exec`` command through a shell while resolving
    a route (``crosscheck validate`` included). One this host's lookup reaches is refused, as
    ProxyCommand is; one its earlier criteria rule out is passed over, as ssh passes it."""
    mark = tmp_path / "ran"
    config = tmp_path / "config"
    config.write_text(match.format(mark=mark) + "\n  User matched\nHost box\n  HostName box.example\n")
    if refused:
        with pytest.raises(ConfigError, match=r"reaches Match exec .*not run") as err:
            _crosscheck_sees(config, "box")
        assert err.value.field == "host.config"
    else:
        assert _crosscheck_sees(config, "box")["hostname"] == "box.example"
    assert not mark.exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("case", ["big", "fifo", "dev-zero", "include-dev-zero"])
def test_ssh_config_that_is_not_a_small_regular_file_is_one_error(tmp_path: Path, case: str) -> None:
    """host.config (or an Include) naming /dev/zero was read until memory ran out (a
    MemoryError traceback from validate), a FIFO waited for a writer forever, a 2 MiB file was
    read whole: each is now one ConfigError on host.config, at once. /dev/null (ssh -F's "no
    config") still reads as empty."""
    import os

    config = tmp_path / "config"
    if case == "big":
        config.write_text("Host box\n  HostName box.example\n" + "# padding\n" * 250_000)
    elif case == "fifo":
        os.mkfifo(config)
    elif case == "dev-zero":
        config = Path("/dev/zero")
    else:
        config.write_text("Host box\n  Include /dev/zero\n")
    said = "a pipe or a socket, not a file" if case == "fifo" else "larger than 1024 KiB"
    with pytest.raises(ConfigError, match=rf"cannot read ssh config .*{said}") as err:
        _crosscheck_sees(config, "box")
    assert err.value.field == "host.config"
    assert _crosscheck_sees(Path("/dev/null"), "box")["hostname"] == "box"


def test_ssh_config_include_unreadable_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "dir.conf").mkdir()  # a glob that matches a directory: it cannot be read
    config = tmp_path / "config"
    config.write_text(f"\nInclude {tmp_path}/*.conf\n")
    with pytest.raises(
        ConfigError, match=r"cannot read ssh config .*dir\.conf \(Include in .*config line 2\)"
    ):
        _crosscheck_sees(config, "box")


def test_ssh_config_include_reaches_the_real_sshd_from_the_installed_command(
    sshd_server: SSHD, tmp_path: Path
) -> None:
    """The issue's case end to end: ``inc-box`` defined only in a file that ~/.ssh/config
    includes (a relative path, under ~/.ssh), reached by the installed ``crosscheck``. Before,
    "cannot connect to inc-box:22"."""
    import json
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    (home / ".ssh" / "config.d").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Include config.d/*\n\nHost *\n  ServerAliveInterval 30\n")
    (home / ".ssh" / "config.d" / "gpu-boxes").write_text(
        "Host inc-box\n"
        "  HostName 127.0.0.1\n"
        f"  Port {sshd_server.port}\n"
        f"  User {sshd_server.user}\n"
        f"  IdentityFile {sshd_server.key}\n"
    )
    log = tmp_path / "job.log"
    log.write_text("[1/10] working\n")
    stage = tmp_path / "inc.yaml"
    stage.write_text(
        json.dumps(
            {
                "stage": "inc",
                "host": {"ssh": "inc-box", "known_hosts": str(sshd_server.known_hosts)},
                "log": {"path": str(log), "complete": "^done$"},
            }
        )
    )
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("crosscheck")),
            "status",
            str(stage),
            "--json",
            "--state",
            "none",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        timeout=60,
        check=False,
    )
    data = json.loads(out.stdout)
    assert data["signals"]["log"]["says"] == "working", (data["reasons"], out.stderr)
    assert data["signals"]["log"]["evidence"]["last_line"] == "[1/10] working"
    assert out.returncode == 1 and data["verdict"] == "running"


def test_a_probe_in_a_process_with_more_than_1024_descriptors(host: SSHHost) -> None:
    """A watcher of a fleet holds more than 1024 descriptors (a connection and a pipe per
    channel, the store, webhooks): a channel's past 1023 made select() raise ValueError, and
    every probe on every host failed. The channel's descriptor is opened after these."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"RLIMIT_NOFILE {soft}: this process cannot hold 1,100 descriptors")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        assert max(held) > 1024
        host.close()  # a new connection and channel: their descriptors past the held ones
        assert host.run_script(b"echo hello\n", timeout=10) == b"hello\n"
    finally:
        for fd in held:
            os.close(fd)
