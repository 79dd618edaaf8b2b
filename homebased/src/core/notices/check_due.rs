//! Check-due timing as pure functions, with the clock passed in: a running step that has
//! written nothing to `output.log` for its job's `timeout` (at least 30 minutes) gets one
//! `JOB_CHECK_DUE`. The run goes on.

use homebased_shared::time::Millis;
use std::time::Duration;

/// The shortest `timeout` a spec may give; a shorter stored value is raised to it.
pub const MIN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Since when the run has been silent: the last write to `output.log`, or the run's start
/// when it has written nothing yet (a log older than the run does not count).
pub fn silent_since(output_modified: Option<Millis>, started_at: Millis) -> Millis {
    output_modified.map_or(started_at, |m| m.max(started_at))
}

/// The timeout that applies: the job's, but never under [`MIN_TIMEOUT`].
pub fn effective_timeout(timeout: Duration) -> Duration {
    timeout.max(MIN_TIMEOUT)
}

/// When the check falls due, if the run writes nothing more.
pub fn due_at(silent_since: Millis, timeout: Duration) -> Millis {
    let timeout = i64::try_from(effective_timeout(timeout).as_millis()).unwrap_or(i64::MAX);
    silent_since.saturating_add(timeout)
}

/// Whether the check is due at `now`.
pub fn is_due(now: Millis, silent_since: Millis, timeout: Duration) -> bool {
    now >= due_at(silent_since, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Millis = 60_000;
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn silence_counts_from_the_last_output_or_the_start() {
        assert_eq!(silent_since(None, 1_000), 1_000);
        assert_eq!(silent_since(Some(5_000), 1_000), 5_000);
        assert_eq!(silent_since(Some(500), 1_000), 1_000, "older than the run");
    }

    #[test]
    fn the_check_falls_due_a_timeout_after_the_silence_began() {
        assert_eq!(due_at(10 * MINUTE, HOUR), 70 * MINUTE);
        assert_eq!(due_at(10 * MINUTE, Duration::from_secs(60)), 40 * MINUTE);
        assert_eq!(due_at(Millis::MAX - 1, HOUR), Millis::MAX);
    }

    #[test]
    fn due_after_the_timeout_of_silence() {
        let since = 10 * MINUTE;
        assert!(!is_due(since + 60 * MINUTE - 1, since, HOUR));
        assert!(is_due(since + 60 * MINUTE, since, HOUR));
        assert!(is_due(since + 600 * MINUTE, since, HOUR));
    }

    #[test]
    fn the_thirty_minute_minimum_holds_whatever_the_stored_timeout() {
        let since = 0;
        for short in [
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_secs(29 * 60),
        ] {
            assert!(!is_due(29 * MINUTE, since, short), "{short:?}");
            assert!(!is_due(30 * MINUTE - 1, since, short), "{short:?}");
            assert!(is_due(30 * MINUTE, since, short), "{short:?}");
        }
        assert_eq!(effective_timeout(Duration::from_secs(60)), MIN_TIMEOUT);
        assert_eq!(effective_timeout(2 * HOUR), 2 * HOUR);
    }

    #[test]
    fn new_output_restarts_the_silence() {
        let start = 0;
        let timeout = Duration::from_secs(30 * 60);
        let wrote_at = 20 * MINUTE;
        let since = silent_since(Some(wrote_at), start);
        assert!(!is_due(30 * MINUTE, since, timeout));
        assert!(is_due(50 * MINUTE, since, timeout));
    }
}
