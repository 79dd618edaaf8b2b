//! The store: the only code that touches SQLite. One connection, owned by the core; every
//! change is one `BEGIN IMMEDIATE` transaction. Long reads that need not hold the core (the
//! queue listing) take a [`ReadSnapshot`]: a read-only connection of their own, pinned to the
//! store as it was when the core handed it out.
//!
//! - `schema.sql`, `schema_v2.sql` to `schema_v17.sql` and [`MIGRATIONS`]: versioned schema
//!   (`PRAGMA user_version`), one file per version, applied with foreign keys off and checked
//!   before each version commits (a version may rebuild a parent table: `schema_v14.sql`
//!   rebuilds `jobs` and `runs` so that their stop causes accept `time_limit`).
//! - [`machine`], [`resources`], [`jobs`], [`runs`], [`attentions`], [`events`],
//!   [`operations`], [`durability`]: one file per table, typed verbs over a [`Db`] (the connection or the
//!   open transaction). The connection never leaves this module: no other code knows SQL.
//! - [`peers`]: Fleet peers added with `fleet add`, and each address's bound machine UUID.
//! - [`notices`]: blocked-notice episodes and the check-due mark of runs.
//! - [`routes`]: Fleet's remote submits on the origin (job to authority, settled or pending)
//!   and the pull cursor per authority (`schema_v7.sql`).
//! - [`history`]: retention's reads and removals of finished jobs (`schema_v8.sql`).
//! - [`dependencies`]: the jobs each job's `after` names (`schema_v12.sql`).
//! - The lanes of each run live with [`runs`] (`schema_v15.sql`, `run_lanes`), those of each
//!   Attention with [`attentions`] (`schema_v16.sql`, `attention_lanes`).
//! - Every event has an id that is never given twice (`schema_v17.sql`, `AUTOINCREMENT`), the
//!   cursor of a thread's events ([`events::for_thread`]).
//! - [`integrity`]: the check at start, read-only, before [`Store::open`] writes anything.
//!
//! The store is opened with the daemon's [`Clock`]: the times a verb stamps by itself
//! (`created_at`, `updated_at`, an event's `at`) are [`Db::now`], and the core reads the same
//! clock ([`Store::clock`]).

pub mod attentions;
pub mod dependencies;
pub mod durability;
pub mod events;
pub mod history;
pub mod integrity;
pub mod jobs;
pub mod machine;
pub mod notices;
pub mod operations;
pub mod peers;
pub mod resources;
pub mod routes;
mod row_cache;
pub mod runs;

use crate::clock::Clock;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::time::Millis;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::{Path, PathBuf};

/// Migration N brings a database from `user_version` N-1 to N.
const MIGRATIONS: &[&str] = &[
    include_str!("store/schema.sql"),
    include_str!("store/schema_v2.sql"),
    include_str!("store/schema_v3.sql"),
    include_str!("store/schema_v4.sql"),
    include_str!("store/schema_v5.sql"),
    include_str!("store/schema_v6.sql"),
    include_str!("store/schema_v7.sql"),
    include_str!("store/schema_v8.sql"),
    include_str!("store/schema_v9.sql"),
    include_str!("store/schema_v10.sql"),
    include_str!("store/schema_v11.sql"),
    include_str!("store/schema_v12.sql"),
    include_str!("store/schema_v13.sql"),
    include_str!("store/schema_v14.sql"),
    include_str!("store/schema_v15.sql"),
    include_str!("store/schema_v16.sql"),
    include_str!("store/schema_v17.sql"),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub struct Store {
    conn: Connection,
    /// Where [`Store::snapshot`] opens its readers.
    path: PathBuf,
    /// Whether every commit so far is on disk: false after [`Store::write_unsynced`] until
    /// the next durable commit.
    synced: bool,
    /// The `synchronous` setting the connection has now.
    commits: Commits,
    /// Where the verbs read "now" ([`Db::now`]).
    clock: Clock,
    /// The held runs and the lanes, decoded once and refreshed by the rows that changed.
    rows: row_cache::RowCache,
}

/// How a commit reaches the disk (SQLite's `synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commits {
    /// `FULL`: the WAL is fsynced at every commit, which makes every earlier frame durable
    /// too.
    Durable,
    /// `NORMAL`: the commit is written to the WAL (safe against a killed process) but not
    /// fsynced (a machine crash may lose it).
    Unsynced,
}

impl Store {
    /// Opens (creating if needed) and migrates the database, its verbs reading `clock`. A
    /// database written by a newer homebased is refused and left untouched.
    pub fn open(path: &Path, clock: Clock) -> ApiResult<Store> {
        let conn = Connection::open(path).map_err(|e| db_error("open", e))?;
        configure(&conn)?;
        migrate(&conn)?;
        make_private(path)?;
        Ok(Store {
            rows: row_cache::RowCache::watch(&conn),
            conn,
            path: path.to_path_buf(),
            // A daemon killed before it made its last commits durable left them in the WAL,
            // written but perhaps not yet on disk: nothing is answered about them before the
            // first durable commit.
            synced: false,
            commits: Commits::Durable,
            clock,
        })
    }

    /// Opens an existing database read-only (for `daemon status` with the daemon down).
    pub fn open_read_only(path: &Path) -> ApiResult<Option<Store>> {
        if !path.exists() {
            return Ok(None);
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| db_error("open", e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| db_error("open", e))?;
        let version = user_version(&conn)?;
        if version > SCHEMA_VERSION {
            return Err(newer_schema(version));
        }
        if version < SCHEMA_VERSION {
            // Not yet migrated by a daemon of this version: nothing useful to read.
            return Ok(None);
        }
        Ok(Some(Store {
            rows: row_cache::RowCache::watch(&conn),
            conn,
            path: path.to_path_buf(),
            synced: true,
            commits: Commits::Durable,
            // It only reads, and only the CLI opens it: the CLI's clock is the system's.
            clock: Clock::system(),
        }))
    }

    /// The store for reading, outside any write transaction.
    pub fn db(&self) -> Db<'_> {
        Db {
            conn: &self.conn,
            clock: &self.clock,
            rows: Some(&self.rows),
        }
    }

