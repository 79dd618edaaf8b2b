//! The worker's command line as `ps` and `/proc/<pid>/cmdline` show it. A fresh worker's
//! names its run (`homebased-worker <home>/tasks/<task> --job <job> --lanes <lanes> --lock-fd 3
//! ...`); a standby worker was started as `homebased-worker --standby <room>` before its run
//! existed, so once it has taken one, and before its workload starts, it writes that run's
//! arguments over its own, and `ps` shows it as a fresh worker of the same run would be
//! shown. The job and lanes there are what a daemon that lost the run trusts about it
//! (`homebased_shared::worker_cmdline`).
//!
//! The kernel shows the bytes between the process's `arg_start` and `arg_end` (the argument
//! strings its exec laid out), read live; the size of that area is fixed at exec
//! (`prctl(PR_SET_MM_ARG_*)` could move it, but needs `CAP_SYS_RESOURCE`). So the daemon
//! starts the standby worker with a blank argument as room (`homebased_shared::standby::room`),
//! and the new arguments are written in place, as PostgreSQL and nginx retitle their workers.
//! The area's bounds come from `/proc/self/stat` and the write goes through `/proc/self/mem`:
//! no pointer to the original `argv` is needed (Rust's `std::env::args` works on copies), and
//! no `unsafe`. The area keeps a NUL as its last byte, so the kernel shows exactly the area,
//! argument by argument, never running on into the environment.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;

/// Writes `args` over the process's arguments after its `argv[0]`, which stays. An error
/// leaves the command line as it was (the run is unaffected; the caller notes it).
pub fn show(args: &[OsString]) -> io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (start, end) = argument_area(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "/proc/self/stat names no argument area",
        )
    })?;
    let mem = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let mut area = vec![0u8; end - start];
    mem.read_exact_at(&mut area, start as u64)?;
    let argv0 = area.split(|b| *b == 0).next().unwrap_or_default().to_vec();
    let words: Vec<&[u8]> = std::iter::once(argv0.as_slice())
        .chain(args.iter().map(|arg| arg.as_bytes()))
        .collect();
    let laid_out = lay_out(area.len(), &words)
        // Too little room for all of them (a home path longer than the daemon's room):
        // the run directory alone still names the task.
        .or_else(|| lay_out(area.len(), &words[..words.len().min(2)]))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "{} bytes of command line cannot hold the run's arguments",
                    area.len()
                ),
            )
        })?;
    mem.write_all_at(&laid_out, start as u64)
}

/// `arg_start` and `arg_end` (fields 48 and 49) of a `/proc/<pid>/stat` line, counted after
/// the command name, which may itself hold spaces and parentheses.
fn argument_area(stat: &str) -> Option<(usize, usize)> {
    // The fields after `comm` start at field 3 (state).
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(48 - 3);
    let start: usize = fields.next()?.parse().ok()?;
    let end: usize = fields.next()?.parse().ok()?;
    (start < end).then_some((start, end))
}

/// The `len` bytes that read as `words`, each ended by a NUL, then NULs to the end; `None`
/// when they do not fit or a word holds a NUL (it would split into two arguments).
fn lay_out(len: usize, words: &[&[u8]]) -> Option<Vec<u8>> {
    let mut bytes = Vec::with_capacity(len);
    for word in words {
        if word.contains(&0) {
            return None;
        }
        bytes.extend_from_slice(word);
        bytes.push(0);
    }
    if bytes.len() > len {
        return None;
    }
    bytes.resize(len, 0);
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_laid_out_nul_ended_and_the_rest_is_cleared() {
        assert_eq!(
            lay_out(12, &[b"hw", b"/t", b"-x"]).unwrap(),
            b"hw\0/t\0-x\0\0\0\0".to_vec()
        );
        // Exactly full: the last byte is still the last word's NUL.
        assert_eq!(lay_out(6, &[b"hw", b"/t"]).unwrap(), b"hw\0/t\0".to_vec());
    }

    #[test]
    fn words_that_do_not_fit_or_would_split_are_refused() {
        assert_eq!(lay_out(5, &[b"hw", b"/t"]), None);
        assert_eq!(lay_out(16, &[b"hw", b"/a\0b"]), None);
    }

    #[test]
    fn the_argument_area_is_read_after_a_command_name_with_spaces_and_parentheses() {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[48 - 3] = "140737488347000".into();
        fields[49 - 3] = "140737488347100".into();
        let stat = format!("4242 (a) b (c) {}", fields.join(" "));
        assert_eq!(
            argument_area(&stat),
            Some((140_737_488_347_000, 140_737_488_347_100))
        );
        assert_eq!(argument_area("4242 (short) S 1 2"), None);
    }

    #[test]
    fn this_process_has_an_argument_area_it_can_read() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (start, end) = argument_area(&stat).expect("an argument area");
        let mem = std::fs::File::open("/proc/self/mem").unwrap();
        let mut area = vec![0u8; end - start];
        mem.read_exact_at(&mut area, start as u64).unwrap();
        assert_eq!(area, std::fs::read("/proc/self/cmdline").unwrap());
    }
}
