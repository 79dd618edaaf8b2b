-- Schema version 10: a count of durability barriers on the machine row. A submit is
-- committed without an fsync when the core holds its answer until the next durable commit
-- (`Store::write_unsynced`); when nothing else commits durably before the answers go out,
-- the core commits this count's increment, whose fsync of the WAL makes every earlier commit
-- durable with it (`Store::sync`). The count itself is read by nothing but tests.
ALTER TABLE machine ADD COLUMN syncs INTEGER NOT NULL DEFAULT 0 CHECK (syncs >= 0);
