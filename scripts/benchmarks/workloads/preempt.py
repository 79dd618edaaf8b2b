"""The preemption workload: an urgent job preempting a low `yield` job on one lane."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from ..daemon import Api, Home, read_ns, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import PREEMPT


def preempt_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """One lane running a low `yield` job; a high job arrives. Measured: urgent submit to
    `control/yield` existing, and the low workload's exit 75 to the urgent workload's start."""
    h = Home(bins, "preempt")
    try:
        h.start()
        low_script = (
            '[ "$HOMEBASED_RESUME" = 1 ] && exit 0; '
            f": > '{h.out}/ready.'\"$HOMEBASED_JOB_ID\"; "
            'while [ ! -e "$HOMEBASED_YIELD_FILE" ]; do sleep 0.01; done; '
            f"date +%s%N > '{h.out}/yexit.'\"$HOMEBASED_JOB_ID\"; exit 75"
        )
        low_spec = h.spec("low yield", low_script, priority="low", mode="yield")
        high_spec = h.spec(
            "urgent", f"date +%s%N > '{h.out}/ustart.'\"$HOMEBASED_JOB_ID\"", priority="high"
        )
        high_file = h.spec_file("urgent", high_spec)
        to_yield = {"cli": [], "api": []}
        exit_to_start = []
        outcomes = []
        for i in range(PREEMPT + 1):  # round 0 is a warm-up
            path = "cli" if i % 2 == 0 else "api"
            low = h.submit_api(low_spec)
            wait_for(lambda: (h.out / f"ready.{low}").exists(), 30, 0.001, "the low job")
            run = wait_for(
                lambda: next((r for r in h.executing() if r["job"] == low), None),
                30,
                0.002,
                "the low run to execute",
            )
            yield_file = h.task_dir(run["task"]) / "control" / "yield"
            high = uuid7()
            err: list[BaseException] = []
            t0 = time.time_ns()
            if path == "cli":
                proc = subprocess.Popen(
                    h.submit_cli_argv(high_file, high),
                    cwd=h.work,
                    env=h.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                waiter = None
            else:
                proc = None
                submitter = Api(h.sock)

                def submit() -> None:
                    try:
                        submitter.post("/v1/jobs", h.body(high, high_spec))
                    except BaseException as e:  # reported below
                        err.append(e)
                    finally:
                        submitter.close()

                waiter = threading.Thread(target=submit)
                waiter.start()
            deadline = time.monotonic() + 30
            while not yield_file.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("no yield file within 30 s")
                time.sleep(0.0002)
            t_yield = time.time_ns()
            if proc is not None:
                proc.wait(timeout=60)
            if waiter is not None:
                waiter.join(timeout=60)
            if err:
                raise err[0]
            y = wait_for(lambda: read_ns(h.out / f"yexit.{low}"), 30, 0.001, "exit 75")
            u = wait_for(lambda: read_ns(h.out / f"ustart.{high}"), 30, 0.001, "urgent")
            wait_for(
                lambda: h.job(low)["state"]["state"] in ("succeeded", "failed", "cancelled"),
                60,
                0.005,
                "the low job to resume and finish",
            )
            h.wait_idle()
            if i == 0:
                continue
            to_yield[path].append((t_yield - t0) / 1e6)
            exit_to_start.append((u - y) / 1e6)
            detail = h.job(low)
            outcomes.append(
                (detail["state"]["state"], [r["status"] for r in detail["runs"]])
            )
        rows.append(
            dist_row(
                "preempt_cli",
                "preemption: urgent submit (CLI) to control/yield",
                "ms",
                to_yield["cli"],
                "< 20 ms",
            )
        )
        rows.append(
            dist_row(
                "preempt_api",
                "preemption: urgent submit (API) to control/yield",
                "ms",
                to_yield["api"],
                "< 20 ms",
            )
        )
        rows.append(
            dist_row(
                "preempt_handover",
                "preemption: low exits 75 to urgent start",
                "ms",
                exit_to_start,
                "< 100 ms (hand-over)",
            )
        )
        expected = ("succeeded", ["preempted", "succeeded"])
        odd = [o for o in outcomes if o != expected]
        notes["preempt_odd"] = odd
    finally:
        h.close()
