"""sensors.blocks: stages and SSH hosts as Prefect blocks, the SSH host's key from memory.

Against the real sshd of tests/sshd.py, with HOME pointing at an empty directory: the key and
known_hosts the connection uses exist only in the block. Saving and loading blocks on a real
Prefect API, and a gate from block references only: tests/test_blocks_server.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sensors._base.errors import ConfigError, ConnectError, HostKeyError
from sensors._hosts.ssh import SSHHost
from sensors.blocks import CrosscheckNotifications, CrosscheckSSHHost, CrosscheckStage, is_block_ref
from sensors.prefect import stage_label
from tests.sshd import SSHD, sshd_server, write_keypair

__all__ = ["sshd_server"]  # fixture, used by name

pytestmark = pytest.mark.timeout(60)

DEFINITION: dict[str, Any] = {"stage": "extract", "process": {"pid": 1}}


@pytest.fixture(autouse=True)
def _empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no ~/.ssh: nothing on disk to fall back on


def _host_block(server: SSHD, **overrides: Any) -> CrosscheckSSHHost:
    fields: dict[str, Any] = {
        "hostname": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "private_key": server.key.read_text(),
        "known_hosts": server.known_hosts_line(),
        "connect_timeout": 5.0,
        **overrides,
    }
    return CrosscheckSSHHost(**fields)


def _ssh(block: CrosscheckSSHHost) -> SSHHost:
    stage = CrosscheckStage(definition=DEFINITION, ssh_host=block).to_stage()
    assert stage.host != "local"
    return SSHHost(stage.host, sleep=lambda _: None)


def test_a_stage_block_is_a_stage_file_s_schema() -> None:
    stage = CrosscheckStage(
        definition={**DEFINITION, "host": "local"},
        notifications=CrosscheckNotifications(slack_webhook="env:SLACK_URL", on=["failed"]),
    ).to_stage()
    assert stage.stage == "extract" and stage.host == "local"
    assert stage.notify is not None and stage.notify.on == ("failed",)
    with pytest.raises(ValueError, match="no signal configured"):
        CrosscheckStage(definition={"stage": "x", "host": "local"})
    with pytest.raises(ValueError, match="env:NAME or block:NAME"):
        CrosscheckNotifications(slack_webhook="https://hooks.slack.com/x").notify_section()
        CrosscheckStage(
            definition={**DEFINITION, "host": "local"},
            notifications=CrosscheckNotifications(slack_webhook="https://hooks.slack.com/x"),
        )


def test_block_references() -> None:
    assert is_block_ref("block:extract") and not is_block_ref("/etc/crosscheck/extract.yaml")
    assert stage_label("block:extract") == "extract"


def test_key_material_is_refused_in_a_stage_file(tmp_path: Path) -> None:
    from sensors import load_stage

    path = tmp_path / "s.yaml"
    path.write_text(
        "stage: s\nprocess: {pid: 1}\nhost: {ssh: h, material: {source: x, known_hosts: 'h ssh-ed25519 AAAA'}}\n"
    )
    # Refused (pydantic reports the union's first branch, "host: Input should be 'local'").
    with pytest.raises(ConfigError, match="host"):
        load_stage(path)


def test_the_key_and_known_hosts_come_from_the_block(sshd_server: SSHD) -> None:
    block = _host_block(sshd_server)
    with _ssh(block) as h:
        assert h.run_script(b"echo from-memory\n", timeout=10) == b"from-memory\n"
        assert "BEGIN" not in repr(h.spec) and "BEGIN" not in h.spec.model_dump_json()


def test_a_host_key_not_in_the_block_is_refused(sshd_server: SSHD, tmp_path: Path) -> None:
    other = SSHD(tmp_path / "other")  # never started: only its host key is used
    block = _host_block(sshd_server, known_hosts=sshd_server.known_hosts_line(other.host_pub))
    with pytest.raises(HostKeyError, match="known_hosts of its CrosscheckSSHHost block"), _ssh(block) as h:
        h.run_script(b"true\n", timeout=10)


def test_an_encrypted_key_with_its_passphrase(sshd_server: SSHD, tmp_path: Path) -> None:
    key = tmp_path / "id_locked"
    pub = write_keypair(key, passphrase=b"correct horse")
    (sshd_server.auth_dir / sshd_server.user).write_text(sshd_server.user_pub + pub)
    block = _host_block(sshd_server, private_key=key.read_text(), passphrase="correct horse")
    with _ssh(block) as h:
        assert h.run_script(b"echo unlocked\n", timeout=10) == b"unlocked\n"
    with (
        pytest.raises(ConnectError, match="encrypted") as info,
        _ssh(_host_block(sshd_server, private_key=key.read_text())) as h,
    ):
        h.run_script(b"true\n", timeout=10)
    assert "BEGIN" not in str(info.value)


def test_proxy_jump_from_the_block(sshd_server: SSHD) -> None:
    # The same sshd is jump host and target; the block's key and known_hosts serve both.
    block = _host_block(sshd_server, proxy_jump=f"{sshd_server.user}@127.0.0.1:{sshd_server.port}")
    with _ssh(block) as h:
        assert len(h.route.jumps) == 1
        assert h.run_script(b"echo jumped\n", timeout=10) == b"jumped\n"
