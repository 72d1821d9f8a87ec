// SPDX-License-Identifier: MIT

// A service that consumes the relay's events from JetStream with its own
// client (nats.go 1.22, pgx v4) and runs each event's effect exactly once,
// with the outbox ledger's SQL API (docs/consumers.md, "From any language").
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
//	DATABASE_URL=postgresql://app@127.0.0.1:5432/app OUTBOX_STREAM=EVENTS \
//	OUTBOX_SUBJECT_PREFIX=events go run .
//
// Settings (environment):
//
//	DATABASE_URL               the service's database, migrated (outboxctl migrate)
//	OUTBOX_NATS_URL            nats://127.0.0.1:4222
//	OUTBOX_STREAM              EVENTS: the relay's stream
//	OUTBOX_SUBJECT_PREFIX      events: this consumer reads {prefix}.>
//	OUTBOX_CONSUMER_NAME       effects-go: the durable pull consumer its replicas share
//	OUTBOX_ACK_WAIT_SECONDS    60: a message a replica took and never settled comes again after it
//	OUTBOX_MAX_ATTEMPTS        10: failures before an event is dead-lettered
//	OUTBOX_BACKOFF_BASE_MS     5000, OUTBOX_BACKOFF_CAP_MS 300000: the retry delays
//	HANDLER                    effects: the handler name in the ledger (outboxctl trace, dead)
//	REPLICA                    host:pid: written with each effect
//	BATCH_SIZE                 50: messages per fetch
//
// An event whose payload is {"poison": true} fails every time (to show dead
// letters). Prints one JSON line when ready and one per dead letter; exits
// 0 on SIGTERM or SIGINT after settling the message in hand.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/nats-io/nats.go"
)

type settings struct {
	databaseURL, natsURL, stream, prefix, durable, handler, replica string
	ackWait                                                         time.Duration
	maxAttempts, backoffBaseMs, backoffCapMs, batchSize             int
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func envInt(key string, def int) int {
	n, err := strconv.Atoi(env(key, strconv.Itoa(def)))
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "consumer: %s must be a whole number from 1\n", key)
		os.Exit(2)
	}
	return n
}

func load() settings {
	host, _ := os.Hostname()
	s := settings{
		databaseURL:   os.Getenv("DATABASE_URL"),
		natsURL:       env("OUTBOX_NATS_URL", nats.DefaultURL),
		stream:        env("OUTBOX_STREAM", "EVENTS"),
		prefix:        env("OUTBOX_SUBJECT_PREFIX", "events"),
		durable:       env("OUTBOX_CONSUMER_NAME", "effects-go"),
		handler:       env("HANDLER", "effects"),
		replica:       env("REPLICA", fmt.Sprintf("%s:%d", host, os.Getpid())),
		ackWait:       time.Duration(envInt("OUTBOX_ACK_WAIT_SECONDS", 60)) * time.Second,
		maxAttempts:   envInt("OUTBOX_MAX_ATTEMPTS", 10),
		backoffBaseMs: envInt("OUTBOX_BACKOFF_BASE_MS", 5000),
		backoffCapMs:  envInt("OUTBOX_BACKOFF_CAP_MS", 300000),
		batchSize:     envInt("BATCH_SIZE", 50),
	}
	if s.databaseURL == "" {
		fmt.Fprintln(os.Stderr, "consumer: set DATABASE_URL")
		os.Exit(2)
	}
	return s
}

// envelope is the part of the message body (the event's v1 envelope) the effect reads.
type envelope struct {
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

// effect is the service's work for one event, in the claim's transaction.
func effect(ctx context.Context, tx pgx.Tx, s *settings, ev *envelope) error {
	var p struct {
		Poison bool `json:"poison"`
	}
	_ = json.Unmarshal(ev.Payload, &p)
	if p.Poison {
		return errors.New("poisoned event: this handler always fails on it")
	}
	_, err := tx.Exec(ctx, "INSERT INTO effects (event_id, replica) VALUES ($1::uuid, $2)",
		ev.ID, s.replica)
	return err
}

// What to do with a message once its transaction is over.
type verdict struct {
	ack, term bool
	delay     time.Duration // nak with this delay unless ack or term
	ran       bool          // the effect committed
}

var retryAfter = regexp.MustCompile(`retry_after_ms=(\d+)`)

// notNow reads the delay of a try_claim that raised 55P03 or 55000; ok false for any other error.
func notNow(err error) (time.Duration, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "55P03" && pgErr.Code != "55000") {
		return 0, false
	}
	delay := time.Second
	if m := retryAfter.FindStringSubmatch(pgErr.Detail); m != nil {
		ms, _ := strconv.Atoi(m[1])
		delay = time.Duration(ms) * time.Millisecond
	}
	return delay, true
}

