-- Schema version 16: an Attention holds a set of lanes (SPEC section 1: a live run the store
-- does not know holds every lane its `run.json` names, not only the first). `attentions.resource`
-- stays the first lane (what a release answers); every lane an Attention holds has its row here.
--
-- A lane is held while its Attention is open: `open` mirrors `released_at IS NULL`, and the
-- unique index keeps a lane to one open Attention across every Attention's set. The trigger
-- closes every lane of an Attention in the very statement that releases it, so no commit can
-- free some lanes of a hold and not the others.
CREATE TABLE attention_lanes (
    attention TEXT NOT NULL REFERENCES attentions(id),
    ord       INTEGER NOT NULL CHECK (ord >= 0),
    resource  TEXT NOT NULL REFERENCES resources(id),
    open      INTEGER NOT NULL CHECK (open IN (0, 1)),
    PRIMARY KEY (attention, ord),
    UNIQUE (attention, resource)
) WITHOUT ROWID;
CREATE UNIQUE INDEX attention_lanes_one_open_per_lane ON attention_lanes(resource) WHERE open = 1;
-- Every Attention so far held one lane.
INSERT INTO attention_lanes (attention, ord, resource, open)
    SELECT id, 0, resource, released_at IS NULL FROM attentions;
-- The open Attention of a run on several lanes (schema v15) holds the run's other lanes too:
-- the run holds them already, and the hold now says so. OR IGNORE: a lane another open
-- Attention holds stays that one's (the index decides; no upgrade fails on it).
INSERT OR IGNORE INTO attention_lanes (attention, ord, resource, open)
    SELECT a.id, l.ord, l.resource, 1 FROM attentions a
    JOIN runs r ON r.task = a.task AND r.attention = a.id AND r.phase = 'attention'
    JOIN run_lanes l ON l.task = r.task AND l.held = 1
    WHERE a.released_at IS NULL AND l.resource <> a.resource;

CREATE TRIGGER attention_lanes_released AFTER UPDATE OF released_at ON attentions
    WHEN NEW.released_at IS NOT NULL AND OLD.released_at IS NULL
BEGIN
    UPDATE attention_lanes SET open = 0 WHERE attention = NEW.id AND open = 1;
END;
-- Retention removes an Attention with its lanes.
CREATE TRIGGER attention_lanes_removed BEFORE DELETE ON attentions
BEGIN
    DELETE FROM attention_lanes WHERE attention = OLD.id;
END;
