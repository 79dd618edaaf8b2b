-- Fleet's peer directory (SPEC section 13). Named schema_v5.sql because the environment
-- capture adds its own schema_v4.sql on another branch; on this branch it is registered as
-- the next version, and the two are ordered when the branches meet.
--
-- One row per address the daemon knows beyond its config: peers added with `fleet add`
-- (`added` = 1), and the UUID each address first answered with, config peers included
-- (`added` = 0), so that an address that later answers as another machine is refused even
-- after a restart. `fleet remove` of an added peer deletes its row, binding and all.
CREATE TABLE fleet_peers (
    address TEXT PRIMARY KEY NOT NULL CHECK (address LIKE 'http://%'),
    added INTEGER NOT NULL CHECK (added IN (0, 1)),
    machine TEXT CHECK (machine IS NULL OR length(machine) = 36),
    added_at INTEGER NOT NULL,
    bound_at INTEGER,
    CHECK ((machine IS NULL) = (bound_at IS NULL))
);
