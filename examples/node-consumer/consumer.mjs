// SPDX-License-Identifier: MIT
//
// A service that consumes the relay's events from JetStream with its own
// client (nats.js 2.29, node-postgres 8.23) and runs each event's effect
// exactly once, with the outbox ledger's SQL API (docs/consumers.md, "From
// any language").
//
// For each message, in one transaction: outbox.try_claim(event id, handler,
// message body); true: the effect (one row in `effects`) and the claim commit
// together; false: done already or dead-lettered. Then it acks. A failing
// effect rolls back and outbox.fail() counts it: nak with its backoff, or,
// at max_attempts, dead-lettered and terminated. "Not now" (SQLSTATE 55P03,
// 55000) rolls back and naks with the DETAIL's retry_after_ms. A message a
// crashed replica held comes again after ack_wait and finds its claim done,
// or not: exactly one effect either way.
//
//   npm ci && DATABASE_URL=postgresql://app@127.0.0.1:5432/app OUTBOX_STREAM=EVENTS \
//     OUTBOX_SUBJECT_PREFIX=events node consumer.mjs
//
// Settings (environment), as in examples/go-consumer and examples/README.md:
// DATABASE_URL, OUTBOX_NATS_URL, OUTBOX_STREAM, OUTBOX_SUBJECT_PREFIX,
// OUTBOX_CONSUMER_NAME (default effects-node), OUTBOX_ACK_WAIT_SECONDS (60),
// OUTBOX_MAX_ATTEMPTS (10), OUTBOX_BACKOFF_BASE_MS (5000),
// OUTBOX_BACKOFF_CAP_MS (300000), HANDLER (effects), REPLICA (host:pid),
// BATCH_SIZE (50).
//
// An event whose payload is {"poison": true} fails every time (to show dead
// letters). Prints one JSON line when ready and one per dead letter; exits
// 0 on SIGTERM or SIGINT after settling the message in hand.
import os from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';

import { AckPolicy, connect, DeliverPolicy, nanos } from 'nats';
import pg from 'pg';

const STREAM_NOT_FOUND = 10059;

function env(key, def) {
  return process.env[key] || def;
}

function envInt(key, def) {
  const text = env(key, String(def));
  if (!/^[1-9][0-9]*$/.test(text)) {
    console.error(`consumer: ${key} must be a whole number from 1`);
    process.exit(2);
  }
  return Number(text);
}

const s = {
  databaseUrl: process.env.DATABASE_URL,
  natsUrl: env('OUTBOX_NATS_URL', 'nats://127.0.0.1:4222'),
  stream: env('OUTBOX_STREAM', 'EVENTS'),
  prefix: env('OUTBOX_SUBJECT_PREFIX', 'events'),
  durable: env('OUTBOX_CONSUMER_NAME', 'effects-node'),
  handler: env('HANDLER', 'effects'),
  replica: env('REPLICA', `${os.hostname()}:${process.pid}`),
  ackWaitSeconds: envInt('OUTBOX_ACK_WAIT_SECONDS', 60),
  maxAttempts: envInt('OUTBOX_MAX_ATTEMPTS', 10),
  backoffBaseMs: envInt('OUTBOX_BACKOFF_BASE_MS', 5000),
  backoffCapMs: envInt('OUTBOX_BACKOFF_CAP_MS', 300000),
  batchSize: envInt('BATCH_SIZE', 50),
};
if (!s.databaseUrl) {
  console.error('consumer: set DATABASE_URL');
  process.exit(2);
}

function emit(line) {
  console.log(JSON.stringify(line));
}

async function connectDb() {
  const client = new pg.Client({ connectionString: s.databaseUrl });
  // A lost connection also fails the query in flight; without a listener
  // this event would end the process.
  client.on('error', () => {});
  await client.connect();
  return client;
}

// The service's work for one event, in the claim's transaction.
async function effect(db, event) {
  if (event.payload && event.payload.poison === true) {
    throw new Error('poisoned event: this handler always fails on it');
  }
  await db.query('INSERT INTO effects (event_id, replica) VALUES ($1::uuid, $2)',
    [event.id, s.replica]);
}

// The delay of a try_claim that raised 55P03 or 55000 ("not now"); null for any other error.
function notNow(err) {
  if (err.code !== '55P03' && err.code !== '55000') {
    return null;
  }
  const m = /retry_after_ms=(\d+)/.exec(err.detail || '');
  return m ? Number(m[1]) : 1000;
}

