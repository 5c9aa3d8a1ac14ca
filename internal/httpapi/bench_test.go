package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

// BenchmarkSendBatchHandler measures the server's share of a batch send
// (100 messages of 256 B, the shape of the HTTP send target) through the
// handler on an in-memory engine: decoding, validation, encoding.
func BenchmarkSendBatchHandler(b *testing.B) {
	payload := strings.Repeat("x", 256)
	benchSendBatchHandler(b, func(i int) string { return fmt.Sprintf(`{"payload":%q,"delay":"1h"}`, payload) })
}

// BenchmarkSendBatchHandlerBinary is the shape `delayq bench send` sends:
// random (so base64) payloads with a deliver_at time.
func BenchmarkSendBatchHandlerBinary(b *testing.B) { benchSendBinary(b, 256) }

// BenchmarkSendBatchHandlerBinary1K: the same with 1 KiB payloads, the
// shape of the drain measurements (a 140 KB body per call).
func BenchmarkSendBatchHandlerBinary1K(b *testing.B) { benchSendBinary(b, 1024) }

func benchSendBinary(b *testing.B, size int) {
	r := rand.New(rand.NewPCG(1, 2)) // #nosec G404 -- benchmark data
	p := make([]byte, size)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond).Format(time.RFC3339Nano)
	benchSendBatchHandler(b, func(i int) string {
		for j := range p {
			p[j] = byte(r.Uint32())
		}
		return fmt.Sprintf(`{"payload_base64":%q,"deliver_at":%q}`, base64.StdEncoding.EncodeToString(p), at)
	})
}

func benchSendBatchHandler(b *testing.B, item func(i int) string) {
	h := benchHandler(b)
	bodies := make([][]byte, 0, 64)
	for k := 0; k < 64; k++ {
		var sb strings.Builder
		sb.WriteString(`{"messages":[`)
		for i := 0; i < 100; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(item(i))
		}
		sb.WriteString(`]}`)
		bodies = append(bodies, []byte(sb.String()))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/topics/bench/messages:batch", bytes.NewReader(bodies[i%len(bodies)]))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkMessageCycleHandlers measures the server's share of what the
// paced load shape does one message at a time: a single send (1 KiB
// random payload, due now), a lease of it and a batch ack of its
// receipt, through the handlers on an in-memory engine.
func BenchmarkMessageCycleHandlers(b *testing.B) {
	h := benchHandler(b)
	r := rand.New(rand.NewPCG(3, 4)) // #nosec G404 -- benchmark data
	p := make([]byte, 1024)
	for j := range p {
		p[j] = byte(r.Uint32())
	}
	send := []byte(fmt.Sprintf(`{"payload_base64":%q}`, base64.StdEncoding.EncodeToString(p)))
	lease := []byte(`{"max":1,"wait":"0s"}`)
	call := func(path string, body []byte, want int) []byte {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/topics/bench/"+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			b.Fatalf("%s: status %d: %s", path, w.Code, w.Body.String())
		}
		return w.Body.Bytes()
	}
	for b.Loop() {
		call("messages", send, http.StatusCreated)
		leased := call("lease", lease, http.StatusOK)
		// The id and receipt by hand: decoding the whole answer would cost
		// the benchmark more than the server's share it measures.
		id, receipt := stringAfter(leased, `"id":"`), stringAfter(leased, `"receipt":"`)
		if id == "" || receipt == "" {
			b.Fatalf("lease: %s", leased)
		}
		ack := call("acks", []byte(`{"acks":[{"id":"`+id+`","receipt":"`+receipt+`"}]}`), http.StatusOK)
		if !bytes.Contains(ack, []byte(`"ok":true`)) {
			b.Fatalf("ack: %s", ack)
		}
	}
}

// stringAfter is the JSON string (without escapes) that follows the first
// occurrence of key in b, or "".
func stringAfter(b []byte, key string) string {
	_, rest, ok := bytes.Cut(b, []byte(key))
	if !ok {
		return ""
	}
	v, _, ok := bytes.Cut(rest, []byte(`"`))
	if !ok {
		return ""
	}
	return string(v)
}

// benchHandler is a server's handler on an in-memory engine, closed when
// the benchmark ends.
func benchHandler(b *testing.B) http.Handler {
	st := memstore.New()
	eng, err := engine.Open(context.Background(), engine.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close(context.Background()); st.Close() })
	srv, err := New(Config{Queue: eng, Ready: eng.Ready})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Handler()
}
