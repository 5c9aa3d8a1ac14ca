package httpapi

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/delayq/delayq/internal/wire"
)

// writeSendBatch writes a batch answer with the hand-written encoder,
// as writeJSON would write it (same bytes, same headers). False: the
// encoder refused (a time JSON can't carry), and nothing was written.
func writeSendBatch(w http.ResponseWriter, out *wire.SendBatchResponse) bool {
	bp := answerBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledAnswer {
			answerBufs.Put(bp)
		}
	}()
	b, ok := wire.AppendSendBatchResponse((*bp)[:0], out)
	if !ok {
		return false
	}
	b = append(b, '\n')
	*bp = b
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b) // copies or sends b before returning: the buffer can be reused
	return true
}

// answerBufs holds batch answer buffers (~20 KB for 100 messages), so
// each answer is not a fresh allocation for the GC to clear and collect.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10); return &b }}

// maxPooledAnswer keeps the odd huge answer (1000 duplicates with large
// payloads) out of the pool.
const maxPooledAnswer = 1 << 20
