// SPDX-License-Identifier: MIT
//
// A service's integration test with pgoutbox in containers: PostgreSQL,
// nats-server with JetStream, `outboxctl migrate`, one `outboxd relay` and
// one `outboxd consume` running a sql: handler. The test writes events the
// way the service does (outbox.enqueue inside its own transaction) and
// waits until the handler's rows appear: each event exactly once.
//
// Two ways to wire the containers:
//   - default: a user-defined network (containers reach each other by
//     alias, the test reaches PostgreSQL through a mapped port);
//   - OUTBOX_TEST_HOST_NETWORK=1: every container on the host's network on
//     free loopback ports (podman on hosts without a container bridge; this
//     is how pgoutbox's own CI runs it).
// Images: OUTBOX_IMAGE, POSTGRES_IMAGE, NATS_IMAGE (defaults below).
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import net from "node:net";
import { after, before, test } from "node:test";

import pg from "pg";
import { GenericContainer, Network, Wait } from "testcontainers";

const images = {
  outbox: process.env.OUTBOX_IMAGE ?? "localhost/pgoutbox:latest",
  postgres: process.env.POSTGRES_IMAGE ?? "docker.io/library/postgres:15-bookworm",
  nats: process.env.NATS_IMAGE ?? "docker.io/library/nats:2.12-alpine",
};
const hostNetwork = process.env.OUTBOX_TEST_HOST_NETWORK === "1";
const STARTUP_MS = 120_000;

// The handler under test: one row per review event, in the ledger's
// transaction. No unique key, so a second run for one event would show.
const HANDLER =
  "review_log@events.movie.review.logged=sql:INSERT INTO review_log (event_id, movie_id, stars) " +
  "VALUES (($1->>'id')::uuid, ($1->>'aggregate_id')::uuid, ($1->'payload'->>'stars')::int)";

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const started = [];
let network;
let db;

async function start(container) {
  const c = await container.start();
  started.push(c);
  return c;
}

/* Where things are: inside (for outboxd) and outside (for the test). */
const where = {};

async function startServers() {
  if (hostNetwork) {
    Object.assign(where, { pgPort: await freePort(), natsPort: await freePort() });
    where.dbInside = `postgresql://outbox:outbox@127.0.0.1:${where.pgPort}/outbox`;
    where.natsInside = `nats://127.0.0.1:${where.natsPort}`;
  } else {
    network = await new Network().start();
    where.dbInside = "postgresql://outbox:outbox@postgres:5432/outbox";
    where.natsInside = "nats://nats:4222";
  }
  const wire = (c, alias, port) =>
    hostNetwork
      ? c.withNetworkMode("host")
      : c.withNetwork(network).withNetworkAliases(alias).withExposedPorts(port);

  let postgres = new GenericContainer(images.postgres)
    .withEnvironment({ POSTGRES_USER: "outbox", POSTGRES_PASSWORD: "outbox", POSTGRES_DB: "outbox" })
    // The image's first start runs a temporary server: the second line is the real one.
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .withStartupTimeout(STARTUP_MS);
  if (hostNetwork) {
    postgres = postgres
      .withEnvironment({ PGPORT: String(where.pgPort) })
      .withCommand(["postgres", "-c", "listen_addresses=127.0.0.1"]);
  }
  const nats = wire(new GenericContainer(images.nats), "nats", 4222)
    .withCommand(["-js", "--store_dir", "/tmp/nats", ...(hostNetwork ? ["-a", "127.0.0.1", "-p", String(where.natsPort)] : [])])
    .withWaitStrategy(Wait.forLogMessage(/Server is ready/))
    .withStartupTimeout(STARTUP_MS);
  const [pgc] = await Promise.all([start(wire(postgres, "postgres", 5432)), start(nats)]);
  return hostNetwork
    ? { host: "127.0.0.1", port: where.pgPort }
    : { host: pgc.getHost(), port: pgc.getMappedPort(5432) };
}

