//! The crash matrix's lab (used by `crash_matrix.rs`): a home with one lane,
//! a daemon started with `FAILPOINTS` naming one crash point, workloads that leave a record
//! of every step they start and finish and a marked escaped process behind, the invariants a
//! crash must keep, and the row each test writes for `docs/RELIABILITY.md`.
//!
//! Crash points exist only in binaries built with the `failpoints` feature (`scripts/test`);
//! a point aborts its process, so a test waits for that death and then restarts the daemon
//! without `FAILPOINTS`.

use crate::common::jobs::{show, state_of, wait_all_idle, wait_job};
use crate::common::{new_uuid, wait_until, worker_bin, Probe, Spec, TestHome};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

/// How to build binaries whose crash points work.
pub const BUILD_HINT: &str = "are the binaries built with the crash points? \
     `cargo build --workspace --bins --features homebased/failpoints,homebased-worker/failpoints` \
     (scripts/test does)";

/// What every test checks after its crash, besides what it names itself (the intro of
/// `docs/RELIABILITY.md`, written by `scripts/reliability-table`, says the same).
pub const CHECKED: &str = "the invariants";

/// The escaped process every step leaves behind: `setsid sleep 299`, carrying the run's
/// marker, so only the cleanup sweep ends it.
const SLEEPER: &str = "sleep 299 ";

/// One step: logs `start <job> <step> live=[<escaped processes of earlier runs still alive>]`
/// to `$1/starts`, leaves a marked `setsid sleep 299` behind (its pid in `$1/sleepers`), waits
/// (at most 60 s) for the gate `$2` (`-`: none), yielding with 75 when asked, and logs
/// `done <job> <step>` before it exits 0.
const STEP: &str = r#"d="$1"; me="$HOMEBASED_JOB_ID $HOMEBASED_STEP_INDEX"
live=""
for p in $(cat "$d/sleepers" 2>/dev/null); do
  if [ "$(tr '\0' ' ' 2>/dev/null </proc/$p/cmdline)" = "sleep 299 " ]; then live="$live $p"; fi
done
echo "start $me live=[${live# }]" >> "$d/starts"
setsid sleep 299 </dev/null >/dev/null 2>&1 &
echo $! >> "$d/sleepers"
i=0
while [ "$2" != - ] && [ ! -e "$2" ] && [ $i -lt 600 ]; do
  if [ -e "$HOMEBASED_YIELD_FILE" ]; then echo "yield $me" >> "$d/starts"; exit 75; fi
  sleep 0.1; i=$((i+1))
done
echo "done $me" >> "$d/starts"
"#;

/// A crash point as the table names it.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    /// Sorts the rows: the order of a run's life.
    pub order: u32,
    pub name: &'static str,
    /// The source location, for the table.
    pub place: &'static str,
    /// What the point separates.
    pub separates: &'static str,
}

pub struct Lab {
    pub h: TestHome,
    /// Where the workloads log (`starts`, `sleepers`).
    pub log: PathBuf,
}

impl Lab {
    /// A home with one GPU lane and no daemon yet. Core dumps are off for this test and
    /// everything it starts: every crash point aborts.
    pub fn new() -> Lab {
        Lab::with_gpus(1)
    }

