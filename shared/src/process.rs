//! Process identity from `/proc`: a pid alone can be reused, so every process is named by
//! `(pid, kernel start ticks)` and re-read right before anything acts on it. Used by the
//! worker for its workload and by the daemon for a lost worker's leftovers. Ending a group
//! (TERM, grace, KILL) is [`terminate_group`]. A zombie thread-group leader whose other
//! threads still run is alive ([`has_ended`], [`live_thread`]).

mod teardown;

pub use teardown::{terminate_group, Teardown};

use crate::rundir::ProcessIdentity;
use std::io;
use std::path::Path;

/// The fields of `/proc/<pid>/stat` that identify a process and place it in a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    /// One letter: `R`, `S`, `D`, `Z` (zombie), `T`, ...
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    pub session: u32,
    /// Field 9, the kernel's `PF_*` flags.
    pub flags: u32,
    /// Field 22, clock ticks since boot.
    pub start_ticks: u64,
    /// Field 23, virtual memory size in bytes: 0 exactly when the task has no memory of its
    /// own (a kernel thread, or a process whose memory is already released on its way out),
    /// the same test as a `status` file without its `VmSize:` line, for one `stat` read.
    pub vsize: u64,
}

/// `PF_KTHREAD`: a kernel thread, with no memory, environment or user-space work.
const PF_KTHREAD: u32 = 0x0020_0000;
/// `PF_EXITING`: the process is being torn down; its memory, and so its environment, may
/// already be gone.
const PF_EXITING: u32 = 0x0000_0004;

impl ProcStat {
    pub fn identity(&self) -> ProcessIdentity {
        ProcessIdentity {
            pid: self.pid,
            start_ticks: self.start_ticks,
        }
    }
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z'
    }
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }
    pub fn is_exiting(&self) -> bool {
        self.flags & PF_EXITING != 0
    }
    /// No memory left to read an environment from (see [`ProcStat::vsize`]).
    pub fn has_no_memory(&self) -> bool {
        self.vsize == 0
    }
}

/// Parses one `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// itself contain spaces and `)`, so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text.get(..open)?.trim().parse().ok()?;
    // After the name: field 3 (state) is index 0, so field n is index n - 3. Only the fields
    // up to 23 are read, without allocating: a sweep parses one line per process per scan.
    let mut rest = [""; 21];
    let mut fields = text.get(close + 1..)?.split_ascii_whitespace();
    for slot in &mut rest {
        *slot = fields.next()?;
    }
    let field = |n: usize| rest.get(n - 3).copied();
    let mut state = field(3)?.chars();
    let letter = state.next()?;
    if state.next().is_some() {
        return None;
    }
    // A zombie being reaped reads `0 -1 -1` here: no parent, group or session any more.
    let id = |n: usize| -> Option<u32> {
        let value: i64 = field(n)?.parse().ok()?;
        Some(u32::try_from(value).unwrap_or(0))
    };
    Some(ProcStat {
        pid,
        state: letter,
        ppid: id(4)?,
        pgrp: id(5)?,
        session: id(6)?,
        flags: field(9)?.parse().ok()?,
        start_ticks: field(22)?.parse().ok()?,
        vsize: field(23)?.parse().ok()?,
    })
}

/// Reads `/proc/<pid>/stat`. A process that is gone reads as `NotFound`.
pub fn read_stat(pid: u32) -> io::Result<ProcStat> {
    read_stat_at(Path::new("/proc"), pid)
}

fn read_stat_at(proc_root: &Path, pid: u32) -> io::Result<ProcStat> {
    let path = proc_root.join(pid.to_string()).join("stat");
    // A pid directory that vanished between listing and reading answers ESRCH on some
    // kernels rather than ENOENT; both mean "gone".
    let gone = |e: io::Error| match e.raw_os_error() {
        Some(libc::ESRCH) => io::Error::new(io::ErrorKind::NotFound, e),
        _ => e,
    };
    let mut file = std::fs::File::open(&path).map_err(gone)?;
    read_stat_from(&mut file).map_err(|e| gone(with_path(e, &path)))
}

/// The `stat` line of an open `/proc/<pid>/stat` (or a thread's).
pub fn read_stat_from(file: &mut std::fs::File) -> io::Result<ProcStat> {
    let mut line = [0u8; STAT_LINE];
    parse_stat_record(read_record_from(file, &mut line)?)
}

