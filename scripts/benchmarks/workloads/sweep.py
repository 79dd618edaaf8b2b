"""The sweep-cost workload: a short job's cleanup against the number of processes alive."""

from __future__ import annotations

from pathlib import Path

from ..daemon import Home, Sleepers, count_processes, wait_for
from ..results import Row, dist_row
from ..settings import SWEEP_JOBS, SWEEP_PROCS
from ..stats import median
from .runs import run_records


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
