-- demo_counts: the demo's progress, over the events its writers committed.
-- No parameters. done, waiting (pending or leased), stuck (dead or invalid),
-- handled (reviews the consumers' projection counted: one per handler run
-- that committed) and ledger_done (events the ledger says were handled).
SELECT count(*) FILTER (WHERE e.status = 'done')                   AS done,
       count(*) FILTER (WHERE e.status IN ('pending', 'leased'))   AS waiting,
       count(*) FILTER (WHERE e.status IN ('dead', 'invalid'))     AS stuck,
       (SELECT coalesce(sum(reviews), 0) FROM demo_movie_stats)    AS handled,
       (SELECT count(*) FROM /*schema*/processed_events
         WHERE handler = 'movie_stats' AND status = 'done')        AS ledger_done
  FROM /*schema*/events AS e
  JOIN demo_reviews AS r ON r.event_id = e.id
