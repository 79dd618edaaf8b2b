//! The real process table: `/proc` for reading, pidfds for signalling.

use super::table::{Link, PidCursor, ProcessInfo, ProcessReads, ProcessTable, ReadError};
use crate::process;
use nix::sys::signal::Signal;
use std::io;
use std::os::fd::OwnedFd;

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

/// The real uid: the first number of the `Uid:` line of `/proc/<pid>/status`.
pub(super) fn parse_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        .and_then(|real| real.parse().ok())
}

/// The cursor of `/proc/loadavg` (`0.09 0.78 1.16 1/115 4220`: the tasks alive after the
/// slash, the pid last handed out at the end), the fork count of `/proc/stat`'s
/// `processes` line, and `pid_max`.
pub(super) fn parse_cursor(loadavg: &str, stat: &str, pid_max: &str) -> Option<PidCursor> {
    let mut fields = loadavg.split_whitespace().skip(3);
    let tasks = fields.next()?.split_once('/')?.1.parse().ok()?;
    let last_pid = fields.next()?.parse().ok()?;
    let forks = stat
        .lines()
        .find_map(|line| line.strip_prefix("processes "))?
        .trim()
        .parse()
        .ok()?;
    Some(PidCursor {
        last_pid,
        forks,
        tasks,
        pid_max: pid_max.trim().parse().ok()?,
    })
}

fn read_cursor() -> Option<PidCursor> {
    let read = |path: &str, expected| {
        let mut file = std::fs::File::open(path).ok()?;
        let bytes = process::read_whole_from(&mut file, expected).ok()?;
        String::from_utf8(bytes).ok()
    };
    // `/proc/stat` is one line a CPU and a long one of interrupt counts before `processes`.
    parse_cursor(
        &read("/proc/loadavg", 128)?,
        &read("/proc/stat", 16 * 1024)?,
        &read("/proc/sys/kernel/pid_max", 32)?,
    )
}

/// The first buffer for an environment: most fit, and a larger one takes a few more reads.
const ENVIRON_FIRST: usize = 16 * 1024;

/// The `stat` line as [`ProcessTable::info`] answers it: a zombie leader whose other threads
/// run is read through a live thread for its state, flags and memory; its identity stays the
/// leader's.
fn info_from(stat: process::ProcStat) -> ProcessInfo {
    let live = if stat.is_zombie() {
        process::live_thread(stat.pid).unwrap_or(stat)
    } else {
        stat
    };
    ProcessInfo {
        identity: stat.identity(),
        ppid: stat.ppid,
        zombie: live.is_zombie(),
        kernel_thread: stat.is_kernel_thread(),
        // A user process without memory of its own has already released it.
        exiting: live.is_exiting() || live.has_no_memory(),
    }
}

/// One process's `/proc` directory, held open: every file opened under it is that process's,
/// or fails once it has ended (the directory names the process, not the pid), so no read
/// through it can answer for a process that took the pid over.
struct Pinned(std::fs::File);

impl Pinned {
    fn open(pid: u32) -> Result<Pinned, ReadError> {
        std::fs::File::open(format!("/proc/{pid}"))
            .map(Pinned)
            .map_err(ReadError::from_io)
    }

    fn file(&self, name: &str) -> Result<std::fs::File, ReadError> {
        use nix::fcntl::{openat, OFlag};
        openat(
            &self.0,
            name,
            OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map(std::fs::File::from)
        .map_err(|e| ReadError::from_io(e.into()))
    }

    /// The real uid ([`ProcessTable::uid`]).
    fn uid(&self) -> Result<u32, ReadError> {
        let mut file = self.file("status")?;
        let bytes = process::read_whole_from(&mut file, 4096).map_err(ReadError::from_io)?;
        parse_uid(&String::from_utf8_lossy(&bytes)).ok_or_else(|| {
            ReadError::Unreadable(io::Error::new(
                io::ErrorKind::InvalidData,
                "status: no Uid line",
            ))
        })
    }

    /// The environment, or a live thread's where the leader has exited (both under this
    /// directory): a leader that exited has no memory of its own (its environment answers
    /// `ESRCH` already when opened, or reads empty), while the threads that still run share
    /// the process's memory and its environment.
    fn environ(&self, pid: u32) -> Result<Vec<u8>, ReadError> {
        let read = self.file("environ").and_then(|mut file| {
            process::read_environ_from(&mut file, ENVIRON_FIRST).map_err(ReadError::from_io)
        });
        match read {
            Ok(bytes) if !bytes.is_empty() => Ok(bytes),
            read => {
                // Only a leader that is a zombie has threads to ask.
                let thread = self
                    .file("stat")
                    .ok()
                    .and_then(|mut stat| process::read_stat_from(&mut stat).ok())
                    .filter(process::ProcStat::is_zombie)
                    .and_then(|_| process::live_thread(pid));
                match thread {
                    Some(thread) => {
                        self.file(&format!("task/{}/environ", thread.pid))
                            .and_then(|mut file| {
                                process::read_environ_from(&mut file, ENVIRON_FIRST)
                                    .map_err(ReadError::from_io)
                            })
                    }
                    None => read,
                }
            }
        }
    }
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
        Ok(info_from(stat))
    }

