#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""An HTTP endpoint behind outboxd's http: handler that runs its effect once per event (psycopg 3).

outboxd consume POSTs each event as a CloudEvent in binary mode (docs/consumers.md,
"The http: handler"): the event id in ce-id (and Idempotency-Key), the event's
envelope as the JSON body. The endpoint writes its effect, one row in
review_feed, in one transaction with outbox.try_claim(event id, its own handler
name, envelope) (docs/consumers.md, "From any language: the ledger in SQL"):

    true   the claim commits with the effect: 204
    false  done already (a retry after a lost answer, a replica's run): 204, no effect
    55P03 / 55000 (not now: another claim holds it, or it backs off)
           rolled back: 503 with Retry-After from the error's retry_after_ms,
           which the daemon honours without spending an attempt

An effect that fails (here: a payload {"poison": true}) rolls back with its
claim and answers 500: the daemon spends an attempt each time and
dead-letters the event, under its own handler name, at OUTBOX_MAX_ATTEMPTS.
A database that cannot be reached answers 503 (retried, no attempt spent).

    CREATE TABLE review_feed (event_id uuid NOT NULL, endpoint text NOT NULL,
        aggregate_id uuid NOT NULL, event_type text NOT NULL, payload jsonb NOT NULL,
        at timestamptz NOT NULL DEFAULT now());
    DATABASE_URL=postgresql://app@127.0.0.1:5432/app PORT=8081 /usr/bin/python3 endpoint.py
    OUTBOX_CONSUMER_NAME=reviews outboxd consume 'reviews=http:http://127.0.0.1:8081/events'

PORT 0 (the default) takes a free port; the endpoint prints one JSON line,
{"listening": PORT}, once it accepts requests. ENDPOINT_HANDLER is the name of
its claims in the ledger (default py-reviews: not the daemon's handler name,
whose rows record the deliveries); ENDPOINT_NAME goes into each effect row.
Binary mode only (the daemon's default): a structured-mode body is a
CloudEvent holding the envelope as data.
"""
import json
import math
import os
import queue
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psycopg
from psycopg.types.json import Jsonb

POOL_SIZE = 8  # connections: requests past them (http: sends up to 64 at once) wait


class Poisoned(Exception):
    """An event this service can never handle."""


class Pool:
    """A few open connections shared by the request threads (psycopg_pool is not in Debian 12)."""

    def __init__(self, url, size):
        self.url = url
        self.idle = queue.LifoQueue()
        self.slots = queue.Queue()
        for _ in range(size):
            self.slots.put(None)

    def get(self):
        self.slots.get()  # at most `size` connections at once
        try:
            return self.idle.get_nowait()
        except queue.Empty:
            pass
        try:
            # autocommit: each request opens its own transaction (conn.transaction());
            # prepare_threshold=None keeps it working through PgBouncer in transaction mode.
            return psycopg.connect(self.url, autocommit=True, prepare_threshold=None)
        except BaseException:
            self.slots.put(None)
            raise

    def put(self, conn):
        if not conn.broken and not conn.closed:
            self.idle.put(conn)
        self.slots.put(None)


# docs:start effect
def handle(conn, handler, endpoint, event_id, envelope):
    """True if this request ran the effect, False if it was done already."""
    with conn.transaction():  # BEGIN; COMMIT, or ROLLBACK on an exception
        (run,) = conn.execute("SELECT outbox.try_claim(%s::uuid, %s, %s)",
                              [event_id, handler, Jsonb(envelope)]).fetchone()
        if not run:
            return False  # done already: the claim committed with its effect earlier
        payload = envelope.get("payload")
        if isinstance(payload, dict) and payload.get("poison") is True:
            raise Poisoned(f"event {event_id} is poisoned")  # rolls the claim back too
        conn.execute("INSERT INTO review_feed (event_id, endpoint, aggregate_id, event_type, "
                     "payload) VALUES (%s, %s, %s, %s, %s)",
                     [event_id, endpoint, envelope["aggregate_id"], envelope["event_type"],
                      Jsonb(payload)])
        return True
# docs:end effect


def retry_after_s(error):
    """Seconds from the error's DETAIL "retry_after_ms=N", at least 1."""
    detail = error.diag.message_detail or ""
    ms = int(detail.split("=", 1)[1]) if detail.startswith("retry_after_ms=") else 1000
    return max(1, math.ceil(ms / 1000))


class Endpoint(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the daemon reuses its connections

    def answer(self, status, text="", headers=()):
        body = text.encode()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        event_id = self.headers.get("ce-id")  # header names are case-insensitive here
        try:
            envelope = json.loads(body)
        except ValueError:
            envelope = None
        if not event_id or not isinstance(envelope, dict):
            return self.answer(400, "want a binary-mode CloudEvent: ce-id and a JSON envelope")
        srv = self.server
        try:
            conn = srv.pool.get()
        except psycopg.OperationalError as e:
            return self.answer(503, f"database unreachable: {e}", [("Retry-After", "1")])
        try:
            ran = handle(conn, srv.handler, srv.endpoint, event_id, envelope)
        except Poisoned as e:
            return self.answer(500, str(e))  # an attempt spent; dead-lettered at the last
        except (psycopg.errors.LockNotAvailable,               # 55P03: another claim holds it
                psycopg.errors.ObjectNotInPrerequisiteState) as e:  # 55000: not yet
            return self.answer(503, e.diag.message_primary or "",
                               [("Retry-After", str(retry_after_s(e)))])
        except psycopg.OperationalError as e:  # the connection broke: not now
            return self.answer(503, f"database: {e}", [("Retry-After", "1")])
        except psycopg.Error as e:  # 22023 (an envelope that is not this event's) and the rest
            return self.answer(500, f"{e.sqlstate}: {e.diag.message_primary}")
        finally:
            srv.pool.put(conn)
        self.answer(204, headers=[("X-Effect", "applied" if ran else "done-already")])

    def log_message(self, fmt, *args):
        pass  # one line per request is too many; failures are in the answers


def main():
    url = os.environ.get("DATABASE_URL")
    if not url:
        print("endpoint.py: set DATABASE_URL", file=sys.stderr)
        return 2
    srv = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "0"))), Endpoint)
    srv.daemon_threads = True
    srv.pool = Pool(url, POOL_SIZE)
    srv.handler = os.environ.get("ENDPOINT_HANDLER", "py-reviews")
    srv.endpoint = os.environ.get("ENDPOINT_NAME", "py")
    # The handler's order starts here (a new schema is ordered): events already
    # out run once each, unordered; the ones after, in order. Taken once per
    # handler name, before the first request; later calls keep it.
    conn = srv.pool.get()
    try:
        conn.execute("SELECT outbox.ledger_order_baseline(%s)", [srv.handler])
    finally:
        srv.pool.put(conn)
    print(json.dumps({"listening": srv.server_address[1]}), flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
