//! Starting a worker without copying the daemon. `std::process::Command` forks as soon as it
//! is given a `pre_exec` step (the worker's new session, its lock on descriptor 3), and a
//! fork of the daemon copies its page tables and leaves every page it writes next to be
//! copied once more: at 56 lanes, where a burst starts 48 fresh workers, those faults were
//! half of the core thread's CPU (docs/BENCHMARKS.md, "Workers started without a fork of the
//! daemon"). `posix_spawn` does the same in the child of a `vfork`-like clone that shares the
//! daemon's memory until the exec: the new session (`POSIX_SPAWN_SETSID`) and the
//! descriptors (file actions) are the spawn's own attributes, so nothing runs in between.
//!
//! The child is set up as `Command` sets up its own: an empty signal mask, `SIGPIPE` back to
//! its default (the Rust runtime ignores it, and an exec keeps what is ignored), the
//! daemon's environment as it is now, the program looked up on `PATH` when it has no slash.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

/// Where the started process finds each descriptor it is given: `(what, at)`.
pub type Placed<'a> = (BorrowedFd<'a>, RawFd);

/// A process started in a session of its own, to be reaped with [`Detached::wait`].
#[derive(Debug)]
pub struct Detached {
    pid: Pid,
    reaped: bool,
}

impl Detached {
    /// Waits for it to end and reaps it.
    pub fn wait(&mut self) -> io::Result<WaitStatus> {
        loop {
            match waitpid(self.pid, None) {
                Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                    self.reaped = true;
                    return Ok(status);
                }
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Its end, if it has ended (reaped then), without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<WaitStatus>> {
        if self.reaped {
            return Err(io::Error::other("already reaped"));
        }
        match waitpid(self.pid, Some(WaitPidFlag::WNOHANG))? {
            WaitStatus::StillAlive => Ok(None),
            status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => {
                self.reaped = true;
                Ok(Some(status))
            }
            _ => Ok(None),
        }
    }

    /// SIGKILL, unless it was reaped already (its pid may be someone else's by now).
    pub fn kill(&self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        kill(self.pid, Signal::SIGKILL).map_err(io::Error::from)
    }
}

/// Starts `program` with `args` (after `argv[0]`, which is `program`) in a new session, with
/// exactly the descriptors `fds` placed where each names (every other descriptor of the
/// daemon is close-on-exec). The call returns once the program was executed, or with the
/// exec's error.
pub fn in_new_session(
    program: &OsStr,
    args: &[OsString],
    fds: &[Placed<'_>],
) -> io::Result<Detached> {
    let argv = cstrings(std::iter::once(program).chain(args.iter().map(OsString::as_os_str)))?;
    let envp = cstrings(std::env::vars_os().map(|(key, value)| {
        let mut entry = key;
        entry.push("=");
        entry.push(value);
        entry
    }))?;
    let file = CString::new(program.as_bytes()).map_err(io::Error::other)?;
    // A source below every target could be overwritten by an earlier placement (and a source
    // already where it goes would keep its close-on-exec): each is moved above them first.
    let above = fds.iter().map(|(_, at)| *at).max().unwrap_or(2) + 1;
    let moved = fds
        .iter()
        .map(|(fd, _)| duplicate_above(*fd, above))
        .collect::<io::Result<Vec<OwnedFd>>>()?;
    let mut actions = FileActions::new()?;
    for (source, (_, at)) in moved.iter().zip(fds) {
        actions.dup2(source.as_raw_fd(), *at)?;
    }
    let attributes = Attributes::new()?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is to a live, NUL-terminated array of NUL-terminated strings or
    // to an initialised attribute object, all of which outlive the call.
    let failed = unsafe {
        libc::posix_spawnp(
            &mut pid,
            file.as_ptr(),
            &actions.0,
            &attributes.0,
            pointers(&argv).as_ptr(),
            pointers(&envp).as_ptr(),
        )
    };
    if failed != 0 {
        return Err(io::Error::from_raw_os_error(failed));
    }
    Ok(Detached {
        pid: Pid::from_raw(pid),
        reaped: false,
    })
}

fn cstrings<S: AsRef<OsStr>>(items: impl Iterator<Item = S>) -> io::Result<Vec<CString>> {
    items
        .map(|s| CString::new(s.as_ref().as_bytes()).map_err(io::Error::other))
        .collect()
}

/// A NULL-terminated array of the strings' pointers, valid while `strings` lives.
fn pointers(strings: &[CString]) -> Vec<*mut libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// A close-on-exec copy of `fd` numbered `above` or more.
fn duplicate_above(fd: BorrowedFd<'_>, above: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a borrowed, open descriptor returns a new one we own.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, above) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `copy` was just returned by fcntl and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

fn check(returned: libc::c_int) -> io::Result<()> {
    match returned {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<FileActions> {
        let mut raw = MaybeUninit::uninit();
        // SAFETY: init writes the object it is given; it is used only once that succeeded.
        check(unsafe { libc::posix_spawn_file_actions_init(raw.as_mut_ptr()) })?;
        // SAFETY: initialised just above.
        Ok(FileActions(unsafe { raw.assume_init() }))
    }

    fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: the object is initialised; the descriptors are plain numbers here.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    /// A new session, an empty signal mask, `SIGPIPE` at its default.
    fn new() -> io::Result<Attributes> {
        let mut raw = MaybeUninit::uninit();
        // SAFETY: init writes the object it is given; it is used only once that succeeded.
        check(unsafe { libc::posix_spawnattr_init(raw.as_mut_ptr()) })?;
        // SAFETY: initialised just above.
        let mut attributes = Attributes(unsafe { raw.assume_init() });
        let mut empty = MaybeUninit::uninit();
        let mut pipe = MaybeUninit::uninit();
        // SAFETY: the sets are initialised by sigemptyset before any other use; the
        // attribute object is initialised.
        unsafe {
            libc::sigemptyset(empty.as_mut_ptr());
            libc::sigemptyset(pipe.as_mut_ptr());
            libc::sigaddset(pipe.as_mut_ptr(), libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(
                &mut attributes.0,
                empty.as_ptr(),
            ))?;
            check(libc::posix_spawnattr_setsigdefault(
                &mut attributes.0,
                pipe.as_ptr(),
            ))?;
        }
        let flags = libc::POSIX_SPAWN_SETSID
            | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
            | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short;
        // SAFETY: the attribute object is initialised.
        check(unsafe { libc::posix_spawnattr_setflags(&mut attributes.0, flags) })?;
        Ok(attributes)
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    /// Runs `script` under `bash -c` with `placed` and returns what it wrote to descriptor 1.
    fn run_sh(script: &str, extra: &[Placed<'_>]) -> (String, WaitStatus) {
        run("bash", &["-c", script], extra)
    }

    /// Runs `program` with `args` and `placed` and returns what it wrote to descriptor 1.
    fn run(program: &str, args: &[&str], extra: &[Placed<'_>]) -> (String, WaitStatus) {
        let (mut read, write) = std::io::pipe().unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let mut fds = vec![(null.as_fd(), 0), (write.as_fd(), 1), (write.as_fd(), 2)];
        fds.extend_from_slice(extra);
        let args: Vec<OsString> = args.iter().map(Into::into).collect();
        let mut child = in_new_session(OsStr::new(program), &args, &fds).unwrap();
        drop(fds);
        drop(write);
        let mut out = String::new();
        read.read_to_string(&mut out).unwrap();
        (out, child.wait().unwrap())
    }

    #[test]
    fn the_child_leads_a_session_of_its_own_with_only_the_descriptors_it_was_given() {
        let (lock_read, lock_write) = std::io::pipe().unwrap();
        // At a number nothing in the child would take for itself.
        let lock_read = duplicate_above(lock_read.as_fd(), 60).unwrap();
        let (out, status) = run_sh(
            // Its session is its own pid; descriptor 3 is the one placed there.
            r#"echo "sid=$(ps -o sid= -p $$ | tr -d ' ') pid=$$"; echo three >&3 && echo wrote3; exec ls -m /proc/self/fd"#,
            &[(lock_write.as_fd(), 3)],
        );
        drop(lock_write);
        assert!(
            matches!(status, WaitStatus::Exited(_, 0)),
            "{status:?} {out}"
        );
        let mut lines = out.lines();
        let ids = lines.next().unwrap();
        let (sid, pid) = ids.split_once(' ').unwrap();
        assert_eq!(
            sid.trim_start_matches("sid="),
            pid.trim_start_matches("pid="),
            "{out}"
        );
        assert_eq!(lines.next(), Some("wrote3"), "{out}");
        let mut three = String::new();
        std::fs::File::from(lock_read.try_clone().unwrap())
            .read_to_string(&mut three)
            .unwrap();
        assert_eq!(three, "three\n");
        // What was placed is open; this process's own end of the pipe is not (it is
        // close-on-exec, as every descriptor the daemon opens). Descriptors the test runner
        // left inheritable are inherited, as they were through `Command`.
        let open: Vec<i32> = lines
            .next()
            .unwrap()
            .split(", ")
            .map(|n| n.parse().unwrap())
            .collect();
        for placed in 0..=3 {
            assert!(open.contains(&placed), "{out}");
        }
        assert!(!open.contains(&lock_read.as_raw_fd()), "{out}");
    }

    #[test]
    fn a_source_already_at_its_target_is_inherited_not_closed_on_exec() {
        let (mut read, write) = std::io::pipe().unwrap();
        // A close-on-exec copy at some free number, placed at that same number.
        let at = duplicate_above(write.as_fd(), 40).unwrap();
        drop(write);
        let number = at.as_raw_fd();
        let mut child = in_new_session(
            OsStr::new("bash"),
            &["-c".into(), format!("echo kept >&{number}").into()],
            &[(at.as_fd(), number)],
        )
        .unwrap();
        drop(at);
        let mut out = String::new();
        read.read_to_string(&mut out).unwrap();
        assert!(matches!(child.wait().unwrap(), WaitStatus::Exited(_, 0)));
        assert_eq!(out, "kept\n");
    }

    #[test]
    fn sigpipe_is_at_its_default_and_nothing_is_blocked_in_the_child() {
        // grep reads its own status: it changes neither.
        let (out, _) = run(
            "grep",
            &["-E", "^(SigBlk|SigIgn):", "/proc/self/status"],
            &[],
        );
        let out = out.replace('\t', " ");
        assert!(out.contains("SigBlk: 0000000000000000"), "{out}");
        // SIGPIPE is signal 13: bit 12 of the ignored mask.
        let ignored = out
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn: "))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap();
        assert_eq!(ignored & (1 << 12), 0, "{out}");
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_the_spawns_error() {
        let e = in_new_session(OsStr::new("/nonexistent/homebased-worker"), &[], &[]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn a_child_is_reaped_once_and_not_signalled_after() {
        let mut child = in_new_session(OsStr::new("true"), &[], &[]).unwrap();
        assert!(matches!(child.wait().unwrap(), WaitStatus::Exited(_, 0)));
        child
            .kill()
            .expect("a reaped child is not signalled: its pid may be reused");
        assert!(child.try_wait().is_err());
    }
}
