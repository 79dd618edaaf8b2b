"""The floor workload: a bare `sh -c 'date'` spawned from Python."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..daemon import clean_env, read_ns
from ..results import Row, dist_row
from ..settings import JOBS, TMPDIR
from ..stats import median


def floor_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The bare floor: Python spawns `/bin/sh -c 'date +%s%N > FILE'` and waits for it."""
    work = Path(tempfile.mkdtemp(prefix="hb-bench-floor-", dir=TMPDIR))
    try:
        out = work / "t"
        lat = []
        env = clean_env()
        for _ in range(JOBS):
            t0 = time.time_ns()
            subprocess.run(["/bin/sh", "-c", f"date +%s%N > '{out}'"], env=env, check=True)
            lat.append((read_ns(out) - t0) / 1e6)
        rows.append(
            dist_row("floor", "floor: bare `sh -c 'date'` spawned from Python", "ms", lat)
        )
        notes["floor_p50"] = median(lat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
