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
use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
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

/// A query under way: the child, and what a thread of its own reads from each of its pipes
/// while it runs. Nothing else empties the pipes, so without the readers an answer over a
/// pipe's buffer (64 KiB, about 1,000 processes) would block the child until the bound.
struct Query {
    child: Child,
    stdout: Pipe,
    stderr: Pipe,
}

/// What a reader thread read from a pipe, to its end.
type Pipe = Receiver<io::Result<Vec<u8>>>;

/// A query that has finished: its exit status and all it wrote.
struct Answer {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn start<S: AsRef<std::ffi::OsStr>>(program: &str, args: &[S]) -> Result<Query, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    // Both are `Some`: they were asked for as pipes just above.
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        stop(&mut child);
        return Err(format!("cannot read {program}: no pipes"));
    };
    match drain(stdout).and_then(|stdout| Ok((stdout, drain(stderr)?))) {
        Ok((stdout, stderr)) => Ok(Query {
            child,
            stdout,
            stderr,
        }),
        Err(e) => {
            stop(&mut child);
            Err(format!("cannot read {program}: {e}"))
        }
    }
}

/// Reads `pipe` to its end on a thread of its own; all of it (or the read's error) comes on
/// the channel. A thread whose receiver is gone (a query given up at the bound) ends at the
/// pipe's end and drops what it read.
fn drain<R: Read + Send + 'static>(mut pipe: R) -> io::Result<Pipe> {
    let (sender, receiver) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("gpu-query-pipe".into())
        .spawn(move || {
            let mut read = Vec::new();
            let _ = sender.send(pipe.read_to_end(&mut read).map(|_| read));
        })?;
    Ok(receiver)
}

/// Waits for a query until `deadline`; a failure is the sample's error, never an empty list.
/// A query that has not closed both pipes and exited by the deadline is killed, so a sample
/// never takes longer than the bound.
fn finish(
    program: &str,
    query: Result<Query, String>,
    deadline: Instant,
) -> Result<String, String> {
    let mut query = query?;
    match collect(program, &mut query, deadline) {
        Ok(Some(answer)) => judge(program, &answer),
        Ok(None) => {
            stop(&mut query.child);
            Err(format!("{program} did not answer within {BOUND:?}"))
        }
        Err(e) => {
            stop(&mut query.child);
            Err(e)
        }
    }
}

/// The query's exit status and both pipes read to their end; `None` when any of them is not
/// there by `deadline`.
fn collect(program: &str, query: &mut Query, deadline: Instant) -> Result<Option<Answer>, String> {
    let read =
        |pipe: &Pipe| match pipe.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Ok(bytes)) => Ok(Some(bytes)),
            Ok(Err(e)) => Err(format!("reading {program}: {e}")),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(format!("reading {program}: reader lost")),
        };
    let Some(stdout) = read(&query.stdout)? else {
        return Ok(None);
    };
    let Some(stderr) = read(&query.stderr)? else {
        return Ok(None);
    };
    // Both pipes are at their end: the query is exiting, if it has not yet.
    loop {
        match query.child.try_wait() {
            Ok(Some(status)) => {
                return Ok(Some(Answer {
                    status,
                    stdout,
                    stderr,
                }))
            }
            Ok(None) if Instant::now() > deadline => return Ok(None),
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for {program}: {e}")),
        }
    }
}

/// The most of a failed query's stderr its error carries: the error is shown with every
/// `resource list` until the next sample.
const STDERR_SHOWN: usize = 1000;

/// A finished query's answer: its stdout when it exited 0, else an error with its status and
/// (the start of) its stderr.
fn judge(program: &str, answer: &Answer) -> Result<String, String> {
    let Answer {
        status,
        stdout,
        stderr,
    } = answer;
    if !status.success() {
        let stderr = String::from_utf8_lossy(stderr);
        let stderr = stderr.trim();
        let mut shown: String = stderr.chars().take(STDERR_SHOWN).collect();
        if shown.len() < stderr.len() {
            shown.push_str(" [...]");
        }
        return Err(format!("{program} exited with {status}: {shown}"));
    }
    Ok(String::from_utf8_lossy(stdout).into_owned())
}

