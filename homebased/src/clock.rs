//! The daemon's one clock. Every reading of "now" the daemon acts on (the times the store
//! keeps, the core's timers, time limits, retention, notices, checkpoint ages, Fleet stamps,
//! the delivery backoff) comes from the [`Clock`] that `daemon::serve` makes and hands to the
//! store, which gives it to the core, and to the supervisor, the delivery loop, Fleet and
//! the sampler. The CLI is another process and reads the system clock itself.
//!
//! It is the system clock. A test build (`cfg(test)`, or the `failpoints` feature the
//! end-to-end tests are built with) can move it ahead with [`Clock::advance`]: unit tests do
//! so instead of backdating rows, and end-to-end tests through `POST /v1/internal/clock`
//! (socket only), whose call wakes the core's tick so that what the move made due happens.
//! Workers started after a move are told how far ahead it is (`--clock-ahead-ms`), so the
//! times they record agree with the daemon's. A release build has neither the method nor
//! the route: its clock is a zero-sized reader of the system clock.
//!
//! Left on the system clock: the start stamps (`now_us`, `rundir::StartStamps`), which
//! measure one start across the daemon and the worker for the benchmark, and the monotonic
//! `Instant`s of waits that are about processes, not about the queue's time.

use homebased_shared::time::{self, Millis};

/// The daemon's reading of wall-clock time (milliseconds since the epoch). Clones read the
/// same clock: a move is seen by every holder.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    /// How far this clock runs ahead of the system's, in milliseconds: only test builds
    /// move it.
    #[cfg(any(test, feature = "failpoints"))]
    ahead: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    pub fn now_ms(&self) -> Millis {
        time::now_ms().saturating_add(self.ahead_ms())
    }

    /// How far the clock was moved ahead of the system's (0 in a release build).
    pub fn ahead_ms(&self) -> Millis {
        #[cfg(any(test, feature = "failpoints"))]
        {
            self.ahead.load(std::sync::atomic::Ordering::SeqCst)
        }
        #[cfg(not(any(test, feature = "failpoints")))]
        {
            0
        }
    }

    /// Moves the clock `by` ahead, for every holder at once; returns how far ahead of the
    /// system clock it is now. Test builds only.
    #[cfg(any(test, feature = "failpoints"))]
    pub fn advance(&self, by: std::time::Duration) -> Millis {
        let by = Millis::try_from(by.as_millis()).unwrap_or(Millis::MAX);
        let before = self
            .ahead
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |ahead| Some(ahead.saturating_add(by)),
            )
            .unwrap_or_else(|ahead| ahead);
        before.saturating_add(by)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_moved_clock_reads_ahead_of_the_system_for_every_clone() {
        let clock = Clock::system();
        let other = clock.clone();
        assert_eq!(clock.ahead_ms(), 0);
        let system = time::now_ms();
        assert!(clock.now_ms() >= system && clock.now_ms() < system + 60_000);
        assert_eq!(clock.advance(Duration::from_secs(120)), 120_000);
        assert_eq!(other.advance(Duration::from_millis(5)), 120_005);
        assert_eq!(clock.ahead_ms(), 120_005);
        assert!(other.now_ms() >= system + 120_005);
    }
}
