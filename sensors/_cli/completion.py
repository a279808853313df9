"""``crosscheck completion bash|zsh``: shell completion scripts, written from the parser.

The subcommands, their options and what each takes are read from the ``argparse`` parser
the command runs, so completion cannot drift from the command. Stage files complete as
``*.yaml``/``*.yml`` (and directories on the way to them), ``serve``'s DIR as a directory,
``--state`` as a file, options with choices as their choices; a value that is free text
(``--since 2h``) offers nothing rather than file names.

    source <(crosscheck completion bash)      # bash, e.g. in ~/.bashrc
    source <(crosscheck completion zsh)       # zsh, after compinit, e.g. in ~/.zshrc
    crosscheck completion zsh > "${fpath[1]}/_crosscheck"   # or as an autoloaded function

Example:
    >>> from sensors._cli.main import build_parser
    >>> [c.name for c in commands(build_parser())][:3]
    ['init', 'status', 'wait']
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SHELLS", "Command", "Option", "bash_script", "commands", "script", "zsh_script"]

#: What a value is, by the argument's ``dest``: completed as such (others: free text).
_KINDS = {"stages": "stage", "stage": "stage", "state": "file", "directory": "dir", "workdir": "dir"}


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    takes: bool  # whether it takes a value
    kind: str = ""  # "file", "dir", "stage" or "" (free text)
    choices: tuple[str, ...] = ()
    metavar: str = ""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    positional: str  # what its positional arguments are: "stage", "dir", "choice", "" (none/free)
    choices: tuple[str, ...] = ()  # a positional's choices
    many: bool = False  # whether it takes several


def commands(parser: argparse.ArgumentParser) -> list[Command]:
    """The parser's subcommands, as completion needs them."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    found = []
    for name, cmd in sub.choices.items():
        options: list[Option] = []
        choices: tuple[str, ...] = ()
        positional, many = "", False
        for action in cmd._actions:
            if action.option_strings:
                takes = action.nargs != 0
                options.append(
                    Option(
                        tuple(action.option_strings),
                        _short(action.help),
                        takes,
                        _KINDS.get(action.dest, "") if takes else "",
                        tuple(str(c).lower() for c in action.choices or ()),
                        str(action.metavar or action.dest.upper()) if takes else "",
                    )
                )
            else:
                choices = tuple(str(c) for c in action.choices or ())
                positional = "choice" if choices else _KINDS.get(action.dest, "")
                many = action.nargs in ("+", "*")
        found.append(Command(name, _short(helps.get(name)), tuple(options), positional, choices, many))
    return found


def _short(help_text: str | None) -> str:
    """An option's help to its first clause, without what a shell would read as syntax."""
    text = re.split(r" \(|; |: ", (help_text or "").replace("%%", "%"), maxsplit=1)[0]
    return re.sub(r"[\[\]`$\\:]", "", text).strip()


# --------------------------------------------------------------------------- bash

_BASH = """\
# bash completion for crosscheck: source <(crosscheck completion bash)
_crosscheck_files() {{
    # $1: stage (*.yaml, *.yml), dir or file
    compopt -o filenames 2>/dev/null
    case "$1" in
        stage) COMPREPLY=($(compgen -d -- "$cur") $(compgen -f -X '!*.yaml' -- "$cur")
                          $(compgen -f -X '!*.yml' -- "$cur")) ;;
        dir) COMPREPLY=($(compgen -d -- "$cur")) ;;
        *) COMPREPLY=($(compgen -f -- "$cur")) ;;
    esac
}}

_crosscheck() {{
    local cur prev cmd i
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -*) ;;
            *) cmd="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    COMPREPLY=()
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "{top}" -- "$cur"))
        return 0
    fi
    case "$cmd" in
{cases}
    esac
    return 0
}}

complete -F _crosscheck crosscheck
"""


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion script for ``parser``'s command."""
    top = [a for action in parser._actions if action.option_strings for a in action.option_strings]
    cmds = commands(parser)
    cases = [_bash_case(c) for c in cmds]
    return _BASH.format(top=" ".join([c.name for c in cmds] + top), cases="\n".join(cases))


