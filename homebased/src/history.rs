//! Retention of finished jobs (`[history] keep`, `homebased history prune`): which jobs may
//! go. Pure rules here; the store reads the candidates and removes rows
//! (`store::history`), the core removes run directories and runs one bounded batch per
//! tick (`core::history`).
//!
//! A job is removed only when all of these hold: it is terminal, it ended before the cutoff,
//! none of its runs holds a lane (a run in Attention keeps its run directory for the person
//! who checks the machine), every event of it was delivered or suppressed (an event not
//! yet delivered is still owed to its thread), and no queued or active job names it in its
//! `after` (that job waits for it, and shows it). Jobs are never deleted otherwise.

use homebased_shared::ids::JobId;
use homebased_shared::time::Millis;
use std::time::Duration;

/// What the store knows about a job that retention might remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub job: JobId,
    /// When the job last changed; for a terminal job, when it ended.
    pub ended_at: Millis,
    pub terminal: bool,
    /// Events neither delivered nor suppressed.
    pub undelivered: u32,
    /// One of its runs still holds a lane (Attention, or cleaning up).
    pub holds_lane: bool,
    /// A queued or active job names it in its `after`.
    pub named_by_live: bool,
}

/// Whether a candidate goes, or why it stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Remove,
    NotTerminal,
    TooRecent,
    Undelivered,
    HoldsLane,
    NamedByLive,
}

/// The rule of the module docs, in the order a person would ask about it.
pub fn verdict(c: &Candidate, cutoff: Millis) -> Verdict {
    if !c.terminal {
        Verdict::NotTerminal
    } else if c.ended_at >= cutoff {
        Verdict::TooRecent
    } else if c.holds_lane {
        Verdict::HoldsLane
    } else if c.undelivered > 0 {
        Verdict::Undelivered
    } else if c.named_by_live {
        Verdict::NamedByLive
    } else {
        Verdict::Remove
    }
}

/// Jobs that ended before this instant are old enough: `now` minus `keep`.
pub fn cutoff(now: Millis, keep: Duration) -> Millis {
    now.saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX))
}

/// Where a walk over the finished jobs (oldest first, by end time then id) goes on from.
pub type Cursor = Option<(Millis, JobId)>;

/// How many jobs one batch reads at most: a tick of the core stays short whatever the
/// history holds.
pub const BATCH: usize = 100;

/// What one batch (or a whole prune) removed, or would remove, and kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub jobs: Vec<JobId>,
    pub runs: u64,
    pub events: u64,
    pub run_dirs: u64,
    pub kept_undelivered: u64,
    pub kept_holding: u64,
    /// Jobs whose run directory could not be removed (another user's files): kept, so that
    /// no directory is left without its job.
    pub kept_undeletable: u64,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.jobs.extend(other.jobs);
        self.runs += other.runs;
        self.events += other.events;
        self.run_dirs += other.run_dirs;
        self.kept_undelivered += other.kept_undelivered;
        self.kept_holding += other.kept_holding;
        self.kept_undeletable += other.kept_undeletable;
    }

    /// Counts a candidate that stays.
    pub fn keep(&mut self, why: Verdict) {
        match why {
            Verdict::Undelivered => self.kept_undelivered += 1,
            Verdict::HoldsLane => self.kept_holding += 1,
            // A job a live job still names goes once that job ends: like a recent one, it is
            // only not yet due.
            Verdict::Remove | Verdict::NotTerminal | Verdict::TooRecent | Verdict::NamedByLive => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old_finished() -> Candidate {
        Candidate {
            job: JobId::new(),
            ended_at: 1_000,
            terminal: true,
            undelivered: 0,
            holds_lane: false,
            named_by_live: false,
        }
    }

    #[test]
    fn only_an_old_finished_job_with_nothing_owed_goes() {
        let cutoff = 5_000;
        assert_eq!(verdict(&old_finished(), cutoff), Verdict::Remove);
        let cases = [
            (
                Candidate {
                    terminal: false,
                    ..old_finished()
                },
                Verdict::NotTerminal,
            ),
            (
                Candidate {
                    ended_at: cutoff,
                    ..old_finished()
                },
                Verdict::TooRecent,
            ),
            (
                Candidate {
                    undelivered: 1,
                    ..old_finished()
                },
                Verdict::Undelivered,
            ),
            (
                Candidate {
                    holds_lane: true,
                    ..old_finished()
                },
                Verdict::HoldsLane,
            ),
            (
                Candidate {
                    named_by_live: true,
                    ..old_finished()
                },
                Verdict::NamedByLive,
            ),
            // A live job stays whatever else is true of it.
            (
                Candidate {
                    terminal: false,
                    undelivered: 3,
                    holds_lane: true,
                    ..old_finished()
                },
                Verdict::NotTerminal,
            ),
        ];
        for (candidate, expected) in cases {
            assert_eq!(verdict(&candidate, cutoff), expected, "{candidate:?}");
        }
    }

    #[test]
    fn the_cutoff_is_now_minus_keep_and_never_overflows() {
        assert_eq!(cutoff(90_000, Duration::from_secs(60)), 30_000);
        assert_eq!(cutoff(1_000, Duration::ZERO), 1_000);
        assert_eq!(cutoff(1_000, Duration::MAX), 1_000 - i64::MAX);
    }

    #[test]
    fn a_tally_counts_what_stays_by_reason() {
        let mut t = Tally::default();
        t.keep(Verdict::Undelivered);
        t.keep(Verdict::HoldsLane);
        t.keep(Verdict::TooRecent);
        let mut sum = Tally {
            runs: 2,
            ..Tally::default()
        };
        sum.add(t);
        assert_eq!(
            (sum.runs, sum.kept_undelivered, sum.kept_holding),
            (2, 1, 1)
        );
    }
}
