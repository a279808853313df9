"""SSHHost against a real OpenSSH server on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sensors._config import SSHSpec
from sensors._errors import ConfigError, ConnectError, HostKeyError, ProbeError
from sensors._hosts import Host
from sensors._hosts.ssh import SSHHost, close_all, get_host
from tests.sshd import (
    SSHD,
    TCSH_USER,
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
