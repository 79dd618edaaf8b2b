//! A run's Docker container, driven through the `docker` CLI (never a Docker API library),
//! synchronously and within bounds. One driver for the worker, which creates, follows and
//! removes the container, and for the daemon, which removes the container a lost worker left.
//!
//! # Layout
//! - [`docker`]: the CLI with one run's environment: short bounded commands and followers.
//! - [`inspect`]: what Docker says: a container's state by id, the containers under a filter.
//! - [`lookup`]: finding the run's container again for a worker that adopts it: by saved
//!   id, then by name and label.
//! - [`removal`]: stop with the run's grace, `rm` without force, absence proven by id, label
//!   and name within the cleanup bound.
//!
//! A run's container is found by its saved id (the cidfile, `container.id` in the run directory), by the
//! label [`task_label`] and by the fixed name [`container_name`].

pub mod docker;
pub mod inspect;
pub mod lookup;
pub mod removal;

use crate::ids::TaskId;
use crate::rundir::RunDir;

/// `homebased-<task>`: fixed, so a person or a later worker finds it by name.
pub fn container_name(task: TaskId) -> String {
    format!("homebased-{task}")
}

/// `homebased.task=<task>`: the label that finds the run's container.
pub fn task_label(task: TaskId) -> String {
    format!("homebased.task={task}")
}

/// The id Docker wrote to the run's cidfile, else `printed` (what `docker create` printed;
/// empty when there is none). Only a hexadecimal id counts.
pub fn saved_id(dir: &RunDir, printed: &str) -> Option<String> {
    // The cidfile lies in the run directory: never followed, and an id is 64 characters.
    let mut saved = String::new();
    let _ = crate::rundir::open_record(&dir.container_id())
        .and_then(|f| std::io::Read::read_to_string(&mut std::io::Read::take(f, 4096), &mut saved));
    let id = [saved.trim(), printed.trim()]
        .into_iter()
        .find(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit()))
        .map(String::from);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_saved_id_is_the_cidfiles_else_the_printed_one_and_only_hex() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::new(tmp.path());
        std::fs::create_dir_all(dir.container_id().parent().unwrap()).unwrap();
        assert_eq!(saved_id(&dir, ""), None);
        assert_eq!(saved_id(&dir, "abc123\n"), Some("abc123".into()));
        assert_eq!(saved_id(&dir, "Error: no"), None);
        std::fs::write(dir.container_id(), "0f0f\n").unwrap();
        assert_eq!(saved_id(&dir, "abc123"), Some("0f0f".into()));
    }
}
