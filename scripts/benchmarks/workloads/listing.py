"""The listing workload: `resource jobs` for a person against `--json` for a script."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ..results import Row, dist_row
from ..settings import LIST_RUNS
from .prefill import queued_behind_one_run


def listing_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """`resource jobs` for a person against `--json` for a script, 2,000 queued behind one
    run, alternating, BENCH_LIST_RUNS times each, output to a file."""
    h = queued_behind_one_run(bins, "listing")
    try:
        listed = h.work / "listed.out"

        def timed(*flags: str) -> float:
            with open(listed, "wb") as out:
                t0 = time.perf_counter_ns()
                r = subprocess.run(
                    [h.hb_bin, "--home", str(h.home), *flags, "resource", "jobs"],
                    cwd=h.work,
                    env=h.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.PIPE,
                    timeout=120,
                )
                took = (time.perf_counter_ns() - t0) / 1e6
            if r.returncode != 0:
                raise RuntimeError(f"resource jobs exited {r.returncode}: {r.stderr[:400]!r}")
            return took

        human, script = [], []
        for _ in range(max(LIST_RUNS, 5)):
            human.append(timed())
            script.append(timed("--json"))
        rows.append(
            dist_row(
                "list_human_2000",
                "`resource jobs` (human table, CLI), 2,000 queued + 1 active",
                "ms",
                human,
                "≤ --json",
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "list_json_2000",
                "`resource jobs --json` (CLI), same queue, alternating with it",
                "ms",
                script,
                tails=False,
            )
        )
    finally:
        h.close()
