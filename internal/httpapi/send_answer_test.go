package httpapi

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// TestWriteSendBatchMatchesWriteJSON checks that the hand-written answer
// goes out exactly as writeJSON would send it: status, headers, bytes.
func TestWriteSendBatchMatchesWriteJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	p := "dup <payload>"
	out := wire.SendBatchResponse{Results: []wire.BatchResult{
		{Message: &wire.Message{ID: "a", Topic: "t", DeliverAt: at, State: "scheduled", MaxAttempts: 5, CreatedAt: at, UpdatedAt: at}},
		{Message: &wire.Message{ID: "b", Topic: "t", Payload: &p, DeliverAt: at, State: "ready", CreatedAt: at, UpdatedAt: at, Duplicate: true}},
		{Error: &wire.ErrorBody{Code: wire.CodeTooLarge, Message: "payload is 5 bytes, the limit is 4"}},
	}}
	fast, ref := httptest.NewRecorder(), httptest.NewRecorder()
	if !writeSendBatch(fast, &out) {
		t.Fatal("writeSendBatch refused")
	}
	writeJSON(ref, http.StatusOK, out)
	if fast.Code != ref.Code || !reflect.DeepEqual(fast.Header(), ref.Header()) || fast.Body.String() != ref.Body.String() {
		t.Fatalf("fast %d %v %q\nref  %d %v %q", fast.Code, fast.Header(), fast.Body, ref.Code, ref.Header(), ref.Body)
	}
}
