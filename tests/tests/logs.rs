//! Reading a workload's output as an ML engineer does: a progress bar redrawn with `\r`
//! reads as its last state (`--raw` keeps the bytes), and `resource job log --follow`
//! follows a job across its attempts until it ends.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::common::jobs::*;
use crate::common::wait_until;
use std::io::Read;
use std::process::Stdio;

/// Draws a 0..100% bar on one line with carriage returns, as tqdm does, then ends.
const PROGRESS: &str = r#"
echo "epoch 1"
i=0
while [ $i -le 100 ]; do printf '\r%3d%%|%s' "$i" "$(printf '%*s' $((i / 10)) '' | tr ' ' '#')"; i=$((i + 5)); done
printf '\n'
echo "saved"
"#;

#[test]
fn a_progress_bar_tailed_shows_its_last_state_and_raw_keeps_the_redraws() {
    let h = home_with_gpus(1);
    let job = h.submit(&sh_spec(&h, "progress", PROGRESS, &[]));
    let done = wait_job(&h, &job, "succeeded");
    let task = runs(&done)[0]["task"].as_str().unwrap().to_string();

    let tailed = h.json(&["task", "log", &task, "--tail", "2"]);
    assert_eq!(tailed["log"], "100%|##########\nsaved\n", "{tailed}");
    assert_eq!(tailed["truncated"], true);
    let human = h.cli(&["task", "log", &task, "--tail", "2"]).stdout;
    assert_eq!(human, "100%|##########\nsaved\n");
    let raw = h.json(&["task", "log", &task, "--raw"]);
    let raw = raw["log"].as_str().unwrap();
    assert!(raw.starts_with("epoch 1\n\r  0%|\r  5%|"), "{raw:?}");
    assert_eq!(raw.matches('\r').count(), 21, "{raw:?}");
}

