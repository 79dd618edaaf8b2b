//! Run and job directories made ahead of need. Every start used to create its run directory
//! (the folder, `control/`, `runner.lock`, `worker.log`, and the worker's `output.log`) and,
//! for a job's first run, the job's directory with `state/`: six or eight new inodes on the
//! start path, where each costs from a few microseconds to half a millisecond depending on
//! the filesystem (docs/BENCHMARKS.md, "Start path"). The standby keeper builds one of each
//! under `<home>/staged/` ahead of need, and a start claims them with one `rename` each,
//! which allocates nothing.
//!
//! A skeleton is built under a temporary name and renamed into place whole, so a start finds
//! either a complete skeleton or none; with none (a burst of launches, no keeper, another
//! filesystem) it creates what it needs as before. Only the keeper thread builds skeletons,
//! and only the core thread claims them. The keeper keeps as many of each as it keeps standby
//! workers (`super::standby::pool_size`): `run.<n>` and `job.<n>`.

use homebased_shared::home::Home;
use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The staged run directory's files, as a start would create them: `runner.lock` (0600),
/// `worker.log` and `output.log` (for appending, created by the worker otherwise), and the
/// `control/` folder. A staged `output.log` carries the skeleton's time as its mtime until
/// the workload writes; the one reader of that time, the check-due notice, takes the later of
/// it and the run's start (`core::notices::check_due::silent_since`).
const RUN_FILES: [(&str, u32); 3] = [
    ("runner.lock", 0o600),
    ("worker.log", 0o666),
    ("output.log", 0o666),
];

fn staged_dir(home: &Home) -> PathBuf {
    home.root().join("staged")
}

/// The two kinds of skeleton, by the prefix of their names under `staged/`.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Run,
    Job,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Run => "run.",
            Kind::Job => "job.",
        }
    }
}

/// The staged skeletons of `kind`, complete ones only (a build in progress is hidden under a
/// name that starts with a dot).
fn staged(home: &Home, kind: Kind) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(staged_dir(home)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(kind.prefix()))
        .map(|e| e.path())
        .collect()
}

