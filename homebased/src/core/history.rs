//! Retention (`[history] keep`, `homebased history prune`): one bounded batch of finished
//! jobs at a time, the rule of `crate::history`: the core reads the batch, the run
//! directories are removed off the core, then the core removes the rows.
//! `history prune` is [`prune`]: many short core calls, one batch each, so that requests
//! arriving meanwhile are served between batches.
//! Also the bulk history seeding of `POST /v1/internal/seed` (benchmarks), which goes
//! through the core's own submit and cancel.

use super::{Core, CoreHandle};
use crate::history::{self, Cursor, Tally, Verdict, BATCH};
use crate::store::history as stored;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, OperationId, TaskId};
use homebased_shared::time::Millis;
use homebased_shared::wire::{CancelRequest, PruneRequest, PruneResult, SeedRequest, Seeded};

/// One batch as read on the core: the jobs that may go with their run directories, what
/// stays, and where the walk goes on.
#[derive(Debug, Default)]
pub struct Plan {
    pub go: Vec<(JobId, Vec<TaskId>)>,
    pub tally: Tally,
    /// The last job read; the next batch starts after it.
    pub next: Cursor,
    /// Fewer than a batch were left: the walk is over.
    pub done: bool,
}

/// What the directory removal of a plan left to remove from the store.
#[derive(Debug, Default)]
pub struct Cleared {
    pub removable: Vec<JobId>,
    pub tally: Tally,
}

/// A retention batch whose directories are being removed on their own thread.
pub(super) struct InFlight {
    cutoff: Millis,
    thread: std::thread::JoinHandle<Cleared>,
}

impl Core {
    /// Reads up to [`BATCH`] finished jobs that ended before `cutoff`, after `after`, and
    /// sorts them by [`history::verdict`]. Reads only; with `dry_run` it also counts what the
    /// jobs that may go hold.
    pub(super) fn prune_plan(
        &self,
        cutoff: Millis,
        after: Cursor,
        dry_run: bool,
    ) -> ApiResult<Plan> {
        let db = self.store.db();
        let listed = stored::candidates(db, cutoff, after, BATCH)?;
        let mut plan = Plan {
            next: listed.last().map(|c| (c.ended_at, c.job)),
            done: listed.len() < BATCH,
            ..Plan::default()
        };
        for c in &listed {
            match history::verdict(c, cutoff) {
                Verdict::Remove => plan.go.push((c.job, stored::tasks_of(db, c.job)?)),
                why => plan.tally.keep(why),
            }
        }
        if dry_run {
            for (job, tasks) in std::mem::take(&mut plan.go) {
                let tally = &mut plan.tally;
                tally.runs += tasks.len() as u64;
                tally.events += stored::event_count(db, job)?;
                tally.run_dirs += tasks
                    .iter()
                    .filter(|t| self.home.task_dir(**t).exists())
                    .count() as u64;
                tally.jobs.push(job);
            }
        }
        Ok(plan)
    }

    /// Removes the rows of jobs whose directories are gone, each if it may still go (read
    /// again in the transaction), and adds them to `tally`.
    pub(super) fn prune_rows(&mut self, cutoff: Millis, cleared: Cleared) -> ApiResult<Tally> {
        let Cleared {
            removable,
            mut tally,
        } = cleared;
        let removed = self.store.write(|tx| {
            let mut out = Vec::new();
            for job in removable {
                if let Some(r) = stored::remove(tx, job, cutoff)? {
                    out.push((job, r));
                }
            }
            Ok(out)
        })?;
        for (job, r) in removed {
            tally.jobs.push(job);
            tally.runs += r.runs;
            tally.events += r.events;
        }
        Ok(tally)
    }

    /// Stored results of requests older than `cutoff`, a batch at a time (none with
    /// `dry_run`, which counts them all).
    pub(super) fn prune_operations(&mut self, cutoff: Millis, dry_run: bool) -> ApiResult<u64> {
        if dry_run {
            return stored::count_operations(self.store.db(), cutoff);
        }
        self.store
            .write(|tx| stored::prune_operations(tx, cutoff, BATCH))
    }

