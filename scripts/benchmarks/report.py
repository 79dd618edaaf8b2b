"""The report: the block between the bench markers of docs/BENCHMARKS.md (command, date,
machine, counts, the table, the notes and the definitions of every figure), written in
place of the previous one."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from .results import Row, markdown_table
from .settings import (
    DASHBOARD_QUEUE,
    FILL_BUDGET,
    FILL_CONNECTIONS,
    HANDOVER_JOBS,
    IDLE_SECONDS,
    JOBS,
    LANES,
    LIST_RUNS,
    MIG_QUEUE,
    MIG_RUNS,
    MIG_SECONDS,
    PREEMPT,
    PROCS,
    QUEUE,
    SAMPLE,
    SCRAPES,
    SWEEP_JOBS,
    SWEEP_PROCS,
)


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
  Around the drain (the holders' release to the last run's end) the machine's busy CPU time
  (`/proc/stat`: user, nice, system, irq, softirq, steal) and the daemon's own and reaped
  CPU are read and divided by the runs that ended (the holders and the queued jobs); the last
  row multiplies that by the lanes and divides it by the CPUs: the time one round of the
  lanes' runs occupies every CPU of this machine, which no order of the work can shorten.
  BENCH_MIG_CARDS fewer cards make a smaller round, to see how the hand-over follows lanes
  per CPU (run under `taskset -c 0` for one CPU).
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
