//! `worker.reserve`: disk space set aside for the worker's own records as soon as the
//! workload has started (or at once, when an earlier worker of the run left one), so that a
//! full disk never turns a finished workload into a lost run and, once the reserve is made,
//! delays nothing the daemon waits for. (A workload that fills the disk in the moment before
//! the reserve is made leaves the records to wait for space: a delay, never a loss.)
//!
//! The reserve is a file of [`CHUNKS`] × [`CHUNK`] bytes allocated for real (fallocate, or
//! zeros, fsynced, where the filesystem cannot fallocate), in the run directory, so on the
//! filesystem the records are written to. When a record cannot be written because the disk is
//! full, one chunk is given back (the file is truncated by a chunk) and the write is tried
//! again at once; once the reserve is spent the worker waits for space like any writer. A
//! record is a few hundred bytes, so each chunk is room for a record, its temporary copy and
//! a few `worker.log` lines that may slip in between; 8 chunks cover `worker.json` twice,
//! `exit.json` and a large `cleanup.json`. The file is removed when the worker exits.

use nix::errno::Errno;
use nix::fcntl::{fallocate, FallocateFlags};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// One share of the reserve, given back per failed write.
pub const CHUNK: u64 = 32 * 1024;
/// How many shares the reserve holds when it could be made whole.
pub const CHUNKS: u64 = 8;

#[derive(Debug)]
pub struct Reserve {
    path: PathBuf,
    /// The reserve's file while it still holds space.
    file: Option<File>,
    /// Bytes still held.
    held: u64,
}

impl Reserve {
    /// A reserve at `path` that holds nothing yet: [`Reserve::fill`] allocates it.
    pub fn at(path: PathBuf) -> Reserve {
        Reserve {
            path,
            file: None,
            held: 0,
        }
    }

    /// Bytes still held.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// Allocates the whole reserve if it holds nothing. On a full disk this fails and the
    /// reserve stays empty (the records then wait for space); nothing half-made is kept.
    pub fn fill(&mut self) -> io::Result<()> {
        if self.held > 0 {
            return Ok(());
        }
        let size = CHUNK * CHUNKS;
        // A link planted at the reserve's name is refused: truncating and filling its target
        // would destroy another file. Non-blocking: a FIFO there fails at once.
        let made = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
            .and_then(|mut file| {
                // Zeros may sit in the page cache without blocks behind them until writeback
                // (a copy-on-write or network filesystem), so their allocation is forced now
                // while a failure is still harmless. fallocate has taken the blocks when it
                // returns, and the reserve is worth nothing after a crash of the machine, so
                // that path needs no fsync: it was one journal commit on the start path.
                if allocate(&mut file, size)? == Allocated::ByWriting {
                    file.sync_all()?;
                }
                Ok(file)
            });
        match made {
            Ok(file) => {
                self.file = Some(file);
                self.held = size;
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                Err(e)
            }
        }
    }

    /// Gives one chunk back to the filesystem. False when nothing was left to give.
    pub fn release_chunk(&mut self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        self.held = self.held.saturating_sub(CHUNK);
        // Truncation frees the blocks past the new end; if it fails the file goes entirely.
        if self.held == 0 || file.set_len(self.held).is_err() {
            self.remove();
        }
        true
    }

    fn remove(&mut self) {
        self.file = None;
        self.held = 0;
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Reserve {
    /// The reserve is the worker's alone: it never outlives the worker's records.
    fn drop(&mut self) {
        if self.file.is_some() {
            self.remove();
        }
    }
}

/// How [`allocate`] got its blocks.
#[derive(Debug, PartialEq, Eq)]
enum Allocated {
    ByFallocate,
    ByWriting,
}

/// Real blocks, not a sparse file: fallocate, else zeros written out.
fn allocate(file: &mut File, size: u64) -> io::Result<Allocated> {
    let len = i64::try_from(size).map_err(io::Error::other)?;
    match fallocate(&*file, FallocateFlags::empty(), 0, len) {
        Ok(()) => Ok(Allocated::ByFallocate),
        Err(Errno::EOPNOTSUPP) => {
            let zeros = vec![0u8; usize::try_from(CHUNK).map_err(io::Error::other)?];
            for _ in 0..size / CHUNK {
                file.write_all(&zeros)?;
            }
            Ok(Allocated::ByWriting)
        }
        Err(e) => Err(e.into()),
    }
}

/// True for the errors that more space would cure.
pub fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_given_back_chunk_by_chunk_then_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("worker.reserve");
        let mut reserve = Reserve::at(path.clone());
        assert!(
            !reserve.release_chunk(),
            "an unfilled reserve holds nothing"
        );
        reserve.fill().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), CHUNK * CHUNKS);
        assert!(reserve.release_chunk());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            CHUNK * (CHUNKS - 1)
        );
        for _ in 1..CHUNKS {
            assert!(reserve.release_chunk());
        }
        assert!(!path.exists());
        assert!(!reserve.release_chunk());
        reserve.fill().unwrap();
        drop(reserve);
        assert!(!path.exists(), "dropping the reserve removes it");
    }
}
