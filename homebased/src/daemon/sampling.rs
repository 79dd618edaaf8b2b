//! The GPU sampler thread: off the core, at most every 5 s, each query bounded to 5 s, and
//! asleep (no wake at all) while nobody has read resources for a minute. It asks the core for the lanes, runs
//! the query, reads `/proc` for each process, and posts the attributed sample back.

use crate::clock::Clock;
use crate::core::CoreHandle;
use crate::sampler::{self, Demand, Lane, LaneRun, ProcessFacts, Sample};
use homebased_shared::home::Home;
use homebased_shared::process::parse_stat;
use homebased_shared::rundir::RunDir;
use homebased_shared::sweep::Marker;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shortest time between two samples.
pub const EVERY: Duration = Duration::from_secs(5);
/// How long one query may take.
const BOUND: Duration = Duration::from_secs(5);
/// Sampling stops this long after the last read of resources.
const IDLE_AFTER_MS: i64 = 60_000;

/// Starts the thread. `demand` is when resources were last read (the core marks it, on the
/// same `clock`).
pub fn spawn(core: CoreHandle, clock: Clock, home: Home, program: String, demand: Arc<Demand>) {
    let started = std::thread::Builder::new()
        .name("gpu-sampler".into())
        .spawn(move || {
            let mut last_sample: Option<Instant> = None;
            let mut refused = Vec::new();
            loop {
                let read = demand.last();
                if clock.now_ms() - read > IDLE_AFTER_MS {
                    // Nobody looks: sleep until somebody reads, with no wake before.
                    demand.wait_after(read);
                    continue;
                }
                if let Some(left) = last_sample.and_then(|at| EVERY.checked_sub(at.elapsed())) {
                    std::thread::sleep(left);
                    continue;
                }
                last_sample = Some(Instant::now());
                // The core is gone: the daemon is shutting down.
                let Some(lanes) = core.gpu_lanes_blocking(Duration::from_secs(30)) else {
                    return;
                };
                // No known card (no NVIDIA tooling, manual lanes only): nothing to ask.
                if lanes.is_empty() {
                    continue;
                }
                let sample = sample(&home, &program, lanes, &mut refused, clock.now_ms());
                core.record_gpu_sample(sample);
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the GPU sampler");
    }
}

/// One sample: both queries at once (each within the same bound), then `/proc` for each
/// process, stamped `at`. `refused` is the state query's last refusals, logged only when they
/// change.
fn sample(
    home: &Home,
    program: &str,
    lanes: Vec<Lane>,
    refused: &mut Vec<String>,
    at: homebased_shared::time::Millis,
) -> Sample {
    let deadline = Instant::now() + BOUND;
    let apps = start(program, &sampler::QUERY);
    let states = start(program, &sampler::gpu_query());
    let processes =
        finish(program, apps, deadline).and_then(|stdout| sampler::parse_compute_apps(&stdout));
    let states = finish(program, states, deadline).map(|stdout| {
        let parsed = sampler::parse_gpu_states(&stdout);
        if parsed.refused != *refused {
            if !parsed.refused.is_empty() {
                tracing::warn!(
                    "GPU state: lines refused (those cards show no state): {}",
                    parsed.refused.join("; ")
                );
            }
            *refused = parsed.refused;
        }
        parsed.cards
    });
    let lanes: Vec<Lane> = lanes
        .into_iter()
        .map(|mut lane| {
            if let Some(run) = lane.run.as_mut() {
                fill_worker(home, run);
            }
            lane
        })
        .collect();
    let processes = processes.map(|apps| sampler::attribute(&apps, &lanes, read_facts));
    let run_memory = processes
        .as_ref()
        .map(|by_lane| sampler::run_memory(&lanes, by_lane))
        .unwrap_or_default();
    Sample {
        at,
        processes,
        states,
        run_memory,
    }
}

fn fill_worker(home: &Home, run: &mut LaneRun) {
    if let Ok(Some(worker)) = RunDir::new(home.task_dir(run.task)).read_worker() {
        run.worker_pid = Some(worker.worker.pid);
        run.pgid = worker.child.map(|c| c.pgid);
    }
}

fn start<S: AsRef<std::ffi::OsStr>>(program: &str, args: &[S]) -> Result<Child, String> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))
}

/// Waits for a query until `deadline`; a failure is the sample's error, never an empty list.
/// A hung query is killed at the deadline, so a sample never takes longer than the bound.
fn finish(
    program: &str,
    child: Result<Child, String>,
    deadline: Instant,
) -> Result<String, String> {
    let mut child = child?;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} did not answer within {BOUND:?}"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("reading {program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `/proc` says about `pid`, as far as it is readable.
fn read_facts(pid: u32) -> ProcessFacts {
    let dir = format!("/proc/{pid}");
    let stat = std::fs::read_to_string(format!("{dir}/stat"))
        .ok()
        .and_then(|t| parse_stat(&t));
    let mut ancestors = Vec::new();
    let mut parent = stat.as_ref().map(|s| s.ppid);
    // Bounded: a chain longer than this is cut, never followed forever.
    while let Some(p) = parent.filter(|p| *p > 1 && ancestors.len() < 64) {
        ancestors.push(p);
        parent = std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|t| parse_stat(&t))
            .map(|s| s.ppid);
    }
    let user = std::fs::read_to_string(format!("{dir}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            let uid: u32 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(
                nix::unistd::User::from_uid(uid.into())
                    .ok()
                    .flatten()
                    .map_or_else(|| uid.to_string(), |u| u.name),
            )
        });
    let command = std::fs::read(format!("{dir}/cmdline"))
        .ok()
        .map(|raw| {
            let text: String = String::from_utf8_lossy(&raw)
                .split('\0')
                .filter(|a| !a.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            text.chars().take(200).collect::<String>()
        })
        .filter(|c| !c.is_empty());
    let marker = std::fs::read(format!("{dir}/environ"))
        .ok()
        .and_then(|env| {
            let prefix = format!("{}=", Marker::NAME);
            env.split(|b| *b == 0).find_map(|entry| {
                let value = entry.strip_prefix(prefix.as_bytes())?;
                std::str::from_utf8(value).ok()?.parse().ok()
            })
        });
    ProcessFacts {
        user,
        command,
        marker,
        ancestors,
        pgrp: stat.map(|s| s.pgrp),
    }
}
