//! The records the daemon reads: `worker.json`, `exit.json`, `cleanup.json`. Each is written
//! atomically and then the daemon is poked. The files are the truth; the poke only saves the
//! daemon a wait, so every poke error is ignored.
//!
//! A record is the truth the daemon waits for, so a write that fails is never given up while
//! the worker lives: a full disk first gets a chunk of the worker's [`Reserve`] back and the
//! write is tried again at once; any other failure, or a spent reserve, is retried with a
//! backoff ([`FIRST_PAUSE`] doubling to [`LONGEST_PAUSE`], paused on the worker's clock,
//! [`crate::clock::pause`]) until the record lands. A stale temporary copy of a failed try
//! is truncated by the next one and renamed over the record by the one that lands, so
//! nothing is left behind. The one failure never retried is a run
//! directory that no longer exists (removed by a person or a test): no record can ever land
//! there, and a worker retrying for ever would outlive its run as an orphan. The daemon
//! meets the same missing directory and ends the run in Attention after bounded cleanup.

use crate::log::WorkerLog;
use crate::reserve::{is_out_of_space, Reserve};
use homebased_shared::rundir::{
    write_json_atomic, write_json_replace, CleanupRecord, ExitRecord, RunDir, RunSpec,
    WorkerRecord, CLEANUP_JSON, EXIT_JSON, WORKER_JSON,
};
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

/// The pause after the first failed try of a record.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two tries.
pub const LONGEST_PAUSE: Duration = Duration::from_secs(5);

pub struct Records {
    dir: RunDir,
    /// Absent until `run.json` named the daemon's socket.
    poke: Option<Poke>,
    log: WorkerLog,
    reserve: Reserve,
    /// Set by [`Records::set_aside`]: from then on a reserve that could not be made is tried
    /// again after each `worker.json` (space came back for it).
    reserve_wanted: bool,
}

impl Records {
    /// The records of `dir`. A reserve an earlier worker of the run left is taken over at
    /// once (on a disk full but for it, it is the only room for the first record); a new one
    /// is made by [`Records::set_aside`] once the workload runs, so that allocating it is not
    /// on the start path.
    pub fn new(dir: RunDir, run: Option<&RunSpec>, log: WorkerLog) -> Records {
        let leftover = dir.reserve().exists();
        let mut records = Records {
            reserve: Reserve::at(dir.reserve()),
            dir,
            poke: run.map(Poke::for_run),
            log,
            reserve_wanted: false,
        };
        if leftover {
            records.set_aside();
        }
        records
    }

    /// Allocates the reserve if it holds nothing, before the records that follow the
    /// workload's start: `worker.json` with the child, `exit.json`, `cleanup.json`. On a full
    /// disk the reserve stays empty and the records wait for space.
    pub fn set_aside(&mut self) {
        self.reserve_wanted = true;
        if self.reserve.held() > 0 {
            return;
        }
        if let Err(e) = self.reserve.fill() {
            self.log.note(format!(
                "cannot set aside {}: {e}; records will wait for space if the disk is full",
                self.dir.reserve().display()
            ));
        }
    }

    /// `worker.json`. Only the child's start is worth a poke: the first record is read when
    /// the daemon confirms the launch.
    pub fn worker(&mut self, record: &WorkerRecord) {
        let path = self.dir.worker_json();
        self.land(WORKER_JSON, || write_json_atomic(&path, record));
        if self.reserve_wanted && self.reserve.held() == 0 {
            // Space came back for this record: hold some for the next ones.
            let _ = self.reserve.fill();
        }
        if record.child.is_some() {
            self.poke();
        }
    }

    /// `exit.json`, with the reserve set aside first if the workload never started (a
    /// start that failed, a stop before it).
    pub fn exit(&mut self, record: &ExitRecord) {
        if !self.reserve_wanted {
            self.set_aside();
        }
        let path = self.dir.exit_json();
        self.land(EXIT_JSON, || write_json_atomic(&path, record));
        fail::fail_point!("worker.exit-written", |_| std::process::abort());
        self.poke();
    }

    /// Written whole but not fsynced: it sits on the hand-over path (the lane serves again
    /// only once the daemon has read it), and its durability is the daemon's commit of its
    /// outcome. A machine that crashes before that commit lost every process with it; the
    /// daemon then finds a run without `cleanup.json` and cleans up after it again, which
    /// finds nothing. A daemon killed meanwhile finds the file in the page cache.
    pub fn cleanup(&mut self, record: &CleanupRecord) {
        fail::fail_point!("worker.cleanup-before-record", |_| std::process::abort());
        let path = self.dir.cleanup_json();
        self.land(CLEANUP_JSON, || write_json_replace(&path, record));
        fail::fail_point!("worker.cleanup-written", |_| std::process::abort());
        self.poke();
    }

    fn land(&mut self, name: &str, write: impl FnMut() -> io::Result<()>) {
        let root = self.dir.root().to_path_buf();
        land(
            write,
            || !root.exists(),
            &mut self.reserve,
            &self.log,
            name,
            crate::clock::pause,
        );
    }

    fn poke(&self) {
        if let Some(poke) = &self.poke {
            poke.send();
        }
    }
}

