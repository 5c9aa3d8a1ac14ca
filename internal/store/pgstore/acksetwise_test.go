package pgstore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestQueueOpsMatchVersion14: the set-based op_ack_many, op_lease_due and
// op_promote_grace of schema version 15 and the set-based tombstone check of version 16's
// op_insert (and delayq_send_many, which no longer asks for the payloads
// back) answer every call as version 14 did and leave the same rows
// behind. Two schemas, one of version 14 and one of this build's, get
// the same calls with the same clock (now_ms() of both reads a clock the
// test sets): sends of the caller's ids (new, live, acked: tombstones;
// priorities 0–2, due now or soon) through op_insert and
// delayq_send_many, promotions, leases, lease expiries and nacks, then ack batches
// of random ids (sent, acked, never sent) with random receipts (the
// current lease's, an earlier delivery's kept after an expiry or a nack,
// one of a wrong token), an id often twice in a batch. After each round
// the answers, the messages, the queue rows, the tombstones and the
// topic's counts must be equal in both.
func TestQueueOpsMatchVersion14(t *testing.T) {
	srv := pgtest.Shared(t)
	adm := adminPool(t, srv)
	qs := make([]string, 2)
	clocks := make([]func(int64), 2)
	for i, version := range []int{14, pgstore.SchemaVersion()} {
		schema, q, stmts := oldSchema(t, srv, migrationFiles(t, version)...)
		for _, st := range stmts {
			if _, err := adm.Exec(ctx, st); err != nil {
				t.Fatalf("schema %d: %.80s: %v", version, st, err)
			}
		}
		qs[i], clocks[i] = q, fakeClock(t, adm, schema)
	}
	// The newer schema must have the set-based functions.
	for _, fn := range []string{"ack_many_set(bigint, text, text[], text[])", "op_lease_due(bigint, text, integer, bigint, text)",
		"op_promote_grace(bigint, text, integer, bigint)",
		"op_insert(bigint, text, text[], bytea[], bytea[], bigint[], boolean[], bigint[], integer[], boolean[], boolean, smallint[], boolean)"} {
		var body string
		if err := adm.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE oid = ($1 || '.' || $2)::regprocedure",
			qs[1], fn).Scan(&body); err != nil || !strings.Contains(body, "ctid") {
			t.Fatalf("%s of this build's schema: %v; body:\n%.300s", fn, err, body)
		}
	}

	// both runs sql (%[1]s is the schema) with args on each schema and
	// answers each one's rows as text.
	both := func(sql string, args ...any) [2][]string {
		t.Helper()
		var out [2][]string
		for i, q := range qs {
			rows, err := adm.Query(ctx, fmt.Sprintf(sql, q), args...)
			if err != nil {
				t.Fatalf("schema %s: %.80s: %v", q, sql, err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				out[i] = append(out[i], fmt.Sprint(vals...))
			}
			if err := rows.Err(); err != nil {
				t.Fatalf("schema %s: %.80s: %v", q, sql, err)
			}
		}
		return out
	}
	same := func(what string, got [2][]string) {
		t.Helper()
		if !slices.Equal(got[0], got[1]) {
			t.Fatalf("%s differ:\nversion 14: %q\nthis build's: %q", what, got[0], got[1])
		}
	}

	rng := rand.New(rand.NewPCG(15, 14))
	var statuses [4]int
	leased := 0
	// Batch sizes on both sides of where the functions switch from a
	// statement per message to the set-based statements.
	var smallAcks, bigAcks, smallLeases, bigLeases, smallPromotions, bigPromotions int
	now := int64(1_800_000_000_000)
	for round := range 60 {
		now += 1000
		// Mostly new ids, some sent before (duplicates, or sent again
		// after an ack: the tombstone's id).
		var send []string
		for range 8 {
			send = append(send, fmt.Sprintf("m%03d", max(0, round*6+rng.IntN(12)-4)))
		}
		n := len(send)
		delays, prios := make([]int64, n), make([]int16, n)
		for i := range n {
			delays[i], prios[i] = []int64{0, 500, 500}[rng.IntN(3)], int16(rng.IntN(3))
		}
		for _, set := range clocks {
			set(now)
		}
		same("sends", both(`SELECT * FROM %[1]s.op_insert($1, 't', $2, array_fill('\x01'::bytea, ARRAY[$3::int]),
			array_fill(NULL::bytea, ARRAY[$3::int]), array_fill(0::bigint, ARRAY[$3::int]), array_fill(true, ARRAY[$3::int]),
			$4, array_fill(3, ARRAY[$3::int]), array_fill(false, ARRAY[$3::int]), false, $5, false)`, now, send, n, delays, prios))
		// delayq_send_many: three of the same ids (duplicates now) and two
		// new, payloads of 0–3 KiB.
		many := append(slices.Clone(send[:3]), fmt.Sprintf("q%03da", round), fmt.Sprintf("q%03db", round))
		payloads := make([][]byte, len(many))
		for i := range payloads {
			payloads[i] = make([]byte, rng.IntN(3072))
		}
		same("delayq_send_many", both(`SELECT * FROM %[1]s.delayq_send_many('t', $1, $2, ARRAY[0, 500, 0, 500, 0]::bigint[])`, many, payloads))
		if round%2 == 1 { // what came due over two rounds, for promotions of six or more
			got := both(`SELECT * FROM %[1]s.op_promote_grace($1, 't', $2, 0)`, now, 1+rng.IntN(12))
			same("promotions", got)
			if len(got[1]) != 1 {
				t.Fatalf("promotion answered %q", got[1])
			}
			switch k, _ := strconv.Atoi(strings.Fields(got[1][0])[0]); {
			case k > 5:
				bigPromotions++
			case k > 0:
				smallPromotions++
			}
		}
		same("expiries", both(`SELECT status, id, state FROM %[1]s.op_expire($1, 100)`, now))
		got := both(`SELECT * FROM %[1]s.op_lease_due($1, 't', $2, $3, $4)`,
			now, 1+rng.IntN(12), []int64{500, 1500, 60_000}[rng.IntN(3)], fmt.Sprintf("r%d", round))
		same("leases", got)
		leased += len(got[1])
		if len(got[1]) > 5 {
			bigLeases++
		} else if len(got[1]) > 0 {
			smallLeases++
		}

		// Receipts to ack with: what each message holds now (a lease's, or
		// one kept from a failed delivery), and some of no delivery.
		held := map[string]string{}
		rows, err := adm.Query(ctx, "SELECT id, receipt FROM "+qs[1]+".message WHERE topic = 't' AND receipt IS NOT NULL")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k, r string
			if err := rows.Scan(&k, &r); err != nil {
				t.Fatal(err)
			}
			held[k] = r
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		var heldIDs []string
		for k := range held {
			heldIDs = append(heldIDs, k)
		}
		slices.Sort(heldIDs)
		if round%4 == 3 && len(heldIDs) > 0 { // a nack keeps the receipt
			k := heldIDs[rng.IntN(len(heldIDs))]
			same("nack", both(`SELECT status, id, state FROM %[1]s.op_nack($1, 't', $2, $3, 0, 'x')`, now, k, held[k]))
		}
		// id is one with a receipt, or any id up to a few never sent.
		id := func() string {
			if len(heldIDs) > 0 && rng.IntN(2) == 0 {
				return heldIDs[rng.IntN(len(heldIDs))]
			}
			return fmt.Sprintf("m%03d", rng.IntN(round*6+16))
		}
		receipt := func(k string) string {
			switch r, ok := held[k]; {
			case ok && rng.IntN(4) > 0:
				return r
			case rng.IntN(2) == 0:
				return fmt.Sprintf("r%d-1", max(round-1, 0))
			default:
				return "wrong-1"
			}
		}
		for range 3 {
			var bids, brcs []string
			for range 1 + rng.IntN(12) {
				k := id()
				if len(bids) > 0 && rng.IntN(4) == 0 {
					k = bids[rng.IntN(len(bids))]
				}
				bids, brcs = append(bids, k), append(brcs, receipt(k))
			}
			got := both(`SELECT * FROM %[1]s.op_ack_many($1, 't', $2, $3)`, now, bids, brcs)
			same(fmt.Sprintf("round %d: statuses of ack %q %q", round, bids, brcs), got)
			if len(bids) > 2 {
				bigAcks++
			} else {
				smallAcks++
			}
			if len(got[1]) != len(bids) {
				t.Fatalf("%d statuses for %d items", len(got[1]), len(bids))
			}
			for _, s := range got[1] {
				switch s {
				case "0":
					statuses[0]++
				case "2":
					statuses[2]++
				case "3":
					statuses[3]++
				default:
					t.Fatalf("status %s", s)
				}
			}
		}
		same("messages", both(`SELECT id, seq, state, due_at, created_at, updated_at, lease_until, dead_at, deliveries, failures,
			receipt, last_error, payload FROM %[1]s.message ORDER BY id`))
		same("tombstones", both(`SELECT id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts,
			last_error, priority, receipt FROM %[1]s.tombstone ORDER BY id`))
		same("inflight", both(`SELECT * FROM %[1]s.q_inflight ORDER BY lease_until, seq`))
		same("ready", both(`SELECT * FROM %[1]s.q_ready ORDER BY due_at, seq`))
		same("scheduled", both(`SELECT * FROM %[1]s.q_scheduled ORDER BY due_at, seq`))
		same("counts", both(`SELECT sum(scheduled), sum(ready), sum(inflight), sum(dead), sum(acked) FROM %[1]s.topic_count WHERE topic = 't'`))
	}
	// Redelivered: leased again from q_ready after an expiry or a nack.
	var again int
	if err := adm.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+qs[1]+".message WHERE deliveries > 1) + (SELECT count(*) FROM "+qs[1]+
		".tombstone WHERE deliveries > 1)").Scan(&again); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d leased (%d messages more than once); ack statuses: %d acked, %d missing, %d conflicts", leased, again, statuses[0], statuses[2], statuses[3])
	t.Logf("acks of 1-2 items: %d, of more: %d; leases of 1-5: %d, of more: %d; promotions of 1-5: %d, of more: %d",
		smallAcks, bigAcks, smallLeases, bigLeases, smallPromotions, bigPromotions)
	if statuses[0] < 50 || statuses[2] < 20 || statuses[3] < 50 || leased < 100 || again < 10 ||
		min(smallAcks, bigAcks, smallLeases, bigLeases) < 10 || min(smallPromotions, bigPromotions) < 5 {
		t.Fatalf("statuses %v, %d leased, %d more than once: too few of a kind to compare", statuses, leased, again)
	}
}