    /// As [`Lab::new`] with `gpus` fake GPU lanes (runs that hold several lanes).
    pub fn with_gpus(gpus: u32) -> Lab {
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_CORE)
            .unwrap_or((0, 0));
        let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, hard);
        let h = TestHome::new(Probe::Gpus(gpus));
        let log = h.tmp().join("crash-log");
        std::fs::create_dir_all(&log).unwrap();
        Lab { h, log }
    }

    /// `daemon serve` with `FAILPOINTS=<failpoints>` (for the daemon only, and the workers it
    /// starts); returns once it answers.
    pub fn serve_with(&mut self, failpoints: &str) {
        self.h.set_env("FAILPOINTS", failpoints);
        self.h.spawn_serve();
        self.h.unset_env("FAILPOINTS");
    }

    /// `daemon serve` without crash points.
    pub fn serve(&mut self) {
        self.h.spawn_serve();
    }

    /// Waits for the daemon to die at its crash point (an abort), then starts it again
    /// without crash points.
    pub fn crashed_then_restart(&mut self, point: &str) {
        self.crashed(point);
        self.serve();
    }

    /// Waits for the daemon to die at its crash point (an abort).
    pub fn crashed(&mut self, point: &str) {
        wait_until(
            &format!("the daemon to crash at {point} ({BUILD_HINT})"),
            || !self.h.serve_running(),
        );
        let status = self.h.kill_serve(nix::sys::signal::Signal::SIGKILL);
        assert_eq!(
            status.signal(),
            Some(sigabrt()),
            "the daemon ended otherwise than at the point ({status:?}):\n{}",
            std::fs::read_to_string(self.h.serve_log()).unwrap_or_default()
        );
    }

    /// Submits `spec` with a job id of its own when the daemon may die before it answers
    /// (the submit's pass reaches the point); [`Lab::resubmit`] retries it after the restart.
    pub fn submit_racing(&self, spec: &Spec) -> String {
        let id = new_uuid();
        let file = self.h.spec_file(spec);
        let file = file.to_str().unwrap();
        let _ = self.h.cli(&[
            "--json", "resource", "job", "submit", "--spec", file, "--job-id", &id,
        ]);
        id
    }

    /// The retry of a submit whose answer may have been lost: the same job, submitted once.
    pub fn resubmit(&self, spec: &Spec, id: &str) {
        let again = self.h.submit_json(spec, Some(id));
        assert_eq!(again["job"], id, "{again}");
    }

    /// A spec of `steps` steps running [`STEP`], the gate `$2` on each (`None`: no gate).
    pub fn spec(&self, name: &str, steps: usize, gate: Option<&Path>) -> Spec {
        let gate = gate.map_or_else(|| "-".to_string(), |g| g.display().to_string());
        let log = self.log.display().to_string();
        let step = json!({
            "type": "task",
            "command": ["/bin/sh", "-c", STEP, "sh", log, gate],
        });
        self.h
            .spec(name)
            .set("workload", Value::Null)
            .set("steps", json!(vec![step; steps]))
    }

    /// Makes every worker go through `script` (a `/bin/sh` script that gets the worker's
    /// arguments, `$REAL` the real worker and `$LAB` this lab's log directory).
    pub fn wrap_worker(&mut self, script: &str) {
        let path = self.h.tmp().join("bin/worker-wrapper");
        let text = format!(
            "#!/bin/sh\nREAL='{}'\nLAB='{}'\n{script}\n",
            worker_bin().display(),
            self.log.display()
        );
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        self.h.set_env("HOMEBASED_WORKER", &path);
    }

    /// The first worker runs with `FAILPOINTS=<point>=return` and its exit status goes to
    /// `$LAB/crashed-worker`; every later one is the plain worker.
    pub fn first_worker_crashes_at(&mut self, point: &str) {
        self.wrap_worker(&format!(
            r#"if mkdir "$LAB/armed" 2>/dev/null; then
  FAILPOINTS='{point}=return' "$REAL" "$@"
  echo $? > "$LAB/crashed-worker.tmp" && mv "$LAB/crashed-worker.tmp" "$LAB/crashed-worker"
  exit 0
fi
exec "$REAL" "$@""#
        ));
    }

    /// The first worker is a stand-in that records a workload that started and exited 0
    /// (with its start-log lines) and exits without a poke. With `cleanup` (an outcome as
    /// JSON) it writes that `cleanup.json`; without, it leaves a marked escaped process and no
    /// `cleanup.json`, as a worker that died after `exit.json` would. Later workers are real.
    pub fn first_worker_is_a_stand_in(&mut self, cleanup: Option<&str>) {
        let ending = match cleanup {
            Some(outcome) => format!(
                "printf '{{\"attempt\":1,\"outcome\":{outcome},\"finished_at\":%s}}' \"$now\" \
                 > \"$dir/.c\" && mv \"$dir/.c\" \"$dir/cleanup.json\""
            ),
            None => r#"HOMEBASED_TASK_ID="$task" setsid sleep 299 </dev/null >/dev/null 2>&1 3>&- &
  echo $! >> "$LAB/sleepers""#
                .to_string(),
        };
        let script = r#"if mkdir "$LAB/armed" 2>/dev/null; then
  dir="$1"; task=$(basename "$dir"); now=$(date +%s%3N); ticks=$(cut -d' ' -f22 /proc/$$/stat)
  job=$(sed -n 's/.*"job": *"\([^"]*\)".*/\1/p' "$dir/run.json")
  printf 'start %s 0 live=[]\ndone %s 0\n' "$job" "$job" >> "$LAB/starts"
  printf '{"worker":{"pid":%s,"start_ticks":%s},"child":{"process":{"pid":%s,"start_ticks":%s},"pgid":%s,"started_at":%s}}' $$ "$ticks" $$ "$ticks" $$ "$now" > "$dir/.w" && mv "$dir/.w" "$dir/worker.json"
  printf '{"reason":{"kind":"exit","code":0},"group":"confirmed_exited","ended_at":%s}' "$now" > "$dir/.e" && mv "$dir/.e" "$dir/exit.json"
  ENDING
  exit 0
fi
exec "$REAL" "$@""#;
        self.wrap_worker(&script.replace("ENDING", &ending));
    }

    /// Waits for the first worker to die at its crash point (an abort: status 128 + SIGABRT).
    pub fn wait_worker_crash(&self, point: &str) {
        let file = self.log.join("crashed-worker");
        wait_until(
            &format!("the first worker to crash at {point} ({BUILD_HINT})"),
            || file.exists(),
        );
        let status = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            status.trim(),
            (128 + sigabrt()).to_string(),
            "the worker ended otherwise than at the point"
        );
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.log.join("starts"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The pids of the escaped processes the steps left behind.
    fn sleepers(&self) -> Vec<i32> {
        std::fs::read_to_string(self.log.join("sleepers"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Waits until every job is in its expected state and every lane is idle, then checks
    /// the invariants. `jobs`: `(id, thread, final state)`.
    pub fn check(&self, jobs: &[(&str, &str, &str)]) {
        for (job, _, state) in jobs {
            wait_job(&self.h, job, state);
        }
        wait_all_idle(&self.h);
        self.h.settle();
        for (job, _, state) in jobs {
            let shown = show(&self.h, job);
            assert_eq!(state_of(&shown), *state, "{shown:#}");
        }
        self.check_steps(jobs);
        for (job, thread, _) in jobs {
            self.check_events(job, thread);
        }
        check_dense(&self.h);
        let alive: Vec<i32> = self
            .sleepers()
            .into_iter()
            .filter(|p| sleeper_alive(*p))
            .collect();
        assert!(
            alive.is_empty(),
            "marked processes outlived their runs: {alive:?}"
        );
    }

    /// No run started while an escaped process of an earlier run lived; no step that logged
    /// `done` started again; every step of a succeeded job is done exactly once.
    fn check_steps(&self, jobs: &[(&str, &str, &str)]) {
        let lines = self.lines();
        let mut done: BTreeMap<(String, String), usize> = BTreeMap::new();
        for line in &lines {
            let words: Vec<&str> = line.split_whitespace().collect();
            let key = match words.as_slice() {
                [_, job, step, ..] => (job.to_string(), step.to_string()),
                _ => panic!("a malformed line in the start log: {line:?}"),
            };
            match words[0] {
                "start" => {
                    assert!(
                        line.ends_with("live=[]"),
                        "a run started while marked processes of an earlier run lived: {line:?}\n{lines:#?}"
                    );
                    assert!(
                        !done.contains_key(&key),
                        "a finished step started again: {line:?}\n{lines:#?}"
                    );
                }
                "done" => *done.entry(key).or_default() += 1,
                "yield" => {}
                other => panic!("unknown start-log line {other:?}"),
            }
        }
        assert!(
            done.values().all(|n| *n == 1),
            "a step finished twice: {lines:#?}"
        );
        for (job, _, state) in jobs {
            if *state != "succeeded" {
                continue;
            }
            let steps = show(&self.h, job)["steps"].as_u64().unwrap_or(1);
            for step in 0..steps {
                let key = (job.to_string(), step.to_string());
                assert_eq!(
                    done.get(&key),
                    Some(&1),
                    "step {step} of succeeded job {job} is not done once: {lines:#?}"
                );
            }
        }
    }

    /// The job's events are 1..n in `job show`, and each reached the thread's inbox, in seq
    /// order (a redelivery may repeat the latest one).
    fn check_events(&self, job: &str, thread: &str) {
        let shown = show(&self.h, job);
        let seqs: Vec<u64> = shown["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, expected, "events are not 1..n: {shown:#}");
        let mut delivered = Vec::new();
        wait_until(&format!("every event of {job} in its inbox"), || {
            delivered = inbox(&self.h, thread, job);
            let mut distinct = delivered.clone();
            distinct.dedup();
            distinct == expected
        });
        assert!(
            delivered.windows(2).all(|w| w[0] <= w[1]),
            "the inbox has {job}'s events out of order: {delivered:?}"
        );
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // A failed test may leave its escaped processes behind: end them, and only them.
        for pid in self.sleepers() {
            if sleeper_alive(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

fn sigabrt() -> i32 {
    nix::sys::signal::Signal::SIGABRT as i32
}

fn sleeper_alive(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " ") == SLEEPER)
        .unwrap_or(false)
}

/// The seqs of `job`'s events in `thread`'s inbox, in arrival order.
pub fn inbox(h: &TestHome, thread: &str, job: &str) -> Vec<u64> {
    h.json(&["events", "--thread", thread])["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["job"] == job)
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

/// `resource jobs`: positions are 1..n within each level.
pub fn check_dense(h: &TestHome) {
    let mut levels: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (_, level, position) in h.queue() {
        levels.entry(level).or_default().push(position);
    }
    for (level, positions) in levels {
        let expected: Vec<u64> = (1..=positions.len() as u64).collect();
        assert_eq!(positions, expected, "positions of {level} are not dense");
    }
}

/// Runs one test of the matrix and writes its row to `target/crash-matrix/`: `pass`, or
/// what broke. The panic, if any, goes on.
pub fn row(point: Point, scenario: &str, checked: &str, test: impl FnOnce()) {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(test));
    let result = match &outcome {
        Ok(()) => "pass".to_string(),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".to_string());
            let first: String = message
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(240)
                .collect();
            format!("**broke**: {first}")
        }
    };
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let checks = if checked.is_empty() {
        CHECKED.to_string()
    } else {
        format!("{CHECKED}; {checked}")
    };
    let line = format!(
        "| `{}` | {} | {} | {} | {} | {} |\n",
        point.name,
        cell(point.place),
        cell(point.separates),
        cell(scenario),
        cell(&checks),
        cell(&result)
    );
    let dir = matrix_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let slug: String = scenario
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let file = dir.join(format!("{:02}-{}-{slug}.md", point.order, point.name));
    std::fs::write(file, line).unwrap();
    if let Err(payload) = outcome {
        std::panic::resume_unwind(payload);
    }
}

/// `target/crash-matrix`, found from this test executable (`target/debug/deps/<test>-<hash>`).
fn matrix_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps/");
    target.join("crash-matrix")
}
