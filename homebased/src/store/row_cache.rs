//! Rows a scheduling pass reads on every turn, kept decoded between reads and refreshed from
//! the rows SQLite says changed: the runs that hold lanes, the lanes themselves, and the open
//! episode of the blocked notices.
//!
//! A pass at 56 lanes read and decoded every held run and every lane, about twice a run
//! (docs/BENCHMARKS.md, "Issue 45"), while between two passes one or two runs change and the
//! lanes almost never. So the store's connection reports each row it changes
//! (`sqlite3_update_hook`), and a read decodes again only those rows.
//!
//! What keeps it exact, and why each case is covered:
//! - Every change this connection makes to a row of `runs`, `resources` or
//!   `notice_episodes` is reported with the row's rowid, triggers' changes included.
//!   Reporting a row too often only re-reads it; the last two are read again whole.
//! - A run's lanes (`run_lanes`, a table without rowids, so unreported) are written once, in
//!   the transaction that inserts the run, and deleted with it; their `held` flag follows the
//!   run's `phase`. So the run's own row reports every change of what is cached of them.
//! - A rollback (`sqlite3_rollback_hook`) may take back rows read meanwhile: all is read
//!   again. So is everything after another connection or process committed
//!   (`PRAGMA data_version` moved), since its changes are not reported here.
//! - Statements that change rows unreported (`REPLACE` conflicts, `DELETE` without `WHERE`)
//!   are not used on these tables.
//!
//! Debug builds, the ones the test suite drives, check each cached answer against a full
//! read and stop the daemon on a difference.

use super::{db_error, Db};
use homebased_shared::error::ApiResult;
use rusqlite::hooks::Action;
use rusqlite::Connection;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::notices::Episode;
use super::resources::Resource;
use super::runs::Run;

/// What changed since the cache was last brought up to date.
#[derive(Debug)]
struct Changed {
    /// Every held run is to be read again (at first, after a rollback, after another
    /// writer); `runs` is not kept meanwhile.
    all_runs: bool,
    runs: BTreeSet<i64>,
    /// The lanes are to be read again.
    resources: bool,
    /// The notice episodes are to be read again.
    episodes: bool,
}

impl Changed {
    fn everything() -> Changed {
        Changed {
            all_runs: true,
            runs: BTreeSet::new(),
            resources: true,
            episodes: true,
        }
    }
}

/// The decoded rows, and the changes reported since. Owned by the store, reached through
/// [`Db`]; single-threaded like its connection (the hooks' `Mutex` is only for `Send`).
pub(crate) struct RowCache {
    changed: Arc<Mutex<Changed>>,
    kept: RefCell<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The connection's `data_version` when the rows were read: another writer moves it.
    data_version: Option<i64>,
    /// The runs holding lanes, by rowid (the order a full read gives).
    held_runs: Option<BTreeMap<i64, Run>>,
    resources: Option<Vec<Resource>>,
    /// The open blocking episode of `JOB_BLOCKED` notices, read on every pass.
    open_episode: Option<Option<Episode>>,
}

/// The most changed rows of `runs` read one by one; more are read again in one full read.
const MAX_ROWS_READ_APART: usize = 256;

fn lock(changed: &Mutex<Changed>) -> MutexGuard<'_, Changed> {
    // A hook never panics while holding it; a poisoned lock still holds a valid set.
    changed.lock().unwrap_or_else(|e| e.into_inner())
}

impl RowCache {
    /// Starts reporting `conn`'s changes to a new, empty cache.
    pub(super) fn watch(conn: &Connection) -> RowCache {
        let changed = Arc::new(Mutex::new(Changed::everything()));
        let reported = changed.clone();
        conn.update_hook(Some(
            move |_: Action, database: &str, table: &str, rowid: i64| {
                if database != "main" {
                    return;
                }
                let mut changed = lock(&reported);
                match table {
                    "runs" if !changed.all_runs => {
                        changed.runs.insert(rowid);
                        // Past a few hundred (retention pruning a batch of finished jobs),
                        // one full read is cheaper than a lookup per row.
                        if changed.runs.len() > MAX_ROWS_READ_APART {
                            changed.all_runs = true;
                            changed.runs.clear();
                        }
                    }
                    "resources" => changed.resources = true,
                    "notice_episodes" => changed.episodes = true,
                    _ => {}
                }
            },
        ));
        let rolled_back = changed.clone();
        conn.rollback_hook(Some(move || *lock(&rolled_back) = Changed::everything()));
        RowCache {
            changed,
            kept: RefCell::new(Kept::default()),
        }
    }

