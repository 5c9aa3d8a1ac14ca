package httpapi

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// writeLease writes a lease answer with the hand-written encoder, as
// writeJSON(w, 200, wire.MessagesResponse{Messages: wire.FromMessages(msgs), Acks: acks})
// would write it. False: the encoder refused (a payload_json message, a
// time JSON can't carry), and nothing was written.
func writeLease(w http.ResponseWriter, msgs []*domain.Message, acks []wire.AckResult) bool {
	return writeAppended(w, http.StatusOK, func(b []byte) ([]byte, bool) { return wire.AppendLeaseResponse(b, msgs, acks) })
}

// writeAnswer writes a handler's answer v as writeJSON(w, status, v)
// would (same bytes, same headers), through a hand-written encoder for
// the answers of the calls a queue makes most (sends, one or a batch,
// and acks), where encoding/json's reflection was 4.5 % of a server's
// CPU in a profile at 1,000 single sends a second; anything else, and
// what an encoder refuses (a time JSON can't carry), through writeJSON.
func writeAnswer(w http.ResponseWriter, status int, v any) {
	var ok bool
	switch v := v.(type) {
	case wire.SendBatchResponse:
		ok = writeAppended(w, status, func(b []byte) ([]byte, bool) { return wire.AppendSendBatchResponse(b, &v) })
	case *wire.Message:
		ok = writeAppended(w, status, func(b []byte) ([]byte, bool) { return wire.AppendMessage(b, v) })
	case wire.AckBatchResponse:
		ok = writeAppended(w, status, func(b []byte) ([]byte, bool) { return wire.AppendAckBatchResponse(b, &v), true })
	case wire.AckResult:
		ok = writeAppended(w, status, func(b []byte) ([]byte, bool) { return wire.AppendAckResult(b, &v), true })
	}
	if !ok {
		writeJSON(w, status, v)
	}
}

// writeAppended writes an answer that enc appends to a pooled buffer,
// with writeJSON's headers and trailing newline; false if enc refused.
func writeAppended(w http.ResponseWriter, status int, enc func([]byte) ([]byte, bool)) bool {
	bp := answerBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledAnswer {
			answerBufs.Put(bp)
		}
	}()
	b, ok := enc((*bp)[:0])
	if !ok {
		return false
	}
	b = append(b, '\n')
	*bp = b
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // copies or sends b before returning: the buffer can be reused
	return true
}

// answerBufs holds answer buffers (~20 KB for a batch send of 100
// messages, ~170 KB for a lease of 100 1 KiB binary payloads), so
// each answer is not a fresh allocation for the GC to clear and collect.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// maxPooledAnswer keeps the odd huge answer (1000 duplicates with large
// payloads) out of the pool.
const maxPooledAnswer = 1 << 20
