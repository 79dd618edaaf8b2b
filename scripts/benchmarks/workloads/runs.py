"""What a home's run directories say, for the workloads that read them: each run's records
(worker, exit, cleanup), each job's lanes, the per-lane gaps between stamped jobs, and the
worker's cleanup as a row."""

from __future__ import annotations

import json
import re

from ..daemon import Home, read_ns
from ..results import Row, dist_row


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


SWEPT = re.compile(
    r"swept in (\d+) scans \((\d+) read by another worker\), \d+ ms, ([0-9.]+) ms of CPU"
)


def sweep_totals(h: Home) -> tuple[int, float, int, int]:
    """Over every run of `h` whose worker logged its sweep: the sweeps, their CPU in ms (the
    worker's own thread, the readings of the table included), their scans, and the scans
    another worker's reading answered (`worker.log`'s summary line)."""
    sweeps, cpu, scans, shared = 0, 0.0, 0, 0
    for d in (h.home / "tasks").iterdir():
        try:
            text = (d / "worker.log").read_text(errors="replace")
        except FileNotFoundError:
            continue
        for m in SWEPT.finditer(text):
            sweeps += 1
            scans += int(m.group(1))
            shared += int(m.group(2))
            cpu += float(m.group(3))
    return sweeps, cpu, scans, shared


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
