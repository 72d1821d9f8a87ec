-- 0011_writers_skip_the_due_index: every writer's INSERT stops paying for
-- an index no relay reads.
--
-- events_due_idx (0001) was the two-write claim's index: every waiting row
-- in due order. Since the window claim (0010) fresh rows are claimed from
-- events_window_idx and rows that came back from events_retry_idx, and the
-- due index was read only by the health sample's oldest-due gauge, which now
-- reads the heads of those two (outbox_health.sql). Each event written
-- inserted an entry into it all the same, and each finish left one dead.
DROP INDEX IF EXISTS /*schema*/events_due_idx;
