"""The queue workload: BENCH_QUEUE jobs behind held lanes: submit, list, settle and cancel
costs, footprint and idle CPU, then kill -9 and a restart with the queue full."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
from pathlib import Path

from ..daemon import CLK_TCK, Api, ApiError, Home, alive, cpu_ticks, log, rss_kib, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import (
    CANCEL_SAMPLE,
    FILL_BUDGET,
    FILL_CONNECTIONS,
    IDLE_SECONDS,
    LANES,
    LIST_RUNS,
    QUEUE,
    SAMPLE,
)
from ..stats import fmt, median


def queue_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """All lanes held; BENCH_QUEUE submits (CLI at both ends, the API in between); list cost,
    footprint and idle CPU with the queue full; then kill -9 and a restart with it."""
    h = Home(bins, "queue", lanes=LANES)
    try:
        h.start()
        for _ in range(LANES):
            h.submit_api(h.spec("hold", h.hold_script()))
        wait_for(lambda: len(h.executing()) == LANES, 60, 0.01, "every holder to run")
        spec = h.spec("queued", "true")
        spec_file = h.spec_file("queued", spec)

        cli_jobs: list[str] = []  # in submission order: the queue's order

        def cli_batch(n: int) -> list[float]:
            out = []
            for _ in range(n):
                job = uuid7()
                cli_jobs.append(job)
                t0 = time.perf_counter_ns()
                h.run_cli_submit(spec_file, job)
                out.append((time.perf_counter_ns() - t0) / 1e6)
            return out

        def api_batch(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter_ns()
                h.submit_api(spec)
                out.append((time.perf_counter_ns() - t0) / 1e6)
            return out

        def list_cost(runs: int) -> tuple[list[float], list[float], int]:
            """The CLI's wall time with its output going to a file (`resource jobs --json >
            FILE`), read and counted afterwards: at 100,000 queued that is 49 to 177 MB, and a
            Python pipe decoding it as text took longer than the CLI itself. `GET /v1/jobs`
            is timed with Python's own read and parse."""
            cli, api = [], []
            count = 0
            listed = h.work / "listed.json"
            for _ in range(runs):
                with open(listed, "wb") as out:
                    t0 = time.perf_counter_ns()
                    r = subprocess.run(
                        [h.hb_bin, "--home", str(h.home), "--json", "resource", "jobs"],
                        cwd=h.work,
                        env=h.env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.PIPE,
                        timeout=120,
                    )
                    cli.append((time.perf_counter_ns() - t0) / 1e6)
                if r.returncode != 0:
                    raise RuntimeError(f"resource jobs exited {r.returncode}: {r.stderr[:400]!r}")
                with open(listed, "rb") as f:
                    count = len(json.load(f)["jobs"])
                t0 = time.perf_counter_ns()
                h.api.get("/v1/jobs")
                api.append((time.perf_counter_ns() - t0) / 1e6)
            return cli, api, count

        def fill(n: int, stop_at: float) -> int:
            """`n` untimed API submits from FILL_CONNECTIONS threads, each on its own
            connection: the core serves what queued up meanwhile before its scheduling pass,
            so concurrent submits share passes. Stops at `stop_at` (monotonic)."""
            if n <= 0:
                return 0
            done = [0] * FILL_CONNECTIONS
            errors: list[BaseException] = []

            def worker(k: int) -> None:
                api = Api(h.sock)
                try:
                    for _ in range(k, n, FILL_CONNECTIONS):
                        if errors or time.monotonic() > stop_at:
                            return
                        job = uuid7()
                        api.post("/v1/jobs", h.body(job, spec))
                        done[k] += 1
                except BaseException as e:  # reported below
                    errors.append(e)
                finally:
                    api.close()

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(FILL_CONNECTIONS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return sum(done)

        queued = 0
        cli_first = cli_batch(SAMPLE)
        api_first = api_batch(SAMPLE)
        queued += 2 * SAMPLE
        mark_2000 = {}
        t_fill = time.perf_counter()
        stop_at = time.monotonic() + FILL_BUDGET
        filled = 0
        if QUEUE >= 2000 + 2 * SAMPLE:
            filled += fill(2000 - queued, stop_at)
            queued += filled
            if queued == 2000:
                c, a, n = list_cost(LIST_RUNS)
                mark_2000.update(list_cli=c, list_api=a, n=n, rss=rss_kib(h.pid))
        more = fill(QUEUE - 2 * SAMPLE - queued, stop_at)
        filled += more
        queued += more
        fill_s = time.perf_counter() - t_fill
        if time.monotonic() > stop_at:
            log(f"fill budget of {FILL_BUDGET} s spent at {queued} queued")
        before_last = queued
        cli_last = cli_batch(SAMPLE)
        api_last = api_batch(SAMPLE)
        queued += 2 * SAMPLE
        log(f"queue filled: {queued} submitted, bulk API fill {fill_s:.1f} s")

        list_cli, list_api, listed = list_cost(LIST_RUNS)
        notes["listed"] = listed
        # A scheduling pass with the queue full: `POST /v1/internal/settle` runs the timers and
        # one pass (issue 18: bounded by what a decision can reach, not by the queue).
        settle_ms = []
        for _ in range(LIST_RUNS):
            t0 = time.perf_counter_ns()
            h.api.post("/v1/internal/settle", {})
            settle_ms.append((time.perf_counter_ns() - t0) / 1e6)
        if listed != queued + LANES:
            log(f"resource jobs listed {listed} jobs, expected {queued + LANES}")

        # The end of a job near the head of the queue against one at its tail (issue 18):
        # with dense positions every later job of the level shifted when one ended.
        # The CLI's submits are the first SAMPLE queued and SAMPLE a hundred from the back;
        # no listing is read for this, so the footprint below is the listing's own.
        cancel_ms: dict[str, list[float]] = {"head": [], "tail": []}
        if SAMPLE > 2 * CANCEL_SAMPLE and queued > 2 * SAMPLE:
            # The 2nd to (CANCEL_SAMPLE+1)th queued job, then the last CANCEL_SAMPLE the CLI
            # submitted (the API's SAMPLE after them still queued behind).
            for end, picked in (
                ("head", cli_jobs[1 : 1 + CANCEL_SAMPLE]),
                ("tail", cli_jobs[-CANCEL_SAMPLE:]),
            ):
                for job in picked:
                    t0 = time.perf_counter_ns()
                    h.api.post(f"/v1/jobs/{job}/cancel", {"operation_id": uuid7()})
                    cancel_ms[end].append((time.perf_counter_ns() - t0) / 1e6)
            queued -= 2 * CANCEL_SAMPLE
            queued_then = queued + 2 * CANCEL_SAMPLE
            for end, where in (
                ("head", "2nd to 6th"),
                ("tail", f"{queued_then - SAMPLE - 4:,}th to {queued_then - SAMPLE:,}th"),
            ):
                rows.append(
                    dist_row(
                        f"cancel_{end}",
                        f"cancel (socket API) near the {end} ({where} queued), "
                        f"{queued_then:,} queued",
                        "ms",
                        cancel_ms[end],
                        "head ≈ tail",
                        tails=False,
                    )
                )

        rows.append(
            dist_row(
                "settle_full",
                f"settle (timers + one scheduling pass), {queued:,} queued + {LANES} active",
                "ms",
                settle_ms,
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "submit_cli_first",
                f"submit via CLI, first {SAMPLE} (queue 0-{SAMPLE})",
                "ms",
                cli_first,
                "< 6 ms",
            )
        )
        rows.append(
            dist_row(
                "submit_cli_last",
                f"submit via CLI, at {before_last:,}-{before_last + SAMPLE:,} queued",
                "ms",
                cli_last,
                "< 6 ms, ≤ 1.2× first",
            )
        )
        rows.append(
            dist_row(
                "submit_api_first",
                f"submit via API, first {SAMPLE} (queue {SAMPLE}-{2 * SAMPLE})",
                "ms",
                api_first,
            )
        )
        rows.append(
            dist_row(
                "submit_api_last",
                f"submit via API, last {SAMPLE} (to {queued:,} queued)",
                "ms",
                api_last,
                "≤ 1.2× first",
            )
        )
        ratio_cli = median(cli_last) / median(cli_first)
        ratio_api = median(api_last) / median(api_first) if api_first else None
        rows.append(
            Row(
                "submit_ratio",
                "submit cost growth, last / first (CLI; API)",
                "x",
                target="≤ 1.2",
                text=f"{ratio_cli:.2f}; {fmt(ratio_api)}",
            )
        )
        if filled:
            rows.append(
                Row(
                    "fill_rate",
                    f"bulk API fill, {FILL_CONNECTIONS} concurrent connections (untimed each)",
                    "jobs/s",
                    p50=filled / fill_s,
                    n=filled,
                )
            )
        if mark_2000:
            rows.append(
                dist_row(
                    "list_2000",
                    f"`resource jobs --json` (CLI), 2,000 queued + {LANES} active",
                    "ms",
                    mark_2000["list_cli"],
                    tails=False,
                )
            )
        rows.append(
            dist_row(
                "list_cli",
                f"`resource jobs --json` (CLI), {queued:,} queued + {LANES} active",
                "ms",
                list_cli,
                # Issue 8's target at 10,000 queued, issue 18's at 100,000.
                "< 50 ms" if queued <= 10_000 else "< 250 ms",
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "list_api",
                f"GET /v1/jobs (socket API), {queued:,} queued + {LANES} active",
                "ms",
                list_api,
                tails=False,
            )
        )

        # Footprint with the queue full and every lane held.
        h.api.close()
        time.sleep(1.0)
        if mark_2000.get("rss"):
            rows.append(
                Row(
                    "rss_2000",
                    "daemon RSS, 2,000 queued",
                    "MB",
                    p50=mark_2000["rss"] / 1024,
                )
            )
        rss = rss_kib(h.pid)
        rows.append(
            Row(
                "rss",
                f"daemon RSS, {queued:,} queued, {LANES} lanes busy",
                "MB",
                p50=rss / 1024 if rss else None,
                target="< 20 MB" if queued <= 10_000 else "< 60 MB",
            )
        )
        worker_rss = [r for r in (rss_kib(pid) for pid, _ in h.workers()) if r]
        if worker_rss:
            rows.append(
                Row(
                    "worker_rss",
                    "worker RSS (each busy lane's homebased-worker)",
                    "MB",
                    p50=median(worker_rss) / 1024,
                    n=len(worker_rss),
                )
            )
        worker_pids = [pid for pid, _ in h.workers()]
        c0 = cpu_ticks(h.pid)
        w0 = sum(cpu_ticks(p) for p in worker_pids if alive(p))
        time.sleep(IDLE_SECONDS)
        c1 = cpu_ticks(h.pid)
        w1 = sum(cpu_ticks(p) for p in worker_pids if alive(p))
        tick_ms = 1000 / CLK_TCK
        rows.append(
            Row(
                "idle_cpu",
                f"daemon CPU over {IDLE_SECONDS} idle s, queue full",
                "ms",
                p50=(c1 - c0) * tick_ms,
                target="0 measurable",
            )
        )
        rows.append(
            Row(
                "worker_idle_cpu",
                f"all {len(worker_pids)} workers' CPU over the same {IDLE_SECONDS} s",
                "ms",
                p50=(w1 - w0) * tick_ms,
            )
        )
        notes["tick_ms"] = tick_ms

        # kill -9 with the queue full and every lane held, then `daemon serve` again.
        lock_ms = h.kill9()
        t0 = time.perf_counter_ns()
        h.serve_foreground()
        probe = Api(h.sock, timeout=60)

        def status_ok():
            if h.serve is not None and h.serve.poll() is not None:
                raise RuntimeError(
                    f"the restarted daemon exited {h.serve.returncode}: "
                    + (h.work / "serve.log").read_text()[-400:]
                )
            try:
                probe.get("/v1/status", fresh=True)
                return True
            except (OSError, ApiError, http.client.HTTPException):
                return False

        wait_for(status_ok, 120, 0.001, "the restarted daemon's socket")
        sock_ms = (time.perf_counter_ns() - t0) / 1e6

        def resources_ok():
            try:
                return probe.get("/v1/resources", fresh=True)["resources"]
            except (OSError, ApiError, http.client.HTTPException):
                return None

        res = wait_for(resources_ok, 120, 0.001, "the restarted daemon's resource list")
        res_ms = (time.perf_counter_ns() - t0) / 1e6
        running = sum(
            1 for r in res if r["run"] and r["run"]["phase"]["phase"] == "executing"
        )
        rows.append(
            Row(
                "restart_lock",
                f"kill -9 of the daemon ({queued:,} queued) to `daemon.lock` free",
                "ms",
                p50=lock_ms,
            )
        )
        rows.append(
            Row(
                "restart",
                f"↳ then `daemon serve` to a working socket ({LANES} live runs)",
                "ms",
                p50=sock_ms,
            )
        )
        rows.append(
            Row(
                "restart_resources",
                "↳ to GET /v1/resources answered",
                "ms",
                p50=res_ms,
            )
        )
        still = len(h.workers())
        rows.append(
            Row(
                "restart_runs",
                "↳ live runs after that restart (executing / workers alive)",
                "runs",
                text=f"{running} / {still} of {LANES}",
                target=f"{LANES} / {LANES}",
            )
        )
        notes["queued"] = queued
        # Throw the home away without cancelling 10,000 jobs one by one.
        h.stop(cancel=False)
    finally:
        h.close()
