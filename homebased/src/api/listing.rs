//! `GET /v1/jobs` answered by this machine: the listing is written out as it is read, on two
//! blocking threads of its own, from a read snapshot the core hands over
//! ([`Core::job_listing`](crate::core::Core::job_listing)). At 100,000 queued jobs the answer
//! is about 50 MB: built whole on the core thread it held up every submit and pass for the
//! time it took, and the daemon for its size in memory; streamed, the core is busy only for
//! the snapshot and the daemon holds a few chunks at a time.

use super::ErrorResponse;
use crate::core::{CoreHandle, JobListing};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use homebased_shared::error::{ApiError, ApiResult};
use homebased_shared::ids::MachineId;
use homebased_shared::wire::{JobList, JobSummary, Versioned, Waiting};
use hyper::body::Frame;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// How a job's record written without its reason ends.
const WAITING_NULL: &[u8] = b"\"waiting\":null}";

/// How a record of the table's form ends when its reason is the previous record's.
const WAITING_AS_ABOVE: &[u8] = b"\"waiting_as_above\":true}";

/// A chunk of the full listing goes out once it holds this much: `--json` copies the bytes
/// as they come, so fewer, larger writes cost it least.
const CHUNK_BYTES: usize = 1024 * 1024;

/// A chunk of the table's form goes out once it holds this much: the CLI reads its records
/// while the rest is written, so the first ones leave early (2,000 queued are about 360 KB).
const TABLE_CHUNK_BYTES: usize = 32 * 1024;

/// Chunks written but not yet sent: what a slow reader makes the daemon hold.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Jobs read and handed to the writer at a time.
const BATCH_JOBS: usize = 2048;

/// Jobs of the table's form read and handed to the writer at a time: smaller, so that the
/// writer (and the CLI after it) start while the rest is read.
const TABLE_BATCH_JOBS: usize = 256;

/// Batches read but not yet written.
const BATCHES_IN_FLIGHT: usize = 4;

/// Listings written at once; more wait their turn. Each holds two blocking threads, and its
/// reader waits on its writer: were the runtime's blocking pool (512 threads) filled with
/// readers whose writers could not get a thread, none would finish. The bound keeps listings
/// to a quarter of the pool whatever the number of clients; on a few cores more at once would
/// only share the same CPUs.
const LISTINGS_AT_ONCE: usize = 64;
static LISTINGS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(LISTINGS_AT_ONCE);

/// Marks an answer that is streamed but finite and meant to be read whole: the TCP
/// listener's conditional GETs may hash it (dashboard polling), unlike a followed log.
#[derive(Debug, Clone, Copy)]
pub struct WholeAnswer;

/// Which form of the listing is asked for (`GET /v1/jobs?view=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ListingView {
    /// Every field of SPEC section 9 (`resource jobs --json`).
    #[default]
    Full,
    /// Only what the human table shows (`resource jobs`): a person's view costs the daemon
    /// and the CLI less than a script's instead of more.
    Table,
}

impl ListingView {
    fn chunk_bytes(self) -> usize {
        match self {
            ListingView::Full => CHUNK_BYTES,
            ListingView::Table => TABLE_CHUNK_BYTES,
        }
    }

    fn batch_jobs(self) -> usize {
        match self {
            ListingView::Full => BATCH_JOBS,
            ListingView::Table => TABLE_BATCH_JOBS,
        }
    }
}

/// A listed job with only the fields of the human table, in the order of the full record,
/// `waiting` last as there; a job whose reason is the previous job's says
/// `"waiting_as_above":true` instead (`cli::render::JobsTable` reads both). The table's form
/// puts the envelope's head (up to `"jobs":[`) and each record on a line of its own (JSON
/// still: a raw newline is only ever whitespace there), so that the CLI can take each record
/// as it arrives.
#[derive(serde::Serialize)]
struct TableRow<'a> {
    id: &'a homebased_shared::ids::JobId,
    name: &'a str,
    priority: &'a homebased_shared::queue::Priority,
    position: Option<u32>,
    state: &'a homebased_shared::wire::JobStateView,
    target: &'a homebased_shared::wire::JobTarget,
    gpus: u32,
    waiting: Option<&'a Waiting>,
}

