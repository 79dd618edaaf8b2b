//! The records the daemon reads: `worker.json`, `exit.json`, `cleanup.json`. Each is written
//! atomically and then the daemon is poked. The files are the truth; the poke only saves the
//! daemon a wait, so every poke error is ignored.

use homebased_shared::rundir::{
    write_json_atomic, CleanupRecord, ExitRecord, RunDir, RunSpec, WorkerRecord,
};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

pub struct Records {
    dir: RunDir,
    /// Absent until `run.json` named the daemon's socket.
    poke: Option<Poke>,
}

impl Records {
    pub fn new(dir: RunDir, run: Option<&RunSpec>) -> Records {
        Records {
            dir,
            poke: run.map(Poke::for_run),
        }
    }

    /// `worker.json`. Only the child's start is worth a poke: the first record is read when
    /// the daemon confirms the launch.
    pub fn worker(&self, record: &WorkerRecord) -> io::Result<()> {
        write_json_atomic(&self.dir.worker_json(), record)?;
        if record.child.is_some() {
            self.poke();
        }
        Ok(())
    }

    pub fn exit(&self, record: &ExitRecord) -> io::Result<()> {
        write_json_atomic(&self.dir.exit_json(), record)?;
        fail::fail_point!("worker.exit-written", |_| std::process::abort());
        self.poke();
        Ok(())
    }

    pub fn cleanup(&self, record: &CleanupRecord) -> io::Result<()> {
        fail::fail_point!("worker.cleanup-before-record", |_| std::process::abort());
        write_json_atomic(&self.dir.cleanup_json(), record)?;
        fail::fail_point!("worker.cleanup-written", |_| std::process::abort());
        self.poke();
        Ok(())
    }

    fn poke(&self) {
        if let Some(poke) = &self.poke {
            poke.send();
        }
    }
}

/// One datagram with the task UUID to the daemon's socket: "re-read this run's files".
struct Poke {
    socket: PathBuf,
    task: String,
}

impl Poke {
    fn for_run(run: &RunSpec) -> Poke {
        Poke {
            socket: run.poke_socket.clone(),
            task: run.task.to_string(),
        }
    }

    fn send(&self) {
        let Ok(sock) = UnixDatagram::unbound() else {
            return;
        };
        // A daemon that is down or slow must never hold the run up: a full queue drops the
        // poke instead of blocking.
        let _ = sock.set_nonblocking(true);
        let _ = sock.send_to(self.task.as_bytes(), &self.socket);
    }
}
