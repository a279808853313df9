"""Trust on disk, as OpenSSH's StrictModes: a file crosscheck believes is one no other user
can have written or replaced.

A job's exit record (the launch wrapper's, read by the probe) and the state store decide
whether a stage is complete: another user who could write either could make a job that
failed, or still runs, read as done. So each is trusted only when

- the file itself is a regular file (never a symbolic link, FIFO or device), owned by the
  user reading it (or root) and writable by no group or other user (a group that is the
  user's private group, of its name and with no other member, is the user's own);
- the directory holding it is a directory (not a symbolic link) of that user's (or root's)
  that no group or other user can write (they could put their own file in its place, or a
  ``-wal`` beside a store);
- every directory above that, on its physical path up to ``/``, is that user's or root's and
  writable by no group or other user unless it is sticky (``/tmp``: nobody else can rename
  or remove what is ours there).

Root counts as the user's own, as in OpenSSH: root can write anything anyway.

The same rules run in two places: :data:`TRUST_SH`, a sh function the launch script (before
it starts a job) and the probe (before it reads an exit record) both call on the host, and
:func:`untrusted_store` in this process for the SQLite store. What refuses and why:
docs/security.md, "What crosscheck trusts on disk".
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Literal

Kind = Literal["file", "dir", "parent"]

#: ``__cc_trust DIR [FILE]``: prints ``ok`` when FILE (when given and there) and DIR are to
#: be trusted by the shell's effective user, ``unreadable`` / ``missing`` when DIR (or the
#: way to it) cannot be read / is not there, else ``untrusted CODE KIND EUID OWNER MODE PATH``
#: (MODE: st_mode in hex, as ``stat -c %f``; ``-`` where unknown) for the first path that
#: fails. One ``stat`` for every path (without -L: a link is seen as a link); the directories
#: above DIR are those of its physical path (``cd -P``), as OpenSSH resolves them first.
#: Called in a command substitution (its variables and ``exit`` stay in that subshell).
#: Anything unexpected (no stat, a line that is no number, fewer lines than paths) is
#: ``untrusted stat``: nothing but ``ok`` trusts.
TRUST_SH: tuple[str, ...] = (
    "d=$1 f=${2:-} k=dir u=$(id -u)",
    'p=$(cd -P -- "${d%/*}/" 2>/dev/null && pwd -P) || p=${d%/*}',
    'set -- "$d"',
    'while [ -n "$p" ] && [ "$p" != / ]; do set -- "$@" "$p"; p=${p%/*}; done',
    'set -- "$@" /',
    'if [ -n "$f" ] && { [ -e "$f" ] || [ -h "$f" ]; }; then set -- "$f" "$@"; k=file; fi',
    # Group-writable is the user's own where the group is the user's private group (same
    # name, the user's primary group, no other member: umask 002 under user private groups,
    # RHEL's and Debian's usergroups default), as for OpenSSH's StrictModes.
    'upg() { [ $((0x$3 & 2)) = 0 ] && [ "$1" = "$u" ] && [ "$2" = "$(id -g)" ] &&'
    ' e=$(getent group "$2" 2>/dev/null || grep -m 1 "^[^:]*:[^:]*:$2:" /etc/group) &&'
    ' n=$(id -un) && [ "${e%%:*}" = "$n" ] && case ${e##*:} in \'\' | "$n") true ;; *) false ;; esac; }',
    "r=$(LC_ALL=C stat -c '%u %g %f' -- \"$@\" 2>&1) || {",
    '  case $r in *"ermission denied"*) echo unreadable ;; *"o such file"*) echo missing ;;',
    '  *) echo "untrusted stat $k $u - - $1" ;; esac; exit 0; }',
    "printf '%s\\n' \"$r\" | (",
    "  while read -r o g m; do",
    "    case $o in '' | *[!0-9]*) echo \"untrusted stat $k $u - - $1\"; exit 0 ;; esac",
    "    case $m in '' | *[!0-9a-f]*) echo \"untrusted stat $k $u $o - $1\"; exit 0 ;; esac",
    "    t=$((0x$m & 61440))",  # S_IFMT
    "    case $k in file) [ $t = 32768 ] ;; *) [ $t = 16384 ] ;; esac"  # S_IFREG, S_IFDIR
    ' || { echo "untrusted type $k $u $o $m $1"; exit 0; }',
    '    [ "$o" = "$u" ] || [ "$o" = 0 ] || { echo "untrusted owner $k $u $o $m $1"; exit 0; }',
    # 022: group or other may write; 01000: sticky (counts only above the record's directory).
    "    [ $((0x$m & 18)) = 0 ] || { [ $k = parent ] && [ $((0x$m & 512)) != 0 ]; }"
    ' || upg "$o" "$g" "$m"'
    ' || { echo "untrusted writable $k $u $o $m $1"; exit 0; }',
    "    case $k in file) k=dir ;; *) k=parent ;; esac",
    "    shift",
    "  done",
    '  if [ $# = 0 ]; then echo ok; else echo "untrusted stat $k $u - - $1"; fi',
    ")",
)

TRUST_FN = "__cc_trust"


def trust_sh_definition() -> str:
    """:data:`TRUST_SH` as a sh function definition (for a script built without the probe's
    helpers, the launch script)."""
    return "\n".join((f"{TRUST_FN}() {{", *(f"  {line}" for line in TRUST_SH), "}")) + "\n"


_TYPES = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
    stat.S_IFREG: "a regular file",
}


@dataclass(frozen=True)
class Untrusted:
    """Why ``path`` is not to be trusted: ``code`` is ``owner`` (another user's), ``writable``
    (by group or others), ``type`` (not a regular file / a directory: a symbolic link, a
    FIFO...) or ``stat`` (could not be checked); ``kind``: what the path was checked as (the
    ``file``, its ``dir``, or a ``parent`` above); ``mode``: its st_mode (None: unknown)."""

    code: str
    kind: Kind
    path: str
    euid: int | None = None
    owner: int | None = None
    mode: int | None = None

    def why(self, you: str = "you") -> str:
        """What is wrong, one clause naming the path (``you``: who should own it)."""
        if self.code == "owner":
            return f"{self.path} is owned by uid {self.owner}, not {you} (uid {self.euid})"
        if self.code == "writable" and self.mode is not None:
            who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if self.mode & bit)
            return f"{self.path} is writable by {who} (mode {stat.S_IMODE(self.mode):04o})"
        if self.code == "type" and self.mode is not None:
            found = _TYPES.get(stat.S_IFMT(self.mode), "not a regular file or directory")
            wanted = "a regular file" if self.kind == "file" else "a directory"
            return f"{self.path} is {found}, not {wanted}"
        return f"{self.path} cannot be checked (its owner and mode could not be read)"

    @property
    def fix(self) -> str:
        """What the person can do about this path."""
        if self.code == "writable" and self.kind != "file" and self.owner == self.euid:
            return f"chmod go-w {self.path}"
        return "remove it" if self.kind != "parent" else "use a directory only you can write"


def parse_untrusted(line: str) -> Untrusted | None:
    """The :class:`Untrusted` of a ``__cc_trust`` line (None: not such a line)."""
    words = line.strip().split(" ", 6)
    if len(words) < 7 or words[0] != "untrusted" or words[2] not in ("file", "dir", "parent"):
        return None

    def num(word: str, base: int = 10) -> int | None:
        try:
            return int(word, base)
        except ValueError:
            return None

    kind: Kind = words[2]  # type: ignore[assignment]
    return Untrusted(words[1], kind, words[6], num(words[3]), num(words[4]), num(words[5], 16))


def untrusted_store(path: str) -> Untrusted | None:
    """Why the state store at ``path`` (a file that may not exist yet, in a directory that
    does) is not to be trusted by this process; None: it is. A symbolic link is followed
    (a store may be one) once its own directory is trusted: then the file it names, and
    that file's directory, are checked as the store's. Raises OSError when a path cannot
    be examined (no permission), as opening the store would."""
    euid = os.geteuid()
    found = _untrusted_dir(os.path.dirname(os.path.abspath(path)), euid)
    if found is not None or not os.path.islink(path):
        return found or _untrusted_file(path, euid)
    target = os.path.realpath(path)
    if not os.path.lexists(target):
        return None  # a link to nothing: the store says so, and creates nothing there
    return _untrusted_dir(os.path.dirname(target), euid) or _untrusted_file(target, euid)


def _untrusted_file(path: str, euid: int) -> Untrusted | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    # Not a regular file of the user's (a directory, a device): the store itself says it
    # will not use it (and falls back): only whose it is, and who can write it, is asked.
    return _judge(path, st, "file", euid, typed=False)


def _untrusted_dir(directory: str, euid: int) -> Untrusted | None:
    """The directory (as it is named: a symbolic link is refused) and its physical
    path's directories above it."""
    found = _judge(directory, os.lstat(directory), "dir", euid)
    if found is not None:
        return found
    above = os.path.realpath(os.path.dirname(directory))
    while True:
        found = _judge(above, os.lstat(above), "parent", euid)
        if found is not None or above == "/":
            return found
        above = os.path.dirname(above)


def _judge(path: str, st: os.stat_result, kind: Kind, euid: int, *, typed: bool = True) -> Untrusted | None:
    wanted = stat.S_ISREG if kind == "file" else stat.S_ISDIR
    if typed and not wanted(st.st_mode):
        return Untrusted("type", kind, path, euid, st.st_uid, st.st_mode)
    if st.st_uid not in (euid, 0):
        return Untrusted("owner", kind, path, euid, st.st_uid, st.st_mode)
    if (
        st.st_mode & 0o022
        and not (kind == "parent" and st.st_mode & stat.S_ISVTX)
        and not (st.st_mode & 0o002 == 0 and st.st_uid == euid and _private_group(st.st_gid, euid))
    ):
        return Untrusted("writable", kind, path, euid, st.st_uid, st.st_mode)
    return None


def _private_group(gid: int, uid: int) -> bool:
    """Whether ``gid`` is ``uid``'s private group: of its name, its primary group, with no
    other member (user private groups: umask 002 then makes nothing writable by others)."""
    import grp
    import pwd

    try:
        user, group = pwd.getpwuid(uid), grp.getgrgid(gid)
    except KeyError:
        return False
    return user.pw_gid == gid and group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}
