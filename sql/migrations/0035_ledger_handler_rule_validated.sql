-- 0035_ledger_handler_rule_validated: 0034's rule on handler names is
-- checked against the rows already in the ledger, so the catalog shows it
-- valid like every other rule. A transaction of its own: VALIDATE
-- CONSTRAINT scans the table under a lock that lets claims, done marks and
-- retention go on (SHARE UPDATE EXCLUSIVE), unlike 0034's swap.
ALTER TABLE /*schema*/processed_events VALIDATE CONSTRAINT processed_events_handler_name;
