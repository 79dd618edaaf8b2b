//! Standby workers: `homebased-worker --standby` processes kept started ahead of need, so
//! that starting a run is a message to one ([`homebased_shared::standby`]) instead of a fork
//! and an exec on the start path. The keeper is a thread of its own: it fills its pool when
//! the daemon starts, one standby worker per lane (at most [`MOST_KEPT`]), because lanes that
//! started together end together and every one of their next runs then starts at the same
//! instant; and it refills only once the launches of a burst are over ([`REPLACE_AFTER`] with
//! no launch), so that the replacements' execs do not compete for the CPU with the starts
//! they replace. It stages as many run directories at the same moments (`super::staged`).
//!
//! Only the worker built beside the daemon is kept in standby. A worker named by
//! `HOMEBASED_WORKER` (a stand-in, a wrapper) is started per run with its arguments, as that
//! override has always been called.

use super::spawn::Detached;
use homebased_shared::home::Home;
use homebased_shared::standby;
use homebased_shared::sweep::SweepKey;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How long without a launch before the pool is refilled: a burst of starts (lanes that
/// ended together) is over by then.
const REPLACE_AFTER: Duration = Duration::from_millis(10);

/// A steady stream of launches closer together than [`REPLACE_AFTER`] still gets its pool
/// refilled this long after the first of them.
const REFILL_AT_THE_LATEST: Duration = Duration::from_millis(250);

/// The largest pool: a machine of more lanes starts the rest of a burst fresh, as before.
/// Eight covers an eight-card machine's burst. Beyond it a waiting worker costs more than it
/// saves: it is one more process that every sweep of the burst reads (it started after the
/// runs that are ending), and at 56 lanes a pool of 56 made the hand-over no faster than a
/// pool of one (docs/BENCHMARKS.md, "Hand-over at 8 and 56 lanes, and the human listing again").
pub const MOST_KEPT: usize = 8;

/// How many standby workers (and staged run directories) a daemon of `lanes` lanes keeps.
pub fn pool_size(lanes: usize) -> usize {
    lanes.clamp(1, MOST_KEPT)
}

/// A started, waiting `homebased-worker --standby`: the daemon's end of its socket and the
/// child to reap.
#[derive(Debug)]
pub struct Standby {
    child: Detached,
    socket: OwnedFd,
}

impl Standby {
    fn start(home: &Home, sweep_key: Option<&SweepKey>) -> io::Result<Standby> {
        let (ours, theirs) = standby::pair()?;
        let null = std::fs::File::open("/dev/null")?;
        let key_pipe = sweep_key.map(SweepKey::to_pipe).transpose()?;
        let mut args: Vec<std::ffi::OsString> = vec![
            standby::STANDBY_FLAG.into(),
            standby::room(&home.tasks_dir()),
        ];
        let mut fds = vec![(theirs.as_fd(), 0), (null.as_fd(), 1), (null.as_fd(), 2)];
        if let Some(pipe) = &key_pipe {
            args.extend([
                "--sweep-key-fd".into(),
                super::SWEEP_KEY_FD.to_string().into(),
            ]);
            fds.push((pipe.as_fd(), super::SWEEP_KEY_FD));
        }
        // Its own session, as every worker: it outlives the daemon once it runs a run.
        let child = super::spawn::in_new_session(super::worker_binary().as_os_str(), &args, &fds)?;
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
    ) -> io::Result<Detached> {
        // Already exited (someone ended it while it waited): reaped here, never handed a run.
        if let Some(status) = self.child.try_wait()? {
            return Err(io::Error::other(format!(
                "the standby worker had exited ({status:?})"
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

/// Keeps a pool of standby workers ready. Dropping it stops the keeper thread and closes the
/// sockets of the waiting workers, which then exit.
pub struct Keeper {
    pool: Arc<Mutex<VecDeque<Standby>>>,
    wanted: mpsc::Sender<Wanted>,
}

/// What the keeper thread is asked.
enum Wanted {
    /// Fill the pool (and the staged directories) to this size now: the daemon serves.
    Fill(usize),
    /// A standby worker was taken: refill once the launches stop.
    Refill,
}

impl Keeper {
    /// Starts the keeper's thread for `home`; it starts the standby workers and stages run
    /// and job directories (`super::staged`) once [`Keeper::prepare`] asks. `None` when
    /// workers are not kept in standby (an overridden worker) or no thread can be started.
    pub fn start(home: Home, sweep_key: Option<SweepKey>) -> Option<Keeper> {
        if super::worker_overridden() {
            return None;
        }
        let pool: Arc<Mutex<VecDeque<Standby>>> = Arc::default();
        let (wanted, requests) = mpsc::channel::<Wanted>();
        let filled = Arc::clone(&pool);
        std::thread::Builder::new()
            .name("standby-worker".into())
            .spawn(move || keep(&home, sweep_key.as_ref(), &filled, &requests))
            .map_err(|e| tracing::warn!(error = %e, "cannot start the standby keeper"))
            .ok()?;
        Some(Keeper { pool, wanted })
    }

    /// Prepares standby workers and staged directories for `lanes` lanes now.
    pub fn prepare(&self, lanes: usize) {
        let _ = self.wanted.send(Wanted::Fill(pool_size(lanes)));
    }

    /// The longest-waiting standby worker, if one is ready; the pool is refilled once the
    /// launches of this burst are over.
    pub fn take(&self) -> Option<Standby> {
        let taken = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front();
        let _ = self.wanted.send(Wanted::Refill);
        taken
    }
}

/// The keeper thread: ends when the keeper is dropped (the sender with it).
fn keep(
    home: &Home,
    sweep_key: Option<&SweepKey>,
    pool: &Mutex<VecDeque<Standby>>,
    requests: &mpsc::Receiver<Wanted>,
) {
    let mut size = 0;
    while let Ok(first) = requests.recv() {
        match first {
            Wanted::Fill(wanted) => size = wanted,
            Wanted::Refill => {
                // Wait out the burst: every launch of it restarts the wait, up to a bound.
                let began = std::time::Instant::now();
                loop {
                    match requests.recv_timeout(REPLACE_AFTER) {
                        Ok(Wanted::Fill(wanted)) => size = wanted,
                        Ok(Wanted::Refill) if began.elapsed() < REFILL_AT_THE_LATEST => {}
                        Ok(Wanted::Refill) | Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            }
        }
        if let Err(e) = super::staged::replenish(home, size) {
            // Starts make their directories themselves meanwhile.
            tracing::warn!(error = %e, "cannot stage a run directory");
        }
        let missing = || {
            let kept = pool.lock().unwrap_or_else(PoisonError::into_inner).len();
            size.saturating_sub(kept)
        };
        while missing() > 0 {
            // Started outside the lock, so that a launch meanwhile never waits on it.
            match Standby::start(home, sweep_key) {
                Ok(standby) => pool
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_back(standby),
                Err(e) => {
                    // The next launch starts its worker fresh, and asks again.
                    tracing::warn!(error = %e, "cannot start a standby worker");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_has_a_worker_per_lane_at_least_one_and_at_most_eight() {
        assert_eq!(
            pool_size(0),
            1,
            "a daemon with no lane yet still starts one"
        );
        assert_eq!(pool_size(1), 1);
        assert_eq!(pool_size(4), 4);
        assert_eq!(pool_size(8), 8);
        assert_eq!(pool_size(56), MOST_KEPT);
    }
}
