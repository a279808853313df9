"""The GPU signal without a GPU: a fake libnvidia-ml.so.1 (C) under the real nvidia-ml-py
bindings, a fake nvidia-smi run by the real remote snippets, and table-like pure readings.

NVML is read in a subprocess per test: the bindings cache the loaded library and NVML's init
for the life of a process, and ``LD_LIBRARY_PATH`` is read by the loader at process start.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sensors._base.model import Says
from sensors._config.stage import GpuSpec
from sensors._signals.gpu import (
    REMOTE_SECTIONS,
    GpuDevice,
    GpuMemory,
    GpuProcess,
    GpuSnapshot,
    GpuWindow,
    gpu_reading,
    local_nspid_map,
    parse_nspid,
    parse_remote,
    read_gpu,
    read_local,
    remote_nspid_map,
)
from sensors._signals.gpu.attribution import local_nspid


def read_for_checker(checker, sections, meta, job_pids):
    """The GPU signal as the Checker reads it, with the memory kept on a checker-like value."""
    reading, checker._memory.gpu = read_gpu(
        checker.stage.gpu,
        sections,
        checker._memory.gpu,
        nvml=checker.host.nvml,
        now=meta.now,
        host=checker.host.name,
        job_pids=job_pids,
    )
    return reading


REPO = Path(__file__).resolve().parents[1]


def _load_fake_nvml():
    # tests/ is not a package and its path is not on sys.path in every import mode: load the
    # helper package by path.
    init = Path(__file__).resolve().parent / "fake_nvml" / "__init__.py"
    spec = importlib.util.spec_from_file_location("fake_nvml", init)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fake = _load_fake_nvml()
build_fake_nvml, install_fake_smi = _fake.build_fake_nvml, _fake.install_fake_smi
EVIDENCE_KEYS = {
    "devices",
    "idle",
    "samples",
    "window_seconds",
    "job_pids_on_gpu",
    "job_memory_mib",
    "job_gpu_busy",
    "other_processes",
    "attribution",
    "driver_version",
    "source",
    "sample_gap_seconds",
}
GPU0 = "GPU-0f2b6c1e-7a3d-4c55-9e21-3b8f0d9a1c01"
GPU1 = "GPU-5d1e9b7a-2c44-4f0e-8a6b-71c2e0f4d902"
INCIDENT_2 = f"""\
    driver 580.82.07
    device {GPU0} 0 92000 97887 NVIDIA RTX PRO 6000 Blackwell Server Edition
    sample 5000 0
    sample 4000 0
    sample 3000 0
    sample 2000 0
    sample 1000 0
    proc {{job}} 92000
"""


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="session")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"))
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process that is not the job (another user's work on the GPU)."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def visible() -> frozenset[int]:
    return frozenset(int(p) for p in os.listdir("/proc") if p.isdigit())


_READER = textwrap.dedent(
    """
    import dataclasses, json, sys, threading
    from sensors._config.stage import GpuSpec
    from sensors._signals.gpu import read_local
    spec = GpuSpec(**json.loads(sys.argv[1]))
    reads, threads = int(sys.argv[2]), int(sys.argv[3])
    snaps = []
    def one():
        for _ in range(reads):
            snaps.append(read_local(spec))
    workers = [threading.Thread(target=one) for _ in range(threads)]
    for w in workers: w.start()
    for w in workers: w.join()
    print(json.dumps([dataclasses.asdict(s) for s in snaps]))
    """
)


def _snapshot(d: Mapping[str, Any]) -> GpuSnapshot:
    devices = tuple(
        GpuDevice(
            **{
                **dev,
                "processes": tuple(GpuProcess(**p) for p in dev["processes"]),
                "samples": tuple(tuple(s) for s in dev["samples"]),
            }
        )
        for dev in d["devices"]
    )
    gpus = tuple(tuple(g) for g in d.get("gpus", ()))
    return GpuSnapshot(**{**d, "devices": devices, "gpus": gpus})


def nvml_read(
    lib_dir: Path | None,
    tmp_path: Path,
    state: str,
    *,
    reads: int = 1,
    threads: int = 1,
    **spec: Any,
) -> tuple[list[GpuSnapshot], list[str]]:
    """Run read_local in a fresh process on the fake library; return snapshots and NVML calls."""
    state_file = tmp_path / "nvml-state"
    state_file.write_text(textwrap.dedent(state))
    log = tmp_path / "nvml-calls"
    log.unlink(missing_ok=True)
    empty = tmp_path / "no-driver"
    empty.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "LD_LIBRARY_PATH": str(lib_dir or empty),
        "FAKE_NVML_STATE": str(state_file),
        "FAKE_NVML_LOG": str(log),
    }
    args = [json.dumps(spec), str(reads), str(threads)]
    proc = subprocess.run(
        # -W error::FutureWarning: the deprecated `pynvml` wrapper package warns on import;
        # the project depends on nvidia-ml-py, which must import silently.
        [sys.executable, "-W", "error::FutureWarning", "-c", _READER, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    calls = log.read_text().split() if log.exists() else []
    return [_snapshot(d) for d in json.loads(proc.stdout)], calls


def read(
    snapshot: GpuSnapshot,
    spec: GpuSpec,
    *,
    job_pids: frozenset[int] | None = None,
    visible_pids: frozenset[int] | None = None,
    nspid: Mapping[int, int] | None = None,
    state: GpuWindow | None = None,
    now: float | None = None,
):
    reading, window = gpu_reading(
        snapshot,
        spec,
        job_pids=job_pids,
        visible_pids=visible() if visible_pids is None else visible_pids,
        nspid=nspid or {},
        state=state,
        now=(snapshot.read_at or 0.0) if now is None else now,
        host="test-host",
    )
    assert set(reading.evidence) >= EVIDENCE_KEYS, set(reading.evidence) ^ EVIDENCE_KEYS
    json.dumps(reading.to_json())  # the CLI's --json must serialise every reading
    return reading, window


def run_sections(bin_dir: Path | None, *, path_extra: str = "/usr/bin:/bin") -> dict[str, bytes]:
    """Run each remote snippet the way the probe does: /bin/sh, a reset environment."""
    path = f"{bin_dir}:{path_extra}" if bin_dir else path_extra
    out = {}
    for name, snippet in REMOTE_SECTIONS.items():
        proc = subprocess.run(
            ["/bin/sh", "-c", snippet],
            capture_output=True,
            env={"PATH": path, "LC_ALL": "C"},
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == b"", proc.stderr  # stderr is captured into the section
        out[name] = proc.stdout
    return out


def smi_state(tmp_path: Path, gpu: str, apps: str = "", rc: int = 0, stderr: str = "") -> Path:
    bin_dir = tmp_path / "bin"
    state = install_fake_smi(bin_dir)
    (state / "gpu.csv").write_text(textwrap.dedent(gpu))
    (state / "apps.csv").write_text(textwrap.dedent(apps))
    (state / "rc").write_text(str(rc))
    (state / "stderr").write_text(stderr)
    return bin_dir


def device(index: int, uuid: str, pct: float | None, procs=(), mem=92000.0) -> GpuDevice:
    return GpuDevice(index, uuid, "H200", pct, mem, 143771.0, tuple(procs))


def snap(*devices: GpuDevice, at: float = 1000.0) -> GpuSnapshot:
    return GpuSnapshot(True, None, "550.54.15", devices, read_at=at, source="nvidia-smi")


# --------------------------------------------------------------------------- local NVML


def test_incident_2_memory_held_at_zero_percent_is_idle_with_the_job_on_the_gpu(
    fake_lib: Path, tmp_path: Path
) -> None:
    # 92 GB allocated, 0 %, the job's PID holding it. The GPU says idle (done) with the job's
    # PID on the GPU; the verdict turns "GPU idle + process progressing" into running.
    job = os.getpid()
    [snapshot], _ = nvml_read(fake_lib, tmp_path, INCIDENT_2.format(job=job))
    assert snapshot.ok, snapshot.error
    assert snapshot.source == "nvml"
    assert snapshot.driver_version == "580.82.07"
    [dev] = snapshot.devices
    assert (dev.uuid, dev.memory_used_mib, dev.utilization_pct) == (GPU0, 92000.0, 0.0)
    assert len(dev.samples) == 5  # the driver's recent samples, within one check

    reading, _ = read(snapshot, GpuSpec(idle_for="4s"), job_pids=frozenset({job}))
    ev = reading.evidence
    assert reading.says is Says.DONE, reading.detail
    assert ev["idle"] is True
    assert ev["attribution"] == "pids"
    assert ev["job_pids_on_gpu"] == [job]
    assert ev["job_memory_mib"] == 92000.0
    assert ev["job_gpu_busy"] is False
    assert ev["samples"] == 6 and ev["window_seconds"] >= 4.0
    assert "memory is not activity" in reading.detail
    assert ev["devices"][0]["memory_used_mib"] == 92000.0
    assert reading.read_at == snapshot.read_at and reading.host == "test-host"

    # The same GPU with idle_for longer than the samples reach: not established, not done.
    reading, _ = read(snapshot, GpuSpec(idle_for="60s"), job_pids=frozenset({job}))
    ev = reading.evidence
    assert reading.says is Says.WORKING
    assert ev["idle"] is None
    assert ev["job_pids_on_gpu"] == [job]
    assert "of 60s" in reading.detail and "not yet established" in reading.detail


def test_busy_gpu_is_working(fake_lib: Path, tmp_path: Path) -> None:
    job = os.getpid()
    state = f"""\
        device {GPU0} 97 92000 97887 H200
        sample 2000 95
        sample 1000 99
        proc {job} 92000
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state)
    reading, _ = read(snapshot, GpuSpec(), job_pids=frozenset({job}))
    assert reading.says is Says.WORKING
    assert reading.evidence["idle"] is False
    assert reading.evidence["job_gpu_busy"] is True
    assert "GPU 0 reached 99%" in reading.detail