/// Tries `write` until it succeeds: on a full disk a chunk of the reserve is given back and
/// the write tried at once, else it is tried again after `sleep`ing a backoff; a write that
/// fails because the run directory is `gone` is given up. Returns the number of failed tries.
/// Each new kind of failure is noted once (the log itself may be on the full disk; its notes
/// are lossy).
fn land(
    mut write: impl FnMut() -> io::Result<()>,
    gone: impl Fn() -> bool,
    reserve: &mut Reserve,
    log: &WorkerLog,
    name: &str,
    mut sleep: impl FnMut(Duration),
) -> u32 {
    let mut failures = 0;
    let mut released = 0;
    let mut pause = FIRST_PAUSE;
    let mut last_error = String::new();
    loop {
        let e = match write() {
            Ok(()) => break,
            Err(e) => e,
        };
        failures += 1;
        if e.kind() == io::ErrorKind::NotFound && gone() {
            log.note(format!(
                "cannot write {name}: the run directory is gone; giving the record up"
            ));
            return failures;
        }
        // Nothing is written to the disk between giving space back and using it.
        if is_out_of_space(&e) && reserve.release_chunk() {
            released += 1;
            continue;
        }
        let text = e.to_string();
        if text != last_error {
            log.note(format!(
                "cannot write {name}: {text}; trying again until it lands"
            ));
            last_error = text;
        }
        sleep(pause);
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
    if failures > 0 {
        log.note(format!(
            "{name} written after {failures} failed tries ({released} chunks of the reserve \
             used, {} bytes left)",
            reserve.held()
        ));
    }
    failures
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reserve::{CHUNK, CHUNKS};

    fn full() -> io::Error {
        io::Error::from_raw_os_error(libc::ENOSPC)
    }

    #[test]
    fn a_full_disk_takes_from_the_reserve_without_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let log = WorkerLog::new(tmp.path().join("worker.log"));
        let mut reserve = Reserve::at(tmp.path().join("worker.reserve"));
        reserve.fill().unwrap();
        let mut tries = 0;
        let mut slept = Vec::new();
        let failures = land(
            || {
                tries += 1;
                if tries <= 2 {
                    Err(full())
                } else {
                    Ok(())
                }
            },
            || false,
            &mut reserve,
            &log,
            "exit.json",
            |d| slept.push(d),
        );
        assert_eq!(failures, 2);
        assert!(slept.is_empty(), "the reserve answers at once: {slept:?}");
        assert_eq!(reserve.held(), CHUNK * (CHUNKS - 2));
    }

    #[test]
    fn without_a_reserve_a_write_is_retried_with_a_capped_backoff_until_it_lands() {
        let tmp = tempfile::tempdir().unwrap();
        let log = WorkerLog::new(tmp.path().join("worker.log"));
        let mut reserve = Reserve::at(tmp.path().join("worker.reserve"));
        let mut tries = 0;
        let mut slept = Vec::new();
        let failures = land(
            || {
                tries += 1;
                match tries {
                    1..=3 => Err(full()),
                    4..=9 => Err(io::Error::from_raw_os_error(libc::EIO)),
                    _ => Ok(()),
                }
            },
            || false,
            &mut reserve,
            &log,
            "cleanup.json",
            |d| slept.push(d),
        );
        assert_eq!(failures, 9);
        let ms: Vec<u128> = slept.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        let notes = std::fs::read_to_string(tmp.path().join("worker.log")).unwrap();
        assert_eq!(
            notes.matches("cannot write cleanup.json").count(),
            2,
            "each new failure is noted once:\n{notes}"
        );
        assert!(notes.contains("cleanup.json written after 9 failed tries"));
    }

    #[test]
    fn a_record_whose_run_directory_is_gone_is_given_up_instead_of_retried_for_ever() {
        let tmp = tempfile::tempdir().unwrap();
        let log = WorkerLog::new(tmp.path().join("worker.log"));
        let mut reserve = Reserve::at(tmp.path().join("worker.reserve"));
        let run_dir = tmp.path().join("task");
        let mut slept = Vec::new();
        let failures = land(
            || write_json_atomic(&run_dir.join("exit.json"), &1),
            || !run_dir.exists(),
            &mut reserve,
            &log,
            "exit.json",
            |d| slept.push(d),
        );
        assert_eq!((failures, slept.len()), (1, 0), "given up at once");
        let notes = std::fs::read_to_string(tmp.path().join("worker.log")).unwrap();
        assert!(notes.contains("the run directory is gone"), "{notes}");
    }

    #[test]
    fn a_missing_file_in_a_run_directory_that_exists_is_still_retried() {
        let tmp = tempfile::tempdir().unwrap();
        let log = WorkerLog::new(tmp.path().join("worker.log"));
        let mut reserve = Reserve::at(tmp.path().join("worker.reserve"));
        let mut tries = 0;
        let failures = land(
            || {
                tries += 1;
                if tries == 1 {
                    Err(io::Error::from(io::ErrorKind::NotFound))
                } else {
                    Ok(())
                }
            },
            || false,
            &mut reserve,
            &log,
            "worker.json",
            |_| {},
        );
        assert_eq!(failures, 1);
    }
}
