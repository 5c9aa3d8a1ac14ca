package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// TestBodyBuffersReused: request bodies are read into pooled buffers that
// later requests reuse, so nothing may keep a slice of a body after its
// handler. The pools start full of buffers of junk; batches of random
// binary and text payloads in every pooled size and past it, with and
// without Content-Length, some sent at once by several clients; every
// message leased afterwards must carry exactly the payload sent for it,
// and the budget must be back at zero.
func TestBodyBuffersReused(t *testing.T) {
	b := setup(t, func(c *Config) { c.MaxBodyMemory = 64 << 20 })
	for k := range bodyPools {
		for range 4 {
			putBody(bytes.Repeat([]byte{'X'}, firstBodyBuf<<k))
		}
	}
	rng := rand.New(rand.NewPCG(7, 11)) // #nosec G404 -- test data, not secrets
	want := map[string][]byte{}
	// body makes a batch of n payloads of size bytes, half of them binary
	// (sent as base64), and records them.
	body := func(prefix string, n, size int) string {
		var sb strings.Builder
		sb.WriteString(`{"messages":[`)
		for i := range n {
			id := fmt.Sprintf("%s-%d", prefix, i)
			p := make([]byte, size)
			if i%2 == 0 {
				for j := range p {
					p[j] = byte(rng.IntN(256))
				}
			} else {
				for j := range p {
					p[j] = 'a' + byte(rng.IntN(26))
				}
			}
			want[id] = p
			if i > 0 {
				sb.WriteByte(',')
			}
			if i%2 == 0 {
				fmt.Fprintf(&sb, `{"id":%q,"payload_base64":%q}`, id, base64.StdEncoding.EncodeToString(p))
			} else {
				fmt.Fprintf(&sb, `{"id":%q,"payload":%q}`, id, p)
			}
		}
		sb.WriteString(`]}`)
		return sb.String()
	}
	send := func(hc *http.Client, raw string, chunked bool) error {
		var rd io.Reader = strings.NewReader(raw)
		if chunked { // a reader of unknown length: no Content-Length
			rd = io.MultiReader(rd)
		}
		req, err := http.NewRequest("POST", b.ts.URL+"/v1/topics/reuse/messages:batch", rd)
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		ans, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || bytes.Contains(ans, []byte(`"error"`)) {
			return fmt.Errorf("batch answered %d: %.300s", res.StatusCode, ans)
		}
		return nil
	}

	// One at a time through the API validator: each pooled size (small,
	// 16 KiB … 4 MiB) and one past it, with and without Content-Length.
	sizes := []struct{ n, size int }{{5, 1000}, {30, 1024}, {60, 1024}, {100, 1500}, {100, 3000}, {100, 6000}, {300, 5000}, {1000, 2500}, {120, 40 << 10}}
	for i, s := range sizes {
		for _, chunked := range []bool{false, true} {
			if err := send(b.hc, body(fmt.Sprintf("s%d-%t", i, chunked), s.n, s.size), chunked); err != nil {
				t.Fatal(err)
			}
			b.apiCalls.Add(1)
		}
	}
	// Then at once from 6 clients, 5 batches each.
	bodies := make([][]string, 6)
	for c := range bodies {
		for j := range 5 {
			bodies[c] = append(bodies[c], body(fmt.Sprintf("c%d-%d", c, j), 40+20*j, 1024+512*c))
		}
	}
	var wg sync.WaitGroup
	for c := range bodies {
		wg.Go(func() {
			for j, raw := range bodies[c] {
				if err := send(b.ts.Client(), raw, (c+j)%2 == 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	got := 0
	for {
		r := b.do(t, "POST", "/v1/topics/reuse/lease", `{"max":100,"lease":"1m"}`)
		want200(t, r)
		msgs := into[wire.MessagesResponse](t, r).Messages
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			var p []byte
			switch {
			case m.PayloadBase64 != nil:
				var err error
				if p, err = base64.StdEncoding.DecodeString(*m.PayloadBase64); err != nil {
					t.Fatal(err)
				}
			case m.Payload != nil:
				p = []byte(*m.Payload)
			}
			w, ok := want[m.ID]
			if !ok {
				t.Fatalf("leased %q, which was never sent", m.ID)
			}
			if !bytes.Equal(p, w) {
				t.Fatalf("message %s: payload of %d bytes differs from the %d sent (first bytes %q)", m.ID, len(p), len(w), p[:min(len(p), 16)])
			}
			delete(want, m.ID)
			got++
		}
	}
	if len(want) != 0 || got == 0 {
		t.Fatalf("leased %d messages; %d sent were never leased", got, len(want))
	}
	if n := b.srv.budget.inUse(); n != 0 {
		t.Fatalf("body budget holds %d bytes after all requests ended", n)
	}
}

// want200 fails unless r is a 200.
func want200(t *testing.T, r resp) {
	t.Helper()
	if r.status != http.StatusOK {
		raw, _ := json.Marshal(r.err)
		t.Fatalf("answer %d: %s", r.status, raw)
	}
}

// TestBodyPoolSizes: buffers are pooled by their exact pooled size, and
// getBody hands out one that holds what was asked.
func TestBodyPoolSizes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want int
	}{{0, -1}, {1, 0}, {firstBodyBuf, 0}, {firstBodyBuf + 1, 1}, {maxPooledBody, len(bodyPools) - 1}, {maxPooledBody + 1, -1}} {
		if got := bodyClass(c.n); got != c.want {
			t.Errorf("bodyClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	putBody(make([]byte, 0, firstBodyBuf+1)) // not a pooled size: dropped
	// sync.Pool drops some puts at random under the race detector: put
	// several, one comes back.
	for range 20 {
		putBody(make([]byte, 10, 2*firstBodyBuf))
	}
	got := getBody(firstBodyBuf + 100)
	if got == nil || cap(got) != 2*firstBodyBuf || len(got) != 0 {
		t.Fatalf("getBody(16 KiB + 100) = len %d cap %d, want a pooled 32 KiB buffer of length 0", len(got), cap(got))
	}
}

// TestBodyClaimCostsNothing: a body's buffer grows with the bytes that
// arrived, not with its Content-Length. A request claiming 3 MiB that has
// sent one byte holds little of the budget, even when the pools hold
// buffers that size: slow clients with large claims (a byte a second)
// must not be able to fill the budget with the connections the server
// accepts.
func TestBodyClaimCostsNothing(t *testing.T) {
	for range 4 {
		putBody(make([]byte, 0, maxPooledBody))
	}
	s := &Server{budget: newByteBudget(64 << 20)}
	pr, pw := io.Pipe()
	defer pw.Close()
	r := httptest.NewRequest("POST", "/v1/topics/t/messages:batch", pr)
	r.ContentLength = 4 << 20
	done := make(chan error, 1)
	go func() {
		b, held, err := s.readBody(httptest.NewRecorder(), r, 8<<20)
		if err == nil && len(b) != 3<<20 {
			err = fmt.Errorf("read %d bytes, want %d", len(b), 3<<20)
		}
		s.budget.release(held)
		putBody(b)
		done <- err
	}()
	if _, err := pw.Write([]byte("{")); err != nil {
		t.Fatal(err)
	}
	used := func() int64 {
		s.budget.mu.Lock()
		defer s.budget.mu.Unlock()
		return s.budget.used
	}
	time.Sleep(50 * time.Millisecond) // the reader is waiting for more
	// As many such bodies as the server takes connections must hold at
	// most a quarter of its default budget.
	if u := used(); u == 0 || u*DefaultMaxConns > DefaultMaxBodyMemory/4 {
		t.Fatalf("a 3 MiB claim with 1 byte arrived holds %d B of the budget; %d such connections would hold %d MiB of the default %d MiB",
			u, DefaultMaxConns, u*DefaultMaxConns>>20, DefaultMaxBodyMemory>>20)
	}
	// The rest arrives: the buffer grows to hold it, and the whole body is read.
	if _, err := pw.Write(bytes.Repeat([]byte("a"), 3<<20-1)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if u := used(); u != 0 {
		t.Fatalf("budget holds %d B after the body was released, want 0", u)
	}
}

// TestBodyReadAllocs: once the pools hold buffers, reading a batch body
// allocates a small part of its size (the request's own objects), where
// every read allocated its buffers anew (about twice the body, grown by
// doubling). 8 readers at once, bodies of 140 KB and 1.4 MB (batches of
// 100 and 1,000 1 KiB messages).
func TestBodyReadAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops puts at random under the race detector")
	}
	s := &Server{}
	for _, size := range []int{140 << 10, 1400 << 10} {
		body := bytes.Repeat([]byte("a"), size)
		read := func() error {
			r := httptest.NewRequest("POST", "/v1/topics/t/messages:batch", bytes.NewReader(body))
			b, _, err := s.readBody(httptest.NewRecorder(), r, 4<<20)
			if err == nil && !bytes.Equal(b, body) {
				err = fmt.Errorf("read %d bytes, not the %d sent", len(b), len(body))
			}
			putBody(b)
			return err
		}
		if err := read(); err != nil {
			t.Fatal(err)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 50 {
					if err := read(); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		runtime.ReadMemStats(&m1)
		if t.Failed() {
			t.FailNow()
		}
		per := (m1.TotalAlloc - m0.TotalAlloc) / 400
		t.Logf("%d B body: %d B allocated per read", size, per)
		if per > uint64(size/8) {
			t.Errorf("%d B body: %d B allocated per read, want under an eighth of the body", size, per)
		}
	}
}

// TestBurstBuffersDropped: after a burst of bodies (a quarter of the
// budget or more, then nothing held) the budget gives the heap back to
// the OS, and the body buffers pooled during the burst go with it
// instead of staying pooled on an idle server.
func TestBurstBuffersDropped(t *testing.T) {
	bb := newByteBudget(64 << 20)
	for range 8 {
		putBody(make([]byte, 0, maxPooledBody))
	}
	var deadline time.Time
	if err := bb.acquire(context.Background(), 32<<20, 0, &deadline); err != nil {
		t.Fatal(err)
	}
	bb.release(32 << 20) // schedules giveBack at once: none ran before
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		bb.mu.Lock()
		done := !bb.returning && !bb.lastFree.IsZero()
		bb.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the budget did not give the heap back after the burst")
		}
	}
	if b := getBody(maxPooledBody); b != nil {
		t.Fatalf("a %d B body buffer is still pooled after the heap was given back", cap(b))
	}
}
