package bench

import (
	"sync"
	"testing"
	"time"
)

func TestCheckerFindsEarlyDuplicatesMissingUnexpected(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	ck := NewChecker(6)
	for s := range uint64(6) {
		ck.SetDue(s, base.Add(time.Duration(s)*time.Second))
	}
	ck.Observe([]Delivery{
		{Seq: 0, At: base.Add(2 * time.Millisecond)},                // 2 ms late
		{Seq: 1, At: base.Add(time.Second - 3*time.Millisecond)},    // 3 ms early
		{Seq: 2, At: base.Add(2*time.Second + 10*time.Millisecond)}, // 10 ms late
		{Seq: 2, At: base.Add(3 * time.Second)},                     // duplicate
		{Seq: 3, At: base.Add(3 * time.Second)},                     // on time
		{Seq: 99, At: base},                                         // never sent
	})
	// 4 and 5 never arrive.
	r := ck.Result(nil)
	if r.Expected != 6 || r.Received != 4 || r.Missing != 2 || r.Duplicates != 1 || r.Unexpected != 1 || r.Early != 1 {
		t.Fatalf("got %+v", r)
	}
	if r.MostEarly != 3*time.Millisecond {
		t.Fatalf("MostEarly = %s, want 3ms", r.MostEarly)
	}
	h := r.Lateness
	if h.Count() != 4 || h.Max() != 10_000 || h.Min() != 0 {
		t.Fatalf("lateness count/min/max = %d/%d/%d µs", h.Count(), h.Min(), h.Max())
	}
	// The first receive counts, not the duplicate.
	if at, ok := ck.Received(2); !ok || !at.Equal(base.Add(2*time.Second+10*time.Millisecond)) {
		t.Fatalf("Received(2) = %v %v", at, ok)
	}
	// A filter limits what is expected.
	r = ck.Result(func(seq uint64) bool { return seq < 4 })
	if r.Expected != 4 || r.Missing != 0 {
		t.Fatalf("filtered: %+v", r)
	}
}

func TestCheckerMeasuresFromAcceptanceWhenSentAfterDue(t *testing.T) {
	base := time.Unix(1_700_000_000, 0)
	ck := NewChecker(3)
	ck.SetDue(0, base)
	ck.SetDue(1, base)
	ck.SetDue(2, time.Time{}) // due now
	if late := ck.Accepted(0, base.Add(-time.Millisecond)); late {
		t.Fatal("accepted before due reported as late")
	}
	if late := ck.Accepted(1, base.Add(5*time.Millisecond)); !late {
		t.Fatal("accepted after due not reported")
	}
	ck.Accepted(2, base.Add(time.Second))
	ck.Observe([]Delivery{
		{Seq: 0, At: base.Add(7 * time.Millisecond)},               // 7 ms from due
		{Seq: 1, At: base.Add(7 * time.Millisecond)},               // 2 ms from acceptance
		{Seq: 2, At: base.Add(time.Second + 500*time.Microsecond)}, // 0.5 ms from acceptance
	})
	r := ck.Result(nil)
	// The median, 2000 µs, is reported as the top of its bucket (≤ 1/64 above).
	if p50 := r.Lateness.Quantile(0.5); r.Early != 0 || r.Lateness.Max() != 7000 || r.Lateness.Min() != 500 || p50 < 2000 || p50 > 2000+2000/64 {
		t.Fatalf("got early %d, lateness min/p50/max %d/%d/%d", r.Early, r.Lateness.Min(), r.Lateness.Quantile(0.5), r.Lateness.Max())
	}
}

func TestCheckerConcurrentObserve(t *testing.T) {
	const n = 10_000
	ck := NewChecker(n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range uint64(n) {
				if int(s)%4 == w || s%100 == 0 { // every 100th twice or more
					ck.Observe([]Delivery{{Seq: s, At: time.Now()}})
				}
			}
		}()
	}
	wg.Wait()
	r := ck.Result(nil)
	if r.Received != n || r.Missing != 0 || ck.Unique() != n {
		t.Fatalf("received %d missing %d unique %d", r.Received, r.Missing, ck.Unique())
	}
	// Seqs divisible by 100 are seen by all 4 workers: 3 duplicates each.
	if want := int64(n / 100 * 3); r.Duplicates != want {
		t.Fatalf("duplicates = %d, want %d", r.Duplicates, want)
	}
}

func TestPayloadCarriesSeq(t *testing.T) {
	pm := newPayloadMaker(256, 7)
	p := pm.make(123456789)
	if len(p) != 256 {
		t.Fatalf("len = %d", len(p))
	}
	if s, err := SeqOf(p); err != nil || s != 123456789 {
		t.Fatalf("SeqOf = %d, %v", s, err)
	}
	if _, err := SeqOf([]byte{1, 2}); err == nil {
		t.Fatal("short payload accepted")
	}
	// The filler is not trivially compressible: many distinct bytes.
	seen := map[byte]bool{}
	for _, b := range p[SeqLen:] {
		seen[b] = true
	}
	if len(seen) < 100 {
		t.Fatalf("filler has only %d distinct bytes", len(seen))
	}
}
