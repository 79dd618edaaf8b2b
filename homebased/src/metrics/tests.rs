use super::*;
use homebased_shared::ids::{JobId, TaskId};
use homebased_shared::wire::QueueProcessOwner;

fn line<'a>(text: &'a str, series: &str) -> Option<&'a str> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .map(|l| l[series.len() + 1..].trim())
}

fn snapshot() -> Snapshot {
    Snapshot {
        resources: vec![
            ("gpu0".into(), Some(PhaseKind::Executing)),
            ("cpu".into(), None),
        ],
        jobs: vec![
            (Priority::High, JobStatus::Queued, 3),
            (Priority::Low, JobStatus::Active, 1),
        ],
        events_pending: 7,
        storage_unavailable: true,
        reserved_resources: 2,
        gpu: vec![GpuForeign {
            resource: "gpu0".into(),
            processes: 2,
            memory_bytes: 3 * 1024 * 1024,
        }],
        gpu_state: vec![GpuStateSeries::of(
            "gpu0",
            "GPU-a",
            &crate::sampler::GpuState {
                memory_used_mib: Some(2),
                memory_total_mib: Some(80),
                utilization_percent: Some(37),
                temperature_c: Some(45),
                power_w: None,
            },
        )],
        peers: vec![PeerUp {
            machine: "m-1".into(),
            name: "box".into(),
            up: true,
        }],
    }
}

#[test]
fn every_gauge_of_the_snapshot_is_written_with_its_labels() {
    let text = render(&Counters::new(), &snapshot()).unwrap();
    let phase = |r: &str, p: &str| {
        line(
            &text,
            // The encoder writes labels in name order.
            &format!("homebased_resource_phase{{phase=\"{p}\",resource=\"{r}\"}}"),
        )
    };
    assert_eq!(phase("gpu0", "executing"), Some("1"));
    assert_eq!(phase("gpu0", "idle"), Some("0"));
    assert_eq!(phase("cpu", "idle"), Some("1"));
    assert_eq!(phase("cpu", "attention"), Some("0"));
    let jobs = |p: &str, s: &str| {
        line(
            &text,
            &format!("homebased_jobs{{priority=\"{p}\",state=\"{s}\"}}"),
        )
    };
    assert_eq!(jobs("high", "queued"), Some("3"));
    assert_eq!(jobs("low", "active"), Some("1"));
    assert_eq!(jobs("medium", "queued"), Some("0"), "absent pairs are 0");
    assert_eq!(line(&text, "homebased_events_pending"), Some("7"));
    assert_eq!(line(&text, "homebased_storage_unavailable"), Some("1"));
    assert_eq!(line(&text, "homebased_reserved_resources"), Some("2"));
    assert_eq!(
        line(&text, "homebased_launch_storage_failures_total"),
        Some("0")
    );
    assert_eq!(
        line(&text, "homebased_gpu_foreign_processes{resource=\"gpu0\"}"),
        Some("2")
    );
    assert_eq!(
        line(
            &text,
            "homebased_gpu_foreign_memory_bytes{resource=\"gpu0\"}"
        ),
        Some("3145728")
    );
    assert_eq!(
        line(
            &text,
            "homebased_fleet_peer_up{machine=\"m-1\",name=\"box\"}"
        ),
        Some("1")
    );
    assert!(text.contains("# TYPE homebased_job_wait_seconds histogram"));
    assert!(text.contains("# TYPE homebased_runs_ended_total counter"));
}

#[test]
fn counters_start_at_zero_for_every_label_and_count_committed_moves() {
    let counters = Counters::new();
    let text = render(&counters, &Snapshot::default()).unwrap();
    for status in ["succeeded", "failed", "cancelled", "preempted", "lost"] {
        let series = format!("homebased_runs_ended_total{{status=\"{status}\"}}");
        assert_eq!(line(&text, &series), Some("0"), "{series}");
    }
    assert_eq!(
        line(&text, "homebased_preemptions_total{cause=\"yield\"}"),
        Some("0")
    );
    assert_eq!(line(&text, "homebased_attentions_opened_total"), Some("0"));

    let stop = |cause| {
        Commit::RecordStop(crate::lifecycle::CommittedStop {
            cause,
            requested_at: 0,
            for_job: None,
        })
    };
    counters.moved(&[stop(StopCause::Yield)], None);
    counters.moved(&[stop(StopCause::UserCancel)], None);
    counters.moved(&[Commit::OpenAttention], Some(RunStatus::Preempted));
    counters.moved(&[Commit::Abandon], Some(RunStatus::Lost));
    let text = render(&counters, &Snapshot::default()).unwrap();
    assert_eq!(
        line(&text, "homebased_preemptions_total{cause=\"yield\"}"),
        Some("1")
    );
    assert_eq!(
        line(&text, "homebased_preemptions_total{cause=\"restart\"}"),
        Some("0")
    );
    assert!(
        !text.contains("cause=\"user_cancel\""),
        "a cancel is not a preemption"
    );
    assert_eq!(line(&text, "homebased_attentions_opened_total"), Some("1"));
    assert_eq!(
        line(&text, "homebased_runs_ended_total{status=\"preempted\"}"),
        Some("1")
    );
    assert_eq!(
        line(&text, "homebased_runs_ended_total{status=\"lost\"}"),
        Some("1")
    );
}

