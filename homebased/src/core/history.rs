//! Retention (`[history] keep`, `homebased history prune`): one bounded batch of finished
//! jobs at a time, the rule of `crate::history`, run directories removed before the rows.
//! Also the bulk history seeding of `POST /v1/internal/seed` (benchmarks), which goes
//! through the core's own submit and cancel.

use super::Core;
use crate::history::{self, Cursor, Tally, Verdict, BATCH};
use crate::store::history as stored;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::home::Home;
use homebased_shared::ids::{JobId, OperationId, TaskId};
use homebased_shared::time::{now_ms, Millis};
use homebased_shared::wire::{CancelRequest, RunDirUsage, SeedRequest, Seeded};

/// One batch: what it removed (or would), and where the walk goes on.
#[derive(Debug, Default)]
pub struct Batch {
    pub tally: Tally,
    /// The last job read; the next batch starts after it.
    pub next: Cursor,
    /// Fewer than a batch were left: the walk is over.
    pub done: bool,
}

impl Core {
    /// Reads up to [`BATCH`] finished jobs that ended before `cutoff`, after `after`, and
    /// removes those [`history::verdict`] lets go (with `dry_run`, only counts them).
    pub fn prune_batch(
        &mut self,
        cutoff: Millis,
        after: Cursor,
        dry_run: bool,
    ) -> ApiResult<Batch> {
        let db = self.store.db();
        let listed = stored::candidates(db, cutoff, after, BATCH)?;
        let mut batch = Batch {
            next: listed.last().map(|c| (c.ended_at, c.job)),
            done: listed.len() < BATCH,
            ..Batch::default()
        };
        let mut go: Vec<(JobId, Vec<TaskId>)> = Vec::new();
        for c in &listed {
            match history::verdict(c, cutoff) {
                Verdict::Remove => go.push((c.job, stored::tasks_of(db, c.job)?)),
                why => batch.tally.keep(why),
            }
        }
        let tally = &mut batch.tally;
        if dry_run {
            for (job, tasks) in go {
                tally.runs += tasks.len() as u64;
                tally.events += stored::event_count(db, job)?;
                tally.run_dirs += tasks
                    .iter()
                    .filter(|t| self.home.task_dir(**t).exists())
                    .count() as u64;
                tally.jobs.push(job);
            }
            return Ok(batch);
        }
        // Directories first: a crash between the two leaves rows without directories (the
        // next batch removes them), never a directory nobody will remove.
        let mut removable = Vec::new();
        for (job, tasks) in go {
            match remove_dirs(&self.home, job, &tasks) {
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
        Ok(batch)
    }

    /// Stored results of requests older than `cutoff`, a batch at a time (none with
    /// `dry_run`, which counts them all).
    pub fn prune_operations(&mut self, cutoff: Millis, dry_run: bool) -> ApiResult<u64> {
        if dry_run {
            return stored::count_operations(self.store.db(), cutoff);
        }
        self.store
            .write(|tx| stored::prune_operations(tx, cutoff, BATCH))
    }

    /// `[history] keep`: one bounded batch per tick, walking the history oldest first and
    /// starting over once it reached the end.
    pub(super) fn retention_tick(&mut self) {
        let Some(keep) = self.config.history.keep else {
            return;
        };
        let cutoff = history::cutoff(now_ms(), keep);
        match self.prune_batch(cutoff, self.retention_cursor, false) {
            Ok(batch) => {
                self.retention_cursor = if batch.done { None } else { batch.next };
                if !batch.tally.jobs.is_empty() {
                    tracing::info!(
                        jobs = batch.tally.jobs.len(),
                        runs = batch.tally.runs,
                        events = batch.tally.events,
                        "retention removed finished jobs"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "retention batch failed; retried next tick"),
        }
        if let Err(e) = self.prune_operations(cutoff, false) {
            tracing::warn!(error = %e, "retention of stored operations failed");
        }
    }

    /// The last measure of the run and job directories (`daemon/disk_usage.rs` writes it).
    pub fn run_dir_usage(&self) -> std::sync::Arc<std::sync::Mutex<Option<RunDirUsage>>> {
        self.run_dir_usage.clone()
    }

    /// Submits `count` jobs like `req` (each under a new id) and cancels each at once,
    /// through the same submit and cancel as the API: finished history for benchmarks.
    pub fn seed(&mut self, req: SeedRequest) -> ApiResult<Seeded> {
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

/// The most jobs one seed request makes: the core serves other calls between requests.
pub const SEED_MAX: u32 = 1_000;

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
