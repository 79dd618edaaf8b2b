#!/usr/bin/env python3
"""Benchmarks for homebased (issue 8, DESIGN.md "Benchmarks").

Run through `scripts/bench`, which builds the release binaries first. Every workload runs on
a fresh temporary home with fake lanes (no GPU needed), stops everything it started, and
reports medians: the machines this runs on are shared and noisy. Nothing here asserts a speed.

Python 3.11 standard library only. Settings (environment):

  BENCH_QUICK=1          small counts (under two minutes); leaves docs/BENCHMARKS.md alone
  BENCH_JOBS             start-latency jobs per path (CLI, API) and floor spawns   [200 / 30]
  BENCH_HANDOVER_JOBS    jobs queued at once for the hand-over                    [BENCH_JOBS]
  BENCH_QUEUE            jobs queued for submit cost, list, footprint, restart    [10000 / 1000]
  BENCH_SAMPLE           submits timed at the start and at the end of the fill    [100 / 50]
  BENCH_PROCS            unrelated sleeping processes during the hand-over        [2000 / 500]
  BENCH_SWEEP_PROCS      comma list of sleeper counts for the sweep cost    [0,1000,2000 / 0,500]
  BENCH_SWEEP_JOBS       short jobs per sleeper count for the sweep cost          [15 / 5]
  BENCH_PREEMPT          preemption rounds (half through the CLI, half the API)   [30 / 8]
  BENCH_LIST_RUNS        timed `resource jobs --json` calls per queue size        [7 / 3]
  BENCH_SCRAPES          timed `GET /metrics` (and `GET /v1/jobs`) with 2,000 queued [200 / 40]
  BENCH_IDLE_SECONDS     idle window for the daemon CPU figure                    [30 / 5]
  BENCH_QUIET_SECONDS    idle window of the quiet workload (2,000 queued, one run) [60 / 10]
  BENCH_LANES            fake indexed lanes, all held, in the queue workload      [8 / 8]
  BENCH_FILL_BUDGET      seconds the bulk API fill may take; it stops early there [240 / 40]
  BENCH_FILL_CONNECTIONS concurrent API connections for the bulk fill             [8 / 8]
  BENCH_FLEET_JOBS       remote submits timed in the Fleet workload               [50 / 15]
  BENCH_DASHBOARD_QUEUE  jobs queued (BENCH_LANES of them running) for the dashboard [2000]
  BENCH_HISTORY          comma list of finished-job history sizes for the history workload,
                         seeded through /v1/internal/seed (1,000,000 takes long) [0,100000 / 0,5000]
  BENCH_HISTORY_SAMPLE   timed submits, listings and shows per history size       [30 / 10]
  BENCH_INTEGRITY        comma list of history sizes for the integrity workload (the store's
                         check at start), seeded like BENCH_HISTORY     [0,100000 / 0,2000]
  BENCH_INTEGRITY_STARTS timed `daemon serve` starts per integrity size            [7 / 3]
  BENCH_ONLY             comma list of workloads to run (default all): floor,start,handover,
                         queue,preempt,sweep,kill9,sampler,fleet,dashboard,history,metrics,
                         startpath,peers,integrity,quiet,listing,mig56,schedule,mixed8
                         (peers needs task-spooler's `tsp`; schedule runs the simulator
                         examples/schedule_sim.rs through cargo)
  BENCH_STARTPATH        starts per path (CLI, API) taken apart by the startpath workload [50 / 20]
  BENCH_COMPARE          comma list of other builds' binary folders: the peers workload
                         starts a job on each in every round too (before/after a change)
  BENCH_LANE_QUEUE       1 s jobs queued over BENCH_LANES lanes, hand-over workload [2000 / 200]
  BENCH_MIG_QUEUE        1 s jobs queued over the mig56 workload's 56 MIG lanes   [2000 / 200]
  BENCH_MIG_RUNS         timed `resource list --json` calls and settles in mig56  [20 / 5]
  BENCH_MIG_SECONDS      mig56's sampler window, no reads (at most 55)           [45 / 10]
  BENCH_MIXED_QUEUE      1 s jobs of 1, 2 and 4 GPUs in mixed8's trace on 8 lanes [600 / 60]
  BENCH_OUT              report path [docs/BENCHMARKS.md; none when quick]; empty: no report
  BENCH_TMPDIR           parent folder of the temporary homes [system temp]
  BENCH_KEEP=1           keep the temporary homes (for a look afterwards)
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import errno
import fcntl
import http.client
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def setting(name: str, default: int, quick: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return quick if QUICK else default
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"bench: {name}={raw!r} is not a whole number")
    if value < 0:
        sys.exit(f"bench: {name} must not be negative")
    return value


JOBS = max(setting("BENCH_JOBS", 200, 30), 2)
HANDOVER_JOBS = max(setting("BENCH_HANDOVER_JOBS", JOBS, JOBS), 2)
QUEUE = setting("BENCH_QUEUE", 10_000, 1_000)
SAMPLE = max(min(setting("BENCH_SAMPLE", 100, 50), QUEUE // 4), 1)
PROCS = setting("BENCH_PROCS", 2000, 500)
SWEEP_JOBS = max(setting("BENCH_SWEEP_JOBS", 15, 5), 1)
PREEMPT = max(setting("BENCH_PREEMPT", 30, 8), 2)
LIST_RUNS = max(setting("BENCH_LIST_RUNS", 7, 3), 1)
SCRAPES = max(setting("BENCH_SCRAPES", 200, 40), 1)
# Jobs cancelled at each end of the full queue (the row labels say "2nd to 6th", "last 5").
CANCEL_SAMPLE = 5
IDLE_SECONDS = max(setting("BENCH_IDLE_SECONDS", 30, 5), 1)
QUIET_SECONDS = max(setting("BENCH_QUIET_SECONDS", 60, 10), 1)
LANES = max(setting("BENCH_LANES", 8, 8), 1)
FILL_BUDGET = max(setting("BENCH_FILL_BUDGET", 240, 40), 1)
FILL_CONNECTIONS = max(setting("BENCH_FILL_CONNECTIONS", 8, 8), 1)
FLEET_JOBS = max(setting("BENCH_FLEET_JOBS", 50, 15), 2)
DASHBOARD_QUEUE = max(setting("BENCH_DASHBOARD_QUEUE", 2000, 2000), LANES + 1)
try:
    SWEEP_PROCS = sorted(
        {
            int(p)
            for p in os.environ.get(
                "BENCH_SWEEP_PROCS", "0,500" if QUICK else "0,1000,2000"
            ).split(",")
            if p.strip()
        }
    )
except ValueError:
    sys.exit("bench: BENCH_SWEEP_PROCS must be a comma list of whole numbers")
if not SWEEP_PROCS:
    SWEEP_PROCS = [0]
try:
    HISTORY = sorted(
        {
            int(p)
            for p in os.environ.get("BENCH_HISTORY", "0,5000" if QUICK else "0,100000").split(",")
            if p.strip()
        }
    )
except ValueError:
    sys.exit("bench: BENCH_HISTORY must be a comma list of whole numbers")
try:
    INTEGRITY = sorted(
        {
            int(p)
            for p in os.environ.get("BENCH_INTEGRITY", "0,2000" if QUICK else "0,100000").split(",")
            if p.strip()
        }
    )
except ValueError:
    sys.exit("bench: BENCH_INTEGRITY must be a comma list of whole numbers")
INTEGRITY_STARTS = max(setting("BENCH_INTEGRITY_STARTS", 7, 3), 1)
STARTPATH = max(setting("BENCH_STARTPATH", 50, 20), 2)
LANE_QUEUE = max(setting("BENCH_LANE_QUEUE", 2000, 200), LANES * 2)
HISTORY_SAMPLE = max(setting("BENCH_HISTORY_SAMPLE", 30, 10), 2)
MIG_QUEUE = max(setting("BENCH_MIG_QUEUE", 2000, 200), 56 * 2)
MIG_RUNS = max(setting("BENCH_MIG_RUNS", 20, 5), 1)
# The sampler samples for a minute after the last read of resources; the window must end
# inside that minute, or it would measure a sleeping sampler.
MIG_SECONDS = min(max(setting("BENCH_MIG_SECONDS", 45, 10), 1), 55)
MIXED_QUEUE = max(setting("BENCH_MIXED_QUEUE", 600, 60), 2)
# Other builds' binary folders for the peers workload to start jobs on, round by round.
COMPARE_BUILDS = [
    Path(p).resolve() for p in os.environ.get("BENCH_COMPARE", "").split(",") if p
]
WORKLOADS = [
    "floor",
    "start",
    "handover",
    "queue",
    "preempt",
    "sweep",
    "kill9",
    "sampler",
    "fleet",
    "dashboard",
    "history",
    "metrics",
    "startpath",
    "peers",
    "integrity",
    "quiet",
    "listing",
    "mig56",
    "schedule",
    "mixed8",
]
ONLY = [w.strip() for w in os.environ.get("BENCH_ONLY", "").split(",") if w.strip()]
for w in ONLY:
    if w not in WORKLOADS:
        sys.exit(f"bench: BENCH_ONLY names {w!r}; known: {', '.join(WORKLOADS)}")
TMPDIR = os.environ.get("BENCH_TMPDIR") or None
KEEP = os.environ.get("BENCH_KEEP", "") not in ("", "0")

ME = os.getpid()
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The queues people use today, measured on this machine class (issue 8). Keys are row keys.
OTHERS = ["pueue 4.0.4", "task-spooler 1.0.1", "Slurm 22.05", "gflow 0.4.18", "bare sh -c"]
COMPARE = {
    "start_cli": ["165 ms", "5.0 ms", "774 ms", "1,121 ms", "2.9 ms"],
    "floor": ["-", "-", "-", "-", "2.9 ms"],
    "submit_cli_first": ["8.0 ms", "4.0 ms", "16 ms", "32.5 ms", "-"],
    "submit_cli_last": ["16.4 ms", "queue full at 993", "8 ms", "32.7 ms", "-"],
    "list_2000": ["115 ms", "16.5 ms (993)", "517 ms", "66 ms", "-"],
    "rss_2000": ["26 MB", "1.4 MB + 994 clients", "20 MB", "30 MB", "-"],
    "idle_cpu": ["120 ms", "0", "70 ms", "70 ms", "-"],
    "kill9": [
        "finished, shown as killed",
        "finished, forgotten",
        "finished, shown completed",
        "finished, shown finished",
        "-",
    ],
}


# ---------------------------------------------------------------------------------------
# Small helpers


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def uuid7() -> str:
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def pct(values: list[float], p: float) -> float | None:
    """Percentile with linear interpolation between closest ranks."""
    if not values:
        return None
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def wait_for(pred, timeout: float, interval: float = 0.001, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def read_ns(path: Path) -> int | None:
    """A `date +%s%N` stamp, once it is completely written."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    if not text.endswith("\n"):
        return None
    return int(text.strip())


def proc_state(pid: int) -> str | None:
    """The process state letter, or None when the pid is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(")") + 2]


def alive(pid: int) -> bool:
    s = proc_state(pid)
    return s is not None and s not in ("Z", "X")


def cpu_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) + int(fields[12])


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except FileNotFoundError:
        return None
    return None


def count_processes() -> int:
    return sum(1 for d in os.listdir("/proc") if d.isdigit())


def become_subreaper() -> None:
    """Orphans (a daemon after its `daemon start` CLI exited, workers after a kill -9) come
    back to this process, so they can be reaped instead of piling up as zombies that every
    later sweep would have to read."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except OSError:
        pass


