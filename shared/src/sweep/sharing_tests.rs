//! Scans shared through the exchange: what a snapshot keeps, whom it serves, and the lock
//! and file protocol between the workers of one home. (Every rule of `tests.rs` also runs
//! through snapshots: its `Case::run` compares the two ways.)

use super::exchange::{self, Exchange};
use super::scan::{self, Claim, Rules};
use super::snapshot::{monotonic_ns, Snapshot};
use super::*;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;

const OWN_PID: u32 = 100;
const UID: u32 = 1000;

fn exchange() -> (tempfile::TempDir, Exchange) {
    let dir = tempfile::tempdir().unwrap();
    let exchange = Exchange::at(dir.path().join("sweep"), test_key()).unwrap();
    (dir, exchange)
}

/// The exchange's lock, held as another worker holds it while it reads the table.
fn hold_the_lock(home: &std::path::Path) -> Flock<File> {
    let lock = crate::rundir::open_lock_file(&home.join("sweep/lock")).unwrap();
    Flock::lock(lock, FlockArg::LockExclusive).unwrap()
}

fn rules<'a>(marker: &'a Marker, since: Option<u64>) -> Rules<'a> {
    Rules {
        marker,
        since,
        uid: UID,
        own_pid: OWN_PID,
        protected: &[],
        lineage: None,
    }
}

/// A full reading of `table` (no base) by a taker that looks at processes started at or
/// after `since`, begun now.
fn read_now(table: &FakeTable, scope: &str, since: Option<u64>) -> std::io::Result<Snapshot> {
    Snapshot::take(table, scope, since, (None, None), monotonic_ns().unwrap())
}

/// One scan of a sweeper that looks at processes started at or after `since`, answered by
/// `snapshot`.
fn judge(
    snapshot: &Snapshot,
    table: &FakeTable,
    marker: &Marker,
    since: Option<u64>,
) -> scan::Scan {
    let rules = rules(marker, since);
    scan::scan(
        table,
        &mut snapshot.readings(table, (since, since)),
        &rules,
        &HashSet::new(),
    )
    .unwrap()
}

#[test]
fn a_marker_value_matches_only_the_task_it_names() {
    let task = TaskId::new();
    let marker = Marker::for_task(task);
    assert!(marker.has_value(task.to_string().as_bytes()));
    assert!(!marker.has_value(TaskId::new().to_string().as_bytes()));
    assert!(!marker.has_value(format!("{task}x").as_bytes()));
    assert!(!marker.has_value(b""));
}

#[test]
fn a_snapshot_with_a_later_start_leaves_the_older_processes_to_the_scan_that_needs_them() {
    let task = TaskId::new();
    let table = FakeTable::new(OWN_PID, UID);
    // Started after the consumer's workload (5000) but before the taker's (5500).
    table.insert(200, FakeProcess::marked(5200, UID, task));
    table.insert(300, FakeProcess::marked(5600, UID, task));
    table.insert(400, FakeProcess::new(5700, UID).unreadable());
    let snapshot = read_now(&table, "scope", Some(5500)).unwrap();
    let marker = Marker::for_task(task);
    let found = judge(&snapshot, &table, &marker, Some(5000));
    let targets: Vec<u32> = found.targets.iter().map(|t| t.identity.pid).collect();
    assert_eq!(
        targets,
        vec![200, 300],
        "200 was read by the consumer itself"
    );
    assert!(found.targets.iter().all(|t| t.claim == Claim::Marked));
    assert_eq!(found.suspects.len(), 1, "the owner of 400 was kept for it");
    assert!(found.settled);
    // The taker's own judgement of the same snapshot stops at its start.
    let own = judge(&snapshot, &table, &marker, Some(5500));
    assert_eq!(own.targets.len(), 1);
}

