//! The bound on a run's `output.log` (SPEC section 5, `[resource] output_limit`): where the
//! kept head ends, when and where the middle is cut, the marker line that stands for what was
//! cut, and reading that marker back.
//!
//! The workload appends to `output.log` itself (an `O_APPEND` descriptor, or `docker logs`
//! on one), so the worker never sits between it and the file: it cuts the middle out of the
//! file in place with `fallocate(FALLOC_FL_COLLAPSE_RANGE)`, which the kernel orders against
//! the appends. Collapsing needs offsets and lengths in whole filesystem blocks, so every
//! position here is a multiple of [`UNIT`] (64 KiB, a multiple of every block size in use).
//!
//! After a cut the file reads: the head (`[0, head)`), then one marker block of [`UNIT`]
//! bytes at `head` holding a newline if the head did not end a line, the marker line, and the
//! newest output's bytes that precede the rest, then the rest of the newest output. Only the
//! marker block is rewritten; it is rewritten whole by every later cut, with the new total.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// Alignment of every cut, and the size of the marker block.
pub const UNIT: u64 = 64 * 1024;
/// SPEC section 5: the first 64 MiB are kept.
pub const MAX_HEAD: u64 = 64 * 1024 * 1024;
/// Default `[resource] output_limit`.
pub const DEFAULT_LIMIT: u64 = 16 * 1024 * 1024 * 1024;
/// The smallest limit the cut can honour: a head, a marker block and a tail of whole units.
pub const MIN_LIMIT: u64 = 16 * UNIT;

/// The marker line for `dropped` bytes, newline included.
pub fn marker(dropped: u64) -> String {
    format!("[homebased: {dropped} bytes of output dropped]\n")
}

/// Where the kept head ends for `limit`: a quarter of the limit, at most 64 MiB, in whole
/// units. (A limit below 256 MiB cannot keep 64 MiB of head and still keep newest output.)
pub fn head(limit: u64) -> u64 {
    let limit = limit.max(MIN_LIMIT);
    align_down((limit / 4).min(MAX_HEAD))
}

fn align_down(n: u64) -> u64 {
    n - n % UNIT
}

/// One cut of `output.log`, planned from its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// `fallocate(COLLAPSE_RANGE)` of `[offset, offset + len)`: everything between the marker
    /// block and the newest output kept.
    pub offset: u64,
    pub len: u64,
    /// Where the new marker block is written (the head's end), after the collapse.
    pub block_at: u64,
    /// The newline (if the head ended mid-line) and the marker line that open the block.
    pub opening: String,
    /// The bytes that fill the rest of the block: read before the collapse from these
    /// positions, just before the first byte the collapse keeps, so that the block runs on
    /// into the kept output with nothing missing or repeated.
    pub carried_from: u64,
    pub carried_len: u64,
    /// Output bytes dropped in all, this cut included (the marker's number).
    pub dropped: u64,
    /// File positions past the marker block lag output offsets by this much after the cut.
    pub shift: u64,
}

/// The cut to make when `output.log` is `size` bytes, or `None` while it is within `limit`.
/// `shift` is what earlier cuts removed (0 before the first), `head_ends_line` whether the
/// head's last byte is a newline. A cut brings the file back to about three quarters of the
/// limit, so that the next one waits for a quarter of the limit more output.
pub fn plan(size: u64, limit: u64, shift: u64, head_ends_line: bool) -> Option<Cut> {
    let limit = limit.max(MIN_LIMIT);
    if size <= limit {
        return None;
    }
    let head = head(limit);
    let block_end = head + UNIT;
    let target = limit - limit / 4;
    // Keep `[keep_from, size)`: at least `target - block_end` bytes of the newest output.
    let keep_from = align_down(size - (target - block_end));
    // Always true for size > limit >= MIN_LIMIT (keep_from >= limit/4 + head), checked so that
    // the carried bytes surely come from the part that is cut.
    if keep_from < block_end + UNIT || keep_from >= size {
        return None;
    }
    let len = keep_from - block_end;
    let new_shift = shift + len;
    let newline = if head_ends_line { "" } else { "\n" };
    // The marker's length depends on its number, and the number on how much of the block it
    // takes from the carried output: the smallest length that agrees with itself.
    let mut opening = format!("{newline}{}", marker(0));
    let dropped = loop {
        let dropped = opening.len() as u64 + new_shift;
        let again = format!("{newline}{}", marker(dropped));
        if again.len() == opening.len() {
            opening = again;
            break dropped;
        }
        opening = again;
    };
    let carried_len = UNIT - opening.len() as u64;
    Some(Cut {
        offset: block_end,
        len,
        block_at: head,
        opening,
        carried_from: keep_from - carried_len,
        carried_len,
        dropped,
        shift: new_shift,
    })
}

