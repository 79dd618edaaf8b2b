"""The benchmarks' settings, read from the environment once, when the package is imported.

Settings (environment):

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
  BENCH_MIG_CARDS        cards of 7 MIG slices in mig56 (fewer: a smaller burst, to see
                         how the hand-over scales with lanes per CPU)            [8 / 8]
  BENCH_MIG_RUNS         timed `resource list --json` calls and settles in mig56  [20 / 5]
  BENCH_MIG_SECONDS      mig56's sampler window, no reads (at most 55)           [45 / 10]
  BENCH_MIXED_QUEUE      1 s jobs of 1, 2 and 4 GPUs in mixed8's trace on 8 lanes [600 / 60]
  BENCH_OUT              report path [docs/BENCHMARKS.md; none when quick]; empty: no report
  BENCH_TMPDIR           parent folder of the temporary homes [system temp]
  BENCH_KEEP=1           keep the temporary homes (for a look afterwards)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# scripts/benchmarks/settings.py: the repository is three folders up.
ROOT = Path(__file__).resolve().parent.parent.parent
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
MIG_CARDS = min(max(setting("BENCH_MIG_CARDS", 8, 8), 1), 8)
MIG_QUEUE = max(setting("BENCH_MIG_QUEUE", 2000, 200), MIG_CARDS * 7 * 2)
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