function outboxd(command, extraEnv = {}) {
  const c = new GenericContainer(images.outbox)
    .withEnvironment({
      OUTBOX_DATABASE_URL: where.dbInside,
      OUTBOX_NATS_URL: where.natsInside,
      ...extraEnv,
    })
    .withCommand(command)
    .withStartupTimeout(STARTUP_MS);
  return hostNetwork ? c.withNetworkMode("host") : c.withNetwork(network);
}

before(async () => {
  const pgAddr = await startServers();
  db = new pg.Client({ ...pgAddr, user: "outbox", password: "outbox", database: "outbox" });
  await db.connect();
  await db.query(
    "CREATE TABLE review_log (event_id uuid NOT NULL, movie_id uuid NOT NULL, stars int NOT NULL)",
  );
  // A one-shot: the strategy waits for it to exit and fails unless it exits 0.
  await start(outboxd(["outboxctl", "migrate"]).withWaitStrategy(Wait.forOneShotStartup()));
  // The daemons print this line once they reach PostgreSQL and NATS (the
  // moment /readyz turns 200). With port mappings Wait.forHttp("/readyz", 9090)
  // works too, and Docker runs the image's HEALTHCHECK for Wait.forHealthCheck().
  const http = async () => (hostNetwork ? { OUTBOX_HTTP_ADDR: `127.0.0.1:${await freePort()}` } : {});
  await Promise.all([
    start(outboxd(["outboxd", "relay"], await http()).withWaitStrategy(Wait.forLogMessage("outboxd ready command=relay"))),
    start(
      outboxd(["outboxd", "consume", "--handler", HANDLER], await http()).withWaitStrategy(
        Wait.forLogMessage("outboxd ready command=consume"),
      ),
    ),
  ]);
});

after(async () => {
  // Ryuk (testcontainers' reaper) cannot run everywhere: stop what we started, always.
  await db?.end().catch(() => {});
  for (const c of started.reverse()) {
    await c.stop({ timeout: 10_000 }).catch(() => {});
  }
  await network?.stop().catch(() => {});
});

async function waitFor(what, fn, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("events written in a transaction are handled exactly once", async () => {
  const movie = randomUUID();
  const ids = [];
  await db.query("BEGIN");
  for (let stars = 1; stars <= 5; stars++) {
    const { rows } = await db.query(
      "SELECT outbox.enqueue('movie', $1, 'review.logged', $2::jsonb) AS id",
      [movie, JSON.stringify({ stars })],
    );
    ids.push(rows[0].id);
  }
  await db.query("COMMIT");

  await waitFor("5 handled events", async () => {
    const { rows } = await db.query("SELECT count(*)::int AS n FROM review_log");
    return rows[0].n >= ids.length;
  });
  const { rows } = await db.query("SELECT event_id, movie_id, stars FROM review_log ORDER BY stars");
  assert.deepEqual(
    rows.map((r) => r.event_id),
    ids,
    "one row per event, in the order of their stars",
  );
  assert.ok(rows.every((r) => r.movie_id === movie));
});

test("a rolled-back transaction publishes nothing", async () => {
  const rolledBack = randomUUID();
  const committed = randomUUID();
  await db.query("BEGIN");
  await db.query("SELECT outbox.enqueue('movie', $1, 'review.logged', '{\"stars\":1}')", [rolledBack]);
  await db.query("ROLLBACK");
  // Autocommit: this one commits. Written after the rolled-back one, so once
  // it is handled the other would have been too, had it been published.
  await db.query("SELECT outbox.enqueue('movie', $1, 'review.logged', '{\"stars\":4}')", [committed]);
  await waitFor("the committed event", async () => {
    const r = await db.query("SELECT 1 FROM review_log WHERE movie_id = $1", [committed]);
    return r.rowCount === 1;
  });
  const r = await db.query("SELECT count(*)::int AS n FROM review_log WHERE movie_id = $1", [rolledBack]);
  assert.equal(r.rows[0].n, 0);
});
