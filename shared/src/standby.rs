//! The standby worker's hand-over, the one contract between daemon and worker that is not a
//! file in the run directory.
//!
//! Starting a worker is a fork and an exec: on the start path of every run, and the largest
//! single part of it after the workload's own start (docs/BENCHMARKS.md, "Start path"). So the
//! daemon keeps one `homebased-worker --standby` started ahead of need, in its own session and
//! idle on a socket, and starting a run is one message to it: the arguments a fresh worker
//! would have been given, with the locked `runner.lock` and the open `worker.log` passed as
//! descriptors. From then on it is the run's worker exactly as if it had been exec'd with
//! those arguments.
//!
//! The socket is a `SOCK_SEQPACKET` pair: one hand-over is one message, and a standby worker
//! whose daemon is gone (exited, killed) reads end of file and exits, so an unused standby
//! never outlives its daemon. A hand-over sent to a standby worker that died unread closes
//! the descriptors with the socket: the lock is free again, as after a worker that failed
//! to start, and the daemon's lifecycle treats the launch that way.

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};
use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The largest hand-over: the arguments of a worker (a run directory path is at most
/// `PATH_MAX`, 4096 bytes) and a little more.
pub const MAX_MESSAGE: usize = 8192;

/// The command-line flag that starts a worker in standby.
pub const STANDBY_FLAG: &str = "--standby";

/// The blank argument a standby worker is started with after [`STANDBY_FLAG`], where it
/// writes the arguments of the run it takes so that `ps` names that run
/// (`homebased-worker/src/title.rs`): a command line's size is fixed when the process starts.
/// Sized for a run directory under `tasks_dir` (`<tasks_dir>/<task UUID>`) and the flags
/// handed with it (`--job`, `--lanes` up to [`LANES_ROOM`] bytes, `--lock-fd`,
/// `--spawned-at` with any numbers, a test build's clock flags). The daemon hands a run
/// whose lanes need more to a fresh worker ([`fits_room`]): the job and lanes in a
/// worker's command line are what a daemon whose store lost the run trusts
/// (`crate::worker_cmdline`), so they are never cut from it.
pub fn room(tasks_dir: &std::path::Path) -> OsString {
    const TASK_AND_FLAGS: usize = concat!(
        "/00000000-0000-0000-0000-000000000000 --job 00000000-0000-0000-0000-000000000000 ",
        "--lanes  --lock-fd 2147483647 --adopt --spawned-at -9223372036854775808 ",
        "--clock-ahead-ms -9223372036854775808 --clock-skips-pauses "
    )
    .len();
    // `--standby` and its NUL are room too, but a little slack costs nothing.
    " ".repeat(tasks_dir.as_os_str().len() + TASK_AND_FLAGS + LANES_ROOM)
        .into()
}

/// The bytes of `--lanes` a standby worker's command line has room for.
pub const LANES_ROOM: usize = 256;

/// Whether a standby worker has room to show `lanes` (its `--lanes` argument).
pub fn fits_room(lanes: &str) -> bool {
    lanes.len() <= LANES_ROOM
}

/// What a standby worker is given: the arguments it runs with, as a fresh worker's command
/// line would give them, and the two descriptors that command line would have inherited.
#[derive(Debug)]
pub struct HandOver {
    pub args: Vec<OsString>,
    /// The open, exclusively flocked description of the run's `runner.lock`.
    pub lock: OwnedFd,
    /// `worker.log`, open for appending: the worker's standard output and error.
    pub log: OwnedFd,
}

/// A connected pair: `(daemon's end, worker's end)`, both close-on-exec (the worker's end is
/// made its standard input, which clears the flag on that copy only).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)
}

/// Sends one hand-over. An error means the standby worker did not get it (it is gone, or
/// the message could not be sent whole) and a fresh worker must be started instead.
pub fn send(
    socket: BorrowedFd<'_>,
    args: &[OsString],
    lock: BorrowedFd<'_>,
    log: BorrowedFd<'_>,
) -> io::Result<()> {
    let payload = encode(args)?;
    let fds = [lock.as_raw_fd(), log.as_raw_fd()];
    let cmsgs = [ControlMessage::ScmRights(&fds)];
    // MSG_NOSIGNAL: a standby worker that is gone is EPIPE here, never a SIGPIPE to the daemon.
    let sent = loop {
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &[IoSlice::new(&payload)],
            &cmsgs,
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(io::Error::from)?,
        }
    };
    if sent != payload.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!(
                "the hand-over was cut short ({sent} of {} bytes)",
                payload.len()
            ),
        ));
    }
    Ok(())
}