def reap_orphans() -> None:
    """Reaps zombie children that came here as orphans (never a live Popen child)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        rest = raw[raw.rindex(")") + 2 :].split()
        if rest[0] == "Z" and int(rest[1]) == ME:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any HOMEBASED_* (a run's variables must not leak into the
    submissions or sleepers), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOMEBASED_")}
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------
# The socket API


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 120.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.unix_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class ApiError(Exception):
    pass


class Api:
    """HTTP/1.1 over `<home>/homebased.sock`, one kept-alive connection."""

    def __init__(self, sock_path: Path, timeout: float = 120.0):
        self.path = str(sock_path)
        self.timeout = timeout
        self.conn: UnixHTTPConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method: str, path: str, body=None, fresh: bool = False):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        # One retry on a dropped kept-alive connection: every call made here is safe to
        # repeat (reads, and submits that are idempotent on the job UUID).
        for attempt in range(2):
            if fresh or self.conn is None:
                self.close()
                self.conn = UnixHTTPConnection(self.path, self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, ConnectionError, BrokenPipeError):
                self.close()
                if attempt == 1:
                    raise
                continue
            if fresh:
                self.close()
            value = json.loads(raw) if raw else None
            if resp.status >= 400:
                raise ApiError(f"{method} {path}: HTTP {resp.status}: {raw[:400]!r}")
            return value
        raise AssertionError("unreachable")

    def get(self, path: str, fresh: bool = False):
        return self.request("GET", path, fresh=fresh)

    def post(self, path: str, body, fresh: bool = False):
        return self.request("POST", path, body, fresh=fresh)


# ---------------------------------------------------------------------------------------
# A temporary home with its daemon


class Sleepers:
    """`count` unrelated `sleep` processes of this user, direct children of this process,
    in one process group."""

    def __init__(self, count: int):
        self.procs: list[subprocess.Popen] = []
        self.count = count

    def __enter__(self) -> "Sleepers":
        if self.count == 0:
            return self
        t0 = time.monotonic()
        pgid = 0
        env = clean_env()
        try:
            for _ in range(self.count):
                p = subprocess.Popen(
                    ["sleep", "100000"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=env,
                    process_group=pgid,
                )
                if pgid == 0:
                    pgid = p.pid
                self.procs.append(p)
        except BaseException:
            self.stop()
            raise
        # Wait until each has really become `sleep` (exec done), so the table is settled.
        for p in self.procs:
            wait_for(
                lambda p=p: _comm(p.pid) == "sleep", 30, 0.001, f"sleeper {p.pid}"
            )
        log(f"{self.count} sleepers up in {time.monotonic() - t0:.1f} s")
        return self

    def stop(self) -> None:
        for p in self.procs:
            try:
                p.kill()
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log(f"sleeper {p.pid} did not exit")
        self.procs = []

    def __exit__(self, *exc) -> None:
        self.stop()


def _comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return None


class Home:
    """A fresh temporary home: `lanes` None gives the unindexed fallback lane `gpu0` (the
    nvidia-smi probe points at a missing file); a number gives that many indexed lanes
    from a fake nvidia-smi."""

    def __init__(self, bins: Path, tag: str, lanes: int | None = None):
        self.bins = bins
        self.hb_bin = str(bins / "homebased")
        self.work = Path(tempfile.mkdtemp(prefix=f"hb-bench-{tag}-", dir=TMPDIR))
        self.home = self.work / "home"
        self.out = self.work / "out"
        self.out.mkdir()
        self.thread = uuid7()
        probe = self.work / "nvidia-smi"
        if lanes is not None:
            lines = "".join(f"GPU {i}: Fake GPU (UUID: GPU-{i})\\n" for i in range(lanes))
            probe.write_text(f"#!/bin/sh\nprintf '{lines}'\n")
            probe.chmod(0o755)
        self.env = clean_env({"HOMEBASED_NVIDIA_SMI": str(probe)})
        self.sock = self.home / "homebased.sock"
        self.api = Api(self.sock)
        self.pid: int | None = None
        self.serve: subprocess.Popen | None = None
        self.fifo = self.work / "hold.fifo"
        os.mkfifo(self.fifo)

    # -- the CLI

    def cli(self, *args: str, timeout: float = 120, check: bool = True):
        r = subprocess.run(
            [self.hb_bin, "--home", str(self.home), *args],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and r.returncode != 0:
            raise RuntimeError(
                f"homebased {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[:400]}"
            )
        return r

    def cli_json(self, *args: str, timeout: float = 120):
        return json.loads(self.cli("--json", *args, timeout=timeout).stdout)

    # -- the daemon

    def start(self) -> float:
        """`daemon start`; returns its wall time in ms."""
        t0 = time.perf_counter_ns()
        self.cli("daemon", "start", timeout=60)
        ms = (time.perf_counter_ns() - t0) / 1e6
        self.pid = self.cli_json("daemon", "status")["pid"]
        return ms

    def serve_foreground(self) -> None:
        """Starts `daemon serve` as a child (no waiting)."""
        logf = open(self.work / "serve.log", "ab")
        self.serve = subprocess.Popen(
            [self.hb_bin, "--home", str(self.home), "daemon", "serve"],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
        )
        logf.close()
        self.pid = self.serve.pid

    def lock_free(self) -> bool:
        """What `daemon start` checks: nobody holds `daemon.lock`."""
        try:
            fd = os.open(self.home / "daemon.lock", os.O_RDONLY)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def kill9(self) -> float:
        """SIGKILL to the daemon; returns the ms until its `daemon.lock` was free again (all
        its threads gone: a thread inside a long fsync delays that)."""
        assert self.pid is not None
        t0 = time.perf_counter_ns()
        os.kill(self.pid, signal.SIGKILL)
        wait_for(lambda: not alive(self.pid), 30, 0.001, "the killed daemon to go")
        wait_for(self.lock_free, 60, 0.001, "the killed daemon's lock to be released")
        ms = (time.perf_counter_ns() - t0) / 1e6
        self._reap_daemon()
        self.api.close()
        return ms

    def _reap_daemon(self) -> None:
        if self.serve is not None:
            try:
                self.serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            self.serve = None
        elif self.pid is not None:
            try:
                os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def stop(self, cancel: bool = True) -> None:
        """Stops the daemon: `daemon stop --yes` (cancels what is in flight and waits for
        cleanup), else SIGTERM, else SIGKILL. With `cancel` False only SIGTERM is used, so
        queued work is left queued (the home is thrown away anyway)."""
        self.api.close()
        if self.pid is None or not alive(self.pid):
            self._reap_daemon()
            self.pid = None
            return
        if cancel and self.serve is None:
            try:
                self.cli("daemon", "stop", "--yes", timeout=120)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                log(f"daemon stop --yes failed ({e}); sending SIGTERM")
        if alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            try:
                wait_for(lambda: not alive(self.pid), 30, 0.01, "the daemon to exit")
            except TimeoutError:
                log(f"daemon {self.pid} ignored SIGTERM; sending SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                wait_for(lambda: not alive(self.pid), 10, 0.01, "the daemon to die")
        self._reap_daemon()
        self.pid = None

    # -- jobs

    def spec(self, name: str, script: str, priority: str = "medium", mode: str = "wait"):
        return {
            "api_version": 1,
            "thread": self.thread,
            "name": name,
            "cwd": str(self.work),
            "priority": priority,
            "preempt": {"mode": mode},
            "workload": {"type": "task", "command": ["/bin/sh", "-c", script]},
        }

    def body(self, job: str, spec) -> dict:
        return {
            "job": job,
            "spec": spec,
            "submitter": {
                "path": self.env.get("PATH"),
                "home": self.env.get("HOME"),
                "cwd": str(self.work),
                "parent_task": None,
            },
            "allow_other_thread": False,
        }

    def submit_api(self, spec, job: str | None = None, fresh: bool = False) -> str:
        job = job or uuid7()
        self.api.post("/v1/jobs", self.body(job, spec), fresh=fresh)
        return job

    def spec_file(self, name: str, spec) -> Path:
        path = self.work / f"{name}.json"
        path.write_text(json.dumps(spec))
        return path

    def submit_cli_argv(self, spec_file: Path, job: str) -> list[str]:
        return [
            self.hb_bin,
            "--home",
            str(self.home),
            "--quiet",
            "resource",
            "job",
            "submit",
            "--job-id",
            job,
            "--spec",
            str(spec_file),
        ]

    def run_cli_submit(self, spec_file: Path, job: str) -> None:
        r = subprocess.run(
            self.submit_cli_argv(spec_file, job),
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if r.returncode != 0:
            raise RuntimeError(f"CLI submit exited {r.returncode}: {r.stderr[:400]!r}")

    def resources(self):
        return self.api.get("/v1/resources")["resources"]

    def idle(self) -> bool:
        return all(r["run"] is None for r in self.resources())

    def wait_idle(self, timeout: float = 60, interval: float = 0.002) -> None:
        wait_for(self.idle, timeout, interval, "every lane to be idle")

    def executing(self) -> list[dict]:
        return [
            r["run"]
            for r in self.resources()
            if r["run"] is not None and r["run"]["phase"]["phase"] == "executing"
        ]

    def job(self, job: str):
        return self.api.get(f"/v1/jobs/{job}")

    def task_dir(self, task: str) -> Path:
        return self.home / "tasks" / task

    # -- the hold: blockers wait on a FIFO and cost nothing while they wait

    def hold_script(self) -> str:
        return f"read _ < '{self.fifo}' || true"

    def hold_lanes(self, lanes: int, timeout: float) -> None:
        """One holder job per lane, each waiting on the FIFO, until all `lanes` execute."""
        for i in range(lanes):
            self.submit_api(self.spec(f"hold-{i}", self.hold_script()))
        wait_for(lambda: len(self.executing()) == lanes, timeout, 0.01, "every holder to run")

    def stamped_script(self, sleep: str = "") -> str:
        """A job that stamps its start (`s.<job>`) and, as its last act, its end (`e.<job>`)
        under `out`, with `sleep <sleep>` between them when given."""
        between = f" sleep {sleep};" if sleep else ""
        return (
            f"date +%s%N > '{self.out}/s.'\"$HOMEBASED_JOB_ID\";{between} "
            f"exec date +%s%N > '{self.out}/e.'\"$HOMEBASED_JOB_ID\""
        )

    def release_hold(self) -> bool:
        """Opens the FIFO for writing once: every blocker now waiting in open() wakes up
        and reads end-of-file. False when nobody was waiting."""
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return False
            raise
        time.sleep(0.05)
        os.close(fd)
        return True

    def workers(self) -> list[tuple[int, int | None]]:
        """(worker pid, workload pgid) of every run directory whose worker is alive."""
        found = []
        tasks = self.home / "tasks"
        if not tasks.is_dir():
            return found
        for d in tasks.iterdir():
            try:
                w = json.loads((d / "worker.json").read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            pid = w.get("worker", {}).get("pid")
            if pid and alive(pid):
                child = w.get("child") or {}
                found.append((pid, child.get("pgid")))
        return found

    def drain_workers(self) -> None:
        """After the daemon is gone: lets blocked workloads end (the hold is released) and
        waits for their workers; kills what is still there after 30 s."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.release_hold()
            if not self.workers():
                return
            time.sleep(0.1)
        for pid, pgid in self.workers():
            log(f"worker {pid} still alive; killing its workload group and itself")
            for target, fn in ((pgid, os.killpg), (pid, os.kill)):
                if target:
                    try:
                        fn(target, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    def close(self) -> None:
        try:
            self.stop(cancel=True)
        finally:
            self.drain_workers()
            reap_orphans()
            if KEEP:
                log(f"kept {self.work}")
            else:
                shutil.rmtree(self.work, ignore_errors=True)


# ---------------------------------------------------------------------------------------
# Results


class Row:
    def __init__(
        self,
        key: str,
        figure: str,
        unit: str,
        p50=None,
        p90=None,
        p99=None,
        target: str = "-",
        n: int | None = None,
        text: str | None = None,
    ):
        self.key = key
        self.figure = figure
        self.unit = unit
        self.p50, self.p90, self.p99 = p50, p90, p99
        self.target = target
        self.n = n
        self.text = text  # a non-numeric result, shown in the p50 column

    def cells(self) -> list[str]:
        others = COMPARE.get(self.key, ["-"] * len(OTHERS))
        p50 = self.text if self.text is not None else fmt(self.p50)
        return [
            self.figure,
            p50,
            fmt(self.p90),
            fmt(self.p99),
            self.unit,
            "-" if self.n is None else str(self.n),
            self.target,
            *others,
        ]


HEADER = ["figure", "p50", "p90", "p99", "unit", "n", "target", *OTHERS]


def dist_row(key, figure, unit, values, target="-", tails=True) -> Row:
    if not values:
        return Row(key, figure, unit, target=target, text="not measured")
    return Row(
        key,
        figure,
        unit,
        p50=median(values),
        p90=pct(values, 90) if tails else None,
        p99=pct(values, 99) if tails else None,
        target=target,
        n=len(values),
    )


SHORT_HEADER = ["figure", "p50", "p90", "p99", "unit", "n", "target", "pueue", "tsp", "Slurm", "gflow", "sh -c"]


def print_table(rows: list[Row]) -> None:
    table = [SHORT_HEADER] + [r.cells() for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    for j, row in enumerate(table):
        print("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))


def markdown_table(rows: list[Row]) -> str:
    out = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------
# Workloads


def floor_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The bare floor: Python spawns `/bin/sh -c 'date +%s%N > FILE'` and waits for it."""
    work = Path(tempfile.mkdtemp(prefix="hb-bench-floor-", dir=TMPDIR))
    try:
        out = work / "t"
        lat = []
        env = clean_env()
        for _ in range(JOBS):
            t0 = time.time_ns()
            subprocess.run(["/bin/sh", "-c", f"date +%s%N > '{out}'"], env=env, check=True)
            lat.append((read_ns(out) - t0) / 1e6)
        rows.append(
            dist_row("floor", "floor: bare `sh -c 'date'` spawned from Python", "ms", lat)
        )
        notes["floor_p50"] = median(lat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Submit-to-start on an idle lane, through the CLI and through the socket API."""
    h = Home(bins, "start")
    try:
        h.start()
        script = f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""
        spec = h.spec("start latency", script)
        spec_file = h.spec_file("start", spec)
        results = {"cli": [], "api": []}
        cli_wall = []
        # Warm-up: one of each, not counted (page cache, first connection).
        for path in ("cli", "api", *(["cli", "api"] * JOBS)):
            job = uuid7()
            start_file = h.out / f"start.{job}"
            t0 = time.time_ns()
            if path == "cli":
                h.run_cli_submit(spec_file, job)
                cli_wall.append((time.time_ns() - t0) / 1e6)
            else:
                h.submit_api(spec, job, fresh=True)
            started = wait_for(lambda: read_ns(start_file), 30, 0.0005, "the job to start")
            results[path].append((started - t0) / 1e6)
            h.wait_idle()
        lat_cli = results["cli"][1:]
        lat_api = results["api"][1:]
        floor = notes.get("floor_p50")
        target = "< 10 ms" + (f" and ≤ 3.5× floor ({3.5 * floor:.1f} ms)" if floor else "")
        rows.append(
            dist_row("start_cli", "start latency, idle lane, through the CLI", "ms", lat_cli, target)
        )
        rows.append(
            dist_row(
                "start_api", "start latency, idle lane, socket API (no CLI)", "ms", lat_api
            )
        )
        rows.append(
            dist_row("cli_submit_idle", "CLI submit wall time, empty queue", "ms", cli_wall[1:])
        )
        if floor and lat_cli:
            notes["start_ratio"] = median(lat_cli) / floor
    finally:
        h.close()


def peers_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Start latency on an idle lane through the CLI, against task-spooler's `tsp` on the
    same machine in the same run, one after the other (issue 18 part 4: within 2x). Each
    measures from the submitting command's spawn to the workload's `date`, as the start
    workload does; task-spooler runs its one slot with its own server and socket, writing
    its output file as it does by default. With BENCH_COMPARE, each round also starts one
    job on a daemon of each build named there (an earlier build, say), in turn, so that a
    change is measured against its baseline under the same conditions. Skipped when `tsp` is
    not installed."""
    tsp = shutil.which("tsp")
    if tsp is None:
        rows.append(Row("peer_tsp", "task-spooler start latency", "-", text="tsp not installed"))
        return
    builds = [bins] + COMPARE_BUILDS
    homes = [Home(b, f"peers{i}") for i, b in enumerate(builds)]
    spool = homes[0].work / "tsp"
    spool.mkdir()
    tsp_env = clean_env({"TS_SOCKET": str(spool / "socket"), "TMPDIR": str(spool)})
    try:
        for h in homes:
            h.start()
        specs = [
            h.spec_file(
                "peers",
                h.spec("start latency", f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""),
            )
            for h in homes
        ]
        ours: list[list[float]] = [[] for _ in homes]
        theirs = []
        for i in range(JOBS + 1):
            for h, spec_file, times in zip(homes, specs, ours):
                job = uuid7()
                t0 = time.time_ns()
                h.run_cli_submit(spec_file, job)
                started = wait_for(lambda: read_ns(h.out / f"start.{job}"), 30, 0.0005, "the job")
                h.wait_idle()
                if i > 0:
                    times.append((started - t0) / 1e6)
            mark = homes[0].out / f"tsp.{i}"
            t1 = time.time_ns()
            subprocess.run(
                [tsp, "sh", "-c", f"date +%s%N > '{mark}'"],
                env=tsp_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                check=True,
            )
            spooled = wait_for(lambda: read_ns(mark), 30, 0.0005, "the tsp job")
            # `tsp -w` waits for the last job to end, so that its slot is free again.
            subprocess.run([tsp, "-w"], env=tsp_env, stdout=subprocess.DEVNULL, check=False)
            if i == 0:
                continue  # warm-up: the tsp server starts with the first job
            theirs.append((spooled - t1) / 1e6)
        rows.append(
            dist_row(
                "peer_start_cli",
                "start latency, idle lane, CLI (alternating with task-spooler)",
                "ms",
                ours[0],
            )
        )
        rows.append(
            dist_row("peer_start_tsp", "start latency, task-spooler `tsp` (same run)", "ms", theirs)
        )
        if ours[0] and theirs:
            ratio = median(ours[0]) / median(theirs)
            notes["peer_ratio"] = ratio
            rows.append(
                Row(
                    "peer_ratio",
                    "start latency p50, homebased CLI over task-spooler",
                    "x",
                    p50=ratio,
                    target="≤ 2",
                )
            )
        for n, (build, times) in enumerate(zip(COMPARE_BUILDS, ours[1:]), start=1):
            rows.append(
                dist_row(
                    f"peer_start_compare{n}",
                    f"start latency, CLI of the build in {build} (same rounds)",
                    "ms",
                    times,
                )
            )
            if times and theirs:
                rows.append(
                    Row(
                        f"peer_ratio_compare{n}",
                        f"start latency p50, the build in {build} over task-spooler",
                        "x",
                        p50=median(times) / median(theirs),
                    )
                )
    finally:
        subprocess.run([tsp, "-K"], env=tsp_env, capture_output=True, check=False)
        for h in homes:
            h.close()


def run_records(h: Home) -> list[dict]:
    """Per run directory: workload start, exit and cleanup end (ms since the epoch)."""
    recs = []
    for d in (h.home / "tasks").iterdir():
        try:
            w = json.loads((d / "worker.json").read_text())
            e = json.loads((d / "exit.json").read_text())
            c = json.loads((d / "cleanup.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        recs.append(
            {
                "task": d.name,
                "started_at": (w.get("child") or {}).get("started_at"),
                "ended_at": e.get("ended_at"),
                "finished_at": c.get("finished_at"),
                "outcome": c.get("outcome"),
            }
        )
    return recs


def cleanup_row(key: str, h: Home) -> Row:
    """The worker's part of a hand-over, over every run of `h`: `exit.json` `ended_at` to
    `cleanup.json` `finished_at`."""
    return dist_row(
        key,
        "↳ of which the worker's cleanup (exit.json to cleanup.json)",
        "ms",
        [
            r["finished_at"] - r["ended_at"]
            for r in run_records(h)
            if r["ended_at"] and r["finished_at"]
        ],
    )


def handover_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """One lane; the first job holds it until all others are queued; each short job writes
    its start time and, as its last act (exec date), its end time."""
    with Sleepers(PROCS):
        h = Home(bins, "handover")
        try:
            h.start()
            h.submit_api(h.spec("hold", h.hold_script()))
            wait_for(h.executing, 30, 0.005, "the holder to run")
            spec = h.spec("hand-over", h.stamped_script())
            jobs = [h.submit_api(spec) for _ in range(HANDOVER_JOBS)]
            procs_alive = count_processes()
            wait_for(h.release_hold, 10, 0.01, "the holder to wait on its FIFO")
            last = h.out / f"e.{jobs[-1]}"
            wait_for(lambda: read_ns(last), 60 + HANDOVER_JOBS, 0.01, "the last job")
            h.wait_idle(timeout=60)
            spans = []
            for j in jobs:
                s, e = read_ns(h.out / f"s.{j}"), read_ns(h.out / f"e.{j}")
                if s is not None and e is not None:
                    spans.append((s, e))
            spans.sort()
            gaps = [(b[0] - a[1]) / 1e6 for a, b in zip(spans, spans[1:])]
            recs = [r for r in run_records(h) if r["ended_at"] and r["finished_at"]]
            cleanup = [r["finished_at"] - r["ended_at"] for r in recs]
            rows.append(
                dist_row(
                    "handover",
                    f"hand-over, exit to next start ({procs_alive:,} processes alive)",
                    "ms",
                    gaps,
                    "< 100 ms",
                )
            )
            rows.append(
                dist_row(
                    "handover_cleanup",
                    "↳ of which the worker's cleanup (exit.json to cleanup.json)",
                    "ms",
                    cleanup,
                )
            )
            notes["handover_procs"] = procs_alive
        finally:
            h.close()
    lane_handover(bins, rows, notes)


def startpath_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The start path taken apart (issue 18): BENCH_STARTPATH starts on an idle lane through
    the CLI and as many through the socket API, each part's p50 from the stamps the daemon
    keeps in `run.json` and the worker in `worker.json` (microseconds, CLOCK_REALTIME)."""
    h = Home(bins, "startpath")
    try:
        h.start()
        script = f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""
        spec = h.spec("start path", script)
        spec_file = h.spec_file("startpath", spec)
        seen: set[str] = set()
        parts: dict[str, dict[str, list[float]]] = {"cli": {}, "api": {}}

        def new_run() -> tuple[dict, dict] | None:
            for d in (h.home / "tasks").iterdir():
                if d.name in seen:
                    continue
                try:
                    run = json.loads((d / "run.json").read_text())
                    worker = json.loads((d / "worker.json").read_text())
                except (FileNotFoundError, json.JSONDecodeError):
                    continue
                if worker.get("stamps") is None:
                    continue  # the record naming the child has not landed yet
                seen.add(d.name)
                return run, worker
            return None

        # Warm-up: one of each, not counted (page cache, first connection).
        for i, path in enumerate(("cli", "api", *(["cli", "api"] * STARTPATH))):
            job = uuid7()
            start_file = h.out / f"start.{job}"
            t0 = time.time_ns() // 1000
            if path == "cli":
                h.run_cli_submit(spec_file, job)
            else:
                h.submit_api(spec, job, fresh=True)
            started = wait_for(lambda: read_ns(start_file), 30, 0.0005, "the job to start")
            found = wait_for(new_run, 30, 0.0005, "the run's worker.json with its stamps")
            h.wait_idle()
            if i < 2:
                continue
            run, worker = found
            d, w = run.get("stamps") or {}, worker["stamps"]
            if not d or w.get("spawned") is None:
                raise RuntimeError(f"run {run['task']} has no daemon stamps: {d} {w}")
            marks = [
                ("request", t0),
                ("decided", d["decided"]),
                ("reserved", d["reserved"]),
                ("spawned", w["spawned"]),
                ("main", w["main"]),
                ("run_read", w["run_read"]),
                ("reserve", w["reserve"]),
                ("recorded", w["recorded"]),
                ("workload", w["workload"]),
                ("date", started // 1000),
            ]
            for (a, ta), (b, tb) in zip(marks, marks[1:]):
                parts[path].setdefault(f"{a}>{b}", []).append((tb - ta) / 1000)
            parts[path].setdefault("total", []).append((started // 1000 - t0) / 1000)

        labels = [
            ("request>decided", "request to the pass's decision: process start, connect, "
             "submit (validation, commit: one WAL fsync), reply, pass"),
            ("decided>reserved", "the `launching` commit (one WAL fsync)"),
            ("reserved>spawned", "run directory, `run.json` (write, fsync, rename), "
             "`runner.lock` locked"),
            ("spawned>main", "hand-over to the standby worker (or fork and exec of a fresh "
             "`homebased-worker`), to its first stamp"),
            ("main>run_read", "worker: lock adopted, session, `run.json` read"),
            ("run_read>reserve", "worker: records set up (a reserve an earlier worker left is "
             "taken over; a new one is made once the workload runs)"),
            ("reserve>recorded", "worker: first `worker.json` (write, fsync, rename, fsync "
             "folder, which also names `run.json` durably)"),
            ("recorded>workload", "worker: subreaper, pending-stop check"),
            ("workload>date", "workload: folders, `output.log`, environment, fork, exec "
             "`sh`, `sh` runs `date`"),
            ("total", "total: submit to the workload's `date`"),
        ]
        for path, title in (("cli", "CLI"), ("api", "socket API")):
            for key, label in labels:
                if path == "api" and key not in ("request>decided", "total"):
                    continue
                values = parts[path].get(key, [])
                rows.append(
                    dist_row(f"startpath_{path}_{key}", f"start path ({title}): {label}",
                             "ms", values, tails=False)
                )
        cli = median(parts["cli"].get("request>decided", []))
        api = median(parts["api"].get("request>decided", []))
        if cli is not None and api is not None:
            notes["startpath_cli_own"] = cli - api
    finally:
        h.close()


def job_lanes(h: Home) -> dict[str, list[str]]:
    """Per job, the lanes its run held (`run.json` `lanes`; these jobs run once)."""
    lanes_of: dict[str, list[str]] = {}
    for d in (h.home / "tasks").iterdir():
        try:
            run = json.loads((d / "run.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        lanes_of[run["job"]] = [lane["name"] for lane in run["lanes"]]
    return lanes_of


def job_decisions(h: Home) -> dict[str, int]:
    """Per job, when the pass that launched its run decided it (`run.json` `stamps.decided`,
    microseconds): the launches of one pass share it."""
    decided: dict[str, int] = {}
    for d in (h.home / "tasks").iterdir():
        try:
            run = json.loads((d / "run.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            continue
        at = (run.get("stamps") or {}).get("decided")
        if at is not None:
            decided[run["job"]] = at
    return decided


def lane_gaps(h: Home, jobs: list[str]) -> tuple[dict[str, list[tuple[int, int]]], list[float]]:
    """Per lane (each of `run.json`'s `lanes`), the (start, end) stamps of `jobs` that wrote
    both (`s.<job>`, `e.<job>` under `h.out`), and every gap in ms from one job's end to the
    next job's start on the same lane: a job on several lanes ends a span on each."""
    lanes_of = job_lanes(h)
    by_lane: dict[str, list[tuple[int, int]]] = {}
    for j in jobs:
        s, e = read_ns(h.out / f"s.{j}"), read_ns(h.out / f"e.{j}")
        if s is not None and e is not None:
            for lane in lanes_of.get(j, []):
                by_lane.setdefault(lane, []).append((s, e))
    gaps = []
    for spans in by_lane.values():
        spans.sort()
        gaps += [(b[0] - a[1]) / 1e6 for a, b in zip(spans, spans[1:])]
    return by_lane, gaps


def lane_handover(bins: Path, rows: list[Row], notes: dict) -> None:
    """Issue 18 part 5: BENCH_LANES lanes, each running 1-second jobs back to back with
    BENCH_LANE_QUEUE queued; per lane, the gap from a job's last act to the next job's first
    (cleanup included)."""
    h = Home(bins, "lanes", lanes=LANES)
    try:
        h.start()
        h.hold_lanes(LANES, 60)
        spec = h.spec("one second", h.stamped_script("1"))
        jobs = [h.submit_api(spec) for _ in range(LANE_QUEUE)]
        wait_for(h.release_hold, 10, 0.01, "the holders to wait on their FIFO")
        budget = 60 + LANE_QUEUE * 1.5 / LANES
        wait_for(
            lambda: all(read_ns(h.out / f"e.{j}") for j in jobs[-LANES:]),
            budget,
            0.05,
            "the last jobs",
        )
        h.wait_idle(timeout=60)
        by_lane, gaps = lane_gaps(h, jobs)
        rows.append(
            dist_row(
                "handover_lanes",
                f"hand-over, {LANES} lanes of 1 s jobs back to back, {LANE_QUEUE:,} queued "
                "(exit to next start on the lane)",
                "ms",
                gaps,
                "< 100 ms p99",
            )
        )
        rows.append(cleanup_row("handover_lanes_cleanup", h))
        notes["handover_lanes_ran"] = sum(len(s) for s in by_lane.values())
    finally:
        h.close()


def queue_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """All lanes held; BENCH_QUEUE submits (CLI at both ends, the API in between); list cost,
    footprint and idle CPU with the queue full; then kill -9 and a restart with it."""
    h = Home(bins, "queue", lanes=LANES)
    try:
        h.start()
        for _ in range(LANES):
            h.submit_api(h.spec("hold", h.hold_script()))
        wait_for(lambda: len(h.executing()) == LANES, 60, 0.01, "every holder to run")
        spec = h.spec("queued", "true")
        spec_file = h.spec_file("queued", spec)

        cli_jobs: list[str] = []  # in submission order: the queue's order

        def cli_batch(n: int) -> list[float]:
            out = []
            for _ in range(n):
                job = uuid7()
                cli_jobs.append(job)
                t0 = time.perf_counter_ns()
                h.run_cli_submit(spec_file, job)
                out.append((time.perf_counter_ns() - t0) / 1e6)
            return out

        def api_batch(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                h.submit_api(spec)
                out.append((time.perf_counter_ns() - t0) / 1e6)
            return out

        def list_cost(runs: int) -> tuple[list[float], list[float], int]:
            """The CLI's wall time with its output going to a file (`resource jobs --json >
            FILE`), read and counted afterwards: at 100,000 queued that is 49 to 177 MB, and a
            Python pipe decoding it as text took longer than the CLI itself. `GET /v1/jobs`
            is timed with Python's own read and parse."""
            cli, api = [], []
            count = 0
            listed = h.work / "listed.json"
            for _ in range(runs):
                with open(listed, "wb") as out:
                    t0 = time.perf_counter_ns()
                    r = subprocess.run(
                        [h.hb_bin, "--home", str(h.home), "--json", "resource", "jobs"],
                        cwd=h.work,
                        env=h.env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.PIPE,
                        timeout=120,
                    )
                    cli.append((time.perf_counter_ns() - t0) / 1e6)
                if r.returncode != 0:
                    raise RuntimeError(f"resource jobs exited {r.returncode}: {r.stderr[:400]!r}")
                with open(listed, "rb") as f:
                    count = len(json.load(f)["jobs"])
                t0 = time.perf_counter_ns()
                h.api.get("/v1/jobs")
                api.append((time.perf_counter_ns() - t0) / 1e6)
            return cli, api, count

        def fill(n: int, stop_at: float) -> int:
            """`n` untimed API submits from FILL_CONNECTIONS threads, each on its own
            connection: the core serves what queued up meanwhile before its scheduling pass,
            so concurrent submits share passes. Stops at `stop_at` (monotonic)."""
            if n <= 0:
                return 0
            done = [0] * FILL_CONNECTIONS
            errors: list[BaseException] = []

            def worker(k: int) -> None:
                api = Api(h.sock)
                try:
                    for _ in range(k, n, FILL_CONNECTIONS):
                        if errors or time.monotonic() > stop_at:
                            return
                        job = uuid7()
                        api.post("/v1/jobs", h.body(job, spec))
                        done[k] += 1
                except BaseException as e:  # reported below
                    errors.append(e)
                finally:
                    api.close()

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(FILL_CONNECTIONS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return sum(done)

        queued = 0
        cli_first = cli_batch(SAMPLE)
        api_first = api_batch(SAMPLE)
        queued += 2 * SAMPLE
        mark_2000 = {}
        t_fill = time.perf_counter()
        stop_at = time.monotonic() + FILL_BUDGET
        filled = 0
        if QUEUE >= 2000 + 2 * SAMPLE:
            filled += fill(2000 - queued, stop_at)
            queued += filled
            if queued == 2000:
                c, a, n = list_cost(LIST_RUNS)
                mark_2000.update(list_cli=c, list_api=a, n=n, rss=rss_kib(h.pid))
        more = fill(QUEUE - 2 * SAMPLE - queued, stop_at)
        filled += more
        queued += more
        fill_s = time.perf_counter() - t_fill
        if time.monotonic() > stop_at:
            log(f"fill budget of {FILL_BUDGET} s spent at {queued} queued")
        before_last = queued
        cli_last = cli_batch(SAMPLE)
        api_last = api_batch(SAMPLE)
        queued += 2 * SAMPLE
        log(f"queue filled: {queued} submitted, bulk API fill {fill_s:.1f} s")

        list_cli, list_api, listed = list_cost(LIST_RUNS)
        notes["listed"] = listed
        # A scheduling pass with the queue full: `POST /v1/internal/settle` runs the timers and
        # one pass (issue 18: bounded by what a decision can reach, not by the queue).
        settle_ms = []
        for _ in range(LIST_RUNS):
            t0 = time.perf_counter_ns()
            h.api.post("/v1/internal/settle", {})
            settle_ms.append((time.perf_counter_ns() - t0) / 1e6)
        if listed != queued + LANES:
            log(f"resource jobs listed {listed} jobs, expected {queued + LANES}")

        # The end of a job near the head of the queue against one at its tail (issue 18):
        # with dense positions every later job of the level shifted when one ended.
        # The CLI's submits are the first SAMPLE queued and SAMPLE a hundred from the back;
        # no listing is read for this, so the footprint below is the listing's own.
        cancel_ms: dict[str, list[float]] = {"head": [], "tail": []}
        if SAMPLE > 2 * CANCEL_SAMPLE and queued > 2 * SAMPLE:
            # The 2nd to (CANCEL_SAMPLE+1)th queued job, then the last CANCEL_SAMPLE the CLI
            # submitted (the API's SAMPLE after them still queued behind).
            for end, picked in (
                ("head", cli_jobs[1 : 1 + CANCEL_SAMPLE]),
                ("tail", cli_jobs[-CANCEL_SAMPLE:]),
            ):
                for job in picked:
                    t0 = time.perf_counter_ns()
                    h.api.post(f"/v1/jobs/{job}/cancel", {"operation_id": uuid7()})
                    cancel_ms[end].append((time.perf_counter_ns() - t0) / 1e6)
            queued -= 2 * CANCEL_SAMPLE
            queued_then = queued + 2 * CANCEL_SAMPLE
            for end, where in (
                ("head", "2nd to 6th"),
                ("tail", f"{queued_then - SAMPLE - 4:,}th to {queued_then - SAMPLE:,}th"),
            ):
                rows.append(
                    dist_row(
                        f"cancel_{end}",
                        f"cancel (socket API) near the {end} ({where} queued), "
                        f"{queued_then:,} queued",
                        "ms",
                        cancel_ms[end],
                        "head ≈ tail",
                        tails=False,
                    )
                )

        rows.append(
            dist_row(
                "settle_full",
                f"settle (timers + one scheduling pass), {queued:,} queued + {LANES} active",
                "ms",
                settle_ms,
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "submit_cli_first",
                f"submit via CLI, first {SAMPLE} (queue 0-{SAMPLE})",
                "ms",
                cli_first,
                "< 6 ms",
            )
        )
        rows.append(
            dist_row(
                "submit_cli_last",
                f"submit via CLI, at {before_last:,}-{before_last + SAMPLE:,} queued",
                "ms",
                cli_last,
                "< 6 ms, ≤ 1.2× first",
            )
        )
        rows.append(
            dist_row(
                "submit_api_first",
                f"submit via API, first {SAMPLE} (queue {SAMPLE}-{2 * SAMPLE})",
                "ms",
                api_first,
            )
        )
        rows.append(
            dist_row(
                "submit_api_last",
                f"submit via API, last {SAMPLE} (to {queued:,} queued)",
                "ms",
                api_last,
                "≤ 1.2× first",
            )
        )
        ratio_cli = median(cli_last) / median(cli_first)
        ratio_api = median(api_last) / median(api_first) if api_first else None
        rows.append(
            Row(
                "submit_ratio",
                "submit cost growth, last / first (CLI; API)",
                "x",
                target="≤ 1.2",
                text=f"{ratio_cli:.2f}; {fmt(ratio_api)}",
            )
        )
        if filled:
            rows.append(
                Row(
                    "fill_rate",
                    f"bulk API fill, {FILL_CONNECTIONS} concurrent connections (untimed each)",
                    "jobs/s",
                    p50=filled / fill_s,
                    n=filled,
                )
            )
        if mark_2000:
            rows.append(
                dist_row(
                    "list_2000",
                    f"`resource jobs --json` (CLI), 2,000 queued + {LANES} active",
                    "ms",
                    mark_2000["list_cli"],
                    tails=False,
                )
            )
        rows.append(
            dist_row(
                "list_cli",
                f"`resource jobs --json` (CLI), {queued:,} queued + {LANES} active",
                "ms",
                list_cli,
                # Issue 8's target at 10,000 queued, issue 18's at 100,000.
                "< 50 ms" if queued <= 10_000 else "< 250 ms",
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "list_api",
                f"GET /v1/jobs (socket API), {queued:,} queued + {LANES} active",
                "ms",
                list_api,
                tails=False,
            )
        )

        # Footprint with the queue full and every lane held.
        h.api.close()
        time.sleep(1.0)
        if mark_2000.get("rss"):
            rows.append(
                Row(
                    "rss_2000",
                    "daemon RSS, 2,000 queued",
                    "MB",
                    p50=mark_2000["rss"] / 1024,
                )
            )
        rss = rss_kib(h.pid)
        rows.append(
            Row(
                "rss",
                f"daemon RSS, {queued:,} queued, {LANES} lanes busy",
                "MB",
                p50=rss / 1024 if rss else None,
                target="< 20 MB" if queued <= 10_000 else "< 60 MB",
            )
        )
        worker_rss = [r for r in (rss_kib(pid) for pid, _ in h.workers()) if r]
        if worker_rss:
            rows.append(
                Row(
                    "worker_rss",
                    "worker RSS (each busy lane's homebased-worker)",
                    "MB",
                    p50=median(worker_rss) / 1024,
                    n=len(worker_rss),
                )
            )
        worker_pids = [pid for pid, _ in h.workers()]
        c0 = cpu_ticks(h.pid)
        w0 = sum(cpu_ticks(p) for p in worker_pids if alive(p))
        time.sleep(IDLE_SECONDS)
        c1 = cpu_ticks(h.pid)
        w1 = sum(cpu_ticks(p) for p in worker_pids if alive(p))
        tick_ms = 1000 / CLK_TCK
        rows.append(
            Row(
                "idle_cpu",
                f"daemon CPU over {IDLE_SECONDS} idle s, queue full",
                "ms",
                p50=(c1 - c0) * tick_ms,
                target="0 measurable",
            )
        )
        rows.append(
            Row(
                "worker_idle_cpu",
                f"all {len(worker_pids)} workers' CPU over the same {IDLE_SECONDS} s",
                "ms",
                p50=(w1 - w0) * tick_ms,
            )
        )
        notes["tick_ms"] = tick_ms

        # kill -9 with the queue full and every lane held, then `daemon serve` again.
        lock_ms = h.kill9()
        t0 = time.perf_counter_ns()
        h.serve_foreground()
        probe = Api(h.sock, timeout=60)

        def status_ok():
            if h.serve is not None and h.serve.poll() is not None:
                raise RuntimeError(
                    f"the restarted daemon exited {h.serve.returncode}: "
                    + (h.work / "serve.log").read_text()[-400:]
                )
            try:
                probe.get("/v1/status", fresh=True)
                return True
            except (OSError, ApiError, http.client.HTTPException):
                return False

        wait_for(status_ok, 120, 0.001, "the restarted daemon's socket")
        sock_ms = (time.perf_counter_ns() - t0) / 1e6

        def resources_ok():
            try:
                return probe.get("/v1/resources", fresh=True)["resources"]
            except (OSError, ApiError, http.client.HTTPException):
                return None

        res = wait_for(resources_ok, 120, 0.001, "the restarted daemon's resource list")
        res_ms = (time.perf_counter_ns() - t0) / 1e6
        running = sum(
            1 for r in res if r["run"] and r["run"]["phase"]["phase"] == "executing"
        )
        rows.append(
            Row(
                "restart_lock",
                f"kill -9 of the daemon ({queued:,} queued) to `daemon.lock` free",
                "ms",
                p50=lock_ms,
            )
        )
        rows.append(
            Row(
                "restart",
                f"↳ then `daemon serve` to a working socket ({LANES} live runs)",
                "ms",
                p50=sock_ms,
            )
        )
        rows.append(
            Row(
                "restart_resources",
                "↳ to GET /v1/resources answered",
                "ms",
                p50=res_ms,
            )
        )
        still = len(h.workers())
        rows.append(
            Row(
                "restart_runs",
                "↳ live runs after that restart (executing / workers alive)",
                "runs",
                text=f"{running} / {still} of {LANES}",
                target=f"{LANES} / {LANES}",
            )
        )
        notes["queued"] = queued
        # Throw the home away without cancelling 10,000 jobs one by one.
        h.stop(cancel=False)
    finally:
        h.close()


def preempt_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """One lane running a low `yield` job; a high job arrives. Measured: urgent submit to
    `control/yield` existing, and the low workload's exit 75 to the urgent workload's start."""
    h = Home(bins, "preempt")
    try:
        h.start()
        low_script = (
            '[ "$HOMEBASED_RESUME" = 1 ] && exit 0; '
            f": > '{h.out}/ready.'\"$HOMEBASED_JOB_ID\"; "
            'while [ ! -e "$HOMEBASED_YIELD_FILE" ]; do sleep 0.01; done; '
            f"date +%s%N > '{h.out}/yexit.'\"$HOMEBASED_JOB_ID\"; exit 75"
        )
        low_spec = h.spec("low yield", low_script, priority="low", mode="yield")
        high_spec = h.spec(
            "urgent", f"date +%s%N > '{h.out}/ustart.'\"$HOMEBASED_JOB_ID\"", priority="high"
        )
        high_file = h.spec_file("urgent", high_spec)
        to_yield = {"cli": [], "api": []}
        exit_to_start = []
        outcomes = []
        for i in range(PREEMPT + 1):  # round 0 is a warm-up
            path = "cli" if i % 2 == 0 else "api"
            low = h.submit_api(low_spec)
            wait_for(lambda: (h.out / f"ready.{low}").exists(), 30, 0.001, "the low job")
            run = wait_for(
                lambda: next((r for r in h.executing() if r["job"] == low), None),
                30,
                0.002,
                "the low run to execute",
            )
            yield_file = h.task_dir(run["task"]) / "control" / "yield"
            high = uuid7()
            err: list[BaseException] = []
            t0 = time.time_ns()
            if path == "cli":
                proc = subprocess.Popen(
                    h.submit_cli_argv(high_file, high),
                    cwd=h.work,
                    env=h.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                waiter = None
            else:
                proc = None
                submitter = Api(h.sock)

                def submit() -> None:
                    try:
                        submitter.post("/v1/jobs", h.body(high, high_spec))
                    except BaseException as e:  # reported below
                        err.append(e)
                    finally:
                        submitter.close()

                waiter = threading.Thread(target=submit)
                waiter.start()
            deadline = time.monotonic() + 30
            while not yield_file.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("no yield file within 30 s")
                time.sleep(0.0002)
            t_yield = time.time_ns()
            if proc is not None:
                proc.wait(timeout=60)
            if waiter is not None:
                waiter.join(timeout=60)
            if err:
                raise err[0]
            y = wait_for(lambda: read_ns(h.out / f"yexit.{low}"), 30, 0.001, "exit 75")
            u = wait_for(lambda: read_ns(h.out / f"ustart.{high}"), 30, 0.001, "urgent")
            wait_for(
                lambda: h.job(low)["state"]["state"] in ("succeeded", "failed", "cancelled"),
                60,
                0.005,
                "the low job to resume and finish",
            )
            h.wait_idle()
            if i == 0:
                continue
            to_yield[path].append((t_yield - t0) / 1e6)
            exit_to_start.append((u - y) / 1e6)
            detail = h.job(low)
            outcomes.append(
                (detail["state"]["state"], [r["status"] for r in detail["runs"]])
            )
        rows.append(
            dist_row(
                "preempt_cli",
                "preemption: urgent submit (CLI) to control/yield",
                "ms",
                to_yield["cli"],
                "< 20 ms",
            )
        )
        rows.append(
            dist_row(
                "preempt_api",
                "preemption: urgent submit (API) to control/yield",
                "ms",
                to_yield["api"],
                "< 20 ms",
            )
        )
        rows.append(
            dist_row(
                "preempt_handover",
                "preemption: low exits 75 to urgent start",
                "ms",
                exit_to_start,
                "< 100 ms (hand-over)",
            )
        )
        expected = ("succeeded", ["preempted", "succeeded"])
        odd = [o for o in outcomes if o != expected]
        notes["preempt_odd"] = odd
    finally:
        h.close()


def sweep_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Cleanup time (exit.json ended_at to cleanup.json finished_at) of short jobs with P
    unrelated sleepers alive, for each P in BENCH_SWEEP_PROCS."""
    h = Home(bins, "sweep")
    try:
        h.start()
        spec = h.spec("sweep", "true")
        by_p: dict[int, tuple[int, list[int]]] = {}
        for p in SWEEP_PROCS:
            with Sleepers(p):
                alive_n = count_processes()
                jobs = []
                for _ in range(SWEEP_JOBS + 1):  # the first is a warm-up
                    job = h.submit_api(spec)
                    wait_for(
                        lambda: h.job(job)["state"]["state"] != "queued"
                        and h.job(job)["active_run"] is None,
                        60,
                        0.002,
                        "the sweep job",
                    )
                    h.wait_idle()
                    jobs.append(job)
                tasks = set()
                for job in jobs[1:]:
                    for r in h.job(job)["runs"]:
                        tasks.add(r["task"])
                recs = [
                    r
                    for r in run_records(h)
                    if r["task"] in tasks and r["ended_at"] and r["finished_at"]
                ]
                by_p[p] = (alive_n, [r["finished_at"] - r["ended_at"] for r in recs])
        for p, (alive_n, values) in by_p.items():
            rows.append(
                dist_row(
                    f"sweep_{p}",
                    f"cleanup of a short job, {p:,} sleepers ({alive_n:,} processes)",
                    "ms",
                    values,
                )
            )
        ps = [p for p in by_p if by_p[p][1]]
        if len(ps) >= 2 and max(ps) > min(ps):
            lo, hi = min(ps), max(ps)
            n_lo, n_hi = by_p[lo][0], by_p[hi][0]
            slope = (median(by_p[hi][1]) - median(by_p[lo][1])) / ((n_hi - n_lo) / 1000)
            rows.append(
                Row(
                    "sweep_slope",
                    "sweep cost per 1,000 processes (median cleanup slope)",
                    "ms",
                    p50=slope,
                )
            )
        notes["sweep_resolution"] = "1 ms (exit.json and cleanup.json carry milliseconds)"
    finally:
        h.close()


def kill9_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """A job sleeping 3 s; kill -9 the daemon; `daemon start` again; what job show says."""
    h = Home(bins, "kill9")
    try:
        h.start()
        job = h.submit_api(h.spec("sleep 3", "sleep 3"))
        wait_for(lambda: h.executing(), 30, 0.005, "the job to run")
        time.sleep(0.5)
        lock_ms = h.kill9()
        start_ms = h.start()
        detail = wait_for(
            lambda: (d := h.job(job))["state"]["state"] in ("succeeded", "failed", "cancelled")
            and d,
            60,
            0.05,
            "the job to end",
        )
        h.wait_idle(timeout=60)
        detail = h.job(job)  # again, now that its cleanup is recorded too
        runs = detail["runs"]
        text = f"{detail['state']['state']}, {len(runs)} run" + ("s" if len(runs) != 1 else "")
        notes["kill9_detail"] = [
            {k: r.get(k) for k in ("status", "process", "started_at", "ended_at", "cleanup")}
            for r in runs
        ]
        rows.append(
            Row(
                "kill9",
                "a running job after daemon kill -9 and `daemon start`",
                "state",
                text=text,
                target="succeeded, one run",
            )
        )
        rows.append(Row("kill9_lock", "↳ kill -9 to `daemon.lock` free", "ms", p50=lock_ms))
        rows.append(
            Row("kill9_start", "↳ then `daemon start` wall time", "ms", p50=start_ms)
        )
    finally:
        h.close()


def sampler_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The GPU sampler on an idle machine with BENCH_LANES fake cards, each with one compute
    process: the daemon's CPU (its reaped queries included) while someone reads resources,
    scaled to an hour, and `resource list` latency with sampling on."""
    h = Home(bins, "sampler", lanes=LANES)
    probe = h.work / "nvidia-smi"
    listing = "".join(f"GPU {i}: Fake GPU (UUID: GPU-{i})\\n" for i in range(LANES))
    apps = "".join(f"GPU-{i}, {100000 + i}, 1024\\n" for i in range(LANES))
    probe.write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in -L) printf '{listing}' ;; *) printf '{apps}' ;; esac\n"
    )
    try:
        h.start()
        h.cli_json("resource", "list")
        wait_for(
            lambda: all(
                r["gpu"] and r["gpu"]["processes"] is not None
                for r in h.cli_json("resource", "list")["resources"]
            ),
            30,
            0.1,
            "the first sample",
        )

        def ticks(pid: int) -> int:
            raw = Path(f"/proc/{pid}/stat").read_text()
            fields = raw[raw.rindex(")") + 2 :].split()
            # utime, stime, cutime, cstime: fields 14 to 17 (waited-for queries included).
            return sum(int(f) for f in fields[11:15])

        c0 = ticks(h.pid)
        end = time.monotonic() + IDLE_SECONDS
        lat: list[float] = []
        while time.monotonic() < end:
            t0 = time.perf_counter_ns()
            h.cli("--json", "resource", "list")
            lat.append((time.perf_counter_ns() - t0) / 1e6)
            time.sleep(1)
        c1 = ticks(h.pid)
        tick_ms = 1000 / CLK_TCK
        per_hour_s = (c1 - c0) * tick_ms / 1000 * 3600 / IDLE_SECONDS
        rows.append(
            Row(
                "sampler_cpu",
                f"daemon CPU per hour, sampling {LANES} lanes, idle machine (over {IDLE_SECONDS} s)",
                "s/h",
                p50=per_hour_s,
            )
        )
        rows.append(
            dist_row(
                "list_sampling",
                f"`resource list --json` with sampling on, {LANES} lanes, through the CLI",
                "ms",
                lat,
            )
        )
    finally:
        h.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fleet_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Fleet on loopback: an origin without lanes and an authority with one, both with the
    token. Remote submit to start: the origin's socket API (spec `machine` = the authority)
    to the workload's `date +%s%N` on the authority. Event latency: the authority's
    JOB_SUCCEEDED (`at`, ms) to its line in the origin's thread inbox (polled every 0.5 ms),
    with the origin's pull caught up (a long poll waiting on the authority)."""
    token = "bench-fleet-token-" + uuid.uuid4().hex
    origin, authority = Home(bins, "fleet-origin"), Home(bins, "fleet-authority")
    try:
        ports = {"origin": free_port(), "authority": free_port()}
        for h, name, peer in (
            (authority, "authority", None),
            (origin, "origin", "authority"),
        ):
            text = (
                f'[web]\nlisten = "127.0.0.1:{ports[name]}"\n[fleet]\nenabled = true\n'
                f'machine_name = "bench-{name}"\ntoken = "{token}"\n'
            )
            if peer:
                text += f'[[fleet.machines]]\naddress = "http://127.0.0.1:{ports[peer]}"\n'
            config = h.work / "config.toml"
            config.write_text(text)
            config.chmod(0o600)
            h.env["HOMEBASED_CONFIG"] = str(config)
            h.start()
        wait_for(
            lambda: any(
                m["name"] == "bench-authority" and m["state"] == "up"
                for m in origin.cli_json("fleet", "machines")["machines"]
            ),
            30,
            0.05,
            "the authority to be up on the origin",
        )
        script = f"date +%s%N > '{authority.out}/start.'\"$HOMEBASED_JOB_ID\""
        spec = origin.spec("fleet latency", script)
        spec["cwd"] = str(authority.work)
        spec["machine"] = "bench-authority"
        inbox = origin.home / "threads" / f"{origin.thread}.jsonl"

        def delivered_at(job: str) -> int | None:
            try:
                text = inbox.read_text()
            except FileNotFoundError:
                return None
            if job not in text:
                return None
            seen = time.time_ns()
            for line in text.splitlines():
                if job in line and "JOB_SUCCEEDED" in line:
                    event = json.loads(line.split(" ", 1)[1] if line.startswith("HOMEBASED_EVENT") else line)
                    at = datetime.datetime.fromisoformat(event["at"].replace("Z", "+00:00"))
                    return seen - int(at.timestamp() * 1000) * 1_000_000
            return None

        # The same job submitted on the authority's own socket, interleaved: the baseline.
        local_spec = {k: v for k, v in spec.items() if k != "machine"}
        starts, local_starts, events = [], [], []
        for i in range(FLEET_JOBS + 1):  # the first one warms up, not counted
            job = uuid7()
            t0 = time.time_ns()
            origin.submit_api(spec, job, fresh=True)
            started = wait_for(
                lambda: read_ns(authority.out / f"start.{job}"), 30, 0.0005, "the remote job to start"
            )
            lag = wait_for(lambda: delivered_at(job), 30, 0.0005, "the event on the origin")
            authority.wait_idle()
            local = uuid7()
            t1 = time.time_ns()
            authority.submit_api(local_spec, local, fresh=True)
            local_started = wait_for(
                lambda: read_ns(authority.out / f"start.{local}"), 30, 0.0005, "the local job to start"
            )
            authority.wait_idle()
            if i > 0:
                starts.append((started - t0) / 1e6)
                local_starts.append((local_started - t1) / 1e6)
                events.append(lag / 1e6)
        rows.append(
            dist_row(
                "fleet_start",
                "remote submit to start, origin socket API to the authority's workload",
                "ms",
                starts,
            )
        )
        rows.append(
            dist_row(
                "fleet_start_local",
                "the same job submitted on the authority's own socket (interleaved baseline)",
                "ms",
                local_starts,
            )
        )
        rows.append(
            dist_row(
                "fleet_event",
                "event latency, authority's JOB_SUCCEEDED to the origin's inbox",
                "ms",
                events,
                "< 1000 ms",
            )
        )
    finally:
        origin.close()
        authority.close()


def dashboard_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The dashboard's cost with BENCH_DASHBOARD_QUEUE jobs queued (BENCH_LANES lanes held):
    its first load (the page's files and its first reads) and one refresh (what the page asks
    for every second) over the TCP listener, bytes and time; then, where Chromium and
    chromedriver are installed, the same in a headless Chromium on loopback: navigate to a
    rendered queue, and the page's own measure of one refresh (reads, parsing, rendering)."""
    h = Home(bins, "dashboard", lanes=LANES)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    h.env["HOMEBASED_WEB_LISTEN"] = f"127.0.0.1:{port}"
    try:
        h.start()
        for i in range(LANES):
            h.submit_api(h.spec(f"hold-{i}", "sleep 100000"))
        for i in range(DASHBOARD_QUEUE - LANES):
            h.submit_api(h.spec(f"queued-{i}", "true"))
        wait_for(
            lambda: sum(
                1 for r in h.cli_json("resource", "list")["resources"] if r["run"]
            )
            == LANES,
            60,
            0.05,
            "every lane held",
        )
        files = ["/", "/dashboard/app.js", "/dashboard/style.css"]
        first_reads = [
            "/v1/resources",
            "/v1/jobs",
            "/v1/status",
            "/v1/fleet/identity",
            "/v1/fleet/machines",
        ]
        tick = ["/v1/resources", "/v1/jobs"]

        tags: dict[str, str] = {}

        def fetch(conn, path: str, revalidate: bool = False) -> int:
            headers = {"Host": f"127.0.0.1:{port}"}
            if revalidate and path in tags:
                headers["If-None-Match"] = tags[path]
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            body = r.read()
            if r.status not in (200, 304):
                raise RuntimeError(f"GET {path}: HTTP {r.status}")
            if r.getheader("ETag"):
                tags[path] = r.getheader("ETag")
            return len(body)

        page_bytes = 0
        load_ms: list[float] = []
        load_bytes = 0
        for _ in range(LIST_RUNS):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            t0 = time.perf_counter_ns()
            page_bytes = sum(fetch(conn, p) for p in files)
            load_bytes = page_bytes + sum(fetch(conn, p) for p in first_reads)
            load_ms.append((time.perf_counter_ns() - t0) / 1e6)
            conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        tick_ms: list[float] = []
        tick_bytes = 0
        for _ in range(20):
            t0 = time.perf_counter_ns()
            tick_bytes = sum(fetch(conn, p) for p in tick)
            tick_ms.append((time.perf_counter_ns() - t0) / 1e6)
        # What the browser does: revalidate, and get 304 with no body while nothing changed.
        same_ms: list[float] = []
        same_bytes = 0
        for _ in range(20):
            t0 = time.perf_counter_ns()
            same_bytes = sum(fetch(conn, p, revalidate=True) for p in tick)
            same_ms.append((time.perf_counter_ns() - t0) / 1e6)
        conn.close()
        n = DASHBOARD_QUEUE
        rows.append(
            Row(
                "dash_page",
                "dashboard page files (HTML + JS + CSS, embedded), uncompressed",
                "KiB",
                p50=page_bytes / 1024,
            )
        )
        rows.append(
            dist_row(
                "dash_load_http",
                f"dashboard first load over TCP (files + first reads, {load_bytes / 1024:.0f} KiB), {n} jobs",
                "ms",
                load_ms,
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "dash_tick_http",
                f"one dashboard refresh over TCP (resources + jobs, {tick_bytes / 1024:.0f} KiB), {n} jobs",
                "ms",
                tick_ms,
            )
        )
        # In the browser, a change every tick (one more job), so every refresh re-renders.
        rows.append(
            dist_row(
                "dash_tick_same",
                f"one dashboard refresh over TCP, nothing changed (304, {same_bytes} B of body), {n} jobs",
                "ms",
                same_ms,
            )
        )
        browser_rows(rows, f"http://127.0.0.1:{port}/", n, lambda: h.submit_api(h.spec("more", "true")))
    finally:
        h.close()


def browser_rows(rows: list[Row], url: str, n: int, change) -> None:
    """The dashboard in a headless Chromium through chromedriver's W3C WebDriver (loopback
    only; every other host goes to a dead proxy). Absent browser: a row that says so."""
    chromium = next(
        (p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if Path(p).is_file()),
        None,
    )
    driver_bin = shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        rows.append(
            Row("dash_browser", "dashboard in Chromium", "-", text="not measured: no chromium/chromedriver")
        )
        return
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dport = s.getsockname()[1]
    profile = tempfile.mkdtemp(prefix="hb-bench-chromium-", dir=TMPDIR)
    driver = subprocess.Popen(
        [driver_bin, f"--port={dport}", "--allowed-ips=127.0.0.1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def wd(method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{dport}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with opener.open(req, timeout=120) as r:
            return json.loads(r.read())["value"]

    try:
        wait_for(lambda: _answers(wd), 30, 0.05, "chromedriver")
        args = [
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--proxy-server=http://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
            "--window-size=1280,900",
            f"--user-data-dir={profile}",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": chromium, "args": args}}}}
        session = wd("POST", "/session", caps)["sessionId"]
        base = f"/session/{session}"

        def script(js: str):
            return wd("POST", f"{base}/execute/sync", {"script": js, "args": []})

        t0 = time.perf_counter_ns()
        wd("POST", f"{base}/url", {"url": url})
        wait_for(
            lambda: script("return document.querySelectorAll('tr[data-job]').length;") >= n,
            120,
            0.01,
            "the queue rendered",
        )
        rendered_ms = (time.perf_counter_ns() - t0) / 1e6
        # The page's own measure of each refresh, one value per tick: 20 ticks with nothing
        # changed, then 20 with one more job before each.
        def measure(count: int, each) -> list[float]:
            got: list[float] = []
            last = None
            deadline = time.monotonic() + 120
            while len(got) < count and time.monotonic() < deadline:
                m = script(
                    "const m = performance.getEntriesByName('homebased-refresh');"
                    "return m.length ? [m[0].startTime, m[0].duration] : null;"
                )
                if m and m[0] != last:
                    if last is not None:
                        got.append(m[1])
                    last = m[0]
                    each()
                time.sleep(0.05)
            return got

        idle = measure(20, lambda: None)
        ticks = measure(20, change)
        wd("DELETE", base)
        rows.append(
            Row(
                "dash_browser_load",
                f"dashboard in headless Chromium: navigate to {n} rendered queue rows",
                "ms",
                p50=rendered_ms,
                n=1,
            )
        )
        rows.append(
            dist_row(
                "dash_browser_idle",
                f"one refresh in the page, nothing changed (reads revalidated), {n} jobs",
                "ms",
                idle,
            )
        )
        rows.append(
            dist_row(
                "dash_browser_tick",
                f"one refresh in the page with a change each tick (reads, parse, render), {n}+ jobs",
                "ms",
                ticks,
            )
        )
    finally:
        driver.kill()
        driver.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def _answers(wd) -> bool:
    try:
        return bool(wd("GET", "/status").get("ready"))
    except OSError:
        return False


def metrics_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """`GET /metrics` with every lane held and 2,000 jobs queued, against the listing it must
    not be slower than (`GET /v1/jobs`, the same queue), each BENCH_SCRAPES times on one
    kept-alive socket connection, alternating."""
    h = Home(bins, "metrics", lanes=LANES)
    try:
        h.start()
        for _ in range(LANES):
            h.submit_api(h.spec("hold", h.hold_script()))
        wait_for(lambda: len(h.executing()) == LANES, 60, 0.01, "every holder to run")
        spec = h.spec("queued", "true")
        for _ in range(2000):
            h.submit_api(spec)
        conn = UnixHTTPConnection(str(h.sock))

        def timed(path: str) -> tuple[float, bytes]:
            t0 = time.perf_counter_ns()
            conn.request("GET", path)
            resp = conn.getresponse()
            raw = resp.read()
            took = (time.perf_counter_ns() - t0) / 1e6
            if resp.status != 200:
                raise ApiError(f"GET {path}: HTTP {resp.status}: {raw[:400]!r}")
            return took, raw

        scrape, listing = [], []
        size = 0
        for _ in range(SCRAPES):
            took, raw = timed("/metrics")
            scrape.append(took)
            size = len(raw)
            if b'homebased_jobs{priority="medium",state="queued"} 2000' not in raw:
                raise ApiError("the scrape does not count 2,000 queued jobs")
            listing.append(timed("/v1/jobs")[0])
        conn.close()
        rows.append(
            dist_row(
                "metrics_2000",
                f"`GET /metrics` on the socket, 2,000 queued, {LANES} lanes held "
                f"({size} bytes)",
                "ms",
                scrape,
            )
        )
        rows.append(
            dist_row(
                "metrics_list_2000",
                "`GET /v1/jobs` (the listing) on the socket, same queue, alternating with it",
                "ms",
                listing,
            )
        )
    finally:
        h.close()


def queued_behind_one_run(bins: Path, tag: str, queued: int = 2000) -> Home:
    """One indexed lane held by one run (seen through its `worker.json`, never through a
    read of resources, which would wake the GPU sampler for a minute), `queued` jobs behind
    it submitted through the API."""
    h = Home(bins, tag, lanes=1)
    try:
        h.start()
        h.submit_api(h.spec("hold", h.hold_script()))
        wait_for(
            lambda: any(pgid for _, pgid in h.workers()), 60, 0.01, "the holder to run"
        )
        spec = h.spec("queued", "true")
        for _ in range(queued):
            h.submit_api(spec)
    except BaseException:
        h.close()
        raise
    return h


def quiet_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """An idle daemon (issue: the standby worker and the sampler woke it): 2,000 queued
    behind one run, nobody asking anything. After a minute (the daemon's start counts as a
    read of resources, and the sampler samples for a minute after a read), its CPU ticks
    (utime + stime of every thread) over BENCH_QUIET_SECONDS, and which threads woke."""
    h = queued_behind_one_run(bins, "quiet")
    try:
        h.api.close()
        time.sleep(62)

        def threads() -> dict[str, int]:
            out: dict[str, int] = {}
            for t in os.listdir(f"/proc/{h.pid}/task"):
                try:
                    raw = Path(f"/proc/{h.pid}/task/{t}/stat").read_text()
                except FileNotFoundError:
                    continue
                name = raw[raw.index("(") + 1 : raw.rindex(")")]
                f = raw[raw.rindex(")") + 2 :].split()
                out[f"{name}/{t}"] = int(f[11]) + int(f[12])
            return out

        t0, c0 = threads(), cpu_ticks(h.pid)
        time.sleep(QUIET_SECONDS)
        t1, c1 = threads(), cpu_ticks(h.pid)
        woke = {k: v - t0.get(k, 0) for k, v in t1.items() if v - t0.get(k, 0)}
        notes["quiet_threads"] = woke
        rows.append(
            Row(
                "quiet_cpu",
                f"daemon CPU over {QUIET_SECONDS} idle s, 2,000 queued behind one run "
                f"(ticks of {1000 / CLK_TCK:.0f} ms)",
                "ticks",
                p50=c1 - c0,
                target="0",
            )
        )
    finally:
        h.close()


def listing_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """`resource jobs` for a person against `--json` for a script, 2,000 queued behind one
    run, alternating, BENCH_LIST_RUNS times each, output to a file."""
    h = queued_behind_one_run(bins, "listing")
    try:
        listed = h.work / "listed.out"

        def timed(*flags: str) -> float:
            with open(listed, "wb") as out:
                t0 = time.perf_counter_ns()
                r = subprocess.run(
                    [h.hb_bin, "--home", str(h.home), *flags, "resource", "jobs"],
                    cwd=h.work,
                    env=h.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.PIPE,
                    timeout=120,
                )
                took = (time.perf_counter_ns() - t0) / 1e6
            if r.returncode != 0:
                raise RuntimeError(f"resource jobs exited {r.returncode}: {r.stderr[:400]!r}")
            return took

        human, script = [], []
        for _ in range(max(LIST_RUNS, 5)):
            human.append(timed())
            script.append(timed("--json"))
        rows.append(
            dist_row(
                "list_human_2000",
                "`resource jobs` (human table, CLI), 2,000 queued + 1 active",
                "ms",
                human,
                "≤ --json",
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "list_json_2000",
                "`resource jobs --json` (CLI), same queue, alternating with it",
                "ms",
                script,
                tails=False,
            )
        )
    finally:
        h.close()


# ---------------------------------------------------------------------------------------
# MIG lanes at scale (issue 30)

MIG_CARDS = 8
MIG_SLICES = 7

FAKE_MIG = """#!/bin/sh
# Prints a card's fields in the order the daemon asks for them, `[N/A]` for one not known
# here (so the sampler's field list can grow without this fake going stale).
state() {
  line=''
  IFS=,
  for name in $fields; do
    case "$name" in
      uuid) v=$1 ;; memory.used) v=$2 ;; memory.total) v=$3 ;;
      utilization.gpu) v=$4 ;; temperature.gpu) v=$5 ;; power.draw) v=$6 ;;
      *) v='[N/A]' ;;
    esac
    line="${line:+$line, }$v"
  done
  unset IFS
  printf '%s\\n' "$line"
}
case "$1" in
  -L) cat <<'END'
@LISTING@
END
  ;;
  --query-compute-apps=*)
    printf x >> '@COUNT@'
    cat <<'END'
@APPS@
END
  ;;
  --query-gpu=*)
    fields="${1#--query-gpu=}"
@STATES@
  ;;
  *) exit 2 ;;
esac
"""


def mig_fake(count: Path) -> str:
    """The fake `nvidia-smi` of MIG_CARDS cards of MIG_SLICES slices: `-L`, the process
    query (each call appends one byte to `count`, so the samples can be counted) and the
    state query."""

    def card(c: int) -> str:
        return f"GPU-{c:08x}-0000-4000-8000-{c:012x}"

    def mig(c: int, m: int) -> str:
        return f"MIG-{c:04x}{m:04x}-0000-4000-8000-{c:012x}"

    listing, apps, states = [], [], []
    for c in range(MIG_CARDS):
        listing.append(f"GPU {c}: NVIDIA H200 (UUID: {card(c)})")
        # One process by the card's own UUID (foreign on each of its slices) ...
        apps.append(f"{card(c)}, {200000 + c}, 2048")
        for m in range(MIG_SLICES):
            listing.append(f"  MIG 1g.18gb     Device  {m}: (UUID: {mig(c, m)})")
            # ... and one on each slice, by the slice's UUID.
            apps.append(f"{mig(c, m)}, {300000 + c * 8 + m}, {1024 + 512 * m}")
        # A split card's utilization is not reported (`[N/A]`), as drivers do.
        states.append(f"    state {card(c)} {30000 + 4000 * c} 143771 '[N/A]' {40 + c} {300 + 20 * c}")
    return (
        FAKE_MIG.replace("@LISTING@", "\n".join(listing))
        .replace("@APPS@", "\n".join(apps))
        .replace("@STATES@", "\n".join(states))
        .replace("@COUNT@", str(count))
    )


def thread_ticks(pid: int, name: str) -> int:
    """utime + stime of the daemon's thread called `name`."""
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            raw = Path(f"/proc/{pid}/task/{t}/stat").read_text()
        except FileNotFoundError:
            continue
        if raw[raw.index("(") + 1 : raw.rindex(")")] == name:
            f = raw[raw.rindex(")") + 2 :].split()
            return int(f[11]) + int(f[12])
    raise RuntimeError(f"the daemon has no thread {name!r}")


def reaped_ticks(pid: int) -> int:
    """cutime + cstime (fields 16 and 17): the children the process waited for."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    f = raw[raw.rindex(")") + 2 :].split()
    return int(f[13]) + int(f[14])


def schedule_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Issue 27: the scheduling simulator (homebased/examples/schedule_sim.rs) drives the
    real `decide` over two seeded weeks on a virtual clock, no daemon: per trace and policy
    the GPU utilization and what jobs of several GPUs wait."""
    built = bins / "examples" / "schedule_sim"
    cmd = (
        [str(built), "--json"]
        if built.is_file()
        else ["cargo", "run", "--release", "--quiet", "--locked", "-p", "homebased",
              "--example", "schedule_sim", "--", "--json"]
    )
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"schedule_sim exited {out.returncode}: {out.stderr.strip()[-400:]}")
    report = json.loads(out.stdout)

    def hours(seconds):
        return "-" if seconds is None else f"{seconds / 3600:.1f} h"

    for r in report["results"]:
        tag = f"sched_{r['trace']}_{r['policy']}"
        rows.append(
            Row(f"{tag}_util", f"schedule sim, {r['trace']}, {r['policy']}: GPU utilization",
                "%", p50=r["utilization"] * 100, n=r["jobs"])
        )
        rows.append(
            Row(f"{tag}_multi", "↳ multi-GPU jobs' wait: p95 / longest / never started", "h",
                text=f"{hours(r['multi_wait_p95_s'])} / {hours(r['multi_wait_max_s'])} / "
                f"{r['multi_never']} of {r['multi_jobs']}")
        )
        if r["policy"] == "ours":
            rows.append(
                Row(f"{tag}_held", "↳ from holding the reservation to starting, at most", "h",
                    text=f"{hours(r['held_max_s'])} (longest time limit "
                    f"{hours(r['limit_max_s'])} + {r['cleanup_bound_s']} s)")
            )
    notes["schedule_elapsed"] = report["elapsed_s"]


def shell_lanes_floor(lanes: int, rounds: int) -> list[float]:
    """The machine's floor for a hand-over: `lanes` plain `sh` loops, no queue, each running
    `rounds` of the benchmark's one-second job back to back (the same script, so the same
    processes start), all begun together as a queue's lanes are. Every gap from one job's
    end stamp to the next one's start stamp on the same loop, in ms."""
    work = Path(tempfile.mkdtemp(prefix="hb-bench-floor-"))
    try:
        job = (
            'date +%s%N > "$0/s.$1.$2"; sleep 1; exec date +%s%N > "$0/e.$1.$2"'
        )
        loop = f"for i in $(seq 1 {rounds}); do sh -c '{job}' \"$0\" \"$1\" \"$i\"; done"
        procs = [
            subprocess.Popen(["sh", "-c", loop, str(work), str(lane)])
            for lane in range(lanes)
        ]
        for proc in procs:
            proc.wait(timeout=60 + rounds * 5)
        gaps = []
        for lane in range(lanes):
            for i in range(1, rounds):
                end = read_ns(work / f"e.{lane}.{i}")
                start = read_ns(work / f"s.{lane}.{i + 1}")
                if end is not None and start is not None:
                    gaps.append((start - end) / 1e6)
        return gaps
    finally:
        shutil.rmtree(work, ignore_errors=True)


def mig56_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Issue 30: 56 MIG lanes (8 cards of 7 slices), each held, BENCH_MIG_QUEUE 1 s jobs
    queued: `resource list --json`, a scheduling pass (settle), and the daemon's CPU with the
    sampler on and nobody asking, scaled to an hour; then the holders go and the hand-over
    is measured per lane while the queue drains."""
    lanes = MIG_CARDS * MIG_SLICES
    h = Home(bins, "mig56")
    count = h.work / "samples.count"
    probe = h.work / "nvidia-smi"
    probe.write_text(mig_fake(count))
    probe.chmod(0o755)
    try:
        h.start()
        names = {r["name"] for r in h.resources()}
        want = {f"gpu{c}-mig{m}" for c in range(MIG_CARDS) for m in range(MIG_SLICES)}
        if names != want:
            raise RuntimeError(f"the daemon's lanes are {sorted(names)}, not the 56 slices")
        h.hold_lanes(lanes, 120)
        spec = h.spec("one second", h.stamped_script("1"))
        jobs = [h.submit_api(spec) for _ in range(MIG_QUEUE)]
        log(f"{lanes} lanes held, {MIG_QUEUE} queued")

        listed, settle = [], []
        for _ in range(MIG_RUNS):
            t0 = time.perf_counter_ns()
            out = h.cli("--json", "resource", "list").stdout
            listed.append((time.perf_counter_ns() - t0) / 1e6)
            if len(json.loads(out)["resources"]) != lanes:
                raise RuntimeError(f"resource list did not give the {lanes} lanes")
            t0 = time.perf_counter_ns()
            h.api.post("/v1/internal/settle", {})
            settle.append((time.perf_counter_ns() - t0) / 1e6)

        def samples() -> int:
            try:
                return count.stat().st_size
            except FileNotFoundError:
                return 0

        # One read wakes the sampler for a minute; the window ends inside it.
        h.resources()
        h.api.close()
        pid = h.pid
        c0, s0, r0, n0 = cpu_ticks(pid), thread_ticks(pid, "gpu-sampler"), reaped_ticks(pid), samples()
        time.sleep(MIG_SECONDS)
        c1, s1, r1, n1 = cpu_ticks(pid), thread_ticks(pid, "gpu-sampler"), reaped_ticks(pid), samples()
        if n1 == n0:
            raise RuntimeError(f"the sampler took no sample in {MIG_SECONDS} s")

        def per_hour(ticks: int) -> float:
            return ticks / CLK_TCK * 3600 / MIG_SECONDS

        # The holders go, the queue drains 56 jobs at a time. The FIFO is opened again while
        # waiting, in case a holder reached its `read` late.
        wait_for(h.release_hold, 10, 0.01, "the holders to wait on their FIFO")

        def drained() -> bool:
            h.release_hold()
            return all(read_ns(h.out / f"e.{j}") for j in jobs[-lanes:])

        wait_for(drained, 60 + MIG_QUEUE * 1.5 / lanes, 0.05, "the last jobs")
        h.wait_idle(timeout=60)
        by_lane, gaps = lane_gaps(h, jobs)
        setup = f"{lanes} MIG lanes ({MIG_CARDS} cards of {MIG_SLICES} slices)"
        queued = f"{MIG_QUEUE:,} queued"
        rows.append(
            dist_row(
                "mig56_list",
                f"`resource list --json` (CLI), {setup} held, {queued}",
                "ms",
                listed,
            )
        )
        rows.append(
            dist_row(
                "mig56_settle",
                f"settle (timers + one scheduling pass, socket API), {lanes} MIG lanes held, "
                f"{queued}",
                "ms",
                settle,
            )
        )
        rows.append(
            Row(
                "mig56_cpu",
                f"daemon CPU per hour, sampler on, {lanes} MIG lanes held, {queued}, no reads "
                f"(over {MIG_SECONDS} s, {n1 - n0} samples, ticks of {1000 / CLK_TCK:.0f} ms)",
                "s/h",
                p50=per_hour(c1 - c0),
            )
        )
        rows.append(
            Row("mig56_cpu_sampler", "↳ of which the `gpu-sampler` thread", "s/h",
                p50=per_hour(s1 - s0))
        )
        rows.append(
            Row(
                "mig56_cpu_queries",
                "↳ beside it: the reaped queries (the fake `nvidia-smi` is `sh`)",
                "s/h",
                p50=per_hour(r1 - r0),
            )
        )
        rows.append(
            dist_row(
                "mig56_handover",
                f"hand-over, {lanes} MIG lanes of 1 s jobs back to back, {queued} "
                "(exit to next start on the lane)",
                "ms",
                gaps,
                "< 100 ms p99",
            )
        )
        rows.append(
            dist_row(
                "mig56_floor",
                f"↳ beside it: {lanes} plain `sh` loops running the same job back to back, no "
                "queue (this machine's floor for the same burst)",
                "ms",
                shell_lanes_floor(lanes, max(3, min(10, MIG_QUEUE // lanes))),
            )
        )
        rows.append(cleanup_row("mig56_handover_cleanup", h))
        notes["mig56_ran"] = sum(len(v) for v in by_lane.values())
    finally:
        h.close()


# The mixed trace (issue 27's real-process row): shares of 1-, 2- and 4-GPU jobs, and the
# seed that makes the trace the same on every run.
MIXED_LANES = 8
MIXED_SHARES = ((1, 0.60), (2, 0.25), (4, 0.15))
MIXED_SEED = 27


def mixed_trace(count: int, seed: int = MIXED_SEED) -> list[int]:
    """`count` GPU counts drawn by MIXED_SHARES from `random.Random(seed)`: the same list for
    the same arguments, so every run queues the same trace."""
    rng = random.Random(seed)
    trace = []
    for _ in range(count):
        x, acc = rng.random(), 0.0
        gpus = MIXED_SHARES[-1][0]  # should the shares' float sum fall short of 1
        for g, share in MIXED_SHARES:
            acc += share
            if x < acc:
                gpus = g
                break
        trace.append(gpus)
    return trace


def last_lane_handovers(
    spans: dict[str, tuple[int, int]],
    lanes_of: dict[str, list[str]],
    order: list[str],
    decided: dict[str, int],
) -> list[float]:
    """Per job (`spans`: its start and end stamps in ns; `lanes_of`: the lanes it held;
    `order`: the queue's order, one level; `decided`: the pass that launched it), the time
    from the moment the queue's own rules let it start to its start, in ms. That moment is
    the last end of the jobs before it on its lanes, or, when the pass that launched it also
    launched a job ahead of it in the queue, the latest such moment of those: a job whose
    lanes were free but reserved for a wide job ahead of it, which was gathering its lanes,
    may start only in the pass that starts that job. So the figure is the daemon's hand-over
    without the wait the reservation imposes. A job first on one of its lanes (after a
    holder, which wrote no stamps) has none."""
    by_lane: dict[str, list[tuple[int, int, str]]] = {}
    for job, (s, e) in spans.items():
        for lane in lanes_of.get(job, []):
            by_lane.setdefault(lane, []).append((s, e, job))
    prev_ends: dict[str, list[int]] = {}
    for runs in by_lane.values():
        runs.sort()
        for (_, prev_end, _), (_, _, job) in zip(runs, runs[1:]):
            prev_ends.setdefault(job, []).append(prev_end)
    # The moment each job's own lanes were all free (a job with a lane first after a holder
    # has none).
    free_at = {
        job: max(ends)
        for job, ends in prev_ends.items()
        if len(ends) == len(lanes_of[job])
    }
    handovers = []
    ahead_in_pass: dict[int, list[str]] = {}
    for job in order:
        pass_at = decided.get(job)
        ahead = ahead_in_pass.setdefault(pass_at, []) if pass_at is not None else []
        if job in free_at:
            ready = max([free_at[job]] + [free_at[w] for w in ahead if w in free_at])
            handovers.append((spans[job][0] - ready) / 1e6)
        if pass_at is not None:
            ahead.append(job)
    return handovers


def lane_utilization(by_lane: dict[str, list[tuple[int, int]]], lanes: int) -> float | None:
    """Busy lane time over `lanes` times the window from the first start to the last end."""
    spans = [span for runs in by_lane.values() for span in runs]
    if not spans:
        return None
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    if window <= 0:
        return None
    return sum(e - s for s, e in spans) / (lanes * window)


def mixed8_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Issue 27's real-process row: 8 lanes, each held, then a seeded trace of BENCH_MIXED_QUEUE
    1 s jobs of 1, 2 and 4 GPUs at one level, no time limits, drained after the holders go.
    A 4-GPU job at the head waits for four free lanes (its reservation), so a gap on one lane
    may be the wait for the job's other lanes: the hand-over is taken from the last of them."""
    lanes = MIXED_LANES
    h = Home(bins, "mixed8", lanes=lanes)
    try:
        h.start()
        h.hold_lanes(lanes, 60)
        script = h.stamped_script("1")
        specs = {}
        for gpus, _ in MIXED_SHARES:
            specs[gpus] = h.spec(f"{gpus} GPU, one second", script)
            specs[gpus]["gpus"] = gpus
        trace = mixed_trace(MIXED_QUEUE)
        jobs = [h.submit_api(specs[g]) for g in trace]
        log(f"{lanes} lanes held, {MIXED_QUEUE} queued")
        wait_for(h.release_hold, 10, 0.01, "the holders to wait on their FIFO")

        done = [0]  # jobs[:done[0]] have ended

        def drained() -> bool:
            # The FIFO is opened again while waiting, in case a holder reached its `read` late.
            # Jobs end in about queue order: each poll reads on from the first not yet ended.
            h.release_hold()
            while done[0] < len(jobs) and read_ns(h.out / f"e.{jobs[done[0]]}"):
                done[0] += 1
            return done[0] == len(jobs)

        lane_seconds = sum(trace)
        wait_for(drained, 60 + lane_seconds * 2 / lanes, 0.05, "the last jobs")
        h.wait_idle(timeout=60)
        by_lane, gaps = lane_gaps(h, jobs)
        spans = {}
        for j in jobs:
            s, e = read_ns(h.out / f"s.{j}"), read_ns(h.out / f"e.{j}")
            if s is not None and e is not None:
                spans[j] = (s, e)
        handovers = last_lane_handovers(spans, job_lanes(h), jobs, job_decisions(h))
        util = lane_utilization(by_lane, lanes)
        share = ", ".join(
            f"{trace.count(g):,} of {g}{' GPU' if i == 0 else ''}"
            for i, (g, _) in enumerate(MIXED_SHARES)
        )
        setup = f"{lanes} lanes, {MIXED_QUEUE:,} 1 s jobs queued ({share})"
        rows.append(
            dist_row(
                "mixed8_handover",
                f"hand-over, {setup}: the job free to start (its last lane free, or a wide "
                "job ahead of it launched in the same pass free) to its start",
                "ms",
                handovers,
                "< 100 ms p99",
            )
        )
        rows.append(
            dist_row(
                "mixed8_handover_lane",
                "↳ beside it: exit to next start on the same lane (a wide job's reservation "
                "wait included)",
                "ms",
                gaps,
            )
        )
        rows.append(cleanup_row("mixed8_handover_cleanup", h))
        if util is None:
            rows.append(Row("mixed8_utilization", f"GPU utilization, {setup}", "%",
                            text="not measured"))
        else:
            rows.append(
                Row(
                    "mixed8_utilization",
                    f"GPU utilization, {setup} (busy lane time, first start to last end)",
                    "%",
                    p50=util * 100,
                )
            )
        notes["mixed8_gaps"] = (len(handovers), len(gaps), len(spans), len(jobs))
    finally:
        h.close()


# ---------------------------------------------------------------------------------------
# The report


# ---------------------------------------------------------------------------------------
# Scale and history (issue 18)


def seed_history(h: Home, count: int) -> float:
    """`count` finished jobs through `POST /v1/internal/seed` (each submitted and cancelled
    by the core's own verbs, 1,000 per request), then waits until every JOB_CANCELLED is in
    the thread's inbox (delivered). Returns the seconds it took."""
    t0 = time.monotonic()
    spec = h.spec("history", "true")
    left = count
    while left > 0:
        n = min(left, 1000)
        h.api.post("/v1/internal/seed", {"count": n, "submit": h.body(uuid7(), spec)})
        left -= n
    inbox = h.home / "threads" / f"{h.thread}.jsonl"

    def delivered() -> bool:
        try:
            with open(inbox, "rb") as f:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except FileNotFoundError:
            lines = 0
        return lines >= count

    wait_for(delivered, 3600, 0.5, f"{count:,} events delivered")
    return time.monotonic() - t0


def history_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """For each size H in BENCH_HISTORY: one idle lane, H finished jobs (with their events,
    delivered) seeded through the API; then the figures of an empty history: CLI submit and
    start latency, `resource jobs --json`, `job show` of a new job, daemon RSS, `daemon
    serve` to a working socket, and the cost of pruning the whole history."""
    for size in HISTORY:
        h = Home(bins, f"history-{size}", lanes=1)
        try:
            h.serve_foreground()
            wait_for(lambda: h.sock.exists(), 60, 0.001, "the daemon's socket")
            wait_for(h.idle, 60, 0.01, "the lane")
            seeded = seed_history(h, size) if size else 0.0
            if size:
                log(f"history {size:,}: seeded in {seeded:.0f} s")
                notes.setdefault("history_seed", []).append((size, seeded))
            script = f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""
            spec_file = h.spec_file("history-start", h.spec("start latency", script))
            submit, start, listing, showing = [], [], [], []
            for i in range(HISTORY_SAMPLE + 1):
                job = uuid7()
                t0 = time.time_ns()
                h.run_cli_submit(spec_file, job)
                wall = (time.time_ns() - t0) / 1e6
                started = wait_for(
                    lambda: read_ns(h.out / f"start.{job}"), 30, 0.0005, "the job to start"
                )
                h.wait_idle()
                t1 = time.perf_counter_ns()
                h.cli("--json", "resource", "jobs")
                t2 = time.perf_counter_ns()
                h.cli("--json", "resource", "job", "show", job)
                t3 = time.perf_counter_ns()
                if i == 0:
                    continue  # warm-up
                submit.append(wall)
                start.append((started - t0) / 1e6)
                listing.append((t2 - t1) / 1e6)
                showing.append((t3 - t2) / 1e6)
            tag = f"history {size:,}"
            rows.append(dist_row(f"hist_submit_{size}", f"{tag}: CLI submit wall time", "ms", submit))
            rows.append(dist_row(f"hist_start_{size}", f"{tag}: start latency (CLI)", "ms", start))
            rows.append(
                dist_row(f"hist_list_{size}", f"{tag}: `resource jobs --json` (CLI)", "ms", listing)
            )
            rows.append(
                dist_row(f"hist_show_{size}", f"{tag}: `job show` of a new job (CLI)", "ms", showing)
            )
            h.api.close()
            time.sleep(0.5)
            rss = rss_kib(h.pid)
            rows.append(
                Row(f"hist_rss_{size}", f"{tag}: daemon RSS after seeding", "MB", p50=rss / 1024 if rss else None)
            )
            # SIGTERM, then `daemon serve` to a working socket.
            h.stop(cancel=False)
            t0 = time.perf_counter_ns()
            h.serve_foreground()
            probe = Api(h.sock, timeout=60)

            def status_ok() -> bool:
                try:
                    probe.get("/v1/status", fresh=True)
                    return True
                except (OSError, ApiError, http.client.HTTPException):
                    return False

            wait_for(status_ok, 300, 0.001, "the restarted daemon's socket")
            rows.append(
                Row(
                    f"hist_restart_{size}",
                    f"{tag}: `daemon serve` to a working socket",
                    "ms",
                    p50=(time.perf_counter_ns() - t0) / 1e6,
                )
            )
            # The restarted daemon after a few requests: its footprint without the seeding
            # burst (the allocator keeps what a burst of 1,000-job requests once needed).
            for _ in range(5):
                h.cli("--json", "resource", "jobs")
                probe.get("/v1/status", fresh=True)
            time.sleep(0.5)
            rss = rss_kib(h.pid)
            rows.append(
                Row(
                    f"hist_rss_restarted_{size}",
                    f"{tag}: daemon RSS after that restart",
                    "MB",
                    p50=rss / 1024 if rss else None,
                )
            )
            if size:
                # Retention: the whole history in one `history prune` (batches of 100).
                t0 = time.perf_counter_ns()
                pruned = json.loads(
                    h.cli("--json", "history", "prune", "--before", "0s", timeout=3600).stdout
                )
                ms = (time.perf_counter_ns() - t0) / 1e6
                jobs = pruned["jobs"]
                rows.append(
                    Row(
                        f"hist_prune_{size}",
                        f"{tag}: `history prune` of {jobs:,} jobs, per 100-job batch",
                        "ms",
                        p50=ms / max(jobs / 100, 1),
                        text=None,
                    )
                )
                notes.setdefault("history_prune", []).append((size, jobs, ms))
        finally:
            h.close()


CHECKED = re.compile(r"store checked bytes=(\d+) elapsed_ms=([0-9.]+)")


def integrity_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """For each size H in BENCH_INTEGRITY: H finished jobs, the daemon stopped, then timed
    starts of `daemon serve`: each to a working socket, and the store check inside it (the
    daemon logs its own time), on a cleanly closed store and once after a SIGKILL."""
    for size in INTEGRITY:
        h = Home(bins, f"integrity-{size}", lanes=1)
        try:
            h.serve_foreground()
            wait_for(lambda: h.sock.exists(), 60, 0.001, "the daemon's socket")
            wait_for(h.idle, 60, 0.01, "the lane")
            if size:
                seeded = seed_history(h, size)
                log(f"integrity {size:,}: seeded in {seeded:.0f} s")
            h.stop(cancel=False)
            serve_log = h.work / "serve.log"

            def timed_start() -> tuple[float, float | None, int | None]:
                """`daemon serve` to a working socket (ms), and the check's own ms and bytes."""
                offset = serve_log.stat().st_size
                t0 = time.perf_counter_ns()
                h.serve_foreground()
                probe = Api(h.sock, timeout=60)

                def status_ok() -> bool:
                    try:
                        probe.get("/v1/status", fresh=True)
                        return True
                    except (OSError, ApiError, http.client.HTTPException):
                        return False

                wait_for(status_ok, 600, 0.001, "the restarted daemon's socket")
                wall = (time.perf_counter_ns() - t0) / 1e6
                probe.close()
                with open(serve_log, "rb") as f:
                    f.seek(offset)
                    found = CHECKED.findall(f.read().decode(errors="replace"))
                if not found:
                    return wall, None, None
                return wall, float(found[-1][1]), int(found[-1][0])

            walls, checks, size_bytes = [], [], None
            for _ in range(INTEGRITY_STARTS):
                wall, check, size_bytes = timed_start()
                walls.append(wall)
                if check is not None:
                    checks.append(check)
                h.stop(cancel=False)
            tag = f"integrity {size:,}"
            mb = size_bytes / 1e6 if size_bytes else None
            rows.append(Row(f"integ_store_{size}", f"{tag}: store size", "MB", p50=mb))
            rows.append(
                dist_row(f"integ_serve_{size}", f"{tag}: `daemon serve` to a working socket", "ms", walls)
            )
            rows.append(
                dist_row(f"integ_check_{size}", f"{tag}: the store check at start", "ms", checks)
            )
            if mb and checks:
                rows.append(
                    Row(
                        f"integ_rate_{size}",
                        f"{tag}: the check per GB of store",
                        "ms",
                        p50=median(checks) / (mb / 1000),
                    )
                )
            # A killed daemon leaves a WAL: the next check reads its frames too.
            h.serve_foreground()
            wait_for(lambda: h.sock.exists(), 600, 0.001, "the daemon's socket")
            wait_for(h.idle, 600, 0.01, "the lane")
            h.kill9()
            wall, check, _ = timed_start()
            rows.append(
                Row(f"integ_serve_wal_{size}", f"{tag}: `daemon serve` after a SIGKILL", "ms", p50=wall)
            )
            rows.append(
                Row(f"integ_check_wal_{size}", f"{tag}: its store check, WAL included", "ms", p50=check)
            )
        finally:
            h.close()


def machine_facts() -> dict[str, str]:
    facts = {"nproc": str(os.cpu_count())}
    try:
        facts["nproc"] = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                facts["memory"] = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    facts["kernel"] = f"{platform.system()} {platform.release()} {platform.machine()}"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                facts["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
        facts["load"] = " ".join(load)
    except OSError:
        pass
    facts["python"] = platform.python_version()
    return facts


DEFINITIONS = """\
Every workload runs on a fresh temporary home (`--home`) with fake lanes: the `nvidia-smi`
probe (`HOMEBASED_NVIDIA_SMI`) points at a missing file, which gives the one unindexed lane
`gpu0`, or at a script printing `GPU n: ...` lines, which gives indexed lanes. Workloads are
`/bin/sh -c` scripts, with no Python in the job path. Times that cross processes compare
`date +%s%N` written by the workload with Python's `time.time_ns()` (both `CLOCK_REALTIME`);
submit and list times are wall times of the whole call (`perf_counter`). p50 is the median,
p90/p99 interpolate between ranks; with n around 100 to 200, p99 is the one or two worst
samples. "Holders" keep a lane busy at no CPU cost: `read _ < FIFO`, blocked in `open(2)`.

- **floor**: Python takes the time, spawns `/bin/sh -c 'date +%s%N > FILE'` and waits; floor =
  the stamp minus that time. This is the least any queue can add to, on this machine.
- **start latency (CLI)**: one idle lane; jobs submitted one at a time, each a one-step job
  running `date +%s%N > FILE`; latency = that stamp minus the time taken just before
  `homebased --quiet resource job submit --job-id J --spec FILE` was spawned. It includes the
  CLI's start-up, the submit (validation and a durable SQLite commit), the scheduling pass, the
  run directory, the worker's start and the workload's own `sh` and `date`. The lane is idle
  again (GET /v1/resources shows no run) before the next submit. The first job is a warm-up.
- **start latency (API)**: the same, but the submit is `POST /v1/jobs` with the body
  `{"job", "spec", "submitter": {"path", "home", "cwd", "parent_task": null},
  "allow_other_thread": false}` over a new connection to `<home>/homebased.sock` (Python
  `http.client` on an `AF_UNIX` socket), so no CLI process is started.
- **CLI submit wall time, empty queue**: the wall time of those CLI submits alone.
- **peers** (task-spooler side by side): the CLI start latency above, alternating job by job
  with `tsp sh -c 'date +%s%N > FILE'` (task-spooler with its own `TS_SOCKET`, one slot, its
  output file in the run's folder), each timed from the submitting command's spawn to its
  stamp; after each `tsp` job, `tsp -w` waits for its slot to be free. The first pair is a
  warm-up (it starts the `tsp` server). Skipped when `tsp` is not installed
  (`apt-get install task-spooler`). With `BENCH_COMPARE=DIR[,DIR]` each round also starts one
  job on a daemon of each build named there, in turn before the `tsp` job, so a change and
  its baseline are measured in the same rounds.
- **hand-over**: one lane; a holder job keeps it until BENCH_HANDOVER_JOBS short jobs are queued
  through the API, then is released. Each short job runs `date +%s%N > S; exec date +%s%N > E`,
  so E is written by the workload's last process just before it exits. Hand-over = next job's S
  minus previous job's E, in start order: the worker noticing the exit, `exit.json`, the
  cleanup (process group, sweep), `cleanup.json`, the daemon noticing, its commit, the next
  scheduling pass, the next run directory and worker, and the next `sh` and `date`. BENCH_PROCS
  unrelated `sleep` processes of the same user are alive throughout (the count in the row is
  every process on the machine). "Of which the cleanup" is `cleanup.json` `finished_at` minus
  `exit.json` `ended_at` of the same runs (1 ms resolution).
- **hand-over, BENCH_LANES lanes of 1 s jobs**: every lane held, BENCH_LANE_QUEUE jobs
  queued through the API, then the holders are released; each job runs `date +%s%N > S; sleep
  1; exec date +%s%N > E`. Per lane (each of `run.json`'s `lanes`), next job's S minus previous
  job's E, cleanup included. The lanes start together, so their hand-overs coincide.
- **start path**: BENCH_STARTPATH starts through the CLI and as many through the API, as in
  start latency; each part is the difference of two stamps (microseconds, `CLOCK_REALTIME`):
  the time before the submit, `run.json` `stamps` (`decided`: the pass chose the launch;
  `reserved`: its `launching` commit landed), `worker.json` `stamps` (`spawned`: the daemon
  just before it forked the worker; `main`, `run_read`, `reserve`, `recorded`: the worker's
  steps; `workload`: before the workload's start) and the workload's `date`. p50 of each part.
- **submit cost vs queue size**: every lane held (BENCH_LANES indexed lanes, a holder on each).
  In this order, each submit timed on its own: BENCH_SAMPLE submits through the CLI (the wall
  time of the CLI process; queue 0 to S) and BENCH_SAMPLE `POST /v1/jobs` over one kept-alive
  connection (S to 2S); then an untimed bulk fill through the API from BENCH_FILL_CONNECTIONS
  concurrent connections (the core serves a burst of calls before one scheduling pass, so this
  is the fast way to build a queue) up to BENCH_QUEUE - 2S, pausing at 2,000 for the list and
  RSS figures; then BENCH_SAMPLE CLI and BENCH_SAMPLE API submits at the full queue. If the
  fill takes longer than BENCH_FILL_BUDGET seconds it stops there and every row names the queue
  size reached. The growth row is the ratio of the medians, last over first. The jobs run
  `true`; they never start.
- **list cost**: wall time of `homebased --json resource jobs` (the CLI process, its output read
  through a pipe) and of `GET /v1/jobs` over the kept-alive connection, median of
  BENCH_LIST_RUNS each, at 2,000 queued (during the fill, for the other tools' column) and with
  the queue full.
- **daemon RSS**: `VmRSS` of the daemon's pid (`daemon status --json` field `pid`), read once at
  2,000 queued and once with the queue full and every lane held; the workers' RSS likewise.
- **daemon CPU**: utime + stime of the daemon's pid (`/proc/<pid>/stat`, all threads) over
  BENCH_IDLE_SECONDS with the queue full, every lane held, and nothing else asked of it; the
  resolution is one clock tick (10 ms). The workers' CPU over the same window beside it.
- **restart**: with the queue full and every lane held, `kill -9` the daemon, then time from
  spawning `homebased daemon serve` until `GET /v1/status` answers on the socket (polled every
  millisecond, a new connection each), and until `GET /v1/resources` answers; then count the
  runs shown executing and the workers still alive. "kill -9 to `daemon.lock` free" runs from
  the SIGKILL until a shared `flock` on `<home>/daemon.lock` succeeds (what `daemon start` and
  `daemon serve` check first): the lock goes only when the last thread of the killed daemon
  has exited, which can be later than its pid turning into a zombie.
- **preemption**: one lane running a low-priority `yield` job whose workload checks for
  `$HOMEBASED_YIELD_FILE` every 10 ms (`sleep 0.01` in `sh`), writes `date +%s%N` and exits 75;
  once it runs, a high-priority job is submitted (CLI and API alternately; the API call from a
  thread). "To control/yield" = the time the file `<home>/tasks/<task>/control/yield` was first
  seen (polled every 0.2 ms) minus the time just before the submit started. "Exit 75 to urgent
  start" = the urgent workload's `date +%s%N` minus the low workload's. The low job resumes
  (`HOMEBASED_RESUME=1`, exits 0) before the next round. The first round is a warm-up.
- **sweep cost**: for each sleeper count P in BENCH_SWEEP_PROCS, BENCH_SWEEP_JOBS jobs running
  `true` one at a time; cleanup = `cleanup.json` `finished_at` minus `exit.json` `ended_at`
  (milliseconds). Per 1,000 processes = (median at the largest P minus median at the smallest)
  divided by the difference in processes alive, in thousands.
- **kill -9 and restart**: a job running `sleep 3`; 0.5 s after it runs, `kill -9` the daemon,
  `homebased daemon start` again (its wall time beside), wait for the job to end and report
  what `GET /v1/jobs/<job>` (what `job show` prints) says, once the lane is idle again: state,
  and each run's status, process exit, times and cleanup.
- **GPU sampler**: BENCH_LANES fake cards, each with one compute process in the fake
  `nvidia-smi --query-compute-apps` answer, no job; `resource list --json` once a second
  through the CLI for BENCH_IDLE_SECONDS keeps the sampler on (it idles a minute after the
  last read). Daemon CPU is utime + stime + cutime + cstime (the reaped queries included),
  scaled to an hour; the list latency is each of those calls' wall time.
- **metrics**: BENCH_LANES lanes held, 2,000 medium jobs queued through the API; then
  BENCH_SCRAPES times `GET /metrics` and `GET /v1/jobs` alternately on one kept-alive socket
  connection, each call's wall time (request to last byte). The core's part of a scrape is a
  subset of a listing's (lanes, holding runs, two counts through partial indexes); the text
  is written off the core.
- **dashboard**: BENCH_LANES lanes held by sleeping jobs and BENCH_DASHBOARD_QUEUE jobs in all,
  through a TCP listener on 127.0.0.1. "First load over TCP" is one new connection fetching
  the page's three files and the five reads of its first tick (`/v1/resources`, `/v1/jobs`,
  `/v1/status`, `/v1/fleet/identity`, `/v1/fleet/machines`) one after the other; "one refresh
  over TCP" is the two reads the page repeats every second, on a kept-alive connection (bytes
  are response bodies, uncompressed). In headless Chromium (when installed): from the
  WebDriver navigate until every queue row is in the DOM, and the page's own User Timing
  measure `homebased-refresh` of each tick (both reads, JSON parsing, re-rendering the
  resources, and the queue when its bytes changed), 20 ticks.
- **history**: for each size H in BENCH_HISTORY, one idle lane and H finished jobs, each
  submitted and cancelled by the core's own verbs through `POST /v1/internal/seed` (1,000 a
  request), their JOB_CANCELLED events delivered before anything is timed; then
  BENCH_HISTORY_SAMPLE rounds of a CLI submit (wall time), its start (the workload writes
  its start time), `resource jobs --json` and `job show` of that job (CLI wall times); the
  daemon's RSS; SIGTERM and `daemon serve` to a working socket, and the restarted daemon's
  RSS; last `history prune --before 0s` of the whole history, per 100-job batch.
- **integrity**: for each size H in BENCH_INTEGRITY, H finished jobs seeded as in
  **history**, then the daemon stopped by SIGTERM (the store closed cleanly, no WAL) and
  BENCH_INTEGRITY_STARTS times `daemon serve` to a working socket, each with the time of its
  store check (`PRAGMA quick_check` of the whole file, read from the daemon's `store checked`
  log line) and the store's size; then one start after a SIGKILL, whose check reads the WAL.
- **mig56** (issue 30): a fake `nvidia-smi` lists 8 cards (`GPU n: NVIDIA H200 (UUID:
  GPU-...)`), each split into 7 slices (`  MIG 1g.18gb     Device  m: (UUID: MIG-...)`), so
  the daemon has 56 lanes `gpu<n>-mig<m>`; its process query lists one process per slice (by
  the slice's UUID) and one per card (by the card's UUID, foreign on all 7 slices), 64 in
  all; its state query answers each card's fields in the order asked (utilization `[N/A]`,
  as drivers say for a split card). Every lane held by a holder, BENCH_MIG_QUEUE 1 s jobs
  queued through the API. Then BENCH_MIG_RUNS rounds of `homebased --json resource list`
  (CLI wall time) and `POST /v1/internal/settle` (the timers and one scheduling pass, over
  the kept-alive socket connection: the daemon keeps no figure of its own for a pass); one
  `GET /v1/resources` (a read: the sampler samples every 5 s for the next minute) and the
  daemon's CPU over BENCH_MIG_SECONDS with nothing asked of it, scaled to an hour: its own
  threads (utime + stime), of which the `gpu-sampler` thread, and beside them the reaped
  queries (cutime + cstime; the fake is `sh`, a real `nvidia-smi` costs more); the fake
  counts the samples. Last the holders are released and the 1 s jobs run back to back on the
  56 lanes; the hand-over is measured per lane as in **hand-over, BENCH_LANES lanes of 1 s
  jobs**, with the worker's cleanup part as in **hand-over**. Beside it, the floor: 56 plain
  `sh` loops, no daemon, each running the same job back to back (3 to 10 rounds), begun
  together as the lanes are, with the same gap from one job's E to the next one's S: what
  starting the same processes in the same burst costs this machine without any queue.
- **schedule** (issue 27): `homebased/examples/schedule_sim.rs --json`, no daemon: the real
  `decide` on a virtual clock over two seeded weeks on 8 lanes (steady: 1-GPU jobs of 5
  minutes to 2 hours at level medium plus one 8-GPU job an hour; research: 1/2/4-GPU jobs of
  15 minutes to 8 hours at all levels), for `ours` (reservations), `greedy` (reservations
  off: gflow's and task-spooler's policy) and `fifo` (the head blocks everyone). Time
  limits are 1.2 to 2 times the work; launches execute at once, a stopped run keeps its
  lanes 30 s then cleans, every run's lanes free 60 s (the cleanup bound) after it ends.
  Utilization is executing lane time over the week; waits are arrival to first start.
- **mixed8** (issue 27, the simulator's real-process row): 8 indexed lanes, each held, then
  BENCH_MIXED_QUEUE 1 s jobs queued through the API as in **hand-over, BENCH_LANES lanes of
  1 s jobs**, a trace drawn from `random.Random(27)`: 60 % need 1 GPU, 25 % 2 and 15 % 4
  (`gpus`), all at level medium, no time limits, in that order; then the holders are
  released and the trace drains. All or nothing: a 2- or 4-GPU job at the head keeps the
  lanes that free for it (its reservation) until it has all it needs, so a gap on one lane
  can be the wait for the job's other lanes, not hand-over cost. The hand-over is therefore
  per job, from the moment the queue's rules let it start to its S: the latest E of the
  jobs before it on each of its lanes (the last of its lanes becoming free, cleanup
  included), or, when the pass that launched it (`run.json` `stamps.decided`) also launched
  a job ahead of it in the queue, the latest such moment of those (a job behind a wide job
  that is gathering finds its free lane reserved for that job, and may take it only in the
  pass that starts the wide job). A job first on one of its
  lanes (after a holder, which writes no stamps) has none. Beside it the plain per-lane gap (next S minus
  previous E on the same lane, each lane of a wide job counted), and the cleanup as in
  **hand-over**. GPU utilization = the jobs' busy lane time (E - S on each lane they hold)
  over 8 times the window from the first S to the last E; the jobs all last 1 s, so what
  stays idle is hand-over and lanes kept for a wider job.
- **settle**: `POST /v1/internal/settle` with the queue full: the timers and one scheduling
  pass.
"""

BEGIN = "<!-- bench:begin (written by scripts/bench; edit outside these markers) -->"
END = "<!-- bench:end -->"


def note_lines(notes: dict) -> list[str]:
    out = []
    if notes.get("start_ratio"):
        out.append(
            f"Start latency through the CLI, p50 over the floor's p50: {notes['start_ratio']:.1f}x "
            "(target at most 3.5x)."
        )
    if notes.get("kill9_detail"):
        out.append(
            "The job's runs after kill -9 and restart, as `job show` gives them: "
            f"`{json.dumps(notes['kill9_detail'], separators=(',', ':'))}`."
        )
    if notes.get("quiet_threads") is not None:
        woke = notes["quiet_threads"]
        out.append(
            "Threads of the idle daemon that used CPU in the quiet window (ticks): "
            + (", ".join(f"{k} {v}" for k, v in sorted(woke.items())) or "none")
            + "."
        )
    if notes.get("mixed8_gaps"):
        handovers, gaps, ran, queued = notes["mixed8_gaps"]
        out.append(
            f"mixed8: {handovers:,} hand-overs from a job's last lane and {gaps:,} same-lane "
            f"gaps, over {ran:,} of {queued:,} queued jobs that wrote both stamps (a job "
            "first on one of its lanes, after a holder, has no hand-over)."
        )
    if notes.get("preempt_odd"):
        out.append(
            "Preemption rounds whose low job did not end succeeded after one preempted run: "
            f"`{notes['preempt_odd']}`."
        )
    return out


def report_block(
    rows: list[Row], facts: dict, command: str, started: str, took: float, notes: dict
) -> str:
    lines = [
        BEGIN,
        "",
        f"Command: `{command}` (from the repository root)",
        "",
        f"Date: {started} UTC; the whole run took {took / 60:.1f} min.",
        "",
        "Machine: "
        + f"{facts.get('nproc', '?')} CPUs ({facts.get('cpu', 'unknown CPU')}), "
        + f"{facts.get('memory', '?')} memory, {facts.get('kernel', '?')}, "
        + f"load average {facts.get('load', '?')} at the start and "
        + f"{facts.get('load_end', '?')} at the end, Python {facts.get('python')}. "
        + "The machine is shared with other work and noisy: read medians, and the tails as "
        + "noise unless they repeat.",
        "",
        "Counts: "
        + f"BENCH_JOBS={JOBS} BENCH_HANDOVER_JOBS={HANDOVER_JOBS} BENCH_QUEUE={QUEUE} "
        + f"BENCH_SAMPLE={SAMPLE} BENCH_PROCS={PROCS} "
        + f"BENCH_SWEEP_PROCS={','.join(map(str, SWEEP_PROCS))} BENCH_SWEEP_JOBS={SWEEP_JOBS} "
        + f"BENCH_PREEMPT={PREEMPT} BENCH_LIST_RUNS={LIST_RUNS} BENCH_SCRAPES={SCRAPES} "
        + f"BENCH_IDLE_SECONDS={IDLE_SECONDS} BENCH_LANES={LANES} "
        + f"BENCH_FILL_BUDGET={FILL_BUDGET} BENCH_FILL_CONNECTIONS={FILL_CONNECTIONS} "
        + f"BENCH_DASHBOARD_QUEUE={DASHBOARD_QUEUE} BENCH_MIG_QUEUE={MIG_QUEUE} "
        + f"BENCH_MIG_RUNS={MIG_RUNS} BENCH_MIG_SECONDS={MIG_SECONDS}",
        "",
        "The other tools' figures are the ones in issue 8 (same machine class, medians); "
        + "their list, RSS and submit figures are at 2,000 queued, ours at the queue size "
        + "named in the row.",
        "",
        markdown_table(rows),
        "",
        *[line for n in note_lines(notes) for line in (n, "")],
        "### Definitions",
        "",
        DEFINITIONS,
        END,
    ]
    return "\n".join(lines)


def write_report(path: Path, block: str) -> None:
    if path.exists():
        text = path.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            path.write_text(head + block + tail)
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# Benchmarks\n\n"
        "`scripts/bench` builds the release binaries and measures the daemon on this "
        "machine; `BENCH_QUICK=1 scripts/bench` is a short run. Nothing in the test suite "
        "asserts a speed.\n\n" + block + "\n"
    )


# ---------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=str(ROOT / "target" / "release"))
    args = ap.parse_args()
    bins = Path(args.bin_dir).resolve()
    for b in ("homebased", "homebased-worker"):
        if not (bins / b).is_file():
            sys.exit(f"bench: {bins / b} is missing; build it first (scripts/bench does)")
    command = os.environ.get("BENCH_COMMAND") or " ".join(
        [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("BENCH_")]
        + ["python3 scripts/bench.py", *sys.argv[1:]]
    )
    out_raw = os.environ.get("BENCH_OUT")
    if out_raw is None:
        out = None if QUICK else ROOT / "docs" / "BENCHMARKS.md"
    else:
        out = Path(out_raw) if out_raw else None

    become_subreaper()
    facts = machine_facts()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    t_start = time.monotonic()
    rows: list[Row] = []
    notes: dict = {}
    plan = [
        ("floor", floor_workload),
        ("start", start_workload),
        ("handover", handover_workload),
        ("queue", queue_workload),
        ("preempt", preempt_workload),
        ("sweep", sweep_workload),
        ("kill9", kill9_workload),
        ("sampler", sampler_workload),
        ("fleet", fleet_workload),
        ("dashboard", dashboard_workload),
        ("history", history_workload),
        ("metrics", metrics_workload),
        ("startpath", startpath_workload),
        ("peers", peers_workload),
        ("integrity", integrity_workload),
        ("quiet", quiet_workload),
        ("listing", listing_workload),
        ("mig56", mig56_workload),
        ("schedule", schedule_workload),
        ("mixed8", mixed8_workload),
    ]
    failed = []
    for name, fn in plan:
        if ONLY and name not in ONLY:
            continue
        t0 = time.monotonic()
        log(f"{name} ...")
        try:
            fn(bins, rows, notes)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # one broken workload must not hide the others' figures
            log(f"{name} failed: {type(e).__name__}: {e}")
            rows.append(Row(name, f"{name} workload", "-", text=f"FAILED: {e}"))
            failed.append(name)
        log(f"{name} done in {time.monotonic() - t0:.1f} s")
    took = time.monotonic() - t_start
    try:
        facts["load_end"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass

    print()
    print(f"homebased benchmarks: {command}")
    print(
        f"{facts.get('nproc')} CPUs ({facts.get('cpu', '?')}), {facts.get('memory', '?')}, "
        f"{facts.get('kernel')}; {started} UTC; {took:.0f} s"
    )
    print()
    print_table(rows)
    for line in note_lines(notes):
        print(f"\n{line}")
    if out is not None:
        write_report(out, report_block(rows, facts, command, started, took, notes))
        print(f"\nwrote {out}")
    else:
        print("\nno report written (quick run, or BENCH_OUT empty); BENCH_OUT=PATH writes one")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
