//! Cleanup and Attention as a user sees them (SPEC section 6, the runbook's "Clear Attention
//! after a machine check"): an escaped grandchild that ignores TERM is gone before its lane
//! serves again; a same-user process whose environment cannot be read holds its lane in
//! Attention until a person releases that exact hold (the daemon runs as an unprivileged user
//! there, because root reads every environment); a process that cleared its environment is
//! not touched (the documented limit); cleanup never signals the daemon or another job.
//!
//! Every process a workload leaves behind records its pid and its `/proc/<pid>/stat` line in
//! files the test reads, so the test knows the exact process `(pid, kernel start time)`.
//! [`Lab`]'s drop kills the daemon and everything of the test's home (escaped processes
//! included) whatever happened to the test.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::procs::{parse_stat, Proc};

use crate::common::account::{unprivileged_account, Account};
use crate::common::jobs::{
    gated_spec, resource, sh_spec, show, wait_idle, wait_job, wait_phase_on,
};
use crate::common::{is_uuid, new_uuid, wait_until, Probe, TestHome, PATIENCE};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// ------------------------------------------------------------------------------------------
// Processes by identity
// ------------------------------------------------------------------------------------------

impl Proc {
    /// What a step recorded: its pid file and the `/proc/<pid>/stat` line beside it.
    fn recorded(pidfile: &Path) -> Option<Proc> {
        let pid = std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()?;
        let line = std::fs::read_to_string(stat_file(pidfile)).ok()?;
        let (_, start) = parse_stat(&line)?;
        Some(Proc { pid, start })
    }
}

/// Where a step records the `/proc/<pid>/stat` line of the process named in `pidfile`.
fn stat_file(pidfile: &Path) -> PathBuf {
    let mut name = pidfile.as_os_str().to_owned();
    name.push(".stat");
    PathBuf::from(name)
}

/// Shell for a step: starts `$1`'s process in a new session (`setsid`, so it escapes the
/// step's process group) by running `inner` there with `sh -c` (`$1` is the pid file, `$2` an
/// optional program; `inner` writes `$$` to the pid file and then `exec`s). The step waits
/// (at most 60 s) until that process's command name is `comm` and `ready` holds for `$p`,
/// records its `/proc/<pid>/stat` line in `$1.stat`, and exits 0 (1 if it never got ready).
/// So the escaped process is in its final form before the step's cleanup can begin.
fn escape_script(inner: &str, comm: &str, ready: &str) -> String {
    format!(
        r#"setsid sh -c '{inner}' sh "$1" "$2" &
i=0
while [ $i -lt 600 ]; do
  if [ -s "$1" ]; then
    p=$(cat "$1")
    if [ "$(cat /proc/$p/comm 2>/dev/null)" = "{comm}" ] && {ready}; then
      cat /proc/$p/stat > "$1.stat.tmp" && mv "$1.stat.tmp" "$1.stat" && exit 0
    fi
  fi
  sleep 0.1
  i=$((i+1))
done
echo "the escaped process never became ready" >&2
exit 1
"#
    )
}

/// Writes the pid to `$1` atomically (the step reads it while it may be written).
const RECORD_PID: &str = r#"echo $$ > "$1.tmp" && mv "$1.tmp" "$1""#;

// ------------------------------------------------------------------------------------------
// The lab: a test home with its config and daemon (optionally as the unprivileged user), and
// a drop that leaves nothing of it running
// ------------------------------------------------------------------------------------------

struct Lab {
    h: TestHome,
    /// Pid files of processes that workloads leave behind, killed on drop.
    strays: Vec<PathBuf>,
}

impl Lab {
    /// A home whose fake probe lists `gpus` GPUs, with `config` as its `--config` file.
    fn new(gpus: u32, config: &str, account: Option<Account>) -> Lab {
        let mut home = TestHome::new(Probe::Gpus(gpus));
        home.use_config(config);
        if let Some(account) = account {
            home.run_as(account);
        }
        Lab {
            h: home,
            strays: Vec::new(),
        }
    }

    /// `daemon serve` as a child of the test; returns once its socket answers.
    fn spawn_daemon(&mut self) -> Proc {
        // setpriv execs the daemon: the child's pid is the daemon's.
        let pid = self.h.spawn_serve();
        Proc::now(pid).expect("the daemon is running")
    }

