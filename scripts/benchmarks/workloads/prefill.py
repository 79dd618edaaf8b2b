"""Homes filled before a workload measures them: a finished history seeded through the API,
and a queue of 2,000 behind one run."""

from __future__ import annotations

import time
from pathlib import Path

from ..daemon import Home, uuid7, wait_for


def queued_behind_one_run(bins: Path, tag: str, queued: int = 2000) -> Home:
    """One indexed lane held by one run (seen through its `worker.json`, never through a
    read of resources, which would wake the GPU sampler for a minute), `queued` jobs behind
    it submitted through the API."""
    h = Home(bins, tag, lanes=1)
    try:
        h.start()
        h.submit_api(h.spec("hold", h.hold_script()))
        wait_for(
            lambda: any(pgid for _, pgid in h.workers()), 60, 0.01, "the holder to run"
        )
        spec = h.spec("queued", "true")
        for _ in range(queued):
            h.submit_api(spec)
    except BaseException:
        h.close()
        raise
    return h


def seed_history(h: Home, count: int) -> float:
    """`count` finished jobs through `POST /v1/internal/seed` (each submitted and cancelled
    by the core's own verbs, 1,000 per request), then waits until every JOB_CANCELLED is in
    the thread's inbox (delivered). Returns the seconds it took."""
    t0 = time.monotonic()
    spec = h.spec("history", "true")
    left = count
    while left > 0:
        n = min(left, 1000)
        h.api.post("/v1/internal/seed", {"count": n, "submit": h.body(uuid7(), spec)})
        left -= n
    inbox = h.home / "threads" / f"{h.thread}.jsonl"

    def delivered() -> bool:
        try:
            with open(inbox, "rb") as f:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        except FileNotFoundError:
            lines = 0
        return lines >= count

    wait_for(delivered, 3600, 0.5, f"{count:,} events delivered")
    return time.monotonic() - t0
