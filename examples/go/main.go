// SPDX-License-Identifier: MIT

// A review service that writes its events with outbox.enqueue() (pgx v4).
//
// Each review and its events commit in one transaction: both, or neither. It
// writes one event with outbox.enqueue(), two with outbox.enqueue_many(), has
// one refused (SQLSTATE 22023: the review rolls back with it), and resolves a
// COMMIT whose answer was lost (docs/writing-events.md).
//
//	DATABASE_URL=postgresql://app@127.0.0.1:5432/app go run .
//
// Prints one JSON line per step. Works directly and through PgBouncer in
// transaction mode (docs/writing-events.md).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

const (
	movieID        = "0190a3b2-1c2d-7e3f-8a9b-0c1d2e3f4a5b"
	resolveTimeout = 60 * time.Second
	// Six single reviews: pgx prepares a statement on the server from its first
	// run on unless told not to, and its second run is where a transaction
	// pooler breaks it; psycopg and JDBC wait for the fifth.
	singleReviews = 6
)

// written is what one transaction wrote, and how lost COMMIT answers were resolved.
type written struct {
	ReviewID string   `json:"review_id"`
	EventIDs []string `json:"event_ids"`
	InDoubt  []string `json:"in_doubt"`
}

// docs:start connect
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	// The simple protocol: pgx prepares nothing on the server, so any pooled
	// server connection can run the next statement (PgBouncer in
	// transaction mode).
	cfg.PreferSimpleProtocol = true
	return pgx.ConnectConfig(ctx, cfg)
}

// docs:end connect

// docs:start single
// addReview writes the review and its event in the caller's open transaction.
func addReview(ctx context.Context, tx pgx.Tx, stars int) (written, error) {
	var w written
	err := tx.QueryRow(ctx, "INSERT INTO reviews (movie_id, stars) VALUES ($1::uuid, $2) "+
		"RETURNING id::text", movieID, stars).Scan(&w.ReviewID)
	if err != nil {
		return w, err
	}
	payload, _ := json.Marshal(map[string]any{"review_id": w.ReviewID, "stars": stars})
	var eventID string
	err = tx.QueryRow(ctx, "SELECT outbox.enqueue('movie', $1::uuid, 'review.logged', "+
		"$2::jsonb)::text", movieID, string(payload)).Scan(&eventID)
	w.EventIDs = []string{eventID}
	return w, err
}

// docs:end single

// docs:start many
// addReviewAndRating writes a review and two events with one outbox.enqueue_many().
func addReviewAndRating(ctx context.Context, tx pgx.Tx, stars int) (written, error) {
	var w written
	err := tx.QueryRow(ctx, "INSERT INTO reviews (movie_id, stars) VALUES ($1::uuid, $2) "+
		"RETURNING id::text", movieID, stars).Scan(&w.ReviewID)
	if err != nil {
		return w, err
	}
	events, _ := json.Marshal([]map[string]any{
		{"aggregate_type": "movie", "aggregate_id": movieID, "event_type": "review.logged",
			"payload": map[string]any{"review_id": w.ReviewID, "stars": stars}},
		{"aggregate_type": "movie", "aggregate_id": movieID, "event_type": "rating.changed",
			"payload": map[string]any{"stars": stars}, "tenant_id": "acme"},
	})
	err = tx.QueryRow(ctx, "SELECT outbox.enqueue_many($1::jsonb)::text[]",
		string(events)).Scan(&w.EventIDs)
	return w, err
}

// docs:end many

// addRefusedReview uses an event_type that repeats its aggregate_type: refused.
func addRefusedReview(ctx context.Context, tx pgx.Tx, stars int) (written, error) {
	var w written
	err := tx.QueryRow(ctx, "INSERT INTO reviews (movie_id, stars) VALUES ($1::uuid, $2) "+
		"RETURNING id::text", movieID, stars).Scan(&w.ReviewID)
	if err != nil {
		return w, err
	}
	emit(map[string]any{"step": "refused", "review_id": w.ReviewID})
	_, err = tx.Exec(ctx, "SELECT outbox.enqueue('movie', $1::uuid, 'movie.review.logged', '{}')",
		movieID)
	return w, err
}