def test_one_busy_sample_interrupts_an_idle_window(fake_lib: Path, tmp_path: Path) -> None:
    state = f"""\
        device {GPU0} 0 92000 97887 H200
        sample 5000 0
        sample 4000 0
        sample 3000 41
        sample 2000 0
        sample 1000 0
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state)
    reading, _ = read(snapshot, GpuSpec(idle_for="4s"))
    assert reading.says is Says.WORKING
    assert reading.evidence["idle"] is False
    assert "41%" in reading.detail
    assert reading.evidence["attribution"] == "device"  # no process signal configured


def test_pids_0_and_ffffffff_are_dropped(fake_lib: Path, tmp_path: Path) -> None:
    job = os.getpid()
    state = f"""\
        device {GPU0} 0 3000 97887 H200
        proc 0 1000
        proc 4294967295 1000
        proc {job} 1000
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state)
    [dev] = snapshot.devices
    assert [p.pid for p in dev.processes] == [job]
    assert dev.dropped_pids == 2
    reading, _ = read(snapshot, GpuSpec(), job_pids=frozenset({job}))
    # Dropped PIDs do not make attribution impossible: they are nobody's.
    assert reading.evidence["attribution"] == "pids"
    assert reading.evidence["dropped_pids"] == 2


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        ("nvmlInitWithFlags 9", "NVML unavailable: Driver Not Loaded"),
        ("nvmlDeviceGetUtilizationRates 15", "nvmlDeviceGetUtilizationRates on GPU 0: GPU is lost"),
        ("nvmlDeviceGetMemoryInfo 42 0", "nvmlDeviceGetMemoryInfo on GPU 0: fake NVML error 42"),
        ("nvmlDeviceGetCount_v2 999", "NVML: Unknown Error"),
    ],
)
def test_nvml_error_is_unknown_with_the_reason(
    fake_lib: Path, tmp_path: Path, fail: str, expected: str
) -> None:
    state = f"""\
        device {GPU0} 0 92000 97887 H200
        fail {fail}
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state)
    assert not snapshot.ok
    assert snapshot.error == expected
    reading, _ = read(snapshot, GpuSpec())
    assert reading.says is Says.UNKNOWN
    assert reading.evidence["idle"] is None
    assert expected in reading.detail and reading.evidence["error"] == expected


def test_unsupported_utilisation_is_unknown_not_idle(fake_lib: Path, tmp_path: Path) -> None:
    [snapshot], _ = nvml_read(fake_lib, tmp_path, f"device {GPU0} NA 100 97887 H200\n")
    assert snapshot.ok and snapshot.devices[0].utilization_pct is None
    reading, _ = read(snapshot, GpuSpec())
    assert reading.says is Says.UNKNOWN
    assert "utilisation not reported for GPU 0" in reading.detail


def test_missing_driver_is_unknown(tmp_path: Path) -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("a real libnvidia-ml.so.1 is installed: cannot simulate its absence")
    [snapshot], calls = nvml_read(None, tmp_path, "")
    assert not snapshot.ok and calls == []
    assert snapshot.error == "NVML unavailable: NVML Shared Library Not Found"
    reading, _ = read(snapshot, GpuSpec())
    assert reading.says is Says.UNKNOWN
    assert "not read" in reading.detail


def test_nvml_is_initialised_once_per_process(fake_lib: Path, tmp_path: Path) -> None:
    snaps, calls = nvml_read(fake_lib, tmp_path, f"device {GPU0} 0 1 97887 H200\n", reads=3, threads=4)
    assert len(snaps) == 12 and all(s.ok for s in snaps)
    assert calls.count("nvmlInitWithFlags") == 1
    assert "nvmlShutdown" not in calls


@pytest.mark.parametrize("devices", [[1], ["1"], [GPU1]])
def test_devices_filter_by_index_and_uuid(fake_lib: Path, tmp_path: Path, devices: list) -> None:
    state = f"""\
        device {GPU0} 99 92000 97887 H200
        device {GPU1} 0 92000 97887 H200
        sample 3000 0
        sample 1000 0
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state, devices=devices)
    assert [d.uuid for d in snapshot.devices] == [GPU1]
    reading, _ = read(snapshot, GpuSpec(devices=devices, idle_for="2s"))
    assert reading.says is Says.DONE  # GPU 0 is busy, but it is not configured
    assert [d["index"] for d in reading.evidence["devices"]] == [1]


