//! The store's check at start (SPEC section 1): `PRAGMA quick_check` of the whole file
//! before anything opens it for writing, so a damaged store is refused as `storage_damaged`
//! with nothing in the home changed, instead of being served and failing later, read by read.
//!
//! The check has a read-only connection of its own, closed before the writer opens:
//! - With no WAL to read (a store closed cleanly), the file is opened `immutable`: SQLite
//!   takes no lock and creates neither `-wal` nor `-shm`, so not a byte of the home changes.
//!   The daemon holds `daemon.lock`, so no other homebased writes meanwhile.
//! - With a WAL (the last daemon was killed), its frames are part of the store and are read.
//!   That needs SQLite's shared-memory index, `-shm`: the one file the check may write (its
//!   read marks, or the index rebuilt from the WAL), derived data every reader rewrites. A
//!   read-only connection never checkpoints, so the store and its `-wal` keep every byte.
//!
//! A store its daemon closed cleanly is sealed: `<store>.sealed` records the identity of its
//! files (device, inode, size, modification and change times of the file and its `-wal`)
//! as they were after the close. A start that finds them exactly so skips the full check
//! ([`sealed_and_unchanged`]): nothing has written the files since a daemon that had read
//! every page it served left them, and a `daemon restart` of a long history stays fast. Any
//! other start checks in full: after a crash (the seal is broken before the writer opens),
//! a store restored from a copy (another inode, another change time), a WAL cut short or
//! garbage written into a page (another size or time).
//!
//! Only after the check passes does the writer open the store, recover its WAL, checkpoint
//! and migrate it. `quick_check` reads every page once (it leaves out only the comparison of
//! each index with its table): its cost grows with the file, measured by the bench's
//! `integrity` workload.

use super::db_error;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::time::{Duration, Instant};

/// How many problems `quick_check` lists before it stops: enough for the report, and a
/// store damaged everywhere is not read to its end to say so.
const PROBLEMS_LISTED: usize = 10;

/// What a passed check read, for the daemon's log.
#[derive(Debug, Clone, Copy)]
pub struct Checked {
    pub bytes: u64,
    pub elapsed: Duration,
}

/// Checks the store at `path` without writing it. `None` when there is no store yet (a new
/// home); `storage_damaged` when SQLite finds it damaged or not a database at all.
pub fn check(path: &Path) -> ApiResult<Option<Checked>> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    let started = Instant::now();
    let uri = check_uri(path, has_wal(path));
    let rows = Connection::open_with_flags(
        &uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|conn| quick_check(&conn));
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) if is_damage(&e) => return Err(damaged(path, &[e.to_string()])),
        Err(e) => return Err(db_error("check", e)),
    };
    verdict(rows).map_err(|problems| damaged(path, &problems))?;
    Ok(Some(Checked {
        bytes: meta.len(),
        elapsed: started.elapsed(),
    }))
}

/// One file's identity as the kernel keeps it: a copy, a restore or any write changes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

/// The store's files: the database and its `-wal` (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Seal {
    store: Option<FileIdentity>,
    wal: Option<FileIdentity>,
}

fn identity(path: &Path) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(path).ok()?;
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    Some(FileIdentity {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: ns(m.mtime(), m.mtime_nsec()),
        ctime_ns: ns(m.ctime(), m.ctime_nsec()),
    })
}

fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

fn seal_of(path: &Path) -> Seal {
    Seal {
        store: identity(path),
        wal: identity(&with_suffix(path, "-wal")),
    }
}

/// Whether the store's files are exactly as its daemon left them when it closed them
/// cleanly (see the module's doc): then the full check may be skipped.
pub fn sealed_and_unchanged(path: &Path) -> bool {
    let Ok(text) = std::fs::read(with_suffix(path, ".sealed")) else {
        return false;
    };
    let Ok(sealed) = serde_json::from_slice::<Seal>(&text) else {
        return false;
    };
    sealed.store.is_some() && sealed == seal_of(path)
}