/// The `stat` line of an open `/proc/<pid>/stat` read again from its start, as it is now:
/// the kernel writes the record anew for each read at offset 0, so one open serves both of a
/// scan's identity reads of a process. Once the process is reaped it fails `ESRCH`, whoever
/// holds its pid by then: the open file names the process, not the pid.
pub fn reread_stat_from(file: &std::fs::File) -> io::Result<ProcStat> {
    use std::os::unix::fs::FileExt as _;
    let mut line = [0u8; STAT_LINE];
    let n = file.read_at(&mut line, 0)?;
    if n == line.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("longer than {} bytes", line.len()),
        ));
    }
    parse_stat_record(&line[..n])
}

fn parse_stat_record(text: &[u8]) -> io::Result<ProcStat> {
    std::str::from_utf8(text)
        .ok()
        .and_then(parse_stat)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "a stat line of unexpected format",
            )
        })
}

/// Room for a whole `stat` line: 52 numbers and a name of at most 64 bytes fit many times.
const STAT_LINE: usize = 2048;

/// A `/proc` file that the kernel writes as one record (`stat`, `status`), read whole in one
/// call into `buffer`: such a file answers a first read with the whole record when it fits.
/// That is an open, a read and a close where `std::fs::read_to_string` also asks the size
/// (0 for `/proc`) and makes a small first read, twice as many calls, and a sweep makes these
/// reads for every process born during the run, several times per scan. A record that fills
/// the buffer is refused rather than taken for whole.
pub fn read_record<'b>(path: &Path, buffer: &'b mut [u8]) -> io::Result<&'b [u8]> {
    let mut file = std::fs::File::open(path)?;
    read_record_from(&mut file, buffer).map_err(|e| with_path(e, path))
}

/// [`read_record`] of a file already open.
pub fn read_record_from<'b>(
    file: &mut std::fs::File,
    buffer: &'b mut [u8],
) -> io::Result<&'b [u8]> {
    use std::io::Read as _;
    let n = file.read(buffer)?;
    if n == buffer.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("longer than {} bytes", buffer.len()),
        ));
    }
    Ok(&buffer[..n])
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    if e.kind() == io::ErrorKind::InvalidData {
        io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    } else {
        e
    }
}

/// A `/proc` file of any length (an environment), read with a first buffer of `expected`
/// bytes and no size asked: every read of `environ` copies from the process's memory, so
/// one large read costs less than the many small ones `std::fs::read` starts with.
pub fn read_whole(path: &Path, expected: usize) -> io::Result<Vec<u8>> {
    read_whole_from(&mut std::fs::File::open(path)?, expected)
}

/// [`read_whole`] of a file already open.
pub fn read_whole_from(file: &mut std::fs::File, expected: usize) -> io::Result<Vec<u8>> {
    read_growing(file, expected, false)
}

/// An open `/proc/<pid>/environ`, read whole, with a first buffer of `expected` bytes. The
/// kernel fills each read of an environment as far as it goes (it copies from the process's
/// memory until the buffer is full or the environment ends, and a copy that fails fails the
/// read), so a read that comes back short is the end, and the read of nothing that
/// [`read_whole_from`] ends with is spared: a sweep reads the environment of every process
/// born during the run.
pub fn read_environ_from(file: &mut std::fs::File, expected: usize) -> io::Result<Vec<u8>> {
    read_growing(file, expected, true)
}

