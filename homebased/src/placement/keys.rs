//! Ordering keys of slotted jobs. A job's place within its level is stored as a sparse
//! integer key, not as its dense 1-based position: a job that leaves the queue, or joins it
//! at either end, or moves between two neighbours, writes its own row only, where a dense
//! position made every later job of the level shift (a second and more at the head of
//! 100,000 queued). The dense position users see is computed on read (`store::jobs`).
//!
//! Keys of resting jobs lie in `1..=MAX`. An empty level starts at `FIRST`, the middle of
//! that range, so that `GAP`-spaced keys have room for about 2^29 jobs joining at the back
//! and as many at the front. Between two neighbours a key is their midpoint, so one gap
//! takes 32 moves into it before it is used up; only then is the level renumbered (its
//! keys spread evenly again, `spacing`), which costs one write per job of the level, once
//! per 32 moves into the same gap at worst. Keys above `MAX` are never a job's resting key:
//! a renumbering parks rank `r` at `MAX + r` on its way (SQLite checks the unique slot index
//! row by row), and a move that renumbers parks its own job at `PARKED` meanwhile.

/// The distance between the keys of jobs that joined one after another, and after a
/// renumbering of a level that is not huge.
pub const GAP: i64 = 1 << 32;
/// The key of the first job of an empty level.
pub const FIRST: i64 = 1 << 61;
/// The highest resting key.
pub const MAX: i64 = 1 << 62;
/// Where a move parks its job while it renumbers a level.
pub const PARKED: i64 = i64::MAX;

/// A key strictly between `before` and `after` (`None`: the front, the back of the level),
/// both resting keys with `before < after`, or `None` when no integer is left between them:
/// then the level must be renumbered first.
pub fn between(before: Option<i64>, after: Option<i64>) -> Option<i64> {
    match (before, after) {
        (None, None) => Some(FIRST),
        (Some(b), None) => match b.checked_add(GAP) {
            Some(k) if k <= MAX => Some(k),
            _ => midpoint(b, MAX + 1),
        },
        (None, Some(a)) if a > GAP => Some(a - GAP),
        (None, Some(a)) => midpoint(0, a),
        (Some(b), Some(a)) => midpoint(b, a),
    }
}

/// The integer halfway between `lo` and `hi`, both excluded, if there is one.
fn midpoint(lo: i64, hi: i64) -> Option<i64> {
    (hi - lo >= 2).then(|| lo + (hi - lo) / 2)
}

/// The keys a renumbering gives the `n` jobs of a level, in order: `start + i * step`.
/// `GAP` apart and centred on `FIRST` while the level fits, otherwise spread over the whole
/// range. Either way the first key is above 1, the last below `MAX` and the step at least 2
/// (for any `n` below 2^61), so [`between`] finds a key at every place afterwards.
pub fn spacing(n: u64) -> (i64, i64) {
    let n = i128::from(n);
    let step = (i128::from(MAX) / (n + 1)).min(i128::from(GAP));
    let start = (i128::from(FIRST) - (n / 2) * step).max(step);
    (start as i64, step as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ends_take_a_gap_and_the_middle_halves() {
        assert_eq!(between(None, None), Some(FIRST));
        assert_eq!(between(Some(FIRST), None), Some(FIRST + GAP));
        assert_eq!(between(None, Some(FIRST)), Some(FIRST - GAP));
        assert_eq!(between(Some(10), Some(20)), Some(15));
        assert_eq!(between(Some(10), Some(12)), Some(11));
    }

    #[test]
    fn a_used_up_gap_asks_for_a_renumbering() {
        assert_eq!(between(Some(10), Some(11)), None);
        assert_eq!(between(None, Some(1)), None);
        assert_eq!(between(Some(MAX), None), None);
        // Near the ends the last room is halved too.
        assert_eq!(between(Some(MAX - 2), None), Some(MAX - 1));
        assert_eq!(between(None, Some(3)), Some(1));
    }

    #[test]
    fn one_gap_takes_32_moves_before_a_renumbering() {
        // Always placing right after the first of two neighbours `GAP` apart.
        let (b, mut a) = (FIRST, FIRST + GAP);
        let mut moves = 0;
        while let Some(k) = between(Some(b), Some(a)) {
            a = k;
            moves += 1;
        }
        assert_eq!(moves, 32);
    }

    #[test]
    fn renumbering_a_small_level_centres_it_gap_apart() {
        assert_eq!(spacing(1), (FIRST, GAP));
        assert_eq!(spacing(4), (FIRST - 2 * GAP, GAP));
    }

    proptest! {
        #[test]
        fn a_key_between_neighbours_is_strictly_between_and_resting(
            b in proptest::option::of(1..=MAX),
            a in proptest::option::of(1..=MAX),
        ) {
            let (b, a) = match (b, a) {
                (Some(x), Some(y)) if x >= y => (Some(y), Some(x.max(y + 1).min(MAX))),
                other => other,
            };
            prop_assume!(!matches!((b, a), (Some(x), Some(y)) if x >= y));
            match between(b, a) {
                Some(k) => {
                    prop_assert!((1..=MAX).contains(&k));
                    prop_assert!(b.is_none_or(|b| b < k));
                    prop_assert!(a.is_none_or(|a| k < a));
                }
                None => {
                    // Only when no integer is left in the range.
                    let lo = b.unwrap_or(0);
                    let hi = a.unwrap_or(MAX + 1);
                    prop_assert!(hi - lo < 2);
                }
            }
        }

        #[test]
        fn a_renumbered_level_has_room_at_every_place(n in 1u64..(1 << 60), at in 0u64..(1 << 60)) {
            let (start, step) = spacing(n);
            let key = |i: u64| start + (i as i64) * step;
            let last = key(n - 1);
            prop_assert!(start >= 1 && step >= 2);
            prop_assert!(last < MAX);
            let at = at % (n + 1);
            let before = (at > 0).then(|| key(at - 1));
            let after = (at < n).then(|| key(at));
            prop_assert!(between(before, after).is_some());
        }
    }
}
