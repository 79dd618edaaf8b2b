use super::*;
use ResourceOrigin::{Detected, Fallback, Manual};

const TWO_GPUS: &str = "\
GPU 0: NVIDIA H200 (UUID: GPU-11111111-2222-3333-4444-555555555555)
GPU 1: NVIDIA H200 (UUID: GPU-66666666-7777-8888-9999-000000000000)
";

fn gpu(index: u32) -> DetectedGpu {
    DetectedGpu {
        index,
        uuid: None,
        model: None,
        migs: Vec::new(),
    }
}

fn listed(indices: &[u32]) -> ProbeOutcome {
    ProbeOutcome::Listed(indices.iter().copied().map(gpu).collect())
}

fn resource(name: &str, device: Option<u32>, origin: ResourceOrigin) -> ExistingResource {
    ExistingResource {
        id: ResourceId::new(),
        name: name.to_string(),
        device,
        origin,
        mig: None,
        busy: false,
    }
}

fn add(name: &str, device: Option<u32>, origin: ResourceOrigin) -> Change {
    Change::Add {
        name: name.to_string(),
        device,
        origin,
    }
}

fn detected(index: u32) -> Change {
    add(&format!("gpu{index}"), Some(index), Detected)
}

// ---- parsing ----

#[test]
fn parses_two_gpus_with_their_uuids() {
    assert_eq!(
        parse_nvidia_smi_list(TWO_GPUS),
        [
            DetectedGpu {
                index: 0,
                uuid: Some("GPU-11111111-2222-3333-4444-555555555555".to_string()),
                model: Some("NVIDIA H200".to_string()),
                migs: Vec::new(),
            },
            DetectedGpu {
                index: 1,
                uuid: Some("GPU-66666666-7777-8888-9999-000000000000".to_string()),
                model: Some("NVIDIA H200".to_string()),
                migs: Vec::new(),
            },
        ]
    );
}

#[test]
fn ignores_blank_lines_and_garbage() {
    let cases: [(&str, &str, &[u32]); 8] = [
        (
            "mig sub-lines",
            "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n  MIG 1g.10gb     Device  0: (UUID: MIG-bbbb)\n  MIG 1g.10gb     Device  1: (UUID: MIG-cccc)\nGPU 1: NVIDIA A100 (UUID: GPU-dddd)\n",
            &[0, 1],
        ),
        ("no devices", "No devices were found\n", &[]),
        ("empty", "", &[]),
        ("blank lines", "\n\n   \nGPU 3: Tesla T4 (UUID: GPU-x)\n\n", &[3]),
        (
            "garbage",
            "NVIDIA-SMI has failed\nGPU: none\nGPU x: bad\nGPU -1: bad\nGPUS 2: bad\nGPU 99999999999: too big\n",
            &[],
        ),
        ("duplicate indices", "GPU 1: A (UUID: GPU-a)\nGPU 1: B (UUID: GPU-b)\n", &[1]),
        ("unsorted", "GPU 2: A\nGPU 0: B\n", &[0, 2]),
        ("crlf line ends", "GPU 0: A (UUID: GPU-a)\r\nGPU 1: B\r\n", &[0, 1]),
    ];
    for (name, stdout, expected) in cases {
        let indices: Vec<u32> = parse_nvidia_smi_list(stdout)
            .iter()
            .map(|g| g.index)
            .collect();
        assert_eq!(indices, expected, "{name}");
    }
}

#[test]
fn first_line_wins_for_a_duplicate_index_and_uuid_is_optional() {
    let gpus = parse_nvidia_smi_list("GPU 1: A (UUID: GPU-a)\nGPU 1: B (UUID: GPU-b)\nGPU 2: C\n");
    assert_eq!(gpus[0].uuid.as_deref(), Some("GPU-a"));
    assert_eq!(gpus[1].uuid, None);
    assert_eq!(gpus[1].model.as_deref(), Some("C"));
}

// ---- planning ----

#[test]
fn fresh_linux_with_two_gpus_gets_gpu0_and_gpu1() {
    let plan = plan(Platform::Linux, &[], &listed(&[0, 1]));
    assert_eq!(plan.changes, [detected(0), detected(1)]);
    assert_eq!(plan.warning, None);
}

#[test]
fn parsed_listing_feeds_the_plan() {
    let probe = ProbeOutcome::Listed(parse_nvidia_smi_list(TWO_GPUS));
    let plan = plan(Platform::Linux, &[], &probe);
    assert_eq!(plan.changes, [detected(0), detected(1)]);
}

