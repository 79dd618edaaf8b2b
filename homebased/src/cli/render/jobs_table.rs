//! `resource jobs`' table, read a record at a time while the listing arrives. The table's
//! form of the listing (`GET /v1/jobs?view=table`) puts the envelope's head and each record
//! on a line of its own, so each record is parsed as soon as its line is whole, while the
//! daemon is still writing the rest; only the layout waits for the last one (the column
//! widths need every row). A listing in one piece (a daemon that writes no lines, or the full
//! listing) is read whole at its end instead, into the same rows.

use super::{table, waiting_reason, write_target_name};
use homebased_shared::ids::{JobId, ResourceId};
use homebased_shared::wire::{JobTarget, Waiting};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// How the head of the table's form ends: the `jobs` array opens, its records follow.
const HEAD_END: &[u8] = b"\"jobs\":[";

/// How the table's form ends, after its last record's line.
const TAIL: &[u8] = b"]}";

/// The fields of a listed job that the table shows, borrowed from the bytes being read.
#[derive(serde::Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    priority: Cow<'a, str>,
    position: Option<u32>,
    #[serde(borrow)]
    state: RecordState<'a>,
    target: JobTarget,
    #[serde(default = "one_gpu")]
    gpus: u32,
    #[serde(default, borrow)]
    waiting: Option<&'a serde_json::value::RawValue>,
    /// This job's reason is the previous job's, not repeated (the table's form).
    #[serde(default)]
    waiting_as_above: bool,
}

fn one_gpu() -> u32 {
    1
}

/// A listed job's state as the table shows it: its name only.
#[derive(serde::Deserialize)]
struct RecordState<'a> {
    #[serde(borrow)]
    state: Cow<'a, str>,
}

/// The head of the table's form, closed (`…"jobs":[` + `]}`).
#[derive(serde::Deserialize)]
struct Head {
    #[serde(default)]
    resource_names: BTreeMap<ResourceId, String>,
}

/// A listing read whole.
#[derive(serde::Deserialize)]
struct Whole<'a> {
    #[serde(default)]
    resource_names: BTreeMap<ResourceId, String>,
    #[serde(borrow)]
    jobs: Vec<Record<'a>>,
}

/// Where the reader stands in the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the first line is whole.
    Head,
    /// After a record's separator (or the head): a record or the end comes next.
    Next,
    /// After the last record's line: only the end is left.
    End,
    /// The answer is not in lines: it is read whole at its end.
    Whole,
}

/// A listed job as its row: its cells are consecutive in [`JobsTable::text`].
struct Row {
    /// Where each of the first five cells begins, and where the fifth ends.
    bounds: [usize; 6],
    /// Where the job's name begins, inside the fifth cell (`TARGET / NAME`).
    name: usize,
    /// The index of its reason in [`JobsTable::reasons`]; `None` prints `-`.
    reason: Option<usize>,
}

/// `resource jobs`' table while it is read: [`JobsTable::feed`] each piece of the answer as
/// it arrives, then [`JobsTable::finish`].
pub struct JobsTable {
    stage: Stage,
    /// Bytes not yet taken: a record's line not yet whole, or (read whole) the answer.
    pending: Vec<u8>,
    /// Lane names by UUID, for TARGET and REASON.
    lanes: HashMap<ResourceId, String>,
    /// Every row's cells but the reason, one after another: 2,000 rows are one buffer, not
    /// 10,000 strings.
    text: String,
    rows: Vec<Row>,
    /// Each distinct reason as its JSON, in order: a long queue repeats one reason job after
    /// job, so it is decoded and worded once.
    reasons: Vec<Box<str>>,
    /// The previous record's reason (what `waiting_as_above` means).
    above: Option<usize>,
}

impl Default for JobsTable {
    fn default() -> JobsTable {
        JobsTable::new()
    }
}

impl JobsTable {
    pub fn new() -> JobsTable {
        JobsTable {
            stage: Stage::Head,
            pending: Vec::new(),
            lanes: HashMap::new(),
            text: String::new(),
            rows: Vec::new(),
            reasons: Vec::new(),
            above: None,
        }
    }

