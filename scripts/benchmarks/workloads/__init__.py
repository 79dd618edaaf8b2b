"""The workloads, one module each. Each exposes `<name>_workload(bins, rows, notes)`, which
runs on fresh temporary homes, appends its rows and leaves what the report's notes need in
`notes`; the driver's plan calls them in the order of `settings.WORKLOADS`.

Layout:
- `floor`: a bare `sh -c 'date'` spawned from Python, the least any queue can add.
- `start`: submit to start on an idle lane, through the CLI and the socket API.
- `handover`: exit to next start on one lane with sleepers alive, then on BENCH_LANES lanes.
- `queue`: submit, list, settle and cancel costs, footprint and idle CPU with the queue
  full, then kill -9 and a restart with it.
- `preempt`: an urgent submit to `control/yield`, and exit 75 to the urgent start.
- `sweep`: a short job's cleanup against the number of processes alive.
- `kill9`: a running job across kill -9 of the daemon and `daemon start`.
- `sampler`: the GPU sampler's CPU and `resource list` with sampling on.
- `fleet`: remote submit to start and event latency between two daemons on loopback.
- `dashboard`: the dashboard's load and refresh over TCP and in headless Chromium.
- `history`: submit, start, listing, restart and prune with a large finished history.
- `metrics`: `GET /metrics` against `GET /v1/jobs` with 2,000 queued.
- `startpath`: the start path taken apart by the daemon's and the worker's stamps.
- `peers`: start latency against task-spooler in the same run (and other builds).
- `integrity`: the store check at `daemon serve` against the history size.
- `quiet`: an idle daemon's CPU with 2,000 queued behind one run.
- `listing`: `resource jobs` for a person against `--json` with 2,000 queued.
- `mig56`: 56 fake MIG lanes: list, settle, sampler CPU and hand-over.
- `schedule`: the scheduling simulator's weeks (`examples/schedule_sim.rs`), no daemon.
- `mixed8`: a seeded trace of 1-, 2- and 4-GPU jobs on 8 lanes: hand-over and utilization.
- `runs`: what a home's run directories say (run records, each job's lanes, per-lane
  gaps) and the cleanup row, for handover, sweep, mig56 and mixed8.
- `prefill`: homes filled before they are measured (a history seeded through the API, a
  queue behind one run), for history, integrity, quiet and listing.
"""
