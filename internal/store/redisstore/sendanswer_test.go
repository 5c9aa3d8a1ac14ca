package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestSendAnswerFromRequest: Redis answers a send's new messages without
// their payloads (the caller sent them), on a single server (sendScript)
// and on a Cluster (insertScript): 100 messages of 4 KiB cost the
// servers under a tenth of that in output, where the whole records came
// back before. The records are still whole: a new message's payload is a
// copy of the one sent (nil when empty), a duplicate's is the stored one,
// a repeat within the call included.
func TestSendAnswerFromRequest(t *testing.T) {
	t.Parallel()
	single := redistest.Start(t)
	cluster := redistest.StartCluster(t, 3)
	for _, c := range []struct {
		name, url string
		addrs     []string
	}{{"single", single.URL(), []string{single.Addr()}}, {"cluster", cluster.URL(), cluster.Addrs()}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			const topic, now = "answers", int64(1_000_000)
			s, err := Open(ctx, Options{URL: c.url, Prefix: "ans", TimeSource: TimeCaller, Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			stored := []byte("stored before")
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: []store.InsertMessage{{ID: "old", Payload: stored, MaxAttempts: 3, DueAt: now + 5000}}}); err != nil {
				t.Fatal(err)
			}
			var msgs []store.InsertMessage
			for i := range 100 {
				p := bytes.Repeat([]byte{byte(i)}, 4096)
				msgs = append(msgs, store.InsertMessage{ID: "m" + strconv.Itoa(i), Payload: p, Headers: map[string]string{"k": strconv.Itoa(i)}, MaxAttempts: 3, DueAt: now + int64(i%2)*5000})
			}
			msgs = append(msgs,
				store.InsertMessage{ID: "old", Payload: []byte("resent"), MaxAttempts: 3},
				store.InsertMessage{ID: "m7", Payload: []byte("repeat in the call"), MaxAttempts: 3},
				store.InsertMessage{ID: "empty", Payload: []byte{}, MaxAttempts: 3},
			)
			before := outputBytes(t, c.addrs)
			res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs})
			if err != nil {
				t.Fatal(err)
			}
			out := outputBytes(t, c.addrs) - before
			if out > 100*4096/10 {
				t.Errorf("the send of 100 × 4 KiB took %d bytes of server output: payloads came back", out)
			}
			sent := map[string][]byte{}
			for _, m := range msgs[:100] {
				sent[m.ID] = bytes.Clone(m.Payload)
				m.Payload[0] ^= 0xff // the answer must not alias the request
			}
			for i, r := range res {
				id := msgs[i].ID
				var want []byte
				switch {
				case id == "old":
					want = stored
				case id == "empty":
					want = nil
				case i == 101: // m7 again: the record this call stored
					want = sent["m7"]
				default:
					want = sent[id]
				}
				if dup := id == "old" || i == 101; r.Duplicate != dup {
					t.Errorf("%s (item %d): duplicate %v, want %v", id, i, r.Duplicate, dup)
				}
				if !bytes.Equal(r.Record.Payload, want) || (want == nil) != (r.Record.Payload == nil) {
					t.Errorf("%s (item %d): payload %.20q (%d B), want %.20q (%d B)", id, i, r.Record.Payload, len(r.Record.Payload), want, len(want))
				}
				if i < 100 && (r.Record.Headers["k"] != strconv.Itoa(i) || r.Record.Seq == 0 || r.Record.ID != id) {
					t.Errorf("%s: record %+v lacks what was stored", id, r.Record)
				}
				got, err := s.MessageGet(ctx, topic, id)
				if err != nil {
					t.Fatal(err)
				}
				r.Record.Payload = nil
				g := *got
				g.Payload = nil
				if fmt.Sprint(*r.Record) != fmt.Sprint(g) {
					t.Errorf("%s: answer %+v, stored %+v", id, *r.Record, g)
				}
			}
		})
	}
}

// outputBytes sums the servers' total_net_output_bytes.
func outputBytes(t *testing.T, addrs []string) int64 {
	t.Helper()
	var sum int64
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		info, err := c.Info(context.Background(), "stats").Result()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_net_output_bytes:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				sum += n
			}
		}
	}
	return sum
}
