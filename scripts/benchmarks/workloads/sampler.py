"""The GPU sampler workload: the daemon's CPU while someone reads resources."""

from __future__ import annotations

import time
from pathlib import Path

from ..daemon import CLK_TCK, Home, wait_for
from ..results import Row, dist_row
from ..settings import IDLE_SECONDS, LANES


def sampler_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The GPU sampler on an idle machine with BENCH_LANES fake cards, each with one compute
    process: the daemon's CPU (its reaped queries included) while someone reads resources,
    scaled to an hour, and `resource list` latency with sampling on."""
    h = Home(bins, "sampler", lanes=LANES)
    probe = h.work / "nvidia-smi"
    listing = "".join(f"GPU {i}: Fake GPU (UUID: GPU-{i})\\n" for i in range(LANES))
    apps = "".join(f"GPU-{i}, {100000 + i}, 1024\\n" for i in range(LANES))
    probe.write_text(
        "#!/bin/sh\n"
        f"case \"$1\" in -L) printf '{listing}' ;; *) printf '{apps}' ;; esac\n"
    )
    try:
        h.start()
        h.cli_json("resource", "list")
        wait_for(
            lambda: all(
                r["gpu"] and r["gpu"]["processes"] is not None
                for r in h.cli_json("resource", "list")["resources"]
            ),
            30,
            0.1,
            "the first sample",
        )

        def ticks(pid: int) -> int:
            raw = Path(f"/proc/{pid}/stat").read_text()
            fields = raw[raw.rindex(")") + 2 :].split()
            # utime, stime, cutime, cstime: fields 14 to 17 (waited-for queries included).
            return sum(int(f) for f in fields[11:15])

        c0 = ticks(h.pid)
        end = time.monotonic() + IDLE_SECONDS
        lat: list[float] = []
        while time.monotonic() < end:
            t0 = time.perf_counter_ns()
            h.cli("--json", "resource", "list")
            lat.append((time.perf_counter_ns() - t0) / 1e6)
            time.sleep(1)
        c1 = ticks(h.pid)
        tick_ms = 1000 / CLK_TCK
        per_hour_s = (c1 - c0) * tick_ms / 1000 * 3600 / IDLE_SECONDS
        rows.append(
            Row(
                "sampler_cpu",
                f"daemon CPU per hour, sampling {LANES} lanes, idle machine (over {IDLE_SECONDS} s)",
                "s/h",
                p50=per_hour_s,
            )
        )
        rows.append(
            dist_row(
                "list_sampling",
                f"`resource list --json` with sampling on, {LANES} lanes, through the CLI",
                "ms",
                lat,
            )
        )
    finally:
        h.close()
