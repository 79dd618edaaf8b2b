//! Scans shared between the workers of one home. When many runs end together (56 lanes of
//! one-second jobs), every worker sweeps the same process table at the same instant; each scan
//! reads every process born during the run, so the burst costs the machine 56 readings of the
//! table where one would answer them all. Here a worker that needs a scan first looks for a
//! published [`Snapshot`] that began after it asked; failing that, it waits for the exchange's
//! lock and, unless a snapshot published meanwhile serves it, takes and publishes one itself.
//! While it waits, every publish wakes it ([`Doorbell`]): a worker that asked while another
//! read the table is served by the next reading, whoever takes it.
//!
//! Nothing here changes what a scan decides: a snapshot holds reads, not verdicts, and each
//! worker applies its own rules to them, confirms every verdict of ancestry with fresh reads,
//! and signals only after its own fresh checks. It changes who reads.
//!
//! `<home>/sweep` is as private as the home (0700), but a workload runs as the same user and
//! can write there: delete the folder, plant a file, a link or a FIFO, hold the lock, or write
//! a snapshot of its own that leaves out the process it wants to outlive the cleanup. So a
//! snapshot is taken in only when it carries a MAC under the daemon's [`SweepKey`], which no
//! file holds; anything else found there (missing, stale, truncated, replaced, forged, not a
//! regular file) is passed over and the worker reads the table itself. Every open here is
//! without following a link and without waiting (a FIFO answers at once or not at all), a
//! staged snapshot is a new file of this worker's own (`O_EXCL`), and every wait is bounded by
//! the exchange's patience.