    /// Takes the next piece of the answer: every record whose line it completes.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        let seen = self.pending.len();
        self.pending.extend_from_slice(bytes);
        if self.stage == Stage::Head {
            // Only the new bytes are searched: an answer without lines is not scanned again
            // at every piece.
            let Some(end) = bytes.iter().position(|b| *b == b'\n').map(|at| seen + at) else {
                return Ok(());
            };
            if !self.pending[..end].ends_with(HEAD_END) {
                self.stage = Stage::Whole;
                return Ok(());
            }
            let mut head = self.pending[..end].to_vec();
            head.extend_from_slice(TAIL);
            let head: Head = serde_json::from_slice(&head).map_err(|e| e.to_string())?;
            self.lanes = head.resource_names.into_iter().collect();
            self.stage = Stage::Next;
            self.pending.drain(..=end);
        }
        if self.stage == Stage::Whole {
            return Ok(());
        }
        // Every line before the last newline is whole (a record holds no raw newline: JSON
        // escapes one inside a string).
        let Some(last) = self.pending.iter().rposition(|b| *b == b'\n') else {
            return Ok(());
        };
        let pending = std::mem::take(&mut self.pending);
        let taken = self.lines(&pending[..=last]);
        self.pending = pending;
        self.pending.drain(..=last);
        taken
    }

    /// The records of whole lines (`{…},\n` or, the last, `{…}\n`).
    fn lines(&mut self, lines: &[u8]) -> Result<(), String> {
        // Checked as UTF-8 once here, so that no string is checked again as it is parsed.
        let mut lines = std::str::from_utf8(lines).map_err(|e| e.to_string())?;
        while !lines.is_empty() {
            if self.stage != Stage::Next || !lines.starts_with('{') {
                return Err(unexpected(lines.as_bytes()));
            }
            let mut records = serde_json::Deserializer::from_str(lines).into_iter::<Record>();
            let record = match records.next() {
                Some(Ok(record)) => record,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err(unexpected(lines.as_bytes())),
            };
            let end = records.byte_offset();
            self.push(&record);
            lines = &lines[end..];
            if let Some(rest) = lines.strip_prefix(",\n") {
                lines = rest;
            } else if let Some(rest) = lines.strip_prefix('\n') {
                self.stage = Stage::End;
                lines = rest;
            } else {
                return Err(unexpected(lines.as_bytes()));
            }
        }
        Ok(())
    }

    /// A record as its row.
    fn push(&mut self, record: &Record) {
        let at = |text: &String| text.len();
        let mut bounds = [0; 6];
        bounds[0] = at(&self.text);
        self.text.push_str(&record.id);
        bounds[1] = at(&self.text);
        self.text.push_str(&record.priority);
        bounds[2] = at(&self.text);
        match record.position {
            Some(p) => {
                use std::fmt::Write;
                let _ = write!(self.text, "{p}");
            }
            None => self.text.push('-'),
        }
        bounds[3] = at(&self.text);
        self.text.push_str(&record.state.state);
        bounds[4] = at(&self.text);
        write_target_name(&mut self.text, &record.target, record.gpus, &self.lanes);
        self.text.push_str(" / ");
        let name = at(&self.text);
        self.text.push_str(&record.name);
        bounds[5] = at(&self.text);
        if !record.waiting_as_above {
            self.above = record.waiting.map(|raw| {
                let raw = raw.get();
                if self.reasons.last().is_none_or(|seen| **seen != *raw) {
                    self.reasons.push(raw.into());
                }
                self.reasons.len() - 1
            });
        }
        self.rows.push(Row {
            bounds,
            name,
            reason: self.above,
        });
    }

    /// The table, once the whole answer has been fed; an answer cut short or malformed is an
    /// error.
    pub fn finish(&mut self) -> Result<String, String> {
        match self.stage {
            Stage::Head | Stage::Whole => {
                let pending = std::mem::take(&mut self.pending);
                let whole: Whole = serde_json::from_slice(&pending).map_err(|e| e.to_string())?;
                self.lanes = whole.resource_names.into_iter().collect();
                for record in &whole.jobs {
                    self.push(record);
                }
            }
            Stage::End => {
                if self.pending.trim_ascii() != TAIL {
                    return Err(unexpected(&self.pending));
                }
            }
            Stage::Next => {
                if !self.rows.is_empty() || self.pending.trim_ascii() != TAIL {
                    return Err(unexpected(&self.pending));
                }
            }
        }
        Ok(self.render())
    }

    /// The job ids of the rows, in order (`--quiet`), once [`JobsTable::finish`]ed.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.rows.iter().map(|row| self.cell(row, 0))
    }

    fn cell(&self, row: &Row, i: usize) -> &str {
        &self.text[row.bounds[i]..row.bounds[i + 1]]
    }

    fn render(&self) -> String {
        let decoded: Vec<Option<Waiting>> = self
            .reasons
            .iter()
            .map(|raw| serde_json::from_str(raw).ok())
            .collect();
        // The names of the jobs the reasons cite, found in one walk of the rows by their ids'
        // text (as the daemon writes a JobId): no id of the other rows is parsed or hashed
        // into a map.
        let cited: HashMap<String, JobId> = decoded
            .iter()
            .flatten()
            .flat_map(cited_jobs)
            .map(|id| (id.to_string(), id))
            .collect();
        let mut jobs: HashMap<JobId, &str> = HashMap::with_capacity(cited.len());
        if !cited.is_empty() {
            for row in &self.rows {
                if let Some(id) = cited.get(self.cell(row, 0)) {
                    jobs.insert(*id, &self.text[row.name..row.bounds[5]]);
                }
            }
        }
        let worded: Vec<String> = self
            .reasons
            .iter()
            .zip(&decoded)
            .map(|(raw, waiting)| match waiting {
                Some(w) => waiting_reason(w, &jobs, &self.lanes),
                None => raw.to_string(),
            })
            .collect();
        let rows: Vec<[&str; 6]> = self
            .rows
            .iter()
            .map(|row| {
                [
                    self.cell(row, 0),
                    self.cell(row, 1),
                    self.cell(row, 2),
                    self.cell(row, 3),
                    self.cell(row, 4),
                    row.reason.map_or("-", |i| worded[i].as_str()),
                ]
            })
            .collect();
        table(
            &[
                "JOB",
                "PRIORITY",
                "POSITION",
                "STATE",
                "TARGET / NAME",
                "REASON",
            ],
            &rows,
        )
    }
}

/// The jobs a reason names, whose names [`waiting_reason`] words it with.
fn cited_jobs(waiting: &Waiting) -> Vec<JobId> {
    match waiting {
        Waiting::Resources { blockers } | Waiting::Gathering { blockers, .. } => {
            blockers.iter().map(|b| b.job).collect()
        }
        Waiting::Ahead { job }
        | Waiting::Dependency { job, .. }
        | Waiting::Reserved { job, .. } => {
            vec![*job]
        }
        Waiting::Stopping { .. }
        | Waiting::Cleaning { .. }
        | Waiting::Attention { .. }
        | Waiting::NoResources
        | Waiting::StorageUnavailable { .. } => Vec::new(),
    }
}

/// What was found where a record or the end should be, in part.
fn unexpected(bytes: &[u8]) -> String {
    let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]);
    format!("unexpected {shown:?} in the job listing")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
