//! Delivery evidence under `<home>/jobs/<job>/delivery/` (SPEC section 1): `delivery.lock`,
//! held while one of the job's events is being delivered and until its outcome is recorded,
//! so two daemons never deliver the same job at once; and `callback.log`, one entry per
//! attempt with its time, seq, event, sink, result and (for a command) its output.

use fs2::FileExt;
use homebased_shared::home::Home;
use homebased_shared::ids::JobId;
use homebased_shared::time::{now_ms, rfc3339};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub const DELIVERY_LOCK: &str = "delivery.lock";
pub const CALLBACK_LOG: &str = "callback.log";

/// The delivery directory of one job.
#[derive(Debug, Clone)]
pub struct JobDelivery {
    dir: PathBuf,
}

/// The held `delivery.lock` of one job; released on drop.
#[derive(Debug)]
pub struct DeliveryLock {
    _file: File,
}

impl JobDelivery {
    /// The job's delivery directory, created (0700) if needed.
    pub fn open(home: &Home, job: JobId) -> io::Result<JobDelivery> {
        let dir = home.job_delivery_dir(job);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(JobDelivery { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes `delivery.lock` without waiting: `None` when another process holds it.
    pub fn try_lock(&self) -> io::Result<Option<DeliveryLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(self.dir.join(DELIVERY_LOCK))?;
        match file.try_lock_exclusive() {
            Ok(()) => Ok(Some(DeliveryLock { _file: file })),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.raw_os_error() == fs2::lock_contended_error().raw_os_error() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `callback.log`, opened for appending (a command's output goes straight into it).
    pub fn callback_log(&self) -> io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.dir.join(CALLBACK_LOG))
    }
}

/// Appends one line to `callback.log`, prefixed with the current time.
pub fn log_line(log: &mut File, text: &str) -> io::Result<()> {
    let line = format!("{} {text}\n", rfc3339(now_ms()));
    log.write_all(line.as_bytes())?;
    log.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_exclusive_and_the_log_appends() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let job = JobId::new();
        let delivery = JobDelivery::open(&home, job).unwrap();
        assert_eq!(delivery.dir(), home.job_delivery_dir(job));
        let held = delivery.try_lock().unwrap();
        assert!(held.is_some());
        assert!(delivery.try_lock().unwrap().is_none(), "held elsewhere");
        drop(held);
        assert!(delivery.try_lock().unwrap().is_some(), "released on drop");

        let mut log = delivery.callback_log().unwrap();
        log_line(&mut log, "seq=1 event=JOB_SUCCEEDED sink=inbox delivered").unwrap();
        log_line(&mut delivery.callback_log().unwrap(), "seq=2 failed").unwrap();
        let text = std::fs::read_to_string(delivery.dir().join(CALLBACK_LOG)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].ends_with("seq=1 event=JOB_SUCCEEDED sink=inbox delivered"));
        assert!(lines[1].ends_with("seq=2 failed"));
    }
}
