-- Schema version 6 in the order of the branch that added it (GPU identity; renumber at
-- merge so versions stay dense and ordered): the model and hardware UUID a detected lane's
-- device reported when it was first seen, and whether its index now reports another card.
ALTER TABLE resources ADD COLUMN gpu_uuid TEXT;
ALTER TABLE resources ADD COLUMN gpu_model TEXT;
ALTER TABLE resources ADD COLUMN gpu_changed INTEGER NOT NULL DEFAULT 0 CHECK (gpu_changed IN (0, 1));