    /// The clock the store was opened with: the core's too.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// A consistent view of the store as it is now, for a long read on another thread: its
    /// read transaction starts here, so no commit made after this call is seen, and none is
    /// held up (WAL readers do not block the writer, nor it them).
    pub fn snapshot(&self) -> ApiResult<ReadSnapshot> {
        // A connection per snapshot: opening one costs far less than the reads it is for.
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| db_error("open a reader", e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| db_error("open a reader", e))?;
        // The snapshot is fixed by the transaction's first read, not by its BEGIN.
        conn.execute_batch("BEGIN DEFERRED")
            .and_then(|()| conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(())))
            .map_err(|e| db_error("begin a read", e))?;
        Ok(ReadSnapshot {
            conn,
            clock: self.clock.clone(),
        })
    }

    /// Runs `f` in one immediate transaction: committed when it returns `Ok`, rolled back
    /// otherwise, so a refused request changes nothing. The commit is durable when this
    /// returns, and so is every commit before it: while an earlier commit is unsynced the
    /// transaction also counts a durability barrier, since a transaction that changes no page
    /// commits without an fsync.
    pub fn write<T>(&mut self, f: impl FnOnce(Db) -> ApiResult<T>) -> ApiResult<T> {
        let barrier = !self.synced;
        let value = self.transact(Commits::Durable, |db| {
            let value = f(db)?;
            if barrier {
                durability::barrier(db)?;
            }
            Ok(value)
        })?;
        self.synced = true;
        Ok(value)
    }

    /// [`Store::write`] without the fsync: the commit survives a killed process but not yet
    /// a machine crash, until the next [`Store::write`] or [`Store::sync`]. Readers on other
    /// connections may see it before then, so whoever answers for it holds the answer until
    /// [`Store::is_synced`] (the core does, for the submit it serves this way).
    pub fn write_unsynced<T>(&mut self, f: impl FnOnce(Db) -> ApiResult<T>) -> ApiResult<T> {
        let value = self.transact(Commits::Unsynced, f)?;
        self.synced = false;
        Ok(value)
    }

    /// Whether every commit so far is on disk.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Makes every commit so far durable: a durable commit of nothing but the barrier,
    /// whose fsync of the WAL takes every earlier frame with it. Nothing to do when synced.
    pub fn sync(&mut self) -> ApiResult<()> {
        if self.synced {
            return Ok(());
        }
        self.write(|_| Ok(()))
    }

    fn transact<T>(
        &mut self,
        commits: Commits,
        f: impl FnOnce(Db) -> ApiResult<T>,
    ) -> ApiResult<T> {
        if self.commits != commits {
            let setting = match commits {
                Commits::Durable => "FULL",
                Commits::Unsynced => "NORMAL",
            };
            self.conn
                .pragma_update(None, "synchronous", setting)
                .map_err(|e| db_error("configure", e))?;
            self.commits = commits;
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error("begin", e))?;
        let value = f(Db {
            conn: &tx,
            clock: &self.clock,
            rows: Some(&self.rows),
        })?;
        tx.commit().map_err(|e| db_error("commit", e))?;
        Ok(value)
    }
}

/// A read transaction on a connection of its own ([`Store::snapshot`]); it may move to another
/// thread. Its transaction ends, and its connection closes, when it is dropped.
pub struct ReadSnapshot {
    conn: Connection,
    clock: Clock,
}

impl ReadSnapshot {
    pub fn db(&self) -> Db<'_> {
        Db {
            conn: &self.conn,
            clock: &self.clock,
            // A snapshot reads its rows once: nothing to keep.
            rows: None,
        }
    }
}

/// What the table modules work on: the connection, or the open transaction of
/// [`Store::write`]. Its field is private to the store, so no code outside it can run SQL.
#[derive(Clone, Copy)]
pub struct Db<'a> {
    conn: &'a Connection,
    clock: &'a Clock,
    /// The store's decoded rows ([`row_cache`]); `None` on a connection of its own.
    rows: Option<&'a row_cache::RowCache>,
}

impl Db<'_> {
    /// "Now" for what a verb stamps by itself, from the store's clock.
    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// Whether `sql` (a `SELECT 1 ...` of one parameter) finds a row; `what` names the read
    /// in its error.
    pub(crate) fn any_row(&self, sql: &str, param: String, what: &str) -> ApiResult<bool> {
        use rusqlite::OptionalExtension;
        self.conn
            .prepare_cached(sql)
            .db(what)?
            .query_row([param], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
            .db(what)
    }
}

/// How long a statement waits for another process's lock (a backup tool, `sqlite3` holding
/// `BEGIN EXCLUSIVE`) before the request is refused as `storage_unavailable`: the core thread
/// answers every request, so this bounds how long one locked write holds up the others.
pub const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The database, its WAL and shared-memory files hold every stored argv and environment:
/// owner only, whatever the umask or the modes an older install left.
fn make_private(path: &Path) -> ApiResult<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut files = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        files.push(name.into());
    }
    for file in files {
        match std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ApiError::internal(format!(
                    "cannot make {} private: {e}",
                    file.display()
                )))
            }
        }
    }
    Ok(())
}

/// How many prepared statements the connection keeps. The store has about 80 distinct
/// ones; with rusqlite's default of 16 the busy paths (a submit, a pass, a launch, the
/// observations of a run) evicted each other's and parsed their SQL, triggers and CHECKs
/// again on nearly every call.
const STATEMENT_CACHE: usize = 128;

fn configure(conn: &Connection) -> ApiResult<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| db_error("configure", e))?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(|e| db_error("configure", e))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| db_error("configure", e))?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| db_error("configure", e))?;
    Ok(())
}

