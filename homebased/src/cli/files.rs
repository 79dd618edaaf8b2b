//! Commands that read the state home's files directly, so they work with the daemon down:
//! `task log` and `events`.

use super::Printed;
use homebased_shared::error::{ApiError, ApiResult, ErrorCode};
use homebased_shared::event::parse_event_line;
use homebased_shared::home::Home;
use homebased_shared::ids::{TaskId, ThreadId};
use homebased_shared::output_cap;
use homebased_shared::rundir::RunDir;
use homebased_shared::tail::{self, read_tail};
use homebased_shared::terminal;
use homebased_shared::wire::TaskLog;
use serde_json::{json, Value};
use std::io::{IsTerminal, Write};
use std::time::Duration;

const FOLLOW_POLL: Duration = Duration::from_millis(200);

pub fn task_log(
    home: &Home,
    task: &str,
    tail: Option<usize>,
    follow: bool,
    raw: bool,
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
    if !follow {
        let read = if raw {
            read_tail
        } else {
            tail::read_tail_rendered
        };
        let (text, truncated) = read(&log, tail).map_err(|e| tail::unreadable(&log, &e))?;
        let human = text.strip_suffix('\n').unwrap_or(&text).to_string();
        let note = truncated.then(|| {
            let size = std::fs::symlink_metadata(&log).ok().map(|m| m.len());
            super::render::tail_note(&text, size, tail, &log.display().to_string())
        });
        let log = TaskLog {
            task: id,
            log: text,
            truncated,
        };
        return Printed::answer(&log, vec![id.to_string()], human).map(|p| Some(p.with_note(note)));
    }
    let mut out = std::io::stdout();
    let mut stream = LogStream::open(&log, tail, raw, out.is_terminal())?;
    // Print what exists, then new bytes until the worker's cleanup is recorded and the log
    // is drained: one chunk at a time, at once again while behind, else after a pause.
    loop {
        let finished = dir.read_cleanup().ok().flatten().is_some();
        let mut text = stream.read_new()?;
        let drained = finished && !stream.behind();
        if drained {
            text.push_str(&stream.finish());
        }
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // The reader went away (a closed pipe): nothing more to show.
            return Ok(None);
        }
        if drained {
            return Ok(None);
        }
        if !stream.behind() {
            std::thread::sleep(FOLLOW_POLL);
        }
    }
}

/// One run's `output.log` followed as it grows: first its tail, then what is appended, one
/// [`tail::FOLLOW_CHUNK`] at a time, so a reader far behind a fast writer holds one chunk,
/// not the distance. Carriage returns are applied line by line unless the bytes are wanted
/// `raw`, or go to a terminal, which applies them itself as the bar is redrawn. The log is
/// opened once, without following it ([`homebased_shared::rundir::open_record`]): a link put
/// in its place later is never read either.
pub(super) struct LogStream {
    path: std::path::PathBuf,
    /// `None` until the log exists (a worker that has not created it yet).
    file: Option<std::fs::File>,
    offset: u64,
    /// `None`: bytes pass as they are.
    lines: Option<terminal::Follower>,
    /// The tail read at open, printed by the first [`LogStream::read_new`].
    pending: String,
    /// Bytes passed as they are: the start of a character whose end is not written yet.
    carry: Vec<u8>,
    /// The run's `output_limit` (from its `run.json`; `None`: unreadable, cuts not followed)
    /// and what cuts had removed when `offset` was last read (SPEC section 5): the worker
    /// cuts the middle of the log in place, and a reader's place moves down with the rest.
    limit: Option<u64>,
    shift: u64,
    /// The one buffer every read goes through.
    chunk: Box<[u8]>,
    /// The last read filled the buffer: more may be there already.
    behind: bool,
}

impl LogStream {
    pub(super) fn open(
        path: &std::path::Path,
        tail: Option<usize>,
        raw: bool,
        to_terminal: bool,
    ) -> ApiResult<LogStream> {
        let file = tail::open_if_written(path).map_err(|e| tail::unreadable(path, &e))?;
        // The run's `output_limit`, from its `run.json`: the worker cuts the middle of the log
        // in place past it, and a reader's place moves down with the rest (SPEC section 5).
        let limit = path
            .parent()
            .and_then(|dir| RunDir::new(dir).read_run().ok())
            .map(|run| run.output_limit);
        let shift = match (&file, limit) {
            (Some(file), Some(limit)) => output_cap::read_shift(file, limit).unwrap_or(0),
            _ => 0,
        };
        let read = match &file {
            Some(file) => tail::tail_of(file, None).map_err(|e| tail::unreadable(path, &e))?,
            None => tail::Tail {
                text: String::new(),
                truncated: false,
                end: 0,
            },
        };
        let text = read.text;
        // The tail is shown up to its last complete line; the line being drawn follows.
        let (complete, partial) = match text.rfind('\n') {
            Some(i) => text.split_at(i + 1),
            None => ("", text.as_str()),
        };
        let shown = if raw {
            complete.to_string()
        } else {
            terminal::render(complete)
        };
        let (mut pending, _) = tail::last_lines(&shown, tail);
        // Into a pipe, each redraw is a line as it comes; a terminal applies them itself.
        let mut lines = (!raw && !to_terminal).then(terminal::Follower::each_redraw_a_line);
        match &mut lines {
            // The line being drawn as it stands now; its earlier redraws are history.
            Some(follower) => {
                pending.push_str(&follower.push(terminal::render(partial).as_bytes()))
            }
            None => pending.push_str(partial),
        }
        Ok(LogStream {
            path: path.to_path_buf(),
            file,
            offset: read.end,
            lines,
            pending,
            carry: Vec::new(),
            limit,
            shift,
            chunk: vec![0; tail::FOLLOW_CHUNK].into_boxed_slice(),
            behind: false,
        })
    }

