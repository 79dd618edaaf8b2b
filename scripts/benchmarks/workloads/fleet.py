"""The Fleet workload: two daemons on loopback, remote submit to start and event latency."""

from __future__ import annotations

import datetime
import json
import socket
import time
import uuid
from pathlib import Path

from ..daemon import Home, read_ns, uuid7, wait_for
from ..results import Row, dist_row
from ..settings import FLEET_JOBS


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fleet_workload(bins: Path, rows: list[Row], notes: dict) -> None:
    """Fleet on loopback: an origin without lanes and an authority with one, both with the
    token. Remote submit to start: the origin's socket API (spec `machine` = the authority)
    to the workload's `date +%s%N` on the authority. Event latency: the authority's
    JOB_SUCCEEDED (`at`, ms) to its line in the origin's thread inbox (polled every 0.5 ms),
    with the origin's pull caught up (a long poll waiting on the authority)."""
    token = "bench-fleet-token-" + uuid.uuid4().hex
    origin, authority = Home(bins, "fleet-origin"), Home(bins, "fleet-authority")
    try:
        ports = {"origin": free_port(), "authority": free_port()}
        for h, name, peer in (
            (authority, "authority", None),
            (origin, "origin", "authority"),
        ):
            text = (
                f'[web]\nlisten = "127.0.0.1:{ports[name]}"\n[fleet]\nenabled = true\n'
                f'machine_name = "bench-{name}"\ntoken = "{token}"\n'
            )
            if peer:
                text += f'[[fleet.machines]]\naddress = "http://127.0.0.1:{ports[peer]}"\n'
            config = h.work / "config.toml"
            config.write_text(text)
            config.chmod(0o600)
            h.env["HOMEBASED_CONFIG"] = str(config)
            h.start()
        wait_for(
            lambda: any(
                m["name"] == "bench-authority" and m["state"] == "up"
                for m in origin.cli_json("fleet", "machines")["machines"]
            ),
            30,
            0.05,
            "the authority to be up on the origin",
        )
        script = f"date +%s%N > '{authority.out}/start.'\"$HOMEBASED_JOB_ID\""
        spec = origin.spec("fleet latency", script)
        spec["cwd"] = str(authority.work)
        spec["machine"] = "bench-authority"
        inbox = origin.home / "threads" / f"{origin.thread}.jsonl"

        def delivered_at(job: str) -> int | None:
            try:
                text = inbox.read_text()
            except FileNotFoundError:
                return None
            if job not in text:
                return None
            seen = time.time_ns()
            for line in text.splitlines():
                if job in line and "JOB_SUCCEEDED" in line:
                    event = json.loads(line.split(" ", 1)[1] if line.startswith("HOMEBASED_EVENT") else line)
                    at = datetime.datetime.fromisoformat(event["at"].replace("Z", "+00:00"))
                    return seen - int(at.timestamp() * 1000) * 1_000_000
            return None

        # The same job submitted on the authority's own socket, interleaved: the baseline.
        local_spec = {k: v for k, v in spec.items() if k != "machine"}
        starts, local_starts, events = [], [], []
        for i in range(FLEET_JOBS + 1):  # the first one warms up, not counted
            job = uuid7()
            t0 = time.time_ns()
            origin.submit_api(spec, job, fresh=True)
            started = wait_for(
                lambda: read_ns(authority.out / f"start.{job}"), 30, 0.0005, "the remote job to start"
            )
            lag = wait_for(lambda: delivered_at(job), 30, 0.0005, "the event on the origin")
            authority.wait_idle()
            local = uuid7()
            t1 = time.time_ns()
            authority.submit_api(local_spec, local, fresh=True)
            local_started = wait_for(
                lambda: read_ns(authority.out / f"start.{local}"), 30, 0.0005, "the local job to start"
            )
            authority.wait_idle()
            if i > 0:
                starts.append((started - t0) / 1e6)
                local_starts.append((local_started - t1) / 1e6)
                events.append(lag / 1e6)
        rows.append(
            dist_row(
                "fleet_start",
                "remote submit to start, origin socket API to the authority's workload",
                "ms",
                starts,
            )
        )
        rows.append(
            dist_row(
                "fleet_start_local",
                "the same job submitted on the authority's own socket (interleaved baseline)",
                "ms",
                local_starts,
            )
        )
        rows.append(
            dist_row(
                "fleet_event",
                "event latency, authority's JOB_SUCCEEDED to the origin's inbox",
                "ms",
                events,
                "< 1000 ms",
            )
        )
    finally:
        origin.close()
        authority.close()