#[test]
fn missing_nvidia_smi_on_fresh_linux_gives_unindexed_fallback() {
    let plan = plan(Platform::Linux, &[], &ProbeOutcome::NotInstalled);
    assert_eq!(plan.changes, [add("gpu0", None, Fallback)]);
    assert_eq!(plan.warning, None);
}

#[test]
fn macos_gets_unindexed_gpu0_once() {
    let fresh = plan(Platform::MacOs, &[], &ProbeOutcome::NotInstalled);
    assert_eq!(fresh.changes, [add("gpu0", None, Fallback)]);
    let again = plan(
        Platform::MacOs,
        &[resource("gpu0", None, Fallback)],
        &ProbeOutcome::NotInstalled,
    );
    assert_eq!(again, DetectionPlan::default());
}

#[test]
fn fallback_is_never_added_beside_an_existing_lane_that_covers_it() {
    let cases = [
        ("detected gpu", vec![resource("gpu0", Some(0), Detected)]),
        ("manual indexed", vec![resource("big", Some(1), Manual)]),
        ("fallback present", vec![resource("gpu0", None, Fallback)]),
        (
            "adopted fallback",
            vec![resource("gpu0", Some(0), Fallback)],
        ),
    ];
    for (name, existing) in cases {
        for platform in [Platform::Linux, Platform::MacOs] {
            let plan = plan(platform, &existing, &ProbeOutcome::NotInstalled);
            assert_eq!(plan, DetectionPlan::default(), "{name} {platform:?}");
        }
    }
}

#[test]
fn fallback_is_added_beside_an_unindexed_manual_lane() {
    let existing = [resource("auxiliary", None, Manual)];
    let plan = plan(Platform::Linux, &existing, &ProbeOutcome::NotInstalled);
    assert_eq!(plan.changes, [add("gpu0", None, Fallback)]);
}

#[test]
fn fallback_name_taken_by_a_manual_lane_adds_nothing_and_warns() {
    let existing = [resource("gpu0", None, Manual)];
    let plan = plan(Platform::Linux, &existing, &ProbeOutcome::NotInstalled);
    assert!(plan.changes.is_empty());
    assert!(plan.warning.is_some());
}

#[test]
fn failing_or_empty_probe_changes_nothing_and_warns() {
    let probes = [
        ProbeOutcome::Failed("exit status 9: NVIDIA-SMI has failed".to_string()),
        ProbeOutcome::Listed(Vec::new()),
    ];
    let existings = [vec![], vec![resource("gpu0", None, Fallback)]];
    for probe in &probes {
        for existing in &existings {
            let plan = plan(Platform::Linux, existing, probe);
            assert!(plan.changes.is_empty(), "{probe:?} {existing:?}");
            assert!(plan.warning.is_some(), "{probe:?} {existing:?}");
        }
    }
    let failed = plan(Platform::Linux, &[], &probes[0]);
    assert!(failed
        .warning
        .unwrap_or_default()
        .contains("NVIDIA-SMI has failed"));
}

#[test]
fn fallback_adopts_the_first_device_keeping_its_id() {
    let fallback = resource("gpu0", None, Fallback);
    let plan = plan(
        Platform::Linux,
        std::slice::from_ref(&fallback),
        &listed(&[0, 1]),
    );
    assert_eq!(
        plan.changes,
        [
            Change::AdoptFallback {
                id: fallback.id,
                new_name: None,
                device: 0,
            },
            detected(1),
        ]
    );
    assert_eq!(plan.warning, None);
}

#[test]
fn fallback_is_renamed_after_its_device_when_the_name_is_free() {
    let fallback = resource("gpu0", None, Fallback);
    let plan = plan(
        Platform::Linux,
        std::slice::from_ref(&fallback),
        &listed(&[2, 3]),
    );
    assert_eq!(
        plan.changes,
        [
            Change::AdoptFallback {
                id: fallback.id,
                new_name: Some("gpu2".to_string()),
                device: 2,
            },
            detected(3),
        ]
    );
}

#[test]
fn fallback_keeps_its_name_when_the_device_name_is_taken() {
    let fallback = resource("gpu0", None, Fallback);
    let manual = resource("gpu2", None, Manual);
    let plan = plan(Platform::Linux, &[fallback.clone(), manual], &listed(&[2]));
    assert_eq!(
        plan.changes,
        [Change::AdoptFallback {
            id: fallback.id,
            new_name: None,
            device: 2,
        }]
    );
}