// docs:start handle
// Runs one message's effect exactly once; returns how to settle it:
// { ack }, { term } or { delay } (nak), and ran when the effect committed.
async function handle(db, body) {
  let event;
  try {
    event = JSON.parse(body);
  } catch (err) {
    return { term: true, error: `not an envelope: ${err.message}` }; // never will be
  }
  try {
    await db.query('BEGIN');
  } catch (err) {
    return { delay: 1000, error: err.message }; // an outage spends no attempt
  }
  let run;
  try {
    const { rows } = await db.query('SELECT outbox.try_claim($1::uuid, $2, $3::jsonb) AS run',
      [event.id, s.handler, body]);
    run = rows[0].run;
  } catch (err) {
    await db.query('ROLLBACK').catch(() => {});
    const delay = notNow(err);
    return delay !== null ? { delay } : { delay: 1000, error: err.message };
  }
  if (!run) {
    await db.query('ROLLBACK').catch(() => {});
    return { ack: true }; // done already, or dead-lettered
  }
  try {
    await effect(db, event);
  } catch (err) {
    await db.query('ROLLBACK').catch(() => {}); // the claim goes with the effect
    return failed(db, event, body, err.message);
  }
  try {
    await db.query('COMMIT');
  } catch (err) {
    // Committed or not, the next delivery's try_claim knows.
    return { delay: 1000, error: err.message };
  }
  return { ack: true, ran: true };
}

// Counts a failure of the effect in the ledger: retry later, or dead.
async function failed(db, event, body, reason) {
  let row;
  try {
    const { rows } = await db.query(
      'SELECT outcome, attempts, coalesce(ceil(extract(epoch FROM retry_at - clock_timestamp())' +
      ' * 1000), 0)::int AS delay_ms FROM outbox.fail($1::uuid, $2, NULL, $3, $4::jsonb, $5, $6, $7)',
      [event.id, s.handler, reason, body, s.maxAttempts, s.backoffBaseMs, s.backoffCapMs]);
    row = rows[0];
  } catch (err) {
    return { delay: 1000, error: err.message };
  }
  if (row.outcome === 'dead') {
    emit({ dead: event.id, attempts: row.attempts, reason });
    return { term: true };
  }
  if (row.outcome === 'retry') {
    return { delay: Math.max(row.delay_ms, 0) };
  }
  return { delay: 1000 }; // stale: settled meanwhile; the next delivery's try_claim says how
}
// docs:end handle

// Creates (or updates) the durable pull consumer, waiting for the relay to create the stream.
async function bind(nc) {
  const jsm = await nc.jetstreamManager();
  const cfg = {
    durable_name: s.durable,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(s.ackWaitSeconds * 1000),
    max_deliver: -1, // the ledger counts attempts, not the broker
    filter_subject: `${s.prefix}.>`,
    deliver_policy: DeliverPolicy.All,
  };
  for (;;) {
    try {
      await jsm.consumers.add(s.stream, cfg);
      break;
    } catch (err) {
      if (err.api_error?.err_code === STREAM_NOT_FOUND) {
        await sleep(200); // the relay creates the stream when it starts
        continue;
      }
      const { durable_name: _, ...changes } = cfg;
      await jsm.consumers.update(s.stream, s.durable, changes); // exists, with other settings
      break;
    }
  }
  return nc.jetstream().consumers.get(s.stream, s.durable);
}

function settle(m, v) {
  if (v.term) {
    m.term();
  } else if (v.ack) {
    m.ack();
  } else {
    m.nak(v.delay);
  }
}

async function main() {
  let stopping = false;
  const stop = () => { stopping = true; };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);

  const nc = await connect({ servers: s.natsUrl.split(','), maxReconnectAttempts: -1 });
  let db = await connectDb();
  // No unique key on event_id: a second effect would show, not be refused.
  await db.query('CREATE TABLE IF NOT EXISTS effects (event_id uuid NOT NULL, ' +
    'replica text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())');
  // The handler's order starts here (a new schema is ordered): events already
  // out run once each, unordered; the ones after, in order. Taken once per
  // handler name, before the first fetch; later calls keep it.
  await db.query('SELECT outbox.ledger_order_baseline($1)', [s.handler]);
  const consumer = await bind(nc);
  emit({ ready: s.replica, consumer: s.durable, handler: s.handler });
  let ran = 0;
  while (!stopping) {
    const msgs = await consumer.fetch({ max_messages: s.batchSize, expires: 1000 });
    for await (const m of msgs) {
      // A message in hand is settled even while stopping.
      const v = await handle(db, m.string());
      if (v.error) {
        console.error(`consumer: event: ${v.error}`);
        await db.query('SELECT 1').catch(async () => {
          await db.end().catch(() => {});
          db = await connectDb();
        });
      }
      if (v.ran) {
        ran++;
      }
      settle(m, v);
    }
  }
  emit({ stopped: s.replica, effects: ran });
  await nc.drain();
  await db.end();
}

main().catch((err) => {
  console.error(`consumer: ${err.message}`);
  process.exit(1);
});