def test_configured_gpu_that_is_missing_is_unknown() -> None:
    snapshot = snap(device(0, GPU0, 0.0))
    for devices in ([3], ["GPU-gone"], [0, 3]):
        reading, _ = read(snapshot, GpuSpec(devices=devices))
        assert reading.says is Says.UNKNOWN, devices
        assert f"not found (GPUs here: 0 {GPU0})" in reading.detail
    reading, _ = read(snap(), GpuSpec())
    assert reading.says is Says.UNKNOWN and "no GPU" in reading.detail


def test_missing_configured_gpu_lists_the_gpus_that_exist(fake_lib: Path, tmp_path: Path) -> None:
    # read_local reads only the configured GPUs in detail, but says which exist; the reading
    # reports the missing one against those, locally and remotely alike.
    state = f"""\
        device {GPU0} 0 92000 97887 H200
        device {GPU1} 0 92000 97887 H200
    """
    [local], _ = nvml_read(fake_lib, tmp_path, state, devices=[3])
    assert local.ok and local.devices == ()
    assert local.gpus == ((0, GPU0), (1, GPU1))
    remote = parse_remote(run_sections(smi_state(tmp_path, SMI_GPUS)))
    assert remote.gpus == ((0, GPU0), (1, GPU1))
    for snapshot in (local, remote):
        reading, _ = read(snapshot, GpuSpec(devices=[3]))
        assert reading.says is Says.UNKNOWN
        assert reading.detail == f"configured GPU 3 not found (GPUs here: 0 {GPU0}, 1 {GPU1})"


# --------------------------------------------------------------------------- attribution


