//! Where `resource job move` puts a job (SPEC section 2): a pure function from the requested
//! placement and the current slots to the new slot, or a refusal with a reason.

pub mod keys;

use homebased_shared::ids::JobId;
use homebased_shared::queue::Priority;
use homebased_shared::wire::Placement;

/// A job's place in the queue: its level and 1-based position within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub priority: Priority,
    pub position: u32,
}

/// Why a move was refused (`move_refused` with `input.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveRefusal {
    NoPlacement,
    ConflictingFlags,
    SelfTarget,
    TargetNotFound,
    TargetTerminal,
    LevelMismatch,
}

impl MoveRefusal {
    pub fn reason(self) -> &'static str {
        match self {
            MoveRefusal::NoPlacement => "no_placement",
            MoveRefusal::ConflictingFlags => "conflicting_flags",
            MoveRefusal::SelfTarget => "self_target",
            MoveRefusal::TargetNotFound => "target_not_found",
            MoveRefusal::TargetTerminal => "target_terminal",
            MoveRefusal::LevelMismatch => "level_mismatch",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            MoveRefusal::NoPlacement => {
                "say where: --front, --back, --priority, --before or --after"
            }
            MoveRefusal::ConflictingFlags => {
                "placement flags contradict: use one of --front, --back, --before, --after \
                 (--priority may join --front or --back)"
            }
            MoveRefusal::SelfTarget => "a job cannot be placed relative to itself",
            MoveRefusal::TargetNotFound => "the job named by --before/--after does not exist",
            MoveRefusal::TargetTerminal => {
                "the job named by --before/--after has finished and holds no slot"
            }
            MoveRefusal::LevelMismatch => {
                "--before/--after take the target's level; an added --priority must equal it"
            }
        }
    }
}

/// The target of `--before`/`--after` as the store found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    Missing,
    Terminal,
    At(Slot),
}

/// The anchor job named by the placement, if any.
pub fn anchor_job(p: &Placement) -> Option<JobId> {
    p.before.or(p.after)
}

/// Refusals that need no queue state: no placement, contradictions, self reference.
pub fn check_flags(p: &Placement, job: JobId) -> Result<(), MoveRefusal> {
    let ends = usize::from(p.front) + usize::from(p.back);
    let anchors = usize::from(p.before.is_some()) + usize::from(p.after.is_some());
    if ends == 0 && anchors == 0 && p.priority.is_none() {
        return Err(MoveRefusal::NoPlacement);
    }
    if ends + anchors > 1 {
        return Err(MoveRefusal::ConflictingFlags);
    }
    if anchor_job(p) == Some(job) {
        return Err(MoveRefusal::SelfTarget);
    }
    Ok(())
}

