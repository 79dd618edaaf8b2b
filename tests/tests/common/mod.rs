//! Helpers shared by the end-to-end tests: they drive the real `homebased` binary in a
//! temporary state home, with a fake `nvidia-smi`, exactly as a user would.
//!
//! - [`TestHome`]: a temporary home, its fake probe, its environment, its `--config`, and the
//!   daemon it started (stopped again on drop, so no daemon outlives its test).
//! - [`account`]: every command of a home run as another, unprivileged account.
//! - [`TestHome::cli`], [`TestHome::json`], [`TestHome::json_err`]: run one command;
//!   [`TestHome::settle`] and [`TestHome::advance_clock`]: let the daemon catch up, and let
//!   time pass for it.
//! - [`Spec`]: a valid job spec to submit, with builders for the fields tests change.
//! - [`wait_until`]: poll a condition with one generous timeout.
//! - [`jobs`]: reading and waiting on jobs and runs; gate files.
//! - [`queue`]: a daemon whose jobs stay queued, and the expected serving order.
//! - [`procs`], [`gpus`]: processes by `(pid, start time)`; the fake `nvidia-smi`'s cards.
//! - [`http`]: raw HTTP/1.1 for requests the typed client never sends; [`fleet`]: machines
//!   of a test fleet; [`crash`]: the crash matrix's lab; [`attention`]: a real Attention;
//!   [`webdriver`]: a headless Chromium.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod account;
pub mod attention;
pub mod crash;
pub mod fleet;
pub mod gpus;
pub mod http;
pub mod jobs;
pub mod procs;
pub mod queue;
pub mod slurm;
pub mod webdriver;

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The one timeout for anything a test waits on. Generous: tests never assert on speed.
pub const PATIENCE: Duration = Duration::from_secs(30);
/// The longest one CLI invocation may take before the test gives up on it.
const COMMAND_BOUND: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(50);

/// `target/debug`, found from this test executable (`target/debug/deps/<test>-<hash>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    let deps = exe.parent().expect("the test executable lives in deps/");
    deps.parent()
        .expect("deps/ lives in the target profile directory")
        .to_path_buf()
}

