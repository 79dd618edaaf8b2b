-- Schema version 12: dependencies between jobs (SPEC sections 3 and 4, `after`). One row per
-- job named in a job's `after`, in the order given. Both ends are jobs of this machine that
-- existed when the row was written, so no cycle can be stored. `after` is indexed for the
-- other direction: the jobs waiting on a job that has just ended, and retention, which never
-- removes a job that a live job still names.
CREATE TABLE job_dependencies (
    job      TEXT NOT NULL REFERENCES jobs(id),
    ord      INTEGER NOT NULL CHECK (ord BETWEEN 0 AND 31),
    after    TEXT NOT NULL REFERENCES jobs(id),
    PRIMARY KEY (job, ord),
    UNIQUE (job, after),
    CHECK (job <> after)
) WITHOUT ROWID;
CREATE INDEX job_dependencies_after ON job_dependencies(after);
