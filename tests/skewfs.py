"""A real FUSE file system whose file times come from another clock: a passthrough of a
directory that reports every time ``SKEW`` seconds ahead of this host's (a file server with a
clock of its own, as NFS, SMB or an object-store mount give). Writes, appends, renames and
``utime`` go through to the backing directory.

With ``frozen`` (``--frozen``), every directory's times and size stand still for good, as
object-store mounts (s3fs, gcsfuse, goofys, ...) and some FUSE file systems give them: an
entry added, removed or renamed moves nothing in the directory's stat.

With ``hang`` (``--hang``), a file whose name ends with ``.stuck`` blocks every read (a
server that stopped answering); one whose name ends with ``.hang`` says it is empty and its
reads block (for ``HANG_S`` seconds): a file of a stuck mount, or one like /proc/kmsg.

Run it as a process (``python tests/skewfs.py BACKING MOUNTPOINT SKEW [--frozen] [--hang]``; it serves
in the foreground until unmounted or killed), or use :func:`skewed_mount` in a test. Needs
``/dev/fuse``, ``fusermount`` (Debian's ``fuse``) and the ``fusepy`` module.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def available() -> str | None:
    """Why a skewed mount cannot be made here (None: it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount") is None and shutil.which("fusermount3") is None:
        return "no fusermount (apt-get install fuse)"
    try:
        import fuse  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"no fusepy with libfuse: {exc}"
    return None


@contextlib.contextmanager
def skewed_mount(
    backing: Path, mountpoint: Path, skew: float, *, frozen: bool = False, hang: bool = False
) -> Iterator[Path]:
    """``backing`` seen at ``mountpoint`` with every file time ``skew`` seconds ahead (and,
    ``frozen``, every directory's times and size fixed for good)."""
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, __file__, str(backing), str(mountpoint), repr(skew)]
    proc = subprocess.Popen([*args, *(["--frozen"] if frozen else []), *(["--hang"] if hang else [])])
    try:
        end = time.monotonic() + 15
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"skewfs did not mount (exit {proc.poll()})")
            time.sleep(0.05)
        yield mountpoint
    finally:
        subprocess.run(["fusermount", "-u", "-z", str(mountpoint)], capture_output=True, check=False)
        try:
            # A mount that hangs keeps its server busy in a read for HANG_S after the lazy
            # unmount (it ended in a kill, 10 s later); detached, it has nothing left to serve.
            proc.wait(1 if hang else 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


#: How long a read of a ``.hang`` file blocks (bounded: the test's mount must come down).
HANG_S = 20.0


def main(backing: str, mountpoint: str, skew: float, frozen: bool = False, hang: bool = False) -> None:
    import stat

    from fuse import FUSE, FuseOSError, Operations

    root = os.path.realpath(backing)
    # What an object store gives a "directory" (a key prefix): one time, one size, for good.
    fixed_time = time.time() - 3600

    def real(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    class Skewed(Operations):  # type: ignore[misc]
        """A loopback whose times are ``skew`` ahead (fusepy's Loopback, cut down)."""

        def __call__(self, op: str, path: str, *args: object) -> object:
            try:
                return super().__call__(op, path, *args)
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None

        def getattr(self, path: str, fh: int | None = None) -> dict[str, float]:
            st = os.lstat(real(path))
            attrs = {
                k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_ino")
            }
            for k in ("st_atime", "st_mtime", "st_ctime"):
                attrs[k] = getattr(st, k) + skew
            if hang and path.endswith(".hang"):
                attrs["st_size"] = 0
            if frozen and stat.S_ISDIR(st.st_mode):
                attrs.update(st_atime=fixed_time, st_mtime=fixed_time, st_ctime=fixed_time, st_size=0)
            return attrs

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(real(path))]

        def access(self, path: str, mode: int) -> None:
            if not os.access(real(path), mode):
                raise FuseOSError(errno.EACCES)

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(real(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag")
            return {k: getattr(sv, k) for k in (*keys, "f_frsize", "f_namemax")}

        def open(self, path: str, flags: int) -> int:
            return os.open(real(path), flags)

        def create(self, path: str, mode: int, fi: object = None) -> int:
            return os.open(real(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            if hang and path.endswith((".hang", ".stuck")):
                time.sleep(HANG_S)
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> None:
            os.truncate(real(path), length)

        def flush(self, path: str, fh: int) -> None:
            os.fsync(fh)

        def release(self, path: str, fh: int) -> None:
            os.close(fh)

        def fsync(self, path: str, datasync: int, fh: int) -> None:
            os.fsync(fh)

        def unlink(self, path: str) -> None:
            os.unlink(real(path))

        def mkdir(self, path: str, mode: int) -> None:
            os.mkdir(real(path), mode)

        def rmdir(self, path: str) -> None:
            os.rmdir(real(path))

        def rename(self, old: str, new: str) -> None:
            os.rename(real(old), real(new))

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(real(path), mode)

        def chown(self, path: str, uid: int, gid: int) -> None:
            os.chown(real(path), uid, gid)

        def utimens(self, path: str, times: tuple[float, float] | None = None) -> None:
            # Times set through the mount are on the server's clock: kept as given, less skew.
            if times is not None:
                times = (times[0] - skew, times[1] - skew)
            os.utime(real(path), times)

    # A hanging read must not hold every other request: threads then.
    # direct_io: every read reaches read() above, even of a file that says it is empty (the
    # page cache would answer "end of file" without asking, as it never does for /proc/kmsg).
    extra = {"direct_io": True} if hang else {}
    FUSE(
        Skewed(), mountpoint, foreground=True, nothreads=not hang, fsname="skewfs", subtype="skewfs", **extra
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), "--frozen" in sys.argv[4:], "--hang" in sys.argv[4:])
