"""The schedule workload (issue 27): the scheduling simulator's weeks, no daemon."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ..results import Row
from ..settings import ROOT


def schedule_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Issue 27: the scheduling simulator (homebased/examples/schedule_sim.rs) drives the
    real `decide` over two seeded weeks on a virtual clock, no daemon: per trace and policy
    the GPU utilization and what jobs of several GPUs wait."""
    built = bins / "examples" / "schedule_sim"
    cmd = (
        [str(built), "--json"]
        if built.is_file()
        else ["cargo", "run", "--release", "--quiet", "--locked", "-p", "homebased",
              "--example", "schedule_sim", "--", "--json"]
    )
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"schedule_sim exited {out.returncode}: {out.stderr.strip()[-400:]}")
    report = json.loads(out.stdout)

    def hours(seconds):
        return "-" if seconds is None else f"{seconds / 3600:.1f} h"

    for r in report["results"]:
        tag = f"sched_{r['trace']}_{r['policy']}"
        rows.append(
            Row(f"{tag}_util", f"schedule sim, {r['trace']}, {r['policy']}: GPU utilization",
                "%", p50=r["utilization"] * 100, n=r["jobs"])
        )
        rows.append(
            Row(f"{tag}_multi", "↳ multi-GPU jobs' wait: p95 / longest / never started", "h",
                text=f"{hours(r['multi_wait_p95_s'])} / {hours(r['multi_wait_max_s'])} / "
                f"{r['multi_never']} of {r['multi_jobs']}")
        )
        if r["policy"] == "ours":
            rows.append(
                Row(f"{tag}_held", "↳ from holding the reservation to starting, at most", "h",
                    text=f"{hours(r['held_max_s'])} (longest time limit "
                    f"{hours(r['limit_max_s'])} + {r['cleanup_bound_s']} s)")
            )
    notes["schedule_elapsed"] = report["elapsed_s"]
