//! The core's side of event delivery: the outbox's two verbs run on the core thread
//! (reached through `CoreHandle::outbox_take` and `CoreHandle::outbox_record`) and are the
//! only code that reads or changes delivery state. The sink I/O happens in `delivery.rs`,
//! between a take and the record of its outcome.

use super::Core;
use crate::store::events::{self, Pending};
use homebased_shared::error::ApiResult;
use homebased_shared::ids::JobId;
use homebased_shared::time::Millis;
use std::collections::HashSet;
use std::time::Duration;

/// The first retry waits this long; each further failure doubles it up to [`BACKOFF_MAX`].
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// How long to wait after the `failures`-th failed attempt of an event: 1 s, 2 s, 4 s, ...,
/// at most 60 s. Forever: delivery never gives up.
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    (BACKOFF_FIRST * 2u32.pow(doublings)).min(BACKOFF_MAX)
}

/// What one round of the delivery loop should do.
#[derive(Debug, Default)]
pub struct Round {
    /// The oldest pending event of each job that is due now and not already in flight.
    pub due: Vec<Pending>,
    /// The earliest time a backing-off event becomes due, if any.
    pub next_retry_at: Option<Millis>,
}

impl Core {
    /// The events to deliver now: per job the oldest pending one, skipping jobs in `busy`
    /// (an attempt in flight) and events still backing off, at most `room`. A notice that is
    /// no longer true is suppressed here, at its turn, and the job's next event takes its
    /// place.
    pub(super) fn outbox_take(&mut self, busy: &HashSet<JobId>, room: usize) -> ApiResult<Round> {
        self.outbox_take_at(busy, room, self.clock.now_ms())
    }

    /// [`Core::outbox_take`] as of `now` (the tests name the instant).
    pub(super) fn outbox_take_at(
        &mut self,
        busy: &HashSet<JobId>,
        room: usize,
        now: Millis,
    ) -> ApiResult<Round> {
        loop {
            // Only as many heads as this round can send: the jobs in flight have their head
            // among the oldest, so they are read past, never more (schema_v8.sql).
            let heads = events::due_heads(self.store.db(), now, room + busy.len())?;
            let mut stale = Vec::new();
            let mut round = Round {
                next_retry_at: events::next_retry_at(self.store.db(), now)?,
                ..Round::default()
            };
            for event in heads {
                if busy.contains(&event.job) {
                    continue;
                }
                // A pulled notice was judged by its authority, which alone knows its job.
                if event.pulled_from.is_none() && !self.notice_still_true(&event)? {
                    stale.push(event);
                    continue;
                }
                if round.due.len() < room {
                    round.due.push(event);
                }
            }
            if stale.is_empty() {
                return Ok(round);
            }
            self.store.write(|tx| {
                for event in &stale {
                    events::suppress(tx, event.job, event.seq)?;
                }
                Ok(())
            })?;
            for event in &stale {
                tracing::info!(job = %event.job, seq = event.seq, kind = ?event.kind,
                    "notice no longer true at its turn: suppressed");
            }
        }
    }

    /// Records an attempt's outcome. Returns the time of the next attempt after a failure.
    pub(super) fn outbox_record(
        &mut self,
        job: JobId,
        seq: u32,
        outcome: &Outcome,
    ) -> ApiResult<Option<Millis>> {
        self.outbox_record_at(job, seq, outcome, self.clock.now_ms())
    }

    /// [`Core::outbox_record`] as of `now`.
    fn outbox_record_at(
        &mut self,
        job: JobId,
        seq: u32,
        outcome: &Outcome,
        now: Millis,
    ) -> ApiResult<Option<Millis>> {
        self.store.write(|tx| match outcome {
            Outcome::Delivered => {
                events::mark_delivered(tx, job, seq, now)?;
                Ok(None)
            }
            Outcome::Failed(error) => {
                let failures = events::get(tx, job, seq)?.map_or(0, |e| e.attempts) + 1;
                let wait = i64::try_from(backoff(failures).as_millis()).unwrap_or(i64::MAX);
                let at = now.saturating_add(wait);
                events::record_failure(tx, job, seq, at, error)?;
                Ok(Some(at))
            }
        })
    }
}

/// How one attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The sink confirmed: the event is done.
    Delivered,
    /// The event stays pending and is tried again after its backoff.
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use homebased_shared::event::EventKind;

    fn core(dir: &tempfile::TempDir) -> Core {
        crate::core::testing::open_core(dir, Default::default(), Default::default())
    }

    fn append(core: &mut Core, job: &crate::store::jobs::Job, kind: EventKind) -> u32 {
        let machine = core.machine();
        core.store
            .write(|tx| events::append(tx, machine, job, kind, None, Default::default()))
            .unwrap()
    }

    fn due(core: &mut Core, busy: &HashSet<JobId>, now: Millis) -> Vec<(JobId, u32)> {
        let round = core.outbox_take_at(busy, 100, now).unwrap();
        round.due.iter().map(|e| (e.job, e.seq)).collect()
    }

    #[test]
    fn a_failed_attempt_backs_off_and_holds_back_only_its_own_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut core = core(&dir);
        let (a, b) = core
            .store
            .write(|tx| Ok((events::test_job(tx), events::test_job(tx))))
            .unwrap();
        append(&mut core, &a, EventKind::JobPreempted);
        append(&mut core, &a, EventKind::JobSucceeded);
        append(&mut core, &b, EventKind::JobCancelled);
        let now = 1_000_000;
        let mut first = due(&mut core, &HashSet::new(), now);
        first.sort();
        let mut expected = vec![(a.id, 1), (b.id, 1)];
        expected.sort();
        assert_eq!(first, expected);
        // A job with an attempt in flight is skipped.
        assert_eq!(due(&mut core, &HashSet::from([a.id]), now), vec![(b.id, 1)]);

        let failed = Outcome::Failed("exit=1".into());
        assert_eq!(
            core.outbox_record_at(a.id, 1, &failed, now).unwrap(),
            Some(now + 1_000)
        );
        core.outbox_record_at(b.id, 1, &Outcome::Delivered, now)
            .unwrap();
        let round = core
            .outbox_take_at(&HashSet::new(), 100, now + 999)
            .unwrap();
        assert!(round.due.is_empty(), "a's seq 2 waits behind seq 1");
        assert_eq!(round.next_retry_at, Some(now + 1_000));
        assert_eq!(
            due(&mut core, &HashSet::new(), now + 1_000),
            vec![(a.id, 1)]
        );
        assert_eq!(
            core.outbox_record_at(a.id, 1, &failed, now + 1_000)
                .unwrap(),
            Some(now + 3_000),
            "the second failure waits 2 s"
        );
        core.outbox_record_at(a.id, 1, &Outcome::Delivered, now + 3_000)
            .unwrap();
        assert_eq!(
            due(&mut core, &HashSet::new(), now + 3_000),
            vec![(a.id, 2)]
        );
    }

    #[test]
    fn backoff_starts_at_one_second_and_doubles_up_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX, "forever, never overflowing");
        assert_eq!(backoff(0), BACKOFF_FIRST);
    }
}
