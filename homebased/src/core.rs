//! The core: the single owner of the store and of every decision. It runs on its own thread;
//! API handlers, the delivery loop, Fleet's tasks, the sampler and the run watchers reach it
//! through [`CoreHandle`]'s typed verbs ([`handle`]), so every request and every observation
//! is applied one at a time, each as one transaction, followed by its side effects and a
//! scheduling pass. The verb bodies are private to the core.
//!
//! # Layout
//! - [`handle`]: what the core accepts, one typed method per verb, each naming its answer.
//! - The verbs, one file each: [`register`], [`submit`], [`move_job`], [`cancel`],
//!   [`release`]; [`history`] (retention, `history prune` and its batches) and [`fleet`]
//!   (the stored peer directory, remote jobs' routes, pulled events); [`outbox`] (event
//!   delivery's due events and their outcomes).
//! - Reads: [`views`] builds the read shapes of SPEC section 9.
//! - Scheduling: [`pass`] (snapshot, the pure decision, its commits), [`launch`] (reserve and
//!   start), [`stop`] (enact a committed stop), [`dependencies`] (what `after` names).
//! - Runs: [`observe`] (a run directory's files through the lifecycle), [`classify`] (how a
//!   run's end moves its job), [`reconcile`] (every run found again at start, the safety
//!   tick), [`unknown_runs`] (live runs the store does not know).
//! - Time: [`timers`] (when the tick is due), [`time_limits`], [`notices`] (blocked and
//!   check-due notices, the delivery wake).
//! - [`readings`]: what is read beside the store (GPU samples and peaks, disk usage, the
//!   metrics' counters); [`run_dir_usage`]: the board between the core and the disk-usage
//!   walk.
//! - [`specs`]: the specs of open jobs, each decoded from the store once.
//!
//! Workers are reached only through the supervisor's seam, [`Launcher`]: run directories
//! made, workers started, watched, signalled and cleaned up after. What a watcher sees comes
//! back as [`CoreHandle::observe`], wired in `daemon::serve`. `testing` is the unit tests'
//! fake of everything the supervisor does.

pub mod cancel;
pub mod classify;
pub mod dependencies;
pub mod drain;
pub mod fleet;
pub mod handle;
pub mod history;
pub mod launch;
pub mod move_job;
pub mod notices;
pub mod observe;
pub mod outbox;
pub mod pass;
pub mod readings;
pub mod reconcile;
pub mod register;
pub mod release;
pub mod run_dir_usage;
pub mod specs;
pub mod stop;
pub mod submit;
pub mod time_limits;
pub mod timers;
pub mod unknown_runs;
pub mod views;
pub use views::JobListing;

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use crate::clock::Clock;
use crate::store::Store;
use crate::supervisor::launcher::Launcher;
use homebased_shared::config::Config;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::home::Home;
use homebased_shared::ids::MachineId;
use homebased_shared::ids::TaskId;
use homebased_shared::rundir::RunDir;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// Facts about the running daemon that status reports.
#[derive(Debug, Clone)]
pub struct DaemonFacts {
    pub pid: u32,
    pub web: Option<String>,
    /// Where detection found the GPUs at start (`resource list`'s `lanes_from`).
    pub lanes_from: Option<homebased_shared::wire::LanesFrom>,
}

impl DaemonFacts {
    /// The daemon as a run's sweep must never signal it: by identity, so that a process that
    /// later takes its pid is not spared; by pid alone where the start cannot be read.
    pub fn protected(&self) -> homebased_shared::rundir::ProtectedProcess {
        use homebased_shared::rundir::ProtectedProcess;
        match homebased_shared::process::identity(self.pid) {
            Ok(identity) => ProtectedProcess::Identity(identity),
            Err(_) => ProtectedProcess::Pid(self.pid),
        }
    }
}

