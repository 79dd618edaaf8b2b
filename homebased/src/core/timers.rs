//! When the core's tick is next due. The tick does what time alone makes due: retries of
//! observations and stops that did not land, the end of a launch backoff, a launch whose
//! worker never confirmed, blocked and check-due notices, time limits, retention. An idle daemon must
//! sleep (no wake at all while nothing is due), so each tick reports when the next of these
//! falls due and the core sleeps until then; any change (a scheduling pass) brings the tick
//! back within [`AFTER_CHANGE`], and that tick sees what the change made due.

use homebased_shared::time::Millis;
use std::time::{Duration, Instant};

/// A change (a scheduling pass ran) brings the next tick at least this close; so does
/// anything still to retry (an observation or a stop that did not land).
pub const AFTER_CHANGE: Duration = Duration::from_secs(2);

/// With `[history] keep`, retention's walk starts over this long after it last ended: a
/// finished job becomes old enough at a time no change announces.
pub const RETENTION_REST: Duration = Duration::from_secs(60);

/// The earliest of several due times (epoch milliseconds); `None` while nothing is due.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NextDue(Option<Millis>);

impl NextDue {
    /// Notes something due at `at`.
    pub fn at(&mut self, at: Millis) {
        self.0 = Some(self.0.map_or(at, |due| due.min(at)));
    }

    /// Notes something due `after` from `now`.
    pub fn after(&mut self, now: Millis, after: Duration) {
        self.at(now.saturating_add(i64::try_from(after.as_millis()).unwrap_or(i64::MAX)));
    }

    pub fn merge(&mut self, other: NextDue) {
        if let Some(at) = other.0 {
            self.at(at);
        }
    }

    /// A due time not after `now` is something the tick could not settle (a store that
    /// refused it): it is tried again [`AFTER_CHANGE`] later, never at once in a loop.
    pub fn retried_if_past(self, now: Millis) -> NextDue {
        match self.0 {
            Some(at) if at <= now => {
                let mut later = NextDue::default();
                later.after(now, AFTER_CHANGE);
                later
            }
            other => NextDue(other),
        }
    }

    pub fn millis(self) -> Option<Millis> {
        self.0
    }

    /// The instant to wake at, read against a clock pair taken together (`now_ms`, `now`);
    /// a due time already past is now.
    pub fn instant(self, now_ms: Millis, now: Instant) -> Option<Instant> {
        let due = self.0?;
        let wait = u64::try_from(due.saturating_sub(now_ms)).unwrap_or(0);
        Some(now + Duration::from_millis(wait))
    }
}

/// The next tick after a turn: the one already set, brought within [`AFTER_CHANGE`] when the
/// turn changed something or left something to retry.
pub fn after_turn(next: Option<Instant>, changed: bool, now: Instant) -> Option<Instant> {
    if !changed {
        return next;
    }
    let soon = now + AFTER_CHANGE;
    Some(next.map_or(soon, |at| at.min(soon)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_due_time_wins_and_nothing_due_is_none() {
        let mut next = NextDue::default();
        assert_eq!(next.millis(), None);
        next.at(5_000);
        next.at(9_000);
        next.after(1_000, Duration::from_secs(2));
        assert_eq!(next.millis(), Some(3_000));
        let mut other = NextDue::default();
        other.at(2_500);
        next.merge(other);
        next.merge(NextDue::default());
        assert_eq!(next.millis(), Some(2_500));
    }

    #[test]
    fn a_due_time_already_past_is_retried_later_not_at_once() {
        let mut next = NextDue::default();
        next.at(900);
        assert_eq!(next.retried_if_past(1_000).millis(), Some(3_000));
        next = NextDue::default();
        next.at(1_001);
        assert_eq!(next.retried_if_past(1_000).millis(), Some(1_001));
        assert_eq!(NextDue::default().retried_if_past(1_000).millis(), None);
    }

    #[test]
    fn a_due_time_becomes_an_instant_and_a_past_one_is_now() {
        let now = Instant::now();
        let mut next = NextDue::default();
        assert_eq!(next.instant(10_000, now), None);
        next.at(12_500);
        assert_eq!(
            next.instant(10_000, now),
            Some(now + Duration::from_millis(2_500))
        );
        assert_eq!(next.instant(20_000, now), Some(now));
    }

    #[test]
    fn a_change_brings_the_tick_close_and_a_quiet_turn_leaves_it() {
        let now = Instant::now();
        let far = now + Duration::from_secs(3600);
        assert_eq!(after_turn(None, false, now), None);
        assert_eq!(after_turn(Some(far), false, now), Some(far));
        assert_eq!(after_turn(None, true, now), Some(now + AFTER_CHANGE));
        assert_eq!(after_turn(Some(far), true, now), Some(now + AFTER_CHANGE));
        let sooner = now + Duration::from_millis(10);
        assert_eq!(after_turn(Some(sooner), true, now), Some(sooner));
    }
}
