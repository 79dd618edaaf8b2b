//! Reading a log without reading all of it: its end (at most the last 1 MiB, at most 5000
//! lines), and what was appended since an offset, for a reader that follows it, one bounded
//! chunk at a time however far behind it is. A log not written yet reads as empty. A log is
//! a file of a run directory: opened without following it, read only when regular
//! ([`crate::rundir::open_record`]).

use crate::error::{ApiError, ErrorCode};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

pub const MAX_TAIL_LINES: usize = 5000;
pub const MAX_TAIL_BYTES: u64 = 1024 * 1024;
/// What a follower reads at once: its memory stays this size however much it is behind.
pub const FOLLOW_CHUNK: usize = 256 * 1024;

/// The last `lines` lines (all, up to the byte cap, when `None`) and whether anything before
/// them was left out.
pub fn read_tail(path: &Path, lines: Option<usize>) -> io::Result<(String, bool)> {
    let Some(file) = open_if_written(path)? else {
        return Ok((String::new(), false));
    };
    let tail = tail_of(&file, lines)?;
    Ok((tail.text, tail.truncated))
}

/// The end of an open log, as [`read_tail`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub text: String,
    /// Something before `text` was left out.
    pub truncated: bool,
    /// The log's length when it was read: where a follower goes on.
    pub end: u64,
}

