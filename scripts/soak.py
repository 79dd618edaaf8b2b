#!/usr/bin/env python3
"""Soak test for homebased (reliability issue, "Load"): many concurrent clients, thousands
of jobs of mixed levels and modes, random cancels and moves, preemptions, and a `kill -9` of
the daemon every few seconds; at the end the invariants of the crash matrix are checked and
the figures printed (and written to docs/BENCHMARKS.md with SOAK_REPORT=1).

Run through `scripts/soak`, which builds the release binaries first. Not part of CI: it
takes minutes and measures this machine. Python 3.11 standard library only; the daemon and
API helpers come from the benchmarks package (scripts/benchmarks/).

Settings (environment):
  SOAK_JOBS        jobs submitted                                   [5000]
  SOAK_CLIENTS     concurrent API clients                           [16]
  SOAK_LANES       fake indexed lanes                               [8]
  SOAK_KILL_EVERY  seconds between kill -9 of the daemon (0: never) [4]
  SOAK_DEADLINE    seconds the whole run may take before it fails   [1800]
  SOAK_REPORT=1    write the figures into docs/BENCHMARKS.md
  SOAK_KEEP=1      keep the temporary home for a look afterwards
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# After the path is set, so the package is found from any working folder.
from benchmarks.daemon import Api, ApiError, Home, uuid7, wait_for  # noqa: E402
from benchmarks.settings import ROOT  # noqa: E402
from benchmarks.stats import median  # noqa: E402

JOBS = int(os.environ.get("SOAK_JOBS", "5000"))
CLIENTS = int(os.environ.get("SOAK_CLIENTS", "16"))
LANES = int(os.environ.get("SOAK_LANES", "8"))
KILL_EVERY = float(os.environ.get("SOAK_KILL_EVERY", "4"))
DEADLINE = float(os.environ.get("SOAK_DEADLINE", "1800"))
TERMINAL_EVENTS = {"JOB_SUCCEEDED", "JOB_FAILED", "JOB_CANCELLED"}


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Soak:
    def __init__(self, bins: Path):
        self.h = Home(bins, "soak", lanes=LANES)
        self.starts = self.h.out / "starts.log"
        self.lock = threading.Lock()
        self.jobs: list[str] = []
        self.counts: Counter[str] = Counter()
        self.dense_checks = 0
        self.violations: list[str] = []
        self.restart_ms: list[float] = []
        self.stop = threading.Event()

    # -- the workload: records every start and every completed step

    def script(self, mode: str, steps_note: str) -> str:
        log_path = self.starts
        yield_exit = '[ -e "$HOMEBASED_YIELD_FILE" ] && exit 75; ' if mode == "yield" else ""
        return (
            f'echo "start $HOMEBASED_JOB_ID $HOMEBASED_STEP_INDEX $HOMEBASED_RUN_NUMBER" '
            f">> '{log_path}'; "
            "i=0; n=$(( $(od -An -N1 -tu1 /dev/urandom) % 4 )); "
            f"while [ $i -lt $n ]; do {yield_exit}sleep 0.05; i=$((i+1)); done; "
            f"{yield_exit}"
            f'echo "done $HOMEBASED_JOB_ID $HOMEBASED_STEP_INDEX" >> \'{log_path}\'{steps_note}'
        )

    def spec(self, rng: random.Random, n: int):
        priority = rng.choices(["low", "medium", "high"], [5, 4, 1])[0]
        mode = rng.choice(["wait", "yield", "restart"])
        steps = rng.choice([1, 1, 2])
        step = {"type": "task", "command": ["/bin/sh", "-c", self.script(mode, "")]}
        spec = {
            "api_version": 1,
            "thread": self.h.thread,
            "name": f"soak {n}",
            "cwd": str(self.h.work),
            "priority": priority,
            "preempt": {"mode": mode},
            "steps": [step] * steps,
        }
        if mode == "yield" and rng.random() < 0.3:
            spec["preempt"]["restart_within"] = "1m"
        return spec

    # -- retries across daemon kills: every call carries its own job or operation id

    def call(self, api: Api, method: str, path: str, body=None):
        deadline = time.monotonic() + 120
        while True:
            try:
                return api.request(method, path, body)
            except ApiError as e:
                text = str(e)
                if "HTTP 503" in text or "daemon_unavailable" in text:
                    api.close()
                    time.sleep(0.05)
                else:
                    raise
            except OSError:
                api.close()
                time.sleep(0.05)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path} did not get through in 120 s")

    def client(self, index: int) -> None:
        rng = random.Random(index)
        api = Api(self.h.sock)
        mine: list[str] = []
        for n in range(index, JOBS, CLIENTS):
            job = uuid7()
            self.call(api, "POST", "/v1/jobs", self.h.body(job, self.spec(rng, n)))
            mine.append(job)
            with self.lock:
                self.jobs.append(job)
                self.counts["submitted"] += 1
            roll = rng.random()
            if roll < 0.05 and mine:
                target = rng.choice(mine)
                op = {"operation_id": str(uuid.uuid4())}
                try:
                    self.call(api, "POST", f"/v1/jobs/{target}/cancel", op)
                    with self.lock:
                        self.counts["cancels"] += 1
                except ApiError:
                    pass
            elif roll < 0.15 and mine:
                target = rng.choice(mine)
                placement = rng.choice(
                    [{"front": True}, {"back": True}, {"priority": rng.choice(["low", "high"])}]
                )
                op = {"operation_id": str(uuid.uuid4()), "placement": placement}
                try:
                    self.call(api, "POST", f"/v1/jobs/{target}/move", op)
                    with self.lock:
                        self.counts["moves"] += 1
                except ApiError:
                    pass  # a job that finished meanwhile is job_terminal
        api.close()

    def killer(self) -> None:
        while not self.stop.wait(KILL_EVERY):
            try:
                self.h.kill9()
            except Exception as e:  # the daemon may be between restarts
                log(f"kill -9 skipped: {e}")
                continue
            t0 = time.perf_counter()
            self.h.serve_foreground()
            wait_for(lambda: self.h.sock.exists(), 60, 0.005, "the socket")
            probe = Api(self.h.sock)
            wait_for(lambda: self.answers(probe), 60, 0.005, "the restarted daemon")
            probe.close()
            self.restart_ms.append((time.perf_counter() - t0) * 1000)
            with self.lock:
                self.counts["kills"] += 1
            self.check_dense()

    @staticmethod
    def answers(api: Api) -> bool:
        try:
            api.get("/v1/status", fresh=True)
            return True
        except Exception:
            return False

    def check_dense(self) -> None:
        api = Api(self.h.sock)
        try:
            listing = self.call(api, "GET", "/v1/jobs")
        finally:
            api.close()
        by_level: dict[str, list[int]] = defaultdict(list)
        for job in listing["jobs"]:
            by_level[job["priority"]].append(job["position"])
        for level, positions in by_level.items():
            if sorted(positions) != list(range(1, len(positions) + 1)):
                self.violations.append(f"positions of {level} not dense: {sorted(positions)[:20]}")
        self.dense_checks += 1

    # -- the run

    def run(self) -> dict:
        self.h.serve_foreground()
        wait_for(lambda: self.h.sock.exists(), 60, 0.01, "the socket")
        started = time.perf_counter()
        clients = [threading.Thread(target=self.client, args=(i,)) for i in range(CLIENTS)]
        killer = threading.Thread(target=self.killer) if KILL_EVERY > 0 else None
        for t in clients:
            t.start()
        if killer:
            killer.start()
        for t in clients:
            t.join()
        submitted_s = time.perf_counter() - started
        log(f"{self.counts['submitted']} jobs submitted in {submitted_s:.0f} s")
        api = Api(self.h.sock)
        deadline = time.monotonic() + DEADLINE
        while True:
            open_jobs = len(self.call(api, "GET", "/v1/jobs")["jobs"])
            if open_jobs == 0:
                break
            if time.monotonic() > deadline:
                self.violations.append(f"{open_jobs} jobs still open at the deadline")
                break
            time.sleep(1)
        self.stop.set()
        if killer:
            killer.join()
        drained_s = time.perf_counter() - started
        self.check_dense()
        wait_for(lambda: self.idle(api), 120, 0.05, "every lane to be idle")
        figures = self.verify(api)
        api.close()
        figures.update(
            jobs=len(self.jobs),
            clients=CLIENTS,
            lanes=LANES,
            wall_s=round(drained_s, 1),
            submit_s=round(submitted_s, 1),
            throughput=round(len(self.jobs) / drained_s, 1),
            kills=self.counts["kills"],
            cancels=self.counts["cancels"],
            moves=self.counts["moves"],
            restart_ms_p50=round(median(self.restart_ms) or 0, 1),
            restart_ms_max=round(max(self.restart_ms, default=0), 1),
            dense_checks=self.dense_checks,
        )
        return figures

    def idle(self, api: Api) -> bool:
        resources = self.call(api, "GET", "/v1/resources")["resources"]
        return all(r["run"] is None for r in resources)

    def verify(self, api: Api) -> dict:
        """The crash matrix's invariants, over every job."""
        done = Counter()
        starts = 0
        for line in self.starts.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["done"] and len(parts) == 3:
                done[(parts[1], parts[2])] += 1
            elif parts[:1] == ["start"]:
                starts += 1
        twice = [k for k, n in done.items() if n > 1]
        if twice:
            self.violations.append(f"{len(twice)} completed steps ran again, e.g. {twice[:3]}")
        shown_all = {job: self.call(api, "GET", f"/v1/jobs/{job}") for job in self.jobs}
        expected = sum(len(s["events"]) for s in shown_all.values())
        # Delivery runs behind the queue: wait until every event reached the inbox once.
        inbox: dict[str, list[int]] = {}
        deadline = time.monotonic() + 120
        while True:
            inbox = read_inbox(self.h.home / "threads" / f"{self.h.thread}.jsonl")
            if sum(len(set(v)) for v in inbox.values()) >= expected or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        outcomes = Counter()
        preempted = 0
        for job, shown in shown_all.items():
            state = shown["state"]["state"]
            outcomes[state] += 1
            names = [e["event"] for e in shown["events"]]
            seqs = [e["seq"] for e in shown["events"]]
            preempted += names.count("JOB_PREEMPTED")
            if state not in ("succeeded", "failed", "cancelled"):
                self.violations.append(f"job {job} ended {state}")
            if sum(n in TERMINAL_EVENTS for n in names) != 1 or names[-1] not in TERMINAL_EVENTS:
                self.violations.append(f"job {job} terminal events {names}")
            if seqs != list(range(1, len(seqs) + 1)):
                self.violations.append(f"job {job} events not gapless: {seqs}")
            delivered = inbox.get(job, [])
            first_seen = list(dict.fromkeys(delivered))
            if first_seen != seqs:
                self.violations.append(
                    f"job {job} inbox order {first_seen} differs from its events {seqs}"
                )
        leftovers = marked_processes(self.h.home)
        if leftovers:
            self.violations.append(f"{len(leftovers)} marked processes outlived their runs")
        return {
            "succeeded": outcomes["succeeded"],
            "failed": outcomes["failed"],
            "cancelled": outcomes["cancelled"],
            "preemptions": preempted,
            "starts": starts,
            "violations": len(self.violations),
        }


