package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestCtr62Order: ctr62 is order-preserving (byte order = numeric order),
// so index members order equal scores by Seq, and memberID recovers the id.
func TestCtr62Order(t *testing.T) {
	if got := ctr62(100_000); got != "3Q0u" {
		t.Fatalf("ctr62(100000) = %q", got)
	}
	vals := []uint64{0, 1, 9, 10, 61, 62, 63, 3843, 3844, 1 << 32, maxCtr - 1, maxCtr}
	r := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		vals = append(vals, r.Uint64N(maxCtr+1))
	}
	slices.Sort(vals)
	for i := 1; i < len(vals); i++ {
		a, b := ctr62(vals[i-1]), ctr62(vals[i])
		if vals[i-1] < vals[i] && a >= b {
			t.Fatalf("ctr62(%d) = %q not below ctr62(%d) = %q", vals[i-1], a, vals[i], b)
		}
		if len(b) > 9 {
			t.Fatalf("ctr62(%d) = %q longer than 9 bytes", vals[i], b)
		}
		for _, id := range []string{"m", "0", "a:b", strings.Repeat("=", 200)} {
			if got := memberID(b + id); got != id {
				t.Fatalf("memberID(%q) = %q, want %q", b+id, got, id)
			}
		}
	}
	for _, bad := range []string{"", "1", "2a", "/x", "\xffab"} {
		if got := memberID(bad); got != "" {
			t.Fatalf("memberID(%q) = %q, want \"\"", bad, got)
		}
	}
}

// TestLuaCodecMatchesGo: the prelude's ctr62 equals the Go one, and a
// record packed by the prelude's save decodes in Go to the fields given,
// including negative times, binary strings and a priority, with a
// receipt area (1 KiB or more of headers and payload) or without; a
// record of priority 0 has no priority byte (as before priorities
// existed, so those read as priority 0), and a small one is laid out as
// format 2 wrote it.
func TestLuaCodecMatchesGo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	enc := newScript(flagsRead, `return ctr62(tonumber(ARGV[3]))`)
	for _, n := range []uint64{0, 1, 61, 62, 100_000, 1 << 40, maxCtr} {
		got, err := evalScript(ctx, rdb, enc, nil, "", "", n).Text()
		if err != nil || got != ctr62(n) {
			t.Fatalf("Lua ctr62(%d) = %q, %v; Go %q", n, got, err, ctr62(n))
		}
	}

	ks := keyspace{prefix: "dq", parts: 4}.part("t", 2)
	rk := newScript(flagsRead, `return {rkey(0), rkey(7), rkey(255), prios()}`)
	names, err := evalScript(ctx, rdb, rk, ks.all(), "", "").StringSlice()
	if want := []string{ks.readyOf(0), ks.readyOf(7), ks.readyOf(255), ks.readyPrios()}; err != nil || !slices.Equal(names, want) {
		t.Fatalf("Lua ready keys %q, %v; Go %q", names, err, want)
	}

	pack := newScript(flagsState, `
local r = {st = tonumber(ARGV[4]), tn = tonumber(ARGV[5]), ctr = tonumber(ARGV[6]), due = tonumber(ARGV[7]),
  cat = tonumber(ARGV[8]), uat = tonumber(ARGV[9]), t = tonumber(ARGV[10]), dlv = tonumber(ARGV[11]),
  fail = tonumber(ARGV[12]), max = tonumber(ARGV[13]), rcpt = ARGV[14], err = ARGV[15], h = ARGV[16], p = ARGV[17],
  pri = tonumber(ARGV[18])}
save(mkey(ARGV[3]), r)
local back, b = load(mkey(ARGV[3]))
return {b, save(mkey(ARGV[3]), back)}
`)
	hdr := map[string]string{"k\xff": "\x00v"}
	small := []byte("\x00\xffpay\nload")
	large := bytes.Repeat([]byte("\x00\xffpay\nload"), 110) // headers and payload >= AREAMIN
	for _, payload := range [][]byte{small, large} {
		for _, prio := range []uint8{0, 1, 255} {
			want := &store.Record{
				Topic: "t", ID: "x", Seq: maxTN<<ctrBits | maxCtr, State: store.StateInflight,
				Payload: payload, Headers: hdr, Priority: prio,
				DueAt: -5, CreatedAt: 1 << 46, UpdatedAt: 1796128921941,
				Deliveries: 7, Failures: 2, MaxAttempts: 1<<31 - 1, LastError: "boom\x00",
				Receipt: "tok-7", LeaseUntil: -(1 << 46),
			}
			a, err := evalScript(ctx, rdb, pack, nil, "", "m:", "x", int(want.State), maxTN, maxCtr, want.DueAt, want.CreatedAt, want.UpdatedAt,
				want.LeaseUntil, want.Deliveries, want.Failures, want.MaxAttempts, want.Receipt, want.LastError,
				encodeHeaders(hdr), want.Payload, int(prio)).Slice()
			if err != nil || len(a) != 2 {
				t.Fatalf("pack: %v %v", a, err)
			}
			// A record with an area is rewritten up to it; one without
			// (small: as format 2 wrote it) whole.
			again, ok := recBytes(a[1])
			if _, isHead := a[1].([]any); !ok || isHead != (len(payload) == len(large)) || again != a[0] {
				t.Fatalf("%d-byte payload: load then save: %v (prefix-only rewrite: %v), want the record unchanged", len(payload), ok, isHead)
			}
			got, err := decodeBlob("t", "x", a[0])
			if err != nil {
				t.Fatal(err)
			}
			if d := storeDiff(want, got); d != "" {
				t.Fatal(d)
			}
			state := byte(want.State)
			size := recHeader + 2 + len(want.Receipt) + 4 + len(want.LastError) + 4 + len(encodeHeaders(hdr)) + len(want.Payload)
			if len(payload) == len(large) {
				state |= recArea
				size = recHeader + 4 + 48 + 4 + len(encodeHeaders(hdr)) + len(want.Payload) // a new record's area is 48 bytes
			}
			b := a[0].(string)
			if prio != 0 {
				size++ // the priority byte
				if b[0] != state|recPriority || b[recHeader] != prio {
					t.Fatalf("priority %d: state byte %#x, byte after the header %d", prio, b[0], b[recHeader])
				}
			} else if b[0] != state {
				t.Fatalf("priority 0: state byte %#x, want %#x (no priority byte)", b[0], state)
			}
			if len(b) != size {
				t.Fatalf("priority %d, %d-byte payload: record is %d bytes, want %d", prio, len(payload), len(b), size)
			}
		}
	}
}

