-- Schema version 17: every event has an explicit id that is never handed out twice, the cursor
-- of a thread's events (`GET /v1/threads/{thread}/events`, `events::for_thread`).
--
-- The cursor was the implicit rowid, which SQLite gives as one more than the largest rowid
-- in the table: once retention (`history prune`, `[history] keep`) deleted the newest events,
-- the next event took a rowid a reader had already passed, so a reader holding a cursor
-- skipped it, or read a different event under an id it had seen.
--
-- `id INTEGER PRIMARY KEY AUTOINCREMENT` rather than a counter kept in a table of our own:
-- SQLite itself gives each row an id larger than any the table ever held (the high mark is
-- kept in SQLite's own `sqlite_sequence` table, written in the inserting transaction, so a
-- rolled-back insert takes none and a deleted newest id is never given again), for every
-- statement that inserts an event (a local append, a pulled event) without any of them
-- having to remember a counter. The id is the rowid itself (an alias), so the table stays
-- ordered by it and a thread's read pages it by key.
--
-- Existing events keep their order and get their rowid as id, so a cursor answered before
-- the upgrade means the same place after it; new events go on above the largest. (Events
-- pruned before the upgrade left no mark: a cursor handed out past those is the old limit's
-- for once.)
--
-- The table is rebuilt with every column, CHECK and index it had; `(job, seq)` stays unique
-- (a pulled event is stored once on it) but is no longer the primary key. Nothing refers to
-- `events` and no trigger is on it.
CREATE TABLE events_v17 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job             TEXT NOT NULL,
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    kind            TEXT NOT NULL,
    body            TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    delivered_at    INTEGER,
    suppressed      INTEGER NOT NULL DEFAULT 0 CHECK (suppressed IN (0, 1)),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER,
    last_error      TEXT,
    origin          TEXT CHECK (origin IS NULL OR length(origin) = 36),
    fleet_seq       INTEGER CHECK (fleet_seq IS NULL OR fleet_seq >= 1),
    authority       TEXT CHECK (authority IS NULL OR length(authority) = 36),
    UNIQUE (job, seq),
    CHECK ((origin IS NULL) = (fleet_seq IS NULL)),
    CHECK (origin IS NULL OR authority IS NULL)
);
INSERT INTO events_v17 (id, job, seq, kind, body, created_at, delivered_at, suppressed,
        attempts, next_attempt_at, last_error, origin, fleet_seq, authority)
    SELECT rowid, job, seq, kind, body, created_at, delivered_at, suppressed,
        attempts, next_attempt_at, last_error, origin, fleet_seq, authority
    FROM events ORDER BY rowid;
DROP TABLE events;
ALTER TABLE events_v17 RENAME TO events;
CREATE INDEX events_pending ON events(job, seq) WHERE delivered_at IS NULL AND suppressed = 0;
CREATE UNIQUE INDEX events_fleet ON events(fleet_seq) WHERE fleet_seq IS NOT NULL;
CREATE INDEX events_origin ON events(origin, fleet_seq) WHERE origin IS NOT NULL;
CREATE INDEX events_pending_order ON events(created_at, job, seq)
    WHERE delivered_at IS NULL AND suppressed = 0 AND origin IS NULL;
CREATE INDEX events_retry ON events(next_attempt_at)
    WHERE delivered_at IS NULL AND suppressed = 0 AND origin IS NULL
      AND next_attempt_at IS NOT NULL;

-- A thread's read finds its jobs by index (local ones along `jobs_thread`, remote ones
-- submitted here along this one: `fleet_routes` was scanned whole for every read) and then
-- each job's events after the cursor along `events_job_id`, so it costs the thread's jobs and
-- the events it answers, not the store's history. The thread is not copied into `events`:
-- `jobs.thread` and `fleet_routes.thread` stay the one place that says which thread a job is
-- on.
CREATE INDEX fleet_routes_thread ON fleet_routes(thread);
CREATE INDEX events_job_id ON events(job, id);