#[test]
fn busy_fallback_leaves_everything_unchanged() {
    let mut fallback = resource("gpu0", None, Fallback);
    fallback.busy = true;
    let plan = plan(Platform::Linux, &[fallback], &listed(&[0, 1]));
    assert!(plan.changes.is_empty());
    assert!(plan.warning.is_some());
}

#[test]
fn manual_registrations_are_untouched_and_conflicting_devices_skipped() {
    // A manual lane already owns device 1, and another one holds the name gpu2.
    let existing = [
        resource("big", Some(1), Manual),
        resource("gpu2", None, Manual),
    ];
    let plan = plan(Platform::Linux, &existing, &listed(&[0, 1, 2, 3]));
    assert_eq!(plan.changes, [detected(0), detected(3)]);
    let warning = plan.warning.unwrap_or_default();
    assert!(warning.contains("gpu2"), "{warning}");
    assert!(!warning.contains("device 1"), "{warning}");
}

#[test]
fn fallback_skips_a_device_owned_by_a_manual_lane() {
    let fallback = resource("gpu0", None, Fallback);
    let manual = resource("big", Some(0), Manual);
    let adopted = plan(
        Platform::Linux,
        &[fallback.clone(), manual.clone()],
        &listed(&[0, 1]),
    );
    assert_eq!(
        adopted.changes,
        [Change::AdoptFallback {
            id: fallback.id,
            new_name: Some("gpu1".to_string()),
            device: 1,
        }]
    );

    // Every listed device already has a lane: the fallback stays as it is.
    let kept = plan(Platform::Linux, &[fallback, manual], &listed(&[0]));
    assert!(kept.changes.is_empty());
    assert!(kept.warning.is_some());
}

#[test]
fn second_start_with_the_same_devices_changes_nothing() {
    let first = plan(Platform::Linux, &[], &listed(&[0, 1]));
    let existing: Vec<ExistingResource> = first
        .changes
        .iter()
        .filter_map(|change| match change {
            Change::Add {
                name,
                device,
                origin,
            } => Some(resource(name, *device, *origin)),
            Change::AdoptFallback { .. } | Change::AddSlice { .. } => None,
        })
        .collect();
    let second = plan(Platform::Linux, &existing, &listed(&[0, 1]));
    assert_eq!(second, DetectionPlan::default());
}

#[test]
fn second_start_after_adoption_changes_nothing() {
    // However the daemon records the adopted fallback's origin, it is not adopted twice.
    for origin in [Fallback, Detected] {
        let existing = [
            resource("gpu0", Some(0), origin),
            resource("gpu1", Some(1), Detected),
        ];
        let plan = plan(Platform::Linux, &existing, &listed(&[0, 1]));
        assert_eq!(plan, DetectionPlan::default(), "{origin:?}");
    }
}

#[test]
fn a_new_gpu_is_added_and_vanished_ones_are_kept() {
    let existing = [
        resource("gpu0", Some(0), Detected),
        resource("gpu1", Some(1), Detected),
    ];
    let plan = plan(Platform::Linux, &existing, &listed(&[1, 2]));
    assert_eq!(plan.changes, [detected(2)]);
}

// ---- MIG ----

const SPLIT: &str = "\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)
  MIG 3g.40gb     Device  0: (UUID: MIG-0000)
  MIG 3g.40gb     Device  1: (UUID: MIG-1111)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)
";

fn mig(instance: u32, uuid: &str, profile: Option<&str>) -> DetectedMig {
    DetectedMig {
        instance,
        uuid: uuid.to_string(),
        profile: profile.map(String::from),
    }
}