// docs:start handle
// handle runs one message's effect exactly once and says how to settle it.
func handle(ctx context.Context, db *pgx.Conn, s *settings, body []byte) (verdict, error) {
	var ev envelope
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID == "" {
		return verdict{term: true}, fmt.Errorf("not an envelope: %v", err) // never will be
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return verdict{delay: time.Second}, err // an outage spends no attempt
	}
	defer tx.Rollback(ctx) // a no-op after COMMIT
	var run bool
	err = tx.QueryRow(ctx, "SELECT outbox.try_claim($1::uuid, $2, $3::jsonb)",
		ev.ID, s.handler, string(body)).Scan(&run)
	if delay, ok := notNow(err); ok {
		return verdict{delay: delay}, nil // busy elsewhere, backing off, or out of order
	}
	if err != nil {
		return verdict{delay: time.Second}, err
	}
	if !run {
		return verdict{ack: true}, nil // done already, or dead-lettered
	}
	if err = effect(ctx, tx, s, &ev); err == nil {
		if err = tx.Commit(ctx); err != nil {
			// Committed or not, the next delivery's try_claim knows.
			return verdict{delay: time.Second}, err
		}
		return verdict{ack: true, ran: true}, nil
	}
	_ = tx.Rollback(ctx) // the claim goes with the effect; fail() counts the attempt
	return failed(ctx, db, s, &ev, body, err.Error())
}

// failed counts a failure of the effect in the ledger: retry later, or dead.
func failed(ctx context.Context, db *pgx.Conn, s *settings, ev *envelope, body []byte,
	reason string) (verdict, error) {
	var outcome string
	var attempts int
	var delayMs int64
	err := db.QueryRow(ctx, "SELECT outcome, coalesce(attempts, 0), coalesce(ceil(extract(epoch "+
		"FROM retry_at - clock_timestamp()) * 1000), 0)::bigint "+
		"FROM outbox.fail($1::uuid, $2, NULL, $3, $4::jsonb, $5, $6, $7)",
		ev.ID, s.handler, reason, string(body), s.maxAttempts, s.backoffBaseMs,
		s.backoffCapMs).Scan(&outcome, &attempts, &delayMs)
	switch {
	case err != nil:
		return verdict{delay: time.Second}, err
	case outcome == "dead":
		emit(map[string]any{"dead": ev.ID, "attempts": attempts, "reason": reason})
		return verdict{term: true}, nil
	case outcome == "retry":
		return verdict{delay: time.Duration(max(delayMs, 0)) * time.Millisecond}, nil
	default: // stale: settled meanwhile; the next delivery's try_claim says how
		return verdict{delay: time.Second}, nil
	}
}

// docs:end handle

func max(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func emit(line map[string]any) {
	text, _ := json.Marshal(line)
	fmt.Println(string(text))
}

// subscribe creates (or updates) the durable pull consumer and binds to it,
// waiting for the relay to create the stream.
func subscribe(ctx context.Context, js nats.JetStreamContext, s *settings) (*nats.Subscription, error) {
	cfg := &nats.ConsumerConfig{
		Durable:       s.durable,
		AckPolicy:     nats.AckExplicitPolicy,
		AckWait:       s.ackWait,
		MaxDeliver:    -1, // the ledger counts attempts, not the broker
		FilterSubject: s.prefix + ".>",
		DeliverPolicy: nats.DeliverAllPolicy,
	}
	for {
		_, err := js.AddConsumer(s.stream, cfg)
		if errors.Is(err, nats.ErrConsumerNameAlreadyInUse) {
			_, err = js.UpdateConsumer(s.stream, cfg)
		}
		if err == nil {
			return js.PullSubscribe(cfg.FilterSubject, s.durable, nats.Bind(s.stream, s.durable))
		}
		if !errors.Is(err, nats.ErrStreamNotFound) {
			return nil, err
		}
		select { // the relay creates the stream when it starts
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func settle(m *nats.Msg, v verdict) error {
	switch {
	case v.term:
		return m.Term()
	case v.ack:
		return m.Ack()
	default:
		return m.NakWithDelay(v.delay)
	}
}

func run(ctx context.Context, s *settings) error {
	nc, err := nats.Connect(s.natsURL, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, s.databaseURL)
	if err != nil {
		return err
	}
	defer func() { db.Close(context.Background()) }()
	// No unique key on event_id: a second effect would show, not be refused.
	if _, err = db.Exec(ctx, "CREATE TABLE IF NOT EXISTS effects (event_id uuid NOT NULL, "+
		"replica text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"); err != nil {
		return err
	}
	// The handler's order starts here (a new schema is ordered): events
	// already out run once each, unordered; the ones after, in order. Taken
	// once per handler name, before the first fetch; later calls keep it.
	if _, err = db.Exec(ctx, "SELECT outbox.ledger_order_baseline($1)", s.handler); err != nil {
		return err
	}
	sub, err := subscribe(ctx, js, s)
	if err != nil {
		return err
	}
	emit(map[string]any{"ready": s.replica, "consumer": s.durable, "handler": s.handler})
	ran := 0
	for ctx.Err() == nil {
		msgs, err := sub.Fetch(s.batchSize, nats.MaxWait(time.Second))
		if err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "consumer: fetch:", err)
			time.Sleep(time.Second)
		}
		for _, m := range msgs {
			// Background: a message in hand is settled even while stopping.
			v, err := handle(context.Background(), db, s, m.Data)
			if err != nil {
				fmt.Fprintln(os.Stderr, "consumer: event:", err)
			}
			if db.IsClosed() {
				if db, err = pgx.Connect(ctx, s.databaseURL); err != nil {
					return err
				}
			}
			if v.ran {
				ran++
			}
			if err = settle(m, v); err != nil {
				fmt.Fprintln(os.Stderr, "consumer: settle:", err)
			}
		}
	}
	emit(map[string]any{"stopped": s.replica, "effects": ran})
	return nil
}

func main() {
	s := load()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, &s); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}
