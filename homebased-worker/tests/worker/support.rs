//! A run directory in a temporary home, the worker started on it, and polling waits.

use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::rundir::{
    read_json, ChildRecord, CleanupRecord, ExitRecord, RunDir, WorkerRecord,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One generous bound for every wait; nothing asserts on speed.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub const WORKER: &str = env!("CARGO_BIN_EXE_homebased-worker");

pub struct Run {
    _tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub dir: RunDir,
    pub task: TaskId,
    pub spec: Value,
}

impl Run {
    /// A host step running `/bin/sh -c script`, with a short term grace.
    pub fn shell(script: &str) -> Run {
        Run::with_step(json!({"type": "task", "command": ["/bin/sh", "-c", script]}))
    }

    pub fn with_step(step: Value) -> Run {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let task = TaskId::new();
        let job = JobId::new();
        let dir = RunDir::new(home.join("tasks").join(task.to_string()));
        std::fs::create_dir_all(dir.root()).unwrap();
        let spec = json!({
            "task": task,
            "job": job,
            "run_number": 1,
            "step_index": 0,
            "resume": false,
            "step": step,
            "cwd": tmp.path(),
            "path": "/usr/local/bin:/usr/bin:/bin",
            "user_home": tmp.path().join("user"),
            "lanes": [{"name": "gpu0", "device": null}],
            "home": home,
            "job_dir": home.join("jobs").join(job.to_string()).join("state"),
            "poke_socket": home.join("poke.sock"),
            "protected_pids": [],
            "cleanup": {"term_grace": "1s", "kill_grace": "2s", "rescan": "20ms", "bound": "10s"},
        });
        let run = Run {
            _tmp: tmp,
            home,
            dir,
            task,
            spec,
        };
        run.write_spec();
        run
    }

    /// Changes `run.json` before the worker starts.
    pub fn set(&mut self, key: &str, value: Value) {
        self.spec[key] = value;
        self.write_spec();
    }

    /// Writes `run.json` again (onto a filesystem mounted over the run directory, say).
    pub fn write_spec(&self) {
        let text = serde_json::to_vec_pretty(&self.spec).unwrap();
        std::fs::write(self.dir.run_json(), text).unwrap();
    }

    /// The worker command, with stdio away from the test's own.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(WORKER);
        cmd.arg(self.dir.root())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    pub fn start(&self) -> Worker {
        Worker(self.command().spawn().unwrap())
    }

    /// Starts the worker and waits for it to exit.
    pub fn run_to_end(&self) -> ExitStatus {
        let status = self.start().wait();
        assert!(
            status.success(),
            "worker failed: {status}\n{}",
            self.diagnose()
        );
        status
    }

    /// Waits until the worker recorded its child, and returns that record.
    pub fn child(&self) -> ChildRecord {
        eventually("worker.json with the child", || {
            self.dir
                .read_worker()
                .ok()
                .flatten()
                .and_then(|w: WorkerRecord| w.child)
        })
    }

    pub fn request_stop(&self) {
        std::fs::create_dir_all(self.dir.control_dir()).unwrap();
        std::fs::write(self.dir.stop_file(), br#"{"cause":"restart"}"#).unwrap();
    }

    pub fn exit(&self) -> ExitRecord {
        read_json(&self.dir.exit_json())
            .unwrap_or_else(|e| panic!("exit.json: {e}\n{}", self.diagnose()))
    }

    pub fn cleanup(&self) -> CleanupRecord {
        read_json(&self.dir.cleanup_json())
            .unwrap_or_else(|e| panic!("cleanup.json: {e}\n{}", self.diagnose()))
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.output_log()).unwrap_or_default()
    }

    pub fn worker_log(&self) -> String {
        std::fs::read_to_string(self.dir.worker_log()).unwrap_or_default()
    }

    /// What a failing assertion should show.
    pub fn diagnose(&self) -> String {
        format!(
            "--- worker.log\n{}--- output.log\n{}",
            self.worker_log(),
            self.output()
        )
    }
}

/// A running worker; killed if a test gives up on it.
pub struct Worker(pub Child);

impl Worker {
    pub fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    pub fn wait(&mut self) -> ExitStatus {
        eventually("the worker to exit", || self.0.try_wait().unwrap())
    }
}

impl Drop for Worker {
    // After a successful wait std knows the child is gone and signals nothing.
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `probe` until it gives a value; panics after [`PATIENCE`].
pub fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True while a process with this pid is in process group `pgid` (a reused pid elsewhere
/// does not count).
pub fn in_group(pid: u32, pgid: u32) -> bool {
    homebased_shared::process::read_stat(pid).is_ok_and(|s| s.pgrp == pgid)
}

/// A path's text, for comparing with what the workload printed.
pub fn text(path: &Path) -> String {
    path.display().to_string()
}