fn user_version(conn: &Connection) -> ApiResult<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| db_error("read version", e))
}

fn newer_schema(version: i64) -> ApiError {
    ApiError::internal(format!(
        "the database has schema version {version}, newer than this homebased understands \
         ({SCHEMA_VERSION}); it was left untouched: run the newer homebased"
    ))
}

fn migrate(conn: &Connection) -> ApiResult<()> {
    let version = user_version(conn)?;
    if version > SCHEMA_VERSION {
        return Err(newer_schema(version));
    }
    if version == SCHEMA_VERSION {
        return Ok(());
    }
    // A migration that rebuilds a parent table (`schema_v14.sql` rebuilds `jobs`) drops it
    // while rows of other tables still name it: SQLite's procedure for such changes runs with
    // foreign keys off (the pragma is a no-op inside a transaction, so it is set around them)
    // and checks every key before the new version commits.
    conn.pragma_update(None, "foreign_keys", "OFF")
        .map_err(|e| db_error("migrate", e))?;
    let migrated = run_migrations(conn, version);
    let restored = conn
        .pragma_update(None, "foreign_keys", "ON")
        .map_err(|e| db_error("migrate", e));
    migrated.and(restored)
}

fn run_migrations(conn: &Connection, version: i64) -> ApiResult<()> {
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let next = index as i64 + 1;
        // The migration, the check of every foreign key and the version bump commit together
        // or not at all.
        let applied = conn
            .execute_batch(&format!(
                "BEGIN IMMEDIATE;\n{sql}\nPRAGMA user_version = {next};"
            ))
            .map_err(|e| db_error("migrate", e))
            .and_then(|()| foreign_keys_hold(conn, next))
            .and_then(|()| {
                conn.execute_batch("COMMIT")
                    .map_err(|e| db_error("migrate", e))
            });
        if let Err(e) = applied {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

/// Every foreign key of the store still finds its row (`PRAGMA foreign_key_check` is empty).
fn foreign_keys_hold(conn: &Connection, version: i64) -> ApiResult<()> {
    let mut check = conn
        .prepare("PRAGMA foreign_key_check")
        .map_err(|e| db_error("migrate", e))?;
    let mut rows = check.query([]).map_err(|e| db_error("migrate", e))?;
    match rows.next().map_err(|e| db_error("migrate", e))? {
        None => Ok(()),
        Some(row) => {
            let table: String = row.get(0).unwrap_or_default();
            let parent: String = row.get(2).unwrap_or_default();
            Err(ApiError::internal(format!(
                "migration to schema version {version} left a row of {table} naming a missing \
                 row of {parent}; nothing was changed"
            )))
        }
    }
}

/// A database another process holds locked, a full disk or a failing write is
/// `storage_unavailable` (retryable: the transaction rolled back, nothing changed); any other
/// SQLite failure is `internal`: the evidence stays in the database, nobody edits it.
pub fn db_error(what: &str, e: rusqlite::Error) -> ApiError {
    if is_storage_unavailable(&e) {
        return ApiError::new(
            ErrorCode::StorageUnavailable,
            format!(
                "database {what} failed: {e}; the database is locked by another process, full \
                 or failing to write (waited {}s); nothing was changed, try again",
                BUSY_TIMEOUT.as_secs()
            ),
        );
    }
    ApiError::new(ErrorCode::Internal, format!("database {what} failed: {e}"))
}

fn is_storage_unavailable(e: &rusqlite::Error) -> bool {
    use rusqlite::ffi;
    let rusqlite::Error::SqliteFailure(failure, _) = e else {
        return false;
    };
    match failure.code {
        rusqlite::ErrorCode::DatabaseBusy
        | rusqlite::ErrorCode::DatabaseLocked
        | rusqlite::ErrorCode::DiskFull => true,
        rusqlite::ErrorCode::SystemIoFailure => matches!(
            failure.extended_code,
            ffi::SQLITE_IOERR_WRITE
                | ffi::SQLITE_IOERR_FSYNC
                | ffi::SQLITE_IOERR_DIR_FSYNC
                | ffi::SQLITE_IOERR_TRUNCATE
                | ffi::SQLITE_IOERR_SHMSIZE
        ),
        _ => false,
    }
}

/// A stored value that does not read back as its type: the row is reported, not guessed at.
pub(crate) fn bad_column(name: &str, e: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("column {name}: {e}").into(),
    )
}

/// Shorthand for mapping rusqlite results inside store functions.
pub(crate) trait DbResult<T> {
    fn db(self, what: &str) -> ApiResult<T>;
}

impl<T> DbResult<T> for rusqlite::Result<T> {
    fn db(self, what: &str) -> ApiResult<T> {
        self.map_err(|e| db_error(what, e))
    }
}

/// Test support that needs SQL of its own.
#[cfg(test)]
pub(crate) mod testing {
    use rusqlite::Connection;
    use std::path::Path;

    /// Holds the database as another process would with `BEGIN EXCLUSIVE` (a backup tool,
    /// `sqlite3`), until dropped.
    pub struct ExclusiveHold(Connection);

    pub fn hold_exclusive(path: &Path) -> ExclusiveHold {
        let conn = Connection::open(path).expect("the database opens a second time");
        conn.execute_batch("BEGIN EXCLUSIVE")
            .expect("nobody else holds the database");
        ExclusiveHold(conn)
    }

    impl Drop for ExclusiveHold {
        fn drop(&mut self) {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }
}

#[cfg(test)]
pub(crate) fn test_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("homebased.sqlite"), Clock::system()).unwrap();
    (dir, store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_held_by_another_process_is_storage_unavailable_and_unchanged() {
        let (dir, mut store) = test_store();
        let path = dir.path().join("homebased.sqlite");
        let hold = testing::hold_exclusive(&path);
        let started = std::time::Instant::now();
        let err = store
            .write(|db| {
                db.conn
                    .execute_batch("PRAGMA user_version = 99")
                    .map_err(|e| db_error("write", e))
            })
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::StorageUnavailable, "{err:?}");
        assert!(err.retryable);
        assert!(started.elapsed() < BUSY_TIMEOUT + std::time::Duration::from_secs(3));
        // Readers keep working under WAL while the other process holds its lock.
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        drop(hold);
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn a_snapshot_reads_the_store_as_it_was_when_taken_while_the_writer_goes_on() {
        use homebased_shared::queue::Priority;
        use jobs::NewJob;
        let (_dir, mut store) = test_store();
        let spec = serde_json::json!({});
        let first = NewJob::for_test(&spec, Priority::Medium);
        store.write(|db| jobs::insert(db, &first)).unwrap();
        let snapshot = store.snapshot().unwrap();
        // Commits after the snapshot: neither waits for it, nor is seen by it.
        let second = NewJob::for_test(&spec, Priority::High);
        store.write(|db| jobs::insert(db, &second)).unwrap();
        let seen =
            |db: Db| -> Vec<_> { jobs::list_open(db).unwrap().iter().map(|j| j.id).collect() };
        let reader = std::thread::spawn(move || seen(snapshot.db()));
        assert_eq!(reader.join().unwrap(), vec![first.id]);
        assert_eq!(
            seen(store.snapshot().unwrap().db()),
            vec![second.id, first.id]
        );
    }

    #[test]
    fn the_database_files_are_made_private_on_open() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, store) = test_store();
        drop(store);
        let path = dir.path().join("homebased.sqlite");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _store = Store::open(&path, Clock::system()).unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            let mode = entry.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", entry.path().display());
        }
    }

    /// A version 7 store (the build before retention), with history in it, opened by this
    /// one: its rows stay and retention's indexes are there and used.
    #[test]
    fn a_store_of_the_previous_version_keeps_its_rows_and_gains_the_history_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        // Version 7: the one before the history indexes (`schema_v8.sql`).
        let previous = 7;
        let job = homebased_shared::ids::JobId::new();
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..previous] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", previous as i64)
                .unwrap();
            conn.execute(
                "INSERT INTO jobs (id, thread, name, priority, position, state, spec, digest, \
                 steps, created_at, updated_at) VALUES (?1, ?2, 'old', 1, NULL, 'cancelled', \
                 '{}', 'd', 1, 10, 20)",
                (
                    job.to_string(),
                    homebased_shared::ids::ThreadId::new().to_string(),
                ),
            )
            .unwrap();
            conn.execute(
                "INSERT INTO events (job, seq, kind, body, created_at, delivered_at) \
                 VALUES (?1, 1, 'JOB_CANCELLED', '{}', 20, 21)",
                [job.to_string()],
            )
            .unwrap();
        }
        let store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        let kept = jobs::get(store.db(), job)
            .unwrap()
            .expect("the job is kept");
        assert_eq!(kept.name, "old");
        assert_eq!(history::event_count(store.db(), job).unwrap(), 1);
        for index in ["jobs_ended", "attentions_task", "operations_created"] {
            let found: bool = store
                .db()
                .conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?1)",
                    [index],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(found, "index {index}");
        }
        let listed = history::candidates(store.db(), 1_000, None, 10).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].job, listed[0].ended_at), (job, 20));
    }

    #[test]
    fn an_unsynced_commit_is_made_durable_by_the_next_write_even_one_that_changes_nothing() {
        let (_dir, mut store) = test_store();
        let barriers = |store: &Store| durability::barriers(store.db()).unwrap();
        // An earlier daemon's last commits may still be unsynced.
        assert!(!store.is_synced(), "not synced at open");
        store.sync().unwrap();
        assert!(store.is_synced());
        assert_eq!(barriers(&store), 1);
        store.sync().unwrap();
        assert_eq!(barriers(&store), 1, "nothing to make durable");

        store.write_unsynced(|_| Ok(())).unwrap();
        assert!(!store.is_synced());
        // A write that changes no page would commit without an fsync: it carries a barrier.
        store.write(|_| Ok(())).unwrap();
        assert!(store.is_synced());
        assert_eq!(barriers(&store), 2);
        store.write(|_| Ok(())).unwrap();
        assert_eq!(barriers(&store), 2, "none while synced");

        // A refused write leaves the store as unsynced as it was.
        store.write_unsynced(|_| Ok(())).unwrap();
        let refused: ApiResult<()> = store.write(|_| Err(ApiError::usage("refused")));
        assert!(refused.is_err());
        assert!(!store.is_synced());
        store.sync().unwrap();
        assert_eq!(barriers(&store), 3);
    }

    #[test]
    fn an_unsynced_commit_is_committed_for_every_reader_and_a_durable_write_goes_back_to_full() {
        let (dir, mut store) = test_store();
        store.sync().unwrap();
        store.write_unsynced(durability::barrier).unwrap();
        let other = Connection::open(dir.path().join("homebased.sqlite")).unwrap();
        let seen: i64 = other
            .query_row("SELECT barriers FROM durability", [], |r| r.get(0))
            .unwrap();
        assert_eq!(seen, 2, "committed, if not yet synced");
        let setting = |store: &Store| -> i64 {
            store
                .db()
                .conn
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(setting(&store), 1, "NORMAL for the unsynced write");
        store.write(|_| Ok(())).unwrap();
        assert_eq!(setting(&store), 2, "FULL again for every durable write");
    }

    /// A v12 store opened by this build: its runs have no GPU memory peak (unknown, not 0)
    /// and its lanes are whole cards; a MIG slice then gets a lane of its own.
    #[test]
    fn v13_leaves_old_runs_without_a_peak_and_lanes_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..12] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 12).unwrap();
        }
        let mut store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        store
            .write(|tx| {
                let lane = resources::insert(
                    tx,
                    "gpu0",
                    Some(0),
                    homebased_shared::wire::ResourceOrigin::Detected,
                )?;
                assert_eq!(lane.mig, None);
                let place = crate::detection::MigPlace {
                    gpu: 1,
                    instance: 2,
                };
                let slice = resources::insert_slice(tx, "gpu1-mig2", place)?;
                assert_eq!(resources::get(tx, slice.id)?.unwrap().mig, Some(place));
                assert!(
                    resources::insert_slice(tx, "other", place).is_err(),
                    "one lane per instance"
                );
                let spec = serde_json::json!({});
                let job = jobs::NewJob::for_test(&spec, homebased_shared::queue::Priority::Low);
                jobs::insert(tx, &job)?;
                let run = runs::reserve(tx, job.id, &[lane.id])?.unwrap();
                assert_eq!(runs::get(tx, run.task)?.unwrap().gpu_memory_peak_mib, None);
                Ok(())
            })
            .unwrap();
    }

    /// A v9 store opened by this build gains the barrier count and keeps its machine.
    #[test]
    fn v10_adds_the_barrier_count_and_keeps_the_machine() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let machine_id = homebased_shared::ids::MachineId::new();
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..9] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 9).unwrap();
            conn.execute(
                "INSERT INTO machine (singleton, id, created_at) VALUES (1, ?1, 5)",
                [machine_id.to_string()],
            )
            .unwrap();
        }
        let mut store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        assert_eq!(machine::get(store.db()).unwrap(), Some(machine_id));
        assert_eq!(durability::barriers(store.db()).unwrap(), 0);
        store.sync().unwrap();
        assert_eq!(durability::barriers(store.db()).unwrap(), 1);
    }

    /// A v8 store (dense positions) with queued, active and finished jobs, opened by this
    /// build: every job keeps its level and position, the level counts are right, and the
    /// queue goes on from there (a submit joins the back, a move and an end renumber nobody).
    #[test]
    fn v9_keeps_every_position_of_a_v8_queue() {
        use homebased_shared::ids::{JobId, ThreadId};
        use homebased_shared::queue::{JobStatus, Priority};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        // (level rank, position, state) as v8 stored them.
        let rows = [
            (1, Some(1), "active"),
            (1, Some(2), "queued"),
            (1, Some(3), "queued"),
            (2, Some(1), "queued"),
            (0, Some(1), "queued"),
            (0, Some(2), "queued"),
            (1, None, "succeeded"),
        ];
        let ids: Vec<JobId> = rows.iter().map(|_| JobId::new()).collect();
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &MIGRATIONS[..8] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 8).unwrap();
            for (id, (rank, position, state)) in ids.iter().zip(rows) {
                conn.execute(
                    "INSERT INTO jobs (id, thread, name, priority, position, state, spec, \
                     digest, steps, created_at, updated_at) \
                     VALUES (?1, ?2, 'old', ?3, ?4, ?5, '{}', 'd', 1, 1, 1)",
                    (
                        id.to_string(),
                        ThreadId::new().to_string(),
                        rank,
                        position,
                        state,
                    ),
                )
                .unwrap();
            }
            // The active job's run, launching on a lane, as v8 kept it.
            conn.execute_batch(&format!(
                "INSERT INTO resources (id, name, origin, created_at) \
                 VALUES ('{lane}', 'gpu0', 'manual', 1); \
                 INSERT INTO runs (task, job, resource, run_number, step, resume, status, \
                 phase, reserved_at) \
                 VALUES ('{task}', '{job}', '{lane}', 1, 0, 0, 'running', 'launching', 1);",
                lane = homebased_shared::ids::ResourceId::new(),
                task = homebased_shared::ids::TaskId::new(),
                job = ids[0],
            ))
            .unwrap();
        }
        let mut store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        let db = store.db();
        for (id, (rank, position, _)) in ids.iter().zip(rows) {
            let job = jobs::get(db, *id).unwrap().unwrap();
            assert_eq!(job.priority.rank(), rank);
            assert_eq!(job.position(), position.map(|p: i64| p as u32), "job {id}");
        }
        let listed: Vec<_> = jobs::list_open(db)
            .unwrap()
            .into_iter()
            .map(|j| (j.id, j.position()))
            .collect();
        assert_eq!(
            listed,
            vec![
                (ids[3], Some(1)),
                (ids[0], Some(1)),
                (ids[1], Some(2)),
                (ids[2], Some(3)),
                (ids[4], Some(1)),
                (ids[5], Some(2)),
            ]
        );
        assert_eq!(jobs::level_len(db, Priority::Medium).unwrap(), 3);
        assert_eq!(jobs::level_len(db, Priority::Low).unwrap(), 2);
        assert_eq!(jobs::count_in_flight(db).unwrap(), 6);
        store
            .write(|tx| {
                let spec = serde_json::json!({});
                let new = jobs::NewJob::for_test(&spec, Priority::Medium);
                jobs::insert(tx, &new)?;
                assert_eq!(jobs::require(tx, new.id)?.position(), Some(4));
                let last = jobs::require(tx, ids[2])?;
                jobs::place(tx, &last, Priority::Medium, 1)?;
                let first = jobs::require(tx, ids[0])?;
                jobs::finish(tx, &first, JobStatus::Succeeded, None)?;
                let order: Vec<_> = jobs::list_open(tx)?
                    .into_iter()
                    .filter(|j| j.priority == Priority::Medium)
                    .map(|j| (j.id, j.position()))
                    .collect();
                assert_eq!(
                    order,
                    vec![(ids[2], Some(1)), (ids[1], Some(2)), (new.id, Some(3))]
                );
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn migrates_once_and_refuses_a_newer_schema() {
        let (dir, store) = test_store();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        drop(store);
        let path = dir.path().join("homebased.sqlite");
        Store::open(&path, Clock::system()).unwrap();
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        let err = Store::open(&path, Clock::system()).err().unwrap();
        assert_eq!(err.code, ErrorCode::Internal);
        assert!(err.message.contains("newer"));
        let conn = Connection::open(&path).unwrap();
        assert_eq!(
            user_version(&conn).unwrap(),
            SCHEMA_VERSION + 1,
            "left untouched"
        );
    }

    #[test]
    fn the_v7_rebuild_of_events_keeps_every_event_and_its_delivery_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let conn = Connection::open(&path).unwrap();
        for (i, sql) in MIGRATIONS.iter().take(6).enumerate() {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {};", i + 1))
                .unwrap();
        }
        let job = "01a23100-0000-7000-8000-000000000001";
        conn.execute_batch(&format!(
            "INSERT INTO jobs (id, thread, name, priority, position, state, spec, digest, steps, \
               created_at, updated_at) VALUES ('{job}', '01a23100-0000-7000-8000-000000000002', \
               'old', 1, 1, 'queued', '{{}}', 'd', 1, 1, 1); \
             INSERT INTO events (job, seq, kind, body, created_at, delivered_at, attempts) VALUES \
               ('{job}', 1, 'JOB_PREEMPTED', '{{}}', 5, 6, 0), \
               ('{job}', 2, 'JOB_SUCCEEDED', '{{}}', 7, NULL, 3);"
        ))
        .unwrap();
        drop(conn);
        let store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        let id: homebased_shared::ids::JobId = job.parse().unwrap();
        assert_eq!(
            events::delivery_state(store.db(), id, 1).unwrap(),
            Some((true, false))
        );
        let pending = events::get(store.db(), id, 2).unwrap().unwrap();
        assert_eq!((pending.attempts, pending.pulled_from), (3, None));
        let heads = events::pending_heads(store.db()).unwrap();
        assert_eq!(
            heads.iter().map(|p| (p.job, p.seq)).collect::<Vec<_>>(),
            vec![(id, 2)]
        );
    }

    #[test]
    fn the_v14_rebuild_keeps_jobs_runs_and_their_keys_and_accepts_time_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let conn = Connection::open(&path).unwrap();
        for (i, sql) in MIGRATIONS.iter().take(13).enumerate() {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {};", i + 1))
                .unwrap();
        }
        let gpu = "01a23100-0000-7000-8000-0000000000a0";
        let (queued, active, done) = (
            "01a23100-0000-7000-8000-000000000001",
            "01a23100-0000-7000-8000-000000000002",
            "01a23100-0000-7000-8000-000000000003",
        );
        let task = "01a23100-0000-7000-8000-0000000000b0";
        let thread = "01a23100-0000-7000-8000-0000000000c0";
        conn.execute_batch(&format!(
            "INSERT INTO resources (id, name, device, origin, created_at) \
               VALUES ('{gpu}', 'gpu0', 0, 'detected', 1); \
             INSERT INTO jobs (id, thread, name, priority, slot_key, state, spec, digest, steps, \
               created_at, updated_at, last_stop_cause, env, origin) VALUES \
               ('{queued}', '{thread}', 'q', 1, 5, 'queued', '{{}}', 'd', 1, 1, 1, 'yield', NULL, NULL), \
               ('{active}', '{thread}', 'a', 1, 9, 'active', '{{}}', 'd', 2, 1, 2, 'restart', '{{}}', NULL), \
               ('{done}', '{thread}', 'd', 0, NULL, 'failed', '{{}}', 'd', 1, 1, 3, NULL, NULL, NULL); \
             INSERT INTO runs (task, job, resource, run_number, step, resume, status, phase, \
               stop_cause, stop_requested_at, stop_for_job, reserved_at, started_at, \
               workload_started_at, gpu_memory_peak_mib) VALUES \
               ('{task}', '{active}', '{gpu}', 1, 0, 0, 'running', 'stopping', 'restart', 30, \
                '{queued}', 10, 20, 20, 512); \
             INSERT INTO job_dependencies (job, ord, after) VALUES ('{queued}', 0, '{done}');"
        ))
        .unwrap();
        let rowid_of = |conn: &Connection, id: &str| -> i64 {
            conn.query_row("SELECT rowid FROM jobs WHERE id = ?1", [id], |r| r.get(0))
                .unwrap()
        };
        let rowids: Vec<i64> = [queued, active, done]
            .iter()
            .map(|id| rowid_of(&conn, id))
            .collect();
        let levels = |conn: &Connection| -> Vec<i64> {
            conn.prepare("SELECT live FROM queue_levels ORDER BY priority")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(levels(&conn), vec![0, 2, 0]);
        drop(conn);

        let store = Store::open(&path, Clock::system()).unwrap();
        let conn = &store.conn;
        assert_eq!(user_version(conn).unwrap(), SCHEMA_VERSION);
        // Every row, its rowid and every column came across.
        let after: Vec<i64> = [queued, active, done]
            .iter()
            .map(|id| rowid_of(conn, id))
            .collect();
        assert_eq!(after, rowids);
        let run = runs::get(store.db(), task.parse().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(
            run.phase.as_ref().and_then(|p| p.stop()).map(|s| s.cause),
            Some(homebased_shared::queue::StopCause::Restart)
        );
        assert_eq!(run.started_at, Some(20));
        let job = jobs::require(store.db(), active.parse().unwrap()).unwrap();
        assert_eq!(job.steps, 2);
        let deps: i64 = conn
            .query_row("SELECT COUNT(*) FROM job_dependencies", [], |r| r.get(0))
            .unwrap();
        assert_eq!(deps, 1);
        // The queue's level counts are kept, and the triggers that keep them are back.
        assert_eq!(levels(conn), vec![0, 2, 0]);
        conn.execute(
            "UPDATE jobs SET slot_key = NULL, state = 'cancelled' WHERE id = ?1",
            [queued],
        )
        .unwrap();
        assert_eq!(levels(conn), vec![0, 1, 0]);
        // The new cause is accepted where causes are stored; nothing else is.
        conn.execute(
            "UPDATE runs SET stop_cause = 'time_limit' WHERE task = ?1",
            [task],
        )
        .unwrap();
        conn.execute(
            "UPDATE jobs SET last_stop_cause = 'time_limit' WHERE id = ?1",
            [active],
        )
        .unwrap();
        assert!(conn
            .execute(
                "UPDATE runs SET stop_cause = 'timeout' WHERE task = ?1",
                [task]
            )
            .is_err());
        // Foreign keys are enforced again once the store is open.
        let fk: i64 = conn
            .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
            .unwrap();
        assert_eq!(fk, 1);
        let orphan = conn.execute(
            &format!(
                "INSERT INTO runs (task, job, resource, run_number, step, resume, status, \
                   reserved_at) VALUES ('01a23100-0000-7000-8000-0000000000b1', \
                   '01a23100-0000-7000-8000-0000000000ff', '{gpu}', 1, 0, 0, 'queued', 1)"
            ),
            [],
        );
        assert!(
            orphan.is_err(),
            "a run of a job that does not exist is refused"
        );
    }

    /// v16: every Attention so far holds its one lane; the open Attention of a run on two
    /// lanes holds both; a released one holds nothing.
    #[test]
    fn v16_gives_each_attention_its_lanes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let conn = Connection::open(&path).unwrap();
        for (i, sql) in MIGRATIONS.iter().take(15).enumerate() {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {};", i + 1))
                .unwrap();
        }
        let gpu = |i: u32| format!("01a23100-0000-7000-8000-0000000000a{i}");
        let (job, thread, task) = (
            "01a23100-0000-7000-8000-000000000001",
            "01a23100-0000-7000-8000-0000000000c0",
            "01a23100-0000-7000-8000-0000000000b0",
        );
        let (of_run, unknown, released) = (
            "01a23100-0000-7000-8000-0000000000d1",
            "01a23100-0000-7000-8000-0000000000d2",
            "01a23100-0000-7000-8000-0000000000d3",
        );
        let unknown_task = "01a23100-0000-7000-8000-0000000000b1";
        // The record v11 to v15 wrote for a live run the store did not know: one lane.
        let failure = format!(
            r#"{{"job":"{job}","message":"check it","pid":4242,"resources":["gpu2"],"result":"unknown_live_run","resume":false,"run_number":1,"step":0,"task":"{unknown_task}"}}"#
        );
        conn.execute_batch(&format!(
            "INSERT INTO resources (id, name, device, origin, created_at) VALUES \
               ('{}', 'gpu0', 0, 'detected', 1), ('{}', 'gpu1', 1, 'detected', 1), \
               ('{}', 'gpu2', 2, 'detected', 1), ('{}', 'gpu3', 3, 'detected', 1); \
             INSERT INTO jobs (id, thread, name, priority, slot_key, state, spec, digest, steps, \
               created_at, updated_at, gpus) VALUES \
               ('{job}', '{thread}', 'pair', 1, 5, 'active', '{{}}', 'd', 1, 1, 1, 2); \
             INSERT INTO runs (task, job, resource, run_number, step, resume, status, phase, \
               reserved_at, attention, cleanup) VALUES \
               ('{task}', '{job}', '{}', 1, 0, 0, 'lost', 'attention', 10, '{of_run}', '{{}}'); \
             INSERT INTO run_lanes (task, ord, resource, held) VALUES \
               ('{task}', 0, '{}', 1), ('{task}', 1, '{}', 1); \
             INSERT INTO attentions (id, resource, task, failure, created_at, released_at) VALUES \
               ('{of_run}', '{}', '{task}', '{{}}', 20, NULL), \
               ('{unknown}', '{}', '{unknown_task}', '{failure}', 21, NULL), \
               ('{released}', '{}', '{unknown_task}', '{failure}', 5, 6);",
            gpu(0),
            gpu(1),
            gpu(2),
            gpu(3),
            gpu(0),
            gpu(0),
            gpu(1),
            gpu(0),
            gpu(2),
            gpu(3),
        ))
        .unwrap();
        drop(conn);

        let store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        let lanes_of = |attention: &str| -> Vec<(String, i64)> {
            store
                .conn
                .prepare(
                    "SELECT resource, open FROM attention_lanes WHERE attention = ?1 ORDER BY ord",
                )
                .unwrap()
                .query_map([attention], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        };
        assert_eq!(lanes_of(of_run), [(gpu(0), 1), (gpu(1), 1)]);
        assert_eq!(lanes_of(unknown), [(gpu(2), 1)]);
        assert_eq!(lanes_of(released), [(gpu(3), 0)]);
        let db = store.db();
        let held: Vec<bool> = (0..4)
            .map(|i| attentions::is_held(db, gpu(i).parse().unwrap()).unwrap())
            .collect();
        assert_eq!(held, [true, true, true, false]);
        let holds = attentions::lane_holds(db).unwrap();
        assert_eq!(holds.len(), 1, "the run's own Attention is not a lane hold");
        assert_eq!(holds[0].resources, [gpu(2).parse().unwrap()]);
    }

    /// v17: a v16 store with a thread's events (local ones, one pulled for a remote job, one
    /// of another thread, a gap where retention took some) reads back the same events with
    /// the same cursors (each event's id is the rowid v16 answered as its cursor), keeps every
    /// delivery state, and gives new events larger ids, even once the newest are pruned.
    #[test]
    fn v17_gives_every_event_its_old_rowid_as_id_and_new_ones_larger() {
        use homebased_shared::event::EventKind;
        use homebased_shared::ids::{JobId, MachineId, ThreadId};
        use homebased_shared::queue::Priority;
        use homebased_shared::wire::RelayedEvent;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let conn = Connection::open(&path).unwrap();
        for (i, sql) in MIGRATIONS.iter().take(16).enumerate() {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {};", i + 1))
                .unwrap();
        }
        let clock = Clock::system();
        let v16 = Db {
            conn: &conn,
            clock: &clock,
            rows: None,
        };
        let spec = serde_json::json!({});
        let thread = ThreadId::new();
        let job_on = |thread: ThreadId| {
            let new = jobs::NewJob {
                thread,
                ..jobs::NewJob::for_test(&spec, Priority::Medium)
            };
            jobs::insert(v16, &new).unwrap();
            jobs::require(v16, new.id).unwrap()
        };
        let add = |job: &jobs::Job, kind| {
            events::append(v16, MachineId::new(), job, kind, None, Default::default()).unwrap()
        };
        let (a, gone, other) = (job_on(thread), job_on(thread), job_on(ThreadId::new()));
        add(&a, EventKind::JobPreempted);
        add(&gone, EventKind::JobCancelled);
        add(&other, EventKind::JobCancelled);
        add(&a, EventKind::JobSucceeded);
        assert!(events::mark_delivered(v16, a.id, 1, 9).unwrap());
        // A remote job submitted here on the thread: its event arrives by pull.
        let (remote, authority) = (JobId::new(), MachineId::new());
        routes::insert(v16, remote, authority, thread, "d", 1).unwrap();
        let pulled: RelayedEvent = serde_json::from_value(serde_json::json!({
            "api_version": 1, "event": "JOB_SUCCEEDED", "job": remote, "seq": 1,
            "at": "2026-12-01T10:00:00.000Z", "thread": thread, "name": "far",
            "machine": authority, "resource": null, "task": null, "run_number": null,
            "step": null}))
        .unwrap();
        assert!(events::insert_pulled(v16, authority, &pulled, 2).unwrap());
        // Retention took a job of the thread: a gap in the rowids.
        conn.execute("DELETE FROM events WHERE job = ?1", [gone.id.to_string()])
            .unwrap();
        // What v16 answered: each event of the thread with its rowid as the cursor.
        let answered: Vec<(u64, String, u32)> = conn
            .prepare("SELECT rowid, job, seq FROM events WHERE job IN (?1, ?2) ORDER BY rowid")
            .unwrap()
            .query_map([a.id.to_string(), remote.to_string()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            answered.iter().map(|(n, _, _)| *n).collect::<Vec<_>>(),
            vec![1, 4, 5],
            "rowids with a gap"
        );
        drop(conn);

        let mut store = Store::open(&path, Clock::system()).unwrap();
        assert_eq!(user_version(store.db().conn).unwrap(), SCHEMA_VERSION);
        let read = |store: &Store, after| -> Vec<(u64, String, u32)> {
            events::for_thread(store.db(), thread, after, 10)
                .unwrap()
                .into_iter()
                .map(|(n, e)| (n, e.answer.job.to_string(), e.answer.seq))
                .collect()
        };
        assert_eq!(
            read(&store, 0),
            answered,
            "the same events, the same cursors"
        );
        assert_eq!(
            read(&store, answered[0].0),
            answered[1..],
            "after an old cursor"
        );
        assert!(read(&store, answered[2].0).is_empty());
        assert_eq!(
            events::delivery_state(store.db(), a.id, 1).unwrap(),
            Some((true, false))
        );
        assert_eq!(
            events::get(store.db(), remote, 1)
                .unwrap()
                .unwrap()
                .pulled_from,
            Some(authority)
        );
        assert!(events::get(store.db(), other.id, 1).unwrap().is_some());

        // New events go on above every id v16 gave, and stay above once the newest go.
        let next = |store: &mut Store| -> u64 {
            store
                .write(|tx| {
                    let job = jobs::require(tx, a.id)?;
                    events::append(
                        tx,
                        MachineId::new(),
                        &job,
                        EventKind::JobPreempted,
                        None,
                        Default::default(),
                    )?;
                    Ok(())
                })
                .unwrap();
            read(store, 0).last().unwrap().0
        };
        let first = next(&mut store);
        assert_eq!(first, 6, "one above the largest rowid of v16");
        store
            .write(|tx| {
                tx.conn
                    .execute("DELETE FROM events WHERE id = ?1", [first as i64])
                    .map_err(|e| db_error("prune", e))
            })
            .unwrap();
        assert_eq!(next(&mut store), 7, "a pruned id is never given again");
    }

    #[test]
    fn a_migration_that_breaks_a_foreign_key_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let conn = Connection::open(&path).unwrap();
        for (i, sql) in MIGRATIONS.iter().take(13).enumerate() {
            conn.execute_batch(&format!("{sql}\nPRAGMA user_version = {};", i + 1))
                .unwrap();
        }
        // A run naming a job that is not there: what a faulty rebuild would leave.
        conn.execute_batch(
            "INSERT INTO resources (id, name, device, origin, created_at) \
               VALUES ('01a23100-0000-7000-8000-0000000000a0', 'gpu0', 0, 'detected', 1); \
             PRAGMA foreign_keys = OFF; \
             INSERT INTO runs (task, job, resource, run_number, step, resume, status, \
               reserved_at) VALUES ('01a23100-0000-7000-8000-0000000000b1', \
               '01a23100-0000-7000-8000-0000000000ff', '01a23100-0000-7000-8000-0000000000a0', \
               1, 0, 0, 'queued', 1);",
        )
        .unwrap();
        drop(conn);
        let err = Store::open(&path, Clock::system()).err().unwrap();
        assert_eq!(err.code, ErrorCode::Internal);
        assert!(err.message.contains("version 14"), "{}", err.message);
        let conn = Connection::open(&path).unwrap();
        assert_eq!(
            user_version(&conn).unwrap(),
            13,
            "left at the version it had"
        );
    }
}
