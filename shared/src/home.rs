//! The state home (SPEC section 1): the one place that knows every path under `<home>`.

use crate::ids::{JobId, TaskId, ThreadId};
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A resolved state home. Every path below it is built here and nowhere else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    root: PathBuf,
}

/// The environment variables that take part in resolving the home, passed in so that the
/// resolution order is a pure function.
#[derive(Debug, Default, Clone)]
pub struct HomeEnv {
    pub homebased_home: Option<String>,
    pub xdg_state_home: Option<String>,
    pub home: Option<String>,
}

impl HomeEnv {
    pub fn from_process() -> HomeEnv {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        HomeEnv {
            homebased_home: var("HOMEBASED_HOME"),
            xdg_state_home: var("XDG_STATE_HOME"),
            home: var("HOME"),
        }
    }
}

impl Home {
    /// `--home`, then `HOMEBASED_HOME`, then `$XDG_STATE_HOME/homebased`, then
    /// `~/.local/state/homebased`. `None` only when not even `HOME` is known.
    pub fn resolve(flag: Option<&Path>, env: &HomeEnv) -> Option<Home> {
        let root = if let Some(flag) = flag {
            flag.to_path_buf()
        } else if let Some(h) = &env.homebased_home {
            PathBuf::from(h)
        } else if let Some(x) = &env.xdg_state_home {
            Path::new(x).join("homebased")
        } else {
            Path::new(env.home.as_ref()?).join(".local/state/homebased")
        };
        Some(Home::at(absolute(&root)))
    }

    pub fn at(root: impl Into<PathBuf>) -> Home {
        Home { root: root.into() }
    }

    /// Creates the home if needed and makes it private (0700) even when it already existed
    /// with a looser mode: it holds the database, with every stored argv and environment.
    pub fn create(&self) -> io::Result<()> {
        if !self.root.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)?;
        }
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
    }

    /// Opens `daemon.log` for appending, created or forced to mode 0600.
    pub fn open_daemon_log(&self) -> io::Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.daemon_log())?;
        log.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(log)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn database(&self) -> PathBuf {
        self.root.join("homebased.sqlite")
    }
    pub fn socket(&self) -> PathBuf {
        self.root.join("homebased.sock")
    }
    pub fn daemon_lock(&self) -> PathBuf {
        self.root.join("daemon.lock")
    }
    /// Datagram socket on which workers hint that a run directory changed.
    pub fn poke_socket(&self) -> PathBuf {
        self.root.join("poke.sock")
    }
    pub fn daemon_log(&self) -> PathBuf {
        self.root.join("daemon.log")
    }
    pub fn job_dir(&self, job: JobId) -> PathBuf {
        self.root.join("jobs").join(job.to_string())
    }
    /// Checkpoints shared by every step and attempt (`HOMEBASED_JOB_DIR`).
    pub fn job_state_dir(&self, job: JobId) -> PathBuf {
        self.job_dir(job).join("state")
    }
    pub fn job_delivery_dir(&self, job: JobId) -> PathBuf {
        self.job_dir(job).join("delivery")
    }
    pub fn tasks_dir(&self) -> PathBuf {
        self.root.join("tasks")
    }
    /// The run directory of one attempt: the daemon/worker contract.
    pub fn task_dir(&self, task: TaskId) -> PathBuf {
        self.tasks_dir().join(task.to_string())
    }
    /// Where the workers of this home share their readings of the process table
    /// (`sweep::Exchange`).
    pub fn sweep_exchange(&self) -> PathBuf {
        self.root.join("sweep")
    }
    pub fn thread_inbox(&self, thread: ThreadId) -> PathBuf {
        self.root.join("threads").join(format!("{thread}.jsonl"))
    }
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(hb: Option<&str>, xdg: Option<&str>, home: Option<&str>) -> HomeEnv {
        HomeEnv {
            homebased_home: hb.map(String::from),
            xdg_state_home: xdg.map(String::from),
            home: home.map(String::from),
        }
    }

    #[test]
    fn resolution_order_is_flag_env_xdg_home() {
        let all = env(Some("/hb"), Some("/xdg"), Some("/u"));
        assert_eq!(
            Home::resolve(Some(Path::new("/flag")), &all)
                .unwrap()
                .root(),
            Path::new("/flag")
        );
        assert_eq!(Home::resolve(None, &all).unwrap().root(), Path::new("/hb"));
        let no_hb = env(None, Some("/xdg"), Some("/u"));
        assert_eq!(
            Home::resolve(None, &no_hb).unwrap().root(),
            Path::new("/xdg/homebased")
        );
        let only_home = env(None, None, Some("/u"));
        assert_eq!(
            Home::resolve(None, &only_home).unwrap().root(),
            Path::new("/u/.local/state/homebased")
        );
        assert!(Home::resolve(None, &env(None, None, None)).is_none());
    }

    #[test]
    fn created_home_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("a/b"));
        home.create().unwrap();
        let mode = std::fs::metadata(home.root()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn an_existing_loose_home_and_its_log_are_made_private() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::at(tmp.path().join("h"));
        std::fs::create_dir(home.root()).unwrap();
        std::fs::set_permissions(home.root(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(home.daemon_log(), b"old\n").unwrap();
        std::fs::set_permissions(home.daemon_log(), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        home.create().unwrap();
        drop(home.open_daemon_log().unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(home.root()), 0o700);
        assert_eq!(mode(&home.daemon_log()), 0o600);
    }
}
