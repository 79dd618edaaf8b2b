//! homebased: a per-machine GPU job queue. This crate is the daemon and its CLI.
//!
//! # Layout
//! - [`cli`]: the `homebased` command line; talks to the daemon over the Unix socket.
//! - [`client`]: the typed client of the API, over the Unix socket or TCP.
//! - [`daemon`]: `daemon serve`: the lock, start-up, detection, listeners, shutdown.
//! - [`api`]: the HTTP/JSON routes, shared by the socket and the TCP listener.
//! - [`core`]: the single owner of the store; one file per verb.
//! - [`clock`]: the daemon's one clock; test builds can move it ahead.
//! - [`delivery`]: the per-job, ordered, at-least-once event delivery to the thread's sink.
//! - [`store`]: SQLite, one file per table; the only code that knows SQL.
//! - [`lifecycle`]: the pure run lifecycle: a run's phase, what is observed, what follows.
//! - [`scheduler`]: the pure decision: which jobs start where, which runs to stop.
//! - [`placement`]: the pure placement rule of `job move`.
//! - [`fleet`]: the Fleet peer directory, its probes and the token; forwarding's targets.
//! - [`detection`]: the pure reading of `nvidia-smi -L` and the resource plan.
//! - [`history`]: the pure retention rule: which finished jobs may be removed.
//! - [`supervisor`]: launching and watching `homebased-worker` processes.
//! - [`mcp`]: `homebased mcp`: the Model Context Protocol server for coding agents, on stdio.
//! - [`metrics`]: `GET /metrics`: the counters kept since start and the pure Prometheus text.
//! - [`slurm`]: `homebased slurm`: a job spec run on Slurm (`sbatch`), its runs under
//!   `homebased-worker` with the same run directory contract; no daemon.
//! - [`sampler`]: the pure reading of what runs on each GPU (`nvidia-smi` queries) and whose
//!   it is; the sampling thread that runs the queries is in [`daemon`].

pub mod api;
pub mod cli;
pub mod client;
pub mod clock;
pub mod core;
pub mod daemon;
pub mod delivery;
pub mod detection;
pub mod fleet;
pub mod history;
pub mod lifecycle;
pub mod mcp;
pub mod metrics;
pub mod placement;
pub mod sampler;
pub mod scheduler;
pub mod slurm;
pub mod store;
pub mod supervisor;