pub(super) async fn local_job_list(
    core: &CoreHandle,
    view: ListingView,
) -> Result<Response, ErrorResponse> {
    let turn = LISTINGS
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the listing turns are closed"))?;
    let JobListing {
        machine,
        resource_names,
        heads,
        reasons,
    } = core.job_listing().await?;
    // Two blocking threads, so that the work overlaps: one reads the store's rows, the
    // other works out why each job waits and writes the JSON; the body sends its chunks.
    let (batches, read) = std::sync::mpsc::sync_channel(BATCHES_IN_FLIGHT);
    let (chunks, mut received) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let batch_jobs = view.batch_jobs();
    tokio::task::spawn_blocking(move || {
        read_batches(batch_jobs, |visit| heads.visit(visit), &batches);
    });
    tokio::task::spawn_blocking(move || {
        // The turn ends with the writer; a reader it leaves behind (the client went away)
        // stops at its next batch.
        let _turn = turn;
        write_batches(
            (machine, resource_names, view),
            read,
            |head| reasons.summary(&head),
            |chunk| chunks.blocking_send(chunk).is_ok(),
        );
    });
    // The status goes with the first chunk: a read that fails before anything is sent is
    // answered with its error; one that fails later can only cut the answer short.
    let first = match received.recv().await {
        Some(Ok(first)) => first,
        Some(Err(e)) => return Err(e.into()),
        None => return Err(ApiError::internal("the listing ended before it began").into()),
    };
    let mut response = Response::new(Body::new(Chunks {
        first: Some(first),
        rest: received,
    }));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response.extensions_mut().insert(WholeAnswer);
    Ok(response)
}

/// What the reader hands the writer: jobs in serving order, then, if the read failed part
/// way, why.
enum Batch<T> {
    Jobs(Vec<T>),
    Failed(ApiError),
}

/// Reads the listing through `visit_all` in batches; stops early once the writer is gone.
fn read_batches<T>(
    batch_jobs: usize,
    visit_all: impl FnOnce(&mut dyn FnMut(T) -> bool) -> ApiResult<()>,
    batches: &std::sync::mpsc::SyncSender<Batch<T>>,
) {
    let mut batch = Vec::with_capacity(batch_jobs);
    let mut gone = false;
    let read = visit_all(&mut |job| {
        batch.push(job);
        if batch.len() < batch_jobs {
            return true;
        }
        let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_jobs));
        gone = batches.send(Batch::Jobs(full)).is_err();
        !gone
    });
    if gone {
        return;
    }
    let _ = batches.send(Batch::Jobs(batch));
    if let Err(e) = read {
        let _ = batches.send(Batch::Failed(e));
    }
}

/// Each lane's name by UUID, written at the listing's head.
type Names = std::collections::BTreeMap<homebased_shared::ids::ResourceId, String>;

/// Writes the batches as they come, each job as `summarize` makes it, and hands `send` the
/// bytes in chunks, ending with the envelope's close, or with `Err` if the read failed;
/// stops early when `send` answers `false` (the client went away).
fn write_batches<T>(
    (machine, resource_names, view): (MachineId, Names, ListingView),
    batches: std::sync::mpsc::Receiver<Batch<T>>,
    summarize: impl Fn(T) -> JobSummary,
    mut send: impl FnMut(ApiResult<Bytes>) -> bool,
) {
    let mut out = match ListingWriter::new(machine, resource_names, view) {
        Ok(out) => out,
        Err(e) => {
            send(Err(e));
            return;
        }
    };
    for batch in batches {
        let jobs = match batch {
            Batch::Jobs(jobs) => jobs,
            Batch::Failed(e) => {
                send(Err(e));
                return;
            }
        };
        for job in jobs {
            match out.push(summarize(job)) {
                Ok(None) => {}
                Ok(Some(chunk)) => {
                    if !send(Ok(chunk)) {
                        return;
                    }
                }
                Err(e) => {
                    send(Err(e));
                    return;
                }
            }
        }
    }
    send(out.finish());
}

/// The listing's JSON, one job at a time, cut into chunks of about the view's chunk size
/// ([`CHUNK_BYTES`], [`TABLE_CHUNK_BYTES`]); the full view's bytes are those of
/// `Versioned<JobList>` serialized whole.
struct ListingWriter {
    buf: Vec<u8>,
    view: ListingView,
    /// A chunk goes out once it holds this much (the view's).
    chunk_bytes: usize,
    jobs: usize,
    /// The last job's `waiting` and its JSON. Along a long queue it is the same job after job
    /// (every busy lane as a blocker: 1.3 KB of a 1.8 KB job with 8 lanes), so it is written
    /// once and copied.
    last_waiting: Option<(Option<Waiting>, Vec<u8>)>,
}

