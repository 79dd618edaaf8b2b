//! Scans shared between the workers of one home. When many runs end together (56 lanes of
//! one-second jobs), every worker sweeps the same process table at the same instant; each scan
//! reads every process born during the run, so the burst costs the machine 56 readings of the
//! table where one would answer them all. Here a worker that needs a scan first looks for a
//! published [`Snapshot`] that began after it asked; failing that, it takes the exchange's lock
//! and, unless a worker before it in the lock just published one, takes and publishes one
//! itself. A worker waiting on the lock while another reads the table then gets that reading.
//!
//! Nothing here changes what a scan decides: a snapshot holds reads, not verdicts, and each
//! worker applies its own rules to them, confirms every verdict of ancestry with fresh reads,
//! and signals only after its own fresh checks. It changes who reads: `<home>/sweep` is as
//! private as the home (0700), written only by the workers of this home.

use super::snapshot::{monotonic_ns, Snapshot};
use super::table::ProcessTable;
use nix::fcntl::{Flock, FlockArg};
use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// The largest snapshot a reader takes in: far above any real table (a few hundred bytes a
/// process), and a bound on what a file planted there can cost.
const LARGEST: u64 = 64 << 20;

/// Where the workers of one home meet to share scans.
#[derive(Debug, Clone)]
pub struct Exchange {
    dir: PathBuf,
    scope: String,
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
    /// The exchange in `dir` (`<home>/sweep`), made if missing. Refused when `dir` is not a
    /// directory of this user (a link, another user's) or this boot cannot be named.
    pub fn at(dir: PathBuf) -> io::Result<Exchange> {
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
        })
    }

    /// A snapshot that began after `asked_ns` and read what a scan looking at processes
    /// started at or after `since` reads. An error (the lock not had within `patience`, the
    /// table not listed) means: scan on your own.
    pub(super) fn snapshot_after<T: ProcessTable>(
        &self,
        table: &T,
        since: Option<u64>,
        asked_ns: u64,
        patience: Duration,
    ) -> Result<Had, Unshared> {
        let serves = |s: &Snapshot| s.serves(&self.scope, table.own_uid(), since, asked_ns);
        if let Some(snapshot) = self.latest().filter(serves) {
            return Ok(Had {
                snapshot,
                taken: false,
            });
        }
        let _held = self.lock(patience).map_err(Unshared::Exchange)?;
        // The worker before this one in the lock may just have published the reading asked for.
        if let Some(snapshot) = self.latest().filter(serves) {
            return Ok(Had {
                snapshot,
                taken: false,
            });
        }
        let began_ns = monotonic_ns().map_err(Unshared::Exchange)?;
        let snapshot =
            Snapshot::take(table, &self.scope, since, began_ns).map_err(Unshared::Listing)?;
        // Not published, it still serves this worker's scan.
        let _ = self.publish(&snapshot);
        Ok(Had {
            snapshot,
            taken: true,
        })
    }

    /// The published snapshot, if any can be read whole.
    fn latest(&self) -> Option<Snapshot> {
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
        serde_json::from_slice(&bytes).ok()
    }

    /// Replaces the published snapshot whole: a reader sees the old one or the new one.
    fn publish(&self, snapshot: &Snapshot) -> io::Result<()> {
        let staged = self.dir.join("latest.new");
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&staged)?;
        file.write_all(&serde_json::to_vec(snapshot).map_err(io::Error::other)?)?;
        std::fs::rename(staged, self.dir.join("latest"))
    }

    /// The exchange's lock, waited for at most `patience`: a worker stopped while it holds
    /// the lock must not hold every other sweep up. A wait given up on is left to a thread
    /// that lets the lock go the moment it gets it.
    fn lock(&self, patience: Duration) -> io::Result<Flock<File>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(self.dir.join("lock"))?;
        let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(held),
            Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
            Err((_, e)) => return Err(e.into()),
        };
        let (granted, grant) = mpsc::channel();
        std::thread::Builder::new()
            .name("sweep-lock".into())
            .spawn(move || {
                let held = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e);
                // Nobody waits any more: dropping the lock here lets it go.
                let _ = granted.send(held);
            })?;
        match grant.recv_timeout(patience) {
            Ok(held) => held.map_err(io::Error::from),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the sweep exchange's lock was held for over {patience:?}"),
            )),
        }
    }
}
