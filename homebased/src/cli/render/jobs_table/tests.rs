use super::*;
use serde_json::{json, Value};

const LANE: &str = "01a23742-e41e-75ef-b111-7576ea62aa2f";
const UNNAMED: &str = "01a23742-e41e-75ef-b111-000000000001";
const TRAIN: &str = "01a23742-e45a-70a2-bdea-e73865d7fe13";
const EVAL: &str = "01a23742-e46c-7581-8eb8-b3304dc3cda8";
const SWEEP: &str = "01a23742-e473-7d61-a237-c171a0980969";
const PAIR: &str = "01a23742-e480-7d61-a237-c171a0980970";
const LAST: &str = "01a23742-e490-7d61-a237-c171a0980971";
const AFTER: &str = "01a23742-e4a0-7d61-a237-c171a0980972";
/// A job no longer listed (it succeeded): a reason citing it names it by its UUID.
const GONE: &str = "01a23742-e400-7d61-a237-c171a0980900";

/// A listing's envelope and records as the table's form writes them: the head and each
/// record on a line of their own.
fn lines(records: &[Value]) -> Vec<u8> {
    let mut out = format!(
        "{{\"api_version\":1,\"machine\":\"01a23742-0000-7000-8000-000000000000\",\
         \"resource_names\":{{\"{LANE}\":\"gpu0\"}},\"jobs\":[\n"
    );
    let records: Vec<String> = records.iter().map(Value::to_string).collect();
    out.push_str(&records.join(",\n"));
    if !records.is_empty() {
        out.push('\n');
    }
    out.push_str("]}");
    out.into_bytes()
}

fn blocked_by_train() -> Value {
    json!({"reason": "resources", "blockers": [{
        "resource": LANE, "job": TRAIN, "task": "01a23742-e45b-70a2-bdea-e73865d7fe13",
        "phase": "executing", "priority": "high"}]})
}

/// A queue of every kind of row: a job without a reason, a reason named once and then "as
/// above", a job on a named lane, one on a pair with a lane not named, a job without a
/// position, a name with a newline and one wider in bytes than in characters.
fn records() -> Vec<Value> {
    vec![
        json!({"id": TRAIN, "name": "train-7", "priority": "high", "position": 1,
               "state": {"state": "active", "resource": LANE}, "target": "any", "gpus": 1,
               "waiting": null}),
        json!({"id": EVAL, "name": "évaluer", "priority": "low", "position": 1,
               "state": {"state": "queued", "resume": false}, "target": "any", "gpus": 1,
               "waiting": blocked_by_train()}),
        json!({"id": SWEEP, "name": "sweep\nb", "priority": "low", "position": 2,
               "state": {"state": "queued", "resume": false}, "target": LANE, "gpus": 1,
               "waiting_as_above": true}),
        json!({"id": PAIR, "name": "pair", "priority": "low", "position": 3,
               "state": {"state": "queued", "resume": false}, "target": [LANE, UNNAMED],
               "gpus": 2, "waiting": {"reason": "ahead", "job": EVAL}}),
        json!({"id": LAST, "name": "held", "priority": "medium", "position": null,
               "state": {"state": "queued", "resume": true}, "target": "any", "gpus": 3,
               "waiting": {"reason": "no_resources"}}),
        json!({"id": AFTER, "name": "after", "priority": "low", "position": 4,
               "state": {"state": "queued", "resume": false}, "target": "any", "gpus": 1,
               "waiting": {"reason": "dependency", "job": GONE, "state": "succeeded"}}),
    ]
}

/// The table of [`records`]: TARGET / NAME is as wide as its widest cell, the pair's (48
/// characters), and "évaluer" is padded by its characters, not its bytes.
fn expected() -> String {
    let row = |job: &str, priority: &str, position: &str, target: &str, reason: &str| {
        format!("{job}  {priority:<8}  {position:<8}  queued  {target:<48}  {reason}")
    };
    [
        format!(
            "{:<36}  PRIORITY  POSITION  STATE   {:<48}  REASON",
            "JOB", "TARGET / NAME"
        ),
        format!(
            "{TRAIN}  high      1         active  {:<48}  -",
            "any / train-7"
        ),
        row(
            EVAL,
            "low",
            "1",
            "any / évaluer",
            "behind gpu0: train-7 (high)",
        ),
        row(
            SWEEP,
            "low",
            "2",
            "gpu0 / sweep\nb",
            "behind gpu0: train-7 (high)",
        ),
        row(
            PAIR,
            "low",
            "3",
            &format!("gpu0,{UNNAMED} / pair"),
            "évaluer goes first",
        ),
        row(
            LAST,
            "medium",
            "-",
            "3 x any / held",
            "no resource it may use",
        ),
        row(
            AFTER,
            "low",
            "4",
            "any / after",
            &format!("after {GONE} (succeeded)"),
        ),
    ]
    .join("\n")
}

