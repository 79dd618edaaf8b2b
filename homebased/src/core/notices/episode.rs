//! Blocking episodes as pure bookkeeping, with the clock passed in: which episode is open
//! after a pass, and when its one notice is due (SPEC section 8).
//!
//! An episode is the stretch during which the same job stays the first blocked job: the
//! same head keeps its start (also across daemon restarts, since the open episode is
//! stored), a new head starts a new episode, and no head ends it.

use homebased_shared::config::NotifyBlockedAfter;
use homebased_shared::ids::JobId;
use homebased_shared::time::Millis;
use std::time::Duration;

/// The open episode, as far as the bookkeeping needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    pub job: JobId,
    pub started_at: Millis,
}

/// What a pass changes about the episodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// No job is first blocked, and none was.
    Idle,
    /// The same job is still first blocked: its episode keeps its start.
    Continue,
    /// A job became first blocked: the open episode (if any, of another job) ends and a new
    /// one starts now.
    Start { end_previous: bool, episode: Open },
    /// No job is first blocked any more: the open episode ends now.
    End,
}

/// The change a pass makes, given the open episode and the head the scheduler found.
pub fn next(open: Option<&Open>, head: Option<JobId>, now: Millis) -> Change {
    match (open, head) {
        (None, None) => Change::Idle,
        (Some(_), None) => Change::End,
        (Some(open), Some(job)) if open.job == job => Change::Continue,
        (open, Some(job)) => Change::Start {
            end_previous: open.is_some(),
            episode: Open {
                job,
                started_at: now,
            },
        },
    }
}

/// The delay before the notice: `yield` when a yield was requested for the head (a
/// checkpoint is expected soon), otherwise `wait` (also behind Attention and cleaning).
pub fn delay(yield_requested: bool, after: &NotifyBlockedAfter) -> Duration {
    if yield_requested {
        after.r#yield
    } else {
        after.wait
    }
}

/// When the episode's notice is due.
pub fn due_at(started_at: Millis, yield_requested: bool, after: &NotifyBlockedAfter) -> Millis {
    let delay = i64::try_from(delay(yield_requested, after).as_millis()).unwrap_or(i64::MAX);
    started_at.saturating_add(delay)
}

/// Whether the episode's one notice should be produced now.
pub fn notice_due(
    started_at: Millis,
    yield_requested: bool,
    already_notified: bool,
    now: Millis,
    after: &NotifyBlockedAfter,
) -> bool {
    !already_notified && now >= due_at(started_at, yield_requested, after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Millis = 60_000;

    fn after() -> NotifyBlockedAfter {
        NotifyBlockedAfter {
            r#yield: Duration::from_secs(15 * 60),
            wait: Duration::from_secs(30 * 60),
        }
    }

    /// Applies a change the way the core does, returning the open episode after it.
    fn apply(open: Option<Open>, change: Change) -> Option<Open> {
        match change {
            Change::Idle | Change::End => None,
            Change::Continue => open,
            Change::Start { episode, .. } => Some(episode),
        }
    }

    #[test]
    fn same_head_keeps_its_start() {
        let a = JobId::new();
        let open = Some(Open {
            job: a,
            started_at: 1_000,
        });
        for now in [1_000, 5 * MINUTE, 300 * MINUTE] {
            assert_eq!(next(open.as_ref(), Some(a), now), Change::Continue);
        }
        assert_eq!(apply(open, Change::Continue).unwrap().started_at, 1_000);
    }

    #[test]
    fn new_head_starts_a_new_episode_now() {
        let (a, b) = (JobId::new(), JobId::new());
        let first = next(None, Some(a), 10);
        assert_eq!(
            first,
            Change::Start {
                end_previous: false,
                episode: Open {
                    job: a,
                    started_at: 10
                }
            }
        );
        let open = apply(None, first);
        let second = next(open.as_ref(), Some(b), 99);
        assert_eq!(
            second,
            Change::Start {
                end_previous: true,
                episode: Open {
                    job: b,
                    started_at: 99
                }
            }
        );
        // The first head coming back later is a new episode with a new start.
        let open = apply(open, second);
        let back = next(open.as_ref(), Some(a), 500);
        assert!(matches!(
            back,
            Change::Start { episode: Open { job, started_at: 500 }, .. } if job == a
        ));
    }

    #[test]
    fn no_head_ends_the_episode() {
        let a = JobId::new();
        let open = Open {
            job: a,
            started_at: 0,
        };
        assert_eq!(next(Some(&open), None, 7), Change::End);
        assert_eq!(next(None, None, 7), Change::Idle);
        assert_eq!(apply(Some(open), Change::End), None);
    }

    #[test]
    fn yield_for_the_head_uses_the_yield_delay_and_everything_else_wait() {
        let a = after();
        assert_eq!(delay(true, &a), Duration::from_secs(15 * 60));
        assert_eq!(delay(false, &a), Duration::from_secs(30 * 60));
        assert_eq!(due_at(1_000, true, &a), 1_000 + 15 * MINUTE);
        assert_eq!(due_at(1_000, false, &a), 1_000 + 30 * MINUTE);
    }

    #[test]
    fn the_notice_is_due_once_the_delay_has_passed_and_only_once() {
        let a = after();
        let start = 100 * MINUTE;
        assert!(!notice_due(
            start,
            false,
            false,
            start + 30 * MINUTE - 1,
            &a
        ));
        assert!(notice_due(start, false, false, start + 30 * MINUTE, &a));
        assert!(!notice_due(start, true, false, start + 15 * MINUTE - 1, &a));
        assert!(notice_due(start, true, false, start + 15 * MINUTE, &a));
        assert!(!notice_due(start, false, true, start + 600 * MINUTE, &a));
    }

    #[test]
    fn an_episode_carried_over_a_restart_is_due_from_its_first_start() {
        // The open episode was stored before a restart; the same head after the restart
        // continues it, so the notice is due from the original start, not the restart.
        let a = after();
        let job = JobId::new();
        let open = Open { job, started_at: 0 };
        let after_restart = 29 * MINUTE;
        assert_eq!(
            next(Some(&open), Some(job), after_restart),
            Change::Continue
        );
        assert!(!notice_due(
            open.started_at,
            false,
            false,
            after_restart,
            &a
        ));
        assert!(notice_due(open.started_at, false, false, 30 * MINUTE, &a));
    }
}
