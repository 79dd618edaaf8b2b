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
//! and only the core thread claims them.

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

fn staged_run(home: &Home) -> PathBuf {
    staged_dir(home).join("run")
}

fn staged_job(home: &Home) -> PathBuf {
    staged_dir(home).join("job")
}

fn private_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Moves the staged run directory to `target` (a new run's directory); false when there is
/// none to claim, and the caller creates the directory itself.
pub fn claim_run(home: &Home, target: &Path) -> bool {
    claim(&staged_run(home), target)
}

/// Moves the staged job directory (with its `state/`) to `target` (`jobs/<job>`) if the job
/// has none yet; false when it has one, or there is none staged.
pub fn claim_job(home: &Home, target: &Path) -> bool {
    // Most runs are not a job's first: no rename to try.
    if target.exists() {
        return false;
    }
    claim(&staged_job(home), target)
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

/// Builds whatever skeleton is missing. Called by the keeper thread only.
pub fn replenish(home: &Home) -> io::Result<()> {
    let staged = staged_dir(home);
    private_dir(&staged)?;
    if !staged_run(home).exists() {
        build(&staged, "run", |dir| {
            private_dir(&dir.join("control"))?;
            for (name, mode) in RUN_FILES {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(mode)
                    .open(dir.join(name))?;
            }
            Ok(())
        })?;
    }
    if !staged_job(home).exists() {
        build(&staged, "job", |dir| private_dir(&dir.join("state")))?;
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
        replenish(&home).unwrap();
        let staged_inode = std::fs::metadata(staged_run(&home)).unwrap().ino();

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
        replenish(&home).unwrap();
        assert!(claim_run(&home, &home.root().join("tasks").join("t2")));
    }

    #[test]
    fn a_job_that_has_its_directory_keeps_it_and_the_skeleton_stays_staged() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        replenish(&home).unwrap();
        let job = home.root().join("jobs").join("j1");
        std::fs::create_dir_all(job.join("state")).unwrap();
        std::fs::write(job.join("state").join("checkpoint"), "step 3").unwrap();
        assert!(!claim_job(&home, &job));
        assert_eq!(
            std::fs::read_to_string(job.join("state/checkpoint")).unwrap(),
            "step 3"
        );
        assert!(staged_job(&home).is_dir());
    }

    #[test]
    fn an_interrupted_build_is_replaced_by_a_whole_one() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path());
        let half = staged_dir(&home).join(".run.building");
        std::fs::create_dir_all(half.join("control")).unwrap();
        assert!(!claim_run(&home, &home.root().join("tasks").join("t1")));
        replenish(&home).unwrap();
        assert!(!half.exists());
        let run = home.root().join("tasks").join("t1");
        assert!(claim_run(&home, &run));
        assert!(run.join("runner.lock").exists());
    }
}
