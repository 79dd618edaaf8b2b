"""The hand-over workloads: exit to next start on one lane with BENCH_PROCS sleepers alive,
then on BENCH_LANES lanes of 1 s jobs back to back."""

from __future__ import annotations

from pathlib import Path

from ..daemon import Home, Sleepers, count_processes, read_ns, wait_for
from ..results import Row, dist_row
from ..settings import HANDOVER_JOBS, LANE_QUEUE, LANES, PROCS
from .runs import cleanup_row, lane_gaps, run_records


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
