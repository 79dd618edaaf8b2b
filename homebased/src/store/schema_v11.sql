-- Schema version 11: an Attention may hold a lane for a run the store does not know (SPEC
-- section 1, `unknown_live_run`: a store restored from an older copy, a WAL whose tail was
-- lost, while that run's worker still lives). Its task is then not a row of `runs`, so the
-- table is rebuilt without that foreign key; every other column and index is as before.
CREATE TABLE attentions_v11 (
    id          TEXT PRIMARY KEY,
    resource    TEXT NOT NULL REFERENCES resources(id),
    task        TEXT NOT NULL,
    failure     TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    released_at INTEGER
);
INSERT INTO attentions_v11 (id, resource, task, failure, created_at, released_at)
    SELECT id, resource, task, failure, created_at, released_at FROM attentions;
DROP TABLE attentions;
ALTER TABLE attentions_v11 RENAME TO attentions;
CREATE UNIQUE INDEX attentions_one_open_per_resource ON attentions(resource) WHERE released_at IS NULL;
CREATE INDEX attentions_task ON attentions(task);
