//! `POST /v1/history/prune` and the benchmarks' `POST /v1/internal/seed` (socket only).
//! A prune is many short core calls, one batch each, so that requests arriving meanwhile
//! are served between batches.

use super::{body, json, ApiResponse, AppState};
use axum::body::Bytes;
use axum::extract::State;
use homebased_shared::wire::{PruneRequest, PruneResult, SeedRequest};

pub(super) async fn prune(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: PruneRequest = body(&bytes)?;
    let (home, now) = s
        .core
        .call(|core| Ok((core.home().clone(), core.clock().now_ms())))
        .await?;
    let cutoff = crate::history::cutoff(now, std::time::Duration::from_millis(req.older_than_ms));
    let dry_run = req.dry_run;
    let mut total = crate::history::Tally::default();
    let mut after = None;
    // Each batch: read on the core, directories removed off it, rows removed on it; requests
    // arriving meanwhile are served between the steps.
    loop {
        let plan = s
            .core
            .call(move |core| core.prune_plan(cutoff, after, dry_run))
            .await?;
        let (next, done) = (plan.next, plan.done);
        if dry_run || plan.go.is_empty() {
            total.add(plan.tally);
        } else {
            let home = home.clone();
            let cleared = tokio::task::spawn_blocking(move || {
                crate::core::history::clear_dirs(&home, plan.go, plan.tally)
            })
            .await
            .map_err(homebased_shared::error::ApiError::internal)?;
            let tally = s
                .core
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
        let n = s
            .core
            .call(move |core| core.prune_operations(cutoff, dry_run))
            .await?;
        operations += n;
        if dry_run || n < crate::history::BATCH as u64 {
            break;
        }
    }
    json(PruneResult {
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

pub(super) async fn seed(State(s): State<AppState>, bytes: Bytes) -> ApiResponse {
    let req: SeedRequest = body(&bytes)?;
    json(s.core.call(move |core| core.seed(req)).await?)
}