/// The new slot. `level_len(l)` is how many jobs hold a slot in level `l` now, the moving job
/// included.
pub fn resolve(
    p: &Placement,
    job: JobId,
    current: Slot,
    anchor: Option<Anchor>,
    level_len: impl Fn(Priority) -> u32,
) -> Result<Slot, MoveRefusal> {
    check_flags(p, job)?;
    // Positions in `level` once the moving job has left its slot.
    let after_leaving = |level: Priority, position: u32| {
        if level == current.priority && position > current.position {
            position - 1
        } else {
            position
        }
    };
    let len_without =
        |level: Priority| level_len(level).saturating_sub(u32::from(level == current.priority));
    if let Some(anchor) = anchor {
        let target = match anchor {
            Anchor::Missing => return Err(MoveRefusal::TargetNotFound),
            Anchor::Terminal => return Err(MoveRefusal::TargetTerminal),
            Anchor::At(slot) => slot,
        };
        if p.priority.is_some_and(|l| l != target.priority) {
            return Err(MoveRefusal::LevelMismatch);
        }
        let at = after_leaving(target.priority, target.position);
        let position = if p.before.is_some() { at } else { at + 1 };
        return Ok(Slot {
            priority: target.priority,
            position,
        });
    }
    let level = p.priority.unwrap_or(current.priority);
    let position = if p.front { 1 } else { len_without(level) + 1 };
    Ok(Slot {
        priority: level,
        position,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Priority::*;

    fn slot(priority: Priority, position: u32) -> Slot {
        Slot { priority, position }
    }

    /// Two high jobs and four medium ones; the moving job is medium #2.
    fn lens(l: Priority) -> u32 {
        match l {
            High => 2,
            Medium => 4,
            Low => 0,
        }
    }

    fn place(p: Placement, anchor: Option<Anchor>) -> Result<Slot, MoveRefusal> {
        resolve(&p, JobId(uuid::Uuid::nil()), slot(Medium, 2), anchor, lens)
    }

    #[test]
    fn ends_and_levels() {
        let front = Placement {
            front: true,
            ..Default::default()
        };
        assert_eq!(place(front, None), Ok(slot(Medium, 1)));
        let back = Placement {
            back: true,
            ..Default::default()
        };
        assert_eq!(place(back, None), Ok(slot(Medium, 4)));
        let high = Placement {
            priority: Some(High),
            ..Default::default()
        };
        assert_eq!(
            place(high, None),
            Ok(slot(High, 3)),
            "priority alone joins the back"
        );
        let high_front = Placement {
            priority: Some(High),
            front: true,
            ..Default::default()
        };
        assert_eq!(place(high_front, None), Ok(slot(High, 1)));
        let low_back = Placement {
            priority: Some(Low),
            back: true,
            ..Default::default()
        };
        assert_eq!(place(low_back, None), Ok(slot(Low, 1)));
        let same = Placement {
            priority: Some(Medium),
            ..Default::default()
        };
        assert_eq!(place(same, None), Ok(slot(Medium, 4)));
    }

    #[test]
    fn before_and_after_take_the_targets_level() {
        let t = JobId::new();
        let before = Placement {
            before: Some(t),
            ..Default::default()
        };
        let after = Placement {
            after: Some(t),
            ..Default::default()
        };
        // Target later in the same level: its slot shifts up once the job leaves.
        assert_eq!(
            place(before.clone(), Some(Anchor::At(slot(Medium, 4)))),
            Ok(slot(Medium, 3))
        );
        assert_eq!(
            place(after.clone(), Some(Anchor::At(slot(Medium, 4)))),
            Ok(slot(Medium, 4))
        );
        // Target earlier in the same level.
        assert_eq!(
            place(before.clone(), Some(Anchor::At(slot(Medium, 1)))),
            Ok(slot(Medium, 1))
        );
        // Target in another level.
        assert_eq!(
            place(after.clone(), Some(Anchor::At(slot(High, 2)))),
            Ok(slot(High, 3))
        );
        let matching = Placement {
            before: Some(t),
            priority: Some(High),
            ..Default::default()
        };
        assert_eq!(
            place(matching, Some(Anchor::At(slot(High, 1)))),
            Ok(slot(High, 1))
        );
    }

    #[test]
    fn every_refusal_has_its_reason() {
        let t = JobId::new();
        let me = JobId(uuid::Uuid::nil());
        let cases = [
            (Placement::default(), None, MoveRefusal::NoPlacement),
            (
                Placement {
                    front: true,
                    back: true,
                    ..Default::default()
                },
                None,
                MoveRefusal::ConflictingFlags,
            ),
            (
                Placement {
                    before: Some(t),
                    after: Some(t),
                    ..Default::default()
                },
                Some(Anchor::At(slot(High, 1))),
                MoveRefusal::ConflictingFlags,
            ),
            (
                Placement {
                    front: true,
                    after: Some(t),
                    ..Default::default()
                },
                Some(Anchor::At(slot(High, 1))),
                MoveRefusal::ConflictingFlags,
            ),
            (
                Placement {
                    before: Some(me),
                    ..Default::default()
                },
                None,
                MoveRefusal::SelfTarget,
            ),
            (
                Placement {
                    after: Some(t),
                    ..Default::default()
                },
                Some(Anchor::Missing),
                MoveRefusal::TargetNotFound,
            ),
            (
                Placement {
                    after: Some(t),
                    ..Default::default()
                },
                Some(Anchor::Terminal),
                MoveRefusal::TargetTerminal,
            ),
            (
                Placement {
                    after: Some(t),
                    priority: Some(Low),
                    ..Default::default()
                },
                Some(Anchor::At(slot(High, 1))),
                MoveRefusal::LevelMismatch,
            ),
        ];
        for (placement, anchor, refusal) in cases {
            assert_eq!(
                place(placement.clone(), anchor),
                Err(refusal),
                "{placement:?}"
            );
        }
    }
}
