//! `worker.log`: the worker's own notes and errors, one timestamped line each. The
//! workload's output never goes here (that is `output.log`).

use crate::clock::now_ms;
use homebased_shared::time::rfc3339;
use std::fmt::Display;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct WorkerLog {
    path: PathBuf,
}

impl WorkerLog {
    pub fn new(path: PathBuf) -> WorkerLog {
        WorkerLog { path }
    }

    /// Appends one line. Opened per line so that a note is on disk before the next step, and
    /// so that no log descriptor exists for a workload to inherit.
    pub fn note(&self, message: impl Display) {
        let line = format!("{} {message}\n", rfc3339(now_ms()));
        // Never through a link: the workload can replace worker.log with one to any file
        // the worker's user may write.
        let written = homebased_shared::rundir::open_append(&self.path, 0o666)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            // The log is the last place to report to; stderr is all that is left, and it may
            // be closed or a broken pipe, which must not end the worker either.
            let _ = write!(
                std::io::stderr(),
                "homebased-worker: cannot write {}: {e}; {line}",
                self.path.display()
            );
        }
    }
}