/// Reads `file` to its end into a buffer of `expected` bytes, doubled whenever it is full;
/// the end is a read of nothing, or with `short_is_end` a read that filled less than asked.
fn read_growing(
    file: &mut std::fs::File,
    expected: usize,
    short_is_end: bool,
) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = vec![0u8; expected.max(64)];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            bytes.resize(len * 2, 0);
        }
        let asked = bytes.len() - len;
        match file.read(&mut bytes[len..]) {
            Ok(n) => {
                len += n;
                if n == 0 || (short_is_end && n < asked) {
                    bytes.truncate(len);
                    return Ok(bytes);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The identity of a live (or not yet reaped) process.
pub fn identity(pid: u32) -> io::Result<ProcessIdentity> {
    read_stat(pid).map(|s| s.identity())
}

/// True while the process named by `id` still exists (a zombie counts: its pid is not free).
/// A different process under the same pid is not it.
pub fn is_same_process(id: ProcessIdentity) -> bool {
    matches!(read_stat(id.pid), Ok(s) if s.start_ticks == id.start_ticks)
}

/// A live thread of process `pid` other than its leader, read from `/proc/<pid>/task/`. A
/// thread-group leader that exited while other threads of its process run reads as a zombie
/// (`Z`) in its own stat, yet the process lives on in those threads: it still holds memory,
/// an environment and work. `None` once no other thread lives (or the task list is gone with
/// the process).
pub fn live_thread(pid: u32) -> Option<ProcStat> {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    for entry in std::fs::read_dir(&tasks).ok()?.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if tid == pid {
            continue;
        }
        match read_stat_at(&tasks, tid) {
            Ok(thread) if !thread.is_zombie() && thread.state != 'X' => return Some(thread),
            _ => {}
        }
    }
    None
}

/// True once the process has ended: a zombie with no live thread left. A zombie leader whose
/// other threads still run has not ended and is never passed over as a zombie.
pub fn has_ended(stat: &ProcStat) -> bool {
    stat.is_zombie() && live_thread(stat.pid).is_none()
}

/// Every pid under `/proc` at the moment of listing.
pub fn list_pids() -> io::Result<Vec<u32>> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        if let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    Ok(pids)
}

/// The processes whose process group is `pgid`. Processes that vanish while the table is
/// read are skipped: they are no longer members.
pub fn group_members(pgid: u32) -> io::Result<Vec<ProcStat>> {
    let mut members = Vec::new();
    for pid in list_pids()? {
        match read_stat(pid) {
            Ok(stat) if stat.pgrp == pgid => members.push(stat),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_read_whole_in_one_call_and_one_that_fills_the_buffer_is_refused() {
        let mut line = [0u8; STAT_LINE];
        let own = read_record(Path::new("/proc/self/stat"), &mut line).unwrap();
        let parsed = parse_stat(std::str::from_utf8(own).unwrap()).unwrap();
        assert_eq!(parsed.pid, std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("long");
        std::fs::write(&long, [b'x'; 64]).unwrap();
        let mut small = [0u8; 64];
        let refused = read_record(&long, &mut small).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData, "{refused}");
        let mut room = [0u8; 65];
        assert_eq!(read_record(&long, &mut room).unwrap(), &[b'x'; 64][..]);
    }

    #[test]
    fn a_file_longer_than_expected_is_read_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("environ");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_whole(&path, 64).unwrap(), bytes);
        assert_eq!(read_whole(&path, 1 << 20).unwrap(), bytes);
        std::fs::write(&path, b"").unwrap();
        assert!(read_whole(&path, 16).unwrap().is_empty());
        let own = read_whole(Path::new("/proc/self/environ"), 16).unwrap();
        assert!(
            own.split(|b| *b == 0).any(|e| e.starts_with(b"PATH=")),
            "the whole environment"
        );
    }

    #[test]
    fn parses_a_name_with_spaces_and_parentheses() {
        let line = "4242 (evil) (name x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            s,
            ProcStat {
                pid: 4242,
                state: 'S',
                ppid: 1,
                pgrp: 4242,
                session: 4242,
                flags: 4194560,
                start_ticks: 987654,
                vsize: 1000,
            }
        );
    }

    #[test]
    fn tells_kernel_threads_from_user_processes() {
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 24 0 0";
        assert!(parse_stat(kthread).unwrap().is_kernel_thread());
        assert!(!read_stat(std::process::id()).unwrap().is_kernel_thread());
        assert!(!read_stat(std::process::id()).unwrap().has_no_memory());
    }

    #[test]
    fn a_zombie_being_reaped_has_no_group() {
        let line = "5320 (chain) Z 0 -1 -1 0 -1 4228164 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!((s.ppid, s.pgrp, s.session, s.start_ticks), (0, 0, 0, 777));
        assert!(s.is_zombie());
        assert!(s.has_no_memory());
    }

    #[test]
    fn refuses_truncated_lines() {
        assert!(parse_stat("12 (x) S 1 12 12").is_none());
        // Up to the start time but no memory size: cut short, not a process without memory.
        assert!(parse_stat("12 (x) S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5").is_none());
        assert!(parse_stat("").is_none());
        assert!(parse_stat("x (y) S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 5").is_none());
    }

    #[test]
    fn reads_this_process_and_finds_it_in_its_group() {
        let me = read_stat(std::process::id()).unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(me.start_ticks > 0);
        assert!(is_same_process(me.identity()));
        let moved = ProcessIdentity {
            pid: me.pid,
            start_ticks: me.start_ticks + 1,
        };
        assert!(
            !is_same_process(moved),
            "another start time is another process"
        );
        let members = group_members(me.pgrp).unwrap();
        assert!(members.iter().any(|m| m.pid == me.pid));
    }

    #[test]
    fn a_missing_process_reads_as_not_found() {
        // Above the kernel's largest pid_max (2^22), so never a live pid.
        let err = read_stat(5_000_000).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