/// Removes the seal before the writer opens the store: a daemon that dies from here on leaves
/// a store the next start checks in full.
pub fn break_seal(path: &Path) -> ApiResult<()> {
    match std::fs::remove_file(with_suffix(path, ".sealed")) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ApiError::new(
            ErrorCode::StorageUnavailable,
            format!("cannot remove the store's seal: {e}"),
        )),
    }
}

/// Seals the store after its daemon closed it cleanly (every connection gone). Best effort:
/// without a seal the next start checks in full.
pub fn seal(path: &Path) {
    let Ok(text) = serde_json::to_vec(&seal_of(path)) else {
        return;
    };
    let sealed = with_suffix(path, ".sealed");
    let temporary = with_suffix(path, ".sealed.tmp");
    let written = std::fs::write(&temporary, text).and_then(|()| {
        std::fs::set_permissions(
            &temporary,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )?;
        std::fs::rename(&temporary, &sealed)
    });
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot seal the store; the next start checks it in full");
    }
}

fn quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut statement = conn.prepare(&format!("PRAGMA quick_check({PROBLEMS_LISTED})"))?;
    let rows = statement.query_map([], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// Whether the store has WAL frames the check must read (a file of zero bytes has none).
fn has_wal(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).is_ok_and(|m| m.len() > 0)
}

/// The URI the check opens: `immutable` when there is no WAL (no lock, no `-shm`), else
/// read-only. The path is percent-encoded: a `?` or `#` in a home would end it early.
fn check_uri(path: &Path, wal: bool) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &byte in path.as_os_str().as_bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            uri.push(byte as char);
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str(if wal { "?mode=ro" } else { "?immutable=1" });
    uri
}

/// `quick_check` answers one row `ok` for a sound store, else one row per problem.
fn verdict(rows: Vec<String>) -> Result<(), Vec<String>> {
    if rows.len() == 1 && rows[0] == "ok" {
        return Ok(());
    }
    if rows.is_empty() {
        return Err(vec!["quick_check returned nothing".into()]);
    }
    Err(rows)
}

/// A failure that says the file is damaged, as opposed to one that says it cannot be read
/// now (locked, missing permission), which is reported as such.
fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(
                failure.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            )
    )
}

