-- Schema version 3: the digest of a submission as it was sent (spec and the submitter's
-- working directory), so that a retry of the same request returns the job without checking
-- the submitter's files again (its cwd or program may be gone by then).
ALTER TABLE jobs ADD COLUMN request_digest TEXT;
