//! `homebased mcp` as a coding agent drives it (SPEC 15): the official MCP Python SDK
//! (`tests/mcp/session.py`, in the virtual environment `target/mcp-venv` that `.ci/run`
//! prepares) over stdio against a real daemon in a temporary home: the tools (and no release
//! tool), a submit and its repeat with the same job id, `events_wait` returning the job's
//! `JOB_SUCCEEDED`, `job_log` with the run's output, the agent's environment variable in the
//! run, an unknown job as a tool error carrying `job_not_found`, bad arguments, and the daemon
//! restarted in the middle of a session. Without the environment these tests say so and pass,
//! unless `CI` is set: then they fail.
//!
//! Malformed JSON-RPC and a client that goes away in the middle of a call are written here as
//! raw lines on the server's stdin: no SDK sends them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::{gated_spec, open_gate, wait_job, wait_phase};
use crate::common::{homebased_bin, run_bounded, Probe, TestHome, PATIENCE};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Instant;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The virtual environment's interpreter, with the `mcp` package; `None` (said on stderr)
/// when it was not prepared and this is not CI.
fn python() -> Option<PathBuf> {
    let python = repo().join("target/mcp-venv/bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ready {
        return Some(python);
    }
    let how = "python3 -m venv target/mcp-venv && target/mcp-venv/bin/pip install mcp \
               (.ci/run does this)";
    assert!(
        std::env::var_os("CI").is_none(),
        "{} has no `mcp` package: {how}",
        python.display()
    );
    eprintln!(
        "SKIPPED: the MCP client SDK is not installed at {}: {how}",
        python.display()
    );
    None
}

/// Runs one scenario of `tests/mcp/session.py` against `h`'s daemon; answers what the agent
/// saw last, or `None` when skipped.
fn scenario(h: &TestHome, name: &str) -> Option<Value> {
    let python = python()?;
    let mut cmd = Command::new(python);
    // The home's isolated environment (HOME, XDG_*, the fake nvidia-smi), which the agent
    // passes on to its server and the CLI commands it runs.
    for (key, value) in h.command().get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    cmd.arg(repo().join("tests/mcp/session.py"))
        .arg(name)
        .env("HOMEBASED_BIN", homebased_bin())
        .env("HOMEBASED_TEST_HOME", h.home())
        .env("HOMEBASED_TEST_WORKDIR", h.workdir())
        .current_dir(h.workdir());
    let out = run_bounded(cmd, None);
    assert_eq!(
        out.code(),
        0,
        "session.py {name} failed\nstdout: {}\nstderr: {}",
        out.stdout,
        out.stderr
    );
    let last = out.stdout.lines().last().unwrap_or_default();
    Some(serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {}", out.stdout)))
}

#[test]
fn mcp_lists_the_tools_of_the_spec_and_no_release_tool() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let Some(seen) = scenario(&h, "tools") else {
        return;
    };
    let tools = seen["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 10, "{seen}");
    assert!(tools
        .iter()
        .all(|t| !t.as_str().unwrap().contains("release")));
}

#[test]
fn mcp_submit_twice_waits_for_success_and_reads_the_log_with_the_agents_environment() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let Some(seen) = scenario(&h, "submit") else {
        return;
    };
    let job = seen["job"].as_str().unwrap();
    assert_eq!(seen["event"]["event"], "JOB_SUCCEEDED", "{seen}");
    assert_eq!(seen["event"]["job"], job);
    let mark = seen["mark"].as_str().unwrap();
    assert_eq!(
        seen["log"]["runs"][0]["log"],
        format!("agent says {mark}\n"),
        "the run printed the agent's variable: {seen}"
    );
    // The repeated submit made no second job: one job, one run, as the CLI shows it.
    let shown = h.json(&["resource", "job", "show", job]);
    assert_eq!(shown["state"]["state"], "succeeded", "{shown}");
    assert_eq!(shown["runs"].as_array().unwrap().len(), 1, "{shown}");
    let events = h.json(&[
        "events",
        "--thread",
        shown["spec"]["thread"].as_str().unwrap(),
    ]);
    assert_eq!(events["events"].as_array().unwrap().len(), 1, "{events}");
}

#[test]
fn mcp_refuses_bad_arguments_with_the_error_envelope_and_queues_nothing() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    if scenario(&h, "bad_input").is_none() {
        return;
    }
    assert_eq!(h.json(&["resource", "jobs"])["jobs"], json!([]));
}

#[test]
fn mcp_keeps_serving_when_the_daemon_is_restarted_in_the_middle_of_a_session() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let Some(seen) = scenario(&h, "restart") else {
        return;
    };
    let job = seen["job"].as_str().unwrap();
    let shown = h.json(&["resource", "job", "show", job]);
    assert_eq!(shown["state"]["state"], "succeeded", "{shown}");
}