#[test]
fn the_wait_histogram_buckets_seconds_from_queued_to_start() {
    let counters = Counters::new();
    counters.run_started(Priority::High, 10_000, 13_500);
    counters.run_started(Priority::High, 0, 7_200_000);
    // A clock stepped back: no wait, never a negative one.
    counters.run_started(Priority::Low, 5_000, 1_000);
    let text = render(&counters, &Snapshot::default()).unwrap();
    let bucket = |p: &str, le: &str| {
        line(
            &text,
            &format!("homebased_job_wait_seconds_bucket{{priority=\"{p}\",le=\"{le}\"}}"),
        )
    };
    assert_eq!(bucket("high", "1"), Some("0"));
    assert_eq!(bucket("high", "5"), Some("1"));
    assert_eq!(bucket("high", "3600"), Some("1"));
    assert_eq!(bucket("high", "7200"), Some("2"));
    assert_eq!(bucket("high", "+Inf"), Some("2"));
    assert_eq!(
        line(&text, "homebased_job_wait_seconds_sum{priority=\"high\"}"),
        Some("7203.5")
    );
    assert_eq!(bucket("low", "1"), Some("1"));
    assert_eq!(
        line(
            &text,
            "homebased_job_wait_seconds_count{priority=\"medium\"}"
        ),
        Some("0")
    );
}

#[test]
fn only_processes_without_a_queue_owner_are_foreign() {
    let gpu0 = ResourceId::new();
    let gpu1 = ResourceId::new();
    let process = |pid, mib, queue| GpuProcessView {
        pid,
        user: None,
        command: None,
        used_memory_mib: mib,
        queue,
    };
    let owner = QueueProcessOwner {
        job: JobId::new(),
        task: TaskId::new(),
    };
    let by_lane = HashMap::from([(
        gpu0,
        vec![
            process(1, Some(100), None),
            process(2, None, None),
            process(3, Some(500), Some(owner)),
        ],
    )]);
    let lanes = [(gpu0, "gpu0".to_string()), (gpu1, "gpu1".to_string())];
    assert_eq!(
        foreign(&lanes, &by_lane),
        [
            GpuForeign {
                resource: "gpu0".into(),
                processes: 2,
                memory_bytes: 100 * 1024 * 1024,
            },
            GpuForeign {
                resource: "gpu1".into(),
                processes: 0,
                memory_bytes: 0,
            },
        ]
    );
}

#[test]
fn label_values_are_escaped_as_the_format_requires() {
    let mut s = Snapshot::default();
    s.peers.push(PeerUp {
        machine: String::new(),
        name: "a \"quoted\" \\ name".into(),
        up: false,
    });
    let text = render(&Counters::new(), &s).unwrap();
    assert_eq!(
        line(
            &text,
            r#"homebased_fleet_peer_up{machine="",name="a \"quoted\" \\ name"}"#
        ),
        Some("0")
    );
}

#[test]
fn a_cards_state_is_written_in_base_units_and_an_unknown_value_is_no_series() {
    let text = render(&Counters::new(), &snapshot()).unwrap();
    let labels = "{resource=\"gpu0\",uuid=\"GPU-a\"}";
    let value = |name: &str| line(&text, &format!("{name}{labels}"));
    assert_eq!(value("homebased_gpu_memory_used_bytes"), Some("2097152"));
    assert_eq!(value("homebased_gpu_memory_total_bytes"), Some("83886080"));
    assert_eq!(value("homebased_gpu_utilization_ratio"), Some("0.37"));
    assert_eq!(value("homebased_gpu_temperature_celsius"), Some("45"));
    assert_eq!(value("homebased_gpu_power_watts"), None, "{text}");
    assert!(!text.contains("homebased_gpu_power_watts{"), "{text}");
}
