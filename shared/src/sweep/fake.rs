//! An in-memory process table and clock, so that the sweep's rules can be tested without
//! real processes or real time: marked and unmarked processes, unreadable environments,
//! other users, start times, parent links, zombies, processes that ignore TERM, a listing that
//! fails, and events (exits, forks, pid reuse, re-parenting) fired at exact points of a scan or
//! a signal.

use super::table::{Marker, PidCursor, ProcessInfo, ProcessReads, ProcessTable, ReadError};
use super::{Clock, Signalled};
use crate::ids::TaskId;
use crate::rundir::ProcessIdentity;
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The fake's `pid_max`, the kernel's default.
const PID_MAX: u32 = 32768;

/// One process of the fake table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeProcess {
    pub start_ticks: u64,
    /// The parent's pid; 1 (init) unless set with [`FakeProcess::child_of`].
    pub ppid: u32,
    pub uid: u32,
    /// `None`: reading the environment is refused (`EACCES`).
    pub environ: Option<Vec<u8>>,
    pub ignores_term: bool,
    pub zombie: bool,
    pub kernel_thread: bool,
    /// Being torn down: what an exiting process looks like between its last instruction and
    /// becoming a zombie.
    pub exiting: bool,
}

impl FakeProcess {
    /// A live process with a readable, empty environment.
    pub fn new(start_ticks: u64, uid: u32) -> FakeProcess {
        FakeProcess {
            start_ticks,
            ppid: 1,
            uid,
            environ: Some(Vec::new()),
            ignores_term: false,
            zombie: false,
            kernel_thread: false,
            exiting: false,
        }
    }

    /// A live process whose environment carries `task`'s marker.
    pub fn marked(start_ticks: u64, uid: u32, task: TaskId) -> FakeProcess {
        let mut environ = b"PATH=/usr/bin\0".to_vec();
        environ.extend_from_slice(Marker::for_task(task).entry());
        environ.push(0);
        FakeProcess {
            environ: Some(environ),
            ..FakeProcess::new(start_ticks, uid)
        }
    }

    pub fn child_of(self, ppid: u32) -> FakeProcess {
        FakeProcess { ppid, ..self }
    }

    /// A readable environment without the marker, as `env -i` or a `setproctitle`-style
    /// rewrite leaves it.
    pub fn with_environ(self, environ: &[u8]) -> FakeProcess {
        FakeProcess {
            environ: Some(environ.to_vec()),
            ..self
        }
    }

    pub fn unreadable(self) -> FakeProcess {
        FakeProcess {
            environ: None,
            ..self
        }
    }

    pub fn ignoring_term(self) -> FakeProcess {
        FakeProcess {
            ignores_term: true,
            ..self
        }
    }

    pub fn zombie(self) -> FakeProcess {
        FakeProcess {
            zombie: true,
            ..self
        }
    }

    pub fn exiting(self) -> FakeProcess {
        FakeProcess {
            exiting: true,
            ..self
        }
    }

    pub fn kernel_thread(self) -> FakeProcess {
        FakeProcess {
            kernel_thread: true,
            ..self
        }
    }
}

/// A change to the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeEvent {
    /// The process ends and is reaped: its pid is free.
    Exit(u32),
    /// A process appears under this pid (a fork, or a reuse of a freed pid).
    Spawn(u32, FakeProcess),
    /// The process's parent changes (its parent exited and it was re-parented).
    Reparent { pid: u32, ppid: u32 },
    /// Every listing fails from now on.
    FailListing(String),
}

/// When a batch of events fires. Each registered batch fires once, at the first occurrence
/// of its trigger; batches registered for the same trigger fire at successive occurrences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeTrigger {
    /// Just before the n-th listing (from 1).
    Listing(u32),
    /// Right after this pid's identity was first read by [`ProcessTable::read_process`],
    /// before its environment is.
    FirstRead(u32),
    /// Right after this pid's environment was read, before the read returns.
    EnvironRead(u32),
    /// Just before this pid is pinned for a signal.
    BeforePin(u32),
    /// After the pin and the checks, just before the signal is sent to the pinned process.
    BeforeSend(u32),
}

#[derive(Debug, Default, Clone)]
struct State {
    processes: BTreeMap<u32, FakeProcess>,
    listing_error: Option<String>,
    listings: u32,
    triggers: Vec<(FakeTrigger, Vec<FakeEvent>)>,
    sent: Vec<Signalled>,
    /// Reads of one process go through one handle on it, as the real table's do.
    pinned: bool,
    /// The pid allocator as the kernel keeps it: every process that appears is a fork, and
    /// its pid the last handed out.
    forks: u64,
    last_pid: u32,
    /// Each process's `read_process` calls: what a reading based on an earlier one spares.
    reads: BTreeMap<u32, u32>,
}

