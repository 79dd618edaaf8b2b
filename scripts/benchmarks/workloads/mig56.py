"""The mig56 workload, MIG lanes at scale (issue 30): a fake `nvidia-smi` of 8 cards of 7
slices, and the plain-shell floor of its hand-over burst."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..daemon import CLK_TCK, Home, cpu_ticks, log, read_ns, wait_for
from ..results import Row, dist_row
from ..settings import MIG_CARDS, MIG_QUEUE, MIG_RUNS, MIG_SECONDS
from .runs import cleanup_row, lane_gaps, sweep_totals

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


def machine_busy_ticks() -> int:
    """Every CPU's busy time so far (`/proc/stat`: user, nice, system, irq, softirq and
    steal), in ticks: what all processes of the machine used, ours and the kernel's."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()
    if fields[0] != "cpu":
        raise RuntimeError("/proc/stat does not begin with the all-CPU line")
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return user + nice + system + irq + softirq + steal


def children_cpu_ms() -> float:
    """The CPU (user + system) of every child this process has waited for, with theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def shell_lanes_floor(lanes: int, rounds: int) -> tuple[list[float], float]:
    """The machine's floor for a hand-over: `lanes` plain `sh` loops, no queue, each running
    `rounds` of the benchmark's one-second job back to back (the same script, so the same
    processes start), all begun together as a queue's lanes are. Every gap from one job's
    end stamp to the next one's start stamp on the same loop, in ms; and the loops' CPU per
    job in ms (the job's own `sh`, `date`, `sleep`, `date`, and the loop's fork of it): what
    a run's workload costs without homebased."""
    work = Path(tempfile.mkdtemp(prefix="hb-bench-floor-"))
    try:
        job = (
            'date +%s%N > "$0/s.$1.$2"; sleep 1; exec date +%s%N > "$0/e.$1.$2"'
        )
        loop = f"for i in $(seq 1 {rounds}); do sh -c '{job}' \"$0\" \"$1\" \"$i\"; done"
        cpu0 = children_cpu_ms()
        procs = [
            subprocess.Popen(["sh", "-c", loop, str(work), str(lane)])
            for lane in range(lanes)
        ]
        for proc in procs:
            proc.wait(timeout=60 + rounds * 5)
        per_job = (children_cpu_ms() - cpu0) / (lanes * rounds)
        gaps = []
        for lane in range(lanes):
            for i in range(1, rounds):
                end = read_ns(work / f"e.{lane}.{i}")
                start = read_ns(work / f"s.{lane}.{i + 1}")
                if end is not None and start is not None:
                    gaps.append((start - end) / 1e6)
        return gaps, per_job
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
        drain0 = machine_busy_ticks(), cpu_ticks(pid), reaped_ticks(pid)
        wait_for(h.release_hold, 10, 0.01, "the holders to wait on their FIFO")

        def drained() -> bool:
            h.release_hold()
            return all(read_ns(h.out / f"e.{j}") for j in jobs[-lanes:])

        wait_for(drained, 60 + MIG_QUEUE * 1.5 / lanes, 0.05, "the last jobs")
        h.wait_idle(timeout=60)
        drain1 = machine_busy_ticks(), cpu_ticks(pid), reaped_ticks(pid)
        by_lane, gaps = lane_gaps(h, jobs)
        cards = f"{MIG_CARDS} card" + ("s" if MIG_CARDS != 1 else "")
        setup = f"{lanes} MIG lanes ({cards} of {MIG_SLICES} slices)"
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
        for key, figure, ticks in [
            (
                "mig56_cpu",
                f"daemon CPU per hour, sampler on, {lanes} MIG lanes held, {queued}, no reads "
                f"(over {MIG_SECONDS} s, {n1 - n0} samples, ticks of {1000 / CLK_TCK:.0f} ms)",
                c1 - c0,
            ),
            ("mig56_cpu_sampler", "↳ of which the `gpu-sampler` thread", s1 - s0),
            (
                "mig56_cpu_queries",
                "↳ beside it: the reaped queries (the fake `nvidia-smi` is `sh`)",
                r1 - r0,
            ),
        ]:
            rows.append(Row(key, figure, "s/h", p50=per_hour(ticks)))
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
        floor_gaps, workload_ms = shell_lanes_floor(lanes, max(3, min(10, MIG_QUEUE // lanes)))
        rows.append(
            dist_row(
                "mig56_floor",
                f"↳ beside it: {lanes} plain `sh` loops running the same job back to back, no "
                "queue (this machine's floor for the same burst)",
                "ms",
                floor_gaps,
            )
        )
        rows.append(cleanup_row("mig56_handover_cleanup", h))
        # What a run costs the machine, and so how long the CPUs are busy with one round of
        # the lanes' runs: the lanes of this workload start together and run equal jobs, so
        # their hand-overs come close together, and no order of the work makes a round
        # shorter than its CPU time spread over every CPU. Every holder ends and every
        # queued job runs.
        ended = MIG_QUEUE + lanes

        busy, own, reaped = (after - before for before, after in zip(drain0, drain1))

        def per_run(ticks: int) -> float:
            return ticks / CLK_TCK * 1000 / ended

        cpus = os.cpu_count() or 1
        for key, figure, ticks in [
            (
                "mig56_handover_cpu",
                f"machine CPU per run while the {queued} drain (all processes, `/proc/stat` "
                f"busy time / {ended:,} runs)",
                busy,
            ),
            ("mig56_handover_cpu_daemon", "↳ of which the daemon's own", own),
            (
                "mig56_handover_cpu_children",
                "↳ of which its reaped children: the workers and, through them, the workloads",
                reaped,
            ),
        ]:
            rows.append(Row(key, figure, "ms", p50=per_run(ticks)))
        # Issue 45's split: the workload's own CPU, from the floor's loops running the same
        # job, taken out of the machine's and the reaped children's figures.
        for key, figure, ms in [
            (
                "mig56_run_workload",
                "↳ the workload alone: the floor's `sh` loops' CPU per job (the job's `sh`, "
                "`date`, `sleep`, `date`, and the loop's fork of it)",
                workload_ms,
            ),
            (
                "mig56_run_homebased",
                "↳ homebased's own per run: machine CPU per run less the workload alone",
                per_run(busy) - workload_ms,
            ),
            (
                "mig56_run_worker",
                "↳ of which the worker's: the reaped children less the workload alone",
                per_run(reaped) - workload_ms,
            ),
        ]:
            rows.append(Row(key, figure, "ms", p50=ms))
        # The sweep's part of the worker's, as each worker logs it (its own thread's CPU over
        # the sweep), and how many readings of the table a sweep took itself.
        sweeps, sweep_cpu, scans, shared = sweep_totals(h)
        if sweeps:
            rows.append(
                Row(
                    "mig56_run_sweep",
                    "↳↳ of which the sweep's: its thread's CPU, readings of the table included "
                    f"(`worker.log`, {sweeps:,} sweeps)",
                    "ms",
                    p50=sweep_cpu / sweeps,
                )
            )
            rows.append(
                Row(
                    "mig56_run_readings",
                    f"↳↳ readings of the table per sweep ({scans:,} scans, {shared:,} of them "
                    "answered by another worker's reading)",
                    "readings",
                    p50=(scans - shared) / sweeps,
                )
            )
        rows.append(
            Row(
                "mig56_burst_floor",
                f"↳ one round of {lanes} runs spread over this machine's {cpus} CPUs "
                "(lanes x CPU per run / CPUs)",
                "ms",
                p50=lanes * per_run(busy) / cpus,
            )
        )
        notes["mig56_ran"] = sum(len(v) for v in by_lane.values())
    finally:
        h.close()