def _bash_case(cmd: Command) -> str:
    values = []
    for opt in cmd.options:
        if not opt.takes:
            continue
        pattern = "|".join(opt.flags)
        if opt.choices:
            action = f'COMPREPLY=($(compgen -W "{" ".join(opt.choices)}" -- "$cur"))'
        elif opt.kind:
            action = f"_crosscheck_files {opt.kind}"
        else:
            action = ":"  # free text: nothing to offer
        values.append(f"                {pattern}) {action}; return 0 ;;")
    flags = " ".join(f for opt in cmd.options for f in opt.flags)
    if cmd.positional == "choice":
        rest = f'COMPREPLY=($(compgen -W "{" ".join(cmd.choices)}" -- "$cur"))'
    elif cmd.positional:
        rest = f"_crosscheck_files {cmd.positional}"
    else:
        rest = ":"
    lines = [f"        {cmd.name})"]
    if values:
        lines += ['            case "$prev" in', *values, "            esac"]
    lines += [
        "            if [[ $cur == -* ]]; then",
        f'                COMPREPLY=($(compgen -W "{flags}" -- "$cur"))',
        "            else",
        f"                {rest}",
        "            fi",
        "            ;;",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- zsh

_ZSH = """\
#compdef crosscheck
# zsh completion for crosscheck: source <(crosscheck completion zsh) after compinit, or
# crosscheck completion zsh > "${{fpath[1]}}/_crosscheck"
_crosscheck() {{
    local curcontext="$curcontext" state line
    typeset -A opt_args
    local -a commands
    commands=(
{commands}
    )
    _arguments -C \\
        '(- *)'{{-h,--help}}'[show help]' \\
        '(- *)--version[show the version]' \\
        '1: :->command' \\
        '*:: :->args' && return 0
    case $state in
        command) _describe -t commands 'crosscheck command' commands ;;
        args)
            case $words[1] in
{cases}
            esac
            ;;
    esac
}}

if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _crosscheck "$@"
else
    compdef _crosscheck crosscheck
fi
"""

_ZSH_ACTION = {"stage": "_files -g '*.(yaml|yml)'", "dir": "_files -/", "file": "_files", "": " "}


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """The zsh completion script for ``parser``'s command."""
    cmds = commands(parser)
    listed = "\n".join(f"        {_zq(f'{c.name}:{c.help}')}" for c in cmds)
    return _ZSH.format(commands=listed, cases="\n".join(_zsh_case(c) for c in cmds))


def _zsh_case(cmd: Command) -> str:
    specs = []
    for opt in cmd.options:
        for flag in opt.flags:
            spec = f"{flag}=" if opt.takes and flag.startswith("--") else flag
            spec += f"[{opt.help}]"
            if opt.takes:
                action = f"({' '.join(opt.choices)})" if opt.choices else _ZSH_ACTION[opt.kind]
                spec += f":{opt.metavar.replace(':', '')}:{action}"
            specs.append(_zq(spec))
    if cmd.positional:
        action = f"({' '.join(cmd.choices)})" if cmd.positional == "choice" else _ZSH_ACTION[cmd.positional]
        specs.append(_zq(f"{'*' if cmd.many else '1'}:{cmd.positional}:{action}"))
    body = " \\\n                        ".join(specs) if specs else ""
    return f"                {cmd.name}) _arguments {body} ;;"


def _zq(text: str) -> str:
    """``text`` in zsh single quotes."""
    return "'" + text.replace("'", "'\\''") + "'"


#: The shells there is a script for.
SHELLS: Sequence[str] = ("bash", "zsh")


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (one of :data:`SHELLS`)."""
    return {"bash": bash_script, "zsh": zsh_script}[shell](parser)
