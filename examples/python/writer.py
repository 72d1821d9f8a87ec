#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A review service that writes its events with outbox.enqueue() (psycopg 3).

Each review and its events commit in one transaction: both, or neither. It
writes one event with outbox.enqueue(), two with outbox.enqueue_many(), has
one refused (SQLSTATE 22023: the review rolls back with it), and resolves a
COMMIT whose answer was lost (docs/writing-events.md).

    DATABASE_URL=postgresql://app@127.0.0.1:5432/app /usr/bin/python3 writer.py

Prints one JSON line per step. Works directly and through PgBouncer in
transaction mode (docs/writing-events.md).
"""
import json
import os
import sys
import time

import psycopg
from psycopg.types.json import Jsonb

MOVIE_ID = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
RESOLVE_TIMEOUT_S = 60
SINGLE_REVIEWS = 6


# docs:start connect
def connect(url):
    # prepare_threshold=None: psycopg never prepares a statement on the
    # server, so any pooled server connection can run the next one
    # (PgBouncer in transaction mode).
    return psycopg.connect(url, prepare_threshold=None)
# docs:end connect


# docs:start single
def add_review(conn, stars):
    """The review and its event, in the caller's open transaction."""
    (review_id,) = conn.execute(
        "INSERT INTO reviews (movie_id, stars) VALUES (%s, %s) RETURNING id::text",
        [MOVIE_ID, stars]).fetchone()
    (event_id,) = conn.execute(
        "SELECT outbox.enqueue('movie', %s::uuid, 'review.logged', %s)::text",
        [MOVIE_ID, Jsonb({"review_id": review_id, "stars": stars})]).fetchone()
    return review_id, [event_id]
# docs:end single


# docs:start many
def add_review_and_rating(conn, stars):
    """A review and two events, written by one outbox.enqueue_many() call."""
    (review_id,) = conn.execute(
        "INSERT INTO reviews (movie_id, stars) VALUES (%s, %s) RETURNING id::text",
        [MOVIE_ID, stars]).fetchone()
    events = [
        {"aggregate_type": "movie", "aggregate_id": MOVIE_ID, "event_type": "review.logged",
         "payload": {"review_id": review_id, "stars": stars}},
        {"aggregate_type": "movie", "aggregate_id": MOVIE_ID, "event_type": "rating.changed",
         "payload": {"stars": stars}, "tenant_id": "acme"},
    ]
    (ids,) = conn.execute("SELECT outbox.enqueue_many(%s)::text[]", [Jsonb(events)]).fetchone()
    return review_id, ids
# docs:end many


def add_refused_review(conn, stars):
    """An event_type that repeats its aggregate_type: outbox.enqueue() refuses it."""
    (review_id,) = conn.execute(
        "INSERT INTO reviews (movie_id, stars) VALUES (%s, %s) RETURNING id::text",
        [MOVIE_ID, stars]).fetchone()
    print(json.dumps({"step": "refused", "review_id": review_id}), flush=True)
    conn.execute("SELECT outbox.enqueue('movie', %s::uuid, 'movie.review.logged', '{}')",
                 [MOVIE_ID])
    return review_id, []


# docs:start commit
def resolve(url, xid):
    """committed or aborted: the fate of transaction xid, asked over a new connection."""
    deadline = time.monotonic() + RESOLVE_TIMEOUT_S
    with connect(url) as conn:
        conn.autocommit = True
        while True:
            (status,) = conn.execute("SELECT pg_xact_status(%s::xid8)", [xid]).fetchone()
            if status in ("committed", "aborted"):
                return status
            if status is None or time.monotonic() > deadline:
                raise RuntimeError(f"transaction {xid} unresolved: pg_xact_status says {status}")
            time.sleep(0.1)  # in progress until its server process sees the client gone


def write(url, conn, work):
    """Runs work(conn) in a transaction and commits it exactly once.

    Returns (conn, result, in_doubt): the connection to go on with, what
    work returned, and how each lost COMMIT answer was resolved.
    """
    in_doubt = []
    while True:
        try:
            result = work(conn)
            (xid,) = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        except psycopg.Error:
            conn.rollback()
            raise
        try:
            conn.commit()
            return conn, result, in_doubt
        except psycopg.OperationalError:
            if not conn.broken:
                raise  # the server answered: it refused the commit, nothing was written
        # The COMMIT may or may not have happened: never write it again blindly.
        fate = resolve(url, xid)
        in_doubt.append(fate)
        conn = connect(url)
        if fate == "committed":
            return conn, result, in_doubt
        # aborted: nothing of it was written, so writing it again is safe
# docs:end commit


def main():
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("writer.py: set DATABASE_URL", file=sys.stderr)
        return 2
    conn = connect(url)
    conn.autocommit = True
    conn.execute("CREATE TABLE IF NOT EXISTS reviews (id uuid PRIMARY KEY DEFAULT "
                 "gen_random_uuid(), movie_id uuid NOT NULL, stars integer NOT NULL)")
    conn.autocommit = False
    # Six single reviews: psycopg prepares a statement on the server from its fifth
    # run on, unless told not to, and that is where a transaction pooler breaks it.
    steps = [("single", lambda c: add_review(c, 5))] * SINGLE_REVIEWS
    for step, work in steps + [("many", lambda c: add_review_and_rating(c, 4))]:
        conn, (review_id, event_ids), in_doubt = write(url, conn, work)
        print(json.dumps({"step": step, "review_id": review_id, "event_ids": event_ids,
                          "in_doubt": in_doubt}), flush=True)
# docs:start refused
    try:
        conn, _, _ = write(url, conn, lambda c: add_refused_review(c, 1))
    except psycopg.errors.InvalidParameterValue as e:  # SQLSTATE 22023
        # Rolled back: the review is gone with the event it could not write.
        print(json.dumps({"step": "refused", "sqlstate": e.sqlstate,
                          "message": e.diag.message_primary}), flush=True)
# docs:end refused
    else:
        print("writer.py: the refused event was accepted", file=sys.stderr)
        return 1
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
