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

pub async fn run(
    client: &Client,
    home: &Home,
    job: &str,
    tail: Option<usize>,
    follow: bool,
) -> ApiResult<Option<Printed>> {
    let id: JobId = super::parse_job(job)?;
    if !follow {
        let detail = client.job_show(id, None).await?;
        return once(home, &detail, tail).map(Some);
    }
    let mut out = std::io::stdout();
    let to_terminal = out.is_terminal();
    // What reaches stdout; false once the reader went away (a closed pipe).
    let mut print = |text: &str| {
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_ok()
    };
    // Runs whose log was printed to its end, and the stream of the one being followed.
    let mut done = 0;
    let mut current: Option<LogStream> = None;
    loop {
        let detail = client.job_show(id, None).await?;
        let ended = job_ended(&detail.state);
        while let Some(run) = detail.runs.get(done) {
            let dir = RunDir::new(home.task_dir(run.task));
            let stream = match &mut current {
                Some(stream) => stream,
                None => {
                    if !print(&header(run)) {
                        return Ok(None);
                    }
                    current.insert(LogStream::open(
                        &dir.output_log(),
                        tail,
                        false,
                        to_terminal,
                    )?)
                }
            };
            // The log is complete once cleanup is recorded (nothing of the run is left to
            // write), or once the run has ended and a later attempt or the job's end follows.
            let complete = run.cleanup.is_some()
                || dir.read_cleanup().ok().flatten().is_some()
                || run.ended_at.is_some() && (ended || done + 1 < detail.runs.len());
            // What is there now, one chunk at a time: printed before the next is read.
            loop {
                if !print(&stream.read_new()?) {
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

fn job_ended(state: &JobStateView) -> bool {
    matches!(
        state,
        JobStateView::Succeeded | JobStateView::Failed { .. } | JobStateView::Cancelled
    )
}

/// Every run's log as it is now, carriage returns applied, `tail` lines of each.
fn once(home: &Home, detail: &JobDetail, lines: Option<usize>) -> ApiResult<Printed> {
    let mut human = String::new();
    let mut runs = Vec::new();
    for run in &detail.runs {
        let path = RunDir::new(home.task_dir(run.task)).output_log();
        let (log, truncated) =
            tail::read_tail_rendered(&path, lines).map_err(|e| tail::unreadable(&path, &e))?;
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
    Ok(Printed::new(v, ids, human))
}
