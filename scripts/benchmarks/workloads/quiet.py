"""The quiet workload: an idle daemon's CPU with 2,000 queued behind one run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..daemon import CLK_TCK, cpu_ticks
from ..results import Row
from ..settings import QUIET_SECONDS
from .prefill import queued_behind_one_run


def quiet_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """An idle daemon (issue: the standby worker and the sampler woke it): 2,000 queued
    behind one run, nobody asking anything. After a minute (the daemon's start counts as a
    read of resources, and the sampler samples for a minute after a read), its CPU ticks
    (utime + stime of every thread) over BENCH_QUIET_SECONDS, and which threads woke."""
    h = queued_behind_one_run(bins, "quiet")
    try:
        h.api.close()
        time.sleep(62)

        def threads() -> dict[str, int]:
            out: dict[str, int] = {}
            for t in os.listdir(f"/proc/{h.pid}/task"):
                try:
                    raw = Path(f"/proc/{h.pid}/task/{t}/stat").read_text()
                except FileNotFoundError:
                    continue
                name = raw[raw.index("(") + 1 : raw.rindex(")")]
                f = raw[raw.rindex(")") + 2 :].split()
                out[f"{name}/{t}"] = int(f[11]) + int(f[12])
            return out

        t0, c0 = threads(), cpu_ticks(h.pid)
        time.sleep(QUIET_SECONDS)
        t1, c1 = threads(), cpu_ticks(h.pid)
        woke = {k: v - t0.get(k, 0) for k, v in t1.items() if v - t0.get(k, 0)}
        notes["quiet_threads"] = woke
        rows.append(
            Row(
                "quiet_cpu",
                f"daemon CPU over {QUIET_SECONDS} idle s, 2,000 queued behind one run "
                f"(ticks of {1000 / CLK_TCK:.0f} ms)",
                "ticks",
                p50=c1 - c0,
                target="0",
            )
        )
    finally:
        h.close()
