"""Job text is data: redaction of secrets, and display-safe (inert) text for each medium.

Log lines and command lines are written by the monitored job, not by crosscheck. They reach
the terminal, Slack, Prefect artifacts and log records, and in each place they must show as
what they are — text — never as markup, a mention, a link, a terminal escape or a format
string. Secrets on a job's command line (``--hf-token hf_…``) must not travel at all.

- :func:`redact` replaces secret values with ``***``, keeping the name that shows what was
  there. :class:`~sensors._base.model.Reading` applies it to its detail and evidence, so every
  output (``--json``, events, artifacts, Slack) sees only redacted text.
- :func:`inert` makes one display-safe line: terminal escapes and control characters become
  visible escapes, so nothing the job wrote can colour, move the cursor, hyperlink or break a
  line. The medium escapers (:func:`slack_code`, :func:`markdown_escape`) build on it.

Every pattern here has bounded repetition inside each alternative, or repetition that is
possessive (``*+``, ``++``: never given back, so never retried), and what a match scans
is skipped past when it is a value: the work is linear in the text's length (a 256 KiB log tail included).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "REDACTED",
    "inert",
    "markdown_escape",
    "redact",
    "redact_argv",
    "redact_command",
    "redact_deep",
    "redaction_shared",
    "slack_code",
]

REDACTED = "***"

# Words that name a secret when they end a flag or variable name (``--hf-token``,
# ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``). The rule is on the name's last word, never on a
# word anywhere in it: ``--max-tokens``, ``--tokenizer``, ``--pad-token-id`` and
# ``--keys-file`` stay as they are.
_SECRET_LAST = frozenset(
    {
        "token",
        "password",
        "passwd",
        "pass",
        "pwd",
        "passphrase",
        "secret",
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "credential",
        "credentials",
        "auth",
    }
)
# Endings that make a secret of a last word written in one piece (``PGPASSWORD``,
# ``HFTOKEN``, ``clientsecret``, ``openaiapikey``); the words above but the short ones
# (``pass``, ``pwd``, ``auth``, ``key``), which end too many ordinary words (bypass, oauth).
_SECRET_ENDINGS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "credentials",
    "credential",
)
# ``key`` is a secret's name only after one of these (``--api-key``, ``AWS_ACCESS_KEY``):
# ``--sort-key``, ``--cache-key`` and ``--primary-key`` are not.
_KEY_QUALIFIERS = frozenset(
    {
        "api",
        "access",
        "secret",
        "private",
        "signing",
        "encryption",
        "master",
        "client",
        "auth",
        "license",
        "session",
        "account",
        "service",
        "subscription",
        "app",
        "admin",
        "deploy",
    }
)
# A ``token`` after these is a vocabulary token or a count (``--eos-token </s>``,
# ``--max-token 512``), not a credential.
_NOT_CREDENTIAL_TOKEN = frozenset(
    {"bos", "eos", "pad", "unk", "sep", "cls", "mask", "special", "start", "end", "stop", "eot", "sos"}
    | {"begin", "image", "max", "min", "num", "n", "per", "total", "first", "last", "next", "new"}
)
# A ``pass`` after these is a pass over the data (``--two-pass``, ``--dry-pass``).
_NOT_CREDENTIAL_PASS = frozenset(
    {"one", "two", "three", "single", "multi", "first", "second", "third", "final", "by", "dry", "forward"}
    | {"backward", "no", "skip", "extra"}
)

# A flag (-x, --name), an environment-style name, or a JSON/YAML key, and what separates it
# from its value: ``--name=v``, ``--name v`` (not when the next word is itself a flag),
# ``NAME=v``, an INI/TOML ``name = v`` (spaces around ``=``; never ``==``), ``"name": "v"``,
# ``name: v``. Only the name is matched: its value is consumed only when the name is a
# secret's, so the value of an ordinary flag (``--verbose HF_TOKEN=x``) is still scanned.
# Names are at most 64 characters and the separators' spaces are bounded or possessive:
# bounded work per position.
_NAME = re.compile(
    r"(?<![\w.\-])(?:(?P<flag>--?[A-Za-z][\w.\-]{0,63})(?P<fsep>=|[ \t]{1,8}=(?!=)[ \t]{0,8}|[ \t]++(?![-=]))"
    r"|(?P<env>[A-Za-z_]\w{0,63})(?:=|(?P<ini>[ \t]{1,8}=(?!=)[ \t]{0,8}))"
    r"|(?P<q>[\"']?)(?P<key>[A-Za-z_][\w.\-]{0,63})(?P=q)[ \t]{0,8}:(?!//)[ \t]{0,8})"
)
# A quoted value runs to its closing quote, over escaped quotes (``"ab\\"cd"``) and at any
# length; one never closed runs to the end of its line. The whole of it is hidden, and the
# scan goes on after it, so each character is read once (possessive: no backtracking).
_QUOTED = r"\"(?:[^\"\\\n]++|\\.)*+\"?|'(?:[^'\\\n]++|\\.)*+'?"
# A shell word is quoted and bare pieces run together (``"a b"c'd e'``): all of it is the value.
_VALUE = re.compile(r"(?:" + _QUOTED + r"|[^\s\"']++)++")
# A JSON/YAML value ends at a comma, a closing brace or bracket as well as at a space.
_KEY_VALUE = re.compile(_QUOTED + r"|[^\s,;}\]\"']+")
# Flags whose value is ``user:password`` (curl -u/--user/-U/--proxy-user): the user is kept,
# the password hidden. A ``uid:gid`` (``docker run -u 1000:1000``) is not a password.
_USER_FLAGS = frozenset({"-u", "--user", "-U", "--proxy-user"})
_UID_GID = re.compile(r"\d+:\d+")
# ``token`` is also a vocabulary token: ``token: 512``, ``eos token = 2`` (a count or an id)
# are not credentials. A plain number of at most six digits after a name whose last word is
# ``token`` is kept (no service's credential is that; a one-time code is spent in seconds).
_TOKEN_COUNT = re.compile(r"[\"']?\d{1,6}[\"']?")
# A MySQL/MariaDB client's password glued to ``-p`` (``mysql -u root -pPW db``; ``-p PW``
# names a database, ``-p`` alone prompts), and ``sshpass -p PW`` / ``sshpass -pPW``. Only
# after these commands: ``-p`` is a port, a path or a parent elsewhere. At most 32 words
# between the command and its ``-p``, none a shell separator: bounded work per command.
_TOOL_PASSWORD = re.compile(
    r"(?<![\w.\-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlpump|mysqlslap"
    r"|mariadb|mariadb-dump|mariadb-admin|mariadb-import|mariadb-check|mariadb-show)(?![\w.\-])"
    r"(?:[ \t]++[^\s;|&]++){0,32}?[ \t]++-p(?=[^\s-])"
    r"|(?<![\w.\-])sshpass(?:[ \t]++-v){0,4}[ \t]++-p[ \t]*+(?=\S)"
)
_MYSQL_TOOLS = frozenset(
    {"mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlcheck", "mysqlshow", "mysqlpump", "mysqlslap"}
    | {"mariadb", "mariadb-dump", "mariadb-admin", "mariadb-import", "mariadb-check", "mariadb-show"}
)
# An XML element named for a secret (``<password>x</password>``, ``<apiKey>x</apiKey>``):
# its text is hidden when the element closes (so ``<token>`` in prose is left alone).
_XML_OPEN = re.compile(r"<(?P<tag>[A-Za-z_][\w.\-]{0,63})>")
_XML_TEXT = re.compile(r"[^<]*+")
# scheme://user:password@host → scheme://user:***@host. The password runs to the last ``@``
# of the authority (a password may hold ``@``).
_URL_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s:/@]{0,256}:)[^\s/?#]{1,256}@")
# scheme://TOKEN@host (a token as the user, no password: ``https://<token>@github.com``):
# a user of 16 characters or more is hidden whole (``ssh://root@gpu-box`` stays).
_URL_TOKEN_USER = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://)[^\s:/@?#]{16,}+@")
# An HTTP Authorization header (``Authorization: Bearer x``, ``authorization=Basic x``): its
# scheme is kept, its credential hidden. ``Bearer x`` anywhere else: a token of 8 characters
# or more after it.
_AUTH_HEADER = re.compile(
    r"(?P<head>\b[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn][\"']?[ \t]{0,8}[:=][ \t]{0,8}[\"']?"
    r"(?:[A-Za-z][\w\-]{0,15}[ \t]{1,8})?)[^\s\"']{1,4096}"
)
_BEARER = re.compile(r"(?P<head>\b[Bb]earer[ \t]{1,8})[A-Za-z0-9._~+/\-]{8,4096}=*")
# Token shapes that are secrets wherever they appear; the prefix is kept.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?P<prefix>hf_|api_org_|pnu_|pnb_|gh[pousr]_|github_pat_|glpat-|gldt-|glrt-|xox[abposr]-"
    r"|xapp-|sk-(?:ant-|proj-)?|[sr]k_(?:live|test)_|npm_|pypi-|dop_v1_|shpat_|AIza)"
    r"[A-Za-z0-9_\-]{16,}"
    r"|(?<![A-Za-z0-9])(?P<aws>(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Za-z0-9])"
    r"|(?P<slack>https://hooks\.slack\.com/)\S+"
    # A JSON Web Token: three base64url parts, the first a JSON object's (``eyJ`` is ``{"``).
    r"|(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{4,}+\.[A-Za-z0-9_\-]{4,}+\.[A-Za-z0-9_\-]*+"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEGMENTS = re.compile(r"[-_.]+")


def _is_secret_name(name: str, *, flag: bool = True) -> bool:
    """Whether ``name`` (a flag, a variable, a key) names a secret, by its last word."""
    parts = [p for p in _SEGMENTS.split(_CAMEL.sub("_", name.lstrip("-")).lower()) if p]
    if not parts:
        return False
    last, before = parts[-1], (parts[-2] if len(parts) > 1 else "")
    if last in _SECRET_LAST:
        if last == "token":
            return before not in _NOT_CREDENTIAL_TOKEN
        if last == "pass":
            return before not in _NOT_CREDENTIAL_PASS
        if last == "pwd":  # PWD alone is the working directory; MYSQL_PWD and --pwd are not
            return flag or bool(before)
        return True
    if last == "key":
        return before in _KEY_QUALIFIERS
    if last == "base":  # Rails' secret_key_base (SECRET_KEY_BASE)
        return parts[-3:] == ["secret", "key", "base"]
    for ending in _SECRET_ENDINGS:
        if last.endswith(ending):
            return ending != "token" or last[: -len(ending)] not in _NOT_CREDENTIAL_TOKEN
    return False


def _last_word(name: str) -> str:
    parts = [p for p in _SEGMENTS.split(_CAMEL.sub("_", name.lstrip("-")).lower()) if p]
    return parts[-1] if parts else ""


def _user_password(value: str) -> str | None:
    """``user:***`` for a ``user:password`` value (quotes kept), else None."""
    quote = value[0] if value[:1] in ("'", '"') else ""
    inner = value[len(quote) :]
    if quote and inner.endswith(quote):
        inner = inner[: -len(quote)]
    user, colon, password = inner.partition(":")
    if not colon or not password or _UID_GID.fullmatch(inner):
        return None
    return quote + user + ":" + REDACTED + quote


def _assignments(text: str) -> str:
    out: list[str] = []
    pos = 0
    while (m := _NAME.search(text, pos)) is not None:
        # The name first: matching the value of every ``a=b`` would make ``=a=a=a…`` quadratic.
        key, flag, env = m.group("key"), m.group("flag"), m.group("env")
        name = key or flag or env
        shown: str | None = None  # what replaces the value, when it is hidden
        value = None
        if _is_secret_name(name, flag=bool(flag)):
            value = (_KEY_VALUE if key is not None else _VALUE).match(text, m.end())
            if value is not None:
                if _last_word(name) == "token" and _TOKEN_COUNT.fullmatch(value.group(0)):
                    value = None  # a count or a vocabulary id
                else:
                    # A JSON/YAML/INI value keeps its quotes (the document still reads as one).
                    first = value.group(0)[:1]
                    quote = first if (key is not None or m.group("ini")) and first in ("'", '"') else ""
                    shown = quote + REDACTED + quote
        elif flag in _USER_FLAGS:
            value = _VALUE.match(text, m.end())
            if value is not None and (shown := _user_password(value.group(0))) is None:
                value = None
        if value is None or shown is None:
            out.append(text[pos : m.end()])
            pos = m.end()
            continue
        out.append(text[pos : m.end()] + shown)
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _tool_passwords(text: str) -> str:
    out: list[str] = []
    pos = 0
    while (m := _TOOL_PASSWORD.search(text, pos)) is not None:
        value = _VALUE.match(text, m.end())
        if value is None:  # not reached: the pattern looks ahead at a non-space
            out.append(text[pos : m.end()])
            pos = m.end()
            continue
        out.append(text[pos : m.end()] + REDACTED)
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _xml_elements(text: str) -> str:
    out: list[str] = []
    pos = 0
    while (m := _XML_OPEN.search(text, pos)) is not None:
        tag = m.group("tag")
        if _is_secret_name(tag, flag=False):
            # Scanned to the next ``<`` at most once: the next search starts no earlier.
            body = _XML_TEXT.match(text, m.end())
            assert body is not None  # ``*`` always matches
            if body.end() > m.end() and text.startswith(f"</{tag}>", body.end()):
                out.append(text[pos : m.end()] + REDACTED)
                pos = body.end()
                continue
        out.append(text[pos : m.end()])
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def _kept_head(m: re.Match[str]) -> str:
    return m.group("head") + REDACTED


def _token(m: re.Match[str]) -> str:
    if m.group("prefix"):
        return m.group("prefix") + REDACTED
    if m.group("slack"):
        return m.group("slack") + REDACTED
    return REDACTED  # an AWS key id, a JWT


def redact(text: str) -> str:
    """Replace secret values in job text with ``***``, keeping what names them.

    Redacted: the value of a flag, ``NAME=value``, INI ``name = value``, JSON/YAML key or XML
    element whose name ends in token, password, passwd, pwd, passphrase, secret, apikey,
    credential(s), auth, api/access/secret/private key or secret_key_base (a quoted value
    whole, however long); the password of ``-u user:password`` (curl), of a MySQL client's
    ``-pPASSWORD`` and of ``sshpass -p``; the password of a URL (``scheme://user:***@host``)
    and a URL's user of 16 characters or more (a token); and well-known token shapes anywhere
    (Hugging Face ``hf_``, GitHub, GitLab, Slack, OpenAI and Anthropic ``sk-`` keys, AWS
    access key ids, JSON Web Tokens, Slack webhook URLs).

    Example:
        >>> redact("train.py --hf-token hf_abcdefghijklmnopqrstuvwx --max-tokens 512")
        'train.py --hf-token *** --max-tokens 512'
        >>> redact("AWS_SECRET_ACCESS_KEY=abc123 --password=hunter2 postgresql://u:pw@db/x")
        'AWS_SECRET_ACCESS_KEY=*** --password=*** postgresql://u:***@db/x'
        >>> redact("login with hf_abcdefghijklmnopqrstuvwx")
        'login with hf_***'
    """
    if not text or text in _clean or _inert_to_redaction(text):
        return text
    cache: dict[str, str] | None = getattr(_shared, "cache", None)  # redaction_shared's, if any
    if cache is not None and text in cache:
        return cache[text]
    redacted = _redact(text)
    if redacted == text and len(text) <= _CLEAN_LONGEST:
        if len(_clean) >= _CLEAN_MOST:
            _clean.clear()  # bounded; refilled by the next checks
        _clean[text] = None
    elif cache is not None:
        cache[text] = redacted
    return redacted


_ARG_ASSIGNMENT = re.compile(r"(?P<name>--?[A-Za-z][\w.\-]{0,63}|[A-Za-z_]\w{0,63})=")


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command's words with each secret value hidden whole, spaces included.

    Knowing where each word ends, ``["--db-password", "two words"]`` and
    ``["PGPASSWORD=two words"]`` show no part of the password (:func:`redact` of the joined
    line could only hide its first word); a word after ``Bearer`` or ``sshpass -p`` is hidden
    too, as are the password of ``-u user:password`` and a MySQL client's ``-pPASSWORD``, and
    every word is redacted as any text is.

    Example:
        >>> redact_argv(["env", "PGPASSWORD=a b", "t.py", "--db-password", "c d", "--tokenizer", "/x"])
        ['env', 'PGPASSWORD=***', 't.py', '--db-password', '***', '--tokenizer', '/x']
    """
    words: list[str] = []
    hide_next = user_next = False
    tool = ""  # "mysql" after a MySQL/MariaDB client's name, "sshpass" after sshpass's
    for item in argv:
        word = str(item)
        if hide_next and not word.startswith("-"):
            words.append(REDACTED)
            hide_next = False
            continue
        if user_next and not word.startswith("-") and (shown := _user_password(word)) is not None:
            words.append(shown)
            user_next = False
            continue
        user_next = word in _USER_FLAGS
        if tool and word.startswith("-p") and word != "-p" and not word.startswith("--"):
            words.append("-p" + REDACTED)  # mysql -pPW, sshpass -pPW
            tool = "" if tool == "sshpass" else tool
            continue
        if tool == "sshpass" and word == "-p":
            hide_next, tool = True, ""
            words.append(word)
            continue
        name = word.rsplit("/", 1)[-1]
        if name in _MYSQL_TOOLS:
            tool = "mysql"
        elif name == "sshpass":
            tool = "sshpass"
        m = _ARG_ASSIGNMENT.match(word)
        if m is not None and _is_secret_name(m.group("name"), flag=word.startswith("-")):
            words.append(word[: m.end()] + REDACTED)
            hide_next = False
            continue
        hide_next = (word.startswith("-") and "=" not in word and _is_secret_name(word)) or word in (
            "Bearer",
            "bearer",
        )
        words.append(redact(word))
    return words


def redact_command(argv: Sequence[str]) -> str:
    """A command line (its words as given) as one redacted line, for every output: the words
    of :func:`redact_argv`, joined, then redacted as any text is (a header split over words).

    Example:
        >>> redact_command(["curl", "-H", "Authorization:", "Basic", "dXNlcjpwYXNz", "--max-tokens", "5"])
        'curl -H Authorization: Basic *** --max-tokens 5'
    """
    return redact(" ".join(redact_argv(argv)))


def redact_deep(value: Any) -> Any:
    """``value`` with every string in it (keys kept) redacted by :func:`redact`: a JSON document.

    The chokepoint for documents that leave crosscheck (the state store's rows, event
    payloads, a launch record): whatever built them, no secret shape survives.
    """
    kind = type(value)
    if kind is str:
        return redact(value)
    if value is None or kind in _SCALARS:
        return value  # most values: no text, and no ABC check (Mapping) to pay for
    # Scalars inline: a process entry or progress dict is mostly numbers.
    if kind is dict:
        return {k: v if v is None or type(v) in _SCALARS else redact_deep(v) for k, v in value.items()}
    if kind is list:
        return [v if v is None or type(v) in _SCALARS else redact_deep(v) for v in value]
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_deep(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_deep(v) for v in value)
    return value


_SCALARS = frozenset({int, float, bool})


#: Text :func:`redact` found nothing in, remembered across checks: a watch meets the same
#: paths, command lines and reasons at every check. Only text with nothing to redact is
#: kept, so no secret outlives the check that read it; bounded in entries and length.
_clean: dict[str, None] = {}
_CLEAN_MOST = 32768
_CLEAN_LONGEST = 4096


def _inert_to_redaction(text: str) -> bool:
    """True when no pattern of :func:`redact` can match ``text`` (so it is returned as is).

    Every secret shape needs one of these: ``://`` (a URL's password, a Slack webhook) has
    ``:``; a secret flag starts with ``-`` and an assignment has ``=``; the token prefixes
    hold ``_`` or ``-`` (but Google's ``AIza``); the AWS key ids start with ``AKIA`` or
    ``ASIA``; a JSON/YAML key and an Authorization header have ``:`` or ``=``; a bare bearer
    token follows ``Bearer``; a JSON Web Token starts with ``eyJ``; a secret XML element
    closes with ``</``; the ``-p`` of mysql and sshpass has ``-``.
    """
    return not (
        "-" in text
        or "=" in text
        or "_" in text
        or ":" in text
        or "AKIA" in text
        or "ASIA" in text
        or "earer" in text
        or "AIza" in text
        or "eyJ" in text
        or "</" in text
    )


def _redact(text: str) -> str:
    # Each pass only where its pattern can match (what each one needs, as in
    # _inert_to_redaction): a detail that changes every check ("... 12s ago") is redacted
    # anew each time, and most text needs one pass or none.
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: m.group("head") + REDACTED + "@", text)
        text = _URL_TOKEN_USER.sub(lambda m: m.group("head") + REDACTED + "@", text)
    if (":" in text or "=" in text) and ("uthori" in text or "UTHORI" in text):
        text = _AUTH_HEADER.sub(_kept_head, text)
    if "earer" in text:
        text = _BEARER.sub(_kept_head, text)
    if "-p" in text and ("mysql" in text or "mariadb" in text or "sshpass" in text):
        text = _tool_passwords(text)
    if "-" in text or "=" in text or ":" in text:
        text = _assignments(text)
    if "</" in text:
        text = _xml_elements(text)
    if (
        "_" in text
        or "-" in text
        or "://" in text
        or "AKIA" in text
        or "ASIA" in text
        or "AIza" in text
        or "eyJ" in text
    ):
        text = _TOKEN_SHAPES.sub(_token, text)
    return text