#[test]
fn a_process_the_consumer_reads_itself_is_read_through_one_handle() {
    let task = TaskId::new();
    let marker = Marker::for_task(task);
    for pinned in [false, true] {
        let table = FakeTable::new(OWN_PID, UID);
        if pinned {
            table.pin_reads();
        }
        // Older than the taker's start (5500), so the consumer (5000) reads it itself.
        table.insert(200, FakeProcess::new(5200, UID));
        let snapshot = read_now(&table, "scope", Some(5500)).unwrap();
        // Reaped after the consumer read its environment, and its pid is a marked process's.
        table.on(
            FakeTrigger::EnvironRead(200),
            vec![FakeEvent::Spawn(200, FakeProcess::marked(5300, UID, task))],
        );
        let found = judge(&snapshot, &table, &marker, Some(5000));
        assert!(
            found.targets.is_empty(),
            "what was read was 200's first process"
        );
        assert_eq!(
            found.settled, pinned,
            "unpinned, the second read names another process; pinned, the first one ended"
        );
    }
    // Ended before the consumer could read it at all: nothing of it was misread.
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::marked(5200, UID, task));
    let snapshot = read_now(&table, "scope", Some(5500)).unwrap();
    table.remove(200);
    let found = judge(&snapshot, &table, &marker, Some(5000));
    assert!(found.targets.is_empty() && found.settled);
}

#[test]
fn a_snapshot_serves_only_scans_asked_for_before_it_began_in_its_scope_and_user() {
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::new(6000, UID));
    let asked = monotonic_ns().unwrap();
    let snapshot = read_now(&table, "boot/ns", Some(5000)).unwrap();
    assert!(snapshot.serves("boot/ns", UID, Some(5000), asked));
    assert!(
        snapshot.serves("boot/ns", UID, None, asked),
        "a scan of every process reads the older ones itself"
    );
    assert!(!snapshot.serves("boot/ns", UID, Some(5000), monotonic_ns().unwrap()));
    assert!(!snapshot.serves("other/ns", UID, Some(5000), asked));
    assert!(!snapshot.serves("boot/ns", UID + 1, Some(5000), asked));
}

#[test]
fn a_process_with_more_markers_than_kept_keeps_the_snapshot_from_scans_that_read_it() {
    let mut environ = Vec::new();
    for _ in 0..9 {
        environ.extend_from_slice(format!("{}={}\0", Marker::NAME, TaskId::new()).as_bytes());
    }
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::new(6000, UID).with_environ(&environ));
    let asked = monotonic_ns().unwrap();
    let snapshot = read_now(&table, "s", Some(5000)).unwrap();
    assert!(!snapshot.serves("s", UID, Some(5000), asked));
    assert!(
        snapshot.serves("s", UID, Some(7000), asked),
        "a scan that looks only at younger processes is not concerned"
    );
    // Values that are no task id are nobody's marker and are not kept.
    let junk = format!("{0}=x\0{0}=\0{0}={1}y\0", Marker::NAME, TaskId::new()).repeat(5);
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(
        200,
        FakeProcess::new(6000, UID).with_environ(junk.as_bytes()),
    );
    let snapshot = read_now(&table, "s", Some(5000)).unwrap();
    assert!(snapshot.serves("s", UID, Some(5000), asked));
}

#[test]
fn a_published_snapshot_is_used_by_a_scan_asked_before_it_began_and_not_after() {
    let (_dir, exchange) = exchange();
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::new(6000, UID));
    let asked = monotonic_ns().unwrap();
    let patience = Duration::from_secs(1);
    let first = exchange
        .snapshot_after(&table, (Some(5000), Some(5000)), asked, patience)
        .unwrap();
    assert!(first.taken);
    let again = exchange
        .snapshot_after(&table, (Some(5000), Some(5000)), asked, patience)
        .unwrap();
    assert!(
        !again.taken,
        "a scan asked for before the last reading began gets it"
    );
    assert_eq!(again.snapshot, first.snapshot);
    let later = exchange
        .snapshot_after(
            &table,
            (Some(5000), Some(5000)),
            monotonic_ns().unwrap(),
            patience,
        )
        .unwrap();
    assert!(later.taken, "a scan asked for after it needs a new reading");
}

