//! Human `events`: one row per event, the columns a person scans for (when, what, which job
//! and attempt, and the exit or Attention behind it). The raw `HOMEBASED_EVENT` lines stay
//! in the inbox file and, decoded, under `--json`.

use super::render::table;
use serde_json::Value;

pub const HEADER: [&str; 7] = ["AT", "EVENT", "JOB", "SEQ", "RUN", "NAME", "DETAIL"];

/// The cells of one event.
pub fn row(e: &Value) -> Vec<String> {
    let text = |key: &str| e[key].as_str().unwrap_or("-").to_string();
    let run = match (e["run_number"].as_u64(), e["step"].as_u64()) {
        (Some(n), Some(step)) => format!("{n} (step {step})"),
        _ => "-".into(),
    };
    vec![
        text("at"),
        text("event"),
        text("job"),
        e["seq"].to_string(),
        run,
        text("name"),
        detail(e),
    ]
}

/// The exit, the Attention or the blocked notice behind an event, in a few words.
fn detail(e: &Value) -> String {
    if let Some(attention) = e["attention"].as_str() {
        return format!("attention {attention}");
    }
    let p = &e["process"];
    match p["kind"].as_str() {
        Some("exit") => return format!("exit {}", p["code"]),
        Some("signal") => return format!("signal {}", p["signal"]),
        Some("cancelled") => return "stopped".into(),
        Some("spawn_failed") => {
            return format!("spawn failed: {}", p["message"].as_str().unwrap_or(""))
        }
        _ => {}
    }
    match e["blocked"]["blockers"].as_array() {
        Some(blockers) => format!("blocked by {} run(s) or hold(s)", blockers.len()),
        None => "-".into(),
    }
}

/// A table of `events`; `no events` for an empty inbox.
pub fn events(events: &[Value]) -> String {
    if events.is_empty() {
        return "no events".into();
    }
    let rows: Vec<Vec<String>> = events.iter().map(row).collect();
    table(&HEADER, &rows)
}

/// One followed event as a line: the same cells, separated by two spaces (a table cannot be
/// aligned before the rows that come later are known).
pub fn line(e: &Value) -> String {
    row(e).join("  ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_reads_as_a_row_with_its_exit() {
        let e = json!({
            "at": "2026-12-01T10:00:00.000Z", "event": "JOB_FAILED", "job": "j", "seq": 2,
            "run_number": 1, "step": 0, "name": "train", "process": {"kind": "exit", "code": 3},
        });
        assert_eq!(
            row(&e),
            [
                "2026-12-01T10:00:00.000Z",
                "JOB_FAILED",
                "j",
                "2",
                "1 (step 0)",
                "train",
                "exit 3"
            ]
        );
        let notice = json!({"event": "JOB_BLOCKED", "seq": 1, "run_number": null,
            "blocked": {"blockers": [{"kind": "run"}]}});
        assert_eq!(row(&notice)[4], "-");
        assert_eq!(row(&notice)[6], "blocked by 1 run(s) or hold(s)");
        assert_eq!(events(&[]), "no events");
    }
}