    /// Drops what another writer may have changed unreported: everything, once
    /// `data_version` moved.
    fn check_other_writers(&self, db: Db) -> ApiResult<()> {
        let version: i64 = db
            .conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| db_error("read the data version", e))?;
        let mut kept = self.kept.borrow_mut();
        if kept.data_version != Some(version) {
            kept.data_version = Some(version);
            *lock(&self.changed) = Changed::everything();
        }
        Ok(())
    }

    /// The runs holding lanes in rowid order: `read_all` reads every one, `read_one` the
    /// row `rowid` if it holds lanes now.
    pub(super) fn held_runs(
        &self,
        db: Db,
        read_all: impl Fn(Db) -> ApiResult<Vec<(i64, Run)>>,
        read_one: impl Fn(Db, i64) -> ApiResult<Option<Run>>,
    ) -> ApiResult<Vec<Run>> {
        self.check_other_writers(db)?;
        let (all, rows) = {
            let mut changed = lock(&self.changed);
            let rows = std::mem::take(&mut changed.runs);
            let all = std::mem::replace(&mut changed.all_runs, false);
            (all, rows)
        };
        let mut kept = self.kept.borrow_mut();
        let refreshed = match kept.held_runs.take() {
            Some(mut runs) if !all => rows
                .into_iter()
                .try_for_each(|rowid| {
                    match read_one(db, rowid)? {
                        Some(run) => runs.insert(rowid, run),
                        None => runs.remove(&rowid),
                    };
                    Ok(())
                })
                .map(|()| runs),
            _ => read_all(db).map(|rows| rows.into_iter().collect()),
        };
        let runs = match refreshed {
            Ok(runs) => runs,
            Err(e) => {
                // Left unread: the next read starts over.
                lock(&self.changed).all_runs = true;
                return Err(e);
            }
        };
        let list: Vec<Run> = runs.values().cloned().collect();
        kept.held_runs = Some(runs);
        #[cfg(debug_assertions)]
        {
            let fresh: Vec<Run> = read_all(db)?.into_iter().map(|(_, run)| run).collect();
            assert_eq!(list, fresh, "the cached held runs differ from the store's");
        }
        Ok(list)
    }

    /// Every lane in resource order, as `read_all` reads them.
    pub(super) fn resources(
        &self,
        db: Db,
        read_all: impl Fn(Db) -> ApiResult<Vec<Resource>>,
    ) -> ApiResult<Vec<Resource>> {
        self.whole_table(db, |c| &mut c.resources, |k| &mut k.resources, read_all)
    }

    /// The open blocking episode, as `read` reads it.
    pub(super) fn open_episode(
        &self,
        db: Db,
        read: impl Fn(Db) -> ApiResult<Option<Episode>>,
    ) -> ApiResult<Option<Episode>> {
        self.whole_table(db, |c| &mut c.episodes, |k| &mut k.open_episode, read)
    }

    /// What `read` makes of a table, read again only once any row of it changed (`changed`
    /// is its flag, `kept` where its answer is kept).
    fn whole_table<T: Clone + PartialEq + std::fmt::Debug>(
        &self,
        db: Db,
        changed: fn(&mut Changed) -> &mut bool,
        kept: fn(&mut Kept) -> &mut Option<T>,
        read: impl Fn(Db) -> ApiResult<T>,
    ) -> ApiResult<T> {
        self.check_other_writers(db)?;
        let stale = std::mem::replace(changed(&mut lock(&self.changed)), false);
        let mut all_kept = self.kept.borrow_mut();
        let slot = kept(&mut all_kept);
        let value = match slot.take() {
            Some(value) if !stale => value,
            _ => match read(db) {
                Ok(value) => value,
                Err(e) => {
                    *changed(&mut lock(&self.changed)) = true;
                    return Err(e);
                }
            },
        };
        *slot = Some(value.clone());
        #[cfg(debug_assertions)]
        assert_eq!(value, read(db)?, "a cached table differs from the store's");
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use crate::lifecycle::RunPhase;
    use crate::scheduler::SlotPhase;
    use crate::store::{jobs, resources, runs, test_store, Db};
    use homebased_shared::error::ApiError;
    use homebased_shared::ids::{JobId, TaskId};
    use homebased_shared::queue::Priority;
    use homebased_shared::wire::ResourceOrigin;

    fn queued_job(db: Db) -> JobId {
        let spec = serde_json::json!({});
        let new = jobs::NewJob::for_test(&spec, Priority::Low);
        jobs::insert(db, &new).unwrap();
        new.id
    }

    /// The held runs and their phases as the scheduler sees them.
    fn held(db: Db) -> Vec<(TaskId, Option<SlotPhase>)> {
        runs::list_holding(db)
            .unwrap()
            .into_iter()
            .map(|run| (run.task, run.phase.as_ref().map(RunPhase::slot)))
            .collect()
    }

    /// The held runs and the lanes read through the cache follow each change the store
    /// makes, a transaction taken back, and a commit of another connection, which reports
    /// nothing to this one. (Debug builds also check every cached read against a full one.)
    #[test]
    fn cached_reads_follow_every_change_a_rollback_and_another_writer() {
        let (dir, mut store) = test_store();
        let (a, b) = store
            .write(|db| {
                let gpu0 = resources::insert(db, "gpu0", Some(0), ResourceOrigin::Manual)?;
                let gpu1 = resources::insert(db, "gpu1", Some(1), ResourceOrigin::Manual)?;
                let (a, b) = (queued_job(db), queued_job(db));
                assert!(
                    held(db).is_empty(),
                    "read inside the transaction: nothing held yet"
                );
                let a = runs::reserve(db, a, &[gpu0.id])?.unwrap().task;
                let b = runs::reserve(db, b, &[gpu1.id])?.unwrap().task;
                Ok((a, b))
            })
            .unwrap();
        let launching = |task| (task, Some(SlotPhase::Launching));
        assert_eq!(held(store.db()), [launching(a), launching(b)]);

        let executing = RunPhase::Executing { started_at: 7_000 };
        store
            .write(|db| runs::set_phase(db, b, Some(&executing)))
            .unwrap();
        assert_eq!(
            held(store.db()),
            [launching(a), (b, Some(executing.slot()))]
        );

        // Read inside a transaction that is then taken back: the cache must not keep it.
        let refused: Result<(), ApiError> = store.write(|db| {
            runs::set_phase(db, a, None)?;
            resources::adopt(db, resources::list(db)?[0].id, Some("renamed"), 0)?;
            assert_eq!(held(db), [(b, Some(executing.slot()))]);
            assert_eq!(resources::list(db)?[0].name, "renamed");
            Err(ApiError::internal("taken back"))
        });
        assert!(refused.is_err());
        assert_eq!(
            held(store.db()),
            [launching(a), (b, Some(executing.slot()))]
        );
        let names = |db| -> Vec<String> {
            resources::list(db)
                .unwrap()
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert_eq!(names(store.db()), ["gpu0", "gpu1"]);

        // Another connection frees a lane and renames the other.
        let other = rusqlite::Connection::open(dir.path().join("homebased.sqlite")).unwrap();
        other
            .execute(
                "UPDATE runs SET phase = NULL WHERE task = ?1",
                [a.to_string()],
            )
            .unwrap();
        other
            .execute(
                "UPDATE resources SET name = 'gpu-b' WHERE name = 'gpu1'",
                [],
            )
            .unwrap();
        assert_eq!(held(store.db()), [(b, Some(executing.slot()))]);
        assert_eq!(names(store.db()), ["gpu0", "gpu-b"]);

        // And this connection's own changes are seen again after that.
        store.write(|db| runs::set_phase(db, b, None)).unwrap();
        assert!(held(store.db()).is_empty());
    }

    /// More changed rows than are read one by one (a batch pruned, a burst reserved) are
    /// read again in one full read, with the same answer.
    #[test]
    fn many_changed_rows_are_read_again_whole() {
        let (_dir, mut store) = test_store();
        assert!(held(store.db()).is_empty());
        let count = super::MAX_ROWS_READ_APART + 10;
        let tasks = store
            .write(|db| {
                (0..count)
                    .map(|i| {
                        let lane = resources::insert(
                            db,
                            &format!("gpu{i}"),
                            Some(i as u32),
                            ResourceOrigin::Manual,
                        )?;
                        let job = queued_job(db);
                        Ok(runs::reserve(db, job, &[lane.id])?.unwrap().task)
                    })
                    .collect::<Result<Vec<_>, ApiError>>()
            })
            .unwrap();
        let read: Vec<TaskId> = held(store.db()).into_iter().map(|(t, _)| t).collect();
        assert_eq!(read, tasks);
        store
            .write(|db| tasks.iter().try_for_each(|t| runs::set_phase(db, *t, None)))
            .unwrap();
        assert!(held(store.db()).is_empty());
    }
}
