package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

var ctx = context.Background()

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openMem(t testing.TB, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("db", Options{FS: fs, Logger: quietLogger(), BallastSize: -1, CacheSize: 8 << 20, MemTableSize: 4 << 20})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func mustVerify(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func insert(t testing.TB, s *Store, topic string, now int64, ms ...store.InsertMessage) []store.InsertResult {
	t.Helper()
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: ms})
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	return res
}

func m(id string, due int64) store.InsertMessage {
	return store.InsertMessage{ID: id, Payload: []byte("p-" + id), DueAt: due, MaxAttempts: 2,
		Headers: map[string]string{"h": id}}
}

// A full lifecycle through every state, checked against Verify and across
// a reopen.
func TestLifecycle(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	res := insert(t, s, "q", 100, m("a", 50), m("b", 200), m("c", 300), m("a", 1))
	if res[0].Duplicate || !res[3].Duplicate || res[3].Record.Seq != res[0].Record.Seq {
		t.Fatalf("duplicate handling: %+v", res)
	}
	if res[0].Record.State != store.StateReady || res[1].Record.State != store.StateScheduled {
		t.Fatalf("states: %v %v", res[0].Record.State, res[1].Record.State)
	}
	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 250, Max: 10})
	if err != nil || pr.Promoted != 1 || pr.NextDue != 300 {
		t.Fatalf("promote: %+v %v", pr, err)
	}
	ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 250, Max: 10, LeaseFor: 750, Token: "T"})
	if err != nil || len(ls) != 2 || ls[0].ID != "a" || ls[1].ID != "b" || ls[0].Receipt != "T-1" {
		t.Fatalf("lease: %+v %v", ls, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "a", Receipt: "wrong", Now: 260}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale ack: %v", err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "a", Receipt: "T-1", Now: 260}); err != nil {
		t.Fatal(err)
	}
	nr, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: "b", Receipt: "T-1", Now: 270, RetryDelay: 0, Error: "e1"})
	if err != nil || nr.State != store.StateReady || nr.Failures != 1 {
		t.Fatalf("nack: %+v %v", nr, err)
	}
	ls, _ = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 280, Max: 1, LeaseFor: 10, Token: "U"})
	if len(ls) != 1 || ls[0].Receipt != "U-2" {
		t.Fatalf("second lease: %+v", ls)
	}
	ex, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 295, Max: 10})
	if err != nil || len(ex) != 1 || ex[0].State != store.StateDead || ex[0].LastError != "lease expired" {
		t.Fatalf("expire: %+v %v", ex, err)
	}
	tr, err := s.TopicGet(ctx, "q")
	want := store.Counts{Scheduled: 1, Dead: 1, Acked: 1}
	if err != nil || tr.Counts != want || tr.NextDue != 300 {
		t.Fatalf("topic: %+v %v", tr, err)
	}
	mustVerify(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs)
	defer s.Close()
	mustVerify(t, s)
	tr, err = s.TopicGet(ctx, "q")
	if err != nil || tr.Counts != want {
		t.Fatalf("after reopen: %+v %v", tr, err)
	}
	got, err := s.MessageGet(ctx, "q", "a")
	if err != nil || got.State != store.StateAcked || got.Payload != nil {
		t.Fatalf("acked tombstone: %+v %v", got, err)
	}
	// Seq keeps increasing after a reopen.
	r2 := insert(t, s, "q", 400, m("z", 0))
	if r2[0].Record.Seq <= res[2].Record.Seq {
		t.Fatalf("seq went backwards: %d <= %d", r2[0].Record.Seq, res[2].Record.Seq)
	}
	dl, cur, err := s.DeadList(ctx, &store.DeadListParams{Topic: "q", Limit: 10})
	if err != nil || len(dl) != 1 || cur != "" {
		t.Fatalf("dead list: %+v %q %v", dl, cur, err)
	}
	rp, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "q", Now: 500, Max: 10})
	if err != nil || len(rp) != 1 || rp[0].State != store.StateReady || rp[0].Failures != 0 {
		t.Fatalf("replay: %+v %v", rp, err)
	}
	n, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Now: 1000, Max: 10})
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if _, err := s.MessageGet(ctx, "q", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("purged: %v", err)
	}
	mustVerify(t, s)
}

