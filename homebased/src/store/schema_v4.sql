-- Schema version 4: the submitting CLI's environment (a JSON object of NAME: value), kept
-- with the job but outside its canonical spec and digest. NULL: none was captured (a job
-- submitted through Fleet runs with the authority daemon's environment, as did older jobs).
ALTER TABLE jobs ADD COLUMN env TEXT;
