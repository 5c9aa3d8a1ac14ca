package httpapi

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// TestWriteSendBatchMatchesWriteJSON checks that a batch send's
// hand-written answer goes out exactly as writeJSON would send it:
// status, headers, bytes.
func TestWriteSendBatchMatchesWriteJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	p := "dup <payload>"
	out := wire.SendBatchResponse{Results: []wire.BatchResult{
		{Message: &wire.Message{ID: "a", Topic: "t", DeliverAt: at, State: "scheduled", MaxAttempts: 5, CreatedAt: at, UpdatedAt: at}},
		{Message: &wire.Message{ID: "b", Topic: "t", Payload: &p, DeliverAt: at, State: "ready", CreatedAt: at, UpdatedAt: at, Duplicate: true}},
		{Error: &wire.ErrorBody{Code: wire.CodeTooLarge, Message: "payload is 5 bytes, the limit is 4"}},
	}}
	fast, ref := httptest.NewRecorder(), httptest.NewRecorder()
	if _, ok := wire.AppendSendBatchResponse(nil, &out); !ok {
		t.Fatal("the batch answer's encoder refused: writeAnswer would fall back to writeJSON")
	}
	writeAnswer(fast, http.StatusOK, out)
	writeJSON(ref, http.StatusOK, out)
	if fast.Code != ref.Code || !reflect.DeepEqual(fast.Header(), ref.Header()) || fast.Body.String() != ref.Body.String() {
		t.Fatalf("fast %d %v %q\nref  %d %v %q", fast.Code, fast.Header(), fast.Body, ref.Code, ref.Header(), ref.Body)
	}
}

// TestWriteAnswerMatchesWriteJSON: the answers writeAnswer encodes by
// hand (a sent message with its 201, acks' results, failures included)
// go out as writeJSON sends them; one it refuses (a time JSON can't
// carry) and one it has no encoder for go through writeJSON itself.
func TestWriteAnswerMatchesWriteJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	p := "<payload>"
	answers := []struct {
		status int
		v      any
	}{
		{http.StatusCreated, &wire.Message{ID: "a", Topic: "t", DeliverAt: at, State: "scheduled", MaxAttempts: 5, CreatedAt: at, UpdatedAt: at, Headers: map[string]string{"k": "v"}}},
		{http.StatusOK, &wire.Message{ID: "b", Topic: "t", Payload: &p, DeliverAt: at, State: "ready", CreatedAt: at, UpdatedAt: at, Duplicate: true}},
		{http.StatusOK, &wire.Message{ID: "far", Topic: "t", DeliverAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{http.StatusOK, wire.AckBatchResponse{Results: []wire.AckResult{
			{ID: "a", OK: true},
			{ID: "b", Error: &wire.ErrorBody{Code: wire.CodeConflict, Message: "the receipt is stale", Field: "receipt"}},
		}}},
		{http.StatusOK, wire.AckResult{ID: "a", OK: true}},
		{http.StatusOK, wire.CountResponse{Count: 3}},
	}
	for i, a := range answers {
		fast, ref := httptest.NewRecorder(), httptest.NewRecorder()
		writeAnswer(fast, a.status, a.v)
		writeJSON(ref, a.status, a.v)
		if fast.Code != ref.Code || !reflect.DeepEqual(fast.Header(), ref.Header()) || fast.Body.String() != ref.Body.String() {
			t.Fatalf("answer %d: fast %d %v %q\nref  %d %v %q", i, fast.Code, fast.Header(), fast.Body, ref.Code, ref.Header(), ref.Body)
		}
		if ref.Code != a.status && i != 2 {
			t.Fatalf("answer %d: status %d, want %d", i, ref.Code, a.status)
		}
	}
}
