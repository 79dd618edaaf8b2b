//! The real process table: `/proc` for reading, pidfds for signalling.

use super::table::{Link, ProcessInfo, ProcessTable, ReadError};
use crate::process;
use nix::sys::signal::Signal;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// `/proc` as seen by this process.
#[derive(Debug, Clone)]
pub struct ProcTable {
    own_pid: u32,
    own_uid: u32,
}

impl Default for ProcTable {
    fn default() -> Self {
        ProcTable::new()
    }
}

impl ProcTable {
    pub fn new() -> ProcTable {
        ProcTable {
            own_pid: std::process::id(),
            own_uid: nix::unistd::getuid().as_raw(),
        }
    }
}

fn proc_file(pid: u32, name: &str) -> PathBuf {
    PathBuf::from("/proc").join(pid.to_string()).join(name)
}

/// The real uid: the first number of the `Uid:` line of `/proc/<pid>/status`.
pub(super) fn parse_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|real| real.parse().ok())
}

fn read_status(path: &std::path::Path) -> Result<String, ReadError> {
    let bytes = process::read_whole(path, 4096).map_err(ReadError::from_io)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The first buffer for an environment: most fit, and a larger one takes a few more reads.
const ENVIRON_FIRST: usize = 16 * 1024;

/// The environment as a live thread of a zombie leader reads it; `None` when the leader is not
/// a zombie or no other thread lives.
fn live_thread_environ(pid: u32) -> Option<Vec<u8>> {
    let leader = process::read_stat(pid).ok()?;
    if !leader.is_zombie() {
        return None;
    }
    let thread = process::live_thread(pid)?;
    let path = proc_file(pid, "task")
        .join(thread.pid.to_string())
        .join("environ");
    process::read_whole(&path, ENVIRON_FIRST).ok()
}

impl ProcessTable for ProcTable {
    type Pin = OwnedFd;

    fn own_pid(&self) -> u32 {
        self.own_pid
    }

    fn own_uid(&self) -> u32 {
        self.own_uid
    }

    fn pids(&self) -> io::Result<Vec<u32>> {
        process::list_pids()
    }

    fn info(&self, pid: u32) -> Result<ProcessInfo, ReadError> {
        let stat = process::read_stat(pid).map_err(ReadError::from_io)?;
        // A leader that exited while other threads run: the process lives on in them, so its
        // state, flags and memory are a live thread's; its identity stays the leader's.
        let live = if stat.is_zombie() {
            process::live_thread(pid).unwrap_or(stat)
        } else {
            stat
        };
        Ok(ProcessInfo {
            identity: stat.identity(),
            ppid: stat.ppid,
            zombie: live.is_zombie(),
            kernel_thread: stat.is_kernel_thread(),
            // A user process without memory of its own has already released it.
            exiting: live.is_exiting() || live.has_no_memory(),
        })
    }

    fn uid(&self, pid: u32) -> Result<u32, ReadError> {
        let status = read_status(&proc_file(pid, "status"))?;
        parse_uid(&status).ok_or_else(|| {
            ReadError::Unreadable(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/status: no Uid line"),
            ))
        })
    }

    fn link(&self, pid: u32) -> Result<Link, ReadError> {
        let stat = process::read_stat(pid).map_err(ReadError::from_io)?;
        Ok(Link {
            identity: stat.identity(),
            ppid: stat.ppid,
            ended: process::has_ended(&stat),
        })
    }

    fn environ(&self, pid: u32) -> Result<Vec<u8>, ReadError> {
        match process::read_whole(&proc_file(pid, "environ"), ENVIRON_FIRST) {
            Ok(bytes) if !bytes.is_empty() => Ok(bytes),
            // A leader that exited has no memory of its own (its environment answers `ESRCH`,
            // or reads empty), while the threads that still run share the process's memory
            // and its environment.
            read => match live_thread_environ(pid) {
                Some(bytes) => Ok(bytes),
                None => read.map_err(ReadError::from_io),
            },
        }
    }

    fn pin(&self, pid: u32) -> Result<OwnedFd, ReadError> {
        pidfd::open(pid).map_err(ReadError::from_io)
    }

    fn send(&self, pin: &OwnedFd, signal: Signal) -> Result<(), ReadError> {
        pidfd::send_signal(pin, signal).map_err(ReadError::from_io)
    }
}

#[cfg(target_os = "linux")]
mod pidfd {
    use nix::sys::signal::Signal;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    /// A descriptor for the process that holds `pid` now (close-on-exec by definition).
    pub fn open(pid: u32) -> io::Result<OwnedFd> {
        let pid =
            libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let flags: libc::c_uint = 0;
        // SAFETY: pidfd_open takes a pid and flags, touches no memory of ours, and returns a
        // new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = RawFd::try_from(fd).map_err(io::Error::other)?;
        // SAFETY: the kernel just returned this descriptor; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Signals the process behind `fd`; `ESRCH` once it has ended, even if its pid is reused.
    pub fn send_signal(fd: &OwnedFd, signal: Signal) -> io::Result<()> {
        let flags: libc::c_uint = 0;
        // SAFETY: a valid descriptor, a signal number, a null siginfo (the kernel fills in a
        // plain kill-style one) and flags; no memory of ours is written.
        let done = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                signal as libc::c_int,
                std::ptr::null::<libc::siginfo_t>(),
                flags,
            )
        };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod pidfd {
    use nix::sys::signal::Signal;
    use std::io;
    use std::os::fd::OwnedFd;

    pub fn open(_pid: u32) -> io::Result<OwnedFd> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "pidfds exist only on Linux",
        ))
    }

    pub fn send_signal(_fd: &OwnedFd, _signal: Signal) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "pidfds exist only on Linux",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_the_real_uid_of_the_status_file() {
        let status = "Name:\tsleep\nState:\tS (sleeping)\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(parse_uid(status), Some(1000));
        assert_eq!(parse_uid("Name:\tx\n"), None);
        assert_eq!(parse_uid("Uid:\tnope\n"), None);
    }

    #[test]
    fn reads_this_process_as_its_own_user() {
        let table = ProcTable::new();
        let me = table.info(std::process::id()).unwrap();
        assert_eq!(table.uid(std::process::id()).unwrap(), table.own_uid());
        assert!(!me.zombie);
        assert!(!me.exiting);
        assert_eq!(me.identity, process::identity(std::process::id()).unwrap());
        assert!(table.environ(std::process::id()).is_ok());
    }

    #[test]
    fn a_missing_process_is_gone_for_every_read() {
        // Above the kernel's largest pid_max (2^22), so never a live pid.
        let table = ProcTable::new();
        assert!(matches!(table.info(5_000_000), Err(ReadError::Gone)));
        assert!(matches!(table.uid(5_000_000), Err(ReadError::Gone)));
        assert!(matches!(table.environ(5_000_000), Err(ReadError::Gone)));
        assert!(matches!(table.pin(5_000_000), Err(ReadError::Gone)));
    }
}
