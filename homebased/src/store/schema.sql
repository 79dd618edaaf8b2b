-- Schema version 1. Impossible states are made unrepresentable by CHECK constraints and
-- unique indexes, not only by code.

CREATE TABLE machine (
    singleton  INTEGER PRIMARY KEY CHECK (singleton = 1),
    id         TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE TABLE resources (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    device     INTEGER UNIQUE CHECK (device IS NULL OR device >= 0),
    origin     TEXT NOT NULL CHECK (origin IN ('detected', 'fallback', 'manual')),
    created_at INTEGER NOT NULL
);

CREATE TABLE jobs (
    id          TEXT PRIMARY KEY,
    thread      TEXT NOT NULL,
    name        TEXT NOT NULL,
    priority    INTEGER NOT NULL CHECK (priority IN (0, 1, 2)),
    -- Dense 1-based slot within the level while the job is queued or active.
    position    INTEGER CHECK (position IS NULL OR position >= 1),
    -- (moves shift slots through a disjoint range above 1e9, since SQLite checks unique
    -- indexes row by row)
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
    last_stop_cause TEXT CHECK (last_stop_cause IN ('yield', 'restart', 'user_cancel')),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    CHECK ((state IN ('queued', 'active')) = (position IS NOT NULL)),
    CHECK (resume = 0 OR state IN ('queued', 'active'))
);
CREATE UNIQUE INDEX jobs_slot ON jobs(priority, position) WHERE position IS NOT NULL;
CREATE INDEX jobs_thread ON jobs(thread);

CREATE TABLE runs (
    task        TEXT PRIMARY KEY,
    job         TEXT NOT NULL REFERENCES jobs(id),
    resource    TEXT NOT NULL REFERENCES resources(id),
    run_number  INTEGER NOT NULL CHECK (run_number >= 1),
    step        INTEGER NOT NULL CHECK (step >= 0),
    resume      INTEGER NOT NULL CHECK (resume IN (0, 1)),
    status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'preempted', 'lost')),
    -- The phase while the run holds its resource; NULL once the resource is released.
    phase       TEXT CHECK (phase IN ('launching', 'executing', 'stopping', 'cleaning', 'attention')),
    stop_cause  TEXT CHECK (stop_cause IN ('yield', 'restart', 'user_cancel')),
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
    UNIQUE (job, run_number),
    CHECK ((phase = 'stopping') <= (stop_cause IS NOT NULL)),
    CHECK ((stop_cause IS NULL) = (stop_requested_at IS NULL)),
    CHECK ((phase = 'executing') <= (started_at IS NOT NULL)),
    CHECK ((phase = 'attention') = (attention IS NOT NULL AND phase IS NOT NULL))
);
-- One run per resource and one run per job hold a lane at a time.
CREATE UNIQUE INDEX runs_one_per_resource ON runs(resource) WHERE phase IS NOT NULL;
CREATE UNIQUE INDEX runs_one_per_job ON runs(job) WHERE phase IS NOT NULL;
CREATE INDEX runs_job ON runs(job, run_number);

CREATE TABLE attentions (
    id          TEXT PRIMARY KEY,
    resource    TEXT NOT NULL REFERENCES resources(id),
    task        TEXT NOT NULL REFERENCES runs(task),
    failure     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    released_at INTEGER
);
CREATE UNIQUE INDEX attentions_one_open_per_resource ON attentions(resource) WHERE released_at IS NULL;

CREATE TABLE events (
    job          TEXT NOT NULL REFERENCES jobs(id),
    seq          INTEGER NOT NULL CHECK (seq >= 1),
    kind         TEXT NOT NULL,
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    suppressed   INTEGER NOT NULL DEFAULT 0 CHECK (suppressed IN (0, 1)),
    PRIMARY KEY (job, seq)
);
CREATE INDEX events_pending ON events(job, seq) WHERE delivered_at IS NULL AND suppressed = 0;

CREATE TABLE operations (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    result     TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