#: Per thread: while a batch's stages are read (``sensors._check.batch``), each distinct string
#: redacted once (stages of a host repeat the same evidence); None outside a batch.
_shared = threading.local()


@contextmanager
def redaction_shared() -> Iterator[None]:
    """Within this block (in this thread), :func:`redact` computes each distinct string once.

    ``redact`` is a function of the string alone, so a cached answer is the answer; the
    cache holds only what the block redacted and is dropped at its end (never kept across
    batches).
    """
    outer = getattr(_shared, "cache", None)
    _shared.cache = {}
    try:
        yield
    finally:
        _shared.cache = outer


# C0 and C1 controls, DEL, lone surrogates, line/paragraph separators, and the bidi
# controls that can make text read differently from what it is ("Trojan Source").
_CONTROL = re.compile(
    "[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
# CSI sequences (colours, cursor moves) carry no text: they are dropped. Every other
# escape (OSC hyperlinks, titles) keeps its text, with ESC shown as ``\x1b``.
_CSI = re.compile(r"(?:\x1b\[|\x9b)[0-?]{0,64}[ -/]{0,16}[@-~]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\x1b": "\\x1b"}


def _visible(m: re.Match[str]) -> str:
    ch = m.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: object, limit: int | None = None) -> str:
    """One display-safe line of job text: no control character reaches the output.

    Colour and cursor escapes (CSI) are dropped; every other control character, a lone
    surrogate, a line separator or a bidi control is shown as a visible escape (``\\n``,
    ``\\x1b``, ``\\u202e``); a tab is a space. With ``limit``, longer text ends in ``…``.

    Example:
        >>> inert("\\x1b[31mred\\x1b[0m\\tdone\\r\\n")
        'red done\\\\r\\\\n'
        >>> inert("\\x1b]8;;http://evil\\x1b\\\\click")
        '\\\\x1b]8;;http://evil\\\\x1b\\\\click'
        >>> inert("x" * 10, limit=5)
        'xxxx…'
    """
    s = str(text)
    # The common case (printable text) costs one C-speed scan.
    out = s if s.isprintable() else _CONTROL.sub(_visible, _CSI.sub("", s).replace("\t", " "))
    if limit is not None and len(out) > limit:
        out = out[: max(0, limit - 1)] + "…"
    return out


