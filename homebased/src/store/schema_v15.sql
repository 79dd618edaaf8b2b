-- Schema version 15: a run holds a set of lanes (SPEC section 4: a job with `gpus` N holds N
-- resources for its whole life, as one run). The single-lane run is a set of one: every run
-- has its lanes here, `runs.resource` stays its first lane in resource order.
--
-- A lane is held while its run holds lanes at all (`runs.phase` not NULL): `held` mirrors that,
-- and the unique index keeps a lane to one run at a time across every run's set. The trigger
-- releases every lane of a run in the very statement that ends its phase, so no commit can
-- free some lanes of a run and not the others.
ALTER TABLE jobs ADD COLUMN gpus INTEGER NOT NULL DEFAULT 1 CHECK (gpus >= 1);
-- A multi-lane job pinned with `resources`: its lanes' UUIDs, comma-separated in the order
-- given; NULL otherwise (`target` pins a one-lane job).
ALTER TABLE jobs ADD COLUMN target_lanes TEXT;
-- The spec's `time_limit` in milliseconds, beside the spec so that the scheduler reads it for
-- every queued job (backfill, SPEC section 4) without decoding each spec; NULL: no limit.
ALTER TABLE jobs ADD COLUMN time_limit_ms INTEGER CHECK (time_limit_ms IS NULL OR time_limit_ms > 0);

CREATE TABLE run_lanes (
    task     TEXT NOT NULL REFERENCES runs(task),
    ord      INTEGER NOT NULL CHECK (ord >= 0),
    resource TEXT NOT NULL REFERENCES resources(id),
    held     INTEGER NOT NULL CHECK (held IN (0, 1)),
    PRIMARY KEY (task, ord),
    UNIQUE (task, resource)
) WITHOUT ROWID;
CREATE UNIQUE INDEX run_lanes_one_run_per_lane ON run_lanes(resource) WHERE held = 1;
INSERT INTO run_lanes (task, ord, resource, held)
    SELECT task, 0, resource, phase IS NOT NULL FROM runs;

CREATE TRIGGER run_lanes_released AFTER UPDATE OF phase ON runs
    WHEN NEW.phase IS NULL AND OLD.phase IS NOT NULL
BEGIN
    UPDATE run_lanes SET held = 0 WHERE task = NEW.task AND held = 1;
END;
-- Retention removes a run with its lanes.
CREATE TRIGGER run_lanes_removed BEFORE DELETE ON runs
BEGIN
    DELETE FROM run_lanes WHERE task = OLD.task;
END;