#[test]
fn following_a_preempted_job_prints_both_runs_in_order_and_ends_with_the_job() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("second-may-finish");
    // Each attempt says which it is; the first is stopped, the second waits for the gate.
    let script = format!(
        "echo \"attempt $HOMEBASED_RUN_NUMBER starts\"; \
         if [ \"$HOMEBASED_RUN_NUMBER\" = 2 ]; then {}; echo 'attempt 2 done'; \
         else sleep 60; fi",
        wait_for_gate(1)
    );
    let low = h.submit(&sh_spec(&h, "low", &script, &[&gate]).priority("low"));
    wait_phase(&h, &low, "executing");

    let mut follower = h
        .homebased()
        .args(["resource", "job", "log", &low, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let urgent = h.submit(&h.spec("urgent").priority("high").command(&["true"]));
    wait_job(&h, &urgent, "succeeded");
    let second = wait_until_attempt(&h, &low, 2);
    wait_until("the second attempt to start", || {
        task_log(&h, &second).contains("attempt 2 starts")
    });
    open_gate(&gate);
    wait_job(&h, &low, "succeeded");
    let mut exited = None;
    wait_until("job log --follow to end with the job", || {
        exited = follower.try_wait().unwrap();
        exited.is_some()
    });
    assert!(exited.unwrap().success());
    let mut out = String::new();
    follower
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();

    let done = show(&h, &low);
    let history = runs(&done);
    assert_eq!(history.len(), 2, "{done:#}");
    let first = history[0]["task"].as_str().unwrap();
    let expected = format!(
        "==> task {first} run 1 step 0 <==\nattempt 1 starts\n\
         ==> task {second} run 2 step 0 <==\nattempt 2 starts\nattempt 2 done\n"
    );
    assert_eq!(out, expected);

    let whole = h.cli(&["resource", "job", "log", &low]).stdout;
    assert!(
        whole.contains(&format!(
            "==> task {second} run 2 step 0 <==\nattempt 2 starts"
        )),
        "{whole}"
    );
}

/// Waits until `job` runs its `n`th attempt; returns its task.
fn wait_until_attempt(h: &common::TestHome, job: &str, n: usize) -> String {
    let mut task = String::new();
    wait_until(&format!("attempt {n} of {job}"), || {
        let s = show(h, job);
        let history = runs(&s);
        if history.len() == n {
            task = history[n - 1]["task"].as_str().unwrap().to_string();
        }
        !task.is_empty()
    });
    task
}

/// Into a pipe (an agent, `tee`), a follower sees a progress bar move: the line as it stands
/// when it attaches, then each redraw as a line of its own, not nothing until the line ends.
#[test]
fn following_a_task_log_into_a_pipe_prints_each_redraw_as_a_line() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("finish-the-bar");
    let script = format!(
        "echo start; printf '\\r 10%%'; printf '\\r 50%%'; {}; printf '\\r100%%\\n'; echo end",
        wait_for_gate(1)
    );
    let job = h.submit(&sh_spec(&h, "bar", &script, &[&gate]));
    wait_phase(&h, &job, "executing");
    let task = show(&h, &job)["active_run"].as_str().unwrap().to_string();
    wait_until("the bar to be half drawn", || {
        h.json(&["task", "log", &task, "--raw"])["log"]
            .as_str()
            .unwrap()
            .ends_with(" 50%")
    });
    let mut follower = h
        .homebased()
        .args(["task", "log", &task, "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    open_gate(&gate);
    wait_job(&h, &job, "succeeded");
    let mut exited = None;
    wait_until("task log --follow to end with its run", || {
        exited = follower.try_wait().unwrap();
        exited.is_some()
    });
    assert!(exited.unwrap().success());
    let mut out = String::new();
    follower
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    assert_eq!(out, "start\n 50%\n100%\nend\n");
}

/// A log shown in part says so, once, on stderr (the log itself stays clean for a pipe):
/// how much of how much, why, and where the whole `output.log` is.
#[test]
fn a_long_log_tailed_says_it_is_the_tail_and_where_the_whole_log_is() {
    let h = home_with_gpus(1);
    // 50 MB of numbered lines.
    let script = "seq -f 'line %010.0f' 1 3200000";
    let job = h.submit(&sh_spec(&h, "long", script, &[]));
    let done = wait_job(&h, &job, "succeeded");
    let task = runs(&done)[0]["task"].as_str().unwrap().to_string();
    let path = h.home().join("tasks").join(&task).join("output.log");

    let out = h.cli(&["task", "log", &task]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(
        out.stdout.ends_with("line 0003200000\n"),
        "the newest lines"
    );
    let lines = out.stdout.lines().count();
    let size = std::fs::metadata(&path).unwrap().len() as f64 / (1024.0 * 1024.0);
    assert!(
        out.stderr
            .contains(&format!("showing the last {lines} lines of {size:.1} MiB"))
            && out.stderr.contains("at most the last 1.0 MiB is read")
            && out.stderr.contains(&path.display().to_string()),
        "{}",
        out.stderr
    );
    let capped = h.cli(&["task", "log", &task, "--tail", "9000"]);
    assert_eq!(capped.stdout.lines().count(), 5000);
    assert!(
        capped.stderr.contains("--tail is capped at 5000 lines"),
        "{}",
        capped.stderr
    );
    // A short tail that shows everything asked says nothing more than what was asked.
    let job_log = h.cli(&["resource", "job", "log", &job, "--tail", "3"]);
    assert!(
        job_log.stdout.ends_with("line 0003200000\n"),
        "{}",
        job_log.stdout
    );
    assert!(job_log.stderr.contains("(--tail 3)"), "{}", job_log.stderr);
    // Scripts get the JSON alone.
    let json = h.cli(&["--json", "task", "log", &task]);
    assert!(json.stderr.is_empty(), "{}", json.stderr);
}

/// `resource job log --raw` keeps the redraws, as `task log --raw` does.
#[test]
fn a_job_log_raw_keeps_the_redraws() {
    let h = home_with_gpus(1);
    let job = h.submit(&sh_spec(&h, "progress", PROGRESS, &[]));
    wait_job(&h, &job, "succeeded");
    let rendered = h.cli(&["resource", "job", "log", &job]).stdout;
    assert!(
        !rendered.contains('\r') && rendered.contains("100%|##########\n"),
        "{rendered:?}"
    );
    let raw = h.cli(&["resource", "job", "log", &job, "--raw"]).stdout;
    assert_eq!(raw.matches('\r').count(), 21, "{raw:?}");
}

/// Writes lines `line 00000001` to `line 00400000` (14 bytes each) in four bursts, a moment
/// apart, then `done`: 5.6 MB, well past a 1 MiB limit.
const CHATTY: &str = "for i in 0 1 2 3; do \
    seq -f 'line %08g' $((i * 100000 + 1)) $((i * 100000 + 100000)); sleep 0.3; done; \
    echo done";

fn chatty_output() -> Vec<u8> {
    let mut all: Vec<u8> = (1..=400_000)
        .flat_map(|n| format!("line {n:08}\n").into_bytes())
        .collect();
    all.extend_from_slice(b"done\n");
    all
}

#[test]
fn output_past_the_limit_keeps_its_head_and_newest_lines_around_one_marker() {
    let mut h = common::TestHome::new(common::Probe::Gpus(1));
    h.use_config("[resource]\noutput_limit = \"1m\"\n");
    h.start_daemon();
    let job = h.submit(&sh_spec(&h, "chatty", CHATTY, &[]));
    let started = wait_phase(&h, &job, "executing");
    let task = started["run"]["task"].as_str().unwrap().to_string();
    let follower = h
        .homebased()
        .args(["task", "log", &task, "--follow", "--raw"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let done = wait_job(&h, &job, "succeeded");
    let run = &runs(&done)[0];
    assert_eq!(
        run["process"],
        serde_json::json!({"kind": "exit", "code": 0})
    );
    let task = run["task"].as_str().unwrap().to_string();
    let dir = h.home().join("tasks").join(&task);
    let log = std::fs::read(dir.join("output.log")).unwrap();
    let written = chatty_output();

    assert!(log.len() <= 1024 * 1024, "{} bytes kept", log.len());
    // The head is the first 256 KiB (a quarter of the limit), which ends mid-line here.
    let head = 256 * 1024;
    assert_eq!(log[..head], written[..head]);
    let rest = &log[head..];
    let text = String::from_utf8_lossy(rest);
    assert_eq!(text.matches("[homebased: ").count(), 1, "one marker");
    let prefix = "\n[homebased: ";
    assert!(text.starts_with(prefix), "{:?}", &text[..80]);
    let line_end = text.find(" bytes of output dropped]\n").unwrap();
    let dropped: usize = text[prefix.len()..line_end].parse().unwrap();
    let newest = &rest[line_end + " bytes of output dropped]\n".len()..];
    // Every byte written is either kept or counted by the marker, and the kept end is the
    // newest output, through its last line.
    assert!(written.ends_with(newest), "the newest output is kept whole");
    assert_eq!(head + dropped + newest.len(), written.len());
    assert!(
        newest.len() > 256 * 1024,
        "{} newest bytes kept",
        newest.len()
    );
    assert_eq!(
        h.json(&["task", "log", &task, "--tail", "2"])["log"],
        "line 00400000\ndone\n"
    );
    let notes = std::fs::read_to_string(dir.join("worker.log")).unwrap();
    assert!(!notes.contains("cannot cut"), "{notes}");

    // A follower's place moves down with the output at each cut: it reads on in order,
    // never back, and through the end.
    let followed = follower.wait_with_output().unwrap();
    assert!(followed.status.success());
    let followed = String::from_utf8_lossy(&followed.stdout);
    assert!(
        followed.ends_with("line 00400000\ndone\n"),
        "{}",
        &followed[followed.len().saturating_sub(200)..]
    );
    let numbers: Vec<u32> = followed
        .lines()
        .filter_map(|l| l.strip_prefix("line ").filter(|n| n.len() == 8))
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[0] < w[1]),
        "in order, none twice"
    );
    let odd = followed
        .lines()
        .filter(|l| !l.starts_with("line ") && *l != "done")
        .count();
    assert!(odd <= 12, "only markers and the lines cut through: {odd}");
}
