//! The board between the core and the disk usage walk (`daemon/disk_usage.rs`): the walk
//! posts its last measure here for `daemon status`, and the core says here which
//! directories changed (a run that ended, a retention batch that removed some), so that the
//! figure follows a big run at once instead of at the next periodic walk.

use homebased_shared::wire::RunDirUsage;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};

/// What the core tells the walk.
#[derive(Debug, PartialEq, Eq)]
pub enum Changed {
    /// One run or job directory: measure it again (or drop it, if it is gone).
    Dir(PathBuf),
    /// Many at once (retention removed a batch): walk everything again.
    All,
}

#[derive(Clone, Default)]
pub struct RunDirUsageBoard {
    last: Arc<Mutex<Option<RunDirUsage>>>,
    changes: Arc<Mutex<Option<mpsc::Sender<Changed>>>>,
}

impl RunDirUsageBoard {
    /// The last measure; `None` until the first walk finished.
    pub fn last(&self) -> Option<RunDirUsage> {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The walk posts a measure.
    pub fn post(&self, usage: RunDirUsage) {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(usage);
    }

    /// The walk subscribes to changes; the receiver it gets is the only one.
    pub fn subscribe(&self) -> mpsc::Receiver<Changed> {
        let (tx, rx) = mpsc::channel();
        *self.changes.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        rx
    }

    /// The core says a directory changed; nothing happens while no walk listens.
    pub fn changed(&self, what: Changed) {
        if let Some(tx) = &*self.changes.lock().unwrap_or_else(PoisonError::into_inner) {
            let _ = tx.send(what);
        }
    }
}
