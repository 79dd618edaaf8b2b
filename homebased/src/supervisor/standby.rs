//! The standby worker: one `homebased-worker --standby` kept started ahead of need, so that
//! starting a run is a message to it ([`homebased_shared::standby`]) instead of a fork and an
//! exec on the start path. The keeper is a thread of its own: it starts the first standby
//! worker when the daemon starts and a replacement a moment after each one is taken, so that
//! the replacement's exec does not compete for the CPU with the start it replaces. It stages
//! the next run's directories at the same moments (`super::staged`).
//!
//! Only the worker built beside the daemon is kept in standby. A worker named by
//! `HOMEBASED_WORKER` (a stand-in, a wrapper) is started per run with its arguments, as that
//! override has always been called.

use homebased_shared::home::Home;
use homebased_shared::standby;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long after a standby worker is taken its replacement is started.
const REPLACE_AFTER: Duration = Duration::from_millis(10);

/// A started, waiting `homebased-worker --standby`: the daemon's end of its socket and the
/// child to reap.
#[derive(Debug)]
pub struct Standby {
    child: Child,
    socket: OwnedFd,
}

impl Standby {
    fn start(home: &Home) -> io::Result<Standby> {
        let (ours, theirs) = standby::pair()?;
        let mut cmd = Command::new(super::worker_binary());
        cmd.arg(standby::STANDBY_FLAG)
            .arg(standby::room(&home.tasks_dir()))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only an async-signal-safe call (setsid) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // Its own session, as every worker: it outlives the daemon once it runs a run.
                nix::unistd::setsid().map_err(io::Error::from)?;
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        Ok(Standby {
            child,
            socket: ours,
        })
    }

    /// Hands it the run described by `args`, with the locked `lock` and the open `log`; it
    /// is then that run's worker. On an error (it is gone, say) it is ended and reaped, and
    /// the caller starts a fresh worker.
    pub fn hand_over(
        mut self,
        args: &[std::ffi::OsString],
        lock: &std::fs::File,
        log: &std::fs::File,
    ) -> io::Result<Child> {
        // Already exited (someone ended it while it waited): reaped here, never handed a run.
        if let Some(status) = self.child.try_wait()? {
            return Err(io::Error::other(format!(
                "the standby worker had exited ({status})"
            )));
        }
        match standby::send(self.socket.as_fd(), args, lock.as_fd(), log.as_fd()) {
            Ok(()) => Ok(self.child),
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                Err(e)
            }
        }
    }
}

/// Keeps one standby worker ready. Dropping it stops the keeper thread and closes the
/// socket of the waiting worker, which then exits.
pub struct Keeper {
    slot: Arc<Mutex<Option<Standby>>>,
    wanted: mpsc::Sender<Duration>,
}

impl Keeper {
    /// Starts the keeper's thread for `home`; it starts the first standby worker and stages
    /// the first run and job directories (`super::staged`) once [`Keeper::prepare`] asks.
    /// `None` when workers are not kept in standby (an overridden worker) or no thread can
    /// be started.
    pub fn start(home: Home) -> Option<Keeper> {
        if super::worker_overridden() {
            return None;
        }
        let slot: Arc<Mutex<Option<Standby>>> = Arc::default();
        let (wanted, requests) = mpsc::channel::<Duration>();
        let filled = Arc::clone(&slot);
        std::thread::Builder::new()
            .name("standby-worker".into())
            .spawn(move || {
                // Ends when the keeper is dropped (the sender with it).
                while let Ok(after) = requests.recv() {
                    std::thread::sleep(after);
                    // A burst of launches asked several times: one replacement answers all.
                    while requests.try_recv().is_ok() {}
                    if let Err(e) = super::staged::replenish(&home) {
                        // Starts make their directories themselves meanwhile.
                        tracing::warn!(error = %e, "cannot stage a run directory");
                    }
                    if filled
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_some()
                    {
                        continue;
                    }
                    // Started outside the lock, so that a launch meanwhile never waits on it.
                    match Standby::start(&home) {
                        Ok(standby) => {
                            let mut slot = filled.lock().unwrap_or_else(PoisonError::into_inner);
                            // Only this thread fills the slot, so it is still empty.
                            *slot = Some(standby);
                        }
                        // The next launch starts its worker fresh, and asks again.
                        Err(e) => tracing::warn!(error = %e, "cannot start a standby worker"),
                    }
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the standby keeper"))
            .ok()?;
        Some(Keeper { slot, wanted })
    }

    /// Prepares a standby worker and staged directories now.
    pub fn prepare(&self) {
        let _ = self.wanted.send(Duration::ZERO);
    }

    /// The waiting standby worker, if one is ready; a replacement is started shortly after.
    pub fn take(&self) -> Option<Standby> {
        let taken = self
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let _ = self.wanted.send(REPLACE_AFTER);
        taken
    }
}
