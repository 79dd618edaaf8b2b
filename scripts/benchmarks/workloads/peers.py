"""The peers workload: start latency against task-spooler (and other builds) in one run."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from ..daemon import Home, clean_env, read_ns, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import COMPARE_BUILDS, JOBS
from ..stats import median


def peers_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Start latency on an idle lane through the CLI, against task-spooler's `tsp` on the
    same machine in the same run, one after the other (issue 18 part 4: within 2x). Each
    measures from the submitting command's spawn to the workload's `date`, as the start
    workload does; task-spooler runs its one slot with its own server and socket, writing
    its output file as it does by default. With BENCH_COMPARE, each round also starts one
    job on a daemon of each build named there (an earlier build, say), in turn, so that a
    change is measured against its baseline under the same conditions. Skipped when `tsp` is
    not installed."""
    tsp = shutil.which("tsp")
    if tsp is None:
        rows.append(Row("peer_tsp", "task-spooler start latency", "-", text="tsp not installed"))
        return
    builds = [bins] + COMPARE_BUILDS
    homes = [Home(b, f"peers{i}") for i, b in enumerate(builds)]
    spool = homes[0].work / "tsp"
    spool.mkdir()
    tsp_env = clean_env({"TS_SOCKET": str(spool / "socket"), "TMPDIR": str(spool)})
    try:
        for h in homes:
            h.start()
        specs = [
            h.spec_file(
                "peers",
                h.spec("start latency", f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""),
            )
            for h in homes
        ]
        ours: list[list[float]] = [[] for _ in homes]
        theirs = []
        for i in range(JOBS + 1):
            for h, spec_file, times in zip(homes, specs, ours):
                job = uuid7()
                t0 = time.time_ns()
                h.run_cli_submit(spec_file, job)
                started = wait_for(lambda: read_ns(h.out / f"start.{job}"), 30, 0.0005, "the job")
                h.wait_idle()
                if i > 0:
                    times.append((started - t0) / 1e6)
            mark = homes[0].out / f"tsp.{i}"
            t1 = time.time_ns()
            subprocess.run(
                [tsp, "sh", "-c", f"date +%s%N > '{mark}'"],
                env=tsp_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                check=True,
            )
            spooled = wait_for(lambda: read_ns(mark), 30, 0.0005, "the tsp job")
            # `tsp -w` waits for the last job to end, so that its slot is free again.
            subprocess.run([tsp, "-w"], env=tsp_env, stdout=subprocess.DEVNULL, check=False)
            if i == 0:
                continue  # warm-up: the tsp server starts with the first job
            theirs.append((spooled - t1) / 1e6)
        rows.append(
            dist_row(
                "peer_start_cli",
                "start latency, idle lane, CLI (alternating with task-spooler)",
                "ms",
                ours[0],
            )
        )
        rows.append(
            dist_row("peer_start_tsp", "start latency, task-spooler `tsp` (same run)", "ms", theirs)
        )
        if ours[0] and theirs:
            ratio = median(ours[0]) / median(theirs)
            notes["peer_ratio"] = ratio
            rows.append(
                Row(
                    "peer_ratio",
                    "start latency p50, homebased CLI over task-spooler",
                    "x",
                    p50=ratio,
                    target="≤ 2",
                )
            )
        for n, (build, times) in enumerate(zip(COMPARE_BUILDS, ours[1:]), start=1):
            rows.append(
                dist_row(
                    f"peer_start_compare{n}",
                    f"start latency, CLI of the build in {build} (same rounds)",
                    "ms",
                    times,
                )
            )
            if times and theirs:
                rows.append(
                    Row(
                        f"peer_ratio_compare{n}",
                        f"start latency p50, the build in {build} over task-spooler",
                        "x",
                        p50=median(times) / median(theirs),
                    )
                )
    finally:
        subprocess.run([tsp, "-K"], env=tsp_env, capture_output=True, check=False)
        for h in homes:
            h.close()
