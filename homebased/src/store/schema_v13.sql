-- Schema version 13: the peak GPU memory a run's own processes were seen using (SPEC
-- section 7), in MiB, raised by the GPU sampler while the run holds its lanes. NULL while no
-- sample has seen the run (sampling off or failing for its whole life), which is not 0.
ALTER TABLE runs ADD COLUMN gpu_memory_peak_mib INTEGER CHECK (gpu_memory_peak_mib IS NULL OR gpu_memory_peak_mib >= 0);
