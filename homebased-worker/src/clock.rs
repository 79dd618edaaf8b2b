//! The worker's clock: the wall-clock times its records carry (the workload's start,
//! `ended_at`, `finished_at`), its log's timestamps, and the pauses between the tries of a
//! record that does not land ([`crate::records`]). One per process, set once at the start of
//! the attempt ([`start`]) from the command line.
//!
//! It is the system clock. A test build (the `failpoints` feature) accepts two arguments
//! that a release build refuses as unknown options:
//! - `--clock-ahead-ms N`: the clock reads N ms ahead of the system's. The daemon passes its
//!   own lead when an end-to-end test moved its clock (`homebased/src/clock.rs`), so that the
//!   times this worker records read as the daemon's do.
//! - `--clock-skips-pauses`: a pause moves the clock forward by its length instead of
//!   waiting for it (after a real millisecond, so that a loop of them yields the CPU): a test
//!   sees many tries of a record, far apart on this clock, without waiting for them.
//!
//! Left on the system clock: the start stamps (`now_us`, `rundir::StartStamps`), which
//! measure one start across the daemon and the worker, and the monotonic waits for
//! processes (grace periods, reaping, the cleanup bound).

use homebased_shared::time::{self, Millis};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

/// How the clock of this worker runs: the system's unless a test build was told otherwise
/// on its command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Setting {
    /// `--clock-ahead-ms`: how far ahead of the system clock the clock starts.
    pub ahead_ms: Millis,
    /// `--clock-skips-pauses`: a pause moves the clock instead of waiting.
    pub skips_pauses: bool,
}

/// How far ahead of the system clock this worker's clock reads.
static AHEAD_MS: AtomicI64 = AtomicI64::new(0);
/// Whether a pause moves the clock instead of waiting.
static SKIPS_PAUSES: AtomicBool = AtomicBool::new(false);

/// Sets the clock for the rest of the process: called once, before the attempt reads it.
pub fn start(setting: Setting) {
    AHEAD_MS.store(setting.ahead_ms, Ordering::SeqCst);
    SKIPS_PAUSES.store(setting.skips_pauses, Ordering::SeqCst);
}

pub fn now_ms() -> Millis {
    time::now_ms().saturating_add(AHEAD_MS.load(Ordering::SeqCst))
}

/// Waits `pause` on this clock: sleeps it, or moves the clock by it (`--clock-skips-pauses`).
pub fn pause(pause: Duration) {
    if SKIPS_PAUSES.load(Ordering::SeqCst) {
        let by = Millis::try_from(pause.as_millis()).unwrap_or(Millis::MAX);
        let _ = AHEAD_MS.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ahead| {
            Some(ahead.saturating_add(by))
        });
        std::thread::sleep(Duration::from_millis(1));
    } else {
        std::thread::sleep(pause);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The clock is the process's: one test sets it, and puts it back.
    #[test]
    fn a_clock_set_ahead_reads_ahead_and_a_skipped_pause_moves_it() {
        let system = time::now_ms();
        assert!(now_ms() >= system && now_ms() < system + 60_000);
        start(Setting {
            ahead_ms: 120_000,
            skips_pauses: true,
        });
        assert!(now_ms() >= system + 120_000);
        let began = std::time::Instant::now();
        pause(Duration::from_secs(3600));
        assert!(began.elapsed() < Duration::from_secs(60), "not waited for");
        assert!(now_ms() >= system + 120_000 + 3_600_000);
        start(Setting::default());
        assert!(now_ms() < system + 60_000);
    }
}
