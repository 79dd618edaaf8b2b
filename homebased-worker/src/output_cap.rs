//! Keeps `output.log` within `[resource] output_limit` (SPEC section 5) while the workload
//! writes to it, without ever standing between the two: a thread looks at the file's size
//! every [`CHECK_EVERY`] and, past the limit, cuts its middle out in place
//! ([`homebased_shared::output_cap`] plans the cut). The workload's own `O_APPEND` writes go
//! on meanwhile; the kernel orders them against the collapse, so every one lands at the end.
//!
//! Between two checks the file can grow past the limit by what the workload writes in that
//! time; the last check, when the workload has ended, brings it back within the limit.

use crate::log::WorkerLog;
use homebased_shared::output_cap::{self, Cut};
use homebased_shared::rundir::RunDir;
use nix::errno::Errno;
use nix::fcntl::{fallocate, FallocateFlags};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the size is looked at: one `fstat`, cheap, and soon enough that a workload
/// writing hundreds of MB/s overshoots a 16 GiB limit by a fraction of a percent.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// The running check; [`OutputCap::finish`] ends it with one last cut.
pub struct OutputCap {
    /// Dropped or sent to: either wakes the thread to make its last check and end.
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl OutputCap {
    /// Starts the check of `dir`'s `output.log`. `None` (noted in `worker.log`) when the file
    /// cannot be opened for cutting: the run goes on without a bound.
    pub fn start(dir: &RunDir, limit: u64, log: &WorkerLog) -> Option<OutputCap> {
        let path = dir.output_log();
        // The workload can write into the run directory: never follow a link it left there.
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|file| match file.metadata()?.is_file() {
                true => Ok(file),
                false => Err(std::io::Error::other("not a regular file")),
            });
        let file = match opened {
            Ok(file) => file,
            Err(e) => {
                log.note(format!(
                    "cannot open {} to bound it ({e}); output_limit is not enforced",
                    path.display()
                ));
                return None;
            }
        };
        // An adopting worker continues the count of the worker it replaces.
        let shift = output_cap::read_shift(&file, limit).unwrap_or(0);
        let mut cutter = Cutter {
            file,
            limit,
            shift,
            head_ends_line: None,
            log: log.clone(),
            failed: false,
        };
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("output-cap".into())
            .spawn(move || loop {
                let last = !matches!(
                    stopped.recv_timeout(CHECK_EVERY),
                    Err(RecvTimeoutError::Timeout)
                );
                cutter.check();
                if last {
                    return;
                }
            });
        match thread {
            Ok(thread) => Some(OutputCap { stop, thread }),
            Err(e) => {
                log.note(format!(
                    "cannot start the output check ({e}); output_limit is not enforced"
                ));
                None
            }
        }
    }

    /// Makes the last check (the workload and its log followers have ended) and waits for it.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

struct Cutter {
    /// Opened without `O_APPEND`: the marker block is written at its place, and on Linux a
    /// positioned write to an append descriptor lands at the end.
    file: File,
    limit: u64,
    shift: u64,
    /// Read once the head is whole; it never changes after.
    head_ends_line: Option<bool>,
    log: WorkerLog,
    /// A cut failed; noted once, tried again at each check.
    failed: bool,
}

impl Cutter {
    fn check(&mut self) {
        let size = match self.file.metadata() {
            Ok(m) => m.len(),
            Err(_) => return,
        };
        let head_ends_line = match self.head_ends_line {
            Some(ends) => ends,
            None if size > self.limit => {
                let mut last = [0u8];
                let at = output_cap::head(self.limit) - 1;
                if self.file.read_exact_at(&mut last, at).is_err() {
                    return;
                }
                *self.head_ends_line.insert(last[0] == b'\n')
            }
            None => return,
        };
        let Some(cut) = output_cap::plan(size, self.limit, self.shift, head_ends_line) else {
            return;
        };
        match self.cut(&cut) {
            Ok(()) => {
                if self.failed {
                    self.failed = false;
                    self.log.note("output.log is cut again");
                }
            }
            Err(e) if !self.failed => {
                self.failed = true;
                self.log.note(format!(
                    "cannot cut output.log to its limit: {e}; it grows until a cut succeeds"
                ));
            }
            Err(_) => {}
        }
    }

    /// Reads the bytes the marker block carries, collapses the middle, then writes the block.
    /// The collapse first: if it fails (a filesystem without it, `EOPNOTSUPP`) nothing
    /// changed. A worker killed between the two leaves the old block before the newest
    /// output, its number short of the truth.
    fn cut(&mut self, cut: &Cut) -> Result<(), String> {
        let mut block = cut.opening.clone().into_bytes();
        let opening = block.len();
        block.resize(opening + cut.carried_len as usize, 0);
        self.file
            .read_exact_at(&mut block[opening..], cut.carried_from)
            .map_err(|e| format!("cannot read output.log: {e}"))?;
        let to_off = |n: u64| i64::try_from(n).map_err(|_| format!("offset {n} too large"));
        fallocate(
            &self.file,
            FallocateFlags::FALLOC_FL_COLLAPSE_RANGE,
            to_off(cut.offset)?,
            to_off(cut.len)?,
        )
        .map_err(|e| match e {
            Errno::EOPNOTSUPP => {
                "this filesystem cannot collapse a range of a file (ext4 and xfs can)".into()
            }
            e => format!("fallocate(COLLAPSE_RANGE): {e}"),
        })?;
        // The middle is gone whatever happens to the marker: the next cut counts from here.
        self.shift = cut.shift;
        self.file
            .write_all_at(&block, cut.block_at)
            .map_err(|e| format!("cannot write the marker: {e}"))
    }
}
