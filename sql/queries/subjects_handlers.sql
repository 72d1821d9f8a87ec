-- subjects_handlers: the bindings consumers registered, for outboxctl
-- subjects; live: refreshed within $1 seconds (consumers refresh theirs on
-- every maintenance pass, every 5 minutes).
SELECT name, subject_filter, consumer_group, backend, stream, replica, last_seen,
       last_seen > now() - make_interval(secs => $1::double precision) AS live
  FROM /*schema*/handlers
 ORDER BY consumer_group, backend, name