/// How far file positions past the marker block lag output offsets: 0 for a file never cut.
/// Read from the marker at the head's end. (A workload that prints a marker of its own right
/// there fools only the readers of its own log.)
pub fn read_shift(file: &File, limit: u64) -> io::Result<u64> {
    let at = head(limit);
    let mut buf = [0u8; 96];
    let mut read = 0;
    while read < buf.len() {
        match file.read_at(&mut buf[read..], at + read as u64)? {
            0 => break,
            n => read += n,
        }
    }
    Ok(parse_opening(&buf[..read]).unwrap_or(0))
}

/// Where a reader that had read up to `offset` goes on after cuts moved the newest output
/// from `was` to `now` (both [`read_shift`]s): the same output, moved down, or the marker
/// block when what it had not read yet was cut.
pub fn offset_after_cuts(offset: u64, was: u64, now: u64, limit: u64) -> u64 {
    let head = head(limit);
    if now <= was || offset <= head {
        return offset;
    }
    match offset.checked_sub(now - was) {
        Some(moved) if moved >= head + UNIT => moved,
        _ => head,
    }
}

/// Where a follower of a log reads next, and what cuts it has seen (SPEC section 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    pub offset: u64,
    pub shift: u64,
}

/// Reads one chunk after `place` into `buf`, that place first moved past any cut made since
/// it was taken; read again if a cut came in between (a cut is one in `limit / 4` of output,
/// so a second try settles it). `limit`: the run's `output_limit`, `None` when unknown (cuts
/// are not followed). Answers the bytes read and the place they were read from; the caller's
/// next place is that offset plus what it consumed.
pub fn read_after(
    file: &File,
    limit: Option<u64>,
    place: Place,
    buf: &mut [u8],
) -> io::Result<(usize, Place)> {
    let Some(limit) = limit else {
        return Ok((crate::tail::read_chunk(file, place.offset, buf)?, place));
    };
    let mut place = place;
    for _ in 0..3 {
        let shift = read_shift(file, limit).unwrap_or(0);
        place.offset = offset_after_cuts(place.offset, place.shift, shift, limit);
        place.shift = place.shift.max(shift);
        let n = crate::tail::read_chunk(file, place.offset, buf)?;
        if read_shift(file, limit).unwrap_or(0) <= place.shift {
            return Ok((n, place));
        }
    }
    // Cut after cut while reading: nothing now, the next poll tries again.
    Ok((0, place))
}

