"""Benchmarks for homebased (issue 8, DESIGN.md "Benchmarks").

Run through `scripts/bench`, which builds the release binaries first. Every workload runs on
a fresh temporary home with fake lanes (no GPU needed), stops everything it started, and
reports medians: the machines this runs on are shared and noisy. Nothing here asserts a speed.

Python 3.11 standard library only. Without `scripts/bench`, from the repository root:
`PYTHONPATH=scripts python3 -m benchmarks --bin-dir target/release`. The settings (BENCH_*
environment variables) are listed in `settings.py`.

Layout:
- `__main__`: the driver: arguments, the workloads BENCH_ONLY picks, the table, the report.
- `settings`: every BENCH_* setting and the counts taken from them, read once at import.
- `daemon`: a temporary home with its daemon (`Home`), the socket API (`Api`, `ApiError`),
  `uuid7`, unrelated sleepers, and the process and stamp helpers (`/proc`, `date +%s%N`).
- `stats`: percentiles, medians and the number format of the tables.
- `results`: a row of the table (`Row`, `dist_row`), the other queues' figures beside ours,
  and the table printed and as markdown.
- `report`: the block the driver writes into docs/BENCHMARKS.md, with the definitions.
- `workloads`: one module per workload, each with one `<name>_workload(bins, rows, notes)`.
"""
