//! Storage faults are transient, never fatal: the worker's records on a tiny full filesystem
//! (a tmpfs mounted over the run directory, which needs root; without it these tests skip
//! with a note), and a worker whose log and standard streams cannot be written.

use crate::support::{eventually, Run, WORKER};
use homebased_shared::rundir::{read_json, CleanupOutcome, ExitReason, ExitRecord};
use homebased_worker::reserve::{CHUNK, CHUNKS};
use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A small tmpfs mounted over a folder, unmounted when dropped.
struct SmallDisk {
    at: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size` over `at`, or `None` (with a note) when not root.
    fn over(at: &Path, size: &str) -> Option<SmallDisk> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("note: mounting a small tmpfs needs root; skipping a full-disk test");
            return None;
        }
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs over {}", at.display());
        Some(SmallDisk {
            at: at.to_path_buf(),
        })
    }

    fn filler(&self) -> PathBuf {
        self.at.join("filler")
    }

    /// Writes until the filesystem refuses: from here on no new block can be had.
    fn fill(&self) {
        let mut file = File::create(self.filler()).unwrap();
        let block = vec![0u8; 4096];
        loop {
            match file.write_all(&block) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", self.at.display()),
            }
        }
        let _ = file.sync_all();
        // Really full: even one more small file gets no block.
        let probe = std::fs::write(self.at.join("probe"), b"x");
        assert!(probe.is_err(), "the disk is full");
        let _ = std::fs::remove_file(self.at.join("probe"));
    }

    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.at).status();
    }
}

/// The worker as the daemon starts it: its stdout and stderr appended to `worker.log`.
fn start_logging_to_the_run_dir(run: &Run) -> crate::support::Worker {
    start_logging_to_the_run_dir_with(run, &[])
}

/// [`start_logging_to_the_run_dir`], with more arguments.
fn start_logging_to_the_run_dir_with(run: &Run, args: &[&str]) -> crate::support::Worker {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(run.dir.worker_log())
        .unwrap();
    let mut cmd = run.command();
    cmd.args(args).stdout(log.try_clone().unwrap()).stderr(log);
    crate::support::Worker(cmd.spawn().unwrap())
}

/// Counts the tries of one record in a run directory, however fast they come: each try
/// opens the record's temporary file (`.<record>.tmp-<pid>`, `rundir::write_atomic`), and
/// inotify reports every open.
struct RecordTries {
    inotify: OwnedFd,
    prefix: String,
    seen: usize,
}

impl RecordTries {
    /// Watches `dir` for tries of `record`, from now on.
    fn watch(dir: &Path, record: &str) -> RecordTries {
        // SAFETY: no pointer is passed; the descriptor returned is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify: {}", std::io::Error::last_os_error());
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let inotify = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: `path` is a NUL-terminated string that outlives the call.
        let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_OPEN) };
        assert!(
            wd >= 0,
            "inotify watch: {}",
            std::io::Error::last_os_error()
        );
        RecordTries {
            inotify,
            prefix: format!(".{record}.tmp-"),
            seen: 0,
        }
    }

    /// The tries seen so far.
    fn count(&mut self) -> usize {
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: reads at most `buf.len()` bytes into `buf`, which it borrows mutably.
            let n =
                unsafe { libc::read(self.inotify.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "inotify read: {e}");
                return self.seen;
            }
            // Each event: wd, mask, cookie, len (four u32), then `len` bytes of NUL-padded name.
            let mut events = &buf[..usize::try_from(n).unwrap()];
            while events.len() >= 16 {
                let len = u32::from_ne_bytes(events[12..16].try_into().unwrap()) as usize;
                let name = &events[16..16 + len];
                let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(len)];
                if name.starts_with(self.prefix.as_bytes()) {
                    self.seen += 1;
                }
                events = &events[16 + len..];
            }
        }
    }
}

/// The names in the run directory: the records and nothing the worker held for itself.
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// How many tries of a record a test waits for on a full disk, and the pauses the
/// backoff takes between them (100 ms doubling, capped at 5 s: 100 to 3200, then 5000 thrice).
const TRIES: usize = 10;
const PAUSES_BETWEEN_TEN_TRIES: i64 = 100 + 200 + 400 + 800 + 1600 + 3200 + 3 * 5000;

/// The failed tries of `record` that the worker's log says it landed after.
fn failed_tries(log: &str, record: &str) -> usize {
    let said = format!("{record} written after ");
    log.lines()
        .find_map(|line| line.split_once(&said))
        .and_then(|(_, rest)| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn assert_complete(run: &Run) {
    let expected: BTreeSet<String> = [
        "run.json",
        "runner.lock",
        "worker.json",
        "output.log",
        "exit.json",
        "cleanup.json",
        "worker.log",
        "control",
    ]
    .map(String::from)
    .into();
    assert_eq!(names(run.dir.root()), expected, "{}", run.diagnose());
}

#[test]
fn a_genuine_exit_0_on_a_full_disk_is_recorded_from_the_reserve() {
    let gate_dir = tempfile::tempdir().unwrap();
    let gate = gate_dir.path().join("go");
    let run = Run::shell(&format!(
        "echo started; while [ ! -e '{}' ]; do sleep 0.05; done; exit 0",
        gate.display()
    ));
    let Some(disk) = SmallDisk::over(run.dir.root(), "1m") else {
        return;
    };
    run.write_spec();
    let mut worker = start_logging_to_the_run_dir(&run);
    run.child();
    eventually("the workload's first line", || {
        run.output().contains("started").then_some(())
    });

    disk.fill();
    File::create(&gate).unwrap();

    // The disk is still full: the records come out of the reserve.
    let exit: ExitRecord = eventually("exit.json on the full disk", || {
        read_json(&run.dir.exit_json()).ok()
    });
    assert_eq!(exit.reason, ExitReason::Exit { code: 0 });
    let cleanup = eventually("cleanup.json on the full disk", || {
        run.dir.read_cleanup().ok().flatten()
    });
    assert_eq!(cleanup.outcome, CleanupOutcome::Clean);
    assert!(worker.wait().success(), "{}", run.diagnose());

    disk.free();
    assert_complete(&run);
    assert!(
        run.worker_log().contains("exit.json written after"),
        "{}",
        run.diagnose()
    );
}

#[test]
fn a_whole_attempt_is_recorded_on_a_disk_full_but_for_the_workers_reserve() {
    let run = Run::shell("exit 0");
    let Some(disk) = SmallDisk::over(run.dir.root(), "1m") else {
        return;
    };
    run.write_spec();
    // The space of a reserve left by an earlier worker of the run is all there is: the
    // worker's own reserve takes it over, and every record comes out of it.
    let size = usize::try_from(CHUNK * CHUNKS).unwrap();
    std::fs::write(run.dir.reserve(), vec![0u8; size]).unwrap();
    disk.fill();
    let mut worker = start_logging_to_the_run_dir(&run);

    assert!(worker.wait().success(), "{}", run.diagnose());
    let record = run.dir.read_worker().unwrap().unwrap();
    assert!(
        record.child.is_some(),
        "the start is recorded on the full disk"
    );
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    // A chunk given back holds the record and room for the note that says so.
    let log = run.worker_log();
    assert!(log.contains("chunks of the reserve used"), "{log}");
    disk.free();
    assert_complete(&run);
}

#[test]
fn records_wait_for_space_on_a_disk_full_from_the_start_and_land_once_it_returns() {
    let run = Run::shell("echo started; exit 0");
    let Some(disk) = SmallDisk::over(run.dir.root(), "1m") else {
        return;
    };
    run.write_spec();
    disk.fill();
    let mut tries = RecordTries::watch(run.dir.root(), "worker.json");
    // Its pauses between tries move its clock instead of being waited for (a test build's
    // clock, homebased-worker/src/clock.rs).
    let mut worker = start_logging_to_the_run_dir_with(&run, &["--clock-skips-pauses"]);

    // No record can be written: the worker neither gives up nor starts the workload
    // before it has said (in worker.json) that it may, however long it has tried.
    eventually("ten tries of worker.json", || {
        assert_eq!(
            worker.0.try_wait().unwrap(),
            None,
            "the worker waits for space (a test build? it takes --clock-skips-pauses only \
             with the failpoints feature)"
        );
        (tries.count() >= TRIES).then_some(())
    });
    assert_eq!(
        worker.0.try_wait().unwrap(),
        None,
        "the worker waits for space"
    );
    assert!(!run.dir.exit_json().exists());
    assert!(matches!(run.dir.read_worker(), Ok(None) | Err(_)));

    let freed_at = homebased_shared::time::now_ms();
    disk.free();
    assert!(worker.wait().success(), "{}", run.diagnose());
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
    // Those tries were the backoff's, paused on the worker's clock: more than 20 s of it.
    let failed = failed_tries(&run.worker_log(), "worker.json");
    assert!(failed >= TRIES, "{failed} failed tries\n{}", run.diagnose());
    assert!(
        run.exit().ended_at >= freed_at + PAUSES_BETWEEN_TEN_TRIES,
        "the worker's clock ran ahead by its pauses: ended at {}, the disk freed at {freed_at}",
        run.exit().ended_at
    );
    let worker_record = run.dir.read_worker().unwrap().unwrap();
    assert!(worker_record.child.is_some(), "the child is recorded");
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert_eq!(run.output(), "started\n");
    assert_complete(&run);
}

#[test]
fn an_unwritable_log_and_standard_streams_never_stop_the_worker() {
    let full = || File::options().write(true).open("/dev/full").unwrap();
    let help = Command::new(WORKER)
        .arg("--help")
        .stdout(full())
        .stderr(full())
        .status()
        .unwrap();
    assert!(help.success(), "--help on a full stdout: {help}");
    let usage = Command::new(WORKER)
        .stdout(full())
        .stderr(full())
        .status()
        .unwrap();
    assert_eq!(usage.code(), Some(2), "a usage error on a full stderr");

    // worker.log cannot be opened for writing (it is a folder), and stderr is a full device.
    let run = Run::shell("echo done; exit 0");
    std::fs::create_dir(run.dir.worker_log()).unwrap();
    let status = run
        .command()
        .stdout(full())
        .stderr(full())
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(run.exit().reason, ExitReason::Exit { code: 0 });
    assert_eq!(run.cleanup().outcome, CleanupOutcome::Clean);
    assert_eq!(run.output(), "done\n");
    let err = std::fs::read_to_string(run.dir.worker_log()).unwrap_err();
    assert_ne!(err.kind(), ErrorKind::NotFound);
}