// docs:start commit
// resolve asks, over a new connection, whether transaction xid committed or aborted.
func resolve(ctx context.Context, url, xid string) (string, error) {
	conn, err := connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(resolveTimeout)
	for {
		var status *string
		err := conn.QueryRow(ctx, "SELECT pg_xact_status($1::xid8)", xid).Scan(&status)
		if err != nil {
			return "", err
		}
		if status != nil && (*status == "committed" || *status == "aborted") {
			return *status, nil
		}
		if status == nil || time.Now().After(deadline) {
			return "", fmt.Errorf("transaction %s unresolved: pg_xact_status says %v", xid, status)
		}
		time.Sleep(100 * time.Millisecond) // in progress until its server process sees us gone
	}
}

type work func(context.Context, pgx.Tx) (written, error)

// write runs w in a transaction and commits it exactly once; it returns the
// connection to go on with.
func write(ctx context.Context, url string, conn *pgx.Conn, w work) (*pgx.Conn, written, error) {
	var inDoubt []string
	for {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return conn, written{}, err
		}
		out, err := w(ctx, tx)
		var xid string
		if err == nil {
			err = tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&xid)
		}
		if err != nil {
			_ = tx.Rollback(ctx)
			return conn, out, err
		}
		out.InDoubt = inDoubt
		err = tx.Commit(ctx)
		var pgErr *pgconn.PgError
		if err == nil || errors.As(err, &pgErr) {
			return conn, out, err // committed, or refused by the server: nothing written
		}
		// The COMMIT may or may not have happened: never write it again blindly.
		conn.Close(ctx)
		fate, err := resolve(ctx, url, xid)
		if err != nil {
			return nil, out, err
		}
		out.InDoubt = append(inDoubt, fate)
		inDoubt = out.InDoubt
		if conn, err = connect(ctx, url); err != nil || fate == "committed" {
			return conn, out, err
		}
		// aborted: nothing of it was written, so writing it again is safe
	}
}

// docs:end commit

func emit(line map[string]any) {
	text, _ := json.Marshal(line)
	fmt.Println(string(text))
}

func run(ctx context.Context, url string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS reviews (id uuid PRIMARY KEY DEFAULT "+
		"gen_random_uuid(), movie_id uuid NOT NULL, stars integer NOT NULL)")
	if err != nil {
		return err
	}
	type step struct {
		name string
		w    work
	}
	var steps []step
	for i := 0; i < singleReviews; i++ {
		steps = append(steps, step{"single", func(ctx context.Context, tx pgx.Tx) (written, error) {
			return addReview(ctx, tx, 5)
		}})
	}
	steps = append(steps, step{"many", func(ctx context.Context, tx pgx.Tx) (written, error) {
		return addReviewAndRating(ctx, tx, 4)
	}})
	for _, s := range steps {
		var out written
		if conn, out, err = write(ctx, url, conn, s.w); err != nil {
			return err
		}
		emit(map[string]any{"step": s.name, "review_id": out.ReviewID, "event_ids": out.EventIDs,
			"in_doubt": append([]string{}, out.InDoubt...)})
	}
	refused := func(ctx context.Context, tx pgx.Tx) (written, error) { return addRefusedReview(ctx, tx, 1) }
	// docs:start refused
	conn, _, err = write(ctx, url, conn, refused)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "22023" {
		// Rolled back: the review is gone with the event it could not write.
		emit(map[string]any{"step": "refused", "sqlstate": pgErr.Code, "message": pgErr.Message})
		return nil
	}
	// docs:end refused
	if err != nil {
		return err
	}
	return errors.New("the refused event was accepted")
}

func main() {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(os.Stderr, "writer: set DATABASE_URL")
		os.Exit(2)
	}
	if err := run(context.Background(), url); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
}
