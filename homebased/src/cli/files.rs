//! Commands that read the state home's files directly, so they work with the daemon down:
//! `task log` and `events`.

use super::Printed;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::event::EVENT_LINE_PREFIX;
use homebased_shared::home::Home;
use homebased_shared::ids::{TaskId, ThreadId};
use homebased_shared::rundir::RunDir;
use homebased_shared::tail::read_tail;
use homebased_shared::API_VERSION;
use serde_json::{json, Value};
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

const FOLLOW_POLL: Duration = Duration::from_millis(200);

pub fn task_log(
    home: &Home,
    task: &str,
    tail: Option<usize>,
    follow: bool,
) -> ApiResult<Option<Printed>> {
    let id: TaskId = task.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidQueueInput,
            format!("{task:?} is not a full task UUID"),
        )
        .with_input(json!({ "task": task }))
    })?;
    let dir = RunDir::new(home.task_dir(id));
    if !dir.root().is_dir() {
        return Err(ApiError::new(
            ErrorCode::TaskNotFound,
            format!("no run directory for task {id}"),
        )
        .with_input(json!({ "task": id })));
    }
    let log = dir.output_log();
    let (text, truncated) = match read_tail(&log, tail) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), false),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "cannot read {}: {e}",
                log.display()
            )))
        }
    };
    if !follow {
        let v =
            json!({ "api_version": API_VERSION, "task": id, "log": text, "truncated": truncated });
        let human = text.strip_suffix('\n').unwrap_or(&text).to_string();
        return Ok(Some(Printed {
            json: v,
            ids: vec![id.to_string()],
            human,
        }));
    }
    // Follow: print what exists, then new bytes until the worker is gone and the log is
    // drained.
    let mut out = std::io::stdout();
    let _ = out.write_all(text.as_bytes());
    let mut offset = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    loop {
        let finished = dir.read_cleanup().ok().flatten().is_some();
        if let Ok(mut f) = std::fs::File::open(&log) {
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                let mut buf = Vec::new();
                if let Ok(n) = f.read_to_end(&mut buf) {
                    offset += n as u64;
                    let _ = out.write_all(&buf);
                    let _ = out.flush();
                }
            }
        }
        if finished {
            return Ok(None);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// Reads a thread's inbox: one `HOMEBASED_EVENT {...}` line per event.
pub fn events(home: &Home, args: &super::args::EventsArgs) -> ApiResult<Option<Printed>> {
    let thread: ThreadId = args.thread.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidQueueInput,
            format!("{:?} is not a full thread UUID", args.thread),
        )
        .with_input(json!({ "thread": args.thread }))
    })?;
    let path = home.thread_inbox(thread);
    let after = args.after.unwrap_or(0);
    let read_lines = |from: usize| -> Vec<(usize, String)> {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.to_string()))
            .filter(|(n, _)| *n as u64 > after && *n > from)
            .collect()
    };
    if !args.follow {
        let lines = read_lines(0);
        let events: Vec<Value> = lines
            .iter()
            .filter_map(|(_, l)| l.strip_prefix(EVENT_LINE_PREFIX))
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let human = lines
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n");
        let v = json!({ "api_version": API_VERSION, "thread": thread, "events": events });
        return Ok(Some(Printed {
            json: v,
            ids: vec![],
            human,
        }));
    }
    let mut seen = 0;
    loop {
        for (n, line) in read_lines(seen) {
            seen = n;
            println!("{line}");
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}
