"""The kill -9 workload: a running job across kill -9 of the daemon and `daemon start`."""

from __future__ import annotations

import time
from pathlib import Path

from ..daemon import Home, wait_for
from ..results import Row


def kill9_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """A job sleeping 3 s; kill -9 the daemon; `daemon start` again; what job show says."""
    h = Home(bins, "kill9")
    try:
        h.start()
        job = h.submit_api(h.spec("sleep 3", "sleep 3"))
        wait_for(lambda: h.executing(), 30, 0.005, "the job to run")
        time.sleep(0.5)
        lock_ms = h.kill9()
        start_ms = h.start()
        detail = wait_for(
            lambda: (d := h.job(job))["state"]["state"] in ("succeeded", "failed", "cancelled")
            and d,
            60,
            0.05,
            "the job to end",
        )
        h.wait_idle(timeout=60)
        detail = h.job(job)  # again, now that its cleanup is recorded too
        runs = detail["runs"]
        text = f"{detail['state']['state']}, {len(runs)} run" + ("s" if len(runs) != 1 else "")
        notes["kill9_detail"] = [
            {k: r.get(k) for k in ("status", "process", "started_at", "ended_at", "cleanup")}
            for r in runs
        ]
        rows.append(
            Row(
                "kill9",
                "a running job after daemon kill -9 and `daemon start`",
                "state",
                text=text,
                target="succeeded, one run",
            )
        )
        rows.append(Row("kill9_lock", "↳ kill -9 to `daemon.lock` free", "ms", p50=lock_ms))
        rows.append(
            Row("kill9_start", "↳ then `daemon start` wall time", "ms", p50=start_ms)
        )
    finally:
        h.close()