    /// Through the process's `/proc` directory held open ([`Pinned`]).
    fn read_process(&self, pid: u32, wanted: &dyn Fn(&ProcessInfo) -> bool) -> ProcessReads {
        let pinned = match Pinned::open(pid) {
            Ok(pinned) => pinned,
            Err(e) => {
                return ProcessReads {
                    first: Err(e),
                    environ: None,
                    uid: None,
                    second: None,
                    pinned: true,
                }
            }
        };
        // Opened once, read twice: the second read, from its start, is the record as it is
        // then ([`process::reread_stat_from`]).
        let read_stat = |file: &std::fs::File| {
            process::reread_stat_from(file)
                .map(info_from)
                .map_err(ReadError::from_io)
        };
        let (first, stat) = match pinned.file("stat") {
            Ok(file) => (read_stat(&file), Some(file)),
            Err(e) => (Err(e), None),
        };
        let (mut environ, mut uid, mut second) = (None, None, None);
        if let (Ok(info), Some(file)) = (&first, &stat) {
            if wanted(info) {
                let read = pinned.environ(pid);
                if matches!(read, Err(ReadError::Unreadable(_))) {
                    uid = Some(pinned.uid());
                }
                environ = Some(read);
                second = Some(read_stat(file));
            }
        }
        ProcessReads {
            first,
            environ,
            uid,
            second,
            pinned: true,
        }
    }

    fn uid(&self, pid: u32) -> Result<u32, ReadError> {
        Pinned::open(pid)?.uid()
    }

    fn pid_cursor(&self) -> Option<PidCursor> {
        read_cursor()
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
        Pinned::open(pid)?.environ(pid)
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
    fn the_pid_cursor_is_read_from_loadavg_stat_and_pid_max() {
        let stat = "cpu  1 2 3\nintr 5 0 0\nctxt 99\nbtime 1\nprocesses 4321\nprocs_running 1\n";
        assert_eq!(
            parse_cursor("0.09 0.78 1.16 1/115 4220\n", stat, "32768\n"),
            Some(PidCursor {
                last_pid: 4220,
                forks: 4321,
                tasks: 115,
                pid_max: 32768
            })
        );
        assert_eq!(parse_cursor("0.09 0.78 1.16 1/115\n", stat, "32768"), None);
        assert_eq!(
            parse_cursor("0.09 0.78 1.16 1/115 4220", "cpu 1\n", "32768"),
            None
        );
        // This machine's: a fork moves it on.
        let before = read_cursor().unwrap();
        std::process::Command::new("true").status().unwrap();
        let after = read_cursor().unwrap();
        assert!(after.forks > before.forks, "{before:?} {after:?}");
    }

    #[test]
    fn a_stat_file_read_again_from_its_start_is_the_process_as_it_is_then() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut stat = std::fs::File::open(format!("/proc/{pid}/stat")).unwrap();
        // Read once it sleeps: until then `sleep` is still loading (its memory, and so its
        // record, still changing), and two reads of it rightly differ.
        let mut first = process::read_stat_from(&mut stat).unwrap();
        for _ in 0..500 {
            if first.state == 'S' {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            first = process::reread_stat_from(&stat).unwrap();
        }
        assert_eq!(first.state, 'S', "{first:?}");
        assert_eq!(process::reread_stat_from(&stat).unwrap(), first);
        // Ended, not reaped: the same file reads it as a zombie now.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            Signal::SIGKILL,
        )
        .unwrap();
        let mut zombie = false;
        for _ in 0..500 {
            zombie = process::reread_stat_from(&stat).unwrap().is_zombie();
            if zombie {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(zombie);
        assert_eq!(
            process::reread_stat_from(&stat).unwrap().identity(),
            first.identity()
        );
        // Reaped: gone, whoever holds the pid later.
        child.wait().unwrap();
        let gone = process::reread_stat_from(&stat).unwrap_err();
        assert!(matches!(ReadError::from_io(gone), ReadError::Gone));
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

    #[test]
    fn a_process_is_read_through_one_handle_and_once_reaped_reads_as_gone() {
        let table = ProcTable::new();
        let child = std::process::Command::new("sleep")
            .arg("30")
            .env("HOMEBASED_PINNED_PROBE", "1")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Until its exec is through, a process's environment reads empty.
        let probe = |environ: &[u8]| {
            environ
                .split(|b| *b == 0)
                .any(|entry| entry == b"HOMEBASED_PINNED_PROBE=1")
        };
        for _ in 0..500 {
            if table.environ(pid).is_ok_and(|e| probe(&e)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let live = table.read_process(pid, &|_| true);
        assert!(live.pinned);
        let first = live.first.unwrap();
        assert_eq!(first.identity, process::identity(pid).unwrap());
        let environ = live.environ.unwrap().unwrap();
        assert!(probe(&environ), "{:?}", String::from_utf8_lossy(&environ));
        assert!(live.uid.is_none(), "asked only of a refused environment");
        assert_eq!(live.second.unwrap().unwrap().identity, first.identity);
        // Reaped between the first read and the others: the handle answers `Gone`, whatever
        // holds the pid by then.
        let slot = std::sync::Mutex::new(Some(child));
        let ended = table.read_process(pid, &|_| {
            let mut child = slot.lock().unwrap().take().unwrap();
            child.kill().unwrap();
            child.wait().unwrap();
            true
        });
        assert_eq!(ended.first.unwrap().identity, first.identity);
        assert!(
            matches!(ended.environ, Some(Err(ReadError::Gone))),
            "{:?}",
            ended.environ
        );
        assert!(
            matches!(ended.second, Some(Err(ReadError::Gone))),
            "{:?}",
            ended.second
        );
        assert!(ended.pinned);
        let gone = table.read_process(pid, &|_| true);
        assert!(
            matches!(gone.first, Err(ReadError::Gone))
                || gone.first.unwrap().identity != first.identity
        );
    }
}
