//! Cleanup after a worker that vanished before it wrote `cleanup.json`: the daemon removes a
//! container step's container with the worker's own driver ([`homebased_shared::container`]:
//! found by saved id, label and name, stopped with the run's grace, removed without force,
//! proven gone within the cleanup bound, else `container_unconfirmed`), empties the workload's
//! process group itself (signalling each member only after re-checking its identity, and never
//! a protected process), then runs the same sweep as the worker.
//!
//! The lineage net's limit here: the worker, the root of the run's lineage, is gone, and the
//! orphans it would have collected were re-parented past it (to init, or to a subreaper above
//! the daemon such as a systemd user manager), where no parent link leads back to the run.
//! What the daemon can still use is the marker, and the recorded workload
//! (`worker.json`'s child, by identity) as the lineage root while it still lives: its
//! descendants, whose links still reach it, are the run's whatever their environment says.
//! A descendant that cleared or rewrote its environment and whose chain to the workload is
//! broken is beyond this cleanup (the documented limit).

use super::launcher::LostCleanup;
use homebased_shared::config::CleanupConfig;
use homebased_shared::container::{self, docker::Docker, removal};
use homebased_shared::ids::TaskId;
use homebased_shared::process::{self, ProcStat, Teardown};
use homebased_shared::rundir::{
    ChildRecord, CleanupOutcome, ProcessIdentity, RemainingProcess, RemainingReason, RunDir,
};
use homebased_shared::sweep::{ProcTable, Sweep, SystemClock};
use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::time::Instant;

/// Live members of the workload's group (a zombie leader whose threads still run is live)
/// that started no earlier than the workload itself: an older process in that group cannot be
/// the run's.
fn members(
    pgid: u32,
    since_ticks: u64,
    protected: &[ProcessIdentity],
) -> std::io::Result<Vec<ProcStat>> {
    Ok(process::group_members(pgid)?
        .into_iter()
        .filter(|p| {
            !process::has_ended(p)
                && p.start_ticks >= since_ticks
                && !protected.contains(&p.identity())
        })
        .collect())
}

/// The group first; once it is confirmed empty, the sweep. `protected` is the caller's list of
/// live processes (the daemon, live workers), taken by identity as they are now; the daemon
/// itself is always protected by the sweep's table.
pub fn clean(dir: &RunDir, task: TaskId, lost: &LostCleanup) -> CleanupOutcome {
    let config = &lost.config;
    let protected: Vec<ProcessIdentity> = lost
        .protected
        .iter()
        .filter_map(|pid| process::identity(*pid).ok())
        .collect();
    let child = match dir.read_worker() {
        Ok(Some(record)) => record.child,
        Ok(None) => None,
        Err(e) => {
            return CleanupOutcome::EnumerationFailed {
                message: format!("worker.json is unreadable: {e}"),
            }
        }
    };
    if lost.container_step {
        // Docker, not the marker sweep, is the one to end the container's processes.
        let removed = remove_container(dir, task, config);
        if !removed.is_clean() {
            return removed;
        }
    }
    if let Some(child) = &child {
        let group = empty_group(child, config, &protected);
        if !group.is_clean() {
            return group;
        }
    }
    // Without a recorded child the workload may still have started (the worker can die
    // between the spawn and worker.json): its marker is the only way to find it, and with no
    // recorded start, unreadable processes are ignored. The worker, the lineage root, is gone;
    // the recorded workload, while it lives, still leads to its descendants.
    let sweep = Sweep {
        task,
        workload_start: child.as_ref().map(|c| c.process.start_ticks),
        config: *config,
        protected,
        lineage: child.map(|c| c.process),
    };
    let swept = sweep.run(&ProcTable::new(), &mut SystemClock);
    for sent in &swept.signalled {
        tracing::info!(
            %task,
            pid = sent.process.pid,
            start_ticks = sent.process.start_ticks,
            signal = %sent.signal,
            by_ancestry = swept.descendants.contains(&sent.process),
            "sweep signalled a process of the run"
        );
    }
    for note in &swept.notes {
        tracing::info!(%task, "sweep: {note}");
    }
    swept.outcome
}

/// The container the worker would have removed, found by the id it saved, its label or its
/// name.
fn remove_container(dir: &RunDir, task: TaskId, config: &CleanupConfig) -> CleanupOutcome {
    let id = container::saved_id(dir, "");
    let note = |message: &str| tracing::info!(%task, "{message}");
    removal::remove(&Docker::for_run(task), task, id.as_deref(), config, &note)
}

