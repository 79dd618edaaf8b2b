-- Schema version 9: a slotted job's place within its level is a sparse ordering key
-- (`slot_key`), no longer its dense 1-based position, so that a job leaving, joining at
-- either end or moving between two neighbours writes its own row only (see
-- `placement/keys.rs`). The dense position users see is computed on read.
--
-- The rename carries the column's CHECKs (`>= 1`; slotted exactly while queued or active)
-- and the indexes over it (`jobs_slot`, unique per level among slotted jobs; `jobs_ended`)
-- along with it.
ALTER TABLE jobs RENAME COLUMN position TO slot_key;
-- Keys = FIRST + (old position - 1) * GAP (2^61 and 2^32, `placement::keys`). Every new key
-- is above every old position, so no row collides with one not yet converted.
UPDATE jobs SET slot_key = 2305843009213693952 + (slot_key - 1) * 4294967296
    WHERE slot_key IS NOT NULL;

-- How many jobs hold a slot in each level, kept by the triggers below whatever statement
-- changes a slot: the dense position of a job joining the back (the submit answer) and the
-- level lengths a move needs, without counting the level.
CREATE TABLE queue_levels (
    priority INTEGER PRIMARY KEY CHECK (priority IN (0, 1, 2)),
    live     INTEGER NOT NULL CHECK (live >= 0)
);
INSERT INTO queue_levels (priority, live)
    SELECT l.p, (SELECT COUNT(*) FROM jobs j WHERE j.priority = l.p AND j.slot_key IS NOT NULL)
    FROM (SELECT 0 AS p UNION ALL SELECT 1 UNION ALL SELECT 2) l;

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
