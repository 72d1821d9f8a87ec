-- 0008_dead_letters_waiting: an index of the dead letters that wait for an
-- operator.
--
-- The relay's health sample (every 5 s) and each consumer's dead-letter
-- gauge (every 10 s) count the dead letters not yet requeued, by handler.
-- dead_letters keeps every requeued letter as its history, and its only
-- index was the primary key (event_id, handler), so each count read the
-- whole table: after a handler's bad hour at 1,000 events/s and the
-- requeue of it all, 3.6 million rows, every few seconds, in every replica.
-- This index holds the waiting letters only, so a count reads what it
-- counts. A letter is written only when an event has spent its attempts,
-- and requeued by an operator, so the index costs nothing on the hot path.
-- Building it locks dead_letters against writes for as long as the build
-- takes: a moment, unless the table is already very large.
CREATE INDEX dead_letters_waiting_idx ON /*schema*/dead_letters (handler)
    WHERE requeued_at IS NULL;