// storeDiff compares the fields decodeBlob fills.
func storeDiff(a, b *store.Record) string {
	if fmt.Sprintf("%+v", *a) != fmt.Sprintf("%+v", *b) { // maps print sorted
		return fmt.Sprintf("records differ:\nwant %+v\ngot  %+v", *a, *b)
	}
	return ""
}

// FuzzDecodeBlob: any bytes decode to a record or to ErrCorrupt, never a
// panic, and a decoded record re-read is the same.
func FuzzDecodeBlob(f *testing.F) {
	f.Add(strings.Repeat("\x00", recHeader+10))
	f.Add("\x03" + strings.Repeat("\x01", recHeader-1) + "\x00\x02ab\x00\x00\x00\x00\x00\x00\x00\x00payload")
	f.Add("\x01")
	f.Add("\x82" + strings.Repeat("\x01", recHeader-1) + "\x07\x00\x02ab\x00\x00\x00\x00\x00\x00\x00\x00payload")                         // priority 7
	f.Add("\xc3" + strings.Repeat("\x01", recHeader-1) + "\x07\x00\x00\x00\x0a\x00\x02ab\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00payload") // an area, padded
	f.Fuzz(func(t *testing.T, b string) {
		r, err := decodeBlob("t", "x", b)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if r.State < store.StateScheduled || r.State > store.StateAcked {
			t.Fatalf("state %d accepted", r.State)
		}
	})
}

// TestTimeRange: times the 6-byte fields cannot hold are refused, not
// wrapped.
func TestTimeRange(t *testing.T) {
	for _, v := range []int64{0, -1, 1796128921941, maxTime, -maxTime} {
		if err := checkTime("t", v); err != nil {
			t.Fatalf("%d refused: %v", v, err)
		}
	}
	for _, v := range []int64{maxTime + 1, -maxTime - 1, 1 << 62} {
		if checkTime("t", v) == nil {
			t.Fatalf("%d accepted", v)
		}
	}
}

// evalScript runs sc, a script outside the library, as EVAL.
func evalScript(ctx context.Context, rdb *redis.Client, sc *script, keys []string, args ...any) *redis.Cmd {
	cmd := sc.cmd(ctx, asSource, keys, args)
	_ = rdb.Process(ctx, cmd)
	return cmd
}