#[test]
fn a_damaged_or_planted_snapshot_is_read_again_from_the_table() {
    let (dir, exchange) = exchange();
    let table = FakeTable::new(OWN_PID, UID);
    let latest = dir.path().join("sweep/latest");
    std::fs::write(&latest, b"{\"version\": 1, \"processes\": [").unwrap();
    let asked = monotonic_ns().unwrap();
    let had = exchange
        .snapshot_after(
            &table,
            (Some(5000), Some(5000)),
            asked,
            Duration::from_secs(1),
        )
        .unwrap();
    assert!(had.taken);
    // A link in its place is not followed.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::rename(&latest, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &latest).unwrap();
    let had = exchange
        .snapshot_after(
            &table,
            (Some(5000), Some(5000)),
            asked,
            Duration::from_secs(1),
        )
        .unwrap();
    assert!(had.taken, "the snapshot behind a link was not used");
}

#[test]
fn a_held_exchange_leaves_the_sweep_to_go_on_alone_and_say_so() {
    let (dir, exchange) = exchange();
    let _held = hold_the_lock(dir.path());
    let task = TaskId::new();
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::marked(6000, UID, task));
    let refused = exchange.snapshot_after(
        &table,
        (Some(5000), Some(5000)),
        monotonic_ns().unwrap(),
        Duration::ZERO,
    );
    assert!(
        matches!(&refused, Err(exchange::Unshared::Exchange(e)) if e.kind() == std::io::ErrorKind::TimedOut),
        "{refused:?}"
    );
    let sweep = Sweep {
        task,
        workload_start: Some(5000),
        config: CleanupConfig::default(),
        protected: Vec::new(),
        lineage: None,
    };
    let swept = sweep.run_sharing(&table, &mut FakeClock::new(), &exchange);
    assert_eq!(swept.outcome, CleanupOutcome::Clean);
    assert_eq!(swept.signalled.len(), 1);
    assert_eq!(swept.shared, 0);
    assert!(
        swept
            .notes
            .iter()
            .any(|n| n.contains("no longer shared") && n.contains("held for over")),
        "{:?}",
        swept.notes
    );
    assert!(
        swept.scans >= 3,
        "scanned alone after the refusal: {}",
        swept.scans
    );
}

#[test]
fn an_exchange_is_refused_in_a_folder_that_is_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("sweep");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert!(Exchange::at(link, test_key()).is_err());
}

#[test]
fn a_waiting_scan_is_served_by_a_reading_published_while_another_worker_holds_the_lock() {
    let (dir, exchange) = exchange();
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::new(6000, UID));
    let _held = hold_the_lock(dir.path());
    let asked = monotonic_ns().unwrap();
    std::thread::scope(|threads| {
        let waiter = threads.spawn(|| {
            exchange.snapshot_after(
                &table,
                (Some(5000), Some(5000)),
                asked,
                Duration::from_secs(5),
            )
        });
        // Another worker reads the table and publishes, and is slow to let the lock go.
        std::thread::sleep(Duration::from_millis(50));
        let published = read_now(&table, exchange.scope(), Some(5000)).unwrap();
        exchange.publish(&published).unwrap();
        let had = waiter.join().unwrap().unwrap();
        assert!(!had.taken, "the waiter read the table itself");
        assert_eq!(had.snapshot, published);
    });
}

/// The exchange's answer to a scan of a sweeper whose workload started at 5000, asked now.
fn asked_now(exchange: &Exchange, table: &FakeTable) -> exchange::Had {
    exchange
        .snapshot_after(
            table,
            (Some(5000), Some(5000)),
            monotonic_ns().unwrap(),
            Duration::from_secs(1),
        )
        .unwrap()
}

/// A snapshot as a workload would write it to hide `hidden` (started at 6000): the real
/// reading of the table except that `hidden` reads as unmarked, far in the future, with
/// whatever MAC it can make without the key.
fn forged_latest(exchange: &Exchange, table: &FakeTable, hidden: u32, mac: &str) -> Vec<u8> {
    let copy = table.duplicate();
    copy.remove(hidden);
    copy.insert(hidden, FakeProcess::new(6000, UID));
    let mut snapshot = Snapshot::take(
        &copy,
        exchange.scope(),
        Some(5000),
        (None, None),
        u64::MAX - 1,
    )
    .unwrap();
    snapshot.began_ns = u64::MAX - 1;
    let mut bytes = format!("{} {mac}\n", u64::MAX - 1).into_bytes();
    bytes.extend(snapshot.encode().unwrap());
    bytes
}