// TestConcurrentAckBatches: ack batches that share ids, in different
// orders, from several connections at once, neither deadlock nor ack a
// message twice: each leased message is acked by exactly one item, every
// other item of it answers conflict, and the counts end with nothing
// inflight.
func TestConcurrentAckBatches(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	const n, ackers, per = 300, 6, 25
	msgs := make([]store.InsertMessage, n)
	for i := range msgs {
		msgs[i] = store.InsertMessage{ID: fmt.Sprintf("c%03d", i), Relative: true, MaxAttempts: 3}
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	var items []store.AckItem
	for len(items) < n {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 100, LeaseFor: 600_000, Token: fmt.Sprintf("tok%d", len(items))})
		if err != nil || len(recs) == 0 {
			t.Fatalf("lease: %d %v", len(recs), err)
		}
		for _, r := range recs {
			items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
		}
	}

	var (
		mu        sync.Mutex
		acked     = map[string]int{}
		conflicts int
		wg        sync.WaitGroup
	)
	errs := make(chan error, ackers)
	for w := range ackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 20))
			mine := slices.Clone(items)
			rng.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			for start := 0; start < len(mine); start += per {
				batch := mine[start:min(start+per, len(mine))]
				res, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: batch})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, e := range res {
					switch {
					case e == nil:
						acked[batch[i].ID]++
					case errors.Is(e, store.ErrConflict):
						conflicts++
					default:
						errs <- fmt.Errorf("ack %s: %w", batch[i].ID, e)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			t.Fatalf("deadlock: %v", err)
		}
		t.Fatal(err)
	}
	if len(acked) != n || conflicts != n*(ackers-1) {
		t.Fatalf("%d messages acked, %d conflicts; want %d and %d", len(acked), conflicts, n, n*(ackers-1))
	}
	for k, c := range acked {
		if c != 1 {
			t.Fatalf("%s acked %d times", k, c)
		}
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil || tr.Counts.Inflight != 0 || tr.Counts.Acked != n {
		t.Fatalf("counts %+v %v: want 0 inflight, %d acked", tr.Counts, err, n)
	}
}
