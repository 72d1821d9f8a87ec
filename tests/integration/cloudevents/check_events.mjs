// Reads the relay's NATS messages as CloudEvents with the JavaScript SDK
// (npm `cloudevents`, which no one here wrote) and checks each against the
// row it was published from.
//
//   node check_events.mjs INPUT.json
//
// INPUT: {"source": the relay's OUTBOX_CE_SOURCE,
//         "binding": "http" for an http: handler's requests (else the stream's messages),
//         "rows": [{"id", "type", "subject", "occurred_at", "traceparent"|null,
//                   "sequence": aggregate_seq as text|null,
//                   "envelope": the row's envelope as JSON text}],
//         "messages": [{"headers": {name: value}, "body": text}]}
//
// The SDK has no NATS binding. The NATS binding's binary mode carries the
// attributes as ce-* headers and the data as the body, which is what the
// SDK's HTTP binary mode reads, so HTTP.toEvent parses a NATS message given
// its headers as they are (the SDK lowercases names). Prints one JSON line:
// {"sdk": version, "checked": n, "failures": [...]}; exits 1 on a failure.
// An http: handler's requests (binding "http") are read the same way; they
// carry Idempotency-Key where the messages carry Nats-Msg-Id, and no
// Outbox-Aggregate-Seq.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { isDeepStrictEqual } from "node:util";
import { HTTP } from "cloudevents";

const require = createRequire(import.meta.url);
const sdkVersion = require("cloudevents/package.json").version;
const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const failures = [];
const rows = new Map(input.rows.map((r) => [r.id, r]));
const seen = new Set();
const http = input.binding === "http";

function fail(id, what) {
  failures.push(`${id}: ${what}`);
}

function expectEqual(id, field, have, want) {
  if (!isDeepStrictEqual(have, want)) {
    fail(id, `${field} is ${JSON.stringify(have)}, want ${JSON.stringify(want)}`);
  }
}

// The SDK's event for these headers and body, validated; null (and a failure) if refused.
function toValidEvent(id, headers, body, how) {
  try {
    const event = HTTP.toEvent({ headers, body });
    event.validate();
    return event;
  } catch (e) {
    const detail = e.errors ? JSON.stringify(e.errors) : "";
    fail(id, `the SDK refuses it (${how}): ${e.message} ${detail}`);
    return null;
  }
}

function withoutHeader(headers, name) {
  return Object.fromEntries(
    Object.entries(headers).filter(([k]) => k.toLowerCase() !== name.toLowerCase()),
  );
}

function check(message) {
  const headers = message.headers;
  const id = headers["ce-id"] ?? "(no ce-id)";
  const row = rows.get(id);

  if (row === undefined) {
    fail(id, "a message with no row");
    return;
  }
  if (seen.has(id)) {
    fail(id, "published twice");
  }
  seen.add(id);
  const event = toValidEvent(id, headers, message.body, "all headers");
  if (event === null) {
    return;
  }
  expectEqual(id, "specversion", event.specversion, "1.0");
  expectEqual(id, "id", event.id, row.id);
  if (http) {
    expectEqual(id, "Idempotency-Key", headers["Idempotency-Key"], row.id);
  } else {
    expectEqual(id, "Nats-Msg-Id", headers["Nats-Msg-Id"], row.id);
  }
  expectEqual(id, "source", event.source, input.source);
  expectEqual(id, "type", event.type, row.type);
  expectEqual(id, "subject", event.subject, row.subject);
  // The SDK moves an impossible time silently (Feb 30 to Mar 2, month 13 to
  // now), so the header must be the row's text and the same instant.
  expectEqual(id, "ce-time header", headers["ce-time"], row.occurred_at);
  expectEqual(id, "time", event.time, new Date(row.occurred_at).toISOString());
  expectEqual(id, "datacontenttype", event.datacontenttype, "application/json");
  // The distributed-tracing extension travels as the W3C header itself, which the
  // SDK leaves to the tracing library: the header, present exactly when the row has one.
  expectEqual(id, "traceparent header", headers["traceparent"], row.traceparent ?? undefined);
  // The sequence extension is the row's aggregate_seq (an ordered schema's event),
  // and absent, not invented, for an unordered one; so is pgoutbox's own header.
  expectEqual(id, "sequence", event.sequence, row.sequence ?? undefined);
  if (!http) {
    expectEqual(id, "Outbox-Aggregate-Seq header", headers["Outbox-Aggregate-Seq"],
      row.sequence ?? undefined);
  }
  expectEqual(id, "data", event.data, JSON.parse(row.envelope));
  // Readers of either header find the content type: the binding's
  // ce-datacontenttype alone, and Content-Type alone.
  expectEqual(id, "ce-datacontenttype header", headers["ce-datacontenttype"], "application/json");
  expectEqual(id, "Content-Type header", headers["Content-Type"], "application/json");
  for (const dropped of ["Content-Type", "ce-datacontenttype"]) {
    const alone = toValidEvent(id, withoutHeader(headers, dropped), message.body,
      `without ${dropped}`);
    if (alone !== null) {
      expectEqual(id, `datacontenttype without ${dropped}`, alone.datacontenttype,
        "application/json");
      expectEqual(id, `data without ${dropped}`, alone.data, JSON.parse(row.envelope));
    }
  }
}

input.messages.forEach(check);
for (const id of rows.keys()) {
  if (!seen.has(id)) {
    fail(id, "a row with no message");
  }
}
console.log(JSON.stringify({ sdk: sdkVersion, checked: seen.size, failures }));
process.exit(failures.length === 0 ? 0 : 1);