#[test]
fn a_snapshot_without_the_daemons_mac_is_not_used_and_the_hidden_process_is_found() {
    let (dir, exchange) = exchange();
    let task = TaskId::new();
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::marked(6000, UID, task));
    table.insert(201, FakeProcess::new(6001, UID));
    let latest = dir.path().join("sweep/latest");
    let other_key = SweepKey::from_bytes([1; super::key::KEY_LEN]);
    for mac in [
        "".to_string(),
        "0".repeat(64),
        // Signed, but under another key (another daemon's, or one the workload made up).
        other_key.sign(&[(u64::MAX - 1).to_string().as_bytes(), b"\n", b"{}"]),
    ] {
        std::fs::write(&latest, forged_latest(&exchange, &table, 200, &mac)).unwrap();
        let had = asked_now(&exchange, &table);
        assert!(had.taken, "a forged snapshot was taken in (mac {mac:?})");
        let marker = Marker::for_task(task);
        let found = judge(&had.snapshot, &table, &marker, Some(5000));
        assert_eq!(found.targets.len(), 1, "the hidden process is found");
    }
    // A genuine snapshot whose body was cut or changed after signing is refused too.
    let asked = monotonic_ns().unwrap();
    let genuine = Snapshot::take(
        &table,
        exchange.scope(),
        Some(5000),
        (None, None),
        asked + 1,
    )
    .unwrap();
    exchange.publish(&genuine).unwrap();
    let signed = std::fs::read(&latest).unwrap();
    assert!(
        !exchange
            .snapshot_after(
                &table,
                (Some(5000), Some(5000)),
                asked,
                Duration::from_secs(1)
            )
            .unwrap()
            .taken
    );
    std::fs::write(&latest, &signed[..signed.len() - 10]).unwrap();
    assert!(
        exchange
            .snapshot_after(
                &table,
                (Some(5000), Some(5000)),
                asked,
                Duration::from_secs(1)
            )
            .unwrap()
            .taken
    );
}

