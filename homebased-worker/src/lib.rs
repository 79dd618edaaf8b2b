//! `homebased-worker`: one run attempt of one step, from `run.json` to `cleanup.json`
//! (DESIGN "The worker", SPEC sections 4 to 6). Synchronous: one thread (and one that keeps
//! `output.log` within its limit, and only for an adopted container one more that copies its
//! replayed logs), signals through a self-pipe, children reaped in a loop.
//!
//! # Layout
//! - [`cli`]: the command line (`<run-dir> [--lock-fd N] [--adopt]`, or `--standby`).
//! - [`standby`]: a worker started ahead of need, waiting for the daemon to hand it a run.
//! - [`attempt`]: the whole sequence: lock, records, spawn (or adopt the container a vanished
//!   worker left), follow, exit, cleanup.
//! - [`lock`]: `runner.lock`, handed over by the daemon or taken here; held for life.
//! - [`signals`]: SIGTERM/SIGINT as a stop flag, and the wake-up on every signal and child exit.
//! - [`reap`]: reaping the workload and every orphan that comes back to this subreaper.
//! - [`workload`]: starting, following and ending the step: a host command
//!   ([`workload::host`]) or a Docker container whose removal is proven (through the
//!   docker driver of [`homebased_shared::container`]).
//! - [`process_group`]: the workload's process group: signal it, test it for emptiness.
//! - [`stop`]: stop requests (signal or `control/stop`) and stopping the workload on one.
//! - [`cleanup`]: everything after the workload ended (the group, then the sweep by marker
//!   and by ancestry, this worker being the lineage root),
//!   giving the `cleanup.json` outcome.
//! - [`group_cleanup`]: emptying the process group (TERM, grace, KILL, grace, as
//!   [`homebased_shared::process::terminate_group`] orders them); the stop uses it too.
//! - [`records`]: `worker.json`, `exit.json`, `cleanup.json`, each followed by a poke, and
//!   each retried until it lands.
//! - [`reserve`]: disk space held for those records, so that a full disk cannot lose them.
//! - [`output_cap`]: `output.log` kept within `[resource] output_limit`, its middle cut in
//!   place while the workload writes on.
//! - [`log`]: `worker.log`, the worker's own notes and errors.
//! - [`clock`]: the worker's wall-clock readings and record pauses; test builds can set it
//!   ahead or have its pauses move it.
//! - [`title`]: the command line `ps` shows, rewritten by a standby worker to name its run.

pub mod attempt;
pub mod cleanup;
pub mod cli;
pub mod clock;
pub mod group_cleanup;
pub mod lock;
pub mod log;
pub mod output_cap;
pub mod process_group;
pub mod reap;
pub mod records;
pub mod reserve;
pub mod signals;
pub mod standby;
pub mod stop;
pub mod title;
pub mod workload;
