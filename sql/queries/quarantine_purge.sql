-- quarantine_purge: delete quarantined rows, for outboxctl quarantine
-- purge. $1: ids (uuid[]), as quarantine_rows.sql listed them; $2: the
-- digest of each envelope as listed (text[], same order): a row repaired
-- or released since is left alone. The events are gone for good: no dead
-- letter keeps them.
DELETE FROM /*schema*/events AS e
 USING unnest($1::uuid[], $2::text[]) AS r(id, digest)
 WHERE e.id = r.id AND e.status = 'invalid' AND md5(e.envelope::text) = r.digest
RETURNING e.id::text AS id