impl ListingWriter {
    fn new(
        machine: MachineId,
        resource_names: Names,
        view: ListingView,
    ) -> ApiResult<ListingWriter> {
        // The envelope and its other fields as the typed answer writes them, up to the open
        // `jobs` array: the listing's shape is defined once, by the wire types.
        let empty = serde_json::to_vec(&Versioned::new(JobList {
            machine,
            resource_names,
            jobs: Vec::new(),
        }))
        .map_err(ApiError::internal)?;
        let Some(prefix) = empty.strip_suffix(b"[]}") else {
            return Err(ApiError::internal(
                "the job listing's envelope does not end with its jobs",
            ));
        };
        let chunk_bytes = view.chunk_bytes();
        let mut buf = Vec::with_capacity(chunk_bytes + 4096);
        buf.extend_from_slice(prefix);
        buf.push(b'[');
        if view == ListingView::Table {
            buf.push(b'\n');
        }
        Ok(ListingWriter {
            buf,
            view,
            chunk_bytes,
            jobs: 0,
            last_waiting: None,
        })
    }

    /// Adds a job; a full chunk when one is ready.
    fn push(&mut self, mut job: JobSummary) -> ApiResult<Option<Bytes>> {
        if self.jobs > 0 {
            self.buf.push(b',');
            if self.view == ListingView::Table {
                self.buf.push(b'\n');
            }
        }
        self.jobs += 1;
        // `waiting` is the record's last field: the job is written with `null` there, which
        // is then replaced by the (cached) JSON of its reason.
        let waiting = job.waiting.take();
        let start = self.buf.len();
        match self.view {
            ListingView::Full => serde_json::to_writer(&mut self.buf, &job),
            ListingView::Table => serde_json::to_writer(
                &mut self.buf,
                &TableRow {
                    id: &job.id,
                    name: &job.name,
                    priority: &job.priority,
                    position: job.position,
                    state: &job.state,
                    target: &job.target,
                    gpus: job.gpus,
                    waiting: None,
                },
            ),
        }
        .map_err(ApiError::internal)?;
        if !self.buf[start..].ends_with(WAITING_NULL) {
            return Err(ApiError::internal(
                "a listed job's record does not end with its waiting reason",
            ));
        }
        match &self.last_waiting {
            // The table's form says "as the job above" instead of repeating it: along a long
            // queue that is most of the answer, for the daemon to copy and the CLI to parse.
            Some((last, _))
                if *last == waiting && waiting.is_some() && self.view == ListingView::Table =>
            {
                self.buf.truncate(self.buf.len() - WAITING_NULL.len());
                self.buf.extend_from_slice(WAITING_AS_ABOVE);
                return self.chunk_if_full();
            }
            Some((last, json)) if *last == waiting => {
                self.buf.truncate(self.buf.len() - b"null}".len());
                self.buf.extend_from_slice(json);
            }
            _ => {
                self.buf.truncate(self.buf.len() - b"null}".len());
                let json = serde_json::to_vec(&waiting).map_err(ApiError::internal)?;
                self.buf.extend_from_slice(&json);
                self.last_waiting = Some((waiting, json));
            }
        }
        self.buf.push(b'}');
        self.chunk_if_full()
    }

    /// The buffer as a chunk once it holds the view's chunk size.
    fn chunk_if_full(&mut self) -> ApiResult<Option<Bytes>> {
        if self.buf.len() < self.chunk_bytes {
            return Ok(None);
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(self.chunk_bytes + 4096));
        Ok(Some(Bytes::from(chunk)))
    }

    /// The last chunk, with the end of the envelope (on a line of its own in the table's
    /// form, after its last record).
    fn finish(mut self) -> ApiResult<Bytes> {
        if self.view == ListingView::Table && self.jobs > 0 {
            self.buf.push(b'\n');
        }
        self.buf.extend_from_slice(b"]}");
        Ok(Bytes::from(self.buf))
    }
}