use super::key::SweepKey;
use super::snapshot::{monotonic_ns, Snapshot};
use super::table::ProcessTable;
use nix::fcntl::{Flock, FlockArg};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest snapshot a reader takes in: far above any real table (a few hundred bytes a
/// process), and a bound on what a file planted there can cost.
const LARGEST: u64 = 64 << 20;

/// Where the workers of one home meet to share scans.
#[derive(Debug, Clone)]
pub struct Exchange {
    dir: PathBuf,
    scope: String,
    /// Signs what this worker publishes and proves what it takes in.
    key: SweepKey,
}

/// Why the exchange gave no snapshot.
#[derive(Debug)]
pub(super) enum Unshared {
    /// The exchange itself failed (its lock held too long, its folder unusable): scan alone.
    Exchange(io::Error),
    /// The table could not be listed: a scan alone cannot list it either.
    Listing(io::Error),
}

/// A snapshot for one scan, and whether this worker took it.
#[derive(Debug)]
pub(super) struct Had {
    pub snapshot: Snapshot,
    pub taken: bool,
}

impl Exchange {
    /// The exchange in `dir` (`<home>/sweep`) under `key` (the daemon's, handed to this
    /// worker), made if missing. Refused when `dir` is not a directory of this user (a link,
    /// another user's) or this boot cannot be named.
    pub fn at(dir: PathBuf, key: SweepKey) -> io::Result<Exchange> {
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(&dir)?;
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a directory of this user", dir.display()),
            ));
        }
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
        let namespace = std::fs::read_link("/proc/self/ns/pid")?;
        Ok(Exchange {
            dir,
            scope: format!("{}/{}", boot.trim(), namespace.display()),
            key,
        })
    }

    /// A snapshot that began after `asked_ns` and read what a scan looking at processes
    /// started at or after `since`, with `horizon` ([`super::scan::Rules::horizon`]), reads.
    /// One this worker takes is based on the last published one (its old processes taken
    /// over unread, `super::snapshot`), with the horizon for its floor. An error (neither such a snapshot nor the lock had
    /// within `patience`, the table not listed) means: scan on your own.
    ///
    /// A worker waiting here looks at every snapshot published while it waits, not only at
    /// the one it finds when it gets the lock: in a burst the lock goes to whoever asks at the
    /// right instant, not to whoever waited longest, and a worker that needed the lock to see
    /// a reading that already served it waited through a dozen readings at the tail.
    pub(super) fn snapshot_after<T: ProcessTable>(
        &self,
        table: &T,
        (since, horizon): (Option<u64>, Option<u64>),
        asked_ns: u64,
        patience: Duration,
    ) -> Result<Had, Unshared> {
        let serves = |s: &Snapshot| s.serves(&self.scope, table.own_uid(), since, asked_ns);
        let served = |snapshot| Had {
            snapshot,
            taken: false,
        };
        if let Some(snapshot) = self.latest_after(asked_ns).filter(serves) {
            return Ok(served(snapshot));
        }
        let held = match self.lock_or_published(asked_ns, patience, serves) {
            Ok(Waited::Locked(held)) => held,
            Ok(Waited::Published(snapshot)) => return Ok(served(snapshot)),
            Err(e) => return Err(Unshared::Exchange(e)),
        };
        // A reading published between this worker's last look and the lock serves it; any
        // other is the base of this worker's own.
        let base = match self.latest_after(0) {
            Some(snapshot) if snapshot.began_ns > asked_ns && serves(&snapshot) => {
                self.release(held);
                return Ok(served(snapshot));
            }
            latest => latest,
        };
        let began_ns = monotonic_ns().map_err(Unshared::Exchange)?;
        let taken = Snapshot::take(
            table,
            &self.scope,
            since,
            (horizon, base.as_ref()),
            began_ns,
        );
        // Not published, it still serves this worker's scan.
        if let Ok(snapshot) = &taken {
            let _ = self.publish(snapshot);
        }
        self.release(held);
        Ok(Had {
            snapshot: taken.map_err(Unshared::Listing)?,
            taken: true,
        })
    }

    /// The exchange's lock, or a published snapshot that `serves`, whichever comes first
    /// within `patience`: a worker stopped while it holds the lock must not hold every other
    /// sweep up. The wait is woken by each publish and each release ([`Doorbell`]).
    fn lock_or_published(
        &self,
        asked_ns: u64,
        patience: Duration,
        serves: impl Fn(&Snapshot) -> bool,
    ) -> io::Result<Waited> {
        let deadline = Instant::now() + patience;
        let mut file = self.lock_file()?;
        // Made on the first wait, before one more look: a publish or a release after that
        // look rings it. `Some(None)`: none could be made (no inotify instance left to this
        // user), and the wait polls.
        let mut doorbell: Option<Option<Doorbell>> = None;
        let mut look = false;
        loop {
            if look {
                if let Some(snapshot) = self.latest_after(asked_ns).filter(&serves) {
                    return Ok(Waited::Published(snapshot));
                }
            }
            file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(held) => return Ok(Waited::Locked(held)),
                Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
                Err((_, e)) => return Err(e.into()),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the sweep exchange's lock was held for over {patience:?}"),
                ));
            }
            look = match &doorbell {
                None => {
                    doorbell = Some(Doorbell::at(&self.dir).ok());
                    true
                }
                Some(Some(bell)) => bell.wait(left.min(UNRUNG))?,
                Some(None) => {
                    std::thread::sleep(left.min(POLL));
                    true
                }
            };
        }
    }

    /// The lock file, only if it is a regular file: a FIFO or a device planted there would
    /// take any lock at once (or never), and prove nothing about other workers.
    fn lock_file(&self) -> io::Result<File> {
        let file = crate::rundir::open_lock_file(&self.dir.join("lock"))?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the sweep exchange's lock is not a regular file",
            ));
        }
        Ok(file)
    }

    /// Lets the lock go and rings the waiters' doorbell: a release is no file event of its
    /// own, so the lock file's times are touched after it.
    fn release(&self, held: Flock<File>) {
        let file = match held.unlock() {
            Ok(file) => file,
            // Closing the file lets the lock go too.
            Err((held, _)) => return drop(held),
        };
        let now = nix::sys::time::TimeSpec::UTIME_NOW;
        let _ = nix::sys::stat::futimens(&file, &now, &now);
    }

    /// The boot and pid namespace this exchange's snapshots belong to.
    #[cfg(test)]
    pub(super) fn scope(&self) -> &str {
        &self.scope
    }

    /// The published snapshot, if it began after `asked_ns`, can be read whole and carries
    /// this key's MAC. Its first line is `<began> <mac>`: a waiter woken by every publish of a
    /// burst parses only the one that can serve it (the instant is only a filter: what serves
    /// is decided on the snapshot itself, whose own `began_ns` must match it). The MAC covers
    /// the instant and every byte after the line, so nothing of it can be changed or cut.
    fn latest_after(&self, asked_ns: u64) -> Option<Snapshot> {
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.dir.join("latest"))
            .ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.len() > LARGEST {
            return None;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
        (&mut file).take(LARGEST).read_to_end(&mut bytes).ok()?;
        let (line, body) = bytes.split_at(bytes.iter().position(|b| *b == b'\n')?);
        let body = &body[1..];
        let (began_text, mac) = line.split_at(line.iter().position(|b| *b == b' ')?);
        let began: u64 = std::str::from_utf8(began_text).ok()?.parse().ok()?;
        if began <= asked_ns || !self.key.verify(&[began_text, b"\n", body], &mac[1..]) {
            return None;
        }
        let snapshot = Snapshot::decode(body)?;
        (snapshot.began_ns == began).then_some(snapshot)
    }

    /// Replaces the published snapshot whole: a reader sees the old one or the new one. The
    /// snapshot is staged in a file this worker creates new (`O_EXCL`: never one planted under
    /// the name, a FIFO that would hold the write forever among them), then renamed into place.
    pub(super) fn publish(&self, snapshot: &Snapshot) -> io::Result<()> {
        let staged = self.dir.join(format!("latest.{}.new", std::process::id()));
        // One of this pid's own, left by an earlier worker of the same pid that was killed
        // between its create and its rename, or something planted under its name.
        match std::fs::remove_file(&staged) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&staged)?;
        let began = snapshot.began_ns.to_string();
        let body = snapshot.encode()?;
        let mac = self.key.sign(&[began.as_bytes(), b"\n", &body]);
        let mut bytes = Vec::with_capacity(began.len() + mac.len() + body.len() + 2);
        bytes.extend_from_slice(format!("{began} {mac}\n").as_bytes());
        bytes.extend_from_slice(&body);
        let written = file
            .write_all(&bytes)
            .and_then(|()| std::fs::rename(&staged, self.dir.join("latest")));
        if written.is_err() {
            let _ = std::fs::remove_file(&staged);
        }
        written
    }
}

