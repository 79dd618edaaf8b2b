//! Opening a file of a run directory, which the workload can write into (SPEC section 5):
//! nothing there is followed, and only a regular file is read or written. A workload that
//! puts a symlink where `output.log` was would otherwise have `task log` serve whatever the
//! link names (`/etc/shadow` for a daemon run as root, an ssh key) to every reader of the
//! log, the web listener's included; a FIFO there would hang the reader.
//!
//! The file and the folder that holds it (the run directory, or its `control/`) are both
//! opened without following a symlink, so a planted link to another folder is refused too.
//! Every open is non-blocking, so a FIFO or a device is refused after `fstat` instead of
//! waiting for a writer; on a regular file the flag changes nothing.

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// A run-directory file that is not a regular file in a real folder: refused, never followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is {found}, not a regular file: refused, since files of a run directory are never followed", path.display())]
pub struct Refused {
    pub path: PathBuf,
    /// What was found there, in words: `a symbolic link`, `a FIFO`, ...
    pub found: &'static str,
}

/// The [`Refused`] inside an error from [`open_record`] or [`open_append`], if that is why
/// the open failed.
pub fn refused(e: &io::Error) -> Option<&Refused> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<Refused>())
}

/// Opens a record or log of a run directory for reading.
pub fn open_record(path: &Path) -> io::Result<File> {
    open(path, OFlag::O_RDONLY, Mode::empty())
}

/// Opens (creating it with `mode` less the umask) a run-directory file for appending:
/// `output.log`, `worker.log`. The descriptor is blocking again once it is known to be a
/// regular file, since the workload inherits it.
pub fn open_append(path: &Path, mode: u32) -> io::Result<File> {
    let file = open(
        path,
        OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
        Mode::from_bits_truncate(mode),
    )?;
    let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL)?;
    let blocking = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(blocking))?;
    Ok(file)
}

fn open(path: &Path, access: OFlag, mode: Mode) -> io::Result<File> {
    let refuse = |found| {
        io::Error::other(Refused {
            path: path.to_path_buf(),
            found,
        })
    };
    let (folder, name) = match (path.parent(), path.file_name()) {
        (Some(folder), Some(name)) => (
            if folder.as_os_str().is_empty() {
                Path::new(".")
            } else {
                folder
            },
            name,
        ),
        _ => return Err(io::Error::from(io::ErrorKind::InvalidInput)),
    };
    let nofollow = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let folder = nix::fcntl::open(
        folder,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | nofollow,
        Mode::empty(),
    )
    .map_err(|e| match e {
        // Linux answers ENOTDIR, not ELOOP, for a link opened as a folder without following.
        Errno::ELOOP | Errno::ENOTDIR => match std::fs::symlink_metadata(folder) {
            Ok(m) if m.file_type().is_symlink() => refuse("in a folder that is a symbolic link"),
            _ => refuse("in something that is not a folder"),
        },
        e => io::Error::from(e),
    })?;
    let fd = openat(folder.as_fd(), name, access | nofollow, mode).map_err(|e| match e {
        Errno::ELOOP => refuse("a symbolic link"),
        e => io::Error::from(e),
    })?;
    let file = File::from(fd);
    if let Some(found) = not_regular(file.metadata()?.file_type()) {
        return Err(refuse(found));
    }
    Ok(file)
}

/// What a file that is not regular is, in words; `None` for a regular file.
fn not_regular(kind: std::fs::FileType) -> Option<&'static str> {
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a folder")
    } else if kind.is_symlink() {
        Some("a symbolic link")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_block_device() || kind.is_char_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    fn found(e: io::Error) -> &'static str {
        refused(&e)
            .unwrap_or_else(|| panic!("not refused: {e}"))
            .found
    }

    #[test]
    fn a_regular_file_opens_for_reading_and_appending() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("output.log");
        open_append(&log, 0o666)
            .unwrap()
            .write_all(b"one\n")
            .unwrap();
        open_append(&log, 0o666)
            .unwrap()
            .write_all(b"two\n")
            .unwrap();
        let mut text = String::new();
        open_record(&log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "one\ntwo\n");
        let missing = open_record(&tmp.path().join("exit.json")).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert!(refused(&missing).is_none());
    }

    #[test]
    fn a_symlink_is_refused_and_its_target_is_never_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "hunter2").unwrap();
        let log = tmp.path().join("output.log");
        symlink(&secret, &log).unwrap();
        assert_eq!(found(open_record(&log).unwrap_err()), "a symbolic link");
        assert_eq!(
            found(open_append(&log, 0o666).unwrap_err()),
            "a symbolic link"
        );
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "hunter2");
        // A dangling link is no place to create a file either.
        let dangling = tmp.path().join("worker.log");
        symlink(tmp.path().join("elsewhere"), &dangling).unwrap();
        assert_eq!(
            found(open_append(&dangling, 0o666).unwrap_err()),
            "a symbolic link"
        );
        assert!(!tmp.path().join("elsewhere").exists());
    }

    #[test]
    fn a_folder_that_is_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let other = tmp.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("stop"), "{}").unwrap();
        let run = tmp.path().join("run");
        std::fs::create_dir(&run).unwrap();
        symlink(&other, run.join("control")).unwrap();
        assert_eq!(
            found(open_record(&run.join("control/stop")).unwrap_err()),
            "in a folder that is a symbolic link"
        );
    }

    #[test]
    fn a_fifo_or_a_folder_is_refused_without_waiting_for_a_writer() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("output.log");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        assert_eq!(found(open_record(&fifo).unwrap_err()), "a FIFO");
        let folder = tmp.path().join("exit.json");
        std::fs::create_dir(&folder).unwrap();
        assert_eq!(found(open_record(&folder).unwrap_err()), "a folder");
    }

    #[test]
    fn an_appended_file_is_blocking_for_the_workload_that_inherits_it() {
        let tmp = tempfile::tempdir().unwrap();
        let file = open_append(&tmp.path().join("output.log"), 0o600).unwrap();
        let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert!(!OFlag::from_bits_truncate(flags).contains(OFlag::O_NONBLOCK));
        assert!(OFlag::from_bits_truncate(flags).contains(OFlag::O_APPEND));
    }
}
