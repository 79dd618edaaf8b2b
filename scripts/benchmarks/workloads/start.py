"""The start workload: submit to start on an idle lane, CLI and socket API."""

from __future__ import annotations

import time
from pathlib import Path

from ..daemon import Home, read_ns, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import JOBS
from ..stats import median


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
