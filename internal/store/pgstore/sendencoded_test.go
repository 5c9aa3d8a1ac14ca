package pgstore_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// Batched sends encode their parameters into a buffer kept from one
// batch to the next (recsEncoded): a batch of large payloads, then one
// of small ones, then one that answers duplicates, each message stored
// with its own payload and headers — through the store's own pool, and
// through an application's pool that does not cache prepared statements
// (as behind PgBouncer), which takes pgx's ordinary path. The store's
// pool has one connection, so every batch reuses the same connection's
// prepared statement.
func TestSendManyEncodedParameters(t *testing.T) {
	srv := pgtest.Shared(t)
	execPool := func(o *pgstore.Options) {
		cfg, err := pgxpool.ParseConfig(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		o.Pool = p
	}
	oneConn := func(o *pgstore.Options) { o.URL += "&pool_max_conns=1" }
	for name, mod := range map[string]func(*pgstore.Options){"own pool": oneConn, "exec-mode pool": execPool} {
		t.Run(name, func(t *testing.T) {
			s := openAt(t, srv, mod)
			payload := func(batch, i, size int) []byte {
				return bytes.Repeat([]byte(fmt.Sprintf("%d.%d;", batch, i)), size)
			}
			batches := []struct{ n, size int }{{100, 300}, {100, 1}, {3, 50}}
			for b, sz := range batches {
				msgs := make([]store.InsertMessage, sz.n)
				for i := range msgs {
					msgs[i] = store.InsertMessage{ID: fmt.Sprintf("b%d-%d", b, i), Payload: payload(b, i, sz.size), Headers: map[string]string{"i": fmt.Sprint(i)}, Relative: true, Delay: 3_600_000, MaxAttempts: 3}
				}
				res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs})
				if err != nil {
					t.Fatalf("batch %d: %v", b, err)
				}
				for i, r := range res {
					if r.Duplicate || r.Record.ID != msgs[i].ID {
						t.Fatalf("batch %d answer %d: %+v", b, i, r)
					}
				}
			}
			// The first batch again: all duplicates, nothing overwritten.
			again := make([]store.InsertMessage, 100)
			for i := range again {
				again[i] = store.InsertMessage{ID: fmt.Sprintf("b0-%d", i), Payload: []byte("other"), Relative: true, Delay: 1}
			}
			res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: again})
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				if !r.Duplicate {
					t.Fatalf("resent %s not a duplicate", again[i].ID)
				}
			}
			for b, sz := range batches {
				for i := range sz.n {
					r, err := s.MessageGet(ctx, "t", fmt.Sprintf("b%d-%d", b, i))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(r.Payload, payload(b, i, sz.size)) || r.Headers["i"] != fmt.Sprint(i) {
						t.Fatalf("b%d-%d stored payload %.40q…, headers %v", b, i, r.Payload, r.Headers)
					}
				}
			}
		})
	}
}
