package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// nodes reads records and command counts across a Redis or a Cluster's
// masters, for tests that check what a script wrote.
type nodes struct {
	t       *testing.T
	s       *Store
	clients []*redis.Client
}

func newNodes(t *testing.T, s *Store, addrs []string) *nodes {
	n := &nodes{t: t, s: s}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { c.Close() })
		n.clients = append(n.clients, c)
	}
	return n
}

func (n *nodes) key(topic, id string) string {
	return n.s.keys.part(topic, n.s.keys.partitionOf(id)).msg(id)
}

// record reads the stored bytes of topic/id from whichever node holds them.
func (n *nodes) record(topic, id string) []byte {
	n.t.Helper()
	k := n.key(topic, id)
	for _, c := range n.clients {
		if b, err := c.Get(context.Background(), k).Bytes(); err == nil {
			return b
		}
	}
	n.t.Fatalf("record %s not found on any node", k)
	return nil
}

// set stores raw bytes as topic/id's record on the node that holds it.
func (n *nodes) set(topic, id string, b []byte) {
	n.t.Helper()
	k := n.key(topic, id)
	for _, c := range n.clients {
		if c.Exists(context.Background(), k).Val() == 1 {
			if err := c.Set(context.Background(), k, b, 0).Err(); err != nil {
				n.t.Fatal(err)
			}
			return
		}
	}
	n.t.Fatalf("record %s not found on any node", k)
}

func (n *nodes) resetStats() {
	n.t.Helper()
	for _, c := range n.clients {
		if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
			n.t.Fatal(err)
		}
	}
}

// calls sums INFO commandstats calls per command over the nodes.
func (n *nodes) calls() map[string]int64 {
	n.t.Helper()
	out := map[string]int64{}
	for _, c := range n.clients {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			n.t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if ok && name != line {
				var v int64
				fmt.Sscanf(rest, "%d", &v)
				out[name] += v
			}
		}
	}
	return out
}

// areaEnd is where a record's headers length starts: everything before
// it is what a prefix-only rewrite may change.
func areaEnd(t *testing.T, b []byte) int {
	t.Helper()
	if len(b) < recHeader || b[0]&recArea == 0 {
		t.Fatalf("record of %d bytes, state byte %#x: not in the area layout", len(b), b[0])
	}
	off := recHeader
	if b[0]&recPriority != 0 {
		off++
	}
	c := int(b[off])<<24 | int(b[off+1])<<16 | int(b[off+2])<<8 | int(b[off+3])
	return off + 4 + c
}

// TestLeaseNackExpireRewritePrefixOnly: a lease, an extension, a nack, a
// lease expiry and a replay of a dead message change a record's header
// and receipt area and nothing else, on one server (leaseAllScript) and
// on a Cluster (leaseScript per partition). Redis counts the commands
// scripts run (INFO commandstats): each of those transitions of n
// messages runs n SETRANGE and no SET (which would write the 64 KiB
// payloads again, to the AOF and replicas too); an ack, which drops the
// payload, reads none of it (GETRANGE, no GET). After each step every
// record's bytes from its headers on (headers and payload) are those it
// was inserted with, and the store reads each back with its payload.
func TestLeaseNackExpireRewritePrefixOnly(t *testing.T) {
	onStandaloneAndCluster(t, checkPrefixOnly)
}

