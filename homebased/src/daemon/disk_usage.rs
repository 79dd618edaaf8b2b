//! The disk used by run and job directories, for `daemon status`: a walk of `<home>/tasks`
//! and `<home>/jobs` on its own thread, never on the core (a long history makes the walk
//! long). It keeps each directory's size: when the core says one changed (a run ended, so
//! its output is final) only that one is measured again, at once; retention's batches and
//! the periodic walk every [`EVERY`] (for live runs that grow, and anything else) measure
//! everything. Status shows the last result and when it was taken.

use crate::clock::Clock;
use crate::core::run_dir_usage::{Changed, RunDirUsageBoard};
use homebased_shared::home::Home;
use homebased_shared::wire::RunDirUsage;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How often the whole walk runs again.
pub const EVERY: Duration = Duration::from_secs(5 * 60);

pub fn spawn(home: Home, clock: Clock, board: RunDirUsageBoard) {
    let changes = board.subscribe();
    let started = std::thread::Builder::new()
        .name("disk-usage".into())
        .spawn(move || watch(&home, &clock, &board, &changes));
    if let Err(e) = started {
        tracing::warn!(error = %e, "cannot start the disk usage walk");
    }
}

fn watch(home: &Home, clock: &Clock, board: &RunDirUsageBoard, changes: &Receiver<Changed>) {
    let mut sizes = Sizes::walk(home);
    board.post(sizes.usage(clock.now_ms()));
    let mut walked = Instant::now();
    loop {
        let due = EVERY.saturating_sub(walked.elapsed());
        let first = match changes.recv_timeout(due) {
            Ok(change) => change,
            Err(RecvTimeoutError::Timeout) => Changed::All,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        // Whatever else arrived meanwhile is measured in the same round.
        let mut all = false;
        for change in std::iter::once(first).chain(changes.try_iter()) {
            match change {
                Changed::All => all = true,
                Changed::Dir(dir) => sizes.measure_again(&dir),
            }
        }
        if all {
            sizes = Sizes::walk(home);
            walked = Instant::now();
        }
        board.post(sizes.usage(clock.now_ms()));
    }
}

/// Allocated bytes of each run and job directory.
#[derive(Debug, Default)]
struct Sizes {
    of: HashMap<PathBuf, u64>,
}

impl Sizes {
    fn walk(home: &Home) -> Sizes {
        let mut sizes = Sizes::default();
        for top in [home.tasks_dir(), home.root().join("jobs")] {
            let Ok(entries) = std::fs::read_dir(&top) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let bytes = allocated(&path);
                sizes.of.insert(path, bytes);
            }
        }
        sizes
    }

    /// One directory again: its new size, or gone from the count if it no longer exists.
    fn measure_again(&mut self, dir: &Path) {
        if std::fs::symlink_metadata(dir).is_ok() {
            self.of.insert(dir.to_path_buf(), allocated(dir));
        } else {
            self.of.remove(dir);
        }
    }

    /// The sizes as measured `at`.
    fn usage(&self, at: homebased_shared::time::Millis) -> RunDirUsage {
        RunDirUsage {
            bytes: self.of.values().sum(),
            dirs: self.of.len() as u64,
            measured_at: at,
        }
    }
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
        assert_eq!(Sizes::walk(&home).usage(0).dirs, 0);
        let task = home.tasks_dir().join("t1");
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(task.join("output.log"), vec![b'x'; 64 * 1024]).unwrap();
        std::fs::create_dir_all(home.root().join("jobs").join("j1")).unwrap();
        let usage = Sizes::walk(&home).usage(1_000);
        assert_eq!(usage.dirs, 2);
        assert!(usage.bytes >= 64 * 1024, "{usage:?}");
        assert_eq!(usage.measured_at, 1_000);
    }

    #[test]
    fn a_changed_directory_is_measured_again_and_a_removed_one_leaves_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let task = home.tasks_dir().join("t1");
        std::fs::create_dir_all(&task).unwrap();
        let mut sizes = Sizes::walk(&home);
        let before = sizes.usage(0).bytes;
        std::fs::write(task.join("output.log"), vec![b'x'; 256 * 1024]).unwrap();
        sizes.measure_again(&task);
        assert!(sizes.usage(0).bytes >= before + 256 * 1024, "{sizes:?}");
        std::fs::remove_dir_all(&task).unwrap();
        sizes.measure_again(&task);
        assert_eq!(sizes.usage(0).dirs, 0);
        assert_eq!(sizes.usage(0).bytes, 0);
    }

    /// Waits for `done`; a walk that never follows fails the test instead of hanging it.
    fn until(done: impl Fn() -> bool) {
        let given_up = Instant::now() + Duration::from_secs(30);
        while !done() {
            assert!(Instant::now() < given_up, "the walk never followed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_walk_follows_a_change_the_core_posts_without_waiting_for_the_period() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let board = RunDirUsageBoard::default();
        spawn(home.clone(), Clock::system(), board.clone());
        until(|| board.last().is_some());
        assert_eq!(board.last().unwrap().dirs, 0);
        let task = home.tasks_dir().join("t1");
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(task.join("output.log"), vec![b'x'; 64 * 1024]).unwrap();
        board.changed(Changed::Dir(task));
        until(|| board.last().unwrap().dirs == 1);
        assert!(board.last().unwrap().bytes >= 64 * 1024);
    }
}
