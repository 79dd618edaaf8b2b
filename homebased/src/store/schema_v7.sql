-- Schema version 7: Fleet's remote jobs (SPEC section 13). Named schema_v7.sql in the order of
-- the branch that added it; renumber at merge so versions stay dense and ordered.

-- On the authority: the machine a remote job was submitted from. NULL for a local job.
ALTER TABLE jobs ADD COLUMN origin TEXT CHECK (origin IS NULL OR length(origin) = 36);

-- The event log is rebuilt without its reference to jobs: on the origin it also holds the
-- events pulled from an authority, whose jobs live in the authority's store only. Local events
-- still belong to a local job (the core appends them in the transaction of the job's change).
--   origin, fleet_seq: on the authority, an event of a remote job: never delivered here, served
--     to its origin by `GET /v1/fleet/events` in fleet_seq order (the origin's cursor).
--   authority: on the origin, an event pulled from that machine, delivered here like a local one.
CREATE TABLE events_v7 (
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
    PRIMARY KEY (job, seq),
    CHECK ((origin IS NULL) = (fleet_seq IS NULL)),
    CHECK (origin IS NULL OR authority IS NULL)
);
INSERT INTO events_v7 (job, seq, kind, body, created_at, delivered_at, suppressed, attempts,
                       next_attempt_at, last_error)
    SELECT job, seq, kind, body, created_at, delivered_at, suppressed, attempts,
           next_attempt_at, last_error FROM events;
DROP TABLE events;
ALTER TABLE events_v7 RENAME TO events;
CREATE INDEX events_pending ON events(job, seq) WHERE delivered_at IS NULL AND suppressed = 0;
CREATE UNIQUE INDEX events_fleet ON events(fleet_seq) WHERE fleet_seq IS NOT NULL;
CREATE INDEX events_origin ON events(origin, fleet_seq) WHERE origin IS NOT NULL;

-- On the origin: one row per remote submit, stored before the spec is forwarded. `pending`
-- until the authority's definite answer settles it: `accepted` (answer: the submit result)
-- or `rejected` (answer: the error), which a retry with the same job UUID and spec returns.
-- `ended` is set once the job's terminal event was pulled: no pull is needed for it after.
CREATE TABLE fleet_routes (
    job        TEXT PRIMARY KEY NOT NULL CHECK (length(job) = 36),
    authority  TEXT NOT NULL CHECK (length(authority) = 36),
    thread     TEXT NOT NULL CHECK (length(thread) = 36),
    digest     TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected')),
    answer     TEXT,
    ended      INTEGER NOT NULL DEFAULT 0 CHECK (ended IN (0, 1)),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    CHECK ((state = 'pending') = (answer IS NULL))
);
CREATE INDEX fleet_routes_live ON fleet_routes(authority) WHERE ended = 0;

-- On the origin: per authority, the fleet_seq of the last event pulled from it, written in
-- the transaction that stores the pulled events.
CREATE TABLE fleet_cursors (
    authority TEXT PRIMARY KEY NOT NULL CHECK (length(authority) = 36),
    after     INTEGER NOT NULL CHECK (after >= 0)
);
