//! Which card each detected lane is (SPEC section 7, "GPU identity"): the model and
//! hardware UUID its device reported when first seen, and a flag, never a silent swap, when
//! its index later reports another card. Pure: the daemon applies the result.

use super::DetectedGpu;
use homebased_shared::ids::ResourceId;

/// A detected lane with a device index, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownLane {
    pub id: ResourceId,
    pub name: String,
    pub device: u32,
    pub recorded: Option<Identity>,
}

/// What a lane's device is known as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uuid: Option<String>,
    pub model: Option<String>,
    /// The index reported another hardware UUID (or was not listed) at the last start.
    pub changed: bool,
}

/// One lane whose recorded identity must change, and what to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityChange {
    pub id: ResourceId,
    pub identity: Identity,
    /// A warning for a changed card; `None` for a first record or the old card's return.
    pub warning: Option<String>,
}

/// Compares each lane's recorded card with what its index reports now. A lane seen for the
/// first time records the card; a lane whose index reports another UUID, or is not listed,
/// keeps its recorded card and is flagged with a warning; the recorded UUID coming back
/// clears the flag. A listing without a UUID proves nothing either way.
pub fn check(lanes: &[KnownLane], gpus: &[DetectedGpu]) -> Vec<IdentityChange> {
    let mut changes = Vec::new();
    for lane in lanes {
        let reported = gpus.iter().find(|gpu| gpu.index == lane.device);
        let recorded_uuid = lane.recorded.as_ref().and_then(|r| r.uuid.clone());
        let Some(recorded_uuid) = recorded_uuid else {
            // Never recorded (or recorded without a UUID): take what the index says now.
            if let Some(gpu) = reported.filter(|gpu| gpu.uuid.is_some() || gpu.model.is_some()) {
                let identity = Identity {
                    uuid: gpu.uuid.clone(),
                    model: gpu.model.clone(),
                    changed: false,
                };
                if lane.recorded.as_ref() != Some(&identity) {
                    changes.push(IdentityChange {
                        id: lane.id,
                        identity,
                        warning: None,
                    });
                }
            }
            continue;
        };
        let recorded = lane.recorded.clone().unwrap_or(Identity {
            uuid: Some(recorded_uuid.clone()),
            model: None,
            changed: false,
        });
        let now = reported.map(|gpu| gpu.uuid.as_deref());
        match now {
            Some(None) => {}
            Some(Some(uuid)) if uuid == recorded_uuid => {
                if recorded.changed {
                    changes.push(IdentityChange {
                        id: lane.id,
                        identity: Identity {
                            changed: false,
                            ..recorded
                        },
                        warning: None,
                    });
                }
            }
            other => {
                let what = match other {
                    Some(Some(uuid)) => format!("now reports {uuid}"),
                    _ => "is no longer listed".to_string(),
                };
                let moved = gpus
                    .iter()
                    .find(|gpu| gpu.uuid.as_deref() == Some(recorded_uuid.as_str()))
                    .map(|gpu| format!("; that card is now device {}", gpu.index))
                    .unwrap_or_default();
                changes.push(IdentityChange {
                    id: lane.id,
                    identity: Identity {
                        changed: true,
                        ..recorded
                    },
                    warning: Some(format!(
                        "{} was {recorded_uuid} at device {}, which {what}{moved}: the lane is \
                         flagged gpu.changed until the old card returns or a person re-registers",
                        lane.name, lane.device
                    )),
                });
            }
        }
    }
    changes
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gpu(index: u32, uuid: &str) -> DetectedGpu {
        DetectedGpu {
            index,
            uuid: Some(uuid.to_string()),
            model: Some("NVIDIA H200".to_string()),
        }
    }

    fn lane(device: u32, uuid: Option<&str>, changed: bool) -> KnownLane {
        KnownLane {
            id: ResourceId::new(),
            name: format!("gpu{device}"),
            device,
            recorded: uuid.map(|u| Identity {
                uuid: Some(u.to_string()),
                model: Some("NVIDIA H200".to_string()),
                changed,
            }),
        }
    }

    #[test]
    fn a_lane_seen_first_records_its_card() {
        let gpu0 = lane(0, None, false);
        let changes = check(std::slice::from_ref(&gpu0), &[gpu(0, "GPU-a")]);
        assert_eq!(
            changes,
            [IdentityChange {
                id: gpu0.id,
                identity: Identity {
                    uuid: Some("GPU-a".into()),
                    model: Some("NVIDIA H200".into()),
                    changed: false
                },
                warning: None
            }]
        );
    }

    #[test]
    fn the_same_card_changes_nothing() {
        assert!(check(&[lane(0, Some("GPU-a"), false)], &[gpu(0, "GPU-a")]).is_empty());
    }

    #[test]
    fn a_shifted_index_is_flagged_and_keeps_the_recorded_card() {
        let gpu1 = lane(1, Some("GPU-b"), false);
        // GPU-a fell off the bus: GPU-b is now device 0, and device 1 is GPU-c.
        let changes = check(
            std::slice::from_ref(&gpu1),
            &[gpu(0, "GPU-b"), gpu(1, "GPU-c")],
        );
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].identity.uuid.as_deref(), Some("GPU-b"));
        assert!(changes[0].identity.changed);
        let warning = changes[0].warning.as_deref().unwrap();
        assert!(warning.contains("now reports GPU-c"), "{warning}");
        assert!(warning.contains("now device 0"), "{warning}");
    }

    #[test]
    fn an_index_no_longer_listed_is_flagged() {
        let changes = check(&[lane(1, Some("GPU-b"), false)], &[gpu(0, "GPU-a")]);
        assert!(changes[0].identity.changed);
        assert!(changes[0]
            .warning
            .as_deref()
            .unwrap()
            .contains("no longer listed"));
    }

    #[test]
    fn the_old_card_returning_clears_the_flag() {
        let changes = check(&[lane(0, Some("GPU-a"), true)], &[gpu(0, "GPU-a")]);
        assert!(!changes[0].identity.changed);
        assert_eq!(changes[0].warning, None);
    }

    #[test]
    fn a_listing_without_uuid_proves_nothing() {
        let mut no_uuid = gpu(0, "x");
        no_uuid.uuid = None;
        assert!(check(&[lane(0, Some("GPU-a"), false)], &[no_uuid]).is_empty());
    }

    proptest! {
        /// Whatever the listing, a recorded UUID is never replaced by another one, and the
        /// flag is set exactly when the index does not report the recorded card.
        #[test]
        fn a_recorded_card_is_never_swapped(
            recorded in 0u8..4, reported in proptest::collection::vec(0u8..4, 0..4),
        ) {
            let recorded = format!("GPU-{recorded}");
            let gpus: Vec<DetectedGpu> = reported
                .iter()
                .enumerate()
                .map(|(i, u)| gpu(i as u32, &format!("GPU-{u}")))
                .collect();
            let lanes = [lane(0, Some(&recorded), false)];
            let changes = check(&lanes, &gpus);
            let same = gpus.first().and_then(|g| g.uuid.clone()) == Some(recorded.clone());
            prop_assert_eq!(changes.is_empty(), same);
            for change in changes {
                prop_assert_eq!(change.identity.uuid.as_deref(), Some(recorded.as_str()));
                prop_assert!(change.identity.changed);
                prop_assert!(change.warning.is_some());
            }
        }
    }
}