func TestClosed(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageGet(ctx, "q", "a"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
}

// 16 goroutines lease from one topic concurrently: each message is leased
// exactly once, and acks racing cancels never both succeed.
func TestConcurrentLeaseAckCancel(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const n = 2000
	for i := 0; i < n; i += 100 {
		var ms []store.InsertMessage
		for j := i; j < i+100; j++ {
			ms = append(ms, m(fmt.Sprintf("m%05d", j), 0))
		}
		insert(t, s, "q", 1, ms...)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	var acked, cancelled atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 2, Max: 7,
					LeaseFor: 1e6, Token: fmt.Sprintf("g%d.%d", g, k)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ls) == 0 {
					return
				}
				for _, r := range ls {
					mu.Lock()
					if prev, ok := seen[r.ID]; ok {
						t.Errorf("%s leased twice (%s, %s)", r.ID, prev, r.Receipt)
					}
					seen[r.ID] = r.Receipt
					mu.Unlock()
					// Race an ack against a cancel of the same message.
					var ackErr, cancelErr error
					var w2 sync.WaitGroup
					w2.Add(2)
					go func() {
						defer w2.Done()
						ackErr = s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: r.ID, Receipt: r.Receipt, Now: 3})
					}()
					go func() {
						defer w2.Done()
						_, cancelErr = s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: r.ID, Now: 3})
					}()
					w2.Wait()
					switch {
					case ackErr == nil && cancelErr == nil:
						t.Errorf("%s: ack and cancel both succeeded", r.ID)
					case ackErr == nil:
						acked.Add(1)
					case cancelErr == nil:
						cancelled.Add(1)
					default:
						t.Errorf("%s: both failed: %v / %v", r.ID, ackErr, cancelErr)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != n || acked.Load()+cancelled.Load() != n {
		t.Fatalf("leased %d, acked %d, cancelled %d of %d", len(seen), acked.Load(), cancelled.Load(), n)
	}
	tr, _ := s.TopicGet(ctx, "q")
	if tr.Counts != (store.Counts{Acked: acked.Load()}) {
		t.Fatalf("counts %+v", tr.Counts)
	}
	mustVerify(t, s)
}

// Leases keep working (and find new messages) after the low-water mark
// moved past a long run of tombstones, including messages inserted and
// rescheduled below the mark.
func TestLowWaterLowered(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	for i := range 50 {
		insert(t, s, "q", 100, m(fmt.Sprint("a", i), 100))
	}
	ls, _ := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 100, Max: 100, LeaseFor: 400, Token: "t"})
	if len(ls) != 50 {
		t.Fatalf("leased %d", len(ls))
	}
	// Below the ready mark: due earlier than everything leased so far.
	insert(t, s, "q", 100, m("early", 10))
	// Below the scheduled mark after a promote scanned past the front.
	insert(t, s, "q", 100, m("late", 1000))
	if pr, _ := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 100, Max: 10}); pr.NextDue != 1000 {
		t.Fatalf("next due %d", pr.NextDue)
	}
	insert(t, s, "q", 100, m("mid", 500))
	if _, err := s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "q", ID: "late", DueAt: 200, Now: 100}); err != nil {
		t.Fatal(err)
	}
	if pr, _ := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 600, Max: 10}); pr.Promoted != 2 {
		t.Fatalf("promoted %d", pr.Promoted)
	}
	ls, _ = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 600, Max: 10, LeaseFor: -500, Token: "u"})
	if len(ls) != 3 || ls[0].ID != "early" || ls[1].ID != "late" || ls[2].ID != "mid" {
		t.Fatalf("lease order: %v", ls)
	}
	// The global lease mark: expire the first batch, then a lease that
	// ends earlier than the mark must still expire.
	if ex, _ := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 100, Max: 100}); len(ex) != 3 {
		t.Fatalf("expired %d, want the 3 with LeaseUntil 100", len(ex))
	}
	if ex, _ := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 1000, Max: 100}); len(ex) != 50 {
		t.Fatalf("expired %d", len(ex))
	}
	ls, _ = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1000, Max: 1, LeaseFor: -995, Token: "v"})
	if ex, _ := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 1000, Max: 100}); len(ex) != 1 || ex[0].ID != ls[0].ID {
		t.Fatalf("expire below the mark: %v", ex)
	}
	mustVerify(t, s)
}
