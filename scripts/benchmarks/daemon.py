"""A temporary home with its daemon (`Home`), the socket API (`Api`, `ApiError`), `uuid7`,
unrelated sleeping processes (`Sleepers`), and the process and stamp helpers: `/proc` reads,
`date +%s%N` stamps, waiting, reaping orphans. `scripts/soak.py` uses them too."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .settings import KEEP, TMPDIR

ME = os.getpid()
CLK_TCK = os.sysconf("SC_CLK_TCK")


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

    def serving(self) -> bool:
        """The daemon answers on its socket. The socket file alone is not enough: it appears
        a moment before the daemon listens on it, and a connection then is refused."""
        try:
            self.api.get("/v1/status", fresh=True)
            return True
        except (OSError, ApiError, http.client.HTTPException):
            return False

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
