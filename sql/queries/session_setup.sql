-- session_setup: bound every statement and idle transaction of a store's session.
-- No parameters. A timeout the role, the database or the conninfo already
-- set is kept; only a disabled one (0) gets the store's default, so a
-- black-holed statement or a forgotten transaction cannot pin locks or
-- the xmin horizon forever.
SELECT set_config('statement_timeout',
                  CASE WHEN current_setting('statement_timeout') IN ('0', '0ms') THEN '30s'
                       ELSE current_setting('statement_timeout') END,
                  false),
       set_config('idle_in_transaction_session_timeout',
                  CASE WHEN current_setting('idle_in_transaction_session_timeout') IN ('0', '0ms')
                       THEN '60s'
                       ELSE current_setting('idle_in_transaction_session_timeout') END,
                  false)
