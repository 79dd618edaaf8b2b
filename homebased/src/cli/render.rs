//! Human output: aligned tables and one-line confirmations, for a quick look. Scripts use
//! `--json`.

mod jobs_table;
mod words;

pub use jobs_table::JobsTable;

pub use words::{age, process_result};

use homebased_shared::event::{Event, EventCause, EventKind};
use homebased_shared::ids::{JobId, ResourceId};
use homebased_shared::queue::PhaseKind;
use homebased_shared::rundir::CleanupOutcome;
use homebased_shared::time::{now_ms, rfc3339, Millis};
use homebased_shared::wire::{AttentionFailure, JobTarget, PhaseView, ResourceList, Waiting};
use std::collections::HashMap;

/// Formats rows as columns separated by two spaces, the last column unpadded.
pub fn table<R: AsRef<[S]>, S: AsRef<str>>(header: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows {
        for (i, cell) in row.as_ref().iter().enumerate() {
            widths[i] = widths[i].max(width(cell.as_ref()));
        }
    }
    // Written into one buffer sized for it, cell by cell: no row is copied or formatted
    // twice, and the buffer is not grown and copied along the way.
    let line_bytes: usize = widths.iter().map(|w| w + 2).sum::<usize>() + 1;
    let mut out = String::with_capacity(line_bytes * (rows.len() + 1));
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        if !out.is_empty() {
            out.push('\n');
        }
        let start = out.len();
        let mut cells = cells.enumerate().peekable();
        while let Some((i, cell)) = cells.next() {
            out.push_str(cell);
            if cells.peek().is_some() {
                pad(&mut out, widths[i].saturating_sub(width(cell)) + 2);
            }
        }
        let kept = out[start..].trim_end().len();
        out.truncate(start + kept);
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.as_ref().iter().map(AsRef::as_ref));
    }
    out
}

/// A cell's width in characters; most cells are ASCII, whose width is their length.
fn width(cell: &str) -> usize {
    if cell.is_ascii() {
        cell.len()
    } else {
        cell.chars().count()
    }
}

/// `n` spaces.
fn pad(out: &mut String, mut n: usize) {
    const SPACES: &str = "                                                                ";
    while n > 0 {
        let now = n.min(SPACES.len());
        out.push_str(&SPACES[..now]);
        n -= now;
    }
}

fn since(at: Millis) -> String {
    age(now_ms() - at)
}

