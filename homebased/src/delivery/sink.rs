//! The two sinks of SPEC section 8, blocking I/O run off the core thread:
//! - the thread inbox `<home>/threads/<thread>.jsonl`: the line appended under an flock,
//!   then fsync'd; a torn last line from a crash mid-append is closed first;
//! - the configured `[events] command`: run once per attempt with the line on stdin and
//!   `HOMEBASED_THREAD`, `HOMEBASED_EVENT` in its environment, stdout and stderr appended to
//!   `callback.log`, exit 0 meaning delivered, killed (its whole process group) after the
//!   bound.

use super::evidence::log_line;
use fs2::FileExt;
use homebased_shared::home::Home;
use homebased_shared::ids::ThreadId;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Each command attempt is bounded; a command still running then is killed.
pub const COMMAND_BOUND: Duration = Duration::from_secs(20);
const COMMAND_POLL: Duration = Duration::from_millis(10);

/// Where events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    /// The default: the thread's inbox file.
    Inbox,
    /// `[events] command = ["prog", "arg", ...]`.
    Command(Vec<String>),
}

impl Sink {
    pub fn from_config(command: Option<&[String]>) -> Sink {
        match command {
            Some(argv) if !argv.is_empty() => Sink::Command(argv.to_vec()),
            _ => Sink::Inbox,
        }
    }
}

/// One attempt to deliver one event.
pub struct Attempt<'a> {
    pub home: &'a Home,
    pub thread: ThreadId,
    pub seq: u32,
    /// The event name (`JOB_SUCCEEDED`, ...).
    pub event: &'a str,
    /// The `HOMEBASED_EVENT {...}` line, without its newline.
    pub line: &'a str,
    /// 1 for the first attempt.
    pub number: u32,
}

/// Delivers the event to `sink`, writing the attempt to `log` (`callback.log`). `Ok` means
/// the sink confirmed; `Err` carries why not.
pub fn deliver(sink: &Sink, attempt: &Attempt, log: &mut File) -> Result<(), String> {
    let head = format!(
        "seq={} event={} attempt={}",
        attempt.seq, attempt.event, attempt.number
    );
    let result = match sink {
        Sink::Inbox => {
            let path = attempt.home.thread_inbox(attempt.thread);
            let result = append_line(&path, attempt.line)
                .map_err(|e| format!("cannot append to {}: {e}", path.display()));
            let _ = match &result {
                Ok(()) => log_line(log, &format!("{head} sink=inbox delivered")),
                Err(e) => log_line(log, &format!("{head} sink=inbox failed: {e}")),
            };
            result
        }
        Sink::Command(argv) => {
            let _ = log_line(log, &format!("{head} sink=command start {argv:?}"));
            let (verdict, result) = match run_command(argv, attempt, log, COMMAND_BOUND) {
                Ok(Ended::Exit(0)) => ("exit=0 delivered".to_string(), Ok(())),
                Ok(ended) => {
                    let what = ended.describe();
                    (format!("{what} failed"), Err(what))
                }
                Err(e) => {
                    let what = format!("cannot run {argv:?}: {e}");
                    (format!("{what} failed"), Err(what))
                }
            };
            let _ = log_line(log, &format!("{head} sink=command {verdict}"));
            result
        }
    };
    let _ = log.sync_data();
    result
}

/// Appends `line` and a newline to the inbox at `path` (directory 0700, file 0600), then
/// fsyncs. The flock keeps concurrent appenders (other jobs of the thread, another
/// process) from interleaving.
pub fn append_line(path: &Path, line: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.lock_exclusive()?;
    let mut text = String::with_capacity(line.len() + 2);
    if !ends_with_newline(&mut file)? {
        // A crash mid-append left a torn line: end it, so this event is a line of its own.
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    Ok(())
}

fn ends_with_newline(file: &mut File) -> io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// How a command attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exit(i32),
    Signal(i32),
    TimedOut,
}

impl Ended {
    fn describe(self) -> String {
        match self {
            Ended::Exit(code) => format!("exit={code}"),
            Ended::Signal(signal) => format!("signal={signal}"),
            Ended::TimedOut => format!(
                "timeout: still running after {}s, killed",
                COMMAND_BOUND.as_secs()
            ),
        }
    }
}

