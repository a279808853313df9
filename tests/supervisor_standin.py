"""The stand-ins' program: docker (Docker 28.2.2, API 1.50), systemctl and systemd-run (systemd
252, Debian 12), told apart by the name they are run under (``tests.supervisors.Stand`` links
them into its ``bin`` folder with this interpreter on the shebang line).

Self-contained (the standard library only): run over the test sshd, it imports nothing of the
repository. What it prints is the real tool's format; see tests/supervisors.py.

- ``docker inspect --type container -- NAME``, ``systemctl [--user] show -p ... -- UNIT``:
  print what ``state/docker-NAME`` / ``state/systemd-UNIT`` hold (first line: the exit
  status; the rest: the tool's answer), as the test or a launch below wrote it.
- ``docker run -d --name NAME IMAGE CMD...``: starts ``CMD...`` for real, detached (the image
  is not run: there is none), records the container running with the job's PID as
  ``State.Pid``, prints the new container's ID, and, when the job ends, records its exit as
  docker does (a job killed by signal N: ``ExitCode`` 128+N). A name already in use is
  docker's conflict error (exit 125).
- ``systemd-run [--user] --unit NAME -p RemainAfterExit=yes -p StandardOutput=append:LOG
  [--working-directory=DIR] -- CMD...``: starts ``CMD...`` for real, in a cgroup of its own
  under the v1 ``name=systemd`` hierarchy where one can be made (else ``ControlGroup`` is
  empty), records the unit active/running with a new InvocationID, and its exit when it
  ends: active/exited (``RemainAfterExit=yes``) on status 0, else failed (``exit-code`` or
  ``signal``). A unit already loaded is systemd-run's error (exit 1).
- ``systemctl [--user] show -p InvocationID --value -- UNIT``: the value alone.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ZERO_TIME = "0001-01-01T00:00:00Z"


def rfc3339(epoch: float) -> str:
    """Go's time.RFC3339Nano in UTC, as docker writes StartedAt/FinishedAt."""
    whole = dt.datetime.fromtimestamp(int(epoch), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    nanos = round((epoch - int(epoch)) * 1e9)
    return whole + (f".{nanos:09d}".rstrip("0") if nanos else "") + "Z"


def systemd_time(epoch: float) -> str:
    return dt.datetime.fromtimestamp(int(epoch), tz=dt.UTC).strftime("%a %Y-%m-%d %H:%M:%S UTC")


def container_json(
    name: str,
    *,
    status: str,
    cid: str,
    started: float | None,
    finished: float | None = None,
    exit_code: int = 0,
    oom: bool = False,
    pid: int = 0,
    restarts: int = 0,
    error: str = "",
) -> str:
    """``docker inspect``'s answer for one container, as Docker 28.2.2 prints it (Go's
    ``json.Indent`` with four spaces: ``json.dumps(indent=4)`` writes the same)."""
    state = {
        "Status": status,
        "Running": status in ("running", "paused", "restarting"),
        "Paused": status == "paused",
        "Restarting": status == "restarting",
        "OOMKilled": oom,
        "Dead": status == "dead",
        "Pid": pid,
        "ExitCode": exit_code,
        "Error": error,
        "StartedAt": rfc3339(started) if started is not None else ZERO_TIME,
        "FinishedAt": rfc3339(finished) if finished is not None else ZERO_TIME,
    }
    info = {
        "Id": cid,
        "Created": rfc3339((started or time.time()) - 1),
        "Path": "python",
        "Args": ["-m", "extract"],
        "State": state,
        "Image": "sha256:" + "ab" * 32,
        "Name": f"/{name}",
        "RestartCount": restarts,
        "Driver": "overlay2",
        # A label that says "Pid" (job-chosen text): the probe's PID read must not take it.
        "Config": {"Hostname": cid[:12], "Env": ["PATH=/usr/bin"], "Labels": {"Pid": "1"}},
    }
    return json.dumps([info], indent=4)


def unit_text(
    *,
    active: str,
    sub: str,
    invocation: str,
    started: float | None,
    exited: float | None = None,
    result: str = "success",
    code: int = 0,
    status: int = 0,
    pid: int = 0,
    cgroup: str = "",
) -> str:
    """``systemctl show -p ...``'s answer for one unit, as systemd 252 prints it."""
    lines = {
        "LoadState": "loaded",
        "ActiveState": active,
        "SubState": sub,
        "Result": result,
        "ExecMainStatus": status,
        "ExecMainCode": code,
        "ExecMainPID": pid,
        "InvocationID": invocation,
        "ExecMainStartTimestamp": systemd_time(started) if started else "",
        "ExecMainExitTimestamp": systemd_time(exited) if exited else "",
        "ExecMainStartTimestampMonotonic": int((started or 0) * 1e6) % 10**12 if started else 0,
        "ExecMainExitTimestampMonotonic": int((exited or 0) * 1e6) % 10**12 if exited else 0,
        "ControlGroup": cgroup,
    }
    return "\n".join(f"{k}={v}" for k, v in lines.items())


def unit_name(name: str) -> str:
    """systemd's name for a unit given without its type: NAME.service."""
    suffixes = (".service", ".scope", ".socket", ".timer", ".target", ".mount", ".slice", ".path")
    return name if name.endswith(suffixes) else name + ".service"


def write_state(folder: Path, name: str, rc: int, body: str) -> None:
    path = folder / name
    tmp = path.with_name(f".{name}.{os.getpid()}.part")
    tmp.write_text(f"{rc}\n{body}\n")
    tmp.rename(path)


# --------------------------------------------------------------------------- the programs


def _print_state(path: Path) -> int:
    rc, _, body = path.read_text().partition("\n")
    sys.stdout.write(body)
    return int(rc)


def _detach(run_job, ready: Path) -> None:
    """Run ``run_job()`` in a grandchild of no session of ours, its stdio on /dev/null (a
    caller's ``$(...)`` must not wait for it); return once it has written ``ready``."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            run_job()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _status(rc: int) -> tuple[int | None, int | None]:
    """(exit code, signal) of a Popen returncode."""
    return (None, -rc) if rc < 0 else (rc, None)


def docker(folder: Path, argv: list[str]) -> int:
    if argv[:1] == ["inspect"]:
        name = argv[-1]
        path = folder / f"docker-{name}"
        if not path.exists():
            print("[]")
            print(f"Error: No such container: {name}", file=sys.stderr)
            return 1
        return _print_state(path)
    if argv[:2] == ["run", "-d"] and argv[2:3] == ["--name"] and len(argv) >= 6:
        name, command = argv[3], argv[5:]  # argv[4]: the image
        path = folder / f"docker-{name}"
        if path.exists():
            old = json.loads(path.read_text().partition("\n")[2])[0]["Id"]
            print(
                f'docker: Error response from daemon: Conflict. The container name "/{name}" is already'
                f' in use by container "{old}". You have to remove (or rename) that container to be'
                " able to reuse that name.\n\nRun 'docker run --help' for more information",
                file=sys.stderr,
            )
            return 125
        cid = uuid.uuid4().hex + uuid.uuid4().hex

        def run_job() -> None:
            started = time.time()
            job = subprocess.Popen(command, start_new_session=True)
            write_state(
                folder,
                f"docker-{name}",
                0,
                container_json(name, status="running", cid=cid, started=started, pid=job.pid),
            )
            rc = job.wait()
            code, sig = _status(rc)
            write_state(
                folder,
                f"docker-{name}",
                0,
                container_json(
                    name,
                    status="exited",
                    cid=cid,
                    started=started,
                    finished=time.time(),
                    exit_code=128 + sig if sig else int(code or 0),
                ),
            )

        _detach(run_job, path)
        print(cid)
        return 0
    if argv[:1] == ["rm"]:
        for name in argv[1:]:
            if not name.startswith("-"):
                (folder / f"docker-{name}").unlink(missing_ok=True)
                print(name)
        return 0
    print(f"docker stand-in: not handled: {argv}", file=sys.stderr)
    return 2


def systemctl(folder: Path, argv: list[str]) -> int:
    name = unit_name(argv[-1])
    path = folder / f"systemd-{name}"
    if "--value" in argv and "InvocationID" in argv:
        if not path.exists():
            print()
            return 0
        rc, _, body = path.read_text().partition("\n")
        for line in body.splitlines():
            if line.startswith("InvocationID="):
                print(line.partition("=")[2])
        return int(rc)
    if not path.exists():
        # systemd 252 on a unit it does not know: loaded "not-found", exit 0.
        print(
            "LoadState=not-found\nActiveState=inactive\nSubState=dead\nResult=success\n"
            "ExecMainStatus=0\nExecMainCode=0\nExecMainPID=0\nInvocationID=\n"
            "ExecMainStartTimestampMonotonic=0\nExecMainExitTimestampMonotonic=0\nControlGroup="
        )
        return 0
    return _print_state(path)


def _cgroup(name: str, invocation: str) -> tuple[str, Path | None]:
    """A cgroup of the unit's own in v1's name=systemd hierarchy, where one can be made."""
    rel = f"/cc-standin-{invocation[:12]}.slice/{name}"
    where = Path("/sys/fs/cgroup/systemd" + rel)
    try:
        where.mkdir(parents=True)
        return rel, where
    except OSError:
        return "", None


def systemd_run(folder: Path, argv: list[str]) -> int:
    name, props, cwd = None, {}, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            command = argv[i + 1 :]
            break
        if a == "--unit":
            name, i = argv[i + 1], i + 2
            continue
        if a == "-p":
            key, _, value = argv[i + 1].partition("=")
            props[key] = value
            i += 2
            continue
        if a.startswith("--working-directory="):
            cwd = a.partition("=")[2]
        i += 1
    else:
        print("systemd-run stand-in: no command", file=sys.stderr)
        return 1
    assert name is not None
    name = unit_name(name)
    path = folder / f"systemd-{name}"
    if path.exists():
        print(
            f"Failed to start transient service unit: Unit {name} was already loaded or has a fragment file.",
            file=sys.stderr,
        )
        return 1
    invocation = uuid.uuid4().hex
    log = props.get("StandardOutput", "")
    log = log.partition(":")[2] if log.startswith("append:") else None

    def run_job() -> None:
        cgroup, where = _cgroup(name, invocation)
        out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
        started = time.time()

        def enter() -> None:
            if where is not None:
                (where / "cgroup.procs").write_text(str(os.getpid()))

        job = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=out, preexec_fn=enter)
        write_state(
            folder,
            f"systemd-{name}",
            0,
            unit_text(
                active="active",
                sub="running",
                invocation=invocation,
                started=started,
                pid=job.pid,
                cgroup=cgroup,
            ),
        )
        rc = job.wait()
        code, sig = _status(rc)
        exited = time.time()
        if sig:
            text = unit_text(
                active="failed",
                sub="failed",
                invocation=invocation,
                started=started,
                exited=exited,
                result="signal",
                code=2,
                status=sig,
                pid=0,
                cgroup=cgroup,
            )
        elif code:
            text = unit_text(
                active="failed",
                sub="failed",
                invocation=invocation,
                started=started,
                exited=exited,
                result="exit-code",
                code=1,
                status=int(code),
                pid=0,
                cgroup=cgroup,
            )
        else:
            text = unit_text(
                active="active",
                sub="exited",
                invocation=invocation,
                started=started,
                exited=exited,
                code=1,
                status=0,
                pid=0,
                cgroup=cgroup,
            )
        write_state(folder, f"systemd-{name}", 0, text)
        if where is not None:
            # Empty now (the job's tree ended with it, or left it): systemd removes it too.
            try:
                where.rmdir()
                where.parent.rmdir()
            except OSError:
                pass

    _detach(run_job, path)
    print(f"Running as unit: {name}; invocation ID: {invocation}", file=sys.stderr)
    return 0


def main() -> int:
    folder = Path(os.path.abspath(sys.argv[0])).parent / "state"
    tool = os.path.basename(sys.argv[0])
    argv = sys.argv[1:]
    if tool == "docker":
        return docker(folder, argv)
    if tool == "systemctl":
        return systemctl(folder, argv)
    if tool == "systemd-run":
        return systemd_run(folder, argv)
    print(f"no stand-in named {tool}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
