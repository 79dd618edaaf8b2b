//! `daemon.lock`: held by the one running daemon of a home for its whole life. It also holds
//! the daemon's pid, for `daemon stop` to wait on.

use fs2::FileExt;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::home::Home;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};

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
        if file.try_lock_exclusive().is_err() {
            return Err(super::already_running(home));
        }
        Ok(DaemonLock { file })
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
