-- ledger_register_handlers: a consumer's bindings, upserted into handlers.
-- $1: handler names (text[]); $2: their subject filters (text[], same order);
-- $3: consumer group; $4: backend (jetstream, db); $5: stream (NULL on db);
-- $6: the replica's name.
-- Run when a consumer connects to its ledger and again on each maintenance
-- pass: last_seen says the binding is alive. Replicas of a group write the
-- same rows, in name order, so two of them starting together wait for each
-- other instead of deadlocking.
INSERT INTO /*schema*/handlers AS h (name, subject_filter, consumer_group, backend, stream,
                                     replica, first_seen, last_seen)
SELECT b.name, b.subject_filter, $3::text, $4::text, $5::text, $6::text, now(), now()
  FROM unnest($1::text[], $2::text[]) AS b(name, subject_filter)
 ORDER BY b.name
    ON CONFLICT (backend, consumer_group, name) DO UPDATE
   SET subject_filter = excluded.subject_filter, stream = excluded.stream,
       replica = excluded.replica, last_seen = excluded.last_seen
