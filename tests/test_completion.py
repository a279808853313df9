"""``crosscheck completion bash|zsh``: the scripts the installed command prints, sourced by the
real shells, completing the real parser's subcommands, options and values."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sensors._cli.completion import commands
from sensors._cli.main import build_parser

CROSSCHECK = str(Path(sys.executable).with_name("crosscheck"))

#: Complete the words given (the last one being completed), as bash does at a TAB.
_COMPLETE = """
source <("$CROSSCHECK" completion bash) || exit 9
complete -p crosscheck
t() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _crosscheck
      printf '%s\\n' "${COMPREPLY[*]}"; }
"""


def _bash(cwd: Path, *cases: str) -> list[str]:
    """Each case (words, space-separated; a trailing space: an empty word to complete): the
    completions, sorted; the first line is ``complete -p crosscheck``."""
    calls = "\n".join(
        "t " + " ".join(f"'{w}'" for w in (case.split(" ") if case.endswith(" ") else case.split()))
        for case in cases
    )
    out = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", _COMPLETE + calls],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"CROSSCHECK": CROSSCHECK, "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    assert first == "complete -F _crosscheck crosscheck"
    return [" ".join(sorted(line.split())) for line in rest]


def test_bash_sources_it_and_completes_subcommands_options_and_values(tmp_path: Path) -> None:
    (tmp_path / "stages").mkdir()
    for name in ("extract.yaml", "train.yml", "notes.txt"):
        (tmp_path / name).write_text("")
    got = _bash(
        tmp_path,
        "crosscheck ",
        "crosscheck st",
        "crosscheck status --",
        "crosscheck status ",
        "crosscheck check --since ",
        "crosscheck check -t ",
        "crosscheck serve --log-level ",
        "crosscheck serve ",
        "crosscheck completion ",
        "crosscheck validate --s",
        "crosscheck wait extract.yaml --st",
    )
    assert got == [
        "--help --version -h check completion demo history init schema serve status validate wait",
        "status",
        "--help --json --since --state",
        "extract.yaml stages train.yml",  # stage files and directories, not notes.txt
        "",  # a time or a duration: nothing to offer, not file names
        "",
        "debug error info warning",
        "stages",  # a directory
        "bash zsh",
        "--strict",
        "--state",
    ]


def test_every_subcommand_and_option_is_in_the_bash_script() -> None:
    out = subprocess.run([CROSSCHECK, "completion", "bash"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for cmd in commands(build_parser()):
        assert f"        {cmd.name})" in out.stdout
        for opt in cmd.options:
            for flag in opt.flags:
                assert flag in out.stdout, (cmd.name, flag)


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_sources_it_and_registers_the_completion(tmp_path: Path) -> None:
    script = subprocess.run(
        [CROSSCHECK, "completion", "zsh"], capture_output=True, text=True, timeout=60
    ).stdout
    (tmp_path / "_crosscheck").write_text(script)
    assert subprocess.run(["zsh", "-n", str(tmp_path / "_crosscheck")], timeout=60).returncode == 0
    # Sourced after compinit (as in a ~/.zshrc), and autoloaded from $fpath.
    sourced = (
        'autoload -U compinit && compinit -u -d "$HOME/.zcompdump"; source <("$CROSSCHECK" completion zsh)'
    )
    autoloaded = 'fpath=("$HOME" $fpath); autoload -U compinit && compinit -u -d "$HOME/.zcompdump"'
    for setup in (sourced, autoloaded):
        out = subprocess.run(
            ["zsh", "-f", "-c", f"{setup}; print -r -- $_comps[crosscheck]"],
            capture_output=True,
            text=True,
            env={"CROSSCHECK": CROSSCHECK, "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
            timeout=60,
            check=False,
        )
        assert out.returncode == 0 and out.stdout.strip() == "_crosscheck", (setup, out.stdout, out.stderr)
    for cmd in commands(build_parser()):
        assert f"'{cmd.name}:" in script and f"                {cmd.name}) _arguments" in script