    /// `[history] keep`: at most one batch in flight. The core reads the batch and later
    /// removes its rows; the directories, whose removal is disk I/O that grows with what the
    /// runs wrote, are removed on a thread of their own meanwhile. `wait` (from `settle`)
    /// lands the batch in flight and one more before returning.
    pub(super) fn retention_tick(&mut self, wait: bool) {
        let Some(keep) = self.config.history.keep else {
            return;
        };
        if !self.land_retention(wait) {
            return;
        }
        let cutoff = history::cutoff(self.clock.now_ms(), keep);
        let plan = match self.prune_plan(cutoff, self.retention_cursor, false) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::warn!(error = %e, "retention batch failed; retried next tick");
                return;
            }
        };
        self.retention_cursor = if plan.done { None } else { plan.next };
        if let Err(e) = self.prune_operations(cutoff, false) {
            tracing::warn!(error = %e, "retention of stored operations failed");
        }
        if plan.go.is_empty() {
            return;
        }
        let home = self.home.clone();
        match std::thread::Builder::new()
            .name("retention".into())
            .spawn(move || clear_dirs(&home, plan.go, plan.tally))
        {
            Ok(thread) => self.retention = Some(InFlight { cutoff, thread }),
            Err(e) => tracing::warn!(error = %e, "cannot start a retention batch"),
        }
        if wait {
            self.land_retention(true);
        }
    }

    /// Whether retention has more to do at once: a batch in flight, or a walk not yet over.
    pub(super) fn retention_busy(&self) -> bool {
        self.retention.is_some() || self.retention_cursor.is_some()
    }

    /// Removes the rows of the batch in flight once its directories are gone (waiting for
    /// that with `wait`). False while it is still running.
    fn land_retention(&mut self, wait: bool) -> bool {
        let Some(in_flight) = self.retention.take() else {
            return true;
        };
        if !wait && !in_flight.thread.is_finished() {
            self.retention = Some(in_flight);
            return false;
        }
        let cleared = match in_flight.thread.join() {
            Ok(cleared) => cleared,
            Err(_) => {
                tracing::error!("a retention batch panicked; its jobs are read again later");
                return true;
            }
        };
        match self.prune_rows(in_flight.cutoff, cleared) {
            Ok(tally) if !tally.jobs.is_empty() => {
                tracing::info!(
                    jobs = tally.jobs.len(),
                    runs = tally.runs,
                    events = tally.events,
                    run_dirs = tally.run_dirs,
                    "retention removed finished jobs"
                );
                self.readings
                    .run_dir_usage
                    .changed(super::run_dir_usage::Changed::All);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention could not remove rows; retried later"),
        }
        true
    }

    /// Submits `count` jobs like `req` (each under a new id) and cancels each at once,
    /// through the same submit and cancel as the API: finished history for benchmarks.
    pub(super) fn seed(&mut self, req: SeedRequest) -> ApiResult<Seeded> {
        if req.count > SEED_MAX {
            return Err(ApiError::usage(format!(
                "seed at most {SEED_MAX} jobs per request, not {}",
                req.count
            )));
        }
        for _ in 0..req.count {
            let mut submit = req.submit.clone();
            submit.job = JobId::new();
            let job = self.submit(submit)?.job;
            self.cancel(
                job,
                CancelRequest {
                    operation_id: OperationId::new(),
                },
            )?;
        }
        Ok(Seeded { jobs: req.count })
    }
}

/// `history prune` (`CoreHandle::prune`). Each batch: read on the core, directories
/// removed off it, rows removed on it; requests arriving meanwhile are served between the
/// steps. Then the recorded operations older than the cutoff, a batch at a time.
pub(super) async fn prune(core: &CoreHandle, req: PruneRequest) -> ApiResult<PruneResult> {
    let (home, now) = core
        .call(|core| Ok((core.home().clone(), core.clock().now_ms())))
        .await?;
    let cutoff = history::cutoff(now, std::time::Duration::from_millis(req.older_than_ms));
    let dry_run = req.dry_run;
    let mut total = Tally::default();
    let mut after = None;
    loop {
        let plan = core
            .call(move |core| core.prune_plan(cutoff, after, dry_run))
            .await?;
        let (next, done) = (plan.next, plan.done);
        if dry_run || plan.go.is_empty() {
            total.add(plan.tally);
        } else {
            let home = home.clone();
            let cleared =
                tokio::task::spawn_blocking(move || clear_dirs(&home, plan.go, plan.tally))
                    .await
                    .map_err(ApiError::internal)?;
            let tally = core
                .call(move |core| core.prune_rows(cutoff, cleared))
                .await?;
            total.add(tally);
        }
        if done {
            break;
        }
        after = next;
    }
    let mut operations = 0;
    loop {
        let n = core
            .call(move |core| core.prune_operations(cutoff, dry_run))
            .await?;
        operations += n;
        if dry_run || n < BATCH as u64 {
            break;
        }
    }
    Ok(PruneResult {
        dry_run,
        before: cutoff,
        jobs: total.jobs.len() as u64,
        runs: total.runs,
        events: total.events,
        run_dirs: total.run_dirs,
        operations,
        kept_undelivered: total.kept_undelivered,
        kept_holding: total.kept_holding,
        kept_undeletable: total.kept_undeletable,
        job_ids: total.jobs,
    })
}

/// The most jobs one seed request makes: the core serves other calls between requests.
pub const SEED_MAX: u32 = 1_000;

/// Removes the run directories and the job directory of each job of a plan: disk I/O, run
/// off the core. A job whose directory cannot be removed (another user's files, from a
/// container) stays, so that no directory is left without its job.
pub fn clear_dirs(home: &Home, go: Vec<(JobId, Vec<TaskId>)>, mut tally: Tally) -> Cleared {
    let mut removable = Vec::new();
    for (job, tasks) in go {
        match remove_dirs(home, job, &tasks) {
            Ok(n) => {
                tally.run_dirs += n;
                removable.push(job);
            }
            Err(e) => {
                tracing::warn!(%job, error = %e, "retention keeps a job whose directory cannot be removed");
                tally.kept_undeletable += 1;
            }
        }
    }
    Cleared { removable, tally }
}

/// Removes the job's run directories and its job directory; returns how many run
/// directories were there.
fn remove_dirs(home: &Home, job: JobId, tasks: &[TaskId]) -> std::io::Result<u64> {
    let mut removed = 0;
    for task in tasks {
        if remove_tree(&home.task_dir(*task))? {
            removed += 1;
        }
    }
    remove_tree(&home.job_dir(job))?;
    Ok(removed)
}

fn remove_tree(path: &std::path::Path) -> std::io::Result<bool> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        )),
    }
}