/// Kills a query given up on and reaps it.
fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Runs `script` with `sh` as a query and waits for it until `within` from now.
    fn query(script: &str, within: Duration) -> Result<String, String> {
        let deadline = Instant::now() + within;
        finish("sh", start("sh", &["-c", script]), deadline)
    }

    #[test]
    fn an_answer_larger_than_a_pipe_is_read_whole_while_the_query_runs() {
        // 40,000 lines of 40 bytes: 1.6 MB, far over a pipe's 64 KiB.
        let line = "GPU-00000000-aaaa-bbbb-cccc, 4242, 1024";
        let script = format!("yes '{line}' | head -n 40000; head -c 200000 /dev/zero >&2");
        let answer = query(&script, BOUND).unwrap();
        assert_eq!(answer.lines().count(), 40_000);
        assert!(answer.lines().all(|l| l == line));
    }

    #[test]
    fn a_query_still_running_at_the_deadline_is_killed_and_is_an_error() {
        let deadline = Instant::now() + Duration::from_millis(200);
        let started = start("sh", &["-c", "echo partial; exec sleep 600"]).unwrap();
        let pid = started.child.id();
        let asked = Instant::now();
        let answer = finish("sh", Ok(started), deadline);
        let error = answer.unwrap_err();
        assert!(error.contains("did not answer"), "{error}");
        // Killed and reaped, not left behind; given up at the deadline, not after the
        // query's 600 s (a generous margin: this is the bound, not a speed).
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert!(asked.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn a_pipe_held_open_after_the_query_exits_is_given_up_at_the_deadline() {
        // The query exits at once, but a child of its keeps its stdout open for 30 s.
        let asked = Instant::now();
        let error = query("sleep 30 & echo early", Duration::from_millis(200)).unwrap_err();
        assert!(error.contains("did not answer"), "{error}");
        assert!(
            asked.elapsed() < Duration::from_secs(20),
            "waited for the pipe"
        );
    }

    #[test]
    fn a_failed_query_is_an_error_with_its_status_and_stderr_never_an_empty_answer() {
        let error = query("echo 'No devices' >&2; exit 9", BOUND).unwrap_err();
        assert_eq!(error, "sh exited with exit status: 9: No devices");
        // A failure with more stderr than a pipe holds is read too, and shown cut.
        let error = query("head -c 100000 /dev/zero | tr '\\0' e >&2; exit 3", BOUND).unwrap_err();
        assert!(
            error.starts_with("sh exited with exit status: 3: eee"),
            "{error}"
        );
        assert!(error.ends_with("e [...]"), "{error}");
        assert!(error.len() < 2 * STDERR_SHOWN, "{}", error.len());
        let error = finish(
            "/nonexistent/nvidia-smi",
            start("/nonexistent/nvidia-smi", &["-L"]),
            Instant::now() + BOUND,
        )
        .unwrap_err();
        assert!(
            error.starts_with("cannot run /nonexistent/nvidia-smi"),
            "{error}"
        );
    }

    #[test]
    fn judge_gives_stdout_only_for_a_clean_exit() {
        let answer = |raw, stdout: &[u8], stderr: &[u8]| Answer {
            status: ExitStatus::from_raw(raw),
            stdout: stdout.to_vec(),
            stderr: stderr.to_vec(),
        };
        assert_eq!(
            judge("smi", &answer(0, b"a, 1, 2\n", b"warning")),
            Ok("a, 1, 2\n".to_string())
        );
        assert_eq!(
            judge("smi", &answer(2 << 8, b"a, 1, 2\n", b"  boom \n")),
            Err("smi exited with exit status: 2: boom".to_string())
        );
        let killed = judge("smi", &answer(9, b"", b"")).unwrap_err();
        assert!(killed.contains("signal: 9"), "{killed}");
    }
}
