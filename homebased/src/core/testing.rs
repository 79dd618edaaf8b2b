//! Test support for the core: a [`FakeLauncher`] that stands in for everything the
//! supervisor does (it records what the core asked of its workers and writes only the files
//! the daemon's side of the run directory writes), and a core on a temporary home and real
//! store that uses it. Tests play the worker's part by writing the run directory's files, as
//! a real worker would, and tell the core a worker is gone themselves.

use super::{Core, DaemonFacts};
use crate::clock::Clock;
use crate::store::Store;
use crate::supervisor::launcher::{Launcher, LiveWorker, LostCleanup, RunNames};
use homebased_shared::config::Config;
use homebased_shared::home::Home;
use homebased_shared::ids::TaskId;
use homebased_shared::rundir::{
    write_json_atomic, write_json_replace, AdoptionRequest, RunDir, RunSpec,
};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// One request the core made of its launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    Start(TaskId),
    Reattach(TaskId),
    SignalStop(TaskId),
    CleanUpLost {
        task: TaskId,
        attempt: u32,
        container_step: bool,
    },
    Adopt {
        task: TaskId,
        adoption: u32,
    },
}

/// What the fake launcher saw, and which workers it pretends are alive.
#[derive(Debug, Default)]
pub struct Workers {
    pub asked: Vec<Asked>,
    /// Tasks whose worker holds its lock (a started worker is alive until the test ends it).
    pub alive: HashSet<TaskId>,
    /// Make the next start fail, as a missing worker binary would.
    pub fail_start: bool,
    /// Make the next adoption fail to start its worker.
    pub fail_adopt: bool,
    /// The core's clock, as the supervisor holds the daemon's: what it stamps reads it.
    pub clock: Clock,
}

#[derive(Clone, Default)]
pub struct FakeLauncher(pub Arc<Mutex<Workers>>);

fn task_of(dir: &RunDir) -> TaskId {
    dir.root()
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("run directories are named after their task")
}

impl FakeLauncher {
    fn with<T>(&self, f: impl FnOnce(&mut Workers) -> T) -> T {
        f(&mut self.0.lock().expect("no test thread panicked holding it"))
    }

    pub fn asked(&self) -> Vec<Asked> {
        self.with(|w| w.asked.clone())
    }

    /// The worker of `task` exits: its lock is free from now on.
    pub fn end(&self, task: TaskId) {
        self.with(|w| w.alive.remove(&task));
    }
}

impl Launcher for FakeLauncher {
    /// What the real one makes, without its modes or staged directories: tests read
    /// `run.json` and write the worker's files beside it.
    fn create_run_dir(&mut self, spec: &RunSpec) -> std::io::Result<RunDir> {
        let dir = RunDir::new(Home::at(&spec.home).task_dir(spec.task));
        std::fs::create_dir_all(dir.control_dir())?;
        std::fs::create_dir_all(&spec.job_dir)?;
        write_json_replace(&dir.run_json(), spec)?;
        Ok(dir)
    }

    fn start(&mut self, _dir: &RunDir, task: TaskId, _names: &RunNames) -> std::io::Result<()> {
        self.with(|w| {
            if std::mem::take(&mut w.fail_start) {
                return Err(std::io::Error::other("no such worker binary"));
            }
            w.asked.push(Asked::Start(task));
            w.alive.insert(task);
            Ok(())
        })
    }

    /// Written as the real one writes it: the core counts adoptions from it.
    fn request_adoption(&mut self, dir: &RunDir, adoption: u32) -> std::io::Result<()> {
        let request = AdoptionRequest {
            adoption,
            requested_at: self.with(|w| w.clock.now_ms()),
        };
        write_json_atomic(&dir.adoption_json(), &request)
    }

    fn adopt(
        &mut self,
        _dir: &RunDir,
        task: TaskId,
        adoption: u32,
        _names: &RunNames,
    ) -> std::io::Result<()> {
        self.with(|w| {
            if std::mem::take(&mut w.fail_adopt) {
                return Err(std::io::Error::other("no such worker binary"));
            }
            w.asked.push(Asked::Adopt { task, adoption });
            w.alive.insert(task);
            Ok(())
        })
    }

    fn reattach(&mut self, dir: &RunDir, _task: TaskId) {
        let task = task_of(dir);
        self.with(|w| w.asked.push(Asked::Reattach(task)));
    }

    fn worker_alive(&self, dir: &RunDir) -> bool {
        let task = task_of(dir);
        self.with(|w| w.alive.contains(&task))
    }

    /// No process table: the live runs a test plays are found by their locks alone.
    fn live_workers(&self) -> Vec<LiveWorker> {
        Vec::new()
    }

    fn signal_stop(&mut self, dir: &RunDir) {
        let task = task_of(dir);
        self.with(|w| w.asked.push(Asked::SignalStop(task)));
    }

    fn clean_up_lost(&mut self, _dir: &RunDir, task: TaskId, lost: LostCleanup) {
        self.with(|w| {
            w.asked.push(Asked::CleanUpLost {
                task,
                attempt: lost.attempt,
                container_step: lost.container_step,
            })
        });
    }
}

/// The submitter of a test's submit: a plain `PATH`, cwd `/`, no captured environment.
pub fn plain_submitter() -> homebased_shared::wire::Submitter {
    homebased_shared::wire::Submitter {
        path: Some("/usr/bin:/bin".into()),
        home: None,
        cwd: "/".into(),
        parent_task: None,
        env: None,
    }
}

/// A core on the temporary home `dir` with a fake launcher; both read a clock of their own
/// that the test can move (`core.clock.advance`).
pub fn open_core(dir: &tempfile::TempDir, config: Config, launcher: FakeLauncher) -> Core {
    let home = Home::at(dir.path());
    home.create().expect("a temporary home can be created");
    let clock = Clock::system();
    launcher.with(|w| w.clock = clock.clone());
    let store = Store::open(&home.database(), clock).expect("a new store opens");
    let facts = DaemonFacts {
        pid: 1,
        web: None,
        lanes_from: None,
    };
    Core::new(store, home, config, facts, |_| Box::new(launcher)).expect("a new core starts")
}
