//! Ending a process group (SPEC section 4, "Stopping a run", and section 6, step 1): SIGTERM,
//! up to `term_grace` for the group to end, then SIGKILL, up to `kill_grace`. The order and
//! the graces live here once; who sends and who waits differ by caller: the worker signals
//! its own workload's group and reaps while it waits, the daemon signals a lost worker's
//! members one by one after re-checking each identity and polls `/proc`.

use crate::config::CleanupConfig;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

/// How a teardown ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    /// The group was seen ended after this signal was sent.
    Ended { after: Signal },
    /// Still not ended when the kill grace ran out; whatever survived is the caller's to report.
    Survived,
}

/// Sends SIGTERM, waits, then SIGKILL, waits. `send(signal, grace)` delivers one signal to
/// the group (`grace`: how long the group is given after it, for the caller's note);
/// `wait_ended(deadline)` waits until the group has ended (`true`) or `deadline` passed
/// (`false`). An error from either ends the teardown at once and is handed back.
pub fn terminate_group<E>(
    config: &CleanupConfig,
    mut send: impl FnMut(Signal, Duration) -> Result<(), E>,
    mut wait_ended: impl FnMut(Instant) -> Result<bool, E>,
) -> Result<Teardown, E> {
    for (signal, grace) in [
        (Signal::SIGTERM, config.term_grace),
        (Signal::SIGKILL, config.kill_grace),
    ] {
        send(signal, grace)?;
        if wait_ended(Instant::now() + grace)? {
            return Ok(Teardown::Ended { after: signal });
        }
    }
    Ok(Teardown::Survived)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;
    use nix::sys::signal::killpg;
    use nix::unistd::Pid;
    use std::convert::Infallible;
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};

    fn config() -> CleanupConfig {
        CleanupConfig {
            term_grace: Duration::from_millis(300),
            kill_grace: Duration::from_secs(5),
            rescan: Duration::from_millis(10),
            bound: Duration::from_secs(10),
        }
    }

    /// `sh -c script` leading a process group of its own, once it printed its first line.
    fn group_running(script: &str) -> Child {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        BufReader::new(out).read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        child
    }

    /// Tears down `child`'s group the way the daemon does it: signal, then poll until the
    /// leader is reaped and the group has no member left.
    fn tear_down(child: &mut Child) -> Teardown {
        let pgid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let teardown = terminate_group(
            &config(),
            |signal, _| {
                let _ = killpg(pgid, signal);
                Ok::<_, Infallible>(())
            },
            |deadline| loop {
                let _ = child.try_wait();
                if killpg(pgid, None) == Err(Errno::ESRCH) {
                    return Ok(true);
                }
                if Instant::now() >= deadline {
                    return Ok(false);
                }
                std::thread::sleep(Duration::from_millis(10));
            },
        );
        let Ok(teardown) = teardown;
        teardown
    }

    #[test]
    fn a_group_that_honours_term_ends_after_term() {
        let mut child = group_running("echo ready; exec sleep 100");
        assert_eq!(
            tear_down(&mut child),
            Teardown::Ended {
                after: Signal::SIGTERM
            }
        );
    }

    #[test]
    fn a_group_that_ignores_term_is_killed_after_the_term_grace() {
        // An ignored signal stays ignored across exec, so the whole group ignores TERM.
        let started = Instant::now();
        let mut child = group_running("trap '' TERM; echo ready; exec sleep 100");
        assert_eq!(
            tear_down(&mut child),
            Teardown::Ended {
                after: Signal::SIGKILL
            }
        );
        assert!(started.elapsed() >= config().term_grace);
    }

    #[test]
    fn signals_go_term_then_kill_with_their_graces_until_the_group_ends() {
        let mut sent = Vec::new();
        let survived = terminate_group(
            &config(),
            |signal, grace| {
                sent.push((signal, grace));
                Ok::<_, Infallible>(())
            },
            |_| Ok(false),
        );
        assert_eq!(survived, Ok(Teardown::Survived));
        assert_eq!(
            sent,
            [
                (Signal::SIGTERM, config().term_grace),
                (Signal::SIGKILL, config().kill_grace)
            ]
        );

        let mut sent = Vec::new();
        let failed = terminate_group(
            &config(),
            |signal, _| {
                sent.push(signal);
                Ok(())
            },
            |_| Err("cannot list the group"),
        );
        assert_eq!(failed, Err("cannot list the group"));
        assert_eq!(
            sent,
            [Signal::SIGTERM],
            "an error ends the teardown at once"
        );
    }
}
