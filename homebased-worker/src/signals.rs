//! Signals, without handlers that do work: SIGTERM and SIGINT set a stop flag, and every
//! signal the worker waits for (those two and SIGCHLD) writes a byte to a self-pipe so that a
//! wait ends at once instead of at the next poll. A run whose `run.json` says
//! `stop_on_term: false` (the batch step of a Slurm job, where Slurm's TERM reaches every
//! process) takes SIGTERM only as a wake-up to look for `control/stop`.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct Signals {
    /// Set by SIGTERM: the daemon's restart and cancel paths stop a run this way.
    term: Arc<AtomicBool>,
    /// Set by SIGINT.
    interrupt: Arc<AtomicBool>,
    /// Whether a SIGTERM is a stop request (`RunSpec::stop_on_term`); until the run is read,
    /// it is.
    term_stops: AtomicBool,
    /// Read end of the self-pipe: readable once a watched signal arrived since the last drain.
    wake: UnixStream,
}

impl Signals {
    pub fn install() -> io::Result<Signals> {
        let term = Arc::new(AtomicBool::new(false));
        let interrupt = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(SIGTERM, Arc::clone(&term))?;
        signal_hook::flag::register(SIGINT, Arc::clone(&interrupt))?;
        // std creates both ends close-on-exec: the workload inherits neither.
        let (wake, write) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        for signal in [SIGTERM, SIGINT, SIGCHLD] {
            signal_hook::low_level::pipe::register(signal, write.try_clone()?)?;
        }
        Ok(Signals {
            term,
            interrupt,
            term_stops: AtomicBool::new(true),
            wake,
        })
    }

    /// From now on a SIGTERM is a stop request (`true`, the default) or only a wake-up.
    pub fn set_term_stops(&self, stops: bool) {
        self.term_stops.store(stops, Ordering::SeqCst);
    }

    /// True once SIGINT arrived, or SIGTERM while it is a stop request.
    pub fn stop_signalled(&self) -> bool {
        self.interrupt.load(Ordering::SeqCst)
            || (self.term_stops.load(Ordering::SeqCst) && self.term.load(Ordering::SeqCst))
    }

    /// Waits until `fd` is readable (or closed at the other end): true; or until SIGTERM or
    /// SIGINT arrived: false. Other signals (SIGCHLD) only wake it to look again.
    pub fn wait_readable(&self, fd: BorrowedFd<'_>) -> bool {
        loop {
            if self.stop_signalled() {
                return false;
            }
            let mut fds = [
                PollFd::new(fd, PollFlags::POLLIN),
                PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
            ];
            let ready = poll(&mut fds, PollTimeout::NONE);
            let readable = fds[0].revents().is_some_and(|r| !r.is_empty());
            self.drain();
            if ready.is_ok() && readable && !self.stop_signalled() {
                return true;
            }
        }
    }

    /// Sleeps up to `max`, less if a watched signal arrives (or arrived since the last call:
    /// the byte stays in the pipe, so a signal between a check and this sleep is not lost).
    pub fn sleep(&self, max: Duration) {
        // Below a millisecond poll would round to zero and spin.
        let timeout =
            PollTimeout::try_from(max.max(Duration::from_millis(1))).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(self.wake.as_fd(), PollFlags::POLLIN)];
        // EINTR is a wake-up like any other: the caller re-checks its conditions.
        let _ = poll(&mut fds, timeout);
        self.drain();
    }

    /// Empties the self-pipe: the signals it told of have been looked at.
    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use nix::sys::signal::{raise, Signal};

    /// Slurm's TERM reaches the worker of a Slurm run as well as its workload: there it only
    /// wakes the worker, while SIGINT still stops.
    #[test]
    fn a_term_is_a_stop_unless_the_run_says_otherwise() {
        let signals = Signals::install().unwrap();
        assert!(!signals.stop_signalled());
        raise(Signal::SIGTERM).unwrap();
        assert!(signals.stop_signalled());
        signals.set_term_stops(false);
        assert!(!signals.stop_signalled());
        // The TERM still woke it: a sleep ends at once.
        let began = std::time::Instant::now();
        signals.sleep(Duration::from_secs(30));
        assert!(began.elapsed() < Duration::from_secs(30));
        raise(Signal::SIGINT).unwrap();
        assert!(signals.stop_signalled());
    }
}
