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

Every pattern here has bounded repetition inside each alternative and no nested
quantifiers: the work is linear in the text's length (a 256 KiB log tail included).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["REDACTED", "inert", "markdown_escape", "redact", "redaction_shared", "slack_code"]

REDACTED = "***"

# Words that name a secret when they end a flag or variable name (``--hf-token``,
# ``AWS_SECRET_ACCESS_KEY``). Matched against the name's last segment(s), so ``--max-tokens``,
# ``--tokenizer`` and ``--pad-token-id`` stay as they are.
_SECRET_LAST = frozenset(
    {
        "token",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "apikey",
        "credential",
        "credentials",
        "auth",
    }
)
_KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "signing", "encryption", "master"})

# A flag (-x, --name) or an environment-style name, and what separates it from its value:
# ``--name=v``, ``--name v`` (not when the next word is itself a flag) or ``NAME=v``. Only
# the name is matched: its value is consumed only when the name is a secret's, so the value
# of an ordinary flag (``--verbose HF_TOKEN=x``) is still scanned. Names are at most 64
# characters, quoted values at most 256: bounded work per position.
_NAME = re.compile(
    r"(?<![\w.\-])(?:(?P<flag>--?[A-Za-z][\w.\-]{0,63})(?P<fsep>=|[ \t]+(?!-))|(?P<env>[A-Za-z_]\w{0,63})=)"
)
_VALUE = re.compile(r"\"[^\"\n]{0,256}\"|'[^'\n]{0,256}'|\S+")
# scheme://user:password@host → scheme://user:***@host
_URL_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s:/@]{0,256}:)[^\s/@]{1,256}@")
# Token shapes that are secrets wherever they appear; the prefix is kept.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?P<prefix>hf_|gh[pousr]_|github_pat_|glpat-|xox[abposr]-|sk-(?:ant-|proj-)?)"
    r"[A-Za-z0-9_\-]{16,}"
    r"|(?<![A-Za-z0-9])(?P<aws>(?:AKIA|ASIA)[0-9A-Z]{16})(?![A-Za-z0-9])"
    r"|(?P<slack>https://hooks\.slack\.com/)\S+"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEGMENTS = re.compile(r"[-_.]+")


def _is_secret_name(name: str) -> bool:
    parts = [p for p in _SEGMENTS.split(_CAMEL.sub("_", name.lstrip("-")).lower()) if p]
    if not parts:
        return False
    if parts[-1] in _SECRET_LAST:
        return True
    return parts[-1] == "key" and len(parts) > 1 and parts[-2] in _KEY_QUALIFIERS


def _assignments(text: str) -> str:
    out: list[str] = []
    pos = 0
    while (m := _NAME.search(text, pos)) is not None:
        # The name first: matching the value of every ``a=b`` would make ``=a=a=a…`` quadratic.
        value = _VALUE.match(text, m.end()) if _is_secret_name(m.group("flag") or m.group("env")) else None
        if value is None:
            out.append(text[pos : m.end()])
            pos = m.end()
            continue
        out.append(text[pos : m.end()] + REDACTED)
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _token(m: re.Match[str]) -> str:
    if m.group("prefix"):
        return m.group("prefix") + REDACTED
    if m.group("slack"):
        return m.group("slack") + REDACTED
    return REDACTED


def redact(text: str) -> str:
    """Replace secret values in job text with ``***``, keeping what names them.

    Redacted: the value of a flag or ``NAME=value`` assignment whose name ends in token,
    password, passwd, pwd, passphrase, secret, apikey, credential(s), auth or
    api/access/secret/private key; the password of a URL (``scheme://user:***@host``); and
    well-known token shapes anywhere (Hugging Face ``hf_``, GitHub, GitLab, Slack, OpenAI and
    Anthropic ``sk-`` keys, AWS access key ids, Slack webhook URLs).

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
    hold ``_`` or ``-``; the AWS key ids start with ``AKIA`` or ``ASIA``.
    """
    return not ("-" in text or "=" in text or "_" in text or ":" in text or "AKIA" in text or "ASIA" in text)


def _redact(text: str) -> str:
    # Each pass only where its pattern can match (what each one needs, as in
    # _inert_to_redaction): a detail that changes every check ("... 12s ago") is redacted
    # anew each time, and most text needs one pass or none.
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: m.group("head") + REDACTED + "@", text)
    if "-" in text or "=" in text:
        text = _assignments(text)
    if "_" in text or "-" in text or "://" in text or "AKIA" in text or "ASIA" in text:
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
