//! Which card each detected lane is (SPEC section 7, "GPU identity"): the model and
//! hardware UUID its device reported when first seen, and a flag, never a silent swap, when
//! its index later reports another card. Pure: the daemon applies the result.

use super::{DetectedGpu, MigPlace};
use homebased_shared::ids::ResourceId;

/// A detected lane with a device index or a MIG place, as the store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownLane {
    pub id: ResourceId,
    pub name: String,
    pub place: Place,
    pub recorded: Option<Identity>,
}

/// What a lane's device is: a whole card by index, or one MIG instance of a card.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Card(u32),
    Slice(MigPlace),
}

/// What the listing says is at a lane's place now.
struct Reported {
    uuid: Option<String>,
    model: Option<String>,
    /// A whole card's lane whose card now lists MIG instances: the whole card is not a
    /// device a process can be given any more.
    split: bool,
}

fn reported(place: Place, gpus: &[DetectedGpu]) -> Option<Reported> {
    match place {
        Place::Card(index) => gpus.iter().find(|g| g.index == index).map(|g| Reported {
            uuid: g.uuid.clone(),
            model: g.model.clone(),
            split: !g.migs.is_empty(),
        }),
        Place::Slice(p) => {
            let gpu = gpus.iter().find(|g| g.index == p.gpu)?;
            let mig = gpu.migs.iter().find(|m| m.instance == p.instance)?;
            Some(Reported {
                uuid: Some(mig.uuid.clone()),
                model: Some(slice_model(gpu.model.as_deref(), mig.profile.as_deref())),
                split: false,
            })
        }
    }
}

/// A slice's model: its card's and its profile (`NVIDIA H100 80GB HBM3 MIG 3g.40gb`).
pub fn slice_model(card: Option<&str>, profile: Option<&str>) -> String {
    let profile = profile.unwrap_or("?");
    match card {
        Some(card) => format!("{card} MIG {profile}"),
        None => format!("MIG {profile}"),
    }
}

/// Where a UUID is listed now, in words, for the warning.
fn listed_at(uuid: &str, gpus: &[DetectedGpu]) -> Option<String> {
    gpus.iter().find_map(|g| {
        if g.uuid.as_deref() == Some(uuid) {
            return Some(format!("device {}", g.index));
        }
        g.migs
            .iter()
            .find(|m| m.uuid == uuid)
            .map(|m| format!("MIG instance {}:{}", g.index, m.instance))
    })
}

fn place_words(place: Place) -> String {
    match place {
        Place::Card(index) => format!("device {index}"),
        Place::Slice(p) => format!("MIG instance {}:{}", p.gpu, p.instance),
    }
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
        let reported = reported(lane.place, gpus);
        let recorded_uuid = lane.recorded.as_ref().and_then(|r| r.uuid.clone());
        let Some(recorded_uuid) = recorded_uuid else {
            // Never recorded (or recorded without a UUID): take what the place says now.
            if let Some(now) =
                reported.filter(|now| !now.split && (now.uuid.is_some() || now.model.is_some()))
            {
                let identity = Identity {
                    uuid: now.uuid,
                    model: now.model,
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
        let what = match &reported {
            Some(Reported { uuid: None, .. }) => continue,
            Some(Reported { split: true, .. }) => {
                "is now split into MIG instances (a new layout)".to_string()
            }
            Some(Reported {
                uuid: Some(uuid), ..
            }) if *uuid == recorded_uuid => {
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
                continue;
            }
            Some(Reported {
                uuid: Some(uuid), ..
            }) => format!("now reports {uuid}"),
            None => "is no longer listed".to_string(),
        };
        let moved = listed_at(&recorded_uuid, gpus)
            .filter(|at| *at != place_words(lane.place))
            .map(|at| format!("; that {} is now {at}", kind(lane.place)))
            .unwrap_or_default();
        changes.push(IdentityChange {
            id: lane.id,
            identity: Identity {
                changed: true,
                ..recorded
            },
            warning: Some(format!(
                "{} was {recorded_uuid} at {}, which {what}{moved}: the lane is \
                 flagged gpu.changed{} until the old {} returns or a person re-registers",
                lane.name,
                place_words(lane.place),
                match lane.place {
                    Place::Card(_) => "",
                    Place::Slice(_) => " (the MIG layout changed) and runs no new work",
                },
                kind(lane.place),
            )),
        });
    }
    changes
}

fn kind(place: Place) -> &'static str {
    match place {
        Place::Card(_) => "card",
        Place::Slice(_) => "slice",
    }
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
            migs: Vec::new(),
        }
    }

    fn lane(device: u32, uuid: Option<&str>, changed: bool) -> KnownLane {
        KnownLane {
            id: ResourceId::new(),
            name: format!("gpu{device}"),
            place: Place::Card(device),
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

    fn split(index: u32, card: &str, slices: &[(u32, &str)]) -> DetectedGpu {
        DetectedGpu {
            migs: slices
                .iter()
                .map(|(instance, uuid)| crate::detection::DetectedMig {
                    instance: *instance,
                    uuid: uuid.to_string(),
                    profile: Some("3g.40gb".into()),
                })
                .collect(),
            ..gpu(index, card)
        }
    }

    fn slice(gpu: u32, instance: u32, uuid: Option<&str>) -> KnownLane {
        KnownLane {
            id: ResourceId::new(),
            name: format!("gpu{gpu}-mig{instance}"),
            place: Place::Slice(MigPlace { gpu, instance }),
            recorded: uuid.map(|u| Identity {
                uuid: Some(u.to_string()),
                model: Some("NVIDIA H200 MIG 3g.40gb".to_string()),
                changed: false,
            }),
        }
    }

    #[test]
    fn a_slice_records_its_mig_uuid_and_a_changed_layout_flags_it() {
        let first = slice(0, 1, None);
        let changes = check(
            std::slice::from_ref(&first),
            &[split(0, "GPU-a", &[(0, "MIG-0"), (1, "MIG-1")])],
        );
        assert_eq!(changes[0].identity.uuid.as_deref(), Some("MIG-1"));
        assert_eq!(
            changes[0].identity.model.as_deref(),
            Some("NVIDIA H200 MIG 3g.40gb")
        );
        assert!(!changes[0].identity.changed);

        let lanes = [slice(0, 0, Some("MIG-0")), slice(0, 1, Some("MIG-1"))];
        // Resized: instance 0 is another slice now, instance 1 is gone.
        let changes = check(&lanes, &[split(0, "GPU-a", &[(0, "MIG-new")])]);
        assert_eq!(changes.len(), 2);
        assert!(changes.iter().all(|c| c.identity.changed));
        let warning = changes[0].warning.as_deref().unwrap();
        assert!(
            warning.contains("MIG instance 0:0") && warning.contains("now reports MIG-new"),
            "{warning}"
        );
        assert!(warning.contains("the MIG layout changed"), "{warning}");
        assert!(changes[1]
            .warning
            .as_deref()
            .unwrap()
            .contains("no longer listed"));
        // The same layout changes nothing.
        assert!(check(&lanes, &[split(0, "GPU-a", &[(0, "MIG-0"), (1, "MIG-1")])]).is_empty());
    }

    #[test]
    fn a_whole_card_split_later_is_flagged() {
        let changes = check(
            &[lane(0, Some("GPU-a"), false)],
            &[split(0, "GPU-a", &[(0, "MIG-0")])],
        );
        assert!(changes[0].identity.changed);
        assert!(changes[0]
            .warning
            .as_deref()
            .unwrap()
            .contains("split into MIG instances"));
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
