//! What the core keeps of what is read beside the store: the GPU sampler's last sample and
//! each live run's memory peak, when resources were last read (the sampler idles without a
//! reader), the last measure of the run directories (`daemon/disk_usage.rs`), and the
//! counters of `/metrics`. `resource list`, `daemon status` and `GET /metrics` show them;
//! none of them decides anything.

use super::run_dir_usage::RunDirUsageBoard;
use super::Core;
use crate::metrics::Counters;
use crate::sampler::{Demand, Sample};
use homebased_shared::ids::TaskId;
use homebased_shared::time::Millis;
use std::collections::HashMap;
use std::sync::Arc;

pub(super) struct Readings {
    /// The GPU sampler's last result (`daemon/sampling.rs` posts it).
    pub(super) gpu_sample: Option<Sample>,
    /// Each live run's GPU memory peak as last written to the store, so that a sample that
    /// raises no peak writes nothing.
    pub(super) gpu_peaks: HashMap<TaskId, u64>,
    /// When resources were last read: the sampler idles a minute after it.
    pub(super) resources_read_at: Arc<Demand>,
    /// The last measure of run and job directories, for `daemon status`.
    pub(super) run_dir_usage: RunDirUsageBoard,
    /// The counters and wait histogram of `/metrics`, since this daemon started.
    pub(super) metrics: Counters,
}

impl Readings {
    /// Nothing read yet, at `now`.
    pub(super) fn new(now: Millis) -> Readings {
        Readings {
            gpu_sample: None,
            gpu_peaks: HashMap::new(),
            resources_read_at: Arc::new(Demand::new(now)),
            run_dir_usage: RunDirUsageBoard::default(),
            metrics: Counters::new(),
        }
    }
}

impl Core {
    /// Keeps the sample, and raises each live run's GPU memory peak that it exceeds (one
    /// transaction, only when a peak rose or a run was seen the first time).
    pub(super) fn record_gpu_sample(&mut self, sample: Sample) {
        self.readings
            .gpu_peaks
            .retain(|task, _| sample.run_memory.contains_key(task));
        let raised: Vec<(TaskId, u64)> = sample
            .run_memory
            .iter()
            .filter(|(task, mib)| {
                self.readings
                    .gpu_peaks
                    .get(task)
                    .is_none_or(|peak| *mib > peak)
            })
            .map(|(task, mib)| (*task, *mib))
            .collect();
        if !raised.is_empty() {
            let written = self.store.write(|tx| {
                for (task, mib) in &raised {
                    crate::store::runs::raise_gpu_peak(tx, *task, *mib)?;
                }
                Ok(())
            });
            match written {
                Ok(()) => self.readings.gpu_peaks.extend(raised),
                // Kept unwritten: the next sample tries again.
                Err(e) => tracing::warn!(error = %e.message, "cannot record GPU memory peaks"),
            }
        }
        self.readings.gpu_sample = Some(sample);
    }
}
