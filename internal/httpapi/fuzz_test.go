package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/wire"
)

// fuzzRoutes are the endpoints whose bodies FuzzRequestDecoders feeds.
var fuzzRoutes = []struct{ method, path string }{
	{"POST", "/v1/topics/fz/messages"},
	{"POST", "/v1/topics/fz/messages:batch"},
	{"POST", "/v1/topics/fz/lease"},
	{"POST", "/v1/topics/fz/messages/m1/nack"},
	{"POST", "/v1/topics/fz/messages/m1/ack"},
	{"POST", "/v1/topics/fz/messages/m1/extend"},
	{"POST", "/v1/topics/fz/acks"},
	{"PATCH", "/v1/topics/fz/messages/m1"},
	{"PUT", "/v1/topics/fz-settings"}, // a topic that never holds messages: push targets stay idle
}

// FuzzRequestDecoders sends arbitrary bodies to the endpoints that decode
// one, through the real handler on a memstore engine. Bad input must never
// be a 500 (a panic is answered 500 too) and every error answer must have
// the API's error shape.
func FuzzRequestDecoders(f *testing.F) {
	seeds := []string{
		`{"payload":"x"}`, `{"id":"a","payload":"x","delay":"30s"}`, `{"payload_base64":"eA==","delay_ms":5}`,
		`{"payload":"x","deliver_at":"2030-01-02T15:04:05Z","headers":{"k":"v"},"max_attempts":3}`,
		`{"dealy":"30m","payload":"x"}`, `{"payload":"x","delay":30}`, `{"payload":"x","delay":"1e309s"}`,
		`{"payload":"x","delay":"-1s"}`, `{"payload":"x","delay_ms":9223372036854775807}`, `{"payload":"x","delay_ms":-0}`,
		`{"payload":"x","payload":"y"}`, `{"payload":"\ud800"}`, `{"payload":"x"} {}`, `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
		`{"messages":[{"payload":"x"},{"payload":"y","delay":"1s"}]}`, `{"messages":[]}`, `{"messages":[1]}`,
		`{"max":10,"lease":"30s","wait":"0s"}`, `{"max":0}`, `{"wait":"31s"}`, `{"lease":"-1s"}`,
		`{"receipt":"r","delay":"1s","reason":"x"}`, `{"receipt":"r","lease":"1m"}`, `{"receipt":""}`,
		`{"acks":[{"id":"m1","receipt":"r"}]}`, `{"acks":[{"id":"{x}","receipt":"r"}]}`,
		`{"delay":"5s"}`, `{"deliver_at":"yesterday"}`,
		`{"max_attempts":5,"backoff":{"initial":"1s","max":"1m","multiplier":2,"jitter":0.2},"lease":"30s"}`,
		`{"rate_limit":{"per_second":-1,"burst":0}}`, `{"push":{"url":"http://127.0.0.1:1/","timeout":"1s","concurrency":1}}`,
		``, `null`, `"x"`, "\xff\xfe", `{"payload":"x\u0000"}`,
		// The send fast paths and the single-pass scanner (internal/wire: decode_send.go, json_scan.go).
		`{"messages":[{"payload_base64":"eA==","deliver_at":"2030-01-02T15:04:05.123Z"},{"payload":"y","max_attempts":2}]}`,
		`{"messages":[{"payload":"x","id":null,"delay":null},{"p\u0061yload":"y"}]}`, `{"messages":[{"payload":"x"}],"x":1}`,
		`{"messages":[{"payload":"x","delay_ms":1e3}]}`, `{"messages":[{"payload":"x","max_attempts":9223372036854775808}]}`,
		`{"messages":[{"payload":"\ud83d\ude00","headers":{"a":"1","a":"2"}}]}`, `{"messages":null}`, `{"messages":[null,[],"x"]}`,
		`{"payload":"x","deliver_at":"2030-01-02T15:04:05+02:00"}`, `{"payload":"x","delay":"1h","id":"a\"b"}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	st := memstore.New()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng, err := engine.Open(context.Background(), engine.Config{Store: st, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		eng.Close(context.Background())
		st.Close()
	})
	srv, err := New(Config{Queue: eng, Ready: eng.Ready, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		// Long-polls end with the request context: keep each call short.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		req := httptest.NewRequestWithContext(ctx, rt.method, "http://127.0.0.1"+rt.path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s %q: status %d: %s", rt.method, rt.path, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var er wire.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || er.Error.Code == "" || er.Error.Message == "" {
				t.Fatalf("%s %s %q: %d answer not in the error shape: %q", rt.method, rt.path, body, rec.Code, rec.Body.Bytes())
			}
		}
	})
}
