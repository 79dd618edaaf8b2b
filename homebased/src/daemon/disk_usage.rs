//! The disk used by run and job directories, for `daemon status`: a walk of `<home>/tasks`
//! and `<home>/jobs` on its own thread, at start and then every [`EVERY`], never on the
//! core (a long history makes the walk long). Status shows the last result and when it was
//! taken.

use homebased_shared::home::Home;
use homebased_shared::time::now_ms;
use homebased_shared::wire::RunDirUsage;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the walk runs again.
pub const EVERY: Duration = Duration::from_secs(5 * 60);

pub fn spawn(home: Home, into: Arc<Mutex<Option<RunDirUsage>>>) {
    let started = std::thread::Builder::new()
        .name("disk-usage".into())
        .spawn(move || loop {
            let usage = measure(&home);
            if let Ok(mut slot) = into.lock() {
                *slot = Some(usage);
            }
            std::thread::sleep(EVERY);
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the disk usage walk");
    }
}

/// One walk: allocated bytes below both folders, and how many directories they hold.
pub fn measure(home: &Home) -> RunDirUsage {
    let mut usage = RunDirUsage {
        bytes: 0,
        dirs: 0,
        measured_at: 0,
    };
    for top in [home.tasks_dir(), home.root().join("jobs")] {
        let Ok(entries) = std::fs::read_dir(&top) else {
            continue;
        };
        for entry in entries.flatten() {
            usage.dirs += 1;
            usage.bytes += allocated(&entry.path());
        }
    }
    usage.measured_at = now_ms();
    usage
}

/// Allocated bytes of a tree, without following links; unreadable parts count as empty.
fn allocated(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut bytes = meta.blocks() * 512;
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.flatten() {
                bytes += allocated(&entry.path());
            }
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_run_and_job_directories_and_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        assert_eq!(measure(&home).dirs, 0);
        let task = home.tasks_dir().join("t1");
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(task.join("output.log"), vec![b'x'; 64 * 1024]).unwrap();
        std::fs::create_dir_all(home.root().join("jobs").join("j1")).unwrap();
        let usage = measure(&home);
        assert_eq!(usage.dirs, 2);
        assert!(usage.bytes >= 64 * 1024, "{usage:?}");
        assert!(usage.measured_at > 0);
    }
}