fn damaged(path: &Path, problems: &[String]) -> ApiError {
    let path = path.display();
    ApiError::new(
        ErrorCode::StorageDamaged,
        format!(
            "the store {path} failed its check at start ({}); the daemon will not serve it and \
             left the home as it was. Keep {path} and its -wal file ({path}-wal) as evidence, \
             stop anything that uses this home, and restore a copy of the store taken while it \
             was sound (put the copy in place of both files); never edit the store by hand",
            problems.join("; ")
        ),
    )
    .with_input(serde_json::json!({ "path": path.to_string(), "problems": problems }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_holds_only_while_the_files_are_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("homebased.sqlite");
        assert!(!sealed_and_unchanged(&db), "no store, no seal");
        std::fs::write(&db, b"pages").unwrap();
        assert!(!sealed_and_unchanged(&db), "never sealed");
        seal(&db);
        assert!(sealed_and_unchanged(&db));
        // Any write: another size or time.
        std::fs::write(&db, b"pages, and garbage").unwrap();
        assert!(!sealed_and_unchanged(&db));
        seal(&db);
        assert!(sealed_and_unchanged(&db));
        // A WAL appearing beside it.
        std::fs::write(with_suffix(&db, "-wal"), b"frames").unwrap();
        assert!(!sealed_and_unchanged(&db));
        std::fs::remove_file(with_suffix(&db, "-wal")).unwrap();
        assert!(sealed_and_unchanged(&db));
        // A restored copy: another inode.
        let copy = dir.path().join("copy");
        std::fs::copy(&db, &copy).unwrap();
        std::fs::rename(&copy, &db).unwrap();
        assert!(!sealed_and_unchanged(&db));
        seal(&db);
        break_seal(&db).unwrap();
        assert!(!sealed_and_unchanged(&db), "a broken seal is no seal");
        break_seal(&db).unwrap();
    }
    use crate::clock::Clock;
    use crate::store::Store;

    fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let path = e.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    /// A store with a few rows, closed cleanly (its WAL checkpointed away).
    fn closed_store() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        drop(Store::open(&path, Clock::system()).unwrap());
        (dir, path)
    }

    fn overwrite(path: &Path, offset: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.write_all_at(bytes, offset).unwrap();
    }

    #[test]
    fn only_a_single_ok_row_passes() {
        assert_eq!(verdict(vec!["ok".into()]), Ok(()));
        assert!(verdict(vec![]).is_err());
        let problems = vec!["Tree 4 page 4: btreeInitPage() returns error code 11".to_string()];
        assert_eq!(verdict(problems.clone()), Err(problems));
        assert!(verdict(vec!["ok".into(), "ok".into()]).is_err());
    }

    #[test]
    fn the_uri_is_immutable_without_a_wal_and_escapes_the_path() {
        assert_eq!(
            check_uri(Path::new("/h/a b?#%/x.sqlite"), false),
            "file:/h/a%20b%3F%23%25/x.sqlite?immutable=1"
        );
        assert_eq!(check_uri(Path::new("/h/x"), true), "file:/h/x?mode=ro");
    }

    #[test]
    fn no_store_yet_is_nothing_to_check() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check(&dir.path().join("homebased.sqlite"))
            .unwrap()
            .is_none());
        assert!(files_of(dir.path()).is_empty());
    }

    #[test]
    fn a_sound_closed_store_passes_and_no_file_is_written_or_created() {
        let (dir, path) = closed_store();
        let before = files_of(dir.path());
        let checked = check(&path).unwrap().expect("the store exists");
        assert_eq!(checked.bytes, std::fs::metadata(&path).unwrap().len());
        assert_eq!(files_of(dir.path()), before);
    }

    #[test]
    fn a_damaged_header_is_storage_damaged_naming_the_file_and_nothing_is_written() {
        let (dir, path) = closed_store();
        overwrite(&path, 0, b"not a database!\0");
        let before = files_of(dir.path());
        let err = check(&path).unwrap_err();
        assert_eq!(err.code, ErrorCode::StorageDamaged, "{err:?}");
        assert!(!err.retryable);
        assert!(err.message.contains(&path.display().to_string()), "{err:?}");
        assert!(err.message.contains("-wal"), "{err:?}");
        assert_eq!(files_of(dir.path()), before);
    }

    #[test]
    fn a_garbled_table_page_is_storage_damaged_with_its_problems_listed() {
        let (dir, path) = closed_store();
        let (page_size, root): (u64, u64) = {
            let conn = Connection::open(&path).unwrap();
            let size = conn
                .query_row("PRAGMA page_size", [], |r| r.get(0))
                .unwrap();
            let root = conn
                .query_row(
                    "SELECT rootpage FROM sqlite_master WHERE name = 'jobs'",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            (size, root)
        };
        overwrite(
            &path,
            (root - 1) * page_size,
            &vec![0xA5; page_size as usize],
        );
        let before = files_of(dir.path());
        let err = check(&path).unwrap_err();
        assert_eq!(err.code, ErrorCode::StorageDamaged, "{err:?}");
        assert!(err.input["problems"]
            .as_array()
            .is_some_and(|p| !p.is_empty()));
        assert_eq!(files_of(dir.path()), before);
    }

    #[test]
    fn a_store_with_wal_frames_is_checked_with_them_and_keeps_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("homebased.sqlite");
        let mut store = Store::open(&path, Clock::system()).unwrap();
        store.write(crate::store::durability::barrier).unwrap();
        let wal = dir.path().join("homebased.sqlite-wal");
        assert!(
            std::fs::metadata(&wal).unwrap().len() > 0,
            "the writer left frames"
        );
        let before = (std::fs::read(&path).unwrap(), std::fs::read(&wal).unwrap());
        check(&path).unwrap().expect("the store exists");
        assert_eq!(
            (std::fs::read(&path).unwrap(), std::fs::read(&wal).unwrap()),
            before
        );
        drop(store);
    }
}
