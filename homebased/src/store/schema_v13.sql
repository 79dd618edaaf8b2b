-- Schema version 13: the peak GPU memory a run's own processes were seen using (SPEC
-- section 7), in MiB, raised by the GPU sampler while the run holds its lanes. NULL while no
-- sample has seen the run (sampling off or failing for its whole life), which is not 0.
ALTER TABLE runs ADD COLUMN gpu_memory_peak_mib INTEGER CHECK (gpu_memory_peak_mib IS NULL OR gpu_memory_peak_mib >= 0);
-- A detected lane may be one MIG instance of a split card (SPEC section 7): the card's index
-- and the instance's number, both or neither. Such a lane has no `device` of its own (its
-- CUDA device is the MIG UUID recorded in `gpu_uuid`); each instance has one lane at most.
ALTER TABLE resources ADD COLUMN mig_gpu INTEGER CHECK (mig_gpu IS NULL OR mig_gpu >= 0);
ALTER TABLE resources ADD COLUMN mig_instance INTEGER CHECK (mig_instance IS NULL OR mig_instance >= 0);
CREATE UNIQUE INDEX resources_one_per_mig_instance ON resources(mig_gpu, mig_instance) WHERE mig_gpu IS NOT NULL;
-- The hardware UUID of a slice's card as the last detection listed it: a driver that reports
-- a process by the card's UUID rather than the slice's is attributed through it.
ALTER TABLE resources ADD COLUMN mig_card_uuid TEXT;
