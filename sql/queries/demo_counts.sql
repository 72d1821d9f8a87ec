-- demo_counts: the demo's progress, over the events its writers committed.
-- No parameters. done, waiting (pending or leased), stuck (dead or invalid).
SELECT count(*) FILTER (WHERE e.status = 'done')                  AS done,
       count(*) FILTER (WHERE e.status IN ('pending', 'leased'))  AS waiting,
       count(*) FILTER (WHERE e.status IN ('dead', 'invalid'))    AS stuck
  FROM /*schema*/events AS e
  JOIN demo_reviews AS r ON r.event_id = e.id
