-- 0016_relay_heads: relays publish an ordered aggregate's events from its
-- head, in aggregate_seq order.
--
-- An event numbered n (migration 0014) is published only once n - 1 is:
-- a batch takes an aggregate's rows as a run n, n + 1, ... whose first
-- row's predecessor is published, skipped (aggregate_skips, handler '') or
-- gone (published and pruned). The rest wait in the row lease, marked
-- last_error = 'waiting_for_head', until a publish of an earlier number
-- wakes them (wake_successors.sql) or, should that wake-up be lost in a
-- race with the claim that parked them, until head_wait_until(). A dead or
-- quarantined head holds its aggregate, and only it, until an operator
-- requeues it (`outboxctl dead requeue`) or skips it (`outboxctl dead skip`).
-- Consumers check the order again in their ledger: the relay's order keeps
-- them from parking, it is not the guarantee (a failed publish in the
-- middle of a run is retried after the numbers behind it went out).

-- The rows waiting for their head, by aggregate and number: a publish wakes
-- the ones after it through this index, which is empty when nothing waits,
-- so a batch of an ordered schema whose rows never waited pays one page
-- read for its wake-up, not a lookup per aggregate. The mark finish does
-- not change last_error, so it stays HOT.
CREATE INDEX events_waiting_for_head_idx
    ON /*schema*/events (aggregate_type, aggregate_id, aggregate_seq)
    WHERE last_error = 'waiting_for_head';

-- True when an aggregate's run starting at `seq` must wait: its
-- predecessor is in the table, not published and not skipped. One lookup
-- of events_aggregate_seq_idx (0015); a numbered row's predecessor was
-- committed before it (0014), so it is there to be seen.
CREATE FUNCTION /*schema*/head_waits(a_type text, a_id uuid, seq bigint) RETURNS boolean
LANGUAGE sql STABLE AS $fn$
    SELECT seq > 1 AND EXISTS (
        SELECT 1
          FROM /*schema*/events AS p
         WHERE p.aggregate_type = a_type AND p.aggregate_id = a_id
           AND p.aggregate_seq = seq - 1
           AND p.published_at IS NULL
           AND NOT EXISTS (SELECT 1
                             FROM /*schema*/aggregate_skips AS k
                            WHERE k.aggregate_type = a_type AND k.aggregate_id = a_id
                              AND k.aggregate_seq = seq - 1 AND k.handler = ''))
$fn$;

-- How many ordered aggregates a dead or quarantined head holds (not
-- skipped): for the relay's gauge and doctor. Such a row waits at
-- 'infinity', the end of the retries' index, so the count reads dead rows
-- only.
CREATE FUNCTION /*schema*/blocked_aggregates() RETURNS bigint LANGUAGE sql STABLE AS $fn$
    SELECT count(DISTINCT (d.aggregate_type, d.aggregate_id))
      FROM /*schema*/events AS d
     WHERE d.published_at IS NULL AND d.next_attempt_at > d.created_at
       AND d.next_attempt_at = 'infinity' AND d.aggregate_seq IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM /*schema*/aggregate_skips AS k
                        WHERE k.aggregate_type = d.aggregate_type
                          AND k.aggregate_id = d.aggregate_id
                          AND k.aggregate_seq = d.aggregate_seq AND k.handler = '')
$fn$;

-- When a row waiting for its head is looked at again if no wake-up comes:
-- soon for a new row (a wake-up lost in a race costs little), rarely for
-- one that has waited long (a dead head's aggregate costs the row lease a
-- write per row every 30 s at most). Always after created_at, so the row
-- stays in the retries' index.
CREATE FUNCTION /*schema*/head_wait_until(created timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE AS $fn$
    SELECT greatest(now() + least(interval '30 seconds',
                                  greatest(interval '100 milliseconds', (now() - created) / 4)),
                    created + interval '1 microsecond')
$fn$;
