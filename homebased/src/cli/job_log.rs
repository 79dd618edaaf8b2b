//! `resource job log J [--tail N] [--follow]`: every run of a job one after the other, each
//! headed by its task UUID, run number and step, read from the run directories of this
//! machine (the job's authority). With `--follow` it keeps following: through a preemption
//! to the job's next attempt, through one step to the next, until the job has ended and its
//! last run's log is drained.

use super::files::LogStream;
use super::Printed;
use crate::client::Client;
use homebased_shared::error::ApiResult;
use homebased_shared::home::Home;
use homebased_shared::ids::JobId;
use homebased_shared::rundir::RunDir;
use homebased_shared::tail;
use homebased_shared::terminal;
use homebased_shared::wire::{JobDetail, JobStateView, RunView};
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::time::Duration;

const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// The line that heads a run's output.
pub fn header(run: &RunView) -> String {
    format!(
        "==> task {} run {} step {} <==\n",
        run.task, run.run_number, run.step
    )
}

/// What `resource job log` was asked for.
pub struct Asked {
    pub tail: Option<usize>,
    pub follow: bool,
    pub raw: bool,
    /// `--machine`; without it the job's saved authority, else this machine.
    pub machine: Option<String>,
}

pub async fn run(
    client: &Client,
    home: &Home,
    job: &str,
    asked: Asked,
) -> ApiResult<Option<Printed>> {
    let id: JobId = super::parse_job(job)?;
    let first = client.job_show(id, asked.machine.as_deref()).await?;
    // The runs' files live on the job's authority: a job that answered from another machine
    // (`--machine`, or the route of its remote submit) is read through this daemon from there.
    let here = client.status().await?.machine;
    let remote = (Some(first.machine) != here).then(|| first.machine.to_string());
    let Some(authority) = remote else {
        if !asked.follow {
            return once(home, &first, asked.tail, asked.raw).map(Some);
        }
        return follow(client, home, id, &asked, None).await;
    };
    if !asked.follow {
        return once_remote(client, &first, &asked, &authority)
            .await
            .map(Some);
    }
    follow(client, home, id, &asked, Some(&authority)).await
}

