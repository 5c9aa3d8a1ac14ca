package pebblestore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestSizedBatchesFit: the batches of inserts, leases and acks are
// started at their estimated size, and what they write fits in it (a
// batch that outgrows its start is copied at every doubling, which the
// estimate is there to avoid). Ids (up to typicalIDLen), a long topic,
// payloads and headers of several sizes; every message leased and acked
// in batches.
func TestSizedBatchesFit(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	var checked int
	sizedHook = func(sized, length int) {
		checked++
		if length > sized {
			t.Errorf("batch of %d bytes, started at %d", length, sized)
		}
	}
	defer func() { sizedHook = nil }()
	topic := strings.Repeat("t", 200)
	n := 0
	for _, payload := range []int{0, 10, 1024, 64 << 10} {
		for _, idLen := range []int{1, 26, typicalIDLen} {
			ms := make([]store.InsertMessage, 50)
			for i := range ms {
				id := fmt.Sprintf("%0*d", idLen, n)
				n++
				ms[i] = store.InsertMessage{ID: id, Payload: make([]byte, payload), MaxAttempts: 3, Priority: uint8(i % 2)}
				if i%3 == 0 {
					ms[i].Headers = map[string]string{"k": strings.Repeat("v", 300), "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
				}
				if i%5 == 0 {
					ms[i].DueAt = 2 // scheduled, then due by the lease's Now
				}
			}
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 1, Messages: ms}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for {
		recs, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: topic, Now: 10, Max: 100, LeaseFor: 1e6, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		items := make([]store.AckItem, len(recs))
		for i, r := range recs {
			items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
		}
		errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Items: items, Now: 11})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				t.Fatal(e)
			}
		}
	}
	if want := n/50 + 2*(n/100); checked < want {
		t.Fatalf("%d sized batches checked, want at least %d (inserts, leases, acks)", checked, want)
	}
	mustVerify(t, s)
}

// TestTxnOpsInKeyOrder: a txn's writes other than bodies reach the batch
// in key order, those of one key in the order written (so the batch
// means the same), bodies at once in their own order; a caller may
// reuse its key and value buffers after each call.
func TestTxnOpsInKeyOrder(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		x := s.newTxn()
		type w struct {
			kind       pebble.InternalKeyKind
			key, value string
			seq        int
		}
		var bodies, rest []w
		buf := make([]byte, 0, 64)
		for i := range 1 + r.IntN(60) {
			k := string([]byte{"mbrilacp"[r.IntN(8)], '/'}) + fmt.Sprint(r.IntN(12))
			v := fmt.Sprint("v", round, "-", i)
			kind := []pebble.InternalKeyKind{pebble.InternalKeyKindSet, pebble.InternalKeyKindDelete, pebble.InternalKeyKindMerge}[r.IntN(3)]
			if kind == pebble.InternalKeyKindDelete {
				v = ""
			}
			buf = append(buf[:0], k...)
			vb := append(buf[len(buf):], v...)
			switch kind {
			case pebble.InternalKeyKindSet:
				x.set(buf, vb)
			case pebble.InternalKeyKindDelete:
				x.del(buf)
			default:
				x.merge(buf, vb)
			}
			for j := range buf { // the caller reuses its buffers
				buf[j] = 'X'
			}
			for j := range vb {
				vb[j] = 'Y'
			}
			if k[0] == pfxBody {
				bodies = append(bodies, w{kind, k, v, i})
			} else {
				rest = append(rest, w{kind, k, v, i})
			}
		}
		x.flushOps()
		slices.SortStableFunc(rest, func(a, b w) int { return strings.Compare(a.key, b.key) })
		want := append(bodies, rest...)
		var got []w
		for rd := x.b.Reader(); ; {
			kind, k, v, ok, err := rd.Next()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			got = append(got, w{kind: kind, key: string(k), value: string(v)})
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d writes in the batch, want %d", round, len(got), len(want))
		}
		for i := range want {
			if got[i].kind != want[i].kind || got[i].key != want[i].key || got[i].value != want[i].value {
				t.Fatalf("round %d: write %d is %v %q=%q, want %v %q=%q (written %d)", round, i,
					got[i].kind, got[i].key, got[i].value, want[i].kind, want[i].key, want[i].value, want[i].seq)
			}
		}
		_ = x.b.Close()
	}
}