# --------------------------------------------------------------------------- media


def slack_code(text: object, limit: int | None = None) -> str:
    """Job text for a Slack mrkdwn code span or block: escaped, one line, no backtick.

    Slack has no backslash escapes: ``&``, ``<`` and ``>`` become entities (so ``<!channel>``
    and ``<http://x|y>`` are text, not a mention or a link), and a backtick — the only thing
    that could end the surrounding code span — becomes ``'``. Inside code, ``*``,
    ``_`` and ``~`` are not formatting.

    Example:
        >>> slack_code("<!channel> *x* `y` & z")
        "&lt;!channel&gt; *x* 'y' &amp; z"
    """
    s = inert(text, limit)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("`", "'")


# The characters that can start markup inline in CommonMark/GFM: emphasis, code, links,
# images, raw HTML, entities, table cells, strikethrough, headings; and the backslash itself.
# (``-``, ``+`` and ``1.`` only matter at the start of a line, handled below.)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#!|~&])")
_MD_LINE_START = re.compile(r"^(\d{0,9})([-+=]|(?<=\d)[.)])")


def markdown_escape(text: object, limit: int | None = None) -> str:
    """Job text for markdown (a list item, a table cell, a heading): one line, every
    character that could start markup backslash-escaped.

    Example:
        >>> print(markdown_escape("| x | [click](http://evil) <img src=x> *b*"))
        \\| x \\| \\[click\\]\\(http://evil\\) \\<img src=x\\> \\*b\\*
        >>> print(markdown_escape("extract-v2.1"))
        extract-v2.1
    """
    return _MD_LINE_START.sub(r"\1\\\2", _MD_SPECIAL.sub(r"\\\1", inert(text, limit)))
