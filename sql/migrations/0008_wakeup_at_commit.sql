-- 0008_wakeup_at_commit: the wake-up's try-lock is taken when the
-- transaction commits, not at its first insert.
--
-- 0002 (and 0007) let only the writer transaction that wins a try-lock
-- NOTIFY, so that writers never queue behind NOTIFY's commit lock. But the
-- lock was taken at the transaction's first INSERT and held to its end: a
-- service that writes 100 outbox.enqueue() calls in a transaction holds it
-- for that transaction's whole life (20-40 ms), and every transaction that
-- starts meanwhile skips its NOTIFY. Its rows then wait for the relay's
-- next poll, which backs off to OUTBOX_POLL_MAX_MS once the relay is idle:
-- with the SQL writer at 10,000 events/s, commit-to-ack p50 was 10 ms and
-- p99 90-240 ms, against 3.5 and 17 ms for the C writer, whose
-- transactions are one statement.
--
-- Now the first row a transaction inserts queues one deferred event (the
-- WHEN clause marks the transaction in a transaction-local setting, so the
-- rest queue nothing), and the trigger runs at COMMIT, just before the
-- NOTIFY queue is written: the try-lock is held only while that commit
-- completes. A transaction skips its NOTIFY only when another one's is
-- being committed at that moment, so writers still never wait for each
-- other, and nearly every commit is announced. The mark names the schema,
-- so another schema's outbox in the same transaction wakes its own relays.
-- A rolled-back savepoint drops its event and its mark together.
-- SET CONSTRAINTS ALL IMMEDIATE runs it at the end of the statement (the
-- behaviour of 0007).

CREATE OR REPLACE FUNCTION /*schema*/events_wakeup()
RETURNS trigger LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    IF pg_try_advisory_xact_lock(1868724343, hashtext(TG_TABLE_SCHEMA)) THEN
        PERFORM pg_notify(/*schema*/wakeup_channel(TG_TABLE_SCHEMA), '');
    END IF;
    RETURN NULL;
END
$fn$;

DROP TRIGGER events_wakeup ON /*schema*/events;
-- A constraint trigger is the only kind that can wait for COMMIT, and it
-- must be a row trigger: the WHEN clause keeps it to the first row. It is
-- evaluated as each row is queued; set_config() returns the mark it sets,
-- never NULL, so the second test only records that this row took it.
CREATE CONSTRAINT TRIGGER events_wakeup AFTER INSERT ON /*schema*/events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (current_setting('outbox.wakeup_tried', true) IS DISTINCT FROM '/*schema*/'
          AND set_config('outbox.wakeup_tried', '/*schema*/', true) IS NOT NULL)
    EXECUTE FUNCTION /*schema*/events_wakeup();
