-- 0019_placeholder: holds number 0019 for the migration another branch adds with it;
-- drop this file when that one is merged.
SELECT 1;
