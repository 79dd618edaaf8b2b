//! Launches whose worker never confirms, driven by a stand-in worker (`HOMEBASED_WORKER`):
//! the job returns to its slot, or is cancelled if a cancel came in meanwhile; and when the
//! worker got as far as starting the workload before it died, the lane is cleaned before it
//! serves again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::{wait_until, Probe, TestHome};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Writes an executable stand-in for `homebased-worker` (called as `<run-dir> --lock-fd 3`,
/// holding the run's lock on fd 3 for as long as it lives).
fn stand_in(h: &TestHome, name: &str, script: &str) -> PathBuf {
    let path = h.write_file(name, &format!("#!/bin/sh\n{script}\n"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn home_with_worker(worker: impl Fn(&TestHome) -> PathBuf) -> TestHome {
    let mut h = TestHome::new(Probe::Missing);
    let path = worker(&h);
    h.set_env("HOMEBASED_WORKER", &path);
    h.start_daemon();
    h
}

#[test]
fn a_cancel_during_a_launch_that_never_confirms_cancels_the_job() {
    // Holds the lock for a while, writes nothing, and dies: the launch is abandoned.
    let h = home_with_worker(|h| stand_in(h, "silent-worker", "sleep 3; exit 1"));
    let job = h.submit(&h.spec("never confirmed"));
    wait_phase(&h, &job, "launching");
    let answer = h.json(&["resource", "job", "cancel", &job]);
    assert_eq!(answer["result"], "stopping", "{answer:#}");
    let cancelled = wait_job(&h, &job, "cancelled");
    assert_eq!(event_names(&cancelled), ["JOB_CANCELLED"], "{cancelled:#}");
    assert_eq!(runs(&cancelled)[0]["status"], "lost");
    wait_all_idle(&h);
}

#[test]
fn an_unconfirmed_launch_whose_worker_may_have_started_the_workload_is_lost_and_cleaned_before_the_lane_serves_again(
) {
    let marker_pid = |dir: &Path| dir.join("escaped.pid");
    // Writes worker.json without a child, starts a marked process the way a worker would
    // (the run's marker in its environment, its own session), then dies without a record.
    let h = home_with_worker(|h| {
        let pidfile = marker_pid(h.tmp());
        stand_in(
            h,
            "dying-worker",
            &format!(
                r#"dir="$1"
task=$(basename "$dir")
ticks=$(cut -d' ' -f22 /proc/$$/stat)
printf '{{"worker":{{"pid":%s,"start_ticks":%s}},"child":null}}' $$ "$ticks" > "$dir/worker.json"
HOMEBASED_TASK_ID="$task" setsid sleep 1000 </dev/null >/dev/null 2>&1 3>&- &
echo $! > "{pid}.tmp" && mv "{pid}.tmp" "{pid}"
exit 1"#,
                pid = pidfile.display()
            ),
        )
    });
    let job = h.submit(&h.spec("started, then lost"));
    let pidfile = marker_pid(h.tmp());
    wait_until("the stand-in to start its marked process", || {
        pidfile.exists()
    });
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    wait_until("the abandoned launch to be cleaned", || {
        runs(&show(&h, &job))
            .first()
            .is_some_and(|r| r["cleanup"]["result"] == "clean")
    });
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(
        !alive,
        "the marked process {pid} outlived the cleanup of its lane"
    );
    // It may have finished the step before it died: lost, never run a second time.
    let lost = show(&h, &job);
    assert_eq!(state_of(&lost), "failed", "{lost:#}");
    assert_eq!(event_names(&lost), ["JOB_FAILED"], "{lost:#}");
    assert_eq!(runs(&lost).len(), 1, "{lost:#}");
    assert_eq!(runs(&lost)[0]["status"], "lost", "{lost:#}");
}
