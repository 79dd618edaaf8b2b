//! Values in words for the human tables: how a process ended, and how long ago.

use serde_json::Value;

/// A run's recorded end (`{"kind":"exit","code":0}`, ...) as a person reads it: `exit 0`,
/// `signal 9 (KILL)`, `cancelled`, `spawn failed: ...`. A record of another shape is shown as
/// its JSON, so nothing is hidden.
pub fn process_result(process: &Value) -> String {
    let kind = process.get("kind").and_then(Value::as_str);
    match kind {
        Some("exit") => match process.get("code").and_then(Value::as_i64) {
            Some(code) => format!("exit {code}"),
            None => process.to_string(),
        },
        Some("signal") => match process.get("signal").and_then(Value::as_i64) {
            Some(n) => match signal_name(n) {
                Some(name) => format!("signal {n} ({name})"),
                None => format!("signal {n}"),
            },
            None => process.to_string(),
        },
        // The worker's stop signal ended it; STOP says why (restart, user_cancel, ...), so
        // PROCESS says only that it was stopped, whatever the cause.
        Some("cancelled") => "stopped".into(),
        Some("spawn_failed") => format!(
            "spawn failed: {}",
            process
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
        ),
        _ => process.to_string(),
    }
}

/// `KILL` for 9: the signal's name without `SIG`.
fn signal_name(n: i64) -> Option<&'static str> {
    let n = i32::try_from(n).ok()?;
    let signal = nix::sys::signal::Signal::try_from(n).ok()?;
    Some(signal.as_str().trim_start_matches("SIG"))
}

/// A duration in milliseconds as an age: `45s`, `3m12s`, `2h05m`, `3d04h`. Negative (a
/// clock that stepped back) counts as zero.
pub fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn process_results_read_as_words() {
        assert_eq!(
            process_result(&json!({"kind": "exit", "code": 0})),
            "exit 0"
        );
        assert_eq!(
            process_result(&json!({"kind": "exit", "code": 75})),
            "exit 75"
        );
        assert_eq!(
            process_result(&json!({"kind": "signal", "signal": 9})),
            "signal 9 (KILL)"
        );
        assert_eq!(
            process_result(&json!({"kind": "signal", "signal": 15})),
            "signal 15 (TERM)"
        );
        assert_eq!(
            process_result(&json!({"kind": "signal", "signal": 200})),
            "signal 200"
        );
        assert_eq!(process_result(&json!({"kind": "cancelled"})), "stopped");
        assert_eq!(
            process_result(&json!({"kind": "spawn_failed", "message": "no such file"})),
            "spawn failed: no such file"
        );
    }

    #[test]
    fn unknown_process_records_stay_visible_as_json() {
        assert_eq!(
            process_result(&json!({"kind": "new_kind", "x": 1})),
            r#"{"kind":"new_kind","x":1}"#
        );
    }

    #[test]
    fn ages_use_the_two_largest_units() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(-5_000), "0s");
        assert_eq!(age(45_999), "45s");
        assert_eq!(age(192_000), "3m12s");
        assert_eq!(age(60_000), "1m00s");
        assert_eq!(age(7_500_000), "2h05m");
        assert_eq!(age(3 * 86_400_000 + 4 * 3_600_000), "3d04h");
    }
}