def test_gpu_busy_by_another_process_says_whose(
    fake_lib: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    job = os.getpid()
    state = f"""\
        device {GPU0} 0 92000 97887 H200
        sample 3000 0
        sample 1000 0
        proc {job} 92000
        device {GPU1} 95 40000 97887 H200
        sample 3000 90
        sample 1000 95
        proc {sleeper.pid} 40000
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state)
    reading, _ = read(snapshot, GpuSpec(idle_for="2s"), job_pids=frozenset({job}))
    ev = reading.evidence
    assert reading.says is Says.DONE, reading.detail  # the busy GPU is not the job's work
    assert ev["attribution"] == "pids"
    assert ev["other_processes"] == [
        {"pid": sleeper.pid, "name": "sleep", "used_memory_mib": 40000.0, "gpu": GPU1}
    ]
    assert f"not the job's: PID {sleeper.pid} (sleep) on GPU 1" in reading.detail
    assert ev["job_gpu_busy"] is False

    # Without a process signal nobody can say whose: device level, the busy GPU counts.
    reading, _ = read(snapshot, GpuSpec(idle_for="2s"), job_pids=None)
    assert reading.says is Says.WORKING
    assert reading.evidence["attribution"] == "device"
    assert reading.evidence["other_processes"] == []


def test_busy_gpu_with_the_jobs_identity_unknown_reads_busy_not_idle(
    fake_lib: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    # Issue 9.3: a process signal that found no job process (never seen alive, or a match that
    # misses the job) is no identity. Filing every GPU process as "not the job's" read a GPU at
    # 100 % as idle; now every configured GPU counts and the evidence says why.
    state = f"""\
        device {GPU0} 100 40000 97887 H200
        sample 3000 100
        sample 1000 100
        proc {sleeper.pid} 40000
    """
    [snapshot], _ = nvml_read(fake_lib, tmp_path, state)
    reading, _ = read(snapshot, GpuSpec(idle_for="2s"), job_pids=frozenset())
    ev = reading.evidence
    assert reading.says is Says.WORKING, reading.detail
    assert ev["idle"] is False
    assert ev["attribution"].startswith("unknown: the job's PIDs are not known")
    assert ev["other_processes"] == [] and ev["job_pids_on_gpu"] == []
    assert ev["job_gpu_busy"] is None  # nobody's: not progress, not "still busy after exit"
    assert "GPU 0 reached 100%" in reading.detail
    assert f"whose is not known (the job's PIDs are not known): PID {sleeper.pid} (sleep)" in reading.detail
    assert ev["gpu_processes"][0]["pid_here"] == sleeper.pid

    # The same GPU with the job's identity known (its PIDs, none on this GPU): used only by
    # another process, it is discounted.
    reading, _ = read(snapshot, GpuSpec(idle_for="2s"), job_pids=frozenset({os.getpid()}))
    assert reading.says is Says.DONE, reading.detail
    assert reading.evidence["attribution"] == "pids"
    assert reading.evidence["other_processes"][0]["pid"] == sleeper.pid


def test_identity_unknown_idle_gpu_is_still_idle() -> None:
    # Device level cuts both ways: an idle GPU with unknown attribution is idle.
    spec = GpuSpec(idle_for="30s")
    window = None
    for t in (1000.0, 1030.0):
        dev = device(0, GPU0, 0.0, [GpuProcess(77, 500.0, "x")])
        reading, window = read(
            snap(dev, at=t), spec, job_pids=frozenset(), visible_pids=frozenset({77}), state=window
        )
    assert reading.says is Says.DONE, reading.detail
    assert reading.evidence["attribution"].startswith("unknown:")


def test_checker_seam_remote_discounts_others_only_with_a_known_identity(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    # Through the real remote snippets (fake nvidia-smi) and the Checker's seam: GPU 1 at 95 %
    # held by another process, GPU 0 idle with no process.
    smi_at = 1771876443.12  # SMI_GPUS's timestamp (UTC)
    apps = f"{GPU1}, {sleeper.pid}, sleep, 40000\n"
    bin_dir = smi_state(tmp_path, SMI_GPUS, apps)

    def checker() -> SimpleNamespace:
        return SimpleNamespace(
            stage=SimpleNamespace(gpu=GpuSpec(idle_for="30s")),
            host=SimpleNamespace(nvml=False, name="gpu-host"),
            _memory=SimpleNamespace(gpu=None),
        )

    # Never seen alive: no PIDs now, none remembered → every GPU counts; GPU 1 is busy.
    never = checker()
    reading = read_for_checker(never, run_sections(bin_dir), SimpleNamespace(now=smi_at), frozenset())
    assert reading.says is Says.WORKING, reading.detail
    assert reading.evidence["attribution"].startswith("unknown:")
    assert "GPU 1 reached 95%" in reading.detail and f"PID {sleeper.pid} (sleep) on GPU 1" in reading.detail
    assert never._memory.gpu.last_job_pids == frozenset()

    # Seen alive (our PID, on no GPU), then gone: its last PIDs are its identity, so GPU 1,
    # used only by another process, is discounted and GPU 0's idle decides.
    seen = checker()
    first = read_for_checker(
        seen, run_sections(bin_dir), SimpleNamespace(now=smi_at), frozenset({os.getpid()})
    )
    assert first.evidence["attribution"] == "pids" and first.says is Says.WORKING  # not yet established
    state = bin_dir / "smi-state"
    (state / "gpu.csv").write_text(textwrap.dedent(SMI_GPUS).replace("19:54:03.", "19:54:38."))
    later = read_for_checker(seen, run_sections(bin_dir), SimpleNamespace(now=smi_at + 35.0), frozenset())
    assert later.says is Says.DONE, later.detail
    assert later.evidence["attribution"] == "pids"
    assert later.evidence["other_processes"][0]["pid"] == sleeper.pid
    assert f"not the job's: PID {sleeper.pid} (sleep) on GPU 1" in later.detail


def test_shared_gpu_busy_counts_for_the_job() -> None:
    # The job and another process on one busy GPU: utilisation cannot be split, so working.
    snapshot = snap(device(0, GPU0, 80.0, [GpuProcess(10, 1000.0), GpuProcess(11, 500.0, "x")]))
    reading, _ = read(snapshot, GpuSpec(), job_pids=frozenset({10}), visible_pids=frozenset({10, 11}))
    assert reading.says is Says.WORKING
    assert reading.evidence["job_gpu_busy"] is True
    assert reading.evidence["other_processes"][0]["pid"] == 11


def test_host_pid_mapped_through_nspid() -> None:
    # NVML reports the job's PID as the nested namespace sees it (12); /proc here shows 4455.
    nspid_text = (
        "/proc/4455/status:NSpid:\t4455\t12\n/proc/4460/status:NSpid:\t4460\t17\n"
        "/proc/1/status:NSpid:\t1\n/proc/99/stat"  # a truncated last line is skipped
    )
    nspid, seen = parse_nspid(nspid_text)
    assert nspid == {12: 4455, 17: 4460} and seen == {1, 4455, 4460}
    snapshot = snap(device(0, GPU0, 0.0, [GpuProcess(12, 92000.0, "python3")]))
    reading, _ = read(snapshot, GpuSpec(), job_pids=frozenset({4455, 4460}), visible_pids=seen, nspid=nspid)
    assert reading.evidence["attribution"] == "pids"
    assert reading.evidence["job_pids_on_gpu"] == [4455]
    assert reading.evidence["gpu_processes"][0]["pid_here"] == 4455
    assert reading.evidence["job_memory_mib"] == 92000.0


def test_nested_pids_shared_by_two_processes_are_not_mapped() -> None:
    nspid, _ = parse_nspid("/proc/50/status:NSpid:\t50\t1\n/proc/60/status:NSpid:\t60\t1\n")
    assert nspid == {}


def test_unmapped_host_pids_make_attribution_impossible() -> None:
    # Inside a container NVML reports host PIDs this /proc does not show: say so, and fall
    # back to the configured GPUs' device-level readings (busy → working).
    snapshot = snap(device(0, GPU0, 60.0, [GpuProcess(4455, 92000.0, "python3")]))
    reading, _ = read(
        snapshot, GpuSpec(), job_pids=frozenset({12}), visible_pids=frozenset({1, 12}), nspid={}
    )
    ev = reading.evidence
    assert ev["attribution"].startswith("impossible: GPU PIDs 4455 are not visible here")
    assert ev["job_pids_on_gpu"] == [] and ev["job_memory_mib"] is None
    assert ev["job_gpu_busy"] is None
    assert reading.says is Says.WORKING


def test_local_nspid_map_sees_a_real_nested_pid_namespace(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    # `sleep` becomes PID 1 of a new PID namespace; /proc here shows it under its outer PID.
    proc = subprocess.Popen(
        [unshare, "--user", "--map-root-user", "--pid", "--kill-child", "sleep", "300"],
        stderr=subprocess.PIPE,
    )
    try:
        outer = None
        for _ in range(200):
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
            kids = children.read_text().split() if children.exists() else []
            if kids:
                outer = int(kids[0])
                if "\t1" in Path(f"/proc/{outer}/status").read_text().split("NSpid:")[1]:
                    break
            if proc.poll() is not None:
                pytest.skip(f"cannot create a PID namespace here: {proc.stderr.read()!r}")
            subprocess.run(["sleep", "0.05"], check=False)
        assert outer is not None
        status = Path(f"/proc/{outer}/status").read_text()
        assert f"NSpid:\t{outer}\t1" in status
        nested_ones = [
            ln for ln in _all_nspid().splitlines() if ln.split("\t")[1:] == [ln.split("\t")[1], "1"]
        ]
        if len(nested_ones) > 1:
            pytest.skip("another nested PID namespace has a PID 1 too: 1 is ambiguous here")
        assert local_nspid_map()[1] == outer
    finally:
        proc.kill()
        proc.wait()


def test_local_nspid_lists_proc_once_for_map_and_visible_pids() -> None:
    mapping, seen = local_nspid()
    assert os.getpid() in seen and os.getppid() in seen
    assert mapping == local_nspid_map()
    assert local_nspid("/nonexistent") == ({}, frozenset())


def _all_nspid() -> str:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                    if line.startswith("NSpid:"):
                        out.append(f"/proc/{entry}/status:{line}")
            except OSError:
                continue
    return "\n".join(out)


# --------------------------------------------------------------------------- window across checks


def test_window_across_checks_one_busy_sample_then_idle() -> None:
    spec = GpuSpec(idle_for="60s")
    history = [(0, 0.0), (30, 50.0), (60, 0.0), (90, 0.0), (120, 0.0), (150, 0.0)]
    says = []
    window = None
    for t, pct in history:
        reading, window = read(snap(device(0, GPU0, pct), at=1000.0 + t), spec, state=window)
        says.append(str(reading.says))
    # Busy at t=30 keeps it working until a window with no busy sample reaches back 60 s
    # (the anchor sample before the window's start must be idle too: one check of caution).
    assert says == ["working", "working", "working", "working", "working", "done"]
    assert reading.evidence["samples"] == 4  # 60 (anchor), 90, 120, 150
    assert reading.evidence["window_seconds"] == 90.0
    assert "4 samples below 5% over 90s" in reading.detail
    assert len(window.samples) == 4  # pruned


def test_window_does_not_double_count_samples_and_bounds_memory() -> None:
    spec = GpuSpec(idle_for="3600s")
    window = None
    for check in range(5):
        t = 1000.0 + 30 * check
        samples = tuple((t - 60 + i * 0.25, 0.0) for i in range(240))  # overlapping 60 s
        dev = dataclasses.replace(device(0, GPU0, 0.0), samples=samples)
        _, window = read(snap(dev, at=t), spec, state=window)
    assert len(window.samples) <= 5 * 9  # at most 8 buckets + the rate per check
    timestamps = [s[0] for s in window.samples]
    assert timestamps == sorted(set(timestamps))


FAILED_READ = GpuSnapshot(False, "nvidia-smi --query-gpu timed out", None, source="nvidia-smi")


def test_failed_read_keeps_only_busy_samples() -> None:
    # Busy still wins after a blind spell; idle must be shown again.
    spec = GpuSpec(idle_for="60s")
    _, window = read(snap(device(0, GPU0, 50.0), device(1, GPU1, 0.0), at=1000.0), spec)
    assert len(window.samples) == 2
    reading, after = read(FAILED_READ, spec, state=window, now=1030.0)
    assert reading.says is Says.UNKNOWN
    assert after.samples == ((1000.0, GPU0, 50.0, 1),)
    reading, _ = read(snap(device(0, GPU0, 0.0), device(1, GPU1, 0.0), at=1040.0), spec, state=after)
    assert reading.says is Says.WORKING and "GPU 0 reached 50%" in reading.detail


def test_failed_reads_between_two_idle_samples_do_not_make_done() -> None:
    # One 0 % sample, ten minutes of failed reads (SSH down), one 0 % sample: the GPU may have
    # been busy all along. Idle is established afresh, by samples taken after the blind spell.
    spec = GpuSpec(idle_for="60s")
    _, window = read(snap(device(0, GPU0, 0.0), at=1000.0), spec)
    for t in range(1030, 1600, 30):
        reading, window = read(FAILED_READ, spec, state=window, now=float(t))
        assert reading.says is Says.UNKNOWN
    assert window.samples == ()
    says = []
    for t in (1600.0, 1630.0, 1660.0):
        reading, window = read(snap(device(0, GPU0, 0.0), at=t), spec, state=window)
        says.append(str(reading.says))
    assert says == ["working", "working", "done"]
    assert "3 samples below 5% over 60s" in reading.detail


def test_a_gap_with_no_reads_does_not_make_done() -> None:
    # No check ran for ten minutes (the watcher was suspended): nothing was looked at then.
    spec = GpuSpec(idle_for="60s")
    _, window = read(snap(device(0, GPU0, 0.0), at=1000.0), spec)
    reading, window = read(snap(device(0, GPU0, 0.0), at=1600.0), spec, state=window)
    ev = reading.evidence
    assert reading.says is Says.WORKING, reading.detail
    assert ev["idle"] is None
    assert ev["samples"] == 1 and ev["window_seconds"] == 0.0
    assert ev["sample_gap_seconds"] == 600.0 and ev["max_sample_gap_seconds"] == 90.0
    assert "not yet established: no sample for 600s before that (more than 90s" in reading.detail
    # Samples after the gap establish idle on their own.
    for t in (1630.0, 1660.0):
        reading, window = read(snap(device(0, GPU0, 0.0), at=t), spec, state=window)
    assert reading.says is Says.DONE, reading.detail
    assert reading.evidence["window_seconds"] == 60.0


def test_sampling_sparser_than_idle_for_never_makes_done() -> None:
    # Remotely one sample per check: checks 30 s apart cannot show 10 s of idle.
    spec = GpuSpec(idle_for="10s")
    window = None
    for check in range(10):
        reading, window = read(snap(device(0, GPU0, 0.0), at=1000.0 + 30 * check), spec, state=window)
        assert reading.says is Says.WORKING, reading.detail
    assert reading.evidence["sample_gap_seconds"] == 30.0
    assert "no sample for 30s before that (more than 15s, 1.5 times idle_for)" in reading.detail
    assert "need a longer gpu.idle_for" in reading.detail
    # Within the bound (30 s <= 1.5 x 25 s, room for the jitter of checks) idle is shown.
    spec = GpuSpec(idle_for="25s")
    window = None
    says = []
    for check in range(3):
        reading, window = read(snap(device(0, GPU0, 0.0), at=1000.0 + 30 * check), spec, state=window)
        says.append(str(reading.says))
    assert says == ["working", "done", "done"]
    assert reading.evidence["sample_gap_seconds"] is None


def test_utilisation_not_reported_now_is_unknown_even_after_idle_samples() -> None:
    # 0 %, 0 %, then [N/A] / NotSupported: the window alone would say idle; the GPU no longer
    # answers, so it is unknown, never idle for want of an answer.
    spec = GpuSpec(idle_for="30s")
    window = None
    for t, pct in ((1000.0, 0.0), (1030.0, 0.0)):
        reading, window = read(snap(device(0, GPU0, pct), at=t), spec, state=window)
    assert reading.says is Says.DONE
    reading, after = read(snap(device(0, GPU0, None), at=1060.0), spec, state=window)
    assert reading.says is Says.UNKNOWN, reading.detail
    assert "utilisation not reported for GPU 0" in reading.detail
    # Busy still wins over a GPU that stopped answering.
    _, window = read(snap(device(0, GPU0, 60.0), at=1000.0), spec)
    reading, _ = read(snap(device(0, GPU0, None), at=1010.0), spec, state=window)
    assert reading.says is Says.WORKING and "GPU 0 reached 60%" in reading.detail
    # The rate unsupported but the driver's samples present (local NVML): those answer.
    dev = dataclasses.replace(device(0, GPU0, None), samples=((1059.0, 0.0), (1060.0, 0.0)))
    reading, _ = read(snap(dev, at=1060.0), spec, state=after)
    assert reading.says is Says.DONE, reading.detail


# --------------------------------------------------------------------------- remote nvidia-smi

SMI_GPUS = f"""\
    2026/02/23 19:54:03.120, 0, {GPU0}, NVIDIA RTX PRO 6000 Blackwell, 0, 92000, 97887, 580.82.07
    2026/02/23 19:54:03.121, 1, {GPU1}, NVIDIA RTX PRO 6000 Blackwell, 95, 40000, 97887, 580.82.07
"""


def test_remote_sections_through_fake_nvidia_smi(tmp_path: Path) -> None:
    job = os.getpid()
    apps = f"""\
        {GPU0}, {job}, /root/ml-env/bin/python3 -u /tmp/02b_extract, 92000
        {GPU1}, 0, [Not Found], 10
        {GPU1}, 4294967295, [Not Found], 10
        {GPU1}, 31337, /usr/bin/other, app, 40000
    """
    bin_dir = smi_state(tmp_path, SMI_GPUS, apps, stderr="WARNING: infoROM is corrupted\n")
    sections = run_sections(bin_dir)
    calls = (bin_dir / "smi-state" / "calls").read_text()
    assert calls.count("LC_ALL=C TZ=UTC --query-") == 2

    snapshot = parse_remote(sections)
    assert snapshot.ok, snapshot.error
    assert snapshot.source == "nvidia-smi" and snapshot.driver_version == "580.82.07"
    assert snapshot.read_at == 1771876443.12  # 2026-02-23T19:54:03.120Z
    d0, d1 = snapshot.devices
    assert (d0.uuid, d0.utilization_pct, d0.memory_used_mib) == (GPU0, 0.0, 92000.0)
    assert d0.processes == (GpuProcess(job, 92000.0, "/root/ml-env/bin/python3 -u /tmp/02b_extract"),)
    assert d1.processes == (GpuProcess(31337, 40000.0, "/usr/bin/other, app"),)
    assert d1.dropped_pids == 2

    _, seen = remote_nspid_map(sections)
    assert job in seen
    reading, _ = read(snapshot, GpuSpec(devices=[0]), job_pids=frozenset({job}), visible_pids=seen)
    assert reading.evidence["job_pids_on_gpu"] == [job]
    assert reading.evidence["source"] == "nvidia-smi"
    # 31337 is on GPU 1, which is not configured: attribution is about the configured GPUs.
    assert reading.evidence["attribution"] == "pids"


def test_remote_na_values_are_none(tmp_path: Path) -> None:
    gpu = f"2026/02/23 19:54:03.120, 0, {GPU0}, NVIDIA A100 (MIG), [N/A], [Not Supported], 81920, [N/A]\n"
    snapshot = parse_remote(run_sections(smi_state(tmp_path, gpu)))
    assert snapshot.ok, snapshot.error
    [dev] = snapshot.devices
    assert (dev.utilization_pct, dev.memory_used_mib, dev.memory_total_mib) == (None, None, 81920.0)
    assert snapshot.driver_version is None
    reading, _ = read(snapshot, GpuSpec())
    assert reading.says is Says.UNKNOWN  # [N/A] utilisation is not 0 %


def test_remote_without_nvidia_smi_is_unknown() -> None:
    if shutil.which("nvidia-smi", path="/usr/bin:/bin"):
        pytest.skip("a real nvidia-smi is installed in /usr/bin or /bin")
    sections = run_sections(None)
    assert sections["gpu_query"] == b"@@missing nvidia-smi\n"
    snapshot = parse_remote(sections)
    assert not snapshot.ok
    assert snapshot.error == "nvidia-smi not found on the host (no NVIDIA driver?)"
    reading, _ = read(snapshot, GpuSpec(), now=5.0)
    assert reading.says is Says.UNKNOWN
    assert "nvidia-smi not found" in reading.detail


@pytest.mark.parametrize(
    ("gpu", "rc", "stderr", "expected"),
    [
        ("Segmentation fault\n", 0, "", "--query-gpu line 1 unparseable: 'Segmentation fault'"),
        (f"x, 0, {GPU0}, H200, 12%, 1, 2, 550\n", 0, "", "utilization.gpu is not a number: '12%'"),
        (f"x, 0, {GPU0}, H200, 1, 2\n", 0, "", "--query-gpu line 1 unparseable"),
        (
            "",
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            "nvidia-smi --query-gpu exited with 9: NVIDIA-SMI has failed because it couldn't",
        ),
        ("", 124, "", "nvidia-smi --query-gpu timed out"),
    ],
)
def test_remote_garbled_or_failed_smi_is_unknown(
    tmp_path: Path, gpu: str, rc: int, stderr: str, expected: str
) -> None:
    snapshot = parse_remote(run_sections(smi_state(tmp_path, gpu, rc=rc, stderr=stderr)))
    assert not snapshot.ok
    assert expected in (snapshot.error or "")
    reading, _ = read(snapshot, GpuSpec(), now=5.0)
    assert reading.says is Says.UNKNOWN


def test_remote_truncated_or_missing_sections_are_unknown(tmp_path: Path) -> None:
    sections = run_sections(smi_state(tmp_path, SMI_GPUS))
    cut = dict(sections, gpu_query=sections["gpu_query"][:60])  # the probe's head -c cut it
    assert "truncated" in (parse_remote(cut).error or "")
    assert "missing: gpu_apps" in (parse_remote({"gpu_query": sections["gpu_query"]}).error or "")
    bad_apps = dict(sections, gpu_apps=b"|garbage\n|@@exit 0\n")
    assert "--query-compute-apps line 1 unparseable" in (parse_remote(bad_apps).error or "")
    # A line the probe did not tag (not output, not a marker) garbles the section; an exit
    # line that is not the last output line is output (a process name may hold a newline).
    untagged = dict(sections, gpu_apps=b"GPU-0, 1, x, 5\n|@@exit 0\n")
    assert "neither output nor marker" in (parse_remote(untagged).error or "")
    forged = dict(sections, gpu_apps=b"|@@exit 0\n|GPU-0, 1, x\n")
    assert "truncated" in (parse_remote(forged).error or "")


def test_remote_reading_matches_local_for_the_same_facts(
    fake_lib: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    # The same GPU facts through either real reader (fake NVML, fake nvidia-smi through the
    # probe's snippets) give the same snapshot and the same readings: the host seam's promise.
    job = os.getpid()
    name = "NVIDIA RTX PRO 6000 Blackwell"
    facts = [  # uuid, util %, memory used MiB, (pid, MiB, name) holding a context
        (GPU0, 0, 92000, (job, 92000, "python3")),
        (GPU1, 95, 40000, (sleeper.pid, 40000, "sleep")),
    ]
    nvml_state = "driver 580.82.07\n" + "".join(
        f"device {uuid} {util} {mem} 97887 {name}\nproc {pid} {used}\n"
        for uuid, util, mem, (pid, used, _) in facts
    )
    smi_gpus = "".join(
        f"2026/02/23 19:54:03.120, {i}, {uuid}, {name}, {util}, {mem}, 97887, 580.82.07\n"
        for i, (uuid, util, mem, _) in enumerate(facts)
    )
    smi_apps = "".join(f"{uuid}, {pid}, {pname}, {used}\n" for uuid, _, _, (pid, used, pname) in facts)

    [local], _ = nvml_read(fake_lib, tmp_path, nvml_state)
    sections = run_sections(smi_state(tmp_path, smi_gpus, smi_apps))
    remote = parse_remote(sections)
    assert local.ok and remote.ok, (local.error, remote.error)
    assert (local.source, remote.source) == ("nvml", "nvidia-smi")
    assert local.driver_version == remote.driver_version == "580.82.07"
    assert local.gpus == remote.gpus == ((0, GPU0), (1, GPU1))

    def facts_of(s: GpuSnapshot) -> list:
        return [
            (d.index, d.uuid, d.name, d.utilization_pct, d.memory_used_mib, d.memory_total_mib)
            for d in s.devices
        ] + [(p.pid, p.used_memory_mib) for d in s.devices for p in d.processes]

    assert facts_of(local) == facts_of(remote)

    _, remote_visible = remote_nspid_map(sections)
    spec = GpuSpec(idle_for="30s")
    readings = {}
    for snapshot, seen in ((local, visible()), (remote, remote_visible)):
        window = None
        history = []
        for t in (0.0, 15.0, 30.0):  # one clock for both: each check at the same moment
            at_t = dataclasses.replace(snapshot, read_at=1000.0 + t)
            reading, window = read(at_t, spec, job_pids=frozenset({job}), visible_pids=seen, state=window)
            history.append(reading)
        readings[snapshot.source] = history

    def summary(r):
        ev = r.evidence
        keys = ("idle", "job_pids_on_gpu", "job_memory_mib", "job_gpu_busy", "attribution")
        others = [(o["pid"], o["name"], o["used_memory_mib"], o["gpu"]) for o in ev["other_processes"]]
        return (str(r.says), r.detail, *(ev[k] for k in keys), ev["samples"], ev["window_seconds"], others)

    local_says = [summary(r) for r in readings["nvml"]]
    remote_says = [summary(r) for r in readings["nvidia-smi"]]
    assert local_says == remote_says
    assert [s[0] for s in local_says] == ["working", "working", "done"]
    final = readings["nvml"][-1].evidence
    assert final["idle"] is True and final["job_pids_on_gpu"] == [job]
    assert final["job_memory_mib"] == 92000.0 and final["attribution"] == "pids"
    assert final["other_processes"][0]["pid"] == sleeper.pid  # GPU 1's 95 % is not the job's


def test_read_local_in_process_never_raises() -> None:
    # Whatever this machine has (a driver or none), read_local answers with a snapshot.
    snapshot = read_local(GpuSpec())
    assert isinstance(snapshot, GpuSnapshot)
    assert snapshot.ok or snapshot.error


def test_checker_seam_remote_remembers_the_window_and_last_job_pids(tmp_path: Path) -> None:
    job = os.getpid()
    apps = f"{GPU0}, {job}, python3, 92000\n"
    sections = run_sections(smi_state(tmp_path, SMI_GPUS, apps))
    checker = SimpleNamespace(
        stage=SimpleNamespace(gpu=GpuSpec(devices=[0], idle_for="30s")),
        host=SimpleNamespace(nvml=False, name="gpu-host"),
        _memory=SimpleNamespace(gpu=None),
    )
    # meta.now is the monitored host's clock, the one nvidia-smi's timestamp is on.
    smi_at = 1771876443.12  # SMI_GPUS's 2026/02/23 19:54:03.120 (UTC)
    first = read_for_checker(checker, sections, SimpleNamespace(now=smi_at + 0.5), frozenset({job}))
    assert first.says is Says.WORKING and first.host == "gpu-host"
    assert "not yet established" in first.detail
    assert first.evidence["job_pids_on_gpu"] == [job]
    memory = checker._memory.gpu
    assert isinstance(memory, GpuMemory) and memory.last_job_pids == {job}
    assert [s[0] for s in memory.window.samples] == [smi_at]

    # 35 s later GPU 0 is still at 0 %; the process signal now says gone (no PIDs).
    state = tmp_path / "bin" / "smi-state"
    (state / "gpu.csv").write_text(textwrap.dedent(SMI_GPUS).replace("19:54:03.", "19:54:38."))
    sections = run_sections(tmp_path / "bin")
    later = read_for_checker(checker, sections, SimpleNamespace(now=smi_at + 35.5), frozenset())
    window = checker._memory.gpu.window
    assert [s[0] for s in window.samples] == [smi_at, smi_at + 35.0]  # the window grew
    assert later.says is Says.DONE, later.detail
    assert later.evidence["samples"] == 2 and later.evidence["window_seconds"] == 35.5
    assert "2 samples below 5% over 36s" in later.detail
    # The last known PIDs still attribute.
    assert later.evidence["job_pids_on_gpu"] == [job]
    assert checker._memory.gpu.last_job_pids == {job}


def test_status_cli_never_completes_on_a_gpu_busy_with_the_jobs_identity_unknown(
    fake_lib: Path, tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """Issue 9.3 through the real CLI and probe: a finished-looking stage (completion line,
    every output) whose process match finds nothing, while NVML shows the GPU at 100 % held
    by a PID nobody can attribute. Before the fix the GPU read idle and the stage complete."""
    log_path = tmp_path / "job.log"
    log_path.write_text("[3/3]\nExtraction complete\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for i in range(3):
        (out_dir / f"{i}.pt").write_bytes(b"x")
    nvml = tmp_path / "nvml-state"
    nvml.write_text(f"device {GPU0} 100 40000 97887 H200\nsample 1000 100\nproc {sleeper.pid} 40000\n")
    stage = {
        "stage": "gpu-identity-unknown",
        "host": "local",
        "process": {"match": "no-such-job-[0-9a-f]{12}"},
        "log": {"path": str(log_path), "complete": "^Extraction complete"},
        "outputs": {"files": str(out_dir), "pattern": "*.pt", "expected": 3},
        "gpu": {"devices": "all", "idle_below": 5, "idle_for": "1s"},
        "policy": {"interval": "200ms", "settle": 2},
    }
    path = tmp_path / "stage.yaml"
    path.write_text(json.dumps(stage))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "LD_LIBRARY_PATH": str(fake_lib),
        "FAKE_NVML_STATE": str(nvml),
    }
    out = subprocess.run(
        [sys.executable, "-m", "sensors", "status", str(path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert data["verdict"] != "complete" and data["advance"] is False
    gpu = data["signals"]["gpu"]
    assert gpu["says"] == "working", gpu["detail"]
    assert gpu["evidence"]["attribution"].startswith("unknown: the job's PIDs are not known")
    assert gpu["evidence"]["other_processes"] == []
    assert "GPU 0 reached 100%" in gpu["detail"] and f"PID {sleeper.pid}" in gpu["detail"]


_WATCHER = textwrap.dedent(
    """
    import json, sys
    from sensors import Checker, stage_from_dict
    checker = Checker(stage_from_dict(json.loads(sys.argv[1])))
    for verdict in checker.watch(timeout=60):
        print(json.dumps(verdict.to_json()), flush=True)
    """
)


def test_incident_2_end_to_end_gpu_idle_with_92_gb_while_the_job_spins(
    fake_lib: Path, tmp_path: Path
) -> None:
    """The whole of incident 2 through a real Checker: a real job logs "ETA 0" and spins on
    the CPU while NVML (the fake library) shows its PID holding 92 GB at 0 %. Every verdict
    during the spin is running ("a CPU phase"); complete comes only after the job exits and
    the driver lets go of its memory."""
    from sensors.testing import SimulatedJob

    job = SimulatedJob(tmp_path, scenario="eta0_spin", total=6, step=0.1, spin=4.0)
    job.start()
    state = tmp_path / "nvml-state"
    state.write_text(textwrap.dedent(INCIDENT_2.format(job=job.pid)))
    stage = job.stage_dict(interval="300ms", stall_after="1m")
    stage["gpu"] = {"devices": "all", "idle_below": 5, "idle_for": "600ms"}
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "LD_LIBRARY_PATH": str(fake_lib),
        "FAKE_NVML_STATE": str(state),
    }
    watcher = subprocess.Popen(
        [sys.executable, "-c", _WATCHER, json.dumps(stage)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        job.wait(60)
        # The process is gone: the driver releases its context (the fake re-reads its state).
        state.write_text(textwrap.dedent(INCIDENT_2.replace("    proc {job} 92000\n", "")))
        out, _ = watcher.communicate(timeout=60)
    finally:
        watcher.kill()
        job.stop()
    verdicts = [json.loads(line) for line in out.splitlines()]
    spin = [
        v
        for v in verdicts
        if v["signals"]["process"]["says"] == "working"
        and "ETA 0" in v["signals"]["log"]["evidence"]["last_line"]
        and v["signals"]["gpu"]["says"] == "done"
    ]
    assert spin, [v["verdict"] for v in verdicts]
    for v in spin:
        assert v["verdict"] == "running", v["reasons"]
        assert v["signals"]["gpu"]["evidence"]["job_pids_on_gpu"] == [job.pid]
        assert v["signals"]["gpu"]["evidence"]["job_memory_mib"] == 92000
    assert any("a CPU phase" in r for v in spin for r in v["reasons"])
    assert verdicts[-1]["verdict"] == "complete"


# --------------------------------------------------------------------------- the deprecated pynvml

#: The deprecated ``pynvml`` distribution (13.0.1) as pip installs it beside nvidia-ml-py: a
#: ``.pth`` that imports ``_pynvml_redirector``, whose finder warns when ``pynvml`` is first
#: imported (copied from that wheel, BSD-3-Clause, NVIDIA). The real thing, in a site
#: directory of its own.
_REDIRECTOR_PTH = "import _pynvml_redirector\n"
_REDIRECTOR = textwrap.dedent(
    """
    import importlib
    import importlib.abc
    import sys
    import warnings

    PYNVML_MSG = (
        "The pynvml package is deprecated. Please install nvidia-ml-py instead. "
        "If you did not install pynvml directly, please report this to the maintainers of "
        "the package that installed pynvml for you."
    )

    class PynvmlFinder(importlib.abc.MetaPathFinder):
        def __init__(self):
            self.has_warned_pynvml = False

        def find_spec(self, name, _, __=None):
            if name.startswith("pynvml") and not self.has_warned_pynvml:
                warnings.warn(PYNVML_MSG, FutureWarning, stacklevel=2)
                self.has_warned_pynvml = True

    finder = PynvmlFinder()
    sys.meta_path.insert(0, finder)
    """
)
#: A second finder that warns too when pynvml is imported: a warning that is not the
#: deprecated wrapper's must still be shown.
_OTHER = textwrap.dedent(
    """
    import importlib.abc, sys, warnings

    class Other(importlib.abc.MetaPathFinder):
        def find_spec(self, name, _, __=None):
            if name == "pynvml":
                warnings.warn("another warning at pynvml's import", FutureWarning, stacklevel=2)

    sys.meta_path.insert(0, Other())
    """
)


def test_the_deprecated_pynvml_wrapper_does_not_warn_at_every_gpu_check(
    fake_lib: Path, tmp_path: Path
) -> None:
    """Issue 23: with the deprecated ``pynvml`` distribution installed too, every GPU check
    printed its FutureWarning. The installed command, on the fake NVML, in a Python whose site
    has the wrapper's ``.pth``: no deprecation line, the GPU read, other warnings still shown."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "_pynvml_redirector.pth").write_text(_REDIRECTOR_PTH)
    (site / "_pynvml_redirector.py").write_text(_REDIRECTOR)
    (site / "_other_warning.pth").write_text("import _other_warning\n")
    (site / "_other_warning.py").write_text(_OTHER)
    shim = tmp_path / "shim"
    shim.mkdir()
    # sitecustomize makes `site` a site directory: its .pth files run at startup, as pip's do.
    (shim / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site)!r})\n")
    state = tmp_path / "nvml-state"
    state.write_text(f"device {GPU0} 0 1000 97887 H200\nsample 1000 0\n")
    stage = tmp_path / "gpu.yaml"
    stage.write_text(
        json.dumps({"stage": "gpu-only", "gpu": {"idle_for": "1s"}, "policy": {"interval": "200ms"}})
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(shim),
        "LD_LIBRARY_PATH": str(fake_lib),
        "FAKE_NVML_STATE": str(state),
    }
    crosscheck = str(Path(sys.executable).with_name("crosscheck"))
    # The shim warns as the wrapper does (a plain `import pynvml` here shows it).
    shown = subprocess.run(
        [sys.executable, "-c", "import pynvml"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert "The pynvml package is deprecated" in shown.stderr, shown.stderr
    out = subprocess.run(
        [crosscheck, "status", str(stage), "--json", "--state", "none"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode in (0, 1), out.stderr
    gpu = json.loads(out.stdout)["signals"]["gpu"]
    assert gpu["says"] != "unknown" and gpu["evidence"]["devices"][0]["uuid"] == GPU0, gpu
    assert "pynvml package is deprecated" not in out.stderr, out.stderr
    assert "another warning at pynvml's import" in out.stderr, out.stderr
