//! Event delivery on the origin (SPEC section 8): per job, in seq order, at least once.
//!
//! One loop in the daemon asks the core for the oldest pending event of each job
//! (`CoreHandle::outbox_take`, `core/outbox.rs`), delivers each in its own task with the
//! sink I/O on a blocking thread ([`sink`]), and reports back
//! (`CoreHandle::outbox_record`). An event is marked delivered only after the sink
//! confirmed, so one delivered but not yet marked when the daemon dies is delivered again:
//! never lost, possibly twice (consumers deduplicate on `(job, seq)`). A failed attempt
//! leaves the event pending with a backoff (1 s doubling to 60 s, forever) and holds back
//! only its own job. Evidence is under `<home>/jobs/<job>/delivery/`
//! ([`evidence`]).
//!
//! # Layout
//! - [`sink`]: one attempt at a sink (the thread inbox or the callback), off the core.
//! - [`evidence`]: `delivery/` of a job: its lock and `callback.log`.
//!
//! The loop sleeps until the core wakes it (events appended), the earliest backoff ends,
//! or, while events are pending or in flight, a slow safety timer fires: a lost wake costs
//! latency, never an event. With nothing pending it waits for a wake alone, so an idle
//! daemon does not wake for delivery.

pub mod evidence;
pub mod sink;

use crate::core::outbox::Outcome;
use crate::core::CoreHandle;
use evidence::JobDelivery;
use homebased_shared::error::{ApiError, ErrorCode};
use homebased_shared::event::event_line;
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, ThreadId};
use sink::{Attempt, Sink};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

/// At most this many jobs have an attempt in flight at once.
const MAX_IN_FLIGHT: usize = 16;
/// The loop looks again at least this often while anything is pending, even without a wake.
const SAFETY: Duration = Duration::from_secs(5);

/// Everything an attempt needs, shared by the loop and its tasks.
struct Shared {
    core: CoreHandle,
    /// The daemon's clock (crate::clock): a retry's time is read against it.
    clock: crate::clock::Clock,
    home: Home,
    sink: Sink,
    /// Raised by the core when events may be pending, and by finished attempts.
    wake: Arc<Notify>,
    /// Jobs with an attempt in flight: their later events wait for it.
    busy: Mutex<HashSet<JobId>>,
}

impl Shared {
    fn busy(&self) -> std::sync::MutexGuard<'_, HashSet<JobId>> {
        self.busy.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Starts the delivery loop on the current tokio runtime.
pub fn spawn(
    core: CoreHandle,
    clock: crate::clock::Clock,
    home: Home,
    sink: Sink,
    wake: Arc<Notify>,
) -> tokio::task::JoinHandle<()> {
    let shared = Arc::new(Shared {
        core,
        clock,
        home,
        sink,
        wake,
        busy: Mutex::new(HashSet::new()),
    });
    tokio::spawn(run(shared))
}

async fn run(shared: Arc<Shared>) {
    loop {
        let busy = shared.busy().clone();
        let in_flight = !busy.is_empty();
        let room = MAX_IN_FLIGHT.saturating_sub(busy.len());
        let round = shared.core.outbox_take(busy, room).await;
        // Nothing pending, nothing in flight, nothing backing off: only a wake can bring
        // work (every commit that appends an event is followed by one, and a wake sent
        // while this loop is busy is kept for its next wait), so it sleeps without a timer.
        let mut sleep = None;
        match round {
            Ok(round) => {
                if !round.due.is_empty() || in_flight {
                    sleep = Some(SAFETY);
                }
                for event in round.due {
                    shared.busy().insert(event.job);
                    tokio::spawn(attempt(shared.clone(), event));
                }
                if let Some(at) = round.next_retry_at {
                    let wait = Duration::from_millis(
                        u64::try_from(at - shared.clock.now_ms()).unwrap_or(0),
                    );
                    sleep = Some(sleep.map_or(wait, |s: Duration| s.min(wait)));
                }
            }
            Err(e) if e.code == ErrorCode::DaemonUnavailable => return,
            Err(e) => {
                tracing::error!(error = %e, "cannot read pending events");
                sleep = Some(SAFETY);
            }
        }
        match sleep {
            Some(sleep) => tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            },
            None => shared.wake.notified().await,
        }
    }
}

/// One attempt at one event: the sink I/O on a blocking thread with the job's
/// `delivery.lock` held until the outcome is recorded.
async fn attempt(shared: Arc<Shared>, event: crate::store::events::Pending) {
    let (job, seq) = (event.job, event.seq);
    let io = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || deliver_blocking(&shared, &event))
    };
    let (outcome, lock) = match io.await {
        Ok(done) => done,
        Err(e) => (Outcome::Failed(format!("delivery task failed: {e}")), None),
    };
    fail::fail_point!("delivery.before-mark", |_| std::process::abort());
    let recorded = {
        let outcome = outcome.clone();
        shared.core.outbox_record(job, seq, outcome).await
    };
    drop(lock);
    match (&outcome, recorded) {
        (_, Err(e)) => tracing::warn!(%job, seq, error = %e, "cannot record a delivery"),
        (Outcome::Failed(why), Ok(next)) => {
            tracing::warn!(%job, seq, error = %why, next = ?next, "delivery failed, will retry")
        }
        (Outcome::Delivered, Ok(_)) => tracing::debug!(%job, seq, "event delivered"),
    }
    shared.busy().remove(&job);
    // The job's next event, if any, is due now.
    shared.wake.notify_one();
}

fn deliver_blocking(
    shared: &Shared,
    event: &crate::store::events::Pending,
) -> (Outcome, Option<evidence::DeliveryLock>) {
    let failed = |why: String| (Outcome::Failed(why), None);
    let dir = match JobDelivery::open(&shared.home, event.job) {
        Ok(d) => d,
        Err(e) => return failed(format!("cannot create the delivery directory: {e}")),
    };
    let lock = match dir.try_lock() {
        Ok(Some(lock)) => lock,
        Ok(None) => return failed("delivery.lock is held by another process".into()),
        Err(e) => return failed(format!("cannot take delivery.lock: {e}")),
    };
    let mut log = match dir.callback_log() {
        Ok(l) => l,
        Err(e) => return failed(format!("cannot open callback.log: {e}")),
    };
    let thread = match thread_of(&event.body) {
        Ok(t) => t,
        Err(e) => return failed(e.message),
    };
    let name = event.body["event"].as_str().unwrap_or("UNKNOWN");
    let line = event_line(&event.body);
    let attempt = Attempt {
        home: &shared.home,
        thread,
        seq: event.seq,
        event: name,
        line: &line,
        number: event.attempts + 1,
    };
    fail::fail_point!("delivery.before-sink", |_| std::process::abort());
    let outcome = match sink::deliver(&shared.sink, &attempt, &mut log) {
        Ok(()) => Outcome::Delivered,
        Err(why) => Outcome::Failed(why),
    };
    (outcome, Some(lock))
}

fn thread_of(body: &serde_json::Value) -> Result<ThreadId, ApiError> {
    body["thread"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| ApiError::internal(format!("stored event has no thread: {body}")))
}