/// What a wait at the exchange came to.
enum Waited {
    Locked(Flock<File>),
    Published(Snapshot),
}

/// The longest a waiter sleeps without a ring: a holder that ended without releasing (killed)
/// rings nothing, and the kernel lets its lock go.
const UNRUNG: Duration = Duration::from_millis(20);

/// How often a waiter without a doorbell looks.
const POLL: Duration = Duration::from_millis(2);

/// Wakes a waiter when a snapshot is published (`latest` renamed into place) or the lock is
/// let go (the lock file's times touched by [`Exchange::release`]).
struct Doorbell {
    inotify: Inotify,
}

impl Doorbell {
    fn at(dir: &Path) -> io::Result<Doorbell> {
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)?;
        inotify.add_watch(dir, AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ATTRIB)?;
        Ok(Doorbell { inotify })
    }

    /// Waits up to `timeout` for a ring; whether a snapshot may have been published since
    /// the last wait (a timeout counts as one: the waiter looks again).
    fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let millis = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(millis)) {
            Ok(0) => return Ok(true),
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(true),
            Err(e) => return Err(e.into()),
        }
        let mut published = false;
        loop {
            match self.inotify.read_events() {
                Ok(events) => {
                    published |= events.iter().any(|event| {
                        event.mask.contains(AddWatchFlags::IN_MOVED_TO)
                            || event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                    });
                }
                Err(nix::errno::Errno::EAGAIN) => return Ok(published),
                Err(e) => return Err(e.into()),
            }
        }
    }
}
