-- ordering_status: whether ordering is on, and its counts, for outboxctl
-- ordering status. aggregates: counters given out (aggregate_heads keeps
-- one per aggregate ever numbered, so none is reused after off and on);
-- highest_seq: the largest number given; the waiting rows (not yet
-- published) with a number (ordered) and without one (unordered: written
-- while ordering was off, or with the nil aggregate id).
SELECT /*schema*/ordering_on() AS ordering,
       (SELECT count(*) FROM /*schema*/aggregate_heads) AS aggregates,
       (SELECT coalesce(max(h.last_seq), 0) FROM /*schema*/aggregate_heads AS h) AS highest_seq,
       count(*) FILTER (WHERE e.aggregate_seq IS NOT NULL) AS waiting_ordered,
       count(*) FILTER (WHERE e.aggregate_seq IS NULL) AS waiting_unordered
  FROM /*schema*/events AS e
 WHERE e.published_at IS NULL
