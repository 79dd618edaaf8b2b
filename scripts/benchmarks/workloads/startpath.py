"""The start-path workload (issue 18): one start taken apart by its stamps."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..daemon import Home, read_ns, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import STARTPATH
from ..stats import median


def startpath_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The start path taken apart (issue 18): BENCH_STARTPATH starts on an idle lane through
    the CLI and as many through the socket API, each part's p50 from the stamps the daemon
    keeps in `run.json` and the worker in `worker.json` (microseconds, CLOCK_REALTIME)."""
    h = Home(bins, "startpath")
    try:
        h.start()
        script = f"date +%s%N > '{h.out}/start.'\"$HOMEBASED_JOB_ID\""
        spec = h.spec("start path", script)
        spec_file = h.spec_file("startpath", spec)
        seen: set[str] = set()
        parts: dict[str, dict[str, list[float]]] = {"cli": {}, "api": {}}

        def new_run() -> tuple[dict, dict] | None:
            for d in (h.home / "tasks").iterdir():
                if d.name in seen:
                    continue
                try:
                    run = json.loads((d / "run.json").read_text())
                    worker = json.loads((d / "worker.json").read_text())
                except (FileNotFoundError, json.JSONDecodeError):
                    continue
                if worker.get("stamps") is None:
                    continue  # the record naming the child has not landed yet
                seen.add(d.name)
                return run, worker
            return None

        # Warm-up: one of each, not counted (page cache, first connection).
        for i, path in enumerate(("cli", "api", *(["cli", "api"] * STARTPATH))):
            job = uuid7()
            start_file = h.out / f"start.{job}"
            t0 = time.time_ns() // 1000
            if path == "cli":
                h.run_cli_submit(spec_file, job)
            else:
                h.submit_api(spec, job, fresh=True)
            started = wait_for(lambda: read_ns(start_file), 30, 0.0005, "the job to start")
            found = wait_for(new_run, 30, 0.0005, "the run's worker.json with its stamps")
            h.wait_idle()
            if i < 2:
                continue
            run, worker = found
            d, w = run.get("stamps") or {}, worker["stamps"]
            if not d or w.get("spawned") is None:
                raise RuntimeError(f"run {run['task']} has no daemon stamps: {d} {w}")
            marks = [
                ("request", t0),
                ("decided", d["decided"]),
                ("reserved", d["reserved"]),
                ("spawned", w["spawned"]),
                ("main", w["main"]),
                ("run_read", w["run_read"]),
                ("reserve", w["reserve"]),
                ("recorded", w["recorded"]),
                ("workload", w["workload"]),
                ("date", started // 1000),
            ]
            for (a, ta), (b, tb) in zip(marks, marks[1:]):
                parts[path].setdefault(f"{a}>{b}", []).append((tb - ta) / 1000)
            parts[path].setdefault("total", []).append((started // 1000 - t0) / 1000)

        labels = [
            ("request>decided", "request to the pass's decision: process start, connect, "
             "submit (validation, commit: one WAL fsync), reply, pass"),
            ("decided>reserved", "the `launching` commit (one WAL fsync)"),
            ("reserved>spawned", "run directory, `run.json` (write, fsync, rename), "
             "`runner.lock` locked"),
            ("spawned>main", "hand-over to the standby worker (or fork and exec of a fresh "
             "`homebased-worker`), to its first stamp"),
            ("main>run_read", "worker: lock adopted, session, `run.json` read"),
            ("run_read>reserve", "worker: records set up (a reserve an earlier worker left is "
             "taken over; a new one is made once the workload runs)"),
            ("reserve>recorded", "worker: first `worker.json` (write, fsync, rename, fsync "
             "folder, which also names `run.json` durably)"),
            ("recorded>workload", "worker: subreaper, pending-stop check"),
            ("workload>date", "workload: folders, `output.log`, environment, fork, exec "
             "`sh`, `sh` runs `date`"),
            ("total", "total: submit to the workload's `date`"),
        ]
        for path, title in (("cli", "CLI"), ("api", "socket API")):
            for key, label in labels:
                if path == "api" and key not in ("request>decided", "total"):
                    continue
                values = parts[path].get(key, [])
                rows.append(
                    dist_row(f"startpath_{path}_{key}", f"start path ({title}): {label}",
                             "ms", values, tails=False)
                )
        cli = median(parts["cli"].get("request>decided", []))
        api = median(parts["api"].get("request>decided", []))
        if cli is not None and api is not None:
            notes["startpath_cli_own"] = cli - api
    finally:
        h.close()
