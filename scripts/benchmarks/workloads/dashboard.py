"""The dashboard workload: its first load and its refresh over TCP, and in headless Chromium
where it is installed."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from ..daemon import Home, wait_for
from ..results import Row, dist_row
from ..settings import DASHBOARD_QUEUE, LANES, LIST_RUNS, TMPDIR


def dashboard_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """The dashboard's cost with BENCH_DASHBOARD_QUEUE jobs queued (BENCH_LANES lanes held):
    its first load (the page's files and its first reads) and one refresh (what the page asks
    for every second) over the TCP listener, bytes and time; then, where Chromium and
    chromedriver are installed, the same in a headless Chromium on loopback: navigate to a
    rendered queue, and the page's own measure of one refresh (reads, parsing, rendering)."""
    h = Home(bins, "dashboard", lanes=LANES)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    h.env["HOMEBASED_WEB_LISTEN"] = f"127.0.0.1:{port}"
    try:
        h.start()
        for i in range(LANES):
            h.submit_api(h.spec(f"hold-{i}", "sleep 100000"))
        for i in range(DASHBOARD_QUEUE - LANES):
            h.submit_api(h.spec(f"queued-{i}", "true"))
        wait_for(
            lambda: sum(
                1 for r in h.cli_json("resource", "list")["resources"] if r["run"]
            )
            == LANES,
            60,
            0.05,
            "every lane held",
        )
        files = ["/", "/dashboard/app.js", "/dashboard/style.css"]
        first_reads = [
            "/v1/resources",
            "/v1/jobs",
            "/v1/status",
            "/v1/fleet/identity",
            "/v1/fleet/machines",
        ]
        tick = ["/v1/resources", "/v1/jobs"]

        tags: dict[str, str] = {}

        def fetch(conn, path: str, revalidate: bool = False) -> int:
            headers = {"Host": f"127.0.0.1:{port}"}
            if revalidate and path in tags:
                headers["If-None-Match"] = tags[path]
            conn.request("GET", path, headers=headers)
            r = conn.getresponse()
            body = r.read()
            if r.status not in (200, 304):
                raise RuntimeError(f"GET {path}: HTTP {r.status}")
            if r.getheader("ETag"):
                tags[path] = r.getheader("ETag")
            return len(body)

        page_bytes = 0
        load_ms: list[float] = []
        load_bytes = 0
        for _ in range(LIST_RUNS):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            t0 = time.perf_counter_ns()
            page_bytes = sum(fetch(conn, p) for p in files)
            load_bytes = page_bytes + sum(fetch(conn, p) for p in first_reads)
            load_ms.append((time.perf_counter_ns() - t0) / 1e6)
            conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        tick_ms: list[float] = []
        tick_bytes = 0
        for _ in range(20):
            t0 = time.perf_counter_ns()
            tick_bytes = sum(fetch(conn, p) for p in tick)
            tick_ms.append((time.perf_counter_ns() - t0) / 1e6)
        # What the browser does: revalidate, and get 304 with no body while nothing changed.
        same_ms: list[float] = []
        same_bytes = 0
        for _ in range(20):
            t0 = time.perf_counter_ns()
            same_bytes = sum(fetch(conn, p, revalidate=True) for p in tick)
            same_ms.append((time.perf_counter_ns() - t0) / 1e6)
        conn.close()
        n = DASHBOARD_QUEUE
        rows.append(
            Row(
                "dash_page",
                "dashboard page files (HTML + JS + CSS, embedded), uncompressed",
                "KiB",
                p50=page_bytes / 1024,
            )
        )
        rows.append(
            dist_row(
                "dash_load_http",
                f"dashboard first load over TCP (files + first reads, {load_bytes / 1024:.0f} KiB), {n} jobs",
                "ms",
                load_ms,
                tails=False,
            )
        )
        rows.append(
            dist_row(
                "dash_tick_http",
                f"one dashboard refresh over TCP (resources + jobs, {tick_bytes / 1024:.0f} KiB), {n} jobs",
                "ms",
                tick_ms,
            )
        )
        # In the browser, a change every tick (one more job), so every refresh re-renders.
        rows.append(
            dist_row(
                "dash_tick_same",
                f"one dashboard refresh over TCP, nothing changed (304, {same_bytes} B of body), {n} jobs",
                "ms",
                same_ms,
            )
        )
        browser_rows(rows, f"http://127.0.0.1:{port}/", n, lambda: h.submit_api(h.spec("more", "true")))
    finally:
        h.close()


def browser_rows(rows: list[Row], url: str, n: int, change) -> None:
    """The dashboard in a headless Chromium through chromedriver's W3C WebDriver (loopback
    only; every other host goes to a dead proxy). Absent browser: a row that says so."""
    chromium = next(
        (p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if Path(p).is_file()),
        None,
    )
    driver_bin = shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        rows.append(
            Row("dash_browser", "dashboard in Chromium", "-", text="not measured: no chromium/chromedriver")
        )
        return
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dport = s.getsockname()[1]
    profile = tempfile.mkdtemp(prefix="hb-bench-chromium-", dir=TMPDIR)
    driver = subprocess.Popen(
        [driver_bin, f"--port={dport}", "--allowed-ips=127.0.0.1"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def wd(method: str, path: str, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{dport}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with opener.open(req, timeout=120) as r:
            return json.loads(r.read())["value"]

    try:
        wait_for(lambda: _answers(wd), 30, 0.05, "chromedriver")
        args = [
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--proxy-server=http://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
            "--window-size=1280,900",
            f"--user-data-dir={profile}",
        ]
        if os.geteuid() == 0:
            args.append("--no-sandbox")
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": chromium, "args": args}}}}
        session = wd("POST", "/session", caps)["sessionId"]
        base = f"/session/{session}"

        def script(js: str):
            return wd("POST", f"{base}/execute/sync", {"script": js, "args": []})

        t0 = time.perf_counter_ns()
        wd("POST", f"{base}/url", {"url": url})
        wait_for(
            lambda: script("return document.querySelectorAll('tr[data-job]').length;") >= n,
            120,
            0.01,
            "the queue rendered",
        )
        rendered_ms = (time.perf_counter_ns() - t0) / 1e6
        # The page's own measure of each refresh, one value per tick: 20 ticks with nothing
        # changed, then 20 with one more job before each.
        def measure(count: int, each) -> list[float]:
            got: list[float] = []
            last = None
            deadline = time.monotonic() + 120
            while len(got) < count and time.monotonic() < deadline:
                m = script(
                    "const m = performance.getEntriesByName('homebased-refresh');"
                    "return m.length ? [m[0].startTime, m[0].duration] : null;"
                )
                if m and m[0] != last:
                    if last is not None:
                        got.append(m[1])
                    last = m[0]
                    each()
                time.sleep(0.05)
            return got

        idle = measure(20, lambda: None)
        ticks = measure(20, change)
        wd("DELETE", base)
        rows.append(
            Row(
                "dash_browser_load",
                f"dashboard in headless Chromium: navigate to {n} rendered queue rows",
                "ms",
                p50=rendered_ms,
                n=1,
            )
        )
        rows.append(
            dist_row(
                "dash_browser_idle",
                f"one refresh in the page, nothing changed (reads revalidated), {n} jobs",
                "ms",
                idle,
            )
        )
        rows.append(
            dist_row(
                "dash_browser_tick",
                f"one refresh in the page with a change each tick (reads, parse, render), {n}+ jobs",
                "ms",
                ticks,
            )
        )
    finally:
        driver.kill()
        driver.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


def _answers(wd) -> bool:
    try:
        return bool(wd("GET", "/status").get("ready"))
    except OSError:
        return False
