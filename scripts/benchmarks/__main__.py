"""The driver: `python3 -m benchmarks [--bin-dir DIR]` runs the workloads BENCH_ONLY names
(all by default) in a fixed order, prints the table and writes the report (BENCH_OUT). A
workload that fails gives a FAILED row and exit status 1; the others still run."""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from . import __doc__ as package_doc
from .daemon import become_subreaper, log
from .report import machine_facts, note_lines, report_block, write_report
from .results import Row, print_table
from .settings import ONLY, QUICK, ROOT
from .workloads.dashboard import dashboard_workload
from .workloads.fleet import fleet_workload
from .workloads.floor import floor_workload
from .workloads.handover import handover_workload
from .workloads.history import history_workload
from .workloads.integrity import integrity_workload
from .workloads.kill9 import kill9_workload
from .workloads.listing import listing_workload
from .workloads.metrics import metrics_workload
from .workloads.mig56 import mig56_workload
from .workloads.mixed8 import mixed8_workload
from .workloads.peers import peers_workload
from .workloads.preempt import preempt_workload
from .workloads.queue import queue_workload
from .workloads.quiet import quiet_workload
from .workloads.sampler import sampler_workload
from .workloads.schedule import schedule_workload
from .workloads.start import start_workload
from .workloads.startpath import startpath_workload
from .workloads.sweep import sweep_workload


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m benchmarks", description=package_doc.split("\n\n")[0]
    )
    ap.add_argument("--bin-dir", default=str(ROOT / "target" / "release"))
    args = ap.parse_args()
    bins = Path(args.bin_dir).resolve()
    for b in ("homebased", "homebased-worker"):
        if not (bins / b).is_file():
            sys.exit(f"bench: {bins / b} is missing; build it first (scripts/bench does)")
    command = os.environ.get("BENCH_COMMAND") or " ".join(
        [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("BENCH_")]
        + ["PYTHONPATH=scripts python3 -m benchmarks", *sys.argv[1:]]
    )
    out_raw = os.environ.get("BENCH_OUT")
    if out_raw is None:
        out = None if QUICK else ROOT / "docs" / "BENCHMARKS.md"
    else:
        out = Path(out_raw) if out_raw else None

    become_subreaper()
    facts = machine_facts()
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    t_start = time.monotonic()
    rows: list[Row] = []
    notes: dict = {}
    plan = [
        ("floor", floor_workload),
        ("start", start_workload),
        ("handover", handover_workload),
        ("queue", queue_workload),
        ("preempt", preempt_workload),
        ("sweep", sweep_workload),
        ("kill9", kill9_workload),
        ("sampler", sampler_workload),
        ("fleet", fleet_workload),
        ("dashboard", dashboard_workload),
        ("history", history_workload),
        ("metrics", metrics_workload),
        ("startpath", startpath_workload),
        ("peers", peers_workload),
        ("integrity", integrity_workload),
        ("quiet", quiet_workload),
        ("listing", listing_workload),
        ("mig56", mig56_workload),
        ("schedule", schedule_workload),
        ("mixed8", mixed8_workload),
    ]
    failed = []
    for name, fn in plan:
        if ONLY and name not in ONLY:
            continue
        t0 = time.monotonic()
        log(f"{name} ...")
        try:
            fn(bins, rows, notes)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # one broken workload must not hide the others' figures
            log(f"{name} failed: {type(e).__name__}: {e}")
            rows.append(Row(name, f"{name} workload", "-", text=f"FAILED: {e}"))
            failed.append(name)
        log(f"{name} done in {time.monotonic() - t0:.1f} s")
    took = time.monotonic() - t_start
    try:
        facts["load_end"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        pass

    print()
    print(f"homebased benchmarks: {command}")
    print(
        f"{facts.get('nproc')} CPUs ({facts.get('cpu', '?')}), {facts.get('memory', '?')}, "
        f"{facts.get('kernel')}; {started} UTC; {took:.0f} s"
    )
    print()
    print_table(rows)
    for line in note_lines(notes):
        print(f"\n{line}")
    if out is not None:
        write_report(out, report_block(rows, facts, command, started, took, notes))
        print(f"\nwrote {out}")
    else:
        print("\nno report written (quick run, or BENCH_OUT empty); BENCH_OUT=PATH writes one")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
