//! The key that makes a shared reading of the process table trustworthy. A workload runs as
//! the same user as its worker and knows `HOMEBASED_HOME`: it can write, replace or delete
//! anything under `<home>/sweep`, including a snapshot of its own that leaves out a process it
//! wants to outlive the cleanup. So a snapshot is used only if it carries a MAC (HMAC-SHA256)
//! under a key that never touches the file system, the environment or a command line: the
//! daemon draws it at start, holds it in memory, and hands it to each worker it starts
//! through a pipe that the worker empties and closes before its workload exists.
//!
//! What that leaves a workload: reading the key needs ptrace-attach rights over the daemon or
//! a worker (`/proc/<pid>/mem`, `process_vm_readv`, `ptrace`), and with those it could rewrite
//! the worker's verdicts directly; the exchange is exactly as trustworthy as the worker
//! itself (docs/RELIABILITY.md, "What a workload can do to its cleanup").

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::OwnedFd;

/// How many bytes a key has.
pub const KEY_LEN: usize = 32;

/// How many bytes a MAC has, and how many hex digits it takes on a snapshot's first line.
pub const MAC_LEN: usize = 32;

/// One daemon's key for the snapshots its workers share. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SweepKey([u8; KEY_LEN]);

impl fmt::Debug for SweepKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SweepKey(..)")
    }
}

impl SweepKey {
    /// A fresh key from the kernel's random source.
    pub fn generate() -> io::Result<SweepKey> {
        let mut key = [0u8; KEY_LEN];
        getrandom::getrandom(&mut key).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(SweepKey(key))
    }

    #[cfg(test)]
    pub(crate) fn from_bytes(key: [u8; KEY_LEN]) -> SweepKey {
        SweepKey(key)
    }

    /// A pipe's reading end that holds the key and nothing more (its writing end is closed):
    /// the descriptor to place in a worker being started. A key fits a pipe's buffer, so the
    /// write never waits for the reader.
    pub fn to_pipe(&self) -> io::Result<OwnedFd> {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        File::from(write).write_all(&self.0)?;
        Ok(read)
    }

    /// Takes the key from `fd` (a pipe from [`SweepKey::to_pipe`]) and closes it: nothing of
    /// the key stays reachable through this process's descriptors.
    pub fn take_from(fd: OwnedFd) -> io::Result<SweepKey> {
        let mut file = File::from(fd);
        let mut key = [0u8; KEY_LEN];
        file.read_exact(&mut key)?;
        let mut more = [0u8; 1];
        if file.read(&mut more)? != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the sweep key's descriptor holds more than a key",
            ));
        }
        Ok(SweepKey(key))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // An HMAC takes a key of any length: this cannot fail.
        match Hmac::<Sha256>::new_from_slice(&self.0) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        }
    }

    /// The MAC of `parts`, one after another, in lower-case hex.
    pub fn sign(&self, parts: &[&[u8]]) -> String {
        let mut mac = self.mac();
        for part in parts {
            mac.update(part);
        }
        hex(&mac.finalize().into_bytes())
    }

    /// Whether `tag` (lower-case hex) is the MAC of `parts`, compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let Some(tag) = unhex(tag) else {
            return false;
        };
        let mut mac = self.mac();
        for part in parts {
            mac.update(part);
        }
        mac.verify_slice(&tag).is_ok()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &[u8]) -> Option<[u8; MAC_LEN]> {
    if text.len() != MAC_LEN * 2 {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; MAC_LEN];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd as _;

    #[test]
    fn a_signature_verifies_under_its_key_only_and_for_its_bytes_only() {
        let key = SweepKey::from_bytes([7; KEY_LEN]);
        let other = SweepKey::from_bytes([8; KEY_LEN]);
        let tag = key.sign(&[b"123\n", b"{}"]);
        assert_eq!(tag.len(), MAC_LEN * 2);
        assert!(key.verify(&[b"123\n", b"{}"], tag.as_bytes()));
        // The same bytes cut elsewhere are the same message.
        assert!(key.verify(&[b"123\n{", b"}"], tag.as_bytes()));
        assert!(!key.verify(&[b"124\n", b"{}"], tag.as_bytes()));
        assert!(!other.verify(&[b"123\n", b"{}"], tag.as_bytes()));
        assert!(!key.verify(&[b"123\n", b"{}"], b"not hex"));
        assert!(!key.verify(&[b"123\n", b"{}"], tag.to_uppercase().as_bytes()));
    }

    #[test]
    fn a_key_travels_through_its_pipe_whole_and_the_pipe_is_closed_after() {
        let key = SweepKey::generate().unwrap();
        assert_ne!(key, SweepKey::generate().unwrap(), "two draws differ");
        let pipe = key.to_pipe().unwrap();
        let fd = pipe.as_raw_fd();
        let taken = SweepKey::take_from(pipe).unwrap();
        assert_eq!(taken, key);
        assert_eq!(format!("{taken:?}"), "SweepKey(..)", "never printed");
        // SAFETY: probing a descriptor number without using it.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1, "closed");
    }

    #[test]
    fn a_descriptor_with_too_little_or_too_much_is_no_key() {
        for len in [KEY_LEN - 1, KEY_LEN + 1] {
            let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
            File::from(write).write_all(&vec![1u8; len]).unwrap();
            assert!(SweepKey::take_from(read).is_err());
        }
    }
}