pub fn resources(list: &ResourceList) -> String {
    let rows: Vec<Vec<String>> = list
        .resources
        .iter()
        .map(|r| {
            let mut device = r
                .device
                .as_ref()
                .map_or_else(|| "-".to_string(), |d| d.to_string());
            if r.gpu.as_ref().is_some_and(|g| g.changed) {
                device.push_str(" (changed)");
            }
            let (state, run) = match &r.run {
                None => ("idle".to_string(), "-".to_string()),
                Some(run) => {
                    let state = run.phase.kind().as_str().to_string();
                    let detail = match &run.phase {
                        PhaseView::Stopping {
                            cause,
                            requested_at,
                            ..
                        } => format!(
                            "{} / {} ({})",
                            run.task,
                            since(*requested_at),
                            cause.as_str()
                        ),
                        PhaseView::Attention { id, failure } => {
                            format!(
                                "{} attention {id}: {}",
                                run.task,
                                attention_summary(failure)
                            )
                        }
                        _ => run.task.to_string(),
                    };
                    (state, detail)
                }
            };
            vec![
                r.id.to_string(),
                r.name.clone(),
                device,
                state,
                run,
                memory(r),
                utilization(r),
                foreign(r),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "NAME",
            "DEVICE",
            "STATE",
            "RUN / YIELD AGE",
            "MEM",
            "UTIL",
            "FOREIGN",
        ],
        &rows,
    )
}

/// A card's memory as `<used>/<total>GiB` (`-` for a lane without a card, `?` for a value
/// not known: never a guess).
fn memory(r: &homebased_shared::wire::ResourceView) -> String {
    let Some(gpu) = &r.gpu else {
        return "-".into();
    };
    let gib =
        |mib: Option<u64>| mib.map_or_else(|| "?".into(), |m| format!("{:.1}", m as f64 / 1024.0));
    match (gpu.memory_used_mib, gpu.memory_total_mib) {
        (None, None) => "?".into(),
        (used, total) => format!("{}/{}GiB", gib(used), gib(total)),
    }
}

/// A card's utilization as `<n>%` (`-` without a card, `?` when not known).
fn utilization(r: &homebased_shared::wire::ResourceView) -> String {
    match &r.gpu {
        None => "-".into(),
        Some(gpu) => gpu
            .utilization_percent
            .map_or_else(|| "?".into(), |p| format!("{p}%")),
    }
}

/// Processes outside the queue on a lane's card: `-`, `<n> proc <GiB>`, or `?` while the
/// card could not be sampled (unknown is never shown as none).
fn foreign(r: &homebased_shared::wire::ResourceView) -> String {
    let Some(gpu) = &r.gpu else {
        return "-".into();
    };
    let Some(processes) = &gpu.processes else {
        return "?".into();
    };
    let foreign: Vec<_> = processes.iter().filter(|p| p.queue.is_none()).collect();
    if foreign.is_empty() {
        return "-".into();
    }
    let mib: u64 = foreign.iter().filter_map(|p| p.used_memory_mib).sum();
    format!("{} proc {:.1}GiB", foreign.len(), mib as f64 / 1024.0)
}

/// What a person must check before releasing an Attention: the failure's kind with the
/// processes to find, or what it says.
pub fn attention_summary(failure: &AttentionFailure) -> String {
    match failure {
        AttentionFailure::Cleanup(cleanup) => cleanup_summary(&cleanup.outcome),
        AttentionFailure::UnknownLiveRun(run) => format!("{}: {}", failure.result(), run.message),
    }
}

/// A cleanup's outcome: its kind and each remaining process with its kernel start time, so
/// that exact process can be found, or its message.
pub fn cleanup_summary(outcome: &CleanupOutcome) -> String {
    let kind = outcome.name();
    let remaining: Vec<String> = outcome
        .remaining()
        .iter()
        .map(|p| {
            format!(
                "pid {} (start {}, {})",
                p.pid,
                p.start_ticks,
                p.reason.as_str()
            )
        })
        .collect();
    match (remaining.is_empty(), outcome.message()) {
        (false, _) => format!("{kind}: check {}", remaining.join(", ")),
        (true, Some(m)) => format!("{kind}: {m}"),
        (true, None) => kind.to_string(),
    }
}

/// How long a run ran (or has been running): `-` before it started.
fn run_time(started: Option<Millis>, ended: Option<Millis>) -> String {
    started.map_or_else(|| "-".into(), |s| age(ended.unwrap_or_else(now_ms) - s))
}

/// A job's target as a person names it: `any`, the pinned lane's name (its UUID when the
/// name is not known here), or a pinned set's names; a job holding several lanes says how
/// many (`2 x any`, `gpu0,gpu1`).
pub fn target_name(target: &JobTarget, gpus: u32, names: &HashMap<ResourceId, String>) -> String {
    let mut out = String::new();
    write_target_name(&mut out, target, gpus, names);
    out
}

/// [`target_name`], written at the end of `out` (a table of 2,000 rows makes no string for
/// each).
pub fn write_target_name(
    out: &mut String,
    target: &JobTarget,
    gpus: u32,
    names: &HashMap<ResourceId, String>,
) {
    use std::fmt::Write;
    let name = |out: &mut String, id: &ResourceId| match names.get(id) {
        Some(name) => out.push_str(name),
        None => {
            let _ = write!(out, "{id}");
        }
    };
    match target {
        JobTarget::Any if gpus > 1 => {
            let _ = write!(out, "{gpus} x any");
        }
        JobTarget::Any => out.push_str("any"),
        JobTarget::Lane(lane) => name(out, lane),
        JobTarget::Lanes(lanes) => {
            for (i, lane) in lanes.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                name(out, lane);
            }
        }
    }
}