#[test]
fn a_fifo_planted_where_the_exchange_writes_or_locks_holds_nothing_up() {
    let (dir, exchange) = exchange();
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(200, FakeProcess::new(6000, UID));
    let sweep_dir = dir.path().join("sweep");
    for name in ["latest", &format!("latest.{}.new", std::process::id())] {
        nix::unistd::mkfifo(&sweep_dir.join(name), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    let had = asked_now(&exchange, &table);
    assert!(had.taken);
    // Published in spite of the FIFO under its staging name.
    assert!(std::fs::symlink_metadata(sweep_dir.join("latest"))
        .unwrap()
        .is_file());
    std::fs::remove_file(sweep_dir.join("lock")).unwrap();
    nix::unistd::mkfifo(&sweep_dir.join("lock"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let refused = exchange.snapshot_after(
        &table,
        (Some(5000), Some(5000)),
        monotonic_ns().unwrap(),
        Duration::ZERO,
    );
    assert!(
        matches!(&refused, Err(exchange::Unshared::Exchange(_))),
        "{refused:?}"
    );
}

/// A sweeper whose worker (the lineage root) started at 4000 and its workload at 5000.
const ROOT: ProcessIdentity = ProcessIdentity {
    pid: OWN_PID,
    start_ticks: 4000,
};

fn lineage_rules(marker: &Marker) -> Rules<'_> {
    Rules {
        lineage: Some(ROOT),
        ..rules(marker, Some(5000))
    }
}

/// The table a burst of sweeps reads: processes older than every sweeper (the machine's,
/// another run's long job), and the young ones of this run and others.
fn burst_table(task: TaskId) -> FakeTable {
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(OWN_PID, FakeProcess::new(ROOT.start_ticks, UID));
    for pid in 200..210 {
        table.insert(pid, FakeProcess::new(1000 + u64::from(pid), UID));
    }
    // An old zombie, and another user's old process.
    table.insert(210, FakeProcess::new(1500, UID).zombie());
    table.insert(211, FakeProcess::new(1600, UID + 1).unreadable());
    // The run's: marked, and a child of the root that cleared its environment.
    table.insert(300, FakeProcess::marked(6000, UID, task));
    table.insert(301, FakeProcess::new(6100, UID).child_of(OWN_PID));
    // Another run's, below an old process, and an orphan of an old zombie.
    table.insert(
        302,
        FakeProcess::marked(6200, UID, TaskId::new()).child_of(205),
    );
    table.insert(303, FakeProcess::new(6300, UID).child_of(210));
    table
}

fn scan_with(table: &FakeTable, readings: &mut impl scan::Readings, marker: &Marker) -> scan::Scan {
    scan::scan(table, readings, &lineage_rules(marker), &HashSet::new()).unwrap()
}

#[test]
fn a_reading_based_on_the_last_takes_its_old_processes_over_unread_and_decides_the_same() {
    let task = TaskId::new();
    let marker = Marker::for_task(task);
    let table = burst_table(task);
    let horizon = lineage_rules(&marker).horizon();
    assert_eq!(horizon, Some(4000), "the root started before the workload");
    let base = Snapshot::take(&table, "s", Some(5000), (horizon, None), 1).unwrap();
    assert_eq!(base.floor, None, "nothing to take over without a base");
    // Since then: a fork of the run, and one of the old processes re-parented.
    table.insert(304, FakeProcess::marked(6400, UID, task).child_of(301));
    table.on(
        FakeTrigger::Listing(2),
        vec![FakeEvent::Reparent {
            pid: 203,
            ppid: 207,
        }],
    );
    let next = Snapshot::take(&table, "s", Some(5000), (horizon, Some(&base)), 2).unwrap();
    assert_eq!(next.floor, Some(4000));
    for old in 200..212 {
        assert_eq!(table.reads_of(old), 1, "{old} was read once, by the base");
    }
    for young in [OWN_PID, 300, 301, 302, 303] {
        assert_eq!(table.reads_of(young), 2, "{young} is read by every reading");
    }
    assert_eq!(table.reads_of(304), 1);
    let shared = scan_with(
        &table,
        &mut next.readings(&table, (Some(5000), horizon)),
        &marker,
    );
    assert_eq!(table.reads_of(205), 1, "nor read by the scan");
    let live = scan_with(&table, &mut scan::Live::new(&table, Some(5000)), &marker);
    assert_eq!(shared, live);
    let mut targets: Vec<(u32, Claim)> = live
        .targets
        .iter()
        .map(|t| (t.identity.pid, t.claim))
        .collect();
    targets.sort_by_key(|t| t.0);
    assert_eq!(
        targets,
        vec![
            (300, Claim::Marked),
            (301, Claim::Descendant),
            (304, Claim::Marked)
        ]
    );
    assert!(
        live.settled,
        "the orphan of the old zombie is not the run's: {live:?}"
    );
}

#[test]
fn a_sweeper_older_than_the_floor_reads_what_was_taken_over_inside_its_horizon_itself() {
    let task = TaskId::new();
    // Another run's sweeper: the marked 300 and 304 are not its.
    let marker = Marker::for_task(TaskId::new());
    let table = burst_table(task);
    // An older sweeper's worker (its root, started at 3000, before the taker's horizon of
    // 4000), its child 219 and grandchild 220, and 220's child 221, born during its run.
    let older = ProcessIdentity {
        pid: 110,
        start_ticks: 3000,
    };
    table.insert(110, FakeProcess::new(3000, UID));
    table.insert(219, FakeProcess::new(3400, UID).child_of(110));
    table.insert(220, FakeProcess::new(3500, UID).child_of(219));
    table.insert(221, FakeProcess::new(6600, UID).child_of(220));
    let base = Snapshot::take(&table, "s", Some(5000), (Some(4000), None), 1).unwrap();
    // Then 219 ends, and 220 goes to the root, a subreaper: the base's link is out of date.
    table.on(
        FakeTrigger::Listing(2),
        vec![
            FakeEvent::Exit(219),
            FakeEvent::Reparent {
                pid: 220,
                ppid: 110,
            },
        ],
    );
    let next = Snapshot::take(&table, "s", Some(5000), (Some(4000), Some(&base)), 2).unwrap();
    assert_eq!((next.floor, table.reads_of(220)), (Some(4000), 1));
    let rules = Rules {
        lineage: Some(older),
        ..rules(&marker, Some(3100))
    };
    let shared = scan::scan(
        &table,
        &mut next.readings(&table, (rules.since, rules.horizon())),
        &rules,
        &HashSet::new(),
    )
    .unwrap();
    assert_eq!(
        table.reads_of(205),
        1,
        "older than its horizon too: not read"
    );
    let live = scan::scan(
        &table,
        &mut scan::Live::new(&table, rules.since),
        &rules,
        &HashSet::new(),
    )
    .unwrap();
    assert_eq!(shared, live);
    let found: Vec<u32> = shared.targets.iter().map(|t| t.identity.pid).collect();
    assert_eq!(found, vec![220, 221], "both by ancestry, as they are now");
    assert!(shared.settled);
}

#[test]
fn an_old_processs_pid_handed_out_again_is_read_again_and_the_newcomer_found() {
    let task = TaskId::new();
    let marker = Marker::for_task(task);
    let table = burst_table(task);
    let base = Snapshot::take(&table, "s", Some(5000), (Some(4000), None), 1).unwrap();
    // The old 202 ends and a process of the run gets its pid, below the cursor: the
    // allocator went round.
    table.remove(202);
    table.insert(202, FakeProcess::marked(6500, UID, task));
    let next = Snapshot::take(&table, "s", Some(5000), (Some(4000), Some(&base)), 2).unwrap();
    assert_eq!(
        table.reads_of(202),
        2,
        "202's pid was handed out since the base"
    );
    assert_eq!(
        table.reads_of(205),
        1,
        "above 202, below the base's cursor: not since"
    );
    assert_eq!(
        table.reads_of(200),
        2,
        "at or below the new cursor: maybe handed out"
    );
    let found = scan_with(
        &table,
        &mut next.readings(&table, (Some(5000), Some(4000))),
        &marker,
    );
    assert!(found.targets.iter().any(|t| t.identity
        == ProcessIdentity {
            pid: 202,
            start_ticks: 6500
        }));
    assert_eq!(
        found,
        scan_with(&table, &mut scan::Live::new(&table, Some(5000)), &marker)
    );
}

#[test]
fn a_base_that_proves_nothing_leaves_every_process_to_be_read_again() {
    let task = TaskId::new();
    let table = burst_table(task);
    let base = Snapshot::take(&table, "s", Some(5000), (Some(4000), None), 1).unwrap();
    // Enough tasks created and reaped since to have gone round every pid.
    table.fork_and_reap(16_300);
    let next = Snapshot::take(&table, "s", Some(5000), (Some(4000), Some(&base)), 2).unwrap();
    assert_eq!(next.floor, None);
    assert_eq!(table.reads_of(205), 2);
    // Another scope's or another user's base is no base.
    let other = Snapshot::take(&table, "other", Some(5000), (Some(4000), Some(&next)), 3).unwrap();
    assert_eq!((other.floor, table.reads_of(205)), (None, 3));
    // Without a floor (a sweeper that looks at every process) nothing is taken over.
    let all = Snapshot::take(&table, "s", None, (None, Some(&next)), 4).unwrap();
    assert_eq!((all.floor, table.reads_of(205)), (None, 4));
}

#[test]
fn a_walk_that_reaches_a_process_older_than_the_root_ends_there_as_unrelated() {
    let task = TaskId::new();
    let marker = Marker::for_task(task);
    let table = FakeTable::new(OWN_PID, UID);
    table.insert(OWN_PID, FakeProcess::new(ROOT.start_ticks, UID));
    // A zombie older than the root: its orphan is not the run's, whoever adopts it.
    table.insert(150, FakeProcess::new(1000, UID).zombie());
    table.insert(400, FakeProcess::new(6000, UID).child_of(150));
    let found = scan_with(&table, &mut scan::Live::new(&table, Some(5000)), &marker);
    assert!(found.targets.is_empty());
    assert!(found.settled, "no longer a parent on the move: {found:?}");
    // A zombie younger than the root still is one: its orphan may be the root's.
    table.insert(151, FakeProcess::new(4500, UID).zombie());
    table.insert(401, FakeProcess::new(6000, UID).child_of(151));
    let found = scan_with(&table, &mut scan::Live::new(&table, Some(5000)), &marker);
    assert!(!found.settled);
}