def read_inbox(path: Path) -> dict[str, list[int]]:
    """Each job's delivered seqs, in the order they reached the inbox (repeats included)."""
    inbox: dict[str, list[int]] = defaultdict(list)
    if not path.exists():
        return inbox
    for line in path.read_text().splitlines():
        m = re.match(r"HOMEBASED_EVENT (.*)$", line)
        if m:
            event = json.loads(m.group(1))
            inbox[event["job"]].append(event["seq"])
    return inbox


def marked_processes(home: Path) -> list[int]:
    """Processes whose environment names a task of this home."""
    tasks = {p.name for p in (home / "tasks").iterdir()} if (home / "tasks").exists() else set()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(b"HOMEBASED_TASK_ID=") and var[18:].decode(errors="replace") in tasks:
                found.append(int(entry.name))
    return found


def report(figures: dict, violations: list[str]) -> str:
    rows = [
        ("jobs (clients, lanes)", f"{figures['jobs']:,} ({figures['clients']}, {figures['lanes']})"),
        ("wall time to drained (submits took)", f"{figures['wall_s']} s ({figures['submit_s']} s)"),
        ("throughput", f"{figures['throughput']} jobs/s"),
        ("daemon kill -9 / restarts", f"{figures['kills']}"),
        ("restart to answering socket, p50 / max", f"{figures['restart_ms_p50']} / {figures['restart_ms_max']} ms"),
        ("cancels, moves, preemptions", f"{figures['cancels']}, {figures['moves']}, {figures['preemptions']}"),
        ("workload starts (all attempts)", f"{figures['starts']:,}"),
        ("outcomes: succeeded / failed / cancelled", f"{figures['succeeded']:,} / {figures['failed']:,} / {figures['cancelled']:,}"),
        ("dense-position checks (after every restart)", f"{figures['dense_checks']}"),
        ("invariant violations", f"{figures['violations']}"),
    ]
    lines = ["| figure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows]
    if violations:
        lines += ["", "Violations:"] + [f"- {v}" for v in violations[:20]]
    return "\n".join(lines)


def write_report(block: str) -> None:
    path = ROOT / "docs" / "BENCHMARKS.md"
    text = path.read_text()
    start, end = "<!-- soak:start -->", "<!-- soak:end -->"
    command = (
        " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("SOAK_"))
        + " scripts/soak"
    ).strip()
    section = (
        f"{start}\n## Soak\n\nCommand: `{command}` on {time.strftime('%Y-%m-%d')}. Mixed levels "
        "(low 50 %, medium 40 %, high 10 %) and modes (wait, yield, restart; some with "
        "`restart_within`), one or two steps of 0 to 150 ms, 5 % cancels and 10 % moves from the "
        "clients, and `kill -9` of the daemon every "
        f"{KILL_EVERY:g} s with a restart at once. Invariants checked at the end: every job in "
        "exactly one terminal state with one terminal event last, events gapless and "
        "delivered to the thread inbox in order, no completed step run twice, positions dense "
        "after every restart, no marked process left.\n\n"
        f"{block}\n{end}"
    )
    if start in text:
        text = text[: text.index(start)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    path.write_text(text)


def main() -> int:
    bins = (
        Path(sys.argv[sys.argv.index("--bin-dir") + 1]).resolve()
        if "--bin-dir" in sys.argv
        else ROOT / "target" / "release"
    )
    soak = Soak(bins)
    log(f"{JOBS} jobs, {CLIENTS} clients, {LANES} lanes, kill -9 every {KILL_EVERY:g} s")
    try:
        figures = soak.run()
    finally:
        soak.stop.set()
        soak.h.stop(cancel=False)
        if os.environ.get("SOAK_KEEP") != "1":
            shutil.rmtree(soak.h.work, ignore_errors=True)
    block = report(figures, soak.violations)
    print(block)
    if os.environ.get("SOAK_REPORT") == "1":
        write_report(block)
        log("wrote docs/BENCHMARKS.md")
    return 1 if soak.violations else 0


if __name__ == "__main__":
    sys.exit(main())