func checkPrefixOnly(t *testing.T, url string, addrs []string, oneServer bool) {
	ctx := context.Background()
	const topic, n, now = "pfx", 12, int64(1_000_000)
	s, err := Open(ctx, Options{URL: url, Prefix: "pfx", TimeSource: TimeCaller, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.oneServer != oneServer {
		t.Fatalf("oneServer %v; want %v (the path under test)", s.oneServer, oneServer)
	}
	nd := newNodes(t, s, addrs)
	msgs := map[string]store.InsertMessage{}
	var ins []store.InsertMessage
	for i := range n {
		m := store.InsertMessage{ID: fmt.Sprint("m", i), DueAt: now, MaxAttempts: 2, Priority: uint8(i % 2 * 3),
			Payload: bytes.Repeat([]byte{byte('a' + i)}, 64<<10), Headers: map[string]string{"h": fmt.Sprint(i)}}
		msgs[m.ID] = m
		ins = append(ins, m)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: ins}); err != nil {
		t.Fatal(err)
	}
	// tails holds each record's bytes from its headers on, as inserted.
	tails := map[string][]byte{}
	for id := range msgs {
		b := nd.record(topic, id)
		tails[id] = b[areaEnd(t, b):]
	}
	// step runs f, which changes want records, and checks the commands
	// it ran, the stored bytes and what the store reads back.
	step := func(what string, want int, f func() []*store.Record) []*store.Record {
		t.Helper()
		nd.resetStats()
		recs := f()
		if len(recs) != want {
			t.Fatalf("%s: %d records; want %d", what, len(recs), want)
		}
		c := nd.calls()
		if c["setrange"] != int64(want) || c["set"] != 0 || c["get"] != int64(want) {
			t.Errorf("%s of %d records ran setrange %d, set %d, get %d times; want %d, 0, %d (commandstats %v)",
				what, want, c["setrange"], c["set"], c["get"], want, want, c)
		}
		for _, r := range recs {
			m := msgs[r.ID]
			if !bytes.Equal(r.Payload, m.Payload) || !maps.Equal(r.Headers, m.Headers) || r.Priority != m.Priority {
				t.Errorf("%s: %s answered with a %d-byte payload, headers %v, priority %d; want the %d bytes, %v, %d sent",
					what, r.ID, len(r.Payload), r.Headers, r.Priority, len(m.Payload), m.Headers, m.Priority)
			}
			b := nd.record(topic, r.ID)
			if tail := b[areaEnd(t, b):]; !bytes.Equal(tail, tails[r.ID]) {
				t.Errorf("%s: %s's bytes after its area changed (%d bytes, were %d)", what, r.ID, len(tail), len(tails[r.ID]))
			}
			got, err := s.MessageGet(ctx, topic, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := storeDiff(r, got); d != "" {
				t.Errorf("%s: %s answered and stored differ: %s", what, r.ID, d)
			}
		}
		return recs
	}
	leased := step("lease", n, func() []*store.Record {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now + 1, Max: 100, LeaseFor: 100, Token: "0123456789abcdef"})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	})
	half := leased[:n/2]
	step("extend", n/2, func() (out []*store.Record) {
		for _, r := range half {
			x, err := s.MessageExtend(ctx, &store.MessageExtendParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: now + 2, LeaseFor: 1000})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	})
	// Nacks of the first half: some dead (Final), the rest ready again.
	step("nack", n/2, func() (out []*store.Record) {
		for i, r := range half {
			x, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: now + 3,
				Error: "a reason of some length", Final: i%3 == 0})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	})
	// The other half's leases end at now + 101.
	step("expire", n-n/2, func() []*store.Record {
		recs, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now + 200, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	})
	step("dead replay", 2, func() (out []*store.Record) {
		for i, r := range half {
			if i%3 == 0 {
				x, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: topic, ID: r.ID, Now: now + 201})
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, x...)
			}
		}
		return out
	})
	// All ready again, with a last error: a second lease still fits the area.
	again := step("second lease", n, func() []*store.Record {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now + 300, Max: 100, LeaseFor: 100, Token: "fedcba9876543210"})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	})
	nd.resetStats()
	var items []store.AckItem
	for _, r := range again {
		items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
	}
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Now: now + 301, Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ack %s: %v", items[i].ID, err)
		}
	}
	if c := nd.calls(); c["get"] != 0 || c["getrange"] != n || c["set"] != n {
		t.Errorf("the ack of %d records ran get %d, getrange %d, set %d times; want 0, %d, %d (commandstats %v)",
			n, c["get"], c["getrange"], c["set"], n, n, c)
	}
	for _, r := range again {
		got, err := s.MessageGet(ctx, topic, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.StateAcked || got.Payload != nil || got.Headers != nil || got.LastError != r.LastError || got.Deliveries != r.Deliveries {
			t.Errorf("%s after its ack: %+v; want an acked tombstone keeping last error %q and %d deliveries", r.ID, got, r.LastError, r.Deliveries)
		}
	}
}

// TestAreaGrowsOnce: a nack reason too long for a record's receipt area
// rewrites the record whole once (SET), with an area that then holds it
// beside the next receipt, so the next lease and nack rewrite only the
// prefix again; a message under AREAMIN bytes gets no area (its record
// is laid out as format 2 wrote it, and rewritten whole).
func TestAreaGrowsOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	const topic, now = "grow", int64(1_000_000)
	s, err := Open(ctx, Options{URL: srv.URL(), Prefix: "grow", TimeSource: TimeCaller, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	nd := newNodes(t, s, []string{srv.Addr()})
	big := bytes.Repeat([]byte("p"), 64<<10)
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: []store.InsertMessage{
		{ID: "big", DueAt: now, MaxAttempts: 10, Payload: big},
		{ID: "small", DueAt: now + 1, MaxAttempts: 10, Payload: []byte("tiny")},
	}}); err != nil {
		t.Fatal(err)
	}
	if b := nd.record(topic, "small"); b[0]&recArea != 0 {
		t.Errorf("a 4-byte message has a receipt area (state byte %#x)", b[0])
	}
	reason := strings.Repeat("r", 100)
	// cycle leases big, then nacks it with why, and returns the number of
	// SET and SETRANGE the nack and then the lease ran.
	cycle := func(at int64, why string) (sets, setranges int64) {
		t.Helper()
		nd.resetStats()
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: at, Max: 1, LeaseFor: 100, Token: "0123456789abcdef"})
		if err != nil || len(recs) != 1 || recs[0].ID != "big" || !bytes.Equal(recs[0].Payload, big) {
			t.Fatalf("lease: %d records, %v; want big with its payload", len(recs), err)
		}
		r, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: "big", Receipt: recs[0].Receipt, Now: at + 1, Error: why})
		if err != nil || r.LastError != why || !bytes.Equal(r.Payload, big) {
			t.Fatalf("nack: %v; last error %q", err, r.LastError)
		}
		c := nd.calls()
		return c["set"], c["setrange"]
	}
	if sets, ranges := cycle(now+10, "short"); sets != 0 || ranges != 2 {
		t.Errorf("lease and short nack: %d SET, %d SETRANGE; want 0, 2", sets, ranges)
	}
	if sets, ranges := cycle(now+20, reason); sets != 1 || ranges != 1 {
		t.Errorf("lease and 100-byte nack: %d SET, %d SETRANGE; want 1 (the nack, growing the area), 1", sets, ranges)
	}
	if sets, ranges := cycle(now+30, reason); sets != 0 || ranges != 2 {
		t.Errorf("lease and 100-byte nack again: %d SET, %d SETRANGE; want 0, 2 (the area fits now)", sets, ranges)
	}
	got, err := s.MessageGet(ctx, topic, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got.LastError != reason || got.Deliveries != 3 || got.Failures != 3 || !bytes.Equal(got.Payload, big) {
		t.Errorf("big at the end: deliveries %d, failures %d, last error %d bytes, %d-byte payload; want 3, 3, 100, 64 KiB", got.Deliveries, got.Failures, len(got.LastError), len(got.Payload))
	}
}
