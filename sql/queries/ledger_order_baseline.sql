-- ledger_order_baseline: take each handler's order baseline if it has
-- none (migration 0017's ledger_order_baseline()), at registration: a
-- handler that starts after an aggregate already had events does not wait
-- for their predecessors. $1: handler names (text[]). Returns taken: how
-- many were taken now.
SELECT count(*) FILTER (WHERE /*schema*/ledger_order_baseline(h.name)) AS taken
  FROM (SELECT DISTINCT n AS name FROM unnest($1::text[]) AS n ORDER BY 1) AS h
