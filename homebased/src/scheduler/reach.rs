//! How far down the queue a pass must read. The core reads the queued jobs in serving order
//! and asks [`Reach::reads`] before each: a job past the reach can neither start, nor
//! preempt, nor head the queue in this pass, so `decide` gives the same launches, stops,
//! reservation and blocked head without it, and why it waits is told from the same pass
//! ([`super::waiting_beyond`]). At 2,000 queued jobs, reading them all cost every pass of a
//! burst of hand-overs about 2,000 rows and their waiting reasons (docs/BENCHMARKS.md,
//! "The 56-lane hand-over and lanes per CPU").

use super::{ResourceSlot, SlotPhase, Target, WaitingJob};
use homebased_shared::queue::Priority;

/// The reading of one pass's queue, one job at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// Free lanes that no job read so far is sure to take.
    untaken: usize,
    /// A job that may not take just any one free lane was read while lanes were free (a
    /// pinned job, a job of several lanes, and with it a reservation and backfill by time
    /// limit): which free lanes the jobs behind it get is then the scheduler's to work out,
    /// so every job is read.
    read_all: bool,
    /// A job that takes part in the pass was read once no lane was left untaken: the first
    /// blocked job, whose notices the pass keeps.
    head_found: bool,
    /// The lowest level of an executing run: only a job above it may stop one.
    lowest_executing: Option<Priority>,
}

impl Reach {
    /// The reach of a pass over `resources`, the snapshot's lanes.
    pub fn over(resources: &[ResourceSlot]) -> Reach {
        Reach {
            untaken: resources.iter().filter(|r| r.is_free()).count(),
            read_all: false,
            head_found: false,
            lowest_executing: resources
                .iter()
                .filter_map(|r| r.run.as_ref())
                .filter(|run| matches!(run.phase, SlotPhase::Executing { .. }))
                .map(|run| run.priority)
                .min(),
        }
    }

    /// Whether `job`, the next in serving order, is read. `false` ends the reading: with
    /// every free lane taken by a job of one lane that may run anywhere (it gets one, as
    /// sure as the lanes are there), and the head found, a job further down could only
    /// stop a run, and the jobs come by level, highest first.
    pub fn reads(&mut self, job: &WaitingJob) -> bool {
        let may_preempt = self.lowest_executing.is_some_and(|low| job.priority > low);
        if self.untaken == 0 && !self.read_all && self.head_found && !may_preempt {
            return false;
        }
        if job.takes_part() {
            if self.untaken == 0 {
                self.head_found = true;
            } else if job.needs() == 1 && matches!(job.target, Target::Any) {
                self.untaken -= 1;
            } else {
                self.read_all = true;
            }
        }
        true
    }
}
