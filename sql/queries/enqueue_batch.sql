-- enqueue_batch: insert many events in one statement and one round trip.
-- $1: a JSON array of envelopes.
-- Written sorted by aggregate, each aggregate's events in the array's order:
-- on an ordered schema every row takes its aggregate's counter row until
-- commit, and batches that take them in one order queue behind each other
-- where batches in their own orders would deadlock. The numbers are the
-- same either way (an aggregate's events keep their order); rows of no
-- aggregate (the nil id) take no lock.
INSERT INTO /*schema*/events (id, aggregate_type, aggregate_id, event_type, tenant_id,
                              data_subject, envelope)
SELECT (e ->> 'id')::uuid, e ->> 'aggregate_type', (e ->> 'aggregate_id')::uuid,
       e ->> 'event_type', e ->> 'tenant_id', e ->> 'data_subject', e
  FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS t (e, n)
 ORDER BY e ->> 'aggregate_type', (e ->> 'aggregate_id')::uuid, n