pub struct Core {
    store: Store,
    /// Every "now" the core acts on (crate::clock): the store's clock.
    clock: Clock,
    home: Home,
    config: Config,
    machine: MachineId,
    machine_name: String,
    facts: DaemonFacts,
    /// Prepares run directories, starts, watches, signals and cleans up after workers: the
    /// supervisor's seam (a fake in unit tests). The core reaches workers only through it.
    launcher: Box<dyn Launcher>,
    /// The specs of open jobs, each decoded once.
    specs: specs::Specs,
    /// Runs whose last observation failed to commit (a locked database, a full disk), with
    /// whether their worker was seen gone: the tick observes them again until it lands.
    unobserved: HashMap<TaskId, bool>,
    /// Runs whose committed stop could not be written into their run directory yet.
    unenacted: HashSet<TaskId>,
    /// Holds launches back for a moment after a worker could not be started.
    launch_backoff: launch::LaunchBackoff,
    /// Set by a drain (`core::drain`): no run starts any more, every run is stopped.
    draining: bool,
    /// Set when a launch could not make its run directory, cleared by the next that could:
    /// the waiting reason, `daemon status` and the metrics show it (SPEC section 5).
    storage: Option<launch::StorageFault>,
    /// Set by a change that may let work start or stop; the loop then runs a pass.
    dirty: bool,
    /// Scheduling passes run so far (`daemon settle` answers it).
    passes: u64,
    /// What the last pass saw and decided: the waiting reasons of the views come from it.
    last_pass: Option<Arc<pass::LastPass>>,
    /// Where retention's walk over the finished jobs goes on at the next tick.
    retention_cursor: crate::history::Cursor,
    /// The retention batch whose directories are being removed, if any.
    retention: Option<history::InFlight>,
    /// What is read beside the store: GPU samples, disk usage, the metrics' counters.
    readings: readings::Readings,
    /// A handle to this core, for the watchers it starts.
    me: CoreHandle,
    /// Wakes the event delivery loop when events may be pending ([`notices`]).
    delivery_wake: Arc<tokio::sync::Notify>,
    /// Wakes every Fleet events long poll when events may have been appended ([`fleet`]).
    fleet_wake: Arc<tokio::sync::Notify>,
    /// Taken by [`Core::spawn`].
    inbox: Option<mpsc::Receiver<Call>>,
    /// Answers computed while a commit was not yet on disk, sent once it is
    /// ([`Core::answer`]).
    held: Vec<HeldAnswer>,
}

type Call = Box<dyn FnOnce(&mut Core) + Send>;

/// An answer waiting for the store to be synced: called with `None` once it is, or with the
/// error that kept it from being synced.
type HeldAnswer = Box<dyn FnOnce(Option<&ApiError>) + Send>;

/// How many queued calls the core serves before it runs a pending scheduling pass.
const BURST: usize = 64;

/// A cheap, cloneable way to reach the core from any thread or task: its verbs are in
/// [`handle`].
#[derive(Clone)]
pub struct CoreHandle {
    /// Closures to run on the core thread, in arrival order.
    calls: mpsc::Sender<Call>,
}

impl CoreHandle {
    /// Runs `f` on the core and returns its result (the typed verbs of [`handle`]).
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Core) -> ApiResult<T> + Send + 'static,
    ) -> ApiResult<T> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let call: Call = Box::new(move |core| {
            let result = f(core);
            core.answer(move |unsynced| {
                let _ = reply.send(as_synced(unsynced, result));
            });
        });
        self.calls.send(call).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Sends `f` without waiting for it (observations, the sampler's sample).
    fn post(&self, f: impl FnOnce(&mut Core) + Send + 'static) {
        let _ = self.calls.send(Box::new(f));
    }
}

/// The answer to send once the store's sync is known: `unsynced` is the error that kept the
/// commits from being made durable, if one did. What was carried out may then not last, and
/// the answer says so; a refusal changed nothing, durable or not, and goes out as it is.
fn as_synced<T>(unsynced: Option<&ApiError>, result: ApiResult<T>) -> ApiResult<T> {
    match (unsynced, result) {
        (Some(e), Ok(_)) => Err(e.clone()),
        (_, result) => result,
    }
}

fn stopped() -> ApiError {
    ApiError::new(ErrorCode::DaemonUnavailable, "the daemon is shutting down")
}

