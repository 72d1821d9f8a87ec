-- demo_counts: the demo's progress, over the events its writers committed.
-- No parameters. done, waiting (pending or leased), stuck (dead or invalid),
-- handled (reviews the consumers' projection counted: one per handler run
-- that committed), ledger_done (events the ledger says were handled),
-- out_of_order (reviews the projection saw out of their movie's order) and
-- ordered (the schema numbers its events).
SELECT count(*) FILTER (WHERE e.status = 'done')                   AS done,
       count(*) FILTER (WHERE e.status IN ('pending', 'leased'))   AS waiting,
       count(*) FILTER (WHERE e.status IN ('dead', 'invalid'))     AS stuck,
       (SELECT coalesce(sum(reviews), 0) FROM demo_movie_stats)    AS handled,
       (SELECT count(*) FROM /*schema*/processed_events
         WHERE handler = 'movie_stats' AND status = 'done')        AS ledger_done,
       (SELECT coalesce(sum(out_of_order), 0) FROM demo_movie_stats) AS out_of_order,
       /*schema*/ordering_on()                                     AS ordered
  FROM /*schema*/events AS e
  JOIN demo_reviews AS r ON r.event_id = e.id