fn run_command(
    argv: &[String],
    attempt: &Attempt,
    log: &File,
    bound: Duration,
) -> io::Result<Ended> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::other("the command is empty"))?;
    let mut child = Command::new(program)
        .args(args)
        .env("HOMEBASED_THREAD", attempt.thread.to_string())
        .env("HOMEBASED_EVENT", attempt.event)
        .stdin(Stdio::piped())
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        // Its own group, so that the bound kills whatever it started too.
        .process_group(0)
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        let input = format!("{}\n", attempt.line);
        // A writer thread: a command that never reads its stdin cannot block the attempt.
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
    }
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(match (status.code(), status.signal()) {
                (Some(code), _) => Ended::Exit(code),
                (None, Some(signal)) => Ended::Signal(signal),
                (None, None) => Ended::Signal(0),
            });
        }
        if started.elapsed() >= bound {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Ended::TimedOut);
        }
        std::thread::sleep(COMMAND_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn attempt<'a>(home: &'a Home, thread: ThreadId, line: &'a str) -> Attempt<'a> {
        Attempt {
            home,
            thread,
            seq: 4,
            event: "JOB_SUCCEEDED",
            line,
            number: 1,
        }
    }

    #[test]
    fn inbox_lines_append_privately_and_a_torn_line_is_closed_first() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let thread = ThreadId::new();
        let path = home.thread_inbox(thread);
        let mut log = tempfile::tempfile().unwrap();
        deliver(
            &Sink::Inbox,
            &attempt(&home, thread, "HOMEBASED_EVENT {\"seq\":1}"),
            &mut log,
        )
        .unwrap();
        let dir_mode = std::fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // A crash mid-append leaves half a line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"HOMEBASED_EVENT {\"se").unwrap();
        append_line(&path, "HOMEBASED_EVENT {\"seq\":2}").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "HOMEBASED_EVENT {\"seq\":1}\nHOMEBASED_EVENT {\"se\nHOMEBASED_EVENT {\"seq\":2}\n"
        );
    }

    fn script(dir: &Path, body: &str) -> String {
        let path = dir.join("sink.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn a_command_gets_the_line_and_the_environment_and_exit_zero_delivers() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let thread = ThreadId::new();
        let out = dir.path().join("got");
        let prog = script(
            dir.path(),
            &format!(
                "cat > {}; echo \"$HOMEBASED_THREAD $HOMEBASED_EVENT\"; echo oops >&2",
                out.display()
            ),
        );
        let log_path = dir.path().join("callback.log");
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let line = "HOMEBASED_EVENT {\"seq\":4}";
        deliver(
            &Sink::Command(vec![prog]),
            &attempt(&home, thread, line),
            &mut log,
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{line}\n"));
        let text = std::fs::read_to_string(&log_path).unwrap();
        assert!(
            text.contains("seq=4 event=JOB_SUCCEEDED attempt=1 sink=command start"),
            "{text}"
        );
        assert!(
            text.contains(&format!("{thread} JOB_SUCCEEDED\n")),
            "{text}"
        );
        assert!(text.contains("oops\n"), "{text}");
        assert!(text.contains("sink=command exit=0 delivered"), "{text}");
    }

    #[test]
    fn a_failing_or_missing_command_is_a_failure_with_its_exit_logged() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let log_path = dir.path().join("callback.log");
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let prog = script(dir.path(), "echo no thanks; exit 3");
        let a = attempt(&home, ThreadId::new(), "HOMEBASED_EVENT {}");
        assert_eq!(
            deliver(&Sink::Command(vec![prog]), &a, &mut log),
            Err("exit=3".into())
        );
        let missing = dir.path().join("nope").to_string_lossy().into_owned();
        assert!(deliver(&Sink::Command(vec![missing]), &a, &mut log).is_err());
        let text = std::fs::read_to_string(&log_path).unwrap();
        assert!(text.contains("no thanks\n"), "{text}");
        assert!(text.contains("sink=command exit=3 failed"), "{text}");
        assert!(text.contains("cannot run"), "{text}");
    }

    #[test]
    fn a_command_past_its_bound_is_killed_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path());
        let log = tempfile::tempfile().unwrap();
        let prog = script(dir.path(), "sleep 30 & sleep 30");
        let a = attempt(&home, ThreadId::new(), "HOMEBASED_EVENT {}");
        let started = Instant::now();
        let ended = run_command(&[prog], &a, &log, Duration::from_millis(300)).unwrap();
        assert_eq!(ended, Ended::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
