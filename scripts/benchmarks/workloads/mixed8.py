"""The mixed8 workload (issue 27's real-process row): a seeded trace of 1-, 2- and 4-GPU
jobs on 8 lanes, its hand-over from each job's last lane and its utilization."""

from __future__ import annotations

import json
import random
from pathlib import Path

from ..daemon import Home, log, read_ns, wait_for
from ..results import Row, dist_row
from ..settings import MIXED_QUEUE
from .runs import cleanup_row, job_lanes, lane_gaps

# The mixed trace (issue 27's real-process row): shares of 1-, 2- and 4-GPU jobs, and the
# seed that makes the trace the same on every run.
MIXED_LANES = 8
MIXED_SHARES = ((1, 0.60), (2, 0.25), (4, 0.15))
MIXED_SEED = 27


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
