//! Reading a log without reading all of it: its end (at most the last 1 MiB, at most 5000
//! lines), and what was appended since an offset, for a reader that follows it. A log not
//! written yet reads as empty.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

pub const MAX_TAIL_LINES: usize = 5000;
pub const MAX_TAIL_BYTES: u64 = 1024 * 1024;

/// The last `lines` lines (all, up to the byte cap, when `None`) and whether anything before
/// them was left out.
pub fn read_tail(path: &Path, lines: Option<usize>) -> io::Result<(String, bool)> {
    let Some(mut file) = open_if_written(path)? else {
        return Ok((String::new(), false));
    };
    let len = file.metadata()?.len();
    let start = len.saturating_sub(MAX_TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    file.read_to_end(&mut bytes)?;
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
    Ok((kept, truncated))
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

/// The bytes after `offset`: what was appended since a reader stopped there.
pub fn read_from(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    if let Some(mut file) = open_if_written(path)? {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_end(&mut bytes)?;
    }
    Ok(bytes)
}

/// `None` when there is no such file yet.
fn open_if_written(path: &Path) -> io::Result<Option<std::fs::File>> {
    match std::fs::File::open(path) {
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
}