/// The last `lines` lines of an open log (all, up to the byte cap, when `None`): only its
/// last [`MAX_TAIL_BYTES`] are read, however long it is.
pub fn tail_of(file: &File, lines: Option<usize>) -> io::Result<Tail> {
    let mut file = file;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(MAX_TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    // A log that grew since its length was read is cut there: what follows is a follower's.
    file.take(len - start).read_to_end(&mut bytes)?;
    let mut truncated = start > 0;
    if start > 0 {
        // Drop the partial first line.
        match bytes.iter().position(|&b| b == b'\n') {
            Some(i) => {
                bytes.drain(..=i);
            }
            None => bytes.clear(),
        }
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (kept, cut) = last_lines(&text, lines);
    truncated |= cut;
    Ok(Tail {
        text: kept,
        truncated,
        end: len,
    })
}

/// [`read_tail`] as a terminal would show it: carriage returns are applied first, so that
/// `lines` counts what a reader sees (a progress bar redrawn a thousand times is one line).
pub fn read_tail_rendered(path: &Path, lines: Option<usize>) -> io::Result<(String, bool)> {
    let (text, truncated) = read_tail(path, None)?;
    let (kept, cut) = last_lines(&crate::terminal::render(&text), lines);
    Ok((kept, truncated || cut))
}

/// The last `lines` lines of `text` (all when `None`, at most [`MAX_TAIL_LINES`]) and whether
/// any were left out.
pub fn last_lines(text: &str, lines: Option<usize>) -> (String, bool) {
    let Some(n) = lines.map(|n| n.min(MAX_TAIL_LINES)) else {
        return (text.to_string(), false);
    };
    let body = text.strip_suffix('\n').unwrap_or(text);
    let all: Vec<&str> = if body.is_empty() {
        vec![]
    } else {
        body.split('\n').collect()
    };
    let kept = &all[all.len().saturating_sub(n)..];
    let mut out = kept.join("\n");
    if !kept.is_empty() && text.ends_with('\n') {
        out.push('\n');
    }
    (out, all.len() > n)
}

/// Reads what follows `offset` into `buf`, filling it unless the log ends first; the count
/// read (0 at the end). A follower calls it again at once while it fills `buf`: it is behind.
pub fn read_chunk(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A log that cannot be read, as its reader is told: a file refused because the workload put
/// something else than a regular file there is `permission` (exit 4, HTTP 403), which says
/// "homebased will not read this for you", with the path and what was found; anything else
/// is `internal`.
pub fn unreadable(path: &Path, e: &io::Error) -> ApiError {
    match crate::rundir::refused(e) {
        Some(refused) => ApiError::new(ErrorCode::Permission, refused.to_string())
            .with_input(serde_json::json!({ "path": refused.path, "found": refused.found })),
        None => ApiError::internal(format!("cannot read {}: {e}", path.display())),
    }
}

/// The bytes after `offset`: what was appended since a reader stopped there, all of it.
/// For files the daemon itself appends to (a thread's inbox); a run's log is followed with
/// [`read_chunk`].
pub fn read_from(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let file = match File::open(path) {
        Ok(file) => Some(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(mut file) = file {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// `None` when there is no such file yet.
pub fn open_if_written(path: &Path) -> io::Result<Option<File>> {
    match crate::rundir::open_record(path) {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_and_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("output.log");
        std::fs::write(&p, "a\nb\nc\n").unwrap();
        assert_eq!(read_tail(&p, Some(2)).unwrap(), ("b\nc\n".into(), true));
        assert_eq!(read_tail(&p, Some(5)).unwrap(), ("a\nb\nc\n".into(), false));
        assert_eq!(read_tail(&p, None).unwrap(), ("a\nb\nc\n".into(), false));
        assert_eq!(read_tail(&p, Some(0)).unwrap(), ("".into(), true));
    }

    #[test]
    fn a_rendered_tail_counts_the_lines_a_terminal_shows() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("output.log");
        let mut log = String::from("start\n");
        for i in 0..=100 {
            log.push_str(&format!("\r{i:3}%|{}|", "#".repeat(i / 10)));
        }
        log.push_str("\nend\n");
        std::fs::write(&p, &log).unwrap();
        assert_eq!(
            read_tail_rendered(&p, Some(2)).unwrap(),
            ("100%|##########|\nend\n".into(), true)
        );
        let (raw, _) = read_tail(&p, Some(2)).unwrap();
        assert!(raw.contains("\r  0%|"), "raw keeps the bytes");
    }

    #[test]
    fn a_log_not_written_yet_is_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("output.log");
        assert_eq!(read_tail(&p, Some(2)).unwrap(), ("".into(), false));
        assert!(read_from(&p, 0).unwrap().is_empty());
        assert!(
            read_tail(tmp.path(), None).is_err(),
            "a directory is no log"
        );
    }

    #[test]
    fn reads_what_was_appended_since_an_offset() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("output.log");
        std::fs::write(&p, "one\ntw").unwrap();
        assert_eq!(read_from(&p, 0).unwrap(), b"one\ntw");
        assert_eq!(read_from(&p, 4).unwrap(), b"tw");
        assert!(read_from(&p, 7).unwrap().is_empty());
        assert!(read_from(&p, 100).unwrap().is_empty());
    }

    #[test]
    fn reads_at_most_the_last_mebibyte() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("output.log");
        let line = "x".repeat(99) + "\n";
        std::fs::write(&p, line.repeat(20_000)).unwrap();
        let (text, truncated) = read_tail(&p, None).unwrap();
        assert!(truncated);
        assert!(text.len() as u64 <= MAX_TAIL_BYTES);
        assert!(text.starts_with('x') && text.ends_with('\n'));
        let (text, _) = read_tail(&p, Some(100_000)).unwrap();
        assert_eq!(text.lines().count(), MAX_TAIL_LINES);
    }

    #[test]
    fn a_follower_reads_at_most_its_buffer_however_far_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("output.log");
        // 3 GiB that take no disk: a sparse file.
        let file = File::create(&p).unwrap();
        file.set_len(3 << 30).unwrap();
        let file = open_if_written(&p).unwrap().unwrap();
        let mut buf = vec![1u8; FOLLOW_CHUNK];
        assert_eq!(read_chunk(&file, 0, &mut buf).unwrap(), FOLLOW_CHUNK);
        assert!(buf.iter().all(|&b| b == 0));
        assert_eq!(read_chunk(&file, (3 << 30) - 10, &mut buf).unwrap(), 10);
        assert_eq!(read_chunk(&file, 3 << 30, &mut buf).unwrap(), 0);
        // The tail of it is its last mebibyte only, and says where following goes on.
        let tail = tail_of(&file, Some(10)).unwrap();
        assert_eq!(tail.end, 3 << 30);
        assert!(tail.truncated);
        assert!(tail.text.is_empty(), "no line ends in the last MiB");
    }

    #[test]
    fn a_log_that_is_a_symlink_is_refused_as_permission() {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "hunter2\n").unwrap();
        let p = tmp.path().join("output.log");
        std::os::unix::fs::symlink(&secret, &p).unwrap();
        let e = read_tail(&p, None).unwrap_err();
        let shown = unreadable(&p, &e);
        assert_eq!(shown.code, ErrorCode::Permission);
        assert_eq!(shown.input["found"], "a symbolic link");
        assert!(!shown.message.contains("hunter2"));
        assert!(shown.message.contains("output.log"), "{}", shown.message);
        let other = unreadable(&p, &io::Error::other("disk on fire"));
        assert_eq!(other.code, ErrorCode::Internal);
    }
}
