package engine

import (
	"testing"
	"time"
)

// A call that spans a store outage has a round trip of seconds; taken as a
// sample it would set the offset wrong by half of it and aim every timer
// that late. Before, any sample replaced an estimate older than 30 s.
func TestStoreClockIgnoresOutageSample(t *testing.T) {
	const storeAhead = 250 // ms
	base := time.UnixMilli(1_700_000_000_000)
	var c storeClock
	// feed records a call sent at local instant at (since base) taking rtt,
	// answered by a store that read its clock in the middle of the call.
	feed := func(at, rtt time.Duration) {
		sent := base.Add(at)
		recv := sent.Add(rtt)
		mid := sent.Add(rtt / 2)
		c.sample(mid.UnixMilli()+storeAhead, sent, recv)
	}
	feed(0, 200*time.Microsecond)
	// A loaded machine: no later call comes within 2 ms of the best one.
	for at := time.Second; at < 29*time.Second; at += time.Second {
		feed(at, 5*time.Millisecond)
	}
	// The store froze for 6 s during this call and read its clock when it
	// came back, just before answering: the call's midpoint is 3 s before
	// the store's reading.
	sent := base.Add(31 * time.Second)
	recv := sent.Add(6 * time.Second)
	c.sample(recv.Add(-100*time.Microsecond).UnixMilli()+storeAhead, sent, recv)
	if got := c.get(); got < storeAhead-1 || got > storeAhead+1 {
		t.Fatalf("offset after an outage-spanning sample = %d ms, want %d", got, storeAhead)
	}
	// An ordinary loaded sample still refreshes an aging estimate, so a
	// stepped store clock is followed.
	const stepped = 1250
	sent = base.Add(38 * time.Second)
	c.sample(sent.Add(1500*time.Microsecond).UnixMilli()+stepped, sent, sent.Add(3*time.Millisecond))
	if got := c.get(); got < stepped-1 || got > stepped+1 {
		t.Fatalf("offset after a 3 ms sample of a stepped store clock, 38 s after the best one = %d ms, want %d", got, stepped)
	}
}

func TestAllowedRTTGrowsWithAge(t *testing.T) {
	for _, tc := range []struct {
		age  time.Duration
		want int64
	}{
		{0, 1000 + 2000},
		{29 * time.Second, 1000 + 2000},
		{30 * time.Second, 1000 + 4000},
		{95 * time.Second, 1000 + 16000},
		{24 * time.Hour, 1000 + 2000<<20},
	} {
		if got := allowedRTT(1000, tc.age); got != tc.want {
			t.Errorf("allowedRTT(1000 µs, %v) = %d, want %d", tc.age, got, tc.want)
		}
	}
}
