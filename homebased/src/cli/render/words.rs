//! Values in words for the human tables: how a process ended, and how long ago.

use homebased_shared::rundir::ExitReason;

/// A run's recorded end as a person reads it: `exit 0`, `signal 9 (KILL)`, `stopped`,
/// `spawn failed: ...`.
pub fn process_result(process: &ExitReason) -> String {
    match process {
        ExitReason::Exit { code } => format!("exit {code}"),
        ExitReason::Signal { signal } => match signal_name(i64::from(*signal)) {
            Some(name) => format!("signal {signal} ({name})"),
            None => format!("signal {signal}"),
        },
        // The worker's stop signal ended it; STOP says why (restart, user_cancel, ...), so
        // PROCESS says only that it was stopped, whatever the cause.
        ExitReason::Cancelled => "stopped".into(),
        ExitReason::SpawnFailed { message } => format!("spawn failed: {message}"),
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

    fn exit(record: serde_json::Value) -> ExitReason {
        serde_json::from_value(record).unwrap()
    }

    #[test]
    fn process_results_read_as_words() {
        assert_eq!(
            process_result(&exit(json!({"kind": "exit", "code": 0}))),
            "exit 0"
        );
        assert_eq!(
            process_result(&exit(json!({"kind": "exit", "code": 75}))),
            "exit 75"
        );
        assert_eq!(
            process_result(&exit(json!({"kind": "signal", "signal": 9}))),
            "signal 9 (KILL)"
        );
        assert_eq!(
            process_result(&exit(json!({"kind": "signal", "signal": 15}))),
            "signal 15 (TERM)"
        );
        assert_eq!(
            process_result(&exit(json!({"kind": "signal", "signal": 200}))),
            "signal 200"
        );
        assert_eq!(
            process_result(&exit(json!({"kind": "cancelled"}))),
            "stopped"
        );
        assert_eq!(
            process_result(&exit(
                json!({"kind": "spawn_failed", "message": "no such file"})
            )),
            "spawn failed: no such file"
        );
    }

    /// A record of a kind this build does not know is refused where it is read (the
    /// store's column, the answer's field), never shown as something else.
    #[test]
    fn unknown_process_records_are_refused_where_they_are_read() {
        let refused = serde_json::from_value::<ExitReason>(json!({"kind": "new_kind", "x": 1}));
        assert!(refused.unwrap_err().to_string().contains("new_kind"));
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
