//! Human output as a person reads it: process results in words, ages, full UUIDs in aligned
//! columns (snapshots with the ids and times masked), and `task log --follow` that ends when
//! the run ends.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::jobs::*;
use crate::common::wait_until;

/// One line with every full UUID as `<uuid>` and every age (`12s`, `3m12s`, ...) as `<age>`,
/// blanks collapsed: the words a snapshot keeps, without what changes between runs.
fn masked(line: &str) -> String {
    line.split_whitespace()
        .map(|w| {
            if w.len() == 36 && uuid::Uuid::parse_str(w).is_ok() {
                "<uuid>"
            } else if is_age(w) {
                "<age>"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_age(w: &str) -> bool {
    w.ends_with(['s', 'm', 'h'])
        && w.starts_with(|c: char| c.is_ascii_digit())
        && w.chars().all(|c| c.is_ascii_digit() || "smhd".contains(c))
}

/// Every column of `row` starts where its header does.
fn assert_aligned(header: &str, row: &str) {
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| c != ' ' && (i == 0 || header.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    for &at in &starts {
        let starts_here = row.as_bytes().get(at).is_some_and(|&b| b != b' ')
            && (at == 0 || row.as_bytes()[at - 1] == b' ');
        assert!(starts_here, "column at {at} misaligned:\n{header}\n{row}");
    }
}

#[test]
fn job_show_reads_the_process_result_in_words_in_aligned_columns() {
    let h = home_with_gpus(1);
    let job = h.submit(&sh_spec(&h, "fails", "echo bye; exit 3", &[]));
    wait_until("the job to end", || {
        TERMINAL.contains(&state_of(&show(&h, &job)))
    });
    wait_all_idle(&h);
    let out = h.cli(&["resource", "job", "show", &job]);
    assert_eq!(out.code(), 0, "{out:?}");
    let task = runs(&show(&h, &job))[0]["task"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        out.stdout.contains(&task),
        "full task UUIDs: {}",
        out.stdout
    );
    let lines: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("TASK"))
        .take(2)
        .collect();
    assert_eq!(
        lines.iter().map(|l| masked(l)).collect::<Vec<_>>(),
        [
            "TASK RUN STEP STATUS STOP PROCESS TIME GPU-PEAK CLEANUP",
            // The default fake answers no process query: no sample saw the run.
            "<uuid> 1 0 failed - exit 3 <age> - clean",
        ],
        "{}",
        out.stdout
    );
    assert_aligned(lines[0], lines[1]);
}

#[test]
fn task_log_follow_ends_when_the_run_ends() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let job = h.submit(&gated_spec(&h, "follow", "echo first", &gate, "echo last"));
    wait_phase(&h, &job, "executing");
    let task = runs(&show(&h, &job))[0]["task"]
        .as_str()
        .unwrap()
        .to_string();
    let mut follow = h.homebased();
    follow
        .args(["task", "log", &task, "--follow"])
        .stdout(std::process::Stdio::piped());
    let child = follow.spawn().unwrap();
    open_gate(&gate);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text, "first\nlast\n");
}

/// Each named column of `row` starts where its header does (for headers whose column names
/// hold spaces, like `RUN / YIELD AGE`).
fn assert_columns(header: &str, row: &str, columns: &[&str]) {
    for column in columns {
        let at = header
            .find(column)
            .unwrap_or_else(|| panic!("no {column} in {header}"));
        let starts_here = row.as_bytes().get(at).is_some_and(|&b| b != b' ')
            && (at == 0 || row.as_bytes()[at - 1] == b' ');
        assert!(starts_here, "{column} at {at} misaligned:\n{header}\n{row}");
    }
}

/// Also masks RFC 3339 times (`2026-12-01T10:34:57.059Z`) as `<time>`.
fn masked_times(line: &str) -> String {
    masked(line)
        .split(' ')
        .map(|w| {
            if w.len() >= 20 && w.ends_with('Z') && w.as_bytes().get(10) == Some(&b'T') {
                "<time>"
            } else {
                w
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The header and the rows of a human table, from its header line on.
fn table_of(stdout: &str, header_starts: &str) -> Vec<String> {
    stdout
        .lines()
        .skip_while(|l| !l.starts_with(header_starts))
        .map(String::from)
        .collect()
}

#[test]
fn resource_list_resource_jobs_and_events_read_at_a_glance_in_aligned_columns() {
    let h = home_with_gpus(1);
    let gate = h.tmp().join("gate");
    let high = gated_spec(&h, "train-7", "", &gate, "").priority("high");
    let thread = high.thread();
    let running = h.submit(&high);
    wait_phase(&h, &running, "executing");
    h.submit(&sh_spec(&h, "eval", "true", &[]).priority("low"));
    h.settle();
    // The fake nvidia-smi answers no process query: the lane's processes are unknown, never
    // shown as none.
    wait_until("the sampler to have tried", || {
        !h.resources()[0]["gpu"]["sample_error"].is_null()
    });

    let list = table_of(&h.cli(&["resource", "list"]).stdout, "ID");
    assert_eq!(
        list.iter().map(|l| masked(l)).collect::<Vec<_>>(),
        [
            "ID NAME DEVICE STATE RUN / YIELD AGE MEM UTIL FOREIGN",
            "<uuid> gpu0 0 executing <uuid> ? ? ?",
        ],
        "{list:#?}"
    );
    let columns = [
        "ID",
        "NAME",
        "DEVICE",
        "STATE",
        "RUN / YIELD AGE",
        "MEM",
        "UTIL",
        "FOREIGN",
    ];
    assert_columns(&list[0], &list[1], &columns);

    let jobs = table_of(&h.cli(&["resource", "jobs"]).stdout, "JOB");
    assert_eq!(
        jobs.iter().map(|l| masked(l)).collect::<Vec<_>>(),
        [
            "JOB PRIORITY POSITION STATE TARGET / NAME REASON",
            "<uuid> high 1 active any / train-7 -",
            "<uuid> low 1 queued any / eval behind gpu0: train-7 (high)",
        ],
        "{jobs:#?}"
    );
    let columns = [
        "JOB",
        "PRIORITY",
        "POSITION",
        "STATE",
        "TARGET / NAME",
        "REASON",
    ];
    assert_columns(&jobs[0], &jobs[1], &columns);
    assert_columns(&jobs[0], &jobs[2], &columns);

    // A job pinned to the lane is named by the lane's name, as everywhere else.
    let pinned =
        h.submit(&sh_spec(&h, "pinned", "true", &[]).set("resource", serde_json::json!("gpu0")));
    h.settle();
    let jobs = h.cli(&["resource", "jobs"]).stdout;
    let row = jobs.lines().find(|l| l.contains("pinned")).unwrap();
    assert!(row.contains("gpu0 / pinned"), "{jobs}");
    let shown = h.cli(&["resource", "job", "show", &pinned]).stdout;
    assert!(shown.contains("target gpu0"), "{shown}");
    assert!(shown.contains("waiting: behind gpu0: "), "{shown}");

    open_gate(&gate);
    wait_job(&h, &running, "succeeded");
    wait_until("the event to reach the inbox", || {
        !h.cli(&["events", "--thread", &thread])
            .stdout
            .contains("no events")
    });
    let events = table_of(&h.cli(&["events", "--thread", &thread]).stdout, "AT");
    assert_eq!(
        events.iter().map(|l| masked_times(l)).collect::<Vec<_>>(),
        [
            "AT EVENT JOB SEQ RUN NAME DETAIL",
            "<time> JOB_SUCCEEDED <uuid> 1 1 (step 0) train-7 exit 0",
        ],
        "{events:#?}"
    );
    assert_aligned(&events[0], &events[1]);
}