fn private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Moves the staged run directory to `target` (a new run's directory); false when there is
/// none to claim, and the caller creates the directory itself.
pub fn claim_run(home: &Home, target: &Path) -> bool {
    claim_any(home, Kind::Run, target)
}

/// Moves the staged job directory (with its `state/`) to `target` (`jobs/<job>`) if the job
/// has none yet; false when it has one, or there is none staged.
pub fn claim_job(home: &Home, target: &Path) -> bool {
    // Most runs are not a job's first: no rename to try.
    if target.exists() {
        return false;
    }
    claim_any(home, Kind::Job, target)
}

/// Claims the first staged skeleton of `kind` that is still there.
fn claim_any(home: &Home, kind: Kind, target: &Path) -> bool {
    staged(home, kind)
        .iter()
        .any(|skeleton| claim(skeleton, target))
}

/// `RENAME_NOREPLACE`: a directory that appeared at `target` meanwhile (the delivery thread
/// makes `jobs/<job>/delivery`) is never replaced; the claim fails and the caller uses it.
fn claim(staged: &Path, target: &Path) -> bool {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    if let Some(parent) = target.parent() {
        if private_dir(parent).is_err() {
            return false;
        }
    }
    match renameat2(
        AT_FDCWD,
        staged,
        AT_FDCWD,
        target,
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => true,
        Err(e) => {
            if e != nix::errno::Errno::ENOENT {
                tracing::debug!(staged = %staged.display(), target = %target.display(), error = %e, "cannot claim a staged directory");
            }
            false
        }
    }
}

/// Builds skeletons until `count` of each kind are staged. Called by the keeper thread only.
pub fn replenish(home: &Home, count: usize) -> io::Result<()> {
    let staged_root = staged_dir(home);
    private_dir(&staged_root)?;
    for kind in [Kind::Run, Kind::Job] {
        let present = staged(home, kind);
        let mut free = (0..)
            .map(|n| format!("{}{n}", kind.prefix()))
            .filter(|name| {
                !present
                    .iter()
                    .any(|p| p.file_name().is_some_and(|f| f == name.as_str()))
            });
        for _ in present.len()..count {
            let Some(name) = free.next() else { break };
            build(&staged_root, &name, |dir| match kind {
                Kind::Run => {
                    private_dir(&dir.join("control"))?;
                    for (file, mode) in RUN_FILES {
                        OpenOptions::new()
                            .create(true)
                            .append(true)
                            .mode(mode)
                            .open(dir.join(file))?;
                    }
                    Ok(())
                }
                Kind::Job => private_dir(&dir.join("state")),
            })?;
        }
    }
    Ok(())
}

/// Builds `<staged>/<name>` under a temporary name, then renames it into place.
fn build(staged: &Path, name: &str, fill: impl FnOnce(&Path) -> io::Result<()>) -> io::Result<()> {
    let building = staged.join(format!(".{name}.building"));
    // What an interrupted build left.
    match std::fs::remove_dir_all(&building) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    private_dir(&building)?;
    fill(&building)?;
    std::fs::rename(&building, staged.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_claimed_skeleton_is_a_run_directory_with_its_files_and_a_job_directory_with_state() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        replenish(&home, 1).unwrap();
        let staged_inode = std::fs::metadata(&staged(&home, Kind::Run)[0])
            .unwrap()
            .ino();

        let run = home.root().join("tasks").join("t1");
        assert!(claim_run(&home, &run));
        assert_eq!(
            std::fs::metadata(&run).unwrap().ino(),
            staged_inode,
            "moved, not copied"
        );
        assert_eq!(mode(&run), 0o700);
        assert_eq!(mode(&run.join("control")), 0o700);
        assert_eq!(mode(&run.join("runner.lock")) & 0o700, 0o600);
        for name in ["worker.log", "output.log"] {
            assert_eq!(
                std::fs::metadata(run.join(name)).unwrap().len(),
                0,
                "{name}"
            );
        }
        let job = home.root().join("jobs").join("j1");
        assert!(claim_job(&home, &job));
        assert_eq!(mode(&job), 0o700);
        assert!(job.join("state").is_dir());

        // Nothing staged any more: the caller makes its own.
        assert!(!claim_run(&home, &home.root().join("tasks").join("t2")));
        assert!(!claim_job(&home, &home.root().join("jobs").join("j2")));
        replenish(&home, 1).unwrap();
        assert!(claim_run(&home, &home.root().join("tasks").join("t2")));
    }

    #[test]
    fn a_job_that_has_its_directory_keeps_it_and_the_skeleton_stays_staged() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        replenish(&home, 1).unwrap();
        let job = home.root().join("jobs").join("j1");
        std::fs::create_dir_all(job.join("state")).unwrap();
        std::fs::write(job.join("state").join("checkpoint"), "step 3").unwrap();
        assert!(!claim_job(&home, &job));
        assert_eq!(
            std::fs::read_to_string(job.join("state/checkpoint")).unwrap(),
            "step 3"
        );
        assert_eq!(staged(&home, Kind::Job).len(), 1);
    }

    #[test]
    fn an_interrupted_build_is_replaced_by_a_whole_one() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let half = staged_dir(&home).join(".run.0.building");
        std::fs::create_dir_all(half.join("control")).unwrap();
        assert!(!claim_run(&home, &home.root().join("tasks").join("t1")));
        replenish(&home, 1).unwrap();
        assert!(!half.exists());
        let run = home.root().join("tasks").join("t1");
        assert!(claim_run(&home, &run));
        assert!(run.join("runner.lock").exists());
    }

    #[test]
    fn a_pool_of_skeletons_serves_a_burst_of_starts_and_is_topped_up_to_its_size() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        replenish(&home, 3).unwrap();
        let run = |n: u32| home.root().join("tasks").join(format!("t{n}"));
        for n in 0..3 {
            assert!(claim_run(&home, &run(n)), "start {n} of the burst");
            assert!(run(n).join("runner.lock").exists());
        }
        assert!(!claim_run(&home, &run(3)), "the fourth makes its own");
        // Topped up, never beyond the size, with names that do not collide with a survivor.
        std::fs::remove_dir_all(run(0)).unwrap();
        replenish(&home, 2).unwrap();
        assert!(claim_run(&home, &run(4)));
        replenish(&home, 2).unwrap();
        assert_eq!(staged(&home, Kind::Run).len(), 2);
        assert_eq!(
            staged(&home, Kind::Job).len(),
            3,
            "no job skeleton was claimed"
        );
    }
}