/// The response body: the first chunk (already received, to decide the status), then the
/// rest as the writer sends them; a failed read ends the body with an error, which cuts the
/// connection so that the client never takes a partial listing for a whole one.
struct Chunks {
    first: Option<Bytes>,
    rest: mpsc::Receiver<ApiResult<Bytes>>,
}

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match self.rest.poll_recv(cx) {
            Poll::Ready(Some(Ok(chunk))) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            Poll::Ready(Some(Err(e))) => {
                tracing::error!(error = %e, "the job listing failed part way; its answer is cut");
                Poll::Ready(Some(Err(std::io::Error::other(e.to_string()))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use homebased_shared::ids::JobId;
    use homebased_shared::ids::{ResourceId, TaskId};
    use homebased_shared::queue::Priority;
    use homebased_shared::wire::{JobStateView, WaitingBlocker};

    fn job(n: u32) -> JobSummary {
        JobSummary {
            id: JobId::new(),
            name: format!("job \"{n}\"\n"),
            priority: Priority::Medium,
            position: Some(n),
            state: JobStateView::Queued {
                resume: n.is_multiple_of(2),
            },
            target: homebased_shared::wire::JobTarget::Any,
            gpus: 1,
            step: 0,
            steps: 2,
            runs: n % 3,
            created_at: 1_700_000_000_000 + i64::from(n),
            updated_at: 1_700_000_000_500 + i64::from(n),
            waiting: reason(n),
        }
    }

    /// Runs of equal reasons and changes between them, as along a real queue: none (an
    /// active job), no resources, two different sets of blockers, a job ahead.
    fn reason(n: u32) -> Option<Waiting> {
        static BLOCKERS: std::sync::OnceLock<[Vec<WaitingBlocker>; 2]> = std::sync::OnceLock::new();
        let blockers = BLOCKERS.get_or_init(|| {
            let lanes = |count| {
                (0..count)
                    .map(|_| WaitingBlocker {
                        resource: ResourceId::new(),
                        job: JobId::new(),
                        task: TaskId::new(),
                        phase: homebased_shared::queue::PhaseKind::Executing,
                        priority: Priority::High,
                    })
                    .collect()
            };
            [lanes(8), lanes(3)]
        });
        match (n / 7) % 5 {
            0 => None,
            1 => Some(Waiting::NoResources),
            2 => Some(Waiting::Resources {
                blockers: blockers[0].clone(),
            }),
            3 => Some(Waiting::Resources {
                blockers: blockers[1].clone(),
            }),
            _ => Some(Waiting::Ahead { job: JobId::new() }),
        }
    }

    /// Writes `jobs` as the listing does; the chunks, and their concatenation.
    fn written(machine: MachineId, names: &Names, jobs: &[JobSummary]) -> (Vec<Bytes>, Vec<u8>) {
        written_as(ListingView::Full, machine, names, jobs)
    }

    fn written_as(
        view: ListingView,
        machine: MachineId,
        names: &Names,
        jobs: &[JobSummary],
    ) -> (Vec<Bytes>, Vec<u8>) {
        let mut out = ListingWriter::new(machine, names.clone(), view).unwrap();
        let mut chunks = Vec::new();
        for job in jobs {
            if let Some(chunk) = out.push(job.clone()).unwrap() {
                chunks.push(chunk);
            }
        }
        chunks.push(out.finish().unwrap());
        let whole = chunks.iter().flat_map(|c| c.to_vec()).collect();
        (chunks, whole)
    }

    #[test]
    fn a_read_that_fails_part_way_ends_the_answer_with_its_error_after_what_was_read() {
        let (batches, read) = std::sync::mpsc::sync_channel(8);
        batches
            .send(Batch::Jobs((1..=2_000).map(job).collect()))
            .unwrap();
        batches
            .send(Batch::Failed(ApiError::internal("disk I/O error")))
            .unwrap();
        drop(batches);
        let mut sent = Vec::new();
        write_batches(
            (MachineId::new(), Names::new(), ListingView::Full),
            read,
            |job| job,
            |chunk| {
                sent.push(chunk);
                true
            },
        );
        let (last, before) = sent.split_last().unwrap();
        assert!(!before.is_empty() && before.iter().all(Result::is_ok));
        assert_eq!(last.as_ref().unwrap_err().message, "disk I/O error");
        // Nothing that could pass for the whole listing: the envelope is never closed.
        let bytes: Vec<u8> = before
            .iter()
            .flat_map(|c| c.as_ref().unwrap().to_vec())
            .collect();
        assert!(serde_json::from_slice::<serde_json::Value>(&bytes).is_err());
    }

    #[test]
    fn a_client_that_goes_away_stops_the_writer() {
        let (batches, read) = std::sync::mpsc::sync_channel(8);
        for _ in 0..4 {
            batches
                .send(Batch::Jobs((1..=2_000).map(job).collect()))
                .unwrap();
        }
        drop(batches);
        let mut calls = 0;
        write_batches(
            (MachineId::new(), Names::new(), ListingView::Full),
            read,
            |job| job,
            |_| {
                calls += 1;
                false
            },
        );
        assert_eq!(calls, 1);
    }

    #[test]
    fn the_streamed_listing_is_byte_for_byte_the_typed_answer() {
        let machine = MachineId::new();
        let names: Names = [(homebased_shared::ids::ResourceId::new(), "gpu0".to_string())].into();
        for count in [0, 1, 2, 3_000] {
            let jobs: Vec<JobSummary> = (1..=count).map(job).collect();
            let (chunks, whole) = written(machine, &names, &jobs);
            let typed = serde_json::to_vec(&Versioned::new(JobList {
                machine,
                resource_names: names.clone(),
                jobs: jobs.clone(),
            }))
            .unwrap();
            assert_eq!(
                String::from_utf8(whole).unwrap(),
                String::from_utf8(typed).unwrap(),
                "{count} jobs"
            );
            if count == 3_000 {
                assert!(chunks.len() > 1, "3,000 jobs fill more than one chunk");
                assert!(chunks.iter().all(|c| c.len() < CHUNK_BYTES + 4096));
            }
        }
    }

    #[test]
    fn the_table_view_is_the_full_listing_less_the_fields_the_table_does_not_show_and_each_repeated_reason_said_once(
    ) {
        let machine = MachineId::new();
        let names: Names = [(homebased_shared::ids::ResourceId::new(), "gpu0".to_string())].into();
        let jobs: Vec<JobSummary> = (1..=3_000).map(job).collect();
        let (_, full) = written(machine, &names, &jobs);
        let (_, table) = written_as(ListingView::Table, machine, &names, &jobs);
        assert!(table.len() < full.len());
        let mut expected: serde_json::Value = serde_json::from_slice(&full).unwrap();
        for job in expected["jobs"].as_array_mut().unwrap() {
            let job = job.as_object_mut().unwrap();
            for gone in ["step", "steps", "runs", "created_at", "updated_at"] {
                assert!(job.remove(gone).is_some(), "{gone}");
            }
        }
        let mut table: serde_json::Value = serde_json::from_slice(&table).unwrap();
        let mut above = serde_json::Value::Null;
        let mut shortened = 0;
        for job in table["jobs"].as_array_mut().unwrap() {
            let job = job.as_object_mut().unwrap();
            if job.remove("waiting_as_above") == Some(serde_json::Value::Bool(true)) {
                shortened += 1;
                job.insert("waiting".into(), above.clone());
            }
            above = job["waiting"].clone();
        }
        assert!(shortened > 0, "a repeated reason is said once");
        assert_eq!(table, expected);
    }

    #[test]
    fn the_table_view_is_in_lines_and_small_chunks_which_the_cli_reads_into_the_table_of_the_full_listing(
    ) {
        let machine = MachineId::new();
        let lane = ResourceId::new();
        let names: Names = [(lane, "gpu0".to_string())].into();
        for count in [0, 1, 3_000] {
            let mut jobs: Vec<JobSummary> = (1..=count).map(job).collect();
            if let Some(first) = jobs.first_mut() {
                first.target = homebased_shared::wire::JobTarget::Lane(lane);
            }
            let (chunks, table) = written_as(ListingView::Table, machine, &names, &jobs);
            let (_, full) = written(machine, &names, &jobs);
            // The head, each record and the end on lines of their own.
            let text = String::from_utf8(table).unwrap();
            let lines: Vec<&str> = text.split('\n').collect();
            assert_eq!(lines.len(), count as usize + 2, "{count} jobs");
            assert!(lines[0].ends_with("\"jobs\":["), "{}", lines[0]);
            assert_eq!(lines[lines.len() - 1], "]}");
            if count == 3_000 {
                assert!(chunks.len() > 10, "{} chunks", chunks.len());
                assert!(chunks.iter().all(|c| c.len() < TABLE_CHUNK_BYTES + 4096));
            }
            // Read as it arrives, the table is the one read whole from the full listing.
            let mut streamed = crate::cli::render::JobsTable::new();
            for chunk in &chunks {
                streamed.feed(chunk).unwrap();
            }
            let mut whole = crate::cli::render::JobsTable::new();
            whole.feed(&full).unwrap();
            let shown = streamed.finish().unwrap();
            assert_eq!(shown, whole.finish().unwrap(), "{count} jobs");
            // A row for each job, each name's newline breaking its row in two.
            assert_eq!(shown.lines().count(), 1 + 2 * count as usize);
            if count > 0 {
                assert!(shown.contains(" gpu0 / job "), "{shown}");
            }
        }
    }
}