/// SPEC section 6, step 1, for a workload whose worker is gone.
fn empty_group(
    child: &ChildRecord,
    config: &CleanupConfig,
    protected: &[ProcessIdentity],
) -> CleanupOutcome {
    let (pgid, since) = (child.pgid, child.process.start_ticks);
    // The group's number is the workload's pid. A pid stays taken while any member of a group
    // of that number lives, so another process holding that pid now means the run's group
    // is gone and the number was reused: its members are not the run's.
    if let Ok(holder) = process::read_stat(child.process.pid) {
        if holder.start_ticks != since && child.process.pid == pgid {
            return CleanupOutcome::Clean;
        }
    }
    let teardown = process::terminate_group(
        config,
        |signal, _| {
            for p in members(pgid, since, protected)? {
                // Re-check right before the signal: a reused pid is never hit.
                if process::is_same_process(p.identity()) {
                    let _ = kill(Pid::from_raw(p.pid as i32), signal);
                }
            }
            Ok(())
        },
        |deadline| loop {
            if members(pgid, since, protected)?.is_empty() {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(config.rescan);
        },
    );
    match teardown {
        Ok(Teardown::Ended { .. }) => return CleanupOutcome::Clean,
        Ok(Teardown::Survived) => {}
        Err(e) => return enumeration_failed(pgid, e),
    }
    match members(pgid, since, protected) {
        Ok(found) if found.is_empty() => CleanupOutcome::Clean,
        Ok(found) => CleanupOutcome::GroupUnconfirmed {
            remaining: found
                .iter()
                .map(|p| RemainingProcess {
                    pid: p.pid,
                    start_ticks: p.start_ticks,
                    reason: RemainingReason::Group,
                })
                .collect(),
        },
        Err(e) => enumeration_failed(pgid, e),
    }
}

fn enumeration_failed(pgid: u32, e: std::io::Error) -> CleanupOutcome {
    CleanupOutcome::EnumerationFailed {
        message: format!("cannot list the members of process group {pgid}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homebased_shared::rundir::{write_json_atomic, ProcessIdentity, WorkerRecord};
    use homebased_shared::sweep::Marker;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};
    use std::time::Duration;

    /// `sleep 100` with `task`'s marker, leading a process group of its own.
    fn marked_sleep(task: TaskId) -> (Child, ProcessIdentity) {
        let child = Command::new("sleep")
            .arg("100")
            .env(Marker::NAME, task.to_string())
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let id = process::identity(child.id()).unwrap();
        (child, id)
    }

    fn probe(dir: &std::path::Path) -> std::path::PathBuf {
        homebased_e2e::compile_probe(dir)
    }

    #[test]
    fn a_group_whose_leader_thread_exited_while_another_runs_is_not_taken_for_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let pidfile = tmp.path().join("leader.pid");
        let mut workload = Command::new(probe(tmp.path()))
            .arg("leader-exits")
            .arg(&pidfile)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let id = process::identity(workload.id()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pidfile.exists() {
            assert!(Instant::now() < deadline, "the probe never got ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(process::read_stat(id.pid).unwrap().is_zombie());
        let child = ChildRecord {
            process: id,
            pgid: id.pid,
            started_at: 0,
        };
        let config = CleanupConfig {
            term_grace: Duration::from_millis(300),
            kill_grace: Duration::from_secs(2),
            rescan: Duration::from_millis(20),
            bound: Duration::from_secs(10),
        };

        let outcome = empty_group(&child, &config, &[]);

        assert_eq!(outcome, CleanupOutcome::Clean);
        let ended = workload.try_wait().unwrap();
        if ended.is_none() {
            let _ = workload.kill();
            let _ = workload.wait();
        }
        assert!(
            ended.is_some_and(|status| !status.success()),
            "the process lived on: taken for a zombie"
        );
    }

    #[test]
    fn a_lost_workers_group_and_escaped_marked_processes_are_stopped_but_protected_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::new(tmp.path());
        let task = TaskId::new();
        let (mut workload, workload_id) = marked_sleep(task);
        let (mut escaped, _) = marked_sleep(task);
        let (mut protected, protected_id) = marked_sleep(task);
        let worker = process::identity(std::process::id()).unwrap();
        let record = WorkerRecord {
            worker,
            child: Some(ChildRecord {
                process: workload_id,
                pgid: workload_id.pid,
                started_at: 0,
            }),
            stamps: None,
        };
        write_json_atomic(&dir.worker_json(), &record).unwrap();
        let lost = LostCleanup {
            attempt: 2,
            config: CleanupConfig {
                term_grace: Duration::from_millis(300),
                kill_grace: Duration::from_secs(1),
                rescan: Duration::from_millis(20),
                bound: Duration::from_secs(10),
            },
            protected: vec![protected_id.pid],
            container_step: false,
        };

        let outcome = clean(&dir, task, &lost);

        assert_eq!(outcome, CleanupOutcome::Clean);
        assert!(!workload.wait().unwrap().success());
        assert!(!escaped.wait().unwrap().success());
        assert_eq!(protected.try_wait().unwrap(), None, "protected lives on");
        protected.kill().unwrap();
        protected.wait().unwrap();
    }
}