/// `homebased mcp` with raw pipes, for what no SDK sends.
struct Raw {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Raw {
    fn start(h: &TestHome) -> Raw {
        let mut cmd = h.homebased();
        cmd.arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Raw { child, out }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next message the server writes (each is one line).
    fn read(&mut self) -> Value {
        let mut line = String::new();
        let n = self.out.read_line(&mut line).unwrap();
        assert!(n > 0, "the server closed stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn initialize(&mut self) {
        self.send(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
        );
        let init = self.read();
        assert_eq!(init["id"], 1, "{init}");
        assert_eq!(init["result"]["serverInfo"]["name"], "homebased", "{init}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn call(&mut self, id: u64, tool: &str, arguments: Value) {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        self.send(&request.to_string());
    }

    /// Closes stdin (the client went away) and waits for the server to end; answers its
    /// stderr.
    fn hang_up(mut self) -> String {
        drop(self.child.stdin.take());
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > PATIENCE {
                let _ = self.child.kill();
                panic!("homebased mcp did not end after its client went away");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(status.success(), "homebased mcp exited {status}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        err
    }
}

#[test]
fn mcp_answers_malformed_json_rpc_with_errors_and_goes_on_serving() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let mut raw = Raw::start(&h);
    // Not JSON at all: ignored (nothing to answer it by), before and after initialize.
    raw.send("this is not json {");
    raw.initialize();
    raw.send("{\"jsonrpc\":");
    // JSON of the wrong shape: an Invalid Request error.
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":42}"#);
    let invalid = raw.read();
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    // A tool that does not exist: a protocol error naming the tools.
    raw.call(3, "resource_release", json!({}));
    let unknown = raw.read();
    assert_eq!(unknown["id"], 3, "{unknown}");
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let message = unknown["error"]["message"].as_str().unwrap();
    assert!(message.contains("events_wait"), "{message}");
    // Arguments that are not an object: refused by the protocol layer or the tool, never
    // a crash; the server answers the next call.
    raw.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"jobs","arguments":[1]}}"#);
    let odd = raw.read();
    assert_eq!(odd["id"], 4, "{odd}");
    assert!(
        odd.get("error").is_some() || odd["result"]["isError"] == true,
        "{odd}"
    );
    raw.call(5, "jobs", json!({}));
    let jobs = raw.read();
    assert_eq!(jobs["id"], 5, "{jobs}");
    assert_eq!(jobs["result"]["isError"], false, "{jobs}");
    assert_eq!(
        jobs["result"]["structuredContent"]["jobs"],
        json!([]),
        "{jobs}"
    );
    raw.hang_up();
    assert_eq!(h.json(&["resource", "jobs"])["jobs"], json!([]));
}

/// A client that goes away while `events_wait` waits on a running job's thread: the server
/// ends, the job runs on to its end (the wait was about to be answered by it), and its event
/// is not spent on the session that left: a new session's `events_wait` on the thread gets it,
/// once, and nothing else was queued.
#[test]
fn mcp_client_that_goes_away_in_the_middle_of_a_wait_leaves_its_job_and_event_to_the_next() {
    let mut h = TestHome::new(Probe::Gpus(1));
    h.start_daemon();
    let mut raw = Raw::start(&h);
    raw.initialize();
    let (thread, job) = (common::new_uuid(), common::new_uuid());
    let gate = h.tmp().join("gate");
    let spec = gated_spec(&h, "outlives its session", "", &gate, "").set("thread", json!(thread));
    raw.call(2, "job_submit", json!({"spec": spec.0, "job_id": job}));
    let submitted = raw.read();
    assert_eq!(submitted["id"], 2, "{submitted}");
    assert_eq!(submitted["result"]["isError"], false, "{submitted}");
    raw.call(3, "events_wait", json!({"thread": thread, "timeout": "5m"}));
    // Proof the wait is under way: the daemon holds the read open, so a second call on the
    // same session is answered while the first still waits, and the job is running.
    raw.call(4, "job_show", json!({"job": job}));
    let shown = raw.read();
    assert_eq!(shown["id"], 4, "{shown}");
    wait_phase(&h, &job, "executing");
    raw.hang_up();

    // The job was not the session's to end: it runs to its end once let go.
    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
    assert_eq!(
        h.json(&["resource", "jobs"])["jobs"],
        json!([]),
        "nothing else queued"
    );

    // Its event waits for the next session.
    let mut again = Raw::start(&h);
    again.initialize();
    again.call(
        2,
        "events_wait",
        json!({"thread": thread, "timeout": "10s"}),
    );
    let waited = again.read();
    assert_eq!(waited["id"], 2, "{waited}");
    let events = &waited["result"]["structuredContent"]["events"];
    assert_eq!(events.as_array().map(Vec::len), Some(1), "{waited}");
    assert_eq!(events[0]["event"], "JOB_SUCCEEDED", "{waited}");
    assert_eq!(events[0]["job"], job.as_str(), "{waited}");
    again.hang_up();
}
