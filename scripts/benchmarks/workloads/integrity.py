"""The integrity workload: the store check at `daemon serve` against the history size."""

from __future__ import annotations

import re
import time
from pathlib import Path

from ..daemon import Home, log, wait_for
from ..results import Row, dist_row
from ..settings import INTEGRITY, INTEGRITY_STARTS
from ..stats import median
from .prefill import seed_history

CHECKED = re.compile(r"store checked bytes=(\d+) elapsed_ms=([0-9.]+)")


def integrity_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """For each size H in BENCH_INTEGRITY: H finished jobs, the daemon stopped, then timed
    starts of `daemon serve`: each to a working socket, and the store check inside it (the
    daemon logs its own time), on a cleanly closed store and once after a SIGKILL."""
    for size in INTEGRITY:
        h = Home(bins, f"integrity-{size}", lanes=1)
        try:
            h.serve_foreground()
            wait_for(h.serving, 60, 0.001, "the daemon's socket")
            wait_for(h.idle, 60, 0.01, "the lane")
            if size:
                seeded = seed_history(h, size)
                log(f"integrity {size:,}: seeded in {seeded:.0f} s")
            h.stop(cancel=False)
            serve_log = h.work / "serve.log"

            def timed_start() -> tuple[float, float | None, int | None]:
                """`daemon serve` to a working socket (ms), and the check's own ms and bytes."""
                offset = serve_log.stat().st_size
                t0 = time.perf_counter_ns()
                h.serve_foreground()
                wait_for(h.serving, 600, 0.001, "the restarted daemon's socket")
                wall = (time.perf_counter_ns() - t0) / 1e6
                with open(serve_log, "rb") as f:
                    f.seek(offset)
                    found = CHECKED.findall(f.read().decode(errors="replace"))
                if not found:
                    return wall, None, None
                return wall, float(found[-1][1]), int(found[-1][0])

            walls, checks, size_bytes = [], [], None
            for _ in range(INTEGRITY_STARTS):
                wall, check, size_bytes = timed_start()
                walls.append(wall)
                if check is not None:
                    checks.append(check)
                h.stop(cancel=False)
            tag = f"integrity {size:,}"
            mb = size_bytes / 1e6 if size_bytes else None
            rows.append(Row(f"integ_store_{size}", f"{tag}: store size", "MB", p50=mb))
            rows.append(
                dist_row(f"integ_serve_{size}", f"{tag}: `daemon serve` to a working socket", "ms", walls)
            )
            rows.append(
                dist_row(f"integ_check_{size}", f"{tag}: the store check at start", "ms", checks)
            )
            if mb and checks:
                rows.append(
                    Row(
                        f"integ_rate_{size}",
                        f"{tag}: the check per GB of store",
                        "ms",
                        p50=median(checks) / (mb / 1000),
                    )
                )
            # A killed daemon leaves a WAL: the next check reads its frames too.
            h.serve_foreground()
            wait_for(h.serving, 600, 0.001, "the daemon's socket")
            wait_for(h.idle, 600, 0.01, "the lane")
            h.kill9()
            wall, check, _ = timed_start()
            rows.append(
                Row(f"integ_serve_wal_{size}", f"{tag}: `daemon serve` after a SIGKILL", "ms", p50=wall)
            )
            rows.append(
                Row(f"integ_check_wal_{size}", f"{tag}: its store check, WAL included", "ms", p50=check)
            )
        finally:
            h.close()