    /// A pid file under the temporary directory for a process a workload leaves behind;
    /// whatever it names is killed when the lab is dropped.
    fn stray(&mut self, name: &str) -> PathBuf {
        let path = self.file(name);
        self.strays.push(path.clone());
        path
    }

    fn file(&self, name: &str) -> PathBuf {
        self.h.tmp().join(name)
    }

    /// The process a step recorded in `pidfile` (waits for the record).
    fn recorded(&self, pidfile: &Path) -> Proc {
        let mut found = None;
        wait_until(
            &format!("a process recorded in {}", pidfile.display()),
            || {
                found = Proc::recorded(pidfile);
                found.is_some()
            },
        );
        found.unwrap()
    }

    /// Every process of this home now: those whose environment holds its
    /// `HOMEBASED_HOME` (workloads and what escaped them) or whose command line names it
    /// (daemon, workers), and what the strays' pid files name.
    fn leftovers(&self) -> Vec<Proc> {
        let home = self.h.home().display().to_string();
        let marker = format!("HOMEBASED_HOME={home}");
        let under = format!("{home}/");
        let me = std::process::id();
        let mut found: Vec<Proc> = self
            .strays
            .iter()
            .filter_map(|p| Proc::recorded(p))
            .filter(Proc::alive)
            .collect();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Some(before) = Proc::now(pid) else {
                continue;
            };
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let ours = environ
                .split(|b| *b == 0)
                .any(|var| var == marker.as_bytes())
                || cmdline
                    .split(|b| *b == 0)
                    .any(|arg| arg == home.as_bytes() || arg.starts_with(under.as_bytes()));
            // What was read belongs to `before` only if the pid still names it.
            if ours && before.alive() && !found.contains(&before) {
                found.push(before);
            }
        }
        found
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.h.has_serve() {
            self.h.kill_serve(Signal::SIGKILL);
        }
        // Kill by identity until nothing of this home is left (bounded; never panics).
        let started = Instant::now();
        loop {
            let left = self.leftovers();
            if left.is_empty() || started.elapsed() > PATIENCE {
                break;
            }
            for p in &left {
                p.kill();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn run_of(show: &Value, index: usize) -> Value {
    show["runs"][index].clone()
}

// ------------------------------------------------------------------------------------------
// The tests
// ------------------------------------------------------------------------------------------

/// A grandchild that left the step's process group with `setsid` and ignores SIGTERM is
/// found by its marker and killed (TERM, then KILL after `term_grace`); the lane's next job
/// starts only after it died, and the first run's cleanup is clean.
#[test]
fn an_escaped_grandchild_that_ignores_term_is_killed_before_its_lane_serves_again() {
    let mut lab = Lab::new(1, "[resource.cleanup]\nterm_grace = \"1s\"\n", None);
    lab.spawn_daemon();
    let pidfile = lab.stray("grandchild.pid");
    let seen = lab.file("seen-by-second.txt");

    let inner = format!("trap \"\" TERM; {RECORD_PID}; exec sleep 1000");
    let first = lab.h.submit(&sh_spec(
        &lab.h,
        "leaves-a-grandchild",
        &escape_script(&inner, "sleep", "true"),
        &[&pidfile],
    ));
    let second = lab.h.submit(&sh_spec(
        &lab.h,
        "checks-the-grandchild",
        r#"if kill -0 "$(cat "$1")" 2>/dev/null; then echo alive; else echo dead; fi > "$2""#,
        &[&pidfile, &seen],
    ));

    wait_job(&lab.h, &first, "succeeded");
    let grandchild = lab.recorded(&pidfile);
    wait_job(&lab.h, &second, "succeeded");
    wait_idle(&lab.h, "gpu0");
    let first_done = show(&lab.h, &first);
    let second_done = show(&lab.h, &second);

    assert!(
        !grandchild.alive(),
        "the escaped grandchild {grandchild:?} survived cleanup"
    );
    let cleanup = &run_of(&first_done, 0)["cleanup"];
    assert_eq!(cleanup["result"], "clean", "{first_done:#}");
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim(),
        "dead",
        "the second job started while the grandchild {grandchild:?} was alive"
    );
    // Same lane: the second run really followed the first one there.
    assert_eq!(
        run_of(&second_done, 0)["resource"],
        run_of(&first_done, 0)["resource"]
    );
}

/// The runbook's Attention procedure, end to end, with a daemon running as an unprivileged
/// user: a same-user process started by the run that made itself non-dumpable (its
/// environment cannot be read) is a suspect, never signalled, and at the bound its lane
/// enters Attention naming its pid and start time. The held lane serves nothing (a pinned
/// job waits) while another lane serves an `any` job; wrong and stale UUIDs are refused; the
/// hold survives a killed daemon; releasing that exact UUID frees the lane; the release
/// replays and conflicts by operation id.
#[test]
fn an_unreadable_same_user_process_holds_its_lane_in_attention_until_that_exact_hold_is_released() {
    let Some(account) = unprivileged_account() else {
        return;
    };
    let config = "[resource.cleanup]\nbound = \"3s\"\nterm_grace = \"1s\"\nkill_grace = \"1s\"\n";
    let mut lab = Lab::new(2, config, Some(account));
    // A copy of sleep that the account may execute but not read: exec of an unreadable
    // file makes the process non-dumpable, so its /proc/<pid>/environ is closed to its own
    // (non-root) user, exactly as prctl(PR_SET_DUMPABLE, 0) would.
    let xsleep = lab.file("bin/xsleep");
    let sleep = std::fs::canonicalize("/bin/sleep").unwrap();
    std::fs::copy(&sleep, &xsleep).unwrap();
    std::fs::set_permissions(&xsleep, std::fs::Permissions::from_mode(0o111)).unwrap();
    lab.spawn_daemon();
    let gpu0 = resource(&lab.h, "gpu0");
    let gpu1 = resource(&lab.h, "gpu1");

    // The run leaves the suspect behind and exits 0 once its environment is unreadable.
    let pidfile = lab.stray("suspect.pid");
    let inner = format!("{RECORD_PID}; exec \"$2\" 1000");
    let unreadable = "! cat /proc/$p/environ >/dev/null 2>&1";
    let spec = sh_spec(
        &lab.h,
        "leaves-an-unreadable-process",
        &escape_script(&inner, "xsleep", unreadable),
        &[&pidfile, &xsleep],
    )
    .set("resource", json!("gpu0"));
    let job = lab.h.submit(&spec);

    // No CLI call while the run's cleanup sweeps: each one briefly is a same-user process
    // whose environment cannot be read (between setpriv's setuid and its exec), a genuine
    // suspect that the sweep's last scan could list beside the one this test is about.
    let tasks = lab.h.home().join("tasks");
    wait_until("the run's cleanup.json", || {
        std::fs::read_dir(&tasks)
            .map(|dir| {
                dir.flatten()
                    .any(|e| e.path().join("cleanup.json").exists())
            })
            .unwrap_or(false)
    });

    // Attention on gpu0, naming exactly that process as a suspect.
    let held = wait_phase_on(&lab.h, "gpu0", &job, "attention");
    let suspect = lab.recorded(&pidfile);
    let phase = held["run"]["phase"].clone();
    let attention = phase["id"].as_str().unwrap_or_default().to_string();
    assert!(is_uuid(&phase["id"]), "{held:#}");
    let from_proc = Proc::now(suspect.pid).expect("the suspect is still there");
    assert_eq!(
        from_proc, suspect,
        "the recorded stat line is the process's"
    );
    let failure = &phase["failure"];
    assert_eq!(failure["result"], "unreadable_suspects", "{held:#}");
    assert_eq!(
        failure["remaining"],
        json!([{"pid": suspect.pid, "start_ticks": suspect.start, "reason": "suspect"}]),
        "{held:#}"
    );
    assert!(
        suspect.alive(),
        "the suspect {suspect:?} was signalled: it has no readable marker"
    );

    // The job still succeeded (its step exited 0); its run carries the failure, and its
    // events the Attention.
    let shown = wait_job(&lab.h, &job, "succeeded");
    let run = run_of(&shown, 0);
    assert_eq!(run["resource"], gpu0["id"], "{shown:#}");
    assert_eq!(run["cleanup"]["result"], "unreadable_suspects", "{shown:#}");
    assert_eq!(
        run["cleanup"]["remaining"], failure["remaining"],
        "{shown:#}"
    );
    let events = shown["events"].as_array().expect("job show lists events");
    let attention_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "JOB_ATTENTION")
        .collect();
    assert_eq!(attention_events.len(), 1, "{shown:#}");
    assert_eq!(attention_events[0]["attention"], attention.as_str());
    assert_eq!(attention_events[0]["task"], run["task"]);
    assert_eq!(attention_events[0]["resource"], gpu0["id"]);

    // The human view tells a person which process to check.
    let human = lab.h.cli(&["resource", "list"]);
    assert_eq!(human.code(), 0, "{human:?}");
    let line = human
        .stdout
        .lines()
        .find(|l| l.contains("gpu0"))
        .unwrap_or_else(|| panic!("no gpu0 row: {}", human.stdout));
    for needle in [
        "attention".to_string(),
        attention.clone(),
        format!("pid {}", suspect.pid),
        format!("start {}", suspect.start),
    ] {
        assert!(line.contains(&needle), "{needle:?} missing from {line:?}");
    }

    // The held lane serves nothing; the other lane goes on: a job pinned to gpu0 waits,
    // although it is first in line, while an `any` job runs on gpu1.
    let pinned_ran = lab.file("pinned-ran");
    let pinned = lab.h.submit(
        &sh_spec(
            &lab.h,
            "pinned-to-the-held-lane",
            r#"echo ran > "$1""#,
            &[&pinned_ran],
        )
        .set("resource", json!("gpu0")),
    );
    let gate = lab.file("any-gate");
    let any = lab
        .h
        .submit(&gated_spec(&lab.h, "runs-elsewhere", "", &gate, ""));
    wait_phase_on(&lab.h, "gpu1", &any, "executing");
    assert_eq!(show(&lab.h, &pinned)["state"]["state"], "queued");
    std::fs::write(&gate, "").unwrap();
    let any_done = wait_job(&lab.h, &any, "succeeded");
    assert_eq!(run_of(&any_done, 0)["resource"], gpu1["id"], "{any_done:#}");
    wait_idle(&lab.h, "gpu1");
    assert_eq!(show(&lab.h, &pinned)["state"]["state"], "queued");
    assert!(!pinned_ran.exists(), "the pinned job ran on a held lane");
    assert_eq!(
        show(&lab.h, &pinned)["waiting"],
        json!({"reason": "attention", "resource": gpu0["id"], "attention": attention}),
        "the pinned job names the hold it waits for"
    );
    assert_eq!(resource(&lab.h, "gpu0")["run"]["phase"], phase);

    // A UUID that is not the hold is refused and changes nothing.
    let wrong = new_uuid();
    let refused = lab.h.json_err(
        &[
            "resource",
            "release",
            "--attention",
            &wrong,
            "--operation-id",
            &new_uuid(),
        ],
        3,
    );
    assert_eq!(refused["code"], "attention_not_found", "{refused}");
    assert_eq!(resource(&lab.h, "gpu0")["run"]["phase"], phase);

    // The hold survives a killed daemon: same UUID, same failure, the pinned job waits.
    lab.h.kill_serve(Signal::SIGKILL);
    lab.spawn_daemon();
    assert_eq!(resource(&lab.h, "gpu0")["run"]["phase"], phase);
    assert_eq!(show(&lab.h, &pinned)["state"]["state"], "queued");
    assert!(
        suspect.alive(),
        "the restarted daemon signalled the suspect"
    );

    // A person checked the machine and stopped the leftover, then releases that exact hold.
    suspect.kill();
    wait_until("the suspect to be gone", || !suspect.alive());
    let operation = new_uuid();
    let release = [
        "resource",
        "release",
        "--attention",
        &attention,
        "--operation-id",
        &operation,
    ];
    let released = lab.h.json(&release);
    assert_eq!(
        released,
        json!({"api_version": 1, "resource": gpu0["id"], "attention": attention}),
    );
    let pinned_done = wait_job(&lab.h, &pinned, "succeeded");
    assert_eq!(
        run_of(&pinned_done, 0)["resource"],
        gpu0["id"],
        "{pinned_done:#}"
    );
    assert_eq!(std::fs::read_to_string(&pinned_ran).unwrap().trim(), "ran");
    wait_idle(&lab.h, "gpu0");

    // The same release again returns the stored result unchanged.
    assert_eq!(lab.h.json(&release), released);
    // The same operation id for another Attention is a conflict.
    let conflict = lab.h.json_err(
        &[
            "resource",
            "release",
            "--attention",
            &new_uuid(),
            "--operation-id",
            &operation,
        ],
        5,
    );
    assert_eq!(conflict["code"], "operation_conflict", "{conflict}");
    // The released UUID is stale now: a new release of it is not found.
    let stale = lab.h.json_err(
        &[
            "resource",
            "release",
            "--attention",
            &attention,
            "--operation-id",
            &new_uuid(),
        ],
        3,
    );
    assert_eq!(stale["code"], "attention_not_found", "{stale}");
    assert!(resource(&lab.h, "gpu0")["run"].is_null());
}

/// Cleanup after one lane's run never signals the daemon, nor the worker or workload of a
/// run on another lane that started after it.
#[test]
fn cleanup_never_signals_the_daemon_or_another_running_job() {
    let mut lab = Lab::new(2, "[resource.cleanup]\nterm_grace = \"1s\"\n", None);
    let daemon = lab.spawn_daemon();
    let first_gate = lab.file("first-gate");
    let other_gate = lab.file("other-gate");

    let first = lab.h.submit(
        &gated_spec(&lab.h, "ends-first", "", &first_gate, "").set("resource", json!("gpu0")),
    );
    wait_phase_on(&lab.h, "gpu0", &first, "executing");
    let other = lab.h.submit(
        &gated_spec(&lab.h, "keeps-running", "", &other_gate, "").set("resource", json!("gpu1")),
    );
    let running = wait_phase_on(&lab.h, "gpu1", &other, "executing");
    let task = running["run"]["task"].as_str().unwrap().to_string();
    let record = lab.h.home().join("tasks").join(&task).join("worker.json");
    let mut worker = Value::Null;
    wait_until("the other run's worker.json to record its workload", || {
        worker = std::fs::read_to_string(&record)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        !worker["child"].is_null()
    });
    let identity = |v: &Value| Proc {
        pid: u32::try_from(v["pid"].as_u64().unwrap()).unwrap(),
        start: v["start_ticks"].as_u64().unwrap(),
    };
    let other_worker = identity(&worker["worker"]);
    let other_workload = identity(&worker["child"]["process"]);
    assert!(other_worker.alive() && other_workload.alive(), "{worker}");

    std::fs::write(&first_gate, "").unwrap();
    wait_job(&lab.h, &first, "succeeded");
    wait_idle(&lab.h, "gpu0");
    let first_done = show(&lab.h, &first);
    assert_eq!(
        run_of(&first_done, 0)["cleanup"]["result"],
        "clean",
        "{first_done:#}"
    );

    assert!(daemon.alive() && lab.h.serve_running(), "the daemon died");
    assert!(lab.h.socket_answers(), "the daemon stopped answering");
    assert!(other_worker.alive(), "the other run's worker was signalled");
    assert!(
        other_workload.alive(),
        "the other run's workload was signalled"
    );
    assert_eq!(
        resource(&lab.h, "gpu1")["run"]["phase"]["phase"],
        "executing",
        "the other run stopped"
    );

    std::fs::write(&other_gate, "").unwrap();
    let other_done = wait_job(&lab.h, &other, "succeeded");
    assert_eq!(
        run_of(&other_done, 0)["process"],
        json!({"kind": "exit", "code": 0}),
        "{other_done:#}"
    );
}

/// What a workload does to `<home>/sweep` while its escaped grandchild waits out the cleanup
/// (issue 44): each is a loop that the grandchild itself runs, so it goes on while every
/// worker of the burst sweeps.
const TAMPER_FORGE: &str = r#"d="$HOMEBASED_HOME/sweep"
scope="$(cat /proc/sys/kernel/random/boot_id)/$(readlink /proc/self/ns/pid)"
big=18446744073709551000
while :; do
  mkdir -p "$d" 2>/dev/null
  printf '%s\n{"version":2,"scope":"%s","uid":%s,"since":null,"began_ns":%s,"ended_ns":1,"processes":[]}' $big "$scope" "$(id -u)" $big > "$d/forged" 2>/dev/null && mv -f "$d/forged" "$d/latest" 2>/dev/null
  sleep 0.02
done"#;
const TAMPER_DELETE: &str = r#"while :; do rm -rf "$HOMEBASED_HOME/sweep"; sleep 0.01; done"#;
const TAMPER_GARBAGE: &str = r#"d="$HOMEBASED_HOME/sweep"
head -c 70000000 /dev/zero > "$d/huge" 2>/dev/null && mv -f "$d/huge" "$d/latest"
while :; do
  printf '18446744073709551000 00\n{"version": 2, "processes": [' > "$d/g" 2>/dev/null && mv -f "$d/g" "$d/latest" 2>/dev/null
  sleep 0.02
done"#;
const TAMPER_LINKS: &str = r#"d="$HOMEBASED_HOME/sweep"
while :; do
  rm -f "$d/latest" "$d/lock" 2>/dev/null
  mkfifo "$d/lock" "$d/latest.new" 2>/dev/null
  ln -sfn /etc/passwd "$d/latest" 2>/dev/null
  sleep 0.05
  rm -f "$d/latest" 2>/dev/null
  mkfifo "$d/latest" 2>/dev/null
  sleep 0.05
done"#;

/// Eight lanes whose one-second runs end together (so the sweep exchange is in use); one of
/// them leaves an escaped grandchild (new session, TERM ignored) that runs `tamper` against
/// the exchange. The grandchild is found and killed before its run's cleanup reports clean,
/// and every run of the burst ends.
fn a_tampered_exchange_never_hides_an_escapee(tamper: &str) {
    let mut lab = Lab::new(8, "[resource.cleanup]\nterm_grace = \"1s\"\n", None);
    lab.spawn_daemon();
    let pidfile = lab.stray("tamperer.pid");
    let script = lab.file("tamper.sh");
    std::fs::write(&script, tamper).unwrap();
    let inner = format!("trap \"\" TERM; {RECORD_PID}; exec sh \"$2\"");
    let tamperer = lab.h.submit(&sh_spec(
        &lab.h,
        "tampers-with-the-sweep",
        &format!(
            "(\n{}\n) || exit 1\nsleep 1",
            escape_script(&inner, "sh", "true")
        ),
        &[&pidfile, &script],
    ));
    let others: Vec<String> = (0..7)
        .map(|i| {
            lab.h.submit(&sh_spec(
                &lab.h,
                &format!("ends-together-{i}"),
                "sleep 2",
                &[],
            ))
        })
        .collect();
    wait_job(&lab.h, &tamperer, "succeeded");
    let grandchild = lab.recorded(&pidfile);
    // The job's state is its workload's; its lane is handed on once its cleanup is recorded.
    let mut done = Value::Null;
    wait_until("the tamperer's cleanup recorded", || {
        done = show(&lab.h, &tamperer);
        !run_of(&done, 0)["cleanup"].is_null()
    });
    let task = run_of(&done, 0)["task"].as_str().unwrap().to_string();
    let worker_log =
        std::fs::read_to_string(lab.h.home().join("tasks").join(&task).join("worker.log"))
            .unwrap_or_default();
    assert!(
        !grandchild.alive(),
        "the escaped grandchild {grandchild:?} outlived its run's cleanup: {:#}\n{worker_log}",
        run_of(&done, 0)
    );
    assert_eq!(run_of(&done, 0)["cleanup"]["result"], "clean", "{done:#}");
    // The sweep's summary line says what it cost this machine: the CPU of the worker's
    // thread over the sweep, its own readings of the table included.
    let sweep_cpu = worker_log
        .lines()
        .find(|line| line.contains("cleanup: the process table swept in"))
        .and_then(|line| line.strip_suffix(" ms of CPU"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|ms| ms.parse::<f64>().ok());
    assert!(
        sweep_cpu.is_some_and(|ms| ms > 0.0),
        "no sweep summary with its CPU in worker.log:\n{worker_log}"
    );
    for job in &others {
        wait_job(&lab.h, job, "succeeded");
    }
}

#[test]
fn a_forged_snapshot_in_the_exchange_does_not_hide_an_escapee() {
    a_tampered_exchange_never_hides_an_escapee(TAMPER_FORGE);
}

#[test]
fn a_deleted_exchange_does_not_hide_an_escapee() {
    a_tampered_exchange_never_hides_an_escapee(TAMPER_DELETE);
}

#[test]
fn garbage_or_a_huge_file_in_the_exchange_does_not_hide_an_escapee() {
    a_tampered_exchange_never_hides_an_escapee(TAMPER_GARBAGE);
}

#[test]
fn links_and_fifos_in_the_exchange_do_not_hide_an_escapee() {
    a_tampered_exchange_never_hides_an_escapee(TAMPER_LINKS);
}
