-- Schema version 14: a run may be stopped for its job's `time_limit` (SPEC sections 3 and 4),
-- so the stop cause columns, `runs.stop_cause` and `jobs.last_stop_cause`, accept
-- 'time_limit'. SQLite cannot change a CHECK in place: both tables are rebuilt with every
-- column (in the order they have now, the ones added by later versions last), every CHECK,
-- foreign key and index they had, and their rowids; the four triggers of version 9 that keep
-- `queue_levels` go with the old `jobs` and are made again as they were.
--
-- `jobs` is the parent of `runs`, `notice_episodes` and `job_dependencies`: the store runs
-- migrations with foreign keys off and checks them before the version commits
-- (`store::migrate`), as SQLite's own procedure for such changes says. Nothing copied here
-- fires a trigger (they are on the old table), so `queue_levels` keeps its counts.

CREATE TABLE jobs_v14 (
    id          TEXT PRIMARY KEY,
    thread      TEXT NOT NULL,
    name        TEXT NOT NULL,
    priority    INTEGER NOT NULL CHECK (priority IN (0, 1, 2)),
    -- The job's sparse ordering key within its level while it is queued or active
    -- (version 9); the dense position users see is computed on read.
    slot_key    INTEGER CHECK (slot_key IS NULL OR slot_key >= 1),
    state       TEXT NOT NULL CHECK (state IN ('queued', 'active', 'succeeded', 'failed', 'cancelled')),
    resume      INTEGER NOT NULL DEFAULT 0 CHECK (resume IN (0, 1)),
    target      TEXT REFERENCES resources(id),
    spec        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    -- The submitter's captured PATH and HOME.
    env_path    TEXT,
    env_home    TEXT,
    step        INTEGER NOT NULL DEFAULT 0 CHECK (step >= 0),
    steps       INTEGER NOT NULL CHECK (steps BETWEEN 1 AND 32),
    runs        INTEGER NOT NULL DEFAULT 0,
    event_seq   INTEGER NOT NULL DEFAULT 0,
    failed_run  TEXT,
    last_stop_cause TEXT CHECK (last_stop_cause IN ('yield', 'restart', 'time_limit', 'user_cancel')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    request_digest TEXT,
    env         TEXT,
    origin      TEXT CHECK (origin IS NULL OR length(origin) = 36),
    CHECK ((state IN ('queued', 'active')) = (slot_key IS NOT NULL)),
    CHECK (resume = 0 OR state IN ('queued', 'active'))
);
INSERT INTO jobs_v14 (rowid, id, thread, name, priority, slot_key, state, resume, target, spec,
        digest, env_path, env_home, step, steps, runs, event_seq, failed_run, last_stop_cause,
        created_at, updated_at, request_digest, env, origin)
    SELECT rowid, id, thread, name, priority, slot_key, state, resume, target, spec,
        digest, env_path, env_home, step, steps, runs, event_seq, failed_run, last_stop_cause,
        created_at, updated_at, request_digest, env, origin
    FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v14 RENAME TO jobs;
CREATE UNIQUE INDEX jobs_slot ON jobs(priority, slot_key) WHERE slot_key IS NOT NULL;
CREATE INDEX jobs_thread ON jobs(thread);
CREATE INDEX jobs_ended ON jobs(updated_at, id) WHERE slot_key IS NULL;
CREATE TRIGGER queue_levels_insert AFTER INSERT ON jobs
    WHEN NEW.slot_key IS NOT NULL
BEGIN
    UPDATE queue_levels SET live = live + 1 WHERE priority = NEW.priority;
END;
CREATE TRIGGER queue_levels_leave AFTER UPDATE OF slot_key, priority ON jobs
    WHEN OLD.slot_key IS NOT NULL AND (NEW.slot_key IS NULL OR NEW.priority <> OLD.priority)
BEGIN
    UPDATE queue_levels SET live = live - 1 WHERE priority = OLD.priority;
END;
CREATE TRIGGER queue_levels_join AFTER UPDATE OF slot_key, priority ON jobs
    WHEN NEW.slot_key IS NOT NULL AND (OLD.slot_key IS NULL OR NEW.priority <> OLD.priority)
BEGIN
    UPDATE queue_levels SET live = live + 1 WHERE priority = NEW.priority;
END;
CREATE TRIGGER queue_levels_delete AFTER DELETE ON jobs
    WHEN OLD.slot_key IS NOT NULL
BEGIN
    UPDATE queue_levels SET live = live - 1 WHERE priority = OLD.priority;
END;

CREATE TABLE runs_v14 (
    task        TEXT PRIMARY KEY,
    job         TEXT NOT NULL REFERENCES jobs(id),
    resource    TEXT NOT NULL REFERENCES resources(id),
    run_number  INTEGER NOT NULL CHECK (run_number >= 1),
    step        INTEGER NOT NULL CHECK (step >= 0),
    resume      INTEGER NOT NULL CHECK (resume IN (0, 1)),
    status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'preempted', 'lost')),
    -- The phase while the run holds its resource; NULL once the resource is released.
    phase       TEXT CHECK (phase IN ('launching', 'executing', 'stopping', 'cleaning', 'attention')),
    stop_cause  TEXT CHECK (stop_cause IN ('yield', 'restart', 'time_limit', 'user_cancel')),
    stop_requested_at INTEGER,
    stop_for_job TEXT,
    reserved_at INTEGER NOT NULL,
    started_at  INTEGER,
    workload_started_at INTEGER,
    ended_at    INTEGER,
    process     TEXT,
    cleanup     TEXT,
    cleanup_attempt INTEGER NOT NULL DEFAULT 0,
    attention   TEXT,
    check_due_seq INTEGER CHECK (check_due_seq IS NULL OR check_due_seq >= 1),
    gpu_memory_peak_mib INTEGER CHECK (gpu_memory_peak_mib IS NULL OR gpu_memory_peak_mib >= 0),
    UNIQUE (job, run_number),
    CHECK ((phase = 'stopping') <= (stop_cause IS NOT NULL)),
    CHECK ((stop_cause IS NULL) = (stop_requested_at IS NULL)),
    CHECK ((phase = 'executing') <= (started_at IS NOT NULL)),
    CHECK ((phase = 'attention') = (attention IS NOT NULL AND phase IS NOT NULL))
);
INSERT INTO runs_v14 (rowid, task, job, resource, run_number, step, resume, status, phase,
        stop_cause, stop_requested_at, stop_for_job, reserved_at, started_at,
        workload_started_at, ended_at, process, cleanup, cleanup_attempt, attention,
        check_due_seq, gpu_memory_peak_mib)
    SELECT rowid, task, job, resource, run_number, step, resume, status, phase,
        stop_cause, stop_requested_at, stop_for_job, reserved_at, started_at,
        workload_started_at, ended_at, process, cleanup, cleanup_attempt, attention,
        check_due_seq, gpu_memory_peak_mib
    FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v14 RENAME TO runs;
-- One run per resource and one run per job hold a lane at a time.
CREATE UNIQUE INDEX runs_one_per_resource ON runs(resource) WHERE phase IS NOT NULL;
CREATE UNIQUE INDEX runs_one_per_job ON runs(job) WHERE phase IS NOT NULL;
CREATE INDEX runs_job ON runs(job, run_number);
