//! The orders the queue serves in: jobs by level then position, resources by device index
//! then natural name.

use super::{ResourceSlot, WaitingJob};
use std::cmp::Ordering;

/// High before medium before low, then the 1-based position within the level. The job id
/// breaks ties only so that a corrupt snapshot still gives a deterministic answer.
pub(super) fn serving_order(a: &WaitingJob, b: &WaitingJob) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.position.cmp(&b.position))
        .then(a.id.cmp(&b.id))
}

/// The order in which an `any` job takes free resources: the lowest device index first,
/// lanes without an index after every indexed one, then the name in natural order
/// (`gpu2` before `gpu10`). The id makes the order total.
pub fn resource_order(a: &ResourceSlot, b: &ResourceSlot) -> Ordering {
    let by_device = match (a.device, b.device) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    by_device
        .then_with(|| natural_cmp(&a.name, &b.name))
        .then(a.id.cmp(&b.id))
}

pub(super) fn sorted_resources(resources: &[ResourceSlot]) -> Vec<&ResourceSlot> {
    let mut sorted: Vec<&ResourceSlot> = resources.iter().collect();
    sorted.sort_by(|a, b| resource_order(a, b));
    sorted
}

/// Compares names so that runs of ASCII digits count as numbers: `gpu2 < gpu10`. Other
/// characters compare as themselves. Names equal under this rule (`gpu01`, `gpu1`) fall
/// back to plain byte order, so distinct names never compare equal.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut left, mut right) = (a, b);
    loop {
        let (Some(x), Some(y)) = (left.chars().next(), right.chars().next()) else {
            return left.len().cmp(&right.len()).then_with(|| a.cmp(b));
        };
        if x.is_ascii_digit() && y.is_ascii_digit() {
            let (left_number, left_rest) = split_digits(left);
            let (right_number, right_rest) = split_digits(right);
            let by_number = compare_digit_runs(left_number, right_number);
            if by_number != Ordering::Equal {
                return by_number;
            }
            (left, right) = (left_rest, right_rest);
        } else {
            if x != y {
                return x.cmp(&y);
            }
            (left, right) = (&left[x.len_utf8()..], &right[y.len_utf8()..]);
        }
    }
}

fn split_digits(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.split_at(end)
}

/// Compares two digit runs by value without parsing, so any length works.
fn compare_digit_runs(a: &str, b: &str) -> Ordering {
    let a = a.trim_start_matches('0');
    let b = b.trim_start_matches('0');
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use homebased_shared::ids::ResourceId;

    #[test]
    fn natural_order_compares_digit_runs_as_numbers() {
        let cases = [
            ("gpu2", "gpu10", Ordering::Less),
            ("gpu10", "gpu2", Ordering::Greater),
            ("gpu1", "gpu1", Ordering::Equal),
            ("gpu", "gpu0", Ordering::Less),
            ("a9b", "a10a", Ordering::Less),
            ("a10a", "a10b", Ordering::Less),
            ("aux", "gpu0", Ordering::Less),
            ("gpu0", "gpu0-big", Ordering::Less),
            (
                "x99999999999999999999999",
                "x100000000000000000000000",
                Ordering::Less,
            ),
            ("gpu01", "gpu1", Ordering::Less),
            ("gpu1", "gpu01", Ordering::Greater),
            ("", "", Ordering::Equal),
            ("", "a", Ordering::Less),
        ];
        for (a, b, expected) in cases {
            assert_eq!(natural_cmp(a, b), expected, "{a} vs {b}");
        }
    }

    #[test]
    fn natural_sort_of_gpu_names() {
        let mut names = vec!["gpu10", "gpu2", "aux", "gpu1", "gpu0"];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(names, ["aux", "gpu0", "gpu1", "gpu2", "gpu10"]);
    }

    fn slot(name: &str, device: Option<u32>) -> ResourceSlot {
        ResourceSlot {
            id: ResourceId::new(),
            name: name.to_string(),
            device,
            mig: false,
            run: None,
        }
    }

    #[test]
    fn indexed_resources_come_first_by_device_then_names_naturally() {
        let resources = vec![
            slot("zeta", None),
            slot("gpu10", Some(10)),
            slot("aux10", None),
            slot("gpu2", Some(2)),
            slot("aux2", None),
            slot("big", Some(0)),
        ];
        let names: Vec<&str> = sorted_resources(&resources)
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, ["big", "gpu2", "gpu10", "aux2", "aux10", "zeta"]);
    }
}
