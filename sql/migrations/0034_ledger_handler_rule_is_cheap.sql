-- 0034_ledger_handler_rule_is_cheap: the ledger's rule on handler names,
-- the same rule at a tenth of the cost.
--
-- Every claim writes a processed_events row per event, and each row is
-- checked against processed_events_handler_name. Its pattern's bounded
-- repetition, '^[A-Za-z0-9_.-]{1,64}$', costs PostgreSQL's regex engine
-- about 2.3 us a row on the 2-core machine the project is measured on,
-- against 0.2 us for '^[A-Za-z0-9_.-]+$' (a 9-character name, 100,000
-- evaluations each): about a twentieth of the PostgreSQL time of an
-- outbox-bench consume --case http event. Both allow the same names: one
-- or more of those ASCII characters, at most 64, and an ASCII name has as
-- many bytes as characters.
--
-- The new rule goes in NOT VALID: each row already in the ledger passed
-- the old one, which is the same, and checking them again here would scan
-- the whole ledger while this transaction holds the table's exclusive
-- lock (the constraint's swap), with every consumer waiting. 0035
-- validates it in a transaction of its own, which writers do not wait for.
ALTER TABLE /*schema*/processed_events
    DROP CONSTRAINT processed_events_handler_name,
    ADD CONSTRAINT processed_events_handler_name
        CHECK (handler ~ '^[A-Za-z0-9_.-]+$' AND octet_length(handler) <= 64) NOT VALID;
