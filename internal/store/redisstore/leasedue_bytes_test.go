package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// TestLeaseDueOneScript: MessageLeaseDue takes due scheduled messages to
// inflight in one lease script per partition (one over all partitions on
// a single server), with no promotion run first, and writes the bytes a
// promotion followed by a lease writes. Two prefixes get the same
// messages (records with a receipt area and small ones without, priorities
// 0 and 3, ready and scheduled); one is promoted then leased, the other
// leased by MessageLeaseDue at the same Now. Redis counts the commands
// scripts run (INFO commandstats): the due lease runs one ZADD per message
// (to the lease index; a promotion adds one to a ready index) and, on one
// server, its read-only peek and a single script.
func TestLeaseDueOneScript(t *testing.T) {
	onStandaloneAndCluster(t, checkLeaseDueOneScript)
}

func checkLeaseDueOneScript(t *testing.T, url string, addrs []string, oneServer bool) {
	ctx := context.Background()
	const topic, n, now = "due", 12, int64(1_000_000)
	open := func(prefix string) *Store {
		s, err := Open(ctx, Options{URL: url, Prefix: prefix, TimeSource: TimeCaller, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if s.oneServer != oneServer {
			t.Fatalf("oneServer %v; want %v (the path under test)", s.oneServer, oneServer)
		}
		return s
	}
	old, due := open("dueold"), open("duenew")
	var ins []store.InsertMessage
	for i := range n {
		size := 10
		if i%2 == 0 {
			size = 4 << 10 // a receipt area (format 3)
		}
		ins = append(ins, store.InsertMessage{ID: fmt.Sprint("m", i), DueAt: now + 10 + int64(i%5), MaxAttempts: 3,
			Priority: uint8(i % 3 % 2 * 3), Payload: bytes.Repeat([]byte{byte('a' + i)}, size)})
	}
	ins[0].DueAt = now - 5 // ready at insert
	for _, s := range []*Store{old, due} {
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: ins}); err != nil {
			t.Fatal(err)
		}
	}
	const at = now + 20 // all due
	lp := &store.MessageLeaseParams{Topic: topic, Now: at, Max: 100, LeaseFor: 1000, Token: "0123456789abcdef"}
	if _, err := old.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: at, Max: 100}); err != nil {
		t.Fatal(err)
	}
	want, err := old.MessageLease(ctx, lp)
	if err != nil {
		t.Fatal(err)
	}
	nd := newNodes(t, due, addrs)
	nd.resetStats()
	got, err := due.MessageLeaseDue(ctx, lp)
	if err != nil {
		t.Fatal(err)
	}
	c := nd.calls()
	scripts := nd.scriptRuns()
	if len(got) != n || len(want) != n {
		t.Fatalf("leased %d due, %d after a promotion; want %d", len(got), len(want), n)
	}
	parts := int64(due.keys.parts)
	if c["zadd"] != n || (oneServer && scripts != 2) || (!oneServer && scripts > 2*parts) {
		t.Errorf("due lease of %d ran zadd %d times, %d scripts; want %d (no promotion), and %s (commandstats %v)",
			n, c["zadd"], scripts, n, map[bool]string{true: "2 (one peek over all partitions, one lease)", false: fmt.Sprint("≤ ", 2*parts)}[oneServer], c)
	}
	ndOld := newNodes(t, old, addrs)
	for i := range got {
		if got[i].ID != want[i].ID {
			t.Errorf("lease order: #%d is %s; after a promotion %s", i, got[i].ID, want[i].ID)
			continue
		}
		if d := storeDiff(got[i], want[i]); d != "" {
			t.Errorf("%s answered: %s", got[i].ID, d)
		}
		if a, b := nd.record(topic, got[i].ID), ndOld.record(topic, got[i].ID); !bytes.Equal(a, b) {
			t.Errorf("%s stored %d bytes; a promotion and a lease store %d, other bytes (%x… vs %x…)", got[i].ID, len(a), len(b), a[:min(len(a), 64)], b[:min(len(b), 64)])
		}
	}
	for _, s := range []*Store{old, due} {
		tr, err := s.TopicGet(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Counts != (store.Counts{Inflight: n}) {
			t.Errorf("counts %+v; want %d inflight", tr.Counts, n)
		}
	}
}

// scriptRuns counts the scripts the nodes ran (FCALL, EVAL and EVALSHA
// calls that did not fail: one answered that its function or script was
// missing ran nothing).
func (n *nodes) scriptRuns() int64 {
	n.t.Helper()
	var runs int64
	for _, c := range n.clients {
		info, err := c.Info(context.Background(), "commandstats").Result()
		if err != nil {
			n.t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "cmdstat_fcall:") && !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_evalsha:") {
				continue
			}
			_, rest, _ := strings.Cut(line, ":")
			for kv := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				var x int64
				fmt.Sscanf(v, "%d", &x)
				switch k {
				case "calls":
					runs += x
				case "failed_calls", "rejected_calls":
					runs -= x
				}
			}
		}
	}
	return runs
}