impl State {
    fn spawn(&mut self, pid: u32, process: FakeProcess) {
        self.processes.insert(pid, process);
        self.forks += 1;
        self.last_pid = pid;
    }
}

impl State {
    /// Fires the first batch registered for `trigger`, if any; each batch fires once.
    fn fire(&mut self, trigger: FakeTrigger) {
        let Some(at) = self.triggers.iter().position(|(t, _)| *t == trigger) else {
            return;
        };
        let (_, events) = self.triggers.remove(at);
        for event in events {
            match event {
                FakeEvent::Exit(pid) => {
                    self.processes.remove(&pid);
                }
                FakeEvent::Spawn(pid, process) => self.spawn(pid, process),
                FakeEvent::Reparent { pid, ppid } => {
                    if let Some(p) = self.processes.get_mut(&pid) {
                        p.ppid = ppid;
                    }
                }
                FakeEvent::FailListing(message) => self.listing_error = Some(message),
            }
        }
    }
}

/// The in-memory table. Shared by reference; every method takes `&self`.
#[derive(Debug)]
pub struct FakeTable {
    own_pid: u32,
    own_uid: u32,
    /// A mutex rather than a `RefCell`: the table is read through `&self`, and a test may
    /// share it with a sweep running on another thread.
    state: Mutex<State>,
}

