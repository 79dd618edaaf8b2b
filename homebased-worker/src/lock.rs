//! `runner.lock`: held exclusively for the worker's whole life, so "the lock is free" means
//! "the worker is gone" (DESIGN "Observing runs"). The kernel releases it when this process
//! exits, however it exits.

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// The held lock. Dropping it unlocks, so it lives until the attempt is over.
#[derive(Debug)]
pub struct RunnerLock {
    _held: Flock<File>,
}

/// Takes over descriptor `fd`, which the daemon opened on `path` and locked before exec.
///
/// Close-on-exec is set first, so that the workload can never inherit the lock and keep the
/// run looking alive after the worker is gone. The descriptor must name `path` itself, and the
/// lock is (re)asserted non-blocking on it: on the daemon's own description that is a no-op, and
/// it fails if another process holds the lock.
pub fn adopt(fd: RawFd, path: &Path) -> Result<RunnerLock, String> {
    if fd <= libc::STDERR_FILENO {
        return Err(format!(
            "--lock-fd {fd}: standard streams cannot carry the lock"
        ));
    }
    // SAFETY: F_SETFD on an integer descriptor touches no memory; an fd that is not open fails
    // with EBADF, which is checked.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
        return Err(format!(
            "--lock-fd {fd}: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the descriptor is open (F_SETFD succeeded above) and nothing else in this
    // process refers to it: the daemon handed it over across exec and this is its only use.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let handed = file
        .metadata()
        .map_err(|e| format!("--lock-fd {fd}: {e}"))?;
    let named = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if (handed.dev(), handed.ino()) != (named.dev(), named.ino()) {
        return Err(format!(
            "--lock-fd {fd} is not {}; refusing to run without the run's lock",
            path.display()
        ));
    }
    lock(file, path)
}

/// Opens `path` and takes the lock without waiting: used when no daemon handed one over.
pub fn take(path: &Path) -> Result<RunnerLock, String> {
    // std opens with O_CLOEXEC, so the workload never inherits this descriptor.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    lock(file, path)
}

fn lock(file: File, path: &Path) -> Result<RunnerLock, String> {
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => Ok(RunnerLock { _held: held }),
        Err((_, Errno::EWOULDBLOCK)) => Err(format!(
            "{} is held by another process: another worker owns this run",
            path.display()
        )),
        Err((_, e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}
