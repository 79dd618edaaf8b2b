//! Reaping. The worker is a child subreaper, so orphaned descendants of the workload are
//! re-parented to it and must be reaped here; SIGCHLD coalesces, so every reap is a loop of
//! `waitpid(-1, WNOHANG)` until nothing is ready.

use crate::signals::Signals;
use homebased_shared::rundir::ExitReason;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct Reaper {
    /// The workload's pid: its status is kept, every other child is only reaped.
    workload: Option<libc::pid_t>,
    /// How the workload ended, once reaped.
    ended: Option<ExitReason>,
}

impl Reaper {
    pub fn new() -> Reaper {
        Reaper::default()
    }

    pub fn watch(&mut self, pid: u32) {
        self.workload = libc::pid_t::try_from(pid).ok();
    }

    /// How the workload ended, once it has been reaped.
    pub fn workload_ended(&self) -> Option<&ExitReason> {
        self.ended.as_ref()
    }

    /// Reaps every child that has exited, without blocking.
    pub fn reap(&mut self) {
        loop {
            let mut status: libc::c_int = 0;
            // Raw waitpid rather than nix's: nix refuses statuses with signals outside its
            // enum (real-time signals) after the child is already reaped, losing its end.
            // SAFETY: `status` is a valid, writable c_int for the duration of the call.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == -1 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // ECHILD: no children left at all.
                return;
            }
            if pid == 0 {
                return;
            }
            if Some(pid) == self.workload {
                self.ended = exit_reason(status);
            }
        }
    }

    /// Reaps until `done` holds or `deadline` passes, checking every `interval` and at once
    /// on any signal. Returns whether `done` held.
    pub fn wait_until(
        &mut self,
        signals: &Signals,
        deadline: Instant,
        interval: Duration,
        mut done: impl FnMut(&Reaper) -> bool,
    ) -> bool {
        loop {
            self.reap();
            if done(self) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            signals.sleep(interval.min(deadline - now));
        }
    }
}

/// A signal is recorded as a signal, never folded into an exit code.
pub fn exit_reason(status: libc::c_int) -> Option<ExitReason> {
    if libc::WIFEXITED(status) {
        Some(ExitReason::Exit {
            code: libc::WEXITSTATUS(status),
        })
    } else if libc::WIFSIGNALED(status) {
        Some(ExitReason::Signal {
            signal: libc::WTERMSIG(status),
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_become_exits_and_signals() {
        // Linux encoding: exit code in bits 8..16, terminating signal in the low 7 bits.
        assert_eq!(exit_reason(3 << 8), Some(ExitReason::Exit { code: 3 }));
        assert_eq!(exit_reason(0), Some(ExitReason::Exit { code: 0 }));
        assert_eq!(exit_reason(10), Some(ExitReason::Signal { signal: 10 }));
        assert_eq!(
            exit_reason(9 | 0x80),
            Some(ExitReason::Signal { signal: 9 }),
            "a core dump is still the signal"
        );
        assert_eq!(exit_reason(0x137f), None, "stopped is not an end");
    }
}
