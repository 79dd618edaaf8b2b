"""The metrics workload: `GET /metrics` against the listing, 2,000 queued."""

from __future__ import annotations

import time
from pathlib import Path

from ..daemon import ApiError, Home, UnixHTTPConnection, wait_for
from ..results import Row, dist_row
from ..settings import LANES, SCRAPES


def metrics_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """`GET /metrics` with every lane held and 2,000 jobs queued, against the listing it must
    not be slower than (`GET /v1/jobs`, the same queue), each BENCH_SCRAPES times on one
    kept-alive socket connection, alternating."""
    h = Home(bins, "metrics", lanes=LANES)
    try:
        h.start()
        for _ in range(LANES):
            h.submit_api(h.spec("hold", h.hold_script()))
        wait_for(lambda: len(h.executing()) == LANES, 60, 0.01, "every holder to run")
        spec = h.spec("queued", "true")
        for _ in range(2000):
            h.submit_api(spec)
        conn = UnixHTTPConnection(str(h.sock))

        def timed(path: str) -> tuple[float, bytes]:
            t0 = time.perf_counter_ns()
            conn.request("GET", path)
            resp = conn.getresponse()
            raw = resp.read()
            took = (time.perf_counter_ns() - t0) / 1e6
            if resp.status != 200:
                raise ApiError(f"GET {path}: HTTP {resp.status}: {raw[:400]!r}")
            return took, raw

        scrape, listing = [], []
        size = 0
        for _ in range(SCRAPES):
            took, raw = timed("/metrics")
            scrape.append(took)
            size = len(raw)
            if b'homebased_jobs{priority="medium",state="queued"} 2000' not in raw:
                raise ApiError("the scrape does not count 2,000 queued jobs")
            listing.append(timed("/v1/jobs")[0])
        conn.close()
        rows.append(
            dist_row(
                "metrics_2000",
                f"`GET /metrics` on the socket, 2,000 queued, {LANES} lanes held "
                f"({size} bytes)",
                "ms",
                scrape,
            )
        )
        rows.append(
            dist_row(
                "metrics_list_2000",
                "`GET /v1/jobs` (the listing) on the socket, same queue, alternating with it",
                "ms",
                listing,
            )
        )
    finally:
        h.close()
