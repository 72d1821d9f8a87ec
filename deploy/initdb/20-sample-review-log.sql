-- SPDX-License-Identifier: MIT
-- Run once by the postgres image on first start: the table compose.yaml's
-- sample sql: handler writes. No unique key on purpose: the consumer ledger
-- makes the insert exactly-once, and the container test counts rows per
-- event to prove it (a duplicate would show as a second row).
CREATE TABLE review_log (
    event_id   uuid        NOT NULL,
    movie_id   uuid        NOT NULL,
    stars      int         NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT now()
);
