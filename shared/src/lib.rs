//! Types and contracts shared by the `homebased` daemon/CLI and `homebased-worker`.
//!
//! # Layout
//! - [`error`]: the error codes of SPEC section 10 and their exit and HTTP statuses.
//! - [`event`]: event kinds and the `HOMEBASED_EVENT` line.
//! - [`ids`]: typed full UUIDs (jobs, tasks, resources, attentions, threads, operations).
//! - [`queue`]: levels, preemption modes, stop causes, job states, run statuses and phases.
//! - [`spec`]: the job spec: strict parsing, validation, canonical form, digest, schema.
//! - [`home`]: the state home and every path under it.
//! - [`config`]: the TOML configuration and its validation.
//! - [`peer_address`]: Fleet peer addresses in their one normal form, and machine names.
//! - [`output_cap`]: the bound on a run's `output.log`: the cut's arithmetic and its marker.
//! - [`rundir`]: the run directory, the contract between daemon and worker; every file in it
//!   opened without following a link, and read only when regular (`rundir::open_record`).
//! - [`process`]: process identity `(pid, start ticks)` and group membership read from `/proc`;
//!   ending a process group (TERM, grace, KILL).
//! - [`container`]: the run's Docker container through the `docker` CLI: bounded commands,
//!   lookup by id, label and name, stop, removal without force and proven absence.
//! - [`sweep`]: the marker sweep after a run: scan, signal, rescan, suspects, bound; behind
//!   the [`sweep::ProcessTable`] seam (`/proc` and pidfds, or an in-memory fake).
//! - [`wire`]: the JSON shapes the API answers with.
//! - [`standby`]: the standby worker's hand-over (arguments and descriptors over a socket).
//! - [`worker_cmdline`]: what a worker's command line names (its run, job and lanes): what
//!   the daemon trusts about a live run its store lost.
//! - [`tail`]: the end of a log, bounded in lines and bytes; a followed log read in bounded
//!   chunks.
//! - [`terminal`]: a log as a terminal shows it (carriage returns applied).
//! - [`time`]: stored milliseconds and RFC 3339 on the wire.

pub mod config;
pub mod container;
pub mod error;
pub mod event;
pub mod home;
pub mod ids;
pub mod output_cap;
pub mod peer_address;
pub mod process;
pub mod queue;
pub mod rundir;
pub mod spec;
pub mod standby;
pub mod sweep;
pub mod tail;
pub mod terminal;
pub mod time;
pub mod wire;
pub mod worker_cmdline;

/// The version of the JSON API, carried by every object the CLI prints.
pub const API_VERSION: u32 = 1;
/// The version of the Fleet protocol between machines.
pub const FLEET_PROTOCOL_VERSION: u32 = 1;