#[test]
fn mig_lines_give_a_cards_instances_in_any_spacing_and_the_old_form() {
    let gpus = parse_nvidia_smi_list(SPLIT);
    assert_eq!(
        gpus[0].migs,
        [
            mig(0, "MIG-0000", Some("3g.40gb")),
            mig(1, "MIG-1111", Some("3g.40gb"))
        ]
    );
    assert!(gpus[1].migs.is_empty());
    let odd = "GPU 0: A100 (UUID: GPU-a)\r\n\tMIG 7g.80gb Device 1:(UUID: MIG-GPU-a/1/0)\r\n\
               MIG   9z.weird    Device    0  :   (UUID:   MIG-x  )\n\
               MIG 1g.10gb Device 2: (UUID: GPU-not-a-mig)\n\
               MIG 1g.10gb Device x: (UUID: MIG-y)\n\
               MIG 1g.10gb Device 0: (UUID: MIG-duplicate-number)\n\
               MIGRATION Device 3: (UUID: MIG-z)\n";
    let gpus = parse_nvidia_smi_list(odd);
    assert_eq!(
        gpus[0].migs,
        [
            mig(0, "MIG-x", Some("9z.weird")),
            mig(1, "MIG-GPU-a/1/0", Some("7g.80gb"))
        ]
    );
    // MIG lines before any card, or under a duplicate card line, belong to nobody.
    let orphan = "  MIG 1g.10gb Device 0: (UUID: MIG-a)\nGPU 0: A\nGPU 0: B\n  MIG 1g.10gb Device 0: (UUID: MIG-b)\n";
    assert!(parse_nvidia_smi_list(orphan)[0].migs.is_empty());
}

#[test]
fn a_split_card_gets_one_lane_per_instance_and_none_of_its_own() {
    let probe = ProbeOutcome::Listed(parse_nvidia_smi_list(SPLIT));
    let plan = plan(Platform::Linux, &[], &probe);
    let slice = |instance| Change::AddSlice {
        name: format!("gpu0-mig{instance}"),
        place: MigPlace { gpu: 0, instance },
    };
    assert_eq!(plan.changes, [slice(0), slice(1), detected(1)]);
    assert_eq!(plan.warning, None);

    // A second start adds nothing; a new instance is added; a fallback adopts a whole card.
    let existing = [
        ExistingResource {
            mig: Some(MigPlace {
                gpu: 0,
                instance: 0,
            }),
            ..resource("gpu0-mig0", None, Detected)
        },
        ExistingResource {
            mig: Some(MigPlace {
                gpu: 0,
                instance: 1,
            }),
            ..resource("gpu0-mig1", None, Detected)
        },
        resource("gpu1", Some(1), Detected),
    ];
    assert_eq!(plan_of(&existing, SPLIT), DetectionPlan::default());
    let three = SPLIT.replace("GPU 1:", "  MIG 1g.10gb Device 2: (UUID: MIG-2222)\nGPU 1:");
    assert_eq!(plan_of(&existing, &three).changes, [slice(2)]);
    let fallback = resource("gpu0", None, Fallback);
    let adopted = plan_of(std::slice::from_ref(&fallback), SPLIT);
    assert_eq!(
        adopted.changes[0],
        Change::AdoptFallback {
            id: fallback.id,
            new_name: Some("gpu1".into()),
            device: 1
        }
    );
}

fn plan_of(existing: &[ExistingResource], listing: &str) -> DetectionPlan {
    plan(
        Platform::Linux,
        existing,
        &ProbeOutcome::Listed(parse_nvidia_smi_list(listing)),
    )
}

proptest::proptest! {
    /// Whatever the listing, parsing never panics; every instance it gives has a `MIG-` UUID,
    /// belongs to a listed card and has a number unique on that card.
    #[test]
    fn any_listing_parses_to_cards_with_well_formed_instances(
        lines in proptest::collection::vec(
            proptest::prop_oneof![
                "GPU [0-9]{1,2}: [A-Za-z0-9 ]{0,12}( \\(UUID: GPU-[a-f0-9]{4}\\))?",
                "[ \t]{0,4}MIG [a-z0-9.]{0,8}[ ]{1,5}Device[ ]{0,3}[0-9x]{1,2}[ ]?:[ ]{0,3}\\(UUID: ?(MIG|GPU)-[a-zA-Z0-9/-]{0,10}[ ]?\\)",
                "[ -~]{0,40}",
            ],
            0..12,
        ),
    ) {
        let text = lines.join("\n");
        let gpus = parse_nvidia_smi_list(&text);
        for gpu in &gpus {
            let mut seen = std::collections::BTreeSet::new();
            for m in &gpu.migs {
                proptest::prop_assert!(m.uuid.starts_with("MIG-"));
                proptest::prop_assert!(seen.insert(m.instance));
            }
        }
        let plan = plan(Platform::Linux, &[], &ProbeOutcome::Listed(gpus.clone()));
        // A split card's index never gets a lane of its own.
        for change in &plan.changes {
            if let Change::Add { device: Some(d), .. } = change {
                let card = gpus.iter().find(|g| g.index == *d).unwrap();
                proptest::prop_assert!(card.migs.is_empty());
            }
        }
    }
}
