-- Schema version 8 (history at scale), after Fleet's v7.
--
-- Terminal jobs are the ones without a slot (`position IS NULL`, see the CHECK in
-- schema.sql). Retention walks them oldest first by the time they ended (`updated_at`, last
-- written by `jobs::finish`), a batch at a time, without reading the live queue or the
-- rest of the history: only the rows it removes.
CREATE INDEX jobs_ended ON jobs(updated_at, id) WHERE position IS NULL;
-- Deleting a run checks attentions that name it (foreign key): by index, not by a scan.
CREATE INDEX attentions_task ON attentions(task);
-- Retention removes operation records (kept only so that a retried request is answered
-- from its stored result) older than its cutoff, oldest first.
CREATE INDEX operations_created ON operations(created_at);
-- Delivery reads the due heads of pending events oldest first and stops at the few it can
-- send (`events::due_heads`), and the earliest retry among those backing off
-- (`events::next_retry_at`): along these, instead of sorting every pending event each
-- round, which made a burst of events cost the square of its size. A remote job's events on
-- its authority (`origin` set, v7) stay undelivered there for ever, since its origin delivers
-- them: both indexes leave them out, or every round would read past all of them.
CREATE INDEX events_pending_order ON events(created_at, job, seq)
    WHERE delivered_at IS NULL AND suppressed = 0 AND origin IS NULL;
CREATE INDEX events_retry ON events(next_attempt_at)
    WHERE delivered_at IS NULL AND suppressed = 0 AND origin IS NULL
      AND next_attempt_at IS NOT NULL;