/// What reaches stdout; false once the reader went away (a closed pipe).
fn print(text: &str) -> bool {
    let mut out = std::io::stdout();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// Whether a run's log is complete: its cleanup is recorded (nothing of the run is left to
/// write), or it has ended and a later attempt or the job's end follows.
fn run_complete(detail: &JobDetail, done: usize, cleaned: bool) -> bool {
    let ended = job_ended(&detail.state);
    let run = &detail.runs[done];
    cleaned
        || run.cleanup.is_some()
        || run.ended_at.is_some() && (ended || done + 1 < detail.runs.len())
}

/// A run's log on another machine, followed one chunk at a time through this daemon (SPEC
/// 13: run directories live on the authority), rendered as [`LogStream`] renders a local one.
struct RemoteStream {
    task: homebased_shared::ids::TaskId,
    place: (u64, u64),
    lines: Option<terminal::Follower>,
    /// The last chunk came back full: more may be there already.
    behind: bool,
}

impl RemoteStream {
    fn new(task: homebased_shared::ids::TaskId, raw: bool, to_terminal: bool) -> RemoteStream {
        RemoteStream {
            task,
            place: (0, 0),
            lines: (!raw && !to_terminal).then(terminal::Follower::each_redraw_a_line),
            behind: false,
        }
    }

    async fn read_new(&mut self, client: &Client, authority: &str) -> ApiResult<String> {
        let (offset, shift) = self.place;
        let chunk = client
            .task_log_chunk(self.task, offset, shift, Some(authority))
            .await?
            .answer;
        self.behind = chunk.end.saturating_sub(offset) + 4 >= tail::FOLLOW_CHUNK as u64;
        self.place = (chunk.end, chunk.shift);
        Ok(match &mut self.lines {
            Some(follower) => follower.push(chunk.log.as_bytes()),
            None => chunk.log,
        })
    }

    fn finish(&mut self) -> String {
        self.lines
            .as_mut()
            .map(terminal::Follower::finish)
            .unwrap_or_default()
    }
    /// With `--tail N`: reads up to where the log is now and answers only its last `N`
    /// lines (the bytes before them are read, not held); without, nothing yet.
    async fn tail(
        &mut self,
        client: &Client,
        authority: &str,
        lines: Option<usize>,
    ) -> ApiResult<String> {
        let Some(n) = lines else {
            return Ok(String::new());
        };
        let mut last = LastLines {
            n: Some(n.min(tail::MAX_TAIL_LINES)),
            lines: Default::default(),
        };
        loop {
            last.keep(&self.read_new(client, authority).await?);
            if !self.behind {
                return Ok(last.take());
            }
        }
    }
}

/// The last `n` lines of what a stream printed while catching up, kept as they come (a
/// `--tail` of a followed remote log: the bytes before it are read, not held).
struct LastLines {
    n: Option<usize>,
    lines: std::collections::VecDeque<String>,
}

impl LastLines {
    fn keep(&mut self, text: &str) {
        for line in text.split_inclusive('\n') {
            match self.lines.back_mut() {
                Some(last) if !last.ends_with('\n') => last.push_str(line),
                _ => self.lines.push_back(line.to_string()),
            }
            while self.n.is_some_and(|n| self.lines.len() > n.max(1)) {
                self.lines.pop_front();
            }
        }
    }

    fn take(&mut self) -> String {
        let text: String = self.lines.drain(..).collect();
        match self.n {
            Some(0) => String::new(),
            _ => text,
        }
    }
}

/// Where a followed run's log is read: this machine's run directory, or the authority's
/// through this daemon.
enum Stream {
    Local(LogStream),
    Remote(RemoteStream),
}

impl Stream {
    async fn read_new(&mut self, client: &Client, authority: Option<&str>) -> ApiResult<String> {
        match (self, authority) {
            (Stream::Local(s), _) => s.read_new(),
            (Stream::Remote(s), Some(authority)) => s.read_new(client, authority).await,
            (Stream::Remote(_), None) => Ok(String::new()),
        }
    }

    fn behind(&self) -> bool {
        match self {
            Stream::Local(s) => s.behind(),
            Stream::Remote(s) => s.behind,
        }
    }

    fn finish(&mut self) -> String {
        match self {
            Stream::Local(s) => s.finish(),
            Stream::Remote(s) => s.finish(),
        }
    }
}

/// Follows every run of the job in order until the job has ended and its last run's log is
/// drained: through a preemption to the next attempt, through one step to the next.
/// `authority`: the machine whose run directories hold the logs, `None` for this one.
async fn follow(
    client: &Client,
    home: &Home,
    id: JobId,
    asked: &Asked,
    authority: Option<&str>,
) -> ApiResult<Option<Printed>> {
    let to_terminal = std::io::stdout().is_terminal();
    let machine = authority.or(asked.machine.as_deref());
    // Runs whose log was printed to its end, and the stream of the one being followed.
    let mut done = 0;
    let mut current: Option<Stream> = None;
    loop {
        let detail = client.job_show(id, machine).await?;
        let ended = job_ended(&detail.state);
        while let Some(run) = detail.runs.get(done) {
            let dir = RunDir::new(home.task_dir(run.task));
            let stream = match &mut current {
                Some(stream) => stream,
                None => {
                    if !print(&header(run)) {
                        return Ok(None);
                    }
                    let opened = match authority {
                        None => Stream::Local(LogStream::open(
                            &dir.output_log(),
                            asked.tail,
                            asked.raw,
                            to_terminal,
                        )?),
                        Some(authority) => {
                            let mut remote = RemoteStream::new(run.task, asked.raw, to_terminal);
                            if !print(&remote.tail(client, authority, asked.tail).await?) {
                                return Ok(None);
                            }
                            Stream::Remote(remote)
                        }
                    };
                    current.insert(opened)
                }
            };
            let cleaned = authority.is_none() && dir.read_cleanup().ok().flatten().is_some();
            let complete = run_complete(&detail, done, cleaned);
            // What is there now, one chunk at a time: printed before the next is read.
            loop {
                if !print(&stream.read_new(client, authority).await?) {
                    return Ok(None);
                }
                if !stream.behind() {
                    break;
                }
            }
            if !complete {
                break;
            }
            if !print(&stream.finish()) {
                return Ok(None);
            }
            current = None;
            done += 1;
        }
        if ended && done == detail.runs.len() {
            return Ok(None);
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Every run's log on the job's authority as it is now, `tail` lines of each.
async fn once_remote(
    client: &Client,
    detail: &JobDetail,
    asked: &Asked,
    authority: &str,
) -> ApiResult<Printed> {
    let mut logs = Vec::new();
    for run in &detail.runs {
        let read = client
            .task_log(run.task, asked.tail, asked.raw, Some(authority))
            .await?
            .answer;
        logs.push((read.log, read.truncated));
    }
    let notes = detail.runs.iter().map(|run| {
        let whole = format!(
            "tasks/{}/output.log in the home of machine {authority}",
            run.task
        );
        (None, whole)
    });
    Ok(printed(detail, logs, notes.collect(), asked.tail))
}

fn job_ended(state: &JobStateView) -> bool {
    matches!(
        state,
        JobStateView::Succeeded | JobStateView::Failed { .. } | JobStateView::Cancelled
    )
}

/// Every run's log as it is now, carriage returns applied (unless `raw`), `tail` lines of
/// each.
fn once(home: &Home, detail: &JobDetail, lines: Option<usize>, raw: bool) -> ApiResult<Printed> {
    let read = if raw {
        tail::read_tail
    } else {
        tail::read_tail_rendered
    };
    let mut logs = Vec::new();
    for run in &detail.runs {
        let path = RunDir::new(home.task_dir(run.task)).output_log();
        logs.push(read(&path, lines).map_err(|e| tail::unreadable(&path, &e))?);
    }
    let notes = detail.runs.iter().map(|run| {
        let path = RunDir::new(home.task_dir(run.task)).output_log();
        let size = std::fs::symlink_metadata(&path).ok().map(|m| m.len());
        (size, path.display().to_string())
    });
    Ok(printed(detail, logs, notes.collect(), lines))
}

/// The runs' logs, each headed by its run, as JSON and as text; a note for each log shown in
/// part (`wholes`: each run's log size when known, and where the whole log is).
fn printed(
    detail: &JobDetail,
    logs: Vec<(String, bool)>,
    wholes: Vec<(Option<u64>, String)>,
    asked: Option<usize>,
) -> Printed {
    let mut human = String::new();
    let mut runs = Vec::new();
    let mut notes = Vec::new();
    for ((run, (log, truncated)), (size, whole)) in detail.runs.iter().zip(logs).zip(wholes) {
        if truncated {
            let note = super::render::tail_note(&log, size, asked, &whole);
            notes.push(format!(
                "run {} (task {}): {note}",
                run.run_number, run.task
            ));
        }
        human.push_str(&header(run));
        human.push_str(&log);
        if !log.is_empty() && !log.ends_with('\n') {
            human.push('\n');
        }
        runs.push(json!({
            "task": run.task,
            "run_number": run.run_number,
            "step": run.step,
            "status": run.status,
            "log": log,
            "truncated": truncated,
        }));
    }
    let ids = detail.runs.iter().map(|r| r.task.to_string()).collect();
    let v = super::versioned(json!({ "job": detail.id, "runs": runs }));
    let human = human.strip_suffix('\n').unwrap_or(&human).to_string();
    let note = (!notes.is_empty()).then(|| notes.join("\nhomebased: "));
    Printed::new(v, ids, human).with_note(note)
}