/// Receives one hand-over; `None` when the daemon's end is closed (the daemon is gone).
/// Blocks until a message or the end arrives.
pub fn receive(socket: BorrowedFd<'_>) -> io::Result<Option<HandOver>> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let (bytes, flags, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut buf)];
        // MSG_CMSG_CLOEXEC: the descriptors arrive close-on-exec, so that the workload can
        // never inherit them (the worker dup2s them where it wants them).
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
            Ok(msg) => {
                let mut fds = Vec::new();
                for cmsg in msg.cmsgs().map_err(io::Error::from)? {
                    if let ControlMessageOwned::ScmRights(received) = cmsg {
                        // SAFETY: the kernel just installed these descriptors in this
                        // process for this message; nothing else refers to them.
                        fds.extend(
                            received
                                .into_iter()
                                .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                        );
                    }
                }
                break (msg.bytes, msg.flags, fds);
            }
        }
    };
    if bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(invalid("the hand-over is longer than a hand-over may be"));
    }
    let [lock, log]: [OwnedFd; 2] = fds.try_into().map_err(|fds: Vec<OwnedFd>| {
        invalid(&format!(
            "the hand-over carries {} descriptors, not 2",
            fds.len()
        ))
    })?;
    Ok(Some(HandOver {
        args: decode(&buf[..bytes]),
        lock,
        log,
    }))
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

/// The arguments, each followed by a NUL byte (no argument can hold one: they come from
/// paths and numbers, and a command line cannot carry one either).
fn encode(args: &[OsString]) -> io::Result<Vec<u8>> {
    let mut payload = Vec::new();
    for arg in args {
        let bytes = arg.as_bytes();
        if bytes.contains(&0) {
            return Err(invalid("an argument holds a NUL byte"));
        }
        payload.extend_from_slice(bytes);
        payload.push(0);
    }
    if payload.len() > MAX_MESSAGE {
        return Err(invalid("the hand-over is longer than a hand-over may be"));
    }
    Ok(payload)
}

fn decode(payload: &[u8]) -> Vec<OsString> {
    let Some(args) = payload.strip_suffix(&[0]) else {
        return Vec::new();
    };
    args.split(|b| *b == 0)
        .map(|arg| OsString::from_vec(arg.to_vec()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_hand_over_arrives_with_its_arguments_and_both_descriptors() {
        let (daemon, worker) = pair().unwrap();
        let mut lock = tempfile::tempfile().unwrap();
        let log = tempfile::tempfile().unwrap();
        lock.write_all(b"lock").unwrap();
        let sent = args(&["/h/tasks/t", "--lock-fd", "3", "--spawned-at", "17"]);
        send(daemon.as_fd(), &sent, lock.as_fd(), log.as_fd()).unwrap();

        let got = receive(worker.as_fd()).unwrap().expect("a hand-over");
        assert_eq!(got.args, sent);
        // The received lock is the same open description: it shares the file offset.
        let mut received = std::fs::File::from(got.lock);
        received.rewind().unwrap();
        let mut text = String::new();
        received.read_to_string(&mut text).unwrap();
        assert_eq!(text, "lock");
        // Close-on-exec, so that a workload never inherits it.
        let flags = nix::fcntl::fcntl(received.as_fd(), nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        drop(got.log);
    }

    #[test]
    fn a_closed_daemon_end_is_the_end_of_the_standby() {
        let (daemon, worker) = pair().unwrap();
        drop(daemon);
        assert!(receive(worker.as_fd()).unwrap().is_none());
    }

    #[test]
    fn a_gone_standby_worker_is_an_error_for_the_daemon_not_a_signal() {
        let (daemon, worker) = pair().unwrap();
        drop(worker);
        let file = tempfile::tempfile().unwrap();
        let err = send(daemon.as_fd(), &args(&["/d"]), file.as_fd(), file.as_fd()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPIPE));
    }

    #[test]
    fn arguments_that_cannot_travel_are_refused_before_anything_is_sent() {
        let (daemon, _worker) = pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        let nul = vec![OsString::from_vec(b"/a\0b".to_vec())];
        assert!(send(daemon.as_fd(), &nul, file.as_fd(), file.as_fd()).is_err());
        let long = vec![OsString::from("x".repeat(MAX_MESSAGE))];
        assert!(send(daemon.as_fd(), &long, file.as_fd(), file.as_fd()).is_err());
    }

    #[test]
    fn the_room_holds_a_run_directory_and_every_flag_handed_with_it() {
        let tasks = std::path::Path::new("/home/someone/.local/state/homebased/tasks");
        let run = tasks.join("0199a3b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b");
        // What follows `argv[0]` in the standby worker's command line, each with its NUL.
        let available = STANDBY_FLAG.len() + 1 + room(tasks).len() + 1;
        let lanes = "l".repeat(LANES_ROOM);
        assert!(fits_room(&lanes) && !fits_room(&format!("{lanes},")));
        let needed: usize = [
            run.as_os_str(),
            "--job".as_ref(),
            "0199a3b2-7c4d-7e8f-9a0b-1c2d3e4f5a6b".as_ref(),
            "--lanes".as_ref(),
            lanes.as_ref(),
            "--lock-fd".as_ref(),
            "2147483647".as_ref(),
            "--adopt".as_ref(),
            "--spawned-at".as_ref(),
            "-9223372036854775808".as_ref(),
        ]
        .iter()
        .map(|w| w.len() + 1)
        .sum();
        assert!(needed <= available, "{needed} > {available}");
        assert!(room(tasks).as_bytes().iter().all(|b| *b == b' '));
    }

    #[test]
    fn arguments_round_trip_through_the_encoding() {
        let list = args(&["/h/tasks/a b", "--adopt", ""]);
        assert_eq!(decode(&encode(&list).unwrap()), list);
    }
}