fn built_binary(name: &str) -> PathBuf {
    let path = target_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace --bins` first \
         (or `cargo build -p homebased -p homebased-worker`)",
        path.display()
    );
    path
}

/// The real `homebased` binary.
pub fn homebased_bin() -> PathBuf {
    built_binary("homebased")
}

/// The real `homebased-worker` binary.
pub fn worker_bin() -> PathBuf {
    built_binary("homebased-worker")
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        assert!(
            started.elapsed() < PATIENCE,
            "gave up after {PATIENCE:?} waiting for: {what}"
        );
        std::thread::sleep(POLL);
    }
}

/// What the fake `nvidia-smi -L` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Lists this many GPUs as `GPU <n>: NVIDIA H100 (UUID: GPU-...)`.
    Gpus(u32),
    /// Exits 1 with an error on stderr.
    Fails,
    /// Exits 0 and prints `No devices were found`.
    NoDevices,
    /// `HOMEBASED_NVIDIA_SMI` names a file that does not exist: not installed.
    Missing,
}

/// The result of one CLI run.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {self:?}"))
    }
}

/// A temporary state home (`<tmp>/home`, not created: the daemon creates it), a fake probe
/// (`<tmp>/bin/nvidia-smi`), and a `HOME`/`XDG_*` inside the temporary directory so nothing
/// touches the real user.
pub struct TestHome {
    tmp: tempfile::TempDir,
    /// A `daemon serve` child started by [`TestHome::spawn_serve`].
    serve: Option<Child>,
    /// Whether [`TestHome::start_daemon`] started a background daemon.
    started: bool,
    /// Extra environment for every command (`HOMEBASED_CONFIG`, ...).
    env: Vec<(String, String)>,
    /// Passed as `--config` to every command, when set.
    config: Option<PathBuf>,
    /// The `homebased` binary (a copy the account can reach, with one).
    bin: PathBuf,
    /// `Some`: every command (daemon included) runs as this account.
    account: Option<account::Account>,
}

impl TestHome {
    pub fn new(probe: Probe) -> TestHome {
        let tmp = tempfile::Builder::new()
            .prefix("homebased-e2e-")
            .tempdir()
            .expect("create a temporary directory");
        for dir in ["bin", "user", "user/.config", "user/state", "work"] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        let home = TestHome {
            tmp,
            serve: None,
            started: false,
            env: Vec::new(),
            config: None,
            bin: homebased_bin(),
            account: None,
        };
        home.set_probe(probe);
        home
    }

    /// A home on which no resource will exist: the probe is installed but fails.
    pub fn without_resources() -> TestHome {
        TestHome::new(Probe::Fails)
    }

    pub fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    /// The state home passed as `--home`.
    pub fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    /// A directory to use as a job's `cwd`.
    pub fn workdir(&self) -> PathBuf {
        self.tmp.path().join("work")
    }

    pub fn database(&self) -> PathBuf {
        self.home().join("homebased.sqlite")
    }

    pub fn socket(&self) -> PathBuf {
        self.home().join("homebased.sock")
    }

    pub fn daemon_log(&self) -> PathBuf {
        self.home().join("daemon.log")
    }

    /// The fake probe's path (`HOMEBASED_NVIDIA_SMI`).
    pub fn probe_path(&self) -> PathBuf {
        self.tmp.path().join("bin/nvidia-smi")
    }

    /// Replaces the fake probe; takes effect at the next daemon start.
    pub fn set_probe(&self, probe: Probe) {
        let path = self.probe_path();
        let script = match probe {
            Probe::Missing => {
                let _ = std::fs::remove_file(&path);
                return;
            }
            Probe::Gpus(n) => {
                let mut s = String::from("#!/bin/sh\n");
                for i in 0..n {
                    s.push_str(&format!(
                        "echo 'GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08x}-1111-2222-3333-444455556666)'\n"
                    ));
                }
                s
            }
            Probe::Fails => "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not \
                 communicate with the NVIDIA driver.' >&2\nexit 1\n"
                .to_string(),
            Probe::NoDevices => "#!/bin/sh\necho 'No devices were found'\nexit 0\n".to_string(),
        };
        // Write beside, then rename: the script is never executed while open for writing.
        let staging = self.tmp.path().join("bin/.nvidia-smi.new");
        std::fs::write(&staging, script).unwrap();
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&staging, &path).unwrap();
    }

    /// Adds an environment variable to every later command (and the daemon they start).
    pub fn set_env(&mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) {
        let value = value.as_ref().to_string_lossy().into_owned();
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value));
    }

    /// Removes a variable set with [`TestHome::set_env`].
    pub fn unset_env(&mut self, key: &str) {
        self.env.retain(|(k, _)| k != key);
    }

    /// Writes `text` as this home's configuration, passed as `--config` to every command.
    pub fn use_config(&mut self, text: &str) -> PathBuf {
        let path = self.write_file("config.toml", text);
        self.config = Some(path.clone());
        path
    }

    /// `homebased` with the isolated environment and no arguments yet.
    pub fn command(&self) -> Command {
        if let Some(account) = &self.account {
            let mut cmd = self.command_as(account);
            cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
            return cmd;
        }
        let mut cmd = Command::new(&self.bin);
        let user = self.tmp.path().join("user");
        for var in [
            "HOMEBASED_HOME",
            "HOMEBASED_CONFIG",
            "HOMEBASED_TASK_ID",
            "HOMEBASED_JOB_ID",
            "HOMEBASED_WEB_LISTEN",
            "HOMEBASED_LOG",
            "XDG_RUNTIME_DIR",
            "XDG_DATA_HOME",
            "XDG_CACHE_HOME",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("HOME", &user)
            .env("XDG_STATE_HOME", user.join("state"))
            .env("XDG_CONFIG_HOME", user.join(".config"))
            .env("HOMEBASED_NVIDIA_SMI", self.probe_path())
            .current_dir(self.workdir());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs `homebased --home <home> <args>`.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_with_stdin(args, None)
    }

    /// Runs `homebased --home <home> <args>` with `stdin` as standard input.
    pub fn cli_with_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut cmd = self.homebased();
        cmd.args(args);
        run_bounded(cmd, stdin)
    }

    /// `homebased --home <home>`, with `--config <config>` when the home has one.
    pub fn homebased(&self) -> Command {
        let mut cmd = self.command();
        cmd.arg("--home").arg(self.home());
        if let Some(config) = &self.config {
            cmd.arg("--config").arg(config);
        }
        cmd
    }

    /// Returns once the daemon has run its timers and a scheduling pass after every request
    /// sent before: whatever those requests could cause has been committed. Tests that
    /// something did not happen check right after this instead of sleeping.
    pub fn settle(&self) {
        let settled = self.json(&["daemon", "settle"]);
        assert!(settled["passes"].as_u64().is_some(), "{settled}");
    }

    /// Lets `by` pass for the daemon without waiting for it: moves its clock ahead
    /// (`POST /v1/internal/clock`, a route of test builds only) and returns once its tick has
    /// seen the move and done what the move made due. Workers the daemon starts afterwards
    /// read the moved clock too; those already running do not, so a running attempt is `by`
    /// older than it was.
    pub fn advance_clock(&self, by: Duration) {
        let body = json!({ "advance_ms": u64::try_from(by.as_millis()).unwrap() }).to_string();
        let request = http::post(
            "/v1/internal/clock",
            "localhost",
            "application/json",
            body.as_bytes(),
        );
        let answer = http::exchange(&mut http::unix(&self.socket()), &request, PATIENCE);
        assert_eq!(
            answer.status,
            200,
            "the daemon's clock did not move (is it a test build, with the failpoints \
             feature?): {}",
            String::from_utf8_lossy(&answer.body)
        );
        let moved: Value = serde_json::from_slice(&answer.body).unwrap();
        assert!(
            moved["ahead_ms"].as_i64().unwrap() >= i64::try_from(by.as_millis()).unwrap(),
            "{moved}"
        );
    }

    /// Runs `homebased --home <home> --json <args>`, asserts exit 0, parses stdout.
    pub fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.cli(&all);
        assert_eq!(
            out.code(),
            0,
            "homebased {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
        let v = parse_one(&out.stdout);
        assert_eq!(
            v["api_version"], 1,
            "every JSON answer carries api_version 1: {v}"
        );
        v
    }

    /// Runs `homebased --home <home> --json <args>`, asserts exit `expected_exit` and an
    /// empty stdout, and returns the `error` object of the stderr envelope.
    pub fn json_err(&self, args: &[&str], expected_exit: i32) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.cli(&all);
        error_of(&out, expected_exit, &args.join(" "))
    }

    /// Starts a background daemon with `daemon start` (returns once its socket answers).
    pub fn start_daemon(&mut self) -> Value {
        let status = self.json(&["daemon", "start"]);
        assert_eq!(status["socket"], "up", "daemon start answered {status}");
        self.started = true;
        status
    }

    /// Stops the background daemon with `daemon stop --yes` and checks it is down.
    pub fn stop_daemon(&mut self) {
        let status = self.json(&["daemon", "stop", "--yes"]);
        assert_eq!(status["socket"], "down", "daemon stop answered {status}");
        self.started = false;
    }

    /// Runs `daemon serve` as a child of the test (for tests that need its process), output to
    /// `<tmp>/serve.log`, and waits until its socket answers.
    pub fn spawn_serve(&mut self) -> u32 {
        assert!(self.serve.is_none(), "this home already has a serve child");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.serve_log())
            .unwrap();
        let mut cmd = self.homebased();
        cmd.args(["daemon", "serve"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let mut child = cmd.spawn().expect("spawn homebased daemon serve");
        let pid = child.id();
        let started = Instant::now();
        loop {
            if let Some(exit) = child.try_wait().unwrap() {
                panic!(
                    "daemon serve exited with {exit} before answering:\n{}",
                    std::fs::read_to_string(self.serve_log()).unwrap_or_default()
                );
            }
            if self.socket_answers() {
                break;
            }
            if started.elapsed() > PATIENCE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("daemon serve did not answer within {PATIENCE:?}");
            }
            std::thread::sleep(POLL);
        }
        self.serve = Some(child);
        pid
    }

    /// Sends `signal` to the serve child (unless it already exited) and waits for it.
    pub fn kill_serve(&mut self, signal: nix::sys::signal::Signal) -> ExitStatus {
        let mut child = self.serve.take().expect("a serve child is running");
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
        wait_child(&mut child)
    }

    /// Whether a serve child was spawned and not yet killed.
    pub fn has_serve(&self) -> bool {
        self.serve.is_some()
    }

    /// Whether the serve child is still running.
    pub fn serve_running(&mut self) -> bool {
        self.serve
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// The log of the serve child.
    pub fn serve_log(&self) -> PathBuf {
        self.tmp.path().join("serve.log")
    }

    /// Whether `daemon status` finds the socket up.
    pub fn socket_answers(&self) -> bool {
        let out = self.cli(&["--json", "daemon", "status"]);
        out.code() == 0 && parse_one(&out.stdout)["socket"] == "up"
    }

    /// Writes `text` to `<tmp>/<name>` and returns the path.
    pub fn write_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A valid spec whose `cwd` is this home's work directory.
    pub fn spec(&self, name: &str) -> Spec {
        Spec::new(name, &self.workdir())
    }

    /// Submits `spec` (via `resource job submit --spec <file>`) and returns the job id.
    pub fn submit(&self, spec: &Spec) -> String {
        let v = self.submit_json(spec, None);
        v["job"]
            .as_str()
            .expect("submit answers the job id")
            .to_string()
    }

    /// Submits `spec`, optionally with `--job-id`, asserts success, returns the answer.
    pub fn submit_json(&self, spec: &Spec, job_id: Option<&str>) -> Value {
        let file = self.spec_file(spec);
        let file = file.to_str().unwrap();
        let mut args = vec!["resource", "job", "submit", "--spec", file];
        if let Some(id) = job_id {
            args.extend(["--job-id", id]);
        }
        self.json(&args)
    }

    /// Submits `spec`, expecting a refusal with exit `expected_exit`; returns the error.
    pub fn submit_err(&self, spec: &Spec, job_id: Option<&str>, expected_exit: i32) -> Value {
        let file = self.spec_file(spec);
        let file = file.to_str().unwrap();
        let mut args = vec!["resource", "job", "submit", "--spec", file];
        if let Some(id) = job_id {
            args.extend(["--job-id", id]);
        }
        self.json_err(&args, expected_exit)
    }

    /// Writes `spec` to a fresh file under the temporary directory, readable by any account
    /// the commands may run as.
    pub fn spec_file(&self, spec: &Spec) -> PathBuf {
        let name = format!("spec-{}.json", uuid::Uuid::new_v4());
        let file = self.write_file(&name, &spec.0.to_string());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        file
    }

    /// `resource jobs --json`: `(id, priority, position)` in serving order.
    pub fn queue(&self) -> Vec<(String, String, u64)> {
        self.json(&["resource", "jobs"])["jobs"]
            .as_array()
            .expect("resource jobs has a jobs array")
            .iter()
            .map(|j| {
                (
                    j["id"].as_str().unwrap().to_string(),
                    j["priority"].as_str().unwrap().to_string(),
                    j["position"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    /// `resource list --json`'s resources array.
    pub fn resources(&self) -> Vec<Value> {
        self.json(&["resource", "list"])["resources"]
            .as_array()
            .expect("resource list has a resources array")
            .clone()
    }

    /// The bytes of the database and its WAL, to prove a refused request changed nothing.
    pub fn database_bytes(&self) -> (Vec<u8>, Vec<u8>) {
        let wal = self.home().join("homebased.sqlite-wal");
        (
            std::fs::read(self.database()).unwrap(),
            std::fs::read(wal).unwrap_or_default(),
        )
    }
}

impl Drop for TestHome {
    fn drop(&mut self) {
        if let Some(mut child) = self.serve.take() {
            if let Ok(raw) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(raw),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = wait_child(&mut child);
        }
        if self.started {
            let out = self.cli(&["--json", "daemon", "stop", "--yes"]);
            if out.code() != 0 {
                self.kill_recorded_daemon();
            }
        }
    }
}

impl TestHome {
    /// Last resort for a daemon that would not stop: SIGKILL the pid in `daemon.lock`, but only
    /// if that process is a `homebased` serving this very home.
    fn kill_recorded_daemon(&self) {
        let Ok(text) = std::fs::read_to_string(self.home().join("daemon.lock")) else {
            return;
        };
        let Ok(pid) = text.trim().parse::<i32>() else {
            return;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("homebased") && cmdline.contains(&*self.home().to_string_lossy()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Waits for `child`, SIGKILLing it if it has not exited within [`PATIENCE`].
fn wait_child(child: &mut Child) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            return child.wait().unwrap();
        }
        std::thread::sleep(POLL);
    }
}

/// Runs `cmd` to completion with its output captured; a command that hangs is killed and
/// fails the test instead of hanging it.
pub fn run_bounded(mut cmd: Command, stdin: Option<&[u8]>) -> Output {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn homebased");
    let feeder = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        // A refused spec may be answered before all of stdin is read: ignore a broken pipe.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        })
    });
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > COMMAND_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {COMMAND_BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if let Some(f) = feeder {
        let _ = f.join();
    }
    Output {
        status,
        stdout: String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned(),
    }
}

/// Parses a command's stdout as exactly one JSON object.
pub fn parse_one(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout:?}"))
}

/// Checks a failed `--json` run: exit status, nothing on stdout, the stderr envelope with
/// `api_version` 1 and an error carrying `code`, `message`, `retryable`, `input`.
pub fn error_of(out: &Output, expected_exit: i32, what: &str) -> Value {
    assert_eq!(
        out.code(),
        expected_exit,
        "homebased {what}: expected exit {expected_exit}\nstdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout.trim().is_empty(),
        "homebased {what}: a refusal prints nothing on stdout, got {:?}",
        out.stdout
    );
    let envelope: Value = serde_json::from_str(out.stderr.trim()).unwrap_or_else(|e| {
        panic!(
            "homebased {what}: stderr is not the JSON error envelope ({e}): {:?}",
            out.stderr
        )
    });
    assert_eq!(envelope["api_version"], 1, "envelope: {envelope}");
    let error = envelope["error"].clone();
    for field in ["code", "message", "retryable", "input"] {
        assert!(
            error.get(field).is_some(),
            "homebased {what}: error lacks {field}: {envelope}"
        );
    }
    assert!(error["code"].is_string() && error["retryable"].is_boolean());
    error
}

/// A job spec as JSON, valid by default:
/// a medium-priority restartable task that would sleep, in the test's work directory.
#[derive(Debug, Clone)]
pub struct Spec(pub Value);

impl Spec {
    pub fn new(name: &str, cwd: &Path) -> Spec {
        Spec(json!({
            "api_version": 1,
            "thread": uuid::Uuid::new_v4().to_string(),
            "name": name,
            "cwd": cwd,
            "priority": "medium",
            "preempt": { "mode": "restart" },
            "workload": { "type": "task", "command": ["/bin/sh", "-c", "sleep 600"] },
        }))
    }

    pub fn priority(mut self, level: &str) -> Spec {
        self.0["priority"] = json!(level);
        self
    }

    pub fn command(mut self, argv: &[&str]) -> Spec {
        self.0["workload"]["command"] = json!(argv);
        self
    }

    /// Sets (or with `Value::Null`, removes) a top-level field.
    pub fn set(mut self, field: &str, value: Value) -> Spec {
        let obj = self.0.as_object_mut().unwrap();
        if value.is_null() {
            obj.remove(field);
        } else {
            obj.insert(field.to_string(), value);
        }
        self
    }

    pub fn thread(&self) -> String {
        self.0["thread"].as_str().unwrap().to_string()
    }
}

/// Whether `v` is a full UUID string.
pub fn is_uuid(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 36 && uuid::Uuid::parse_str(s).is_ok())
}

/// A fresh random full UUID, for ids the daemon has never seen.
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}
