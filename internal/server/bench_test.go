package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

// BenchmarkSendBatchHandler measures the server's share of a batch send
// (100 messages of 256 B, the shape of the HTTP send target) through the
// handler on an in-memory engine: decoding, validation, encoding.
func BenchmarkSendBatchHandler(b *testing.B) {
	st := memstore.New()
	eng, err := engine.Open(context.Background(), engine.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { eng.Close(context.Background()); st.Close() }()
	srv, err := New(Config{Queue: eng, Ready: eng.Ready})
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	payload := strings.Repeat("x", 256)
	bodies := make([][]byte, 0, 64)
	for k := 0; k < 64; k++ {
		var sb strings.Builder
		sb.WriteString(`{"messages":[`)
		for i := 0; i < 100; i++ {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"payload":%q,"delay":"1h"}`, payload)
		}
		sb.WriteString(`]}`)
		bodies = append(bodies, []byte(sb.String()))
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req := httptest.NewRequest(http.MethodPost, "/v1/topics/bench/messages:batch", bytes.NewReader(bodies[i%len(bodies)]))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}