/// The shift a marker block's opening stands for, if `bytes` begin with one.
fn parse_opening(bytes: &[u8]) -> Option<u64> {
    let (newline, rest) = match bytes.strip_prefix(b"\n") {
        Some(rest) => (1, rest),
        None => (0, bytes),
    };
    let rest = rest.strip_prefix(b"[homebased: ")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let dropped: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    if !rest[digits..].starts_with(b" bytes of output dropped]\n") {
        return None;
    }
    let opening = newline + marker(dropped).len() as u64;
    dropped.checked_sub(opening)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn the_head_is_a_quarter_of_the_limit_at_most_64_mib_in_whole_units() {
        assert_eq!(head(MIB), 256 * 1024);
        assert_eq!(head(DEFAULT_LIMIT), MAX_HEAD);
        assert_eq!(head(256 * MIB), MAX_HEAD);
        assert_eq!(head(MIB + 1) % UNIT, 0);
        assert_eq!(
            head(1),
            head(MIN_LIMIT),
            "a tiny limit acts as the smallest"
        );
    }

    #[test]
    fn nothing_is_cut_within_the_limit() {
        assert_eq!(plan(MIB, MIB, 0, true), None);
        assert_eq!(plan(0, MIB, 0, false), None);
    }

    #[test]
    fn a_cut_keeps_the_head_and_three_quarters_of_the_limit_in_whole_units() {
        let size = 5 * MIB + 123;
        let cut = plan(size, MIB, 0, true).unwrap();
        assert_eq!(cut.block_at, 256 * 1024);
        assert_eq!(cut.offset, cut.block_at + UNIT);
        assert_eq!(cut.offset % UNIT, 0);
        assert_eq!(cut.len % UNIT, 0);
        let after = size - cut.len;
        assert!(after <= MIB * 3 / 4 + UNIT && after > MIB / 2, "{after}");
        // The block is whole: opening then carried bytes, ending where the kept part begins.
        assert_eq!(cut.opening.len() as u64 + cut.carried_len, UNIT);
        assert_eq!(cut.carried_from + cut.carried_len, cut.offset + cut.len);
        assert!(
            cut.carried_from >= cut.offset,
            "carried bytes come from the cut part"
        );
    }

    #[test]
    fn the_marker_counts_every_dropped_byte() {
        let size = 3 * MIB;
        for ends_line in [true, false] {
            let cut = plan(size, MIB, 0, ends_line).unwrap();
            // Output kept past the head starts at carried_from; everything between is gone.
            assert_eq!(cut.dropped, cut.carried_from - cut.block_at);
            let newline = if ends_line { "" } else { "\n" };
            assert_eq!(cut.opening, format!("{newline}{}", marker(cut.dropped)));
        }
    }

    #[test]
    fn a_second_cut_adds_to_the_first() {
        let first = plan(3 * MIB, MIB, 0, true).unwrap();
        let size = 3 * MIB - first.len + 2 * MIB;
        let second = plan(size, MIB, first.shift, true).unwrap();
        assert_eq!(second.shift, first.shift + second.len);
        // In output offsets: the newest kept byte's offset minus the head is all dropped.
        let kept_output_from = second.carried_from + first.shift;
        assert_eq!(second.dropped, kept_output_from - second.block_at);
    }

    #[test]
    fn the_marker_length_settles_when_its_number_gains_a_digit() {
        // At this size the cut removes 262144 bytes: around these shifts the number reaches
        // a million, partly through the marker's own length.
        let mut lengths = std::collections::BTreeSet::new();
        for shift in 737_700..737_900 {
            let cut = plan(MIB + 1, MIB, shift, true).unwrap();
            assert_eq!(cut.len, 262_144);
            lengths.insert(cut.opening.len());
            assert_eq!(cut.dropped, cut.opening.len() as u64 + cut.shift);
            assert_eq!(cut.opening, marker(cut.dropped));
        }
        assert_eq!(lengths.len(), 2, "both sides of the new digit were seen");
    }

    #[test]
    fn the_shift_is_read_back_from_the_marker() {
        let cut = plan(7 * MIB, MIB, 0, false).unwrap();
        let mut block = cut.opening.clone().into_bytes();
        block.extend_from_slice(b"tail bytes");
        assert_eq!(parse_opening(&block), Some(cut.shift));
        assert_eq!(parse_opening(b"ordinary output\n"), None);
        assert_eq!(parse_opening(b"[homebased: 12 bytes of output"), None);
        assert_eq!(
            parse_opening(b"[homebased: 1 bytes of output dropped]\n"),
            None
        );
    }

    #[test]
    fn a_reader_goes_on_where_its_output_moved_or_at_the_marker() {
        let head = head(MIB);
        // Within the head nothing moves; without a new cut nothing moves.
        assert_eq!(offset_after_cuts(100, 0, 5 * UNIT, MIB), 100);
        assert_eq!(offset_after_cuts(900_000, 7, 7, MIB), 900_000);
        // Its place was kept: the same bytes, that much lower.
        assert_eq!(offset_after_cuts(900_000, 0, 400_000, MIB), 500_000);
        // Its place was cut (it lagged behind): it reads on from the marker.
        assert_eq!(offset_after_cuts(head + 10, 0, 400_000, MIB), head);
        assert_eq!(offset_after_cuts(600_000, 0, 400_000, MIB), head);
    }

    #[test]
    fn a_log_never_cut_has_no_shift() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("output.log");
        std::fs::write(&path, b"short\n").unwrap();
        let file = File::open(&path).unwrap();
        assert_eq!(read_shift(&file, MIB).unwrap(), 0);
    }
}