/// A waiting reason in a few words: "behind gpu0: train-7 (high)".
pub fn waiting_reason(
    waiting: &Waiting,
    jobs: &HashMap<JobId, &str>,
    names: &HashMap<ResourceId, String>,
) -> String {
    let resource = |id: &ResourceId| names.get(id).cloned().unwrap_or_else(|| id.to_string());
    let job = |id: &JobId| {
        jobs.get(id)
            .map_or_else(|| id.to_string(), |name| (*name).to_string())
    };
    match waiting {
        Waiting::Resources { blockers } => {
            let each: Vec<String> = blockers
                .iter()
                .map(|b| {
                    let phase = match b.phase {
                        PhaseKind::Executing => String::new(),
                        other => format!(", {}", other.as_str()),
                    };
                    format!(
                        "{}: {} ({}{phase})",
                        resource(&b.resource),
                        job(&b.job),
                        b.priority
                    )
                })
                .collect();
            format!("behind {}", each.join(", "))
        }
        Waiting::Stopping {
            resource: r,
            cause,
            requested_at,
            ..
        } => format!(
            "{} requested {} ago on {}",
            cause.as_str(),
            since(*requested_at),
            resource(r)
        ),
        Waiting::Cleaning { resource: r, .. } => format!("{} cleaning up", resource(r)),
        Waiting::Attention {
            resource: r,
            attention,
        } => format!("{} held: attention {attention}", resource(r)),
        Waiting::Ahead { job: j } => format!("{} goes first", job(j)),
        Waiting::Dependency { job: j, state } => format!("after {} ({})", job(j), state.as_str()),
        Waiting::NoResources => "no resource it may use".into(),
        Waiting::Reserved {
            job: j,
            estimated_start,
            ..
        } => format!(
            "reserved for {}, which starts {}",
            job(j),
            estimate(*estimated_start)
        ),
        Waiting::Gathering {
            resources,
            free,
            estimated_start,
            ..
        } => format!(
            "gathering lanes, {} of {} free, starts {}",
            free.len(),
            resources.len(),
            estimate(*estimated_start)
        ),
        Waiting::StorageUnavailable { since: s } => {
            format!(
                "storage unavailable for {}: run directories cannot be made",
                since(*s)
            )
        }
    }
}

/// When a reservation's lanes are estimated free: "~now", "in ~3m 10s", or "at an unknown
/// time" (a run without a time limit holds one).
fn estimate(at: Option<Millis>) -> String {
    let now = now_ms();
    match at {
        None => "at an unknown time".into(),
        Some(at) if at <= now => "~now".into(),
        Some(at) => format!("in ~{}", age(at - now)),
    }
}

/// The line that says a log was shown in part (SPEC 9: `--tail` keeps at most 5000 lines
/// and reads at most the last 1 MiB): how much was shown, of how much, why, and where the
/// whole `output.log` is. `size`: the log's size when known here; `asked`: `--tail`.
pub fn tail_note(shown: &str, size: Option<u64>, asked: Option<usize>, whole: &str) -> String {
    use homebased_shared::tail::{MAX_TAIL_BYTES, MAX_TAIL_LINES};
    let lines = shown.lines().count();
    let of = size.map_or_else(String::new, |b| format!(" of {}", mebibytes(b)));
    let why = match asked {
        Some(n) if n > MAX_TAIL_LINES => format!("--tail is capped at {MAX_TAIL_LINES} lines"),
        Some(n) if lines >= n => format!("--tail {n}"),
        _ => format!("at most the last {} is read", mebibytes(MAX_TAIL_BYTES)),
    };
    format!("showing the last {lines} lines{of} ({why}); the whole log is {whole}")
}

fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// A machine as `fleet machines` names it: its name, then its UUID; the UUID alone when no
/// name is known here.
pub fn machine_name(
    machine: homebased_shared::ids::MachineId,
    names: &HashMap<homebased_shared::ids::MachineId, String>,
) -> String {
    match names.get(&machine) {
        Some(name) => format!("{name} ({machine})"),
        None => machine.to_string(),
    }
}

/// Where a job is in its steps, counted from 0 as the runs' STEP column and
/// `HOMEBASED_STEP_INDEX` count them: `step 1 (steps 0-2)`; a one-step job `step 0 (one step)`.
pub fn job_progress(step: u32, steps: u32) -> String {
    if steps <= 1 {
        format!("step {step} (one step)")
    } else {
        format!("step {step} (steps 0-{})", steps - 1)
    }
}

/// `names`: machine names by UUID, from `fleet machines` (empty where Fleet is off);
/// `lanes`: lane names by UUID (empty when not read).
/// A job's state, and for an active job the lanes its run holds (`active on gpu1,gpu2`).
fn state_on(
    state: &homebased_shared::wire::JobStateView,
    lanes: &HashMap<ResourceId, String>,
) -> String {
    match state {
        homebased_shared::wire::JobStateView::Active { resources, .. } => format!(
            "active on {}",
            resources
                .iter()
                .map(|id| lanes.get(id).cloned().unwrap_or_else(|| id.to_string()))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.name().to_string(),
    }
}

pub fn job_detail(
    d: &homebased_shared::wire::JobDetail,
    names: &HashMap<homebased_shared::ids::MachineId, String>,
    lanes: &HashMap<ResourceId, String>,
) -> String {
    let j = d;
    let mut out = format!(
        "job {}  {}\nstate {}  priority {}  position {}  {}  target {}\nthread {}",
        j.id,
        j.name,
        state_on(&j.state, lanes),
        j.priority,
        j.position.map_or_else(|| "-".into(), |p| p.to_string()),
        job_progress(j.step, j.steps),
        target_name(&j.target, j.gpus, lanes),
        d.thread,
    );
    out.push_str(&format!("  submitted {} ago", since(j.created_at)));
    if let Some(origin) = d.origin {
        // A remote job (Fleet): its events are delivered on that machine.
        out.push_str(&format!(
            "\nfrom machine {} (its events are delivered there)",
            machine_name(origin, names)
        ));
    }
    // The jobs it names and those naming it, for the waiting reason too.
    let linked: HashMap<JobId, &str> = d
        .dependencies
        .iter()
        .chain(&d.dependents)
        .filter_map(|l| Some((l.job, l.name.as_deref()?)))
        .collect();
    if let Some(waiting) = &d.waiting {
        out.push_str(&format!(
            "\nwaiting: {}",
            waiting_reason(waiting, &linked, lanes)
        ));
    }
    let link = |l: &homebased_shared::wire::JobLink| match (&l.name, l.state) {
        (Some(name), Some(state)) => format!("{} {name} ({})", l.job, state.as_str()),
        _ => format!("{} (removed)", l.job),
    };
    if !d.dependencies.is_empty() {
        let each: Vec<String> = d.dependencies.iter().map(link).collect();
        out.push_str(&format!("\nafter: {}", each.join(", ")));
    }
    if !d.dependents.is_empty() {
        let each: Vec<String> = d.dependents.iter().map(link).collect();
        out.push_str(&format!("\nwaited on by: {}", each.join(", ")));
    }
    if let Some(limit) = d.spec["time_limit"].as_str() {
        out.push_str(&format!(
            "\ntime limit {limit} per run: a run still executing then is stopped and the job \
             fails"
        ));
    }
    if let Some(cause) = d.last_stop_cause {
        out.push_str(&format!("\nlast stop cause {}", cause.as_str()));
    }
    if let homebased_shared::wire::JobStateView::Queued { resume } = d.state {
        out.push_str(if resume {
            "\nresume yes: the next attempt resumes from its checkpoint (HOMEBASED_RESUME=1)"
        } else {
            "\nresume no: the next attempt starts its step afresh (HOMEBASED_RESUME=0)"
        });
    }
    if d.runs.is_empty() {
        out.push_str("\nno runs yet");
    } else {
        let rows: Vec<Vec<String>> = d
            .runs
            .iter()
            .map(|r| {
                let cleanup = r.cleanup.as_ref().map_or("-", |c| c.outcome.name());
                vec![
                    r.task.to_string(),
                    r.run_number.to_string(),
                    r.step.to_string(),
                    r.status.as_str().to_string(),
                    r.stop_cause.map_or("-", |c| c.as_str()).to_string(),
                    r.process
                        .as_ref()
                        .map_or_else(|| "-".into(), process_result),
                    run_time(r.started_at, r.ended_at),
                    r.gpu_memory_peak_mib
                        .map_or_else(|| "-".into(), |m| format!("{:.1}GiB", m as f64 / 1024.0)),
                    cleanup.to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            &[
                "TASK", "RUN", "STEP", "STATUS", "STOP", "PROCESS", "TIME", "GPU-PEAK", "CLEANUP",
            ],
            &rows,
        ));
    }
    for r in &d.runs {
        if let Some(c) = r.cleanup.as_ref().filter(|c| !c.outcome.is_clean()) {
            out.push_str(&format!(
                "\ncleanup of {}: {}",
                r.task,
                cleanup_summary(&c.outcome)
            ));
        }
    }
    for e in d.events.iter().map(|e| &e.answer) {
        out.push_str(&format!(
            "\nevent {} {} {}",
            e.seq,
            e.event.as_str(),
            rfc3339(e.at)
        ));
        if let Some(note) = event_note(e) {
            out.push_str(": ");
            out.push_str(&note);
        }
    }
    out
}

/// What a notice means, in words: the two notices stop nothing, and a reader who sees only
/// their names cannot tell what they ask of them.
fn event_note(e: &Event) -> Option<String> {
    match e.event {
        EventKind::JobCheckDue => {
            let due = e.detail.check_due.as_ref();
            let since = due.map_or_else(|| "?".into(), |d| rfc3339(d.silent_since));
            let timeout = due.map_or("?", |d| d.timeout.as_str());
            Some(format!(
                "no output since {since}, as long as the job's timeout ({timeout}); the run goes \
                 on: check that it still makes progress (task log, its processes)"
            ))
        }
        EventKind::JobFailed if e.detail.detail == Some(EventCause::TimeLimit) => Some(
            "the run was still executing at its start plus the job's time_limit: it was \
             stopped (TERM, grace, KILL) and the job failed"
                .into(),
        ),
        EventKind::JobBlocked => {
            let since = e
                .detail
                .blocked
                .as_ref()
                .map_or_else(|| "?".into(), |b| rfc3339(b.blocked_since));
            Some(format!(
                "first in line and unable to start since {since}; nothing was stopped for it \
                 (see its waiting reason)"
            ))
        }
        _ => None,
    }
}

/// `job show --env`: the stored environment, one `NAME=value` a line.
pub fn environment(env: Option<&std::collections::BTreeMap<String, String>>) -> String {
    match env {
        None => "\nenvironment: none captured (the job runs with the authority daemon's)".into(),
        Some(env) => {
            let mut out = String::from("\nenvironment:");
            for (k, v) in env {
                out.push_str(&format!("\n  {k}={v}"));
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_step_is_counted_from_0_as_its_runs_steps() {
        assert_eq!(job_progress(0, 1), "step 0 (one step)");
        assert_eq!(job_progress(1, 3), "step 1 (steps 0-2)");
    }

    #[test]
    fn a_log_shown_in_part_says_how_much_why_and_where_the_rest_is() {
        let shown = "a\nb\nc\n";
        let note = super::tail_note(shown, Some(50 * 1024 * 1024), None, "/h/tasks/t/output.log");
        assert_eq!(
            note,
            "showing the last 3 lines of 50.0 MiB (at most the last 1.0 MiB is read); the \
             whole log is /h/tasks/t/output.log"
        );
        let capped = super::tail_note(shown, None, Some(9000), "x");
        assert!(
            capped.contains("--tail is capped at 5000 lines"),
            "{capped}"
        );
        let asked = super::tail_note(shown, Some(10), Some(3), "x");
        assert!(asked.contains("(--tail 3)"), "{asked}");
    }

    fn event(event: EventKind, detail: homebased_shared::event::EventDetail) -> Event {
        Event {
            event,
            job: JobId::new(),
            seq: 1,
            at: 1_700_000_000_000,
            thread: homebased_shared::ids::ThreadId::new(),
            name: "train".into(),
            machine: homebased_shared::ids::MachineId::new(),
            resource: None,
            task: None,
            run_number: None,
            step: None,
            detail,
        }
    }

    #[test]
    fn notices_say_what_they_mean_and_other_events_need_no_words() {
        use homebased_shared::event::{BlockedNotice, CheckDueNotice, EventDetail};
        let at =
            |text: &str| homebased_shared::time::to_ms(humantime::parse_rfc3339(text).unwrap());
        let due = event(
            EventKind::JobCheckDue,
            EventDetail {
                check_due: Some(CheckDueNotice {
                    silent_since: at("2026-12-01T10:00:00.000Z"),
                    timeout: "1h".into(),
                }),
                ..EventDetail::default()
            },
        );
        let note = super::event_note(&due).unwrap();
        assert!(
            note.contains("no output since 2026-12-01T10:00:00.000Z")
                && note.contains("(1h)")
                && note.contains("the run goes on"),
            "{note}"
        );
        let blocked = event(
            EventKind::JobBlocked,
            EventDetail {
                blocked: Some(BlockedNotice {
                    episode: uuid::Uuid::nil(),
                    blocked_since: at("2026-12-01T09:00:00.000Z"),
                    blockers: serde_json::json!([]),
                }),
                ..EventDetail::default()
            },
        );
        let note = super::event_note(&blocked).unwrap();
        assert!(note.contains("since 2026-12-01T09:00:00.000Z"), "{note}");
        assert!(note.contains("nothing was stopped"), "{note}");
        let done = event(EventKind::JobSucceeded, EventDetail::default());
        assert_eq!(super::event_note(&done), None);
        let limited = event(
            EventKind::JobFailed,
            EventDetail {
                detail: Some(EventCause::TimeLimit),
                ..EventDetail::default()
            },
        );
        let note = super::event_note(&limited).unwrap();
        assert!(
            note.contains("time_limit") && note.contains("failed"),
            "{note}"
        );
        let failed = event(
            EventKind::JobFailed,
            EventDetail {
                process: Some(homebased_shared::rundir::ExitReason::Exit { code: 1 }),
                ..EventDetail::default()
            },
        );
        assert_eq!(super::event_note(&failed), None);
    }

    #[test]
    fn attention_names_each_pid_to_check() {
        use homebased_shared::rundir::{RemainingProcess, RemainingReason};
        let failure = AttentionFailure::Cleanup(homebased_shared::wire::CleanupResult {
            attempt: 1,
            outcome: CleanupOutcome::UnreadableSuspects {
                remaining: vec![RemainingProcess {
                    pid: 4242,
                    start_ticks: 99,
                    reason: RemainingReason::Suspect,
                }],
            },
        });
        assert_eq!(
            attention_summary(&failure),
            "unreadable_suspects: check pid 4242 (start 99, suspect)"
        );
        let failed = CleanupOutcome::EnumerationFailed {
            message: "no /proc".into(),
        };
        assert_eq!(cleanup_summary(&failed), "enumeration_failed: no /proc");
    }

    #[test]
    fn columns_align_and_last_is_unpadded() {
        let t = table(&["A", "LONGER"], &[vec!["xyz", "1"]]);
        assert_eq!(t, "A    LONGER\nxyz  1");
    }
}
