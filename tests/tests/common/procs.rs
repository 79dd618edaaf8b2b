//! Processes by identity, as the tests read them from `/proc`: a pid alone can be reused,
//! `(pid, kernel start time)` cannot.

use super::wait_until;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start: u64,
}

/// The state letter (field 3) and the start time (field 22) of a `/proc/<pid>/stat` line.
pub fn parse_stat(line: &str) -> Option<(char, u64)> {
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

impl Proc {
    /// The process that holds `pid` now.
    pub fn now(pid: u32) -> Option<Proc> {
        let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, start) = parse_stat(&line)?;
        Some(Proc { pid, start })
    }

    /// The process whose pid a step wrote to `pidfile` (waits for it).
    pub fn written(pidfile: &Path) -> Proc {
        let mut found = None;
        wait_until(&format!("a pid in {}", pidfile.display()), || {
            found = std::fs::read_to_string(pidfile)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .and_then(Proc::now);
            found.is_some()
        });
        found.expect("wait_until returned, so a pid was found")
    }

    /// Still this very process, and not a zombie.
    pub fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .ok()
            .and_then(|line| parse_stat(&line))
            .is_some_and(|(state, start)| start == self.start && !matches!(state, 'Z' | 'X'))
    }

    /// SIGKILL, only if the pid still names this process.
    pub fn kill(&self) {
        if self.alive() {
            if let Ok(raw) = i32::try_from(self.pid) {
                let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
            }
        }
    }
}
