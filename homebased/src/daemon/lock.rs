//! `daemon.lock`: held by the one running daemon of a home for its whole life. It also holds
//! the daemon's pid, for `daemon stop` to wait on.

use fs2::FileExt;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::home::Home;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::time::{Duration, Instant};

/// How long a start waits for the lock when the daemon that last held it is dead. A child
/// that daemon was starting (a worker, a probe) holds a copy of the lock from its fork until
/// its exec closes it; a start right after a crash would otherwise be refused for a daemon
/// that no longer exists.
const DEAD_HOLDER_GRACE: Duration = Duration::from_secs(3);

pub struct DaemonLock {
    /// Holding the open file holds the lock; dropping it releases.
    file: File,
}

impl DaemonLock {
    /// Takes the lock without waiting; `daemon_already_running` if another daemon holds it.
    /// The file keeps what it held (the last daemon's pid) until [`DaemonLock::record_pid`].
    pub fn acquire(home: &Home) -> ApiResult<DaemonLock> {
        let path = home.daemon_lock();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| ApiError::internal(format!("cannot open {}: {e}", path.display())))?;
        if file.try_lock_exclusive().is_ok() {
            return Ok(DaemonLock { file });
        }
        if recorded_pid(home).is_some_and(alive) {
            return Err(super::already_running(home));
        }
        let waited_from = Instant::now();
        while waited_from.elapsed() < DEAD_HOLDER_GRACE {
            std::thread::sleep(Duration::from_millis(20));
            if file.try_lock_exclusive().is_ok() {
                return Ok(DaemonLock { file });
            }
            if recorded_pid(home).is_some_and(alive) {
                break;
            }
        }
        Err(super::already_running(home))
    }

    /// Writes this daemon's pid into the lock. Only the holder writes it, and only once it
    /// will serve: a refused second daemon, or a daemon that refuses a damaged store, leaves
    /// the file as it found it.
    pub fn record_pid(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.rewind();
        let _ = writeln!(self.file, "{}", std::process::id());
        let _ = self.file.sync_all();
    }
}

/// True while process `pid` exists (a zombie included: it is not yet reaped).
fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// True while some daemon holds the lock of `home`.
pub fn is_held(home: &Home) -> bool {
    let Ok(file) = File::open(home.daemon_lock()) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = FileExt::unlock(&file);
            false
        }
        Err(_) => true,
    }
}

/// The pid written by the daemon that holds (or last held) the lock.
pub fn recorded_pid(home: &Home) -> Option<u32> {
    let mut text = String::new();
    File::open(home.daemon_lock())
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> (tempfile::TempDir, Home) {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().to_path_buf());
        (tmp, home)
    }

    /// Holds the lock through an open file description of its own, as a forked child does.
    fn hold(home: &Home) -> File {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(home.daemon_lock())
            .unwrap();
        file.try_lock_exclusive().unwrap();
        file
    }

    fn record(home: &Home, pid: u32) {
        std::fs::write(home.daemon_lock(), format!("{pid}\n")).unwrap();
    }

    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    #[test]
    fn a_start_after_a_crash_waits_for_a_child_that_still_holds_a_copy_of_the_lock() {
        let (_tmp, home) = home();
        let copy = hold(&home);
        record(&home, dead_pid());
        let exec = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(copy);
        });
        let lock = DaemonLock::acquire(&home);
        exec.join().unwrap();
        assert!(lock.is_ok(), "{:?}", lock.err());
    }

    #[test]
    fn a_start_beside_a_live_daemon_is_refused() {
        let (_tmp, home) = home();
        let _held = hold(&home);
        record(&home, std::process::id());
        let refused = DaemonLock::acquire(&home).err().expect("refused");
        assert_eq!(
            refused.code,
            homebased_shared::error::ErrorCode::DaemonAlreadyRunning
        );
    }

    #[test]
    fn a_lock_still_held_after_the_grace_is_refused() {
        let (_tmp, home) = home();
        let _held = hold(&home);
        record(&home, dead_pid());
        let refused = DaemonLock::acquire(&home).err().expect("refused");
        assert_eq!(
            refused.code,
            homebased_shared::error::ErrorCode::DaemonAlreadyRunning
        );
    }
}
