-- 0020_placeholder: holds number 0020 for the migration another branch adds with it;
-- drop this file when that one is merged.
SELECT 1;
