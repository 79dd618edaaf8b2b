//! Lanes from the daemon's allocation (issue 46): when the daemon's own environment sets
//! `CUDA_VISIBLE_DEVICES` (Slurm, a container runtime, another queue), detection makes lanes
//! only for the GPUs it selects, so that a run is never handed a GPU outside the allocation.
//! `nvidia-smi` ignores the variable and may list every card of the node; CUDA reads it.
//!
//! Each entry is what CUDA takes: a device index (as `nvidia-smi -L` numbers the cards it
//! lists, which is the PCI bus order runs get through `CUDA_DEVICE_ORDER`), a card's
//! `GPU-<uuid>`, or a MIG instance's `MIG-<uuid>` (that slice alone). CUDA also takes a
//! unique prefix of a UUID; so does this. CUDA stops at the first entry it cannot use, so
//! does this: the entries after it select nothing, and the warning says so. An empty value
//! selects no GPU (CUDA then sees none), never every GPU.
//!
//! Pure: the daemon reads the variable and runs the probe (`daemon/detect.rs`).

use super::{DetectedGpu, DetectedMig};

/// The environment variable read.
pub const VARIABLE: &str = "CUDA_VISIBLE_DEVICES";

/// What the allocation leaves of a probe's listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocated {
    /// The cards selected, each with only its selected MIG instances when a slice was
    /// named (a card named whole keeps all of them), in the listing's order.
    pub gpus: Vec<DetectedGpu>,
    /// What went wrong, for the detection warning.
    pub warning: Option<String>,
}

/// The GPUs of `listed` that `visible` (the variable's value) selects.
pub fn select(visible: &str, listed: &[DetectedGpu]) -> Allocated {
    let entries: Vec<&str> = visible.split(',').map(str::trim).collect();
    if entries.iter().all(|entry| entry.is_empty()) {
        return Allocated {
            gpus: Vec::new(),
            warning: Some(format!(
                "{VARIABLE} is set but empty: it selects no GPU, so no lane is made for one"
            )),
        };
    }
    let mut gpus: Vec<DetectedGpu> = Vec::new();
    let mut problems = Vec::new();
    for (at, entry) in entries.iter().enumerate() {
        let Some(found) = find(entry, listed) else {
            problems.push(format!(
                "{VARIABLE}={visible:?}: entry {entry:?} names no GPU that nvidia-smi -L lists; \
                 it and the {} after it select nothing (as CUDA reads it)",
                entries.len() - at - 1
            ));
            break;
        };
        add(&mut gpus, found);
    }
    gpus.sort_by_key(|gpu| gpu.index);
    Allocated {
        gpus,
        warning: (!problems.is_empty()).then(|| problems.join("; ")),
    }
}

/// What one entry selects.
enum Found<'a> {
    Card(&'a DetectedGpu),
    Slice(&'a DetectedGpu, &'a DetectedMig),
}

fn find<'a>(entry: &str, listed: &'a [DetectedGpu]) -> Option<Found<'a>> {
    if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
        let index: u32 = entry.parse().ok()?;
        return listed
            .iter()
            .find(|gpu| gpu.index == index)
            .map(Found::Card);
    }
    if entry.starts_with("MIG-") {
        let mut matches = listed.iter().flat_map(|gpu| {
            gpu.migs
                .iter()
                .filter(|mig| mig.uuid.starts_with(entry))
                .map(move |mig| (gpu, mig))
        });
        let (gpu, mig) = matches.next()?;
        // A prefix that two instances share is ambiguous: CUDA refuses it.
        return matches.next().is_none().then_some(Found::Slice(gpu, mig));
    }
    if entry.starts_with("GPU-") {
        let mut matches = listed
            .iter()
            .filter(|gpu| gpu.uuid.as_deref().is_some_and(|u| u.starts_with(entry)));
        let gpu = matches.next()?;
        return matches.next().is_none().then_some(Found::Card(gpu));
    }
    None
}

fn add(gpus: &mut Vec<DetectedGpu>, found: Found<'_>) {
    match found {
        Found::Card(card) => match gpus.iter_mut().find(|gpu| gpu.index == card.index) {
            Some(kept) => kept.migs.clone_from(&card.migs),
            None => gpus.push(card.clone()),
        },
        Found::Slice(card, mig) => match gpus.iter_mut().find(|gpu| gpu.index == card.index) {
            Some(kept) => {
                if !kept.migs.iter().any(|m| m.instance == mig.instance) {
                    kept.migs.push(mig.clone());
                    kept.migs.sort_by_key(|m| m.instance);
                }
            }
            None => gpus.push(DetectedGpu {
                migs: vec![mig.clone()],
                ..card.clone()
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(index: u32, migs: &[u32]) -> DetectedGpu {
        DetectedGpu {
            index,
            uuid: Some(format!("GPU-{index}{index}{index}a-0000")),
            model: Some("NVIDIA H100".into()),
            migs: migs
                .iter()
                .map(|m| DetectedMig {
                    instance: *m,
                    uuid: format!("MIG-{index}{m}-beef"),
                    profile: Some("1g.10gb".into()),
                })
                .collect(),
        }
    }

    fn indices(allocated: &Allocated) -> Vec<u32> {
        allocated.gpus.iter().map(|gpu| gpu.index).collect()
    }

    #[test]
    fn indices_and_uuids_select_those_cards_only_in_the_listings_order() {
        let listed = [card(0, &[]), card(1, &[]), card(2, &[]), card(3, &[])];
        let by_index = select("3,1", &listed);
        assert_eq!(indices(&by_index), [1, 3]);
        assert_eq!(by_index.warning, None);
        let by_uuid = select("GPU-222a-0000, GPU-000a", &listed);
        assert_eq!(indices(&by_uuid), [0, 2]);
        assert_eq!(by_uuid.warning, None);
    }

    #[test]
    fn a_mig_uuid_selects_that_slice_alone_and_a_whole_card_keeps_its_slices() {
        let listed = [card(0, &[1, 2]), card(1, &[1, 2])];
        let slice = select("MIG-12-beef", &listed);
        assert_eq!(indices(&slice), [1]);
        assert_eq!(slice.gpus[0].migs.len(), 1);
        assert_eq!(slice.gpus[0].migs[0].instance, 2);
        let whole = select("0", &listed);
        assert_eq!(whole.gpus[0].migs.len(), 2);
    }

    #[test]
    fn an_empty_value_selects_nothing_and_says_so() {
        let listed = [card(0, &[]), card(1, &[])];
        for value in ["", " ", ","] {
            let allocated = select(value, &listed);
            assert!(allocated.gpus.is_empty(), "{value:?}");
            assert!(allocated.warning.unwrap().contains("empty"));
        }
    }

    #[test]
    fn cuda_stops_at_the_first_entry_it_cannot_use_and_so_does_detection() {
        let listed = [card(0, &[]), card(1, &[]), card(2, &[])];
        let allocated = select("2,7,0", &listed);
        assert_eq!(indices(&allocated), [2]);
        let warning = allocated.warning.unwrap();
        assert!(
            warning.contains("\"7\"") && warning.contains("the 1 after it"),
            "{warning}"
        );
        let garbage = select("all", &listed);
        assert!(garbage.gpus.is_empty());
        assert!(garbage.warning.is_some());
    }

    #[test]
    fn an_ambiguous_uuid_prefix_selects_nothing() {
        let listed = [card(0, &[]), card(1, &[])];
        let allocated = select("GPU-", &listed);
        assert!(allocated.gpus.is_empty());
        assert!(allocated.warning.is_some());
    }
}
