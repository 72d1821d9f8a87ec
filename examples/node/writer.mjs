// SPDX-License-Identifier: MIT
//
// A review service that writes its events with outbox.enqueue() (node-postgres).
//
// Each review and its events commit in one transaction: both, or neither. It
// writes one event with outbox.enqueue(), two with outbox.enqueue_many(), has
// one refused (SQLSTATE 22023: the review rolls back with it), and resolves a
// COMMIT whose answer was lost (docs/writing-events.md).
//
//   npm ci && DATABASE_URL=postgresql://app@127.0.0.1:5432/app node writer.mjs
//
// Prints one JSON line per step. Works directly and through PgBouncer in
// transaction mode (docs/writing-events.md).
import pg from 'pg';

const MOVIE_ID = '0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b';
const RESOLVE_TIMEOUT_MS = 60000;
// As many single reviews as the other examples write (six: past the prepare
// thresholds of psycopg and JDBC, which node-postgres does not have).
const SINGLE_REVIEWS = 6;

// docs:start connect
async function connect(url) {
  // Parameterised queries without a `name` use the unnamed statement, sent
  // with its values in one round trip: any pooled server connection can run
  // them (PgBouncer in transaction mode). Never pass `name` through a pooler.
  const client = new pg.Client({ connectionString: url });
  // A lost connection also fails the query in flight; without a listener
  // this event would end the process.
  client.on('error', () => {});
  await client.connect();
  return client;
}
// docs:end connect

async function insertReview(client, stars) {
  const { rows } = await client.query(
    'INSERT INTO reviews (movie_id, stars) VALUES ($1::uuid, $2) RETURNING id::text',
    [MOVIE_ID, stars]);
  return rows[0].id;
}

// docs:start single
// The review and its event, in the caller's open transaction.
async function addReview(client, stars) {
  const reviewId = await insertReview(client, stars);
  const { rows } = await client.query(
    "SELECT outbox.enqueue('movie', $1::uuid, 'review.logged', $2::jsonb)::text AS id",
    [MOVIE_ID, JSON.stringify({ review_id: reviewId, stars })]);
  return { reviewId, eventIds: [rows[0].id] };
}
// docs:end single

// docs:start many
// A review and two events, written by one outbox.enqueue_many() call.
async function addReviewAndRating(client, stars) {
  const reviewId = await insertReview(client, stars);
  const events = [
    { aggregate_type: 'movie', aggregate_id: MOVIE_ID, event_type: 'review.logged',
      payload: { review_id: reviewId, stars } },
    { aggregate_type: 'movie', aggregate_id: MOVIE_ID, event_type: 'rating.changed',
      payload: { stars }, tenant_id: 'acme' },
  ];
  const { rows } = await client.query(
    'SELECT outbox.enqueue_many($1::jsonb)::text[] AS ids', [JSON.stringify(events)]);
  return { reviewId, eventIds: rows[0].ids };
}
// docs:end many

// An event_type that repeats its aggregate_type: outbox.enqueue() refuses it.
async function addRefusedReview(client, stars) {
  const reviewId = await insertReview(client, stars);
  console.log(JSON.stringify({ step: 'refused', review_id: reviewId }));
  await client.query("SELECT outbox.enqueue('movie', $1::uuid, 'movie.review.logged', '{}')",
    [MOVIE_ID]);
  return { reviewId, eventIds: [] };
}

// docs:start commit
// committed or aborted: the fate of transaction xid, asked over a new connection.
async function resolve(url, xid) {
  const deadline = Date.now() + RESOLVE_TIMEOUT_MS;
  const client = await connect(url);
  try {
    for (;;) {
      const { rows } = await client.query('SELECT pg_xact_status($1::xid8) AS status', [xid]);
      const status = rows[0].status;
      if (status === 'committed' || status === 'aborted') {
        return status;
      }
      if (status === null || Date.now() > deadline) {
        throw new Error(`transaction ${xid} unresolved: pg_xact_status says ${status}`);
      }
      // in progress until its server process sees us gone
      await new Promise((done) => setTimeout(done, 100));
    }
  } finally {
    await client.end();
  }
}

// Runs work(client) in a transaction and commits it exactly once. Returns
// the client to go on with, and how each lost COMMIT answer was resolved.
async function write(url, client, work) {
  const inDoubt = [];
  for (;;) {
    let result;
    let xid;
    try {
      await client.query('BEGIN');
      result = await work(client);
      ({ rows: [{ xid }] } = await client.query('SELECT pg_current_xact_id()::text AS xid'));
    } catch (err) {
      await client.query('ROLLBACK');
      throw err;
    }
    try {
      await client.query('COMMIT');
      return { client, ...result, inDoubt };
    } catch (err) {
      if (err.code !== undefined && !err.code.startsWith('08')) {
        throw err; // the server answered: it refused the commit, nothing was written
      }
    }
    // The COMMIT may or may not have happened: never write it again blindly.
    client.end().catch(() => {});
    const fate = await resolve(url, xid);
    inDoubt.push(fate);
    client = await connect(url);
    if (fate === 'committed') {
      return { client, ...result, inDoubt };
    }
    // aborted: nothing of it was written, so writing it again is safe
  }
}
// docs:end commit

async function main() {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('writer.mjs: set DATABASE_URL');
    return 2;
  }
  let client = await connect(url);
  await client.query('CREATE TABLE IF NOT EXISTS reviews (id uuid PRIMARY KEY DEFAULT ' +
    'gen_random_uuid(), movie_id uuid NOT NULL, stars integer NOT NULL)');
  const steps = Array(SINGLE_REVIEWS).fill(['single', (c) => addReview(c, 5)]);
  for (const [step, work] of [...steps, ['many', (c) => addReviewAndRating(c, 4)]]) {
    const w = await write(url, client, work);
    client = w.client;
    console.log(JSON.stringify({ step, review_id: w.reviewId, event_ids: w.eventIds,
      in_doubt: w.inDoubt }));
  }
  // docs:start refused
  try {
    await write(url, client, (c) => addRefusedReview(c, 1));
  } catch (err) {
    if (err.code !== '22023') {
      throw err;
    }
    // Rolled back: the review is gone with the event it could not write.
    console.log(JSON.stringify({ step: 'refused', sqlstate: err.code, message: err.message }));
    await client.end();
    return 0;
  }
  // docs:end refused
  console.error('writer.mjs: the refused event was accepted');
  return 1;
}

process.exitCode = await main();