fn read(pieces: &mut dyn Iterator<Item = &[u8]>) -> Result<JobsTable, String> {
    let mut table = JobsTable::new();
    for piece in pieces {
        table.feed(piece)?;
    }
    Ok(table)
}

#[test]
fn a_listing_read_as_it_arrives_in_any_pieces_is_the_table_read_whole() {
    let listing = lines(&records());
    let whole = read(&mut std::iter::once(listing.as_slice()))
        .unwrap()
        .finish()
        .unwrap();
    for size in [1, 2, 7, 64, 300] {
        let mut table = read(&mut listing.chunks(size)).unwrap();
        assert_eq!(table.finish().unwrap(), whole, "in pieces of {size} bytes");
    }
    for cut in 0..listing.len() {
        let (a, b) = listing.split_at(cut);
        let mut table = read(&mut [a, b].into_iter()).unwrap();
        assert_eq!(table.finish().unwrap(), whole, "cut at {cut}");
    }
}

#[test]
fn the_table_names_lanes_jobs_and_reasons_and_aligns_its_columns() {
    let mut table = read(&mut std::iter::once(lines(&records()).as_slice())).unwrap();
    let shown = table.finish().unwrap();
    // The job named by a reason is named after every record has been read ("évaluer goes
    // first" names a job listed above it; any job of the listing would do).
    assert_eq!(shown, expected(), "\n{shown}");
    assert_eq!(
        table.ids().collect::<Vec<_>>(),
        [TRAIN, EVAL, SWEEP, PAIR, LAST, AFTER]
    );
}

#[test]
fn a_listing_in_one_piece_without_lines_is_read_whole_into_the_same_table() {
    // The full listing, or a daemon that writes no lines: compact JSON, each reason repeated.
    let mut compact: Value = serde_json::from_slice(&lines(&records())).unwrap();
    let jobs = compact["jobs"].as_array_mut().unwrap();
    jobs[2].as_object_mut().unwrap().remove("waiting_as_above");
    jobs[2]["waiting"] = blocked_by_train();
    for job in jobs.iter_mut() {
        job["step"] = json!(0);
        job["created_at"] = json!("2026-01-01T00:00:00.000Z");
    }
    let bytes = serde_json::to_vec(&compact).unwrap();
    assert!(!bytes.contains(&b'\n'));
    for size in [5, 4096] {
        let mut table = read(&mut bytes.chunks(size)).unwrap();
        assert_eq!(
            table.finish().unwrap(),
            expected(),
            "in pieces of {size} bytes"
        );
    }
}

#[test]
fn an_empty_queue_is_the_header_alone() {
    for listing in [lines(&[]), br#"{"api_version":1,"jobs":[]}"#.to_vec()] {
        let mut table = read(&mut listing.chunks(3)).unwrap();
        assert_eq!(
            table.finish().unwrap(),
            "JOB  PRIORITY  POSITION  STATE  TARGET / NAME  REASON"
        );
    }
}

#[test]
fn a_listing_cut_short_or_garbled_is_an_error_never_a_shorter_table() {
    let listing = lines(&records());
    let text = String::from_utf8(listing.clone()).unwrap();
    // Cut after a whole record, inside one, and before the envelope's end.
    let after_record = text.find(",\n").unwrap() + 2;
    for cut in [after_record, after_record + 10, listing.len() - 1] {
        let table = read(&mut std::iter::once(&listing[..cut]));
        let finished = table.and_then(|mut t| t.finish());
        assert!(finished.is_err(), "cut at {cut}: {finished:?}");
    }
    let garbled = text.replacen(",\n", ",\nx", 1);
    let finished = read(&mut std::iter::once(garbled.as_bytes())).and_then(|mut t| t.finish());
    assert!(finished.is_err(), "{finished:?}");
    let trailing = format!("{text}{{}}");
    let finished = read(&mut std::iter::once(trailing.as_bytes())).and_then(|mut t| t.finish());
    assert!(finished.is_err(), "{finished:?}");
}
