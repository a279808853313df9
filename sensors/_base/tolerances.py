"""Every tolerance run binding uses, in one table: its value, its unit and where it comes from.

A row is one figure of one quantity. Two rows with the same ``quantity`` are one quantity read
with two values today (named so, not unified: unifying changes verdicts, see each row's
``source``). Code imports the module constants (plain floats); :data:`TABLE` is the same
figures with their sources, for a reader and for the tests.

Not here: the clock offset of a host against the checking machine, which is measured in each
probe's round trip (``Checker._ahead``: the host's clock read before its answer came back,
less when it came back), and the settled-stamp margins of the shared stat
(``sensors._base.probe``: they decide when a stat may be skipped, not whose evidence is
whose). The probe's sh adds a whole second to a
time printed in whole seconds (``+ 1`` in ``sensors._signals.outputs``' scan): the same
figure as :data:`WHOLE_SECOND`, written in sh.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tolerance:
    """One figure: ``value`` in ``unit``, of ``quantity``, from ``source``."""

    name: str
    value: float
    unit: str
    quantity: str
    source: str


#: Every tolerance, by its constant's name.
TABLE: dict[str, Tolerance] = {}


def _row(name: str, value: float, quantity: str, source: str, unit: str = "s") -> float:
    TABLE[name] = Tolerance(name, value, unit, quantity, source)
    return value


# --------------------------------------------------------------------------- a process's start

PROC_START_TICKS = _row(
    "PROC_START_TICKS",
    0.05,
    "proc_start_ticks",
    "how far a process's start read from /proc may be off where /proc/uptime is the host's:"
    " start ticks are 10 ms (USER_HZ 100), /proc/uptime is 10 ms, `date` and /proc/uptime are"
    " read a moment apart by one shell, the start is rounded to 10 ms: 50 ms. The worst case,"
    " where a probe's answer does not carry /proc/uptime read before `date` as well as after"
    " it; otherwise the precision is measured (procfs.start_precision, which every use goes"
    " through: Run.slack of a process start, the log's binding and its line's writers,"
    " a launched job's later runs and earlier runs before a start); both modules called it"
    " _TICK_SLACK.",
)
UPTIME_RESOLUTION = _row(
    "UPTIME_RESOLUTION",
    0.01,
    "uptime_resolution",
    "/proc/uptime prints CLOCK_BOOTTIME rounded down to 10 ms (fs/proc/uptime.c). With the"
    " span between the two reads of it around `date` and one clock tick of the start"
    " (1/CLK_TCK, start_boottime rounded down), the measured precision of a process's start"
    " (procfs.start_precision): 20 ms on an idle host, where PROC_START_TICKS is 50.",
)
START_ROUNDING = _row(
    "START_ROUNDING",
    0.0005,
    "proc_start_rounding",
    "a process's start read from /proc is kept rounded to the ms (process._describe, the"
    " started_at of its evidence and of the run): half a ms either way of the value the"
    " probe's clocks give, which procfs.start_precision adds to the interval it measured.",
)
PROC_START_TICKS_WRITER = _row(
    "PROC_START_TICKS_WRITER",
    0.02,
    "proc_start_ticks",
    "the same quantity as PROC_START_TICKS with another value: 'a clock tick or two (10 ms"
    " each)' (was log.py's _START_PRECISION). Used only by log.py's _writer_alive: a process"
    " begun by a dated completion line, to this, is one of its writers. Unified to 0.05, a"
    " process begun 20-50 ms after the line would count as its writer (more 'complete')."
    " Exercised by test_false_complete_routes.py and test_adversary_21.py (seed 200948: a"
    " re-run begun 30 ms after the line); not yet run with one value.",
)
PROC_START_WHOLE_SECONDS = _row(
    "PROC_START_WHOLE_SECONDS",
    1.0,
    "proc_start_btime",
    "how far a process's start may be off where /proc/uptime is virtualised (lxcfs): the"
    " boot time is /proc/stat's btime, whole seconds. Also the worst case, where the"
    " precision a start was read with is not known (Run.slack None) and log.py's margins of"
    " 'clearly before/after' a line (_whose, _undatable), which use it whatever the host."
    " PROCESS_START_PRECISION['btime']; was log.py's _PROCESS_START_SLACK and process.py's"
    " START_SLACK.",
)
ELAPSED_BELOW_ZERO = _row(
    "ELAPSED_BELOW_ZERO",
    1.0,
    "proc_elapsed_floor",
    "an elapsed time read from /proc down to this far below zero is taken as 0 (a start"
    " against btime's whole seconds); further below, it is implausible (procfs.elapsed).",
)
BOOT_CLOCKS_APART = _row(
    "BOOT_CLOCKS_APART",
    30.0,
    "boot_clock",
    "how far /proc/uptime and now - /proc/stat btime may disagree before neither is believed"
    " (procfs.elapsed; was ELAPSED_TOLERANCE): btime moves when NTP steps the wall clock, a"
    " few seconds is normal. Also how far an elapsed time may pass the uptime.",
)
RERUN_START_GAP = _row(
    "RERUN_START_GAP",
    2.0,
    "rerun_gap",
    "a process first seen with a start this much later than the run restored from the store"
    " (Run.source 'process') is a new run (process.py): beyond PROC_START_WHOLE_SECONDS, so a"
    " start read again against another boot clock is not taken for a re-run.",
)

#: How far a process start read from /proc may be from the truth at worst, by where the boot
#: clock came from: ``ticks`` against /proc/uptime, ``btime`` where /proc/uptime is
#: virtualised. A probe that read /proc/uptime around `date` measures its own
#: (procfs.start_precision); these are for one that did not.
PROCESS_START_PRECISION = {"ticks": PROC_START_TICKS, "btime": PROC_START_WHOLE_SECONDS}


# --------------------------------------------------------------------------- file times

FILE_TIME_TICK = _row(
    "FILE_TIME_TICK",
    0.02,
    "file_time_lag",
    "how far a file time (to the nanosecond) may lag the write it stamps: the kernel stamps"
    " files from its coarse clock, a jiffy (1 to 10 ms, CONFIG_HZ 1000 to 100) behind the"
    " real one: two jiffies at HZ 100. The width of a nanosecond mtime (was log.py's"
    " _TIMESTAMP_TICK) and the slack of 'written by then' (was log.py's and outputs.py's"
    " _WRITTEN_BY_TICK).",
)
JIFFY = _row(
    "JIFFY",
    0.01,
    "file_time_lag",
    "the same quantity as FILE_TIME_TICK with another value: one jiffy at HZ 100 (was log.py's"
    " _JIFFY). Used only where an exit watch saw a process's end loosely (wider than"
    " END_WINDOW): a change stamped a jiffy before its last sighting alive came while it lived"
    " (sensors._check.checker._owned_by).",
)
EXEC_TO_IMPORT = _row(
    "EXEC_TO_IMPORT",
    0.5,
    "watch_start",
    "the most a `crosscheck` command's interpreter may take from its process's start to the"
    " first import of `sensors` for that start to be the command's own (sensors._cli.main"
    " _process_started): longer, and the process was a script that exec'd the command later"
    " (exec keeps the start), so the import's own time is the watch's start. Python's start"
    " is 20-50 ms here idle, a few hundred under load.",
)
JOB_BEFORE_WATCH = _row(
    "JOB_BEFORE_WATCH",
    1.0,
    "job_before_watch",
    "how long before a watch's start a log may have been born for a completion line ending it,"
    " written after the watch began, to be the watch's run's where no run start is known"
    " (log.py _bind, written_after_watch): a job typed with the command (`job > log & crosscheck"
    " wait`, or `wait` on a script's next line), its log born a few ms before the watch, a few"
    " hundred under load. One born earlier held writes long before the watch, and a write after"
    " it says only that something wrote it then (`touch`, `cat old >> log`, `cp old log` in"
    " place: an earlier run's line, tests/test_adversary_s14.py).",
)
END_WINDOW = _row(
    "END_WINDOW",
    0.25,
    "end_seen",
    "the widest a process's end may be known to (its last sighting alive to the exit watch's"
    " finding it gone) for a change stamped up to that finding to count as written before the"
    " end. The local pidfd watch polls every 5 ms, the SSH watch every 50 ms (one poll forks"
    " date, awk and sleep: ends 112-125 ms wide in 4 of 10 under four CPU burners on 2 cores)."
    " Another history fits only with a later run begun and writing"
    " within it, and gone by the next check; a job's last words (a `wandb: Synced` line, its"
    " last output closed) come a millisecond before it exits.",
)
WHOLE_SECOND = _row(
    "WHOLE_SECOND",
    1.0,
    "coarse_time",
    "a time printed in whole seconds (stat with no fraction, a file system that keeps"
    " seconds, busybox's date without %N in the launch wrapper's exit record) stands for any"
    " moment of its second, rounded down (log.py _precise, LaunchEnd.exited_by, process.py"
    " _after_launch, probe.py _end_clock).",
)
OWN_CLOCK_SLACK = _row(
    "OWN_CLOCK_SLACK",
    0.05,
    "file_time_ahead_local",
    "how far ahead of the probe's own clock read a file time on a local file system (the"
    " host's kernel stamps it) may be and still be true: the probe's `date` runs a few ms"
    " before the file is read, and the kernel's file clock lags, never leads. A time further"
    " ahead was set by a tool (touch -d, cp -p, an archive): not evidence.",
)
FILE_CLOCK_TOLERANCE = _row(
    "FILE_CLOCK_TOLERANCE",
    1.0,
    "file_time_ahead_remote",
    "how far ahead of the host's clock a file time on a network file system (NFS, SMB, FUSE:"
    " a server's clock stamps it) may be and still be taken as true; also the margin a"
    " start needs there to be 'after' it. A choice, not a measurement: NTP keeps clocks"
    " closer, and a small skew cannot be told from a write made a moment ago.",
)
MTIME_SET_BACK = _row(
    "MTIME_SET_BACK",
    1.0,
    "mtime_set_back",
    "how much later than a file's mtime its ctime may be and the mtime still date the last"
    " write: a write sets both to the same moment (one clock, the kernel's or a server's),"
    " while a time set back (touch -d, cp -p, rsync -t, os.utime) moves the mtime alone and"
    " the ctime to now. A choice: a second is far past what one write leaves between them.",
)
ATTRIBUTE_CACHE_GRACE = _row(
    "ATTRIBUTE_CACHE_GRACE",
    60.0,
    "attribute_cache",
    "how long a network file system's client may show a file's size or a directory's"
    " entries as they were: NFS caches attributes up to acregmax/acdirmax, 60 s by default"
    " (nfs(5)); FUSE's attr_timeout is shorter. A change seen within it of an event may have"
    " happened before it.",
)


# --------------------------------------------------------------------------- clocks of hosts

CLOCKS_APART = _row(
    "CLOCKS_APART",
    1.0,
    "host_clock_offset",
    "how far two hosts' clocks may be apart in a stage over several hosts (across.py) where"
    " the offsets measured in the probes' round trips cannot order two times: a rank's log"
    " written this long after node 0's ranks were last seen (a file server's clock), and a"
    " rank last seen alive this long before node 0's run began where an offset is not measured"
    " yet (otherwise the measured offsets order the two within it, never beyond it: multi-host"
    " fuzzer seed 3210; tests/test_adversary_42.py). A"
    " choice (NTP keeps them closer) (was across.py's _CLOCKS_APART).",
)


CLOCK_SLEW = _row(
    "CLOCK_SLEW",
    0.0005,
    "clock_slew",
    "how fast a host's clock may move against the checking machine's between two measurements"
    " of their offset (Checker.clock_ahead keeps the narrowest offset its round trips agree on):"
    " NTP and chrony slew a clock by at most 500 ppm (the kernel's MAXFREQ, ntp_adjtime(2));"
    " they step it only past 128 ms (ntpd's step threshold; chrony's makestep), which a"
    " measurement not meeting the last ones shows, and the offset is measured afresh.",
    unit="s/s",
)


CLOCK_STEP = _row(
    "CLOCK_STEP",
    0.128,
    "clock_step",
    "the least a host's clock is stepped (ntpd steps past 128 ms and slews below, ntpd(8)'s"
    " -x and tinker step; chrony's makestep is configured above it): round-trip bounds as"
    " wide as this may hold a step, so they narrow no kept offset and keep none (a clock"
    " stepped 0.3 s, then one slow round trip a second wide that held both offsets, kept the"
    " old one: an adversary's review, tests/test_adversary_43.py).",
)


# --------------------------------------------------------------------------- a run's identity

SINCE_SAME = _row(
    "SINCE_SAME",
    0.001,
    "since_same",
    "a --since time given again is the stored run's when within this (checker.py: a run kept"
    " in the store is the same run a restarted watch is given).",
)
SINCE_ROUNDING = _row(
    "SINCE_ROUNDING",
    1e-6,
    "since_same",
    "the same quantity as SINCE_SAME with another value (persist.py's is_this_run: a stored"
    " start at or after the --since, to float rounding). Unified to 0.001, a stored run begun"
    " up to a millisecond before the --since would be taken as this run's; to 1e-6, a"
    " --since that lost precision on its way through the store would start a new run.",
)