impl FakeTable {
    /// An empty table seen by a sweeper with this pid and uid (the sweeper itself is not in
    /// the table until inserted).
    pub fn new(own_pid: u32, own_uid: u32) -> FakeTable {
        FakeTable {
            own_pid,
            own_uid,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere in a test leaves the data usable; the test has failed anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A separate table in the same state, its pending triggers included: the same case run
    /// a second way.
    pub fn duplicate(&self) -> FakeTable {
        FakeTable {
            own_pid: self.own_pid,
            own_uid: self.own_uid,
            state: Mutex::new(self.state().clone()),
        }
    }

    /// A process appears under `pid`: a fork, the pid the last handed out.
    pub fn insert(&self, pid: u32, process: FakeProcess) {
        self.state().spawn(pid, process);
    }

    /// `n` tasks created and gone again, their pids handed out from the cursor on.
    pub fn fork_and_reap(&self, n: u64) {
        let mut state = self.state();
        state.forks += n;
        let next = u64::from(state.last_pid) + n;
        state.last_pid = u32::try_from(next % u64::from(PID_MAX)).unwrap_or(0);
    }

    /// How often `pid` was read by [`ProcessTable::read_process`].
    pub fn reads_of(&self, pid: u32) -> u32 {
        self.state().reads.get(&pid).copied().unwrap_or(0)
    }

    pub fn remove(&self, pid: u32) {
        self.state().processes.remove(&pid);
    }

    /// From now on the reads of one process ([`ProcessTable::read_process`]) are pinned to
    /// it, as the real table's are: once it has ended (or its pid names another process),
    /// they fail `Gone`.
    pub fn pin_reads(&self) {
        self.state().pinned = true;
    }

    /// Every listing fails from now on.
    pub fn fail_listing(&self, message: &str) {
        self.state().listing_error = Some(message.to_owned());
    }

    /// Fires `events` once, at the next occurrence of `trigger` not already claimed.
    pub fn on(&self, trigger: FakeTrigger, events: Vec<FakeEvent>) {
        self.state().triggers.push((trigger, events));
    }

    /// The process under `pid` now, if any.
    pub fn process(&self, pid: u32) -> Option<FakeProcess> {
        self.state().processes.get(&pid).cloned()
    }

    /// True while `pid` names a live (not zombie) process.
    pub fn is_alive(&self, pid: u32) -> bool {
        self.process(pid).is_some_and(|p| !p.zombie)
    }

    /// Every signal delivered so far, in order.
    pub fn sent(&self) -> Vec<Signalled> {
        self.state().sent.clone()
    }
}

impl ProcessTable for FakeTable {
    /// The identity the pin was taken on: a successor under the same pid is not it.
    type Pin = ProcessIdentity;

    fn own_pid(&self) -> u32 {
        self.own_pid
    }

    fn own_uid(&self) -> u32 {
        self.own_uid
    }

    fn pids(&self) -> io::Result<Vec<u32>> {
        let mut state = self.state();
        state.listings += 1;
        let n = state.listings;
        state.fire(FakeTrigger::Listing(n));
        if let Some(message) = &state.listing_error {
            return Err(io::Error::other(message.clone()));
        }
        Ok(state.processes.keys().copied().collect())
    }

    fn info(&self, pid: u32) -> Result<ProcessInfo, ReadError> {
        let state = self.state();
        let p = state.processes.get(&pid).ok_or(ReadError::Gone)?;
        Ok(ProcessInfo {
            identity: ProcessIdentity {
                pid,
                start_ticks: p.start_ticks,
            },
            ppid: p.ppid,
            zombie: p.zombie,
            kernel_thread: p.kernel_thread,
            exiting: p.exiting,
        })
    }

    fn uid(&self, pid: u32) -> Result<u32, ReadError> {
        let state = self.state();
        state
            .processes
            .get(&pid)
            .map(|p| p.uid)
            .ok_or(ReadError::Gone)
    }

    fn environ(&self, pid: u32) -> Result<Vec<u8>, ReadError> {
        let mut state = self.state();
        let read = match state.processes.get(&pid) {
            None => Err(ReadError::Gone),
            // Without memory (a zombie, a kernel thread) there is no environment to read.
            Some(p) if p.zombie || p.kernel_thread => Err(ReadError::Gone),
            Some(p) => p
                .environ
                .clone()
                .ok_or_else(|| ReadError::Unreadable(io::Error::from_raw_os_error(libc::EACCES))),
        };
        state.fire(FakeTrigger::EnvironRead(pid));
        read
    }

    fn pid_cursor(&self) -> Option<PidCursor> {
        let state = self.state();
        Some(PidCursor {
            last_pid: state.last_pid,
            forks: state.forks,
            tasks: u32::try_from(state.processes.len()).unwrap_or(u32::MAX),
            pid_max: PID_MAX,
        })
    }

    fn read_process(&self, pid: u32, wanted: &dyn Fn(&ProcessInfo) -> bool) -> ProcessReads {
        let pinned = {
            let mut state = self.state();
            *state.reads.entry(pid).or_default() += 1;
            state.pinned
        };
        let first = self.info(pid);
        self.state().fire(FakeTrigger::FirstRead(pid));
        let (mut environ, mut uid, mut second) = (None, None, None);
        if let Ok(info) = &first {
            if wanted(info) {
                // Pinned, a read answers only for the first identity's process: `Gone` once
                // it has ended, whoever holds its pid. Unpinned, it reads whoever does.
                let still = || {
                    !pinned
                        || self
                            .process(pid)
                            .is_some_and(|p| p.start_ticks == info.identity.start_ticks)
                };
                let read = if still() {
                    self.environ(pid)
                } else {
                    Err(ReadError::Gone)
                };
                if matches!(read, Err(ReadError::Unreadable(_))) {
                    uid = Some(if still() {
                        self.uid(pid)
                    } else {
                        Err(ReadError::Gone)
                    });
                }
                environ = Some(read);
                second = Some(if still() {
                    self.info(pid)
                } else {
                    Err(ReadError::Gone)
                });
            }
        }
        ProcessReads {
            first,
            environ,
            uid,
            second,
            pinned,
        }
    }

    fn pin(&self, pid: u32) -> Result<ProcessIdentity, ReadError> {
        let mut state = self.state();
        state.fire(FakeTrigger::BeforePin(pid));
        let p = state.processes.get(&pid).ok_or(ReadError::Gone)?;
        Ok(ProcessIdentity {
            pid,
            start_ticks: p.start_ticks,
        })
    }

    fn send(&self, pin: &ProcessIdentity, signal: Signal) -> Result<(), ReadError> {
        let mut state = self.state();
        state.fire(FakeTrigger::BeforeSend(pin.pid));
        let p = match state.processes.get(&pin.pid) {
            Some(p) if p.start_ticks == pin.start_ticks => p,
            // Like a pidfd: the pinned process has ended, whoever holds its pid now.
            _ => return Err(ReadError::Gone),
        };
        if p.zombie {
            return Ok(());
        }
        let dies = signal == Signal::SIGKILL || !(signal == Signal::SIGTERM && p.ignores_term);
        state.sent.push(Signalled {
            process: *pin,
            signal,
        });
        if dies {
            state.processes.remove(&pin.pid);
        }
        Ok(())
    }
}

/// A clock that moves only when the sweep sleeps: tests run instantly.
#[derive(Debug, Clone)]
pub struct FakeClock {
    start: Instant,
    elapsed: Duration,
}

impl Default for FakeClock {
    fn default() -> Self {
        FakeClock::new()
    }
}

impl FakeClock {
    pub fn new() -> FakeClock {
        FakeClock {
            start: Instant::now(),
            elapsed: Duration::ZERO,
        }
    }

    /// How long the sweep has "slept" in total.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        self.start + self.elapsed
    }
    fn sleep(&mut self, duration: Duration) {
        self.elapsed += duration;
    }
}
