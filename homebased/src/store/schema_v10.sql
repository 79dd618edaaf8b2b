-- Schema version 10: a counter of durability barriers. A submit is committed without an
-- fsync while the core holds its answer (`Store::write_unsynced`); the next durable commit
-- carries one increment of this counter, so that it is certain to change a page and so to
-- fsync the WAL, which makes every earlier commit durable with it (`Store::write`,
-- `Store::sync`). SQLite writes nothing, and syncs nothing, for a transaction that changes no
-- page. The count itself is read by nothing but tests.
CREATE TABLE durability (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    barriers  INTEGER NOT NULL CHECK (barriers >= 0)
);
INSERT INTO durability (singleton, barriers) VALUES (1, 0);
