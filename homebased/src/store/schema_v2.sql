-- Schema version 2: event delivery, blocked-notice episodes and check-due notices.

-- Delivery of a job's oldest pending event: failed attempts back off (1 s doubling to
-- 60 s). `delivered_at` is set only after the sink confirmed; `suppressed` notices keep
-- their seq and are never delivered.
ALTER TABLE events ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0);
ALTER TABLE events ADD COLUMN next_attempt_at INTEGER;
ALTER TABLE events ADD COLUMN last_error TEXT;

-- The seq of a run's one JOB_CHECK_DUE, so that a restart never fires it twice.
ALTER TABLE runs ADD COLUMN check_due_seq INTEGER CHECK (check_due_seq IS NULL OR check_due_seq >= 1);

-- One row per blocking episode: the stretch during which the same job stays the first
-- blocked queued job. At most one is open; it survives daemon restarts.
CREATE TABLE notice_episodes (
    id              TEXT PRIMARY KEY,
    job             TEXT NOT NULL REFERENCES jobs(id),
    started_at      INTEGER NOT NULL,
    ended_at        INTEGER CHECK (ended_at IS NULL OR ended_at >= started_at),
    -- What the latest pass saw: the delay to use and the blockers the notice lists.
    yield_requested INTEGER NOT NULL DEFAULT 0 CHECK (yield_requested IN (0, 1)),
    blockers        TEXT NOT NULL DEFAULT '[]',
    -- The episode's one JOB_BLOCKED (delivered or suppressed: see its events row).
    notified_seq    INTEGER CHECK (notified_seq IS NULL OR notified_seq >= 1)
);
CREATE UNIQUE INDEX notice_episodes_one_open ON notice_episodes((ended_at IS NULL))
    WHERE ended_at IS NULL;
CREATE INDEX notice_episodes_job ON notice_episodes(job, started_at);
