"""The history workload (issue 18): the daemon's figures with a large finished history."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

from ..daemon import Api, ApiError, Home, log, read_ns, rss_kib, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import HISTORY, HISTORY_SAMPLE
from .prefill import seed_history


def history_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """For each size H in BENCH_HISTORY: one idle lane, H finished jobs (with their events,
    delivered) seeded through the API; then the figures of an empty history: CLI submit and
    start latency, `resource jobs --json`, `job show` of a new job, daemon RSS, `daemon
    serve` to a working socket, and the cost of pruning the whole history."""
    for size in HISTORY:
        h = Home(bins, f"history-{size}", lanes=1)
        try:
            h.serve_foreground()
            wait_for(h.serving, 60, 0.001, "the daemon's socket")
            wait_for(h.idle, 60, 0.01, "the lane")
            seeded = seed_history(h, size) if size else 0.0
            if size:
                log(f"history {size:,}: seeded in {seeded:.0f} s")
                notes.setdefault("history_seed", []).append((size, seeded))
            script = f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""
            spec_file = h.spec_file("history-start", h.spec("start latency", script))
            submit, start, listing, showing = [], [], [], []
            for i in range(HISTORY_SAMPLE + 1):
                job = uuid7()
                t0 = time.time_ns()
                h.run_cli_submit(spec_file, job)
                wall = (time.time_ns() - t0) / 1e6
                started = wait_for(
                    lambda: read_ns(h.out / f"start.{job}"), 30, 0.0005, "the job to start"
                )
                h.wait_idle()
                t1 = time.perf_counter_ns()
                h.cli("--json", "resource", "jobs")
                t2 = time.perf_counter_ns()
                h.cli("--json", "resource", "job", "show", job)
                t3 = time.perf_counter_ns()
                if i == 0:
                    continue  # warm-up
                submit.append(wall)
                start.append((started - t0) / 1e6)
                listing.append((t2 - t1) / 1e6)
                showing.append((t3 - t2) / 1e6)
            tag = f"history {size:,}"
            rows.append(dist_row(f"hist_submit_{size}", f"{tag}: CLI submit wall time", "ms", submit))
            rows.append(dist_row(f"hist_start_{size}", f"{tag}: start latency (CLI)", "ms", start))
            rows.append(
                dist_row(f"hist_list_{size}", f"{tag}: `resource jobs --json` (CLI)", "ms", listing)
            )
            rows.append(
                dist_row(f"hist_show_{size}", f"{tag}: `job show` of a new job (CLI)", "ms", showing)
            )
            h.api.close()
            time.sleep(0.5)
            rss = rss_kib(h.pid)
            rows.append(
                Row(f"hist_rss_{size}", f"{tag}: daemon RSS after seeding", "MB", p50=rss / 1024 if rss else None)
            )
            # SIGTERM, then `daemon serve` to a working socket.
            h.stop(cancel=False)
            t0 = time.perf_counter_ns()
            h.serve_foreground()
            probe = Api(h.sock, timeout=60)

            def status_ok() -> bool:
                try:
                    probe.get("/v1/status", fresh=True)
                    return True
                except (OSError, ApiError, http.client.HTTPException):
                    return False

            wait_for(status_ok, 300, 0.001, "the restarted daemon's socket")
            rows.append(
                Row(
                    f"hist_restart_{size}",
                    f"{tag}: `daemon serve` to a working socket",
                    "ms",
                    p50=(time.perf_counter_ns() - t0) / 1e6,
                )
            )
            # The restarted daemon after a few requests: its footprint without the seeding
            # burst (the allocator keeps what a burst of 1,000-job requests once needed).
            for _ in range(5):
                h.cli("--json", "resource", "jobs")
                probe.get("/v1/status", fresh=True)
            time.sleep(0.5)
            rss = rss_kib(h.pid)
            rows.append(
                Row(
                    f"hist_rss_restarted_{size}",
                    f"{tag}: daemon RSS after that restart",
                    "MB",
                    p50=rss / 1024 if rss else None,
                )
            )
            if size:
                # Retention: the whole history in one `history prune` (batches of 100).
                t0 = time.perf_counter_ns()
                pruned = json.loads(
                    h.cli("--json", "history", "prune", "--before", "0s", timeout=3600).stdout
                )
                ms = (time.perf_counter_ns() - t0) / 1e6
                jobs = pruned["jobs"]
                rows.append(
                    Row(
                        f"hist_prune_{size}",
                        f"{tag}: `history prune` of {jobs:,} jobs, per 100-job batch",
                        "ms",
                        p50=ms / max(jobs / 100, 1),
                        text=None,
                    )
                )
                notes.setdefault("history_prune", []).append((size, jobs, ms))
        finally:
            h.close()