impl Core {
    /// A core over `store`, reading the clock the store was opened with. Its launcher is made by `launcher` from a handle to this core,
    /// so that what the launcher observes can be posted back to it (`daemon::serve` wires
    /// that; a test's fake ignores it).
    pub fn new(
        store: Store,
        home: Home,
        config: Config,
        facts: DaemonFacts,
        launcher: impl FnOnce(CoreHandle) -> Box<dyn Launcher>,
    ) -> ApiResult<Core> {
        let machine = crate::store::machine::ensure(store.db())?;
        let machine_name = config.fleet.machine_name.clone().unwrap_or_else(|| {
            homebased_shared::peer_address::machine_name_from_host(&host_name())
        });
        let (calls, inbox) = mpsc::channel::<Call>();
        let me = CoreHandle { calls };
        let launcher = launcher(me.clone());
        let clock = store.clock().clone();
        Ok(Core {
            readings: readings::Readings::new(clock.now_ms()),
            store,
            clock,
            home,
            config,
            machine,
            machine_name,
            facts,
            launcher,
            specs: specs::Specs::default(),
            unobserved: HashMap::new(),
            unenacted: HashSet::new(),
            launch_backoff: Default::default(),
            draining: false,
            storage: None,
            dirty: true,
            passes: 0,
            last_pass: None,
            retention_cursor: None,
            retention: None,
            me,
            delivery_wake: Arc::new(tokio::sync::Notify::new()),
            fleet_wake: Arc::new(tokio::sync::Notify::new()),
            inbox: Some(inbox),
            held: Vec::new(),
        })
    }

    /// A handle to this core, for threads it starts.
    pub fn handle(&self) -> CoreHandle {
        self.me.clone()
    }

    /// When resources were last read, for the sampler thread (`daemon::serve` wires it).
    pub fn resources_read_at(&self) -> Arc<crate::sampler::Demand> {
        self.readings.resources_read_at.clone()
    }

    /// The board of the last measure of the run and job directories, for the disk-usage
    /// walk (`daemon/disk_usage.rs` writes it).
    pub fn run_dir_usage(&self) -> run_dir_usage::RunDirUsageBoard {
        self.readings.run_dir_usage.clone()
    }

    /// What the delivery loop waits on between rounds.
    pub fn delivery_wake(&self) -> Arc<tokio::sync::Notify> {
        self.delivery_wake.clone()
    }

    pub fn machine(&self) -> MachineId {
        self.machine
    }

    /// This machine's Fleet name (`fleet.machine_name`, else from the host name).
    fn machine_name(&self) -> &str {
        &self.machine_name
    }

    pub fn home(&self) -> &Home {
        &self.home
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The daemon's clock (crate::clock).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    fn run_dir(&self, task: TaskId) -> RunDir {
        RunDir::new(self.home.task_dir(task))
    }

    /// Sends an answer now if every commit so far is on disk, else holds it until they are
    /// (ARCHITECTURE "Group commit"): a submit is committed without an fsync, and neither its
    /// answer nor any other answer that could show what it changed leaves the core before the
    /// next durable commit (the pass's launch, usually) or the turn's end makes it durable.
    fn answer(&mut self, answer: impl FnOnce(Option<&ApiError>) + Send + 'static) {
        if self.store.is_synced() {
            answer(None);
        } else {
            self.held.push(Box::new(answer));
        }
    }

    /// Sends the held answers if the store is synced now.
    fn release_answers(&mut self) {
        if self.store.is_synced() {
            for answer in self.held.drain(..) {
                answer(None);
            }
        }
    }

    /// The end of a turn: syncs the store if a commit is not yet on disk and sends every held
    /// answer. If it cannot be synced (a failing disk) each held answer of a request that was
    /// carried out becomes an error that says so and that it may not survive a machine crash
    /// (a refusal is sent as it was); the next turn tries the sync again.
    fn sync_and_answer(&mut self) {
        if self.held.is_empty() && self.store.is_synced() {
            return;
        }
        match self.store.sync() {
            Ok(()) => self.release_answers(),
            Err(e) => {
                tracing::error!(error = %e, "cannot make the last commits durable");
                let unsynced = ApiError::new(
                    e.code,
                    "the request was carried out, but the database could not make it durable \
                     (locked by another process, full or failing to write), so a machine crash \
                     could still undo it: repeat it (with the same job or operation id) to \
                     learn its outcome",
                );
                for answer in self.held.drain(..) {
                    answer(Some(&unsynced));
                }
            }
        }
    }