    /// What is new to print since the last call: at most one chunk of the log.
    pub(super) fn read_new(&mut self) -> ApiResult<String> {
        let mut text = std::mem::take(&mut self.pending);
        if self.file.is_none() {
            self.file =
                tail::open_if_written(&self.path).map_err(|e| tail::unreadable(&self.path, &e))?;
        }
        if self.file.is_none() {
            return Ok(text);
        }
        let n = self
            .read_past_cuts()
            .map_err(|e| tail::unreadable(&self.path, &e))?;
        self.behind = n == self.chunk.len();
        self.offset += n as u64;
        let new = &self.chunk[..n];
        match &mut self.lines {
            Some(follower) => text.push_str(&follower.push(new)),
            None => {
                self.carry.extend_from_slice(new);
                text.push_str(&whole_characters(&mut self.carry));
            }
        }
        Ok(text)
    }

    /// The last [`LogStream::read_new`] filled its chunk: read again before pausing.
    pub(super) fn behind(&self) -> bool {
        self.behind
    }

    /// One chunk after the reader's place into `chunk`, past any cut made since.
    fn read_past_cuts(&mut self) -> std::io::Result<usize> {
        let Some(file) = &self.file else {
            return Ok(0);
        };
        let place = output_cap::Place {
            offset: self.offset,
            shift: self.shift,
        };
        let (n, read_at) = output_cap::read_after(file, self.limit, place, &mut self.chunk)?;
        self.offset = read_at.offset;
        self.shift = read_at.shift;
        Ok(n)
    }

    /// The log ended: the line still being drawn, if any.
    pub(super) fn finish(&mut self) -> String {
        match &mut self.lines {
            Some(follower) => follower.finish(),
            None => String::new(),
        }
    }
}

/// The text of `bytes` up to a character cut at their end, which stays in `bytes` for the
/// next read (a log read as it grows can end in the middle of one).
fn whole_characters(bytes: &mut Vec<u8>) -> String {
    let cut = match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    let rest = bytes.split_off(cut);
    let text = String::from_utf8_lossy(bytes).into_owned();
    *bytes = rest;
    text
}

/// Reads a thread's inbox: one `HOMEBASED_EVENT {...}` line per event, oldest first.
///
/// `--after N` skips the first N lines of the inbox: positions count the inbox's complete
/// lines from 1, so they are a cursor across all of the thread's jobs (a `seq` is only
/// unique within one job). `--json` answers the position of the last line read as
/// `position`, to pass as `--after` next time. `--follow` reads the daemon's store instead
/// (see [`follow`]), so it shows the thread's events whatever the sink.
pub fn events(
    home: &Home,
    args: &super::args::EventsArgs,
    json_output: bool,
) -> ApiResult<Option<Printed>> {
    let thread: ThreadId = args.thread.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidQueueInput,
            format!("{:?} is not a full thread UUID", args.thread),
        )
        .with_input(json!({ "thread": args.thread }))
    })?;
    if args.follow {
        return follow(home, thread, args.after.unwrap_or(0), json_output);
    }
    let mut inbox = Inbox::new(home.thread_inbox(thread), args.after.unwrap_or(0));
    let lines = inbox.read_new()?;
    let events: Vec<Value> = lines.iter().filter_map(|l| parse_event_line(l)).collect();
    let human = super::event_rows::events(&events);
    let v = super::versioned(json!({
        "thread": thread,
        "events": events,
        "position": inbox.position,
    }));
    Ok(Some(Printed::new(v, vec![], human)))
}

/// How long one read of a followed thread is held open by the daemon.
const FOLLOW_WAIT: Duration = Duration::from_secs(25);
/// The pause before asking again after a daemon that did not answer (a restart).
const FOLLOW_RETRY: Duration = Duration::from_secs(1);

