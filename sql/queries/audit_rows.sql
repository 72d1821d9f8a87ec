-- audit_rows: retained rows the stream should still hold, for outboxctl audit:
-- done, published less than the stream's max_age ago (with a margin, so a row
-- about to expire is not reported missing) and since $1, in id order from a
-- cursor. $1: since (timestamptz, NULL: the whole max_age); $2: max_age in
-- seconds (0: unlimited); $3: the previous page's last id (NULL: the start);
-- $4: page size.
SELECT e.id::text AS id, e.stream_seq, e.published_at,
       (extract(epoch FROM e.published_at) * 1000)::bigint AS published_unix_ms
  FROM /*schema*/events AS e
 WHERE e.status = 'done'
   AND ($2::bigint = 0
        OR e.published_at > now() - make_interval(secs => $2::bigint) + interval '1 minute')
   AND ($1::timestamptz IS NULL OR e.published_at >= $1::timestamptz)
   AND ($3::uuid IS NULL OR e.id > $3::uuid)
 ORDER BY e.id
 LIMIT $4::bigint