    /// Moves the clock `by` ahead (test builds: `POST /v1/internal/clock`) and runs the tick
    /// now, so that what the move made due (a time limit, a notice, retention, a run's age
    /// past its window) happens at once instead of at the wake the old reading set; the pass
    /// at this turn's end follows, and brings the loop's own tick within
    /// [`timers::AFTER_CHANGE`]. Returns how far ahead of the system clock it now is.
    #[cfg(feature = "failpoints")]
    fn advance_clock(&mut self, by: std::time::Duration) -> homebased_shared::time::Millis {
        let ahead = self.clock.advance(by);
        tracing::info!(ahead_ms = ahead, "the clock was moved ahead (a test build)");
        self.tick();
        self.mark_dirty();
        ahead
    }

    /// Notes that the queue changed and a scheduling pass is due.
    fn mark_dirty(&mut self) {
        self.dirty = true;
    }

    /// Starts the core thread: it reconciles every run first, then serves calls until the
    /// stop flag is raised.
    pub fn spawn(mut self) -> std::io::Result<CoreThread> {
        let handle = self.handle();
        let stop = CoreStop(Arc::new(AtomicBool::new(false)));
        let stopped = stop.clone();
        let inbox = self
            .inbox
            .take()
            .ok_or_else(|| std::io::Error::other("the core was already started"))?;
        let (alive, ended) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("core".into())
            .spawn(move || {
                // Dropped when the thread ends, a panic included: `ended` resolves then.
                let _alive = alive;
                self.reconcile();
                // The daemon serves from here on (its listeners are bound, and with them the
                // umask is the process's own again): work may be prepared ahead of need, once
                // the first turn is over, so that preparing (a standby worker per lane) does
                // not compete for the CPU with a restart's first answers.
                let mut prepared = false;
                // The tick does what time alone makes due (core/timers.rs). It runs on a
                // deadline, so a steady stream of calls cannot starve it, and it says when
                // it is next due: an idle daemon sleeps here until then, or until a call.
                let mut next_tick = Some(Instant::now() + timers::AFTER_CHANGE);
                while !stopped.is_raised() {
                    let received = match next_tick {
                        Some(at) => {
                            inbox.recv_timeout(at.saturating_duration_since(Instant::now()))
                        }
                        None => inbox
                            .recv()
                            .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    };
                    match received {
                        Ok(call) => {
                            call(&mut self);
                            // Serve what queued up meanwhile before deciding: one pass then
                            // covers a burst of submissions.
                            for call in inbox.try_iter().take(BURST) {
                                call(&mut self);
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                    if next_tick.is_some_and(|at| Instant::now() >= at) {
                        next_tick = self.tick().instant(self.clock.now_ms(), Instant::now());
                    }
                    let changed = self.dirty;
                    if self.dirty {
                        self.dirty = false;
                        self.pass();
                    }
                    // What the turn changed or left to retry is the tick's to see soon.
                    next_tick = timers::after_turn(
                        next_tick,
                        changed || self.has_retries(),
                        Instant::now(),
                    );
                    // Nothing waits past the turn for its commit to reach the disk.
                    self.sync_and_answer();
                    if !prepared {
                        prepared = true;
                        let lanes =
                            crate::store::resources::list(self.store.db()).map_or(1, |l| l.len());
                        self.launcher.ready(lanes);
                    }
                }
            })?;
        Ok(CoreThread {
            handle,
            stop,
            thread,
            ended,
        })
    }
}

/// A started core thread.
pub struct CoreThread {
    pub handle: CoreHandle,
    pub stop: CoreStop,
    pub thread: std::thread::JoinHandle<()>,
    /// Resolves when the thread has ended, however it ended.
    pub ended: tokio::sync::oneshot::Receiver<()>,
}

/// Tells the core thread to finish (its own handle keeps the channel open, so dropping the
/// other handles is not enough).
#[derive(Clone)]
pub struct CoreStop(Arc<AtomicBool>);

impl CoreStop {
    pub fn raise(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_raised(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