/// `events --follow`: the thread's events as the daemon's store records them (long polls of
/// `GET /v1/threads/{thread}/events`), printed as they come (with `--json`, one event object
/// per line) until interrupted, whatever the sink: an `[events] command` leaves no inbox to
/// read. `skip` (`--after N`) leaves out the thread's first N events. A daemon that stops
/// answering (a restart) is waited for, said once on stderr; following resumes at the same
/// cursor, so nothing recorded meanwhile is missed.
fn follow(
    home: &Home,
    thread: ThreadId,
    skip: u64,
    json_output: bool,
) -> ApiResult<Option<Printed>> {
    let client = crate::client::Client::socket(home.socket());
    let mut out = std::io::stdout();
    super::runtime()?.block_on(async {
        let mut cursor: Option<String> = None;
        let mut skip = skip;
        let mut told = false;
        loop {
            let answer = match client
                .thread_events(thread, cursor.as_deref(), FOLLOW_WAIT)
                .await
            {
                Ok(answer) => answer,
                Err(e) if e.retryable => {
                    if !told {
                        super::emit_err(&format!(
                            "homebased: {} ({}); following again once it answers",
                            e.message,
                            e.code.as_str()
                        ));
                        told = true;
                    }
                    tokio::time::sleep(FOLLOW_RETRY).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            told = false;
            for event in &answer.events {
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                // The object an inbox line holds, keys sorted, whichever way it is shown.
                let event = serde_json::to_value(event).map_err(ApiError::internal)?;
                let text = if json_output {
                    event.to_string()
                } else {
                    super::event_rows::line(&event)
                };
                if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
                    // The reader went away (a closed pipe): nothing more to show.
                    return Ok(None);
                }
            }
            cursor = Some(answer.cursor);
        }
    })
}

/// An inbox read incrementally: only complete lines count (a line still being appended,
/// or torn by a crash, is left for later), each with its 1-based position.
struct Inbox {
    path: std::path::PathBuf,
    /// Bytes consumed up to the end of the last complete line.
    offset: u64,
    /// The position of the last complete line consumed.
    position: u64,
    /// Lines at or before this position are skipped (`--after`).
    after: u64,
}

impl Inbox {
    fn new(path: std::path::PathBuf, after: u64) -> Inbox {
        Inbox {
            path,
            offset: 0,
            position: 0,
            after,
        }
    }

    /// The complete lines appended since the last read, past `after`. A missing inbox is
    /// empty: no event was delivered to the thread yet.
    fn read_new(&mut self) -> ApiResult<Vec<String>> {
        let bytes = tail::read_from(&self.path, self.offset).map_err(|e| self.unreadable(e))?;
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(end) = bytes[start..].iter().position(|b| *b == b'\n') {
            let line = &bytes[start..start + end];
            start += end + 1;
            self.position += 1;
            if self.position > self.after {
                lines.push(String::from_utf8_lossy(line).into_owned());
            }
        }
        self.offset += start as u64;
        Ok(lines)
    }

    fn unreadable(&self, e: std::io::Error) -> ApiError {
        ApiError::internal(format!("cannot read {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_followed_log_is_rendered_line_by_line_or_passed_raw_whole_characters_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("output.log");
        std::fs::write(&path, "old 1\nold 2\n 10%").unwrap();
        let mut lines = LogStream::open(&path, Some(1), false, false).unwrap();
        let mut raw = LogStream::open(&path, Some(1), true, false).unwrap();
        assert_eq!(lines.read_new().unwrap(), "old 2\n");
        assert_eq!(raw.read_new().unwrap(), "old 2\n 10%");
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut log, b"\r 90%\r100% \xc3").unwrap();
        // Not to a terminal: each redraw is a line as it comes.
        assert_eq!(lines.read_new().unwrap(), " 10%\n 90%\n");
        assert_eq!(
            raw.read_new().unwrap(),
            "\r 90%\r100% ",
            "a cut character waits"
        );
        std::io::Write::write_all(&mut log, &[0xa9, b'\n']).unwrap();
        assert_eq!(lines.read_new().unwrap(), "100% \u{e9}\n");
        assert_eq!(raw.read_new().unwrap(), "\u{e9}\n");
        assert_eq!(lines.finish(), "");
    }

    #[test]
    fn inbox_positions_count_complete_lines_and_after_skips_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut missing = Inbox::new(dir.path().join("none.jsonl"), 0);
        assert!(missing.read_new().unwrap().is_empty());

        std::fs::write(&path, "one\ntwo\nthr").unwrap();
        let mut all = Inbox::new(path.clone(), 0);
        assert_eq!(all.read_new().unwrap(), vec!["one", "two"]);
        assert_eq!(all.position, 2);
        let mut after = Inbox::new(path.clone(), 1);
        assert_eq!(after.read_new().unwrap(), vec!["two"]);

        // The rest of the line arrives, then another: both show up once, in order.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"ee\nfour\n").unwrap();
        assert_eq!(all.read_new().unwrap(), vec!["three", "four"]);
        assert_eq!(all.position, 4);
        assert!(all.read_new().unwrap().is_empty());
        let mut late = Inbox::new(path, 3);
        assert_eq!(late.read_new().unwrap(), vec!["four"]);
    }
}
