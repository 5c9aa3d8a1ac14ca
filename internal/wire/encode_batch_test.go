package wire

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// TestEncodeSendBatchMatchesJSON checks the hand-written batch encoder
// (EncodeSendBatch, the Client's) against encoding/json on the
// FromSendRequest values (MarshalSendBatch), byte for byte, and that both
// refuse the same requests with the same error.
func TestEncodeSendBatchMatchesJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	texts := []string{"", "x", "order-42", "<&>", "a\"b\\c", "\n\t\b\f\x01", "é😀", "\u2028\u2029", "\xff\xfe", "\xc3"}
	for range 3000 {
		reqs := make([]domain.SendRequest, r.IntN(4))
		for i := range reqs {
			q := &reqs[i]
			if r.IntN(2) == 0 {
				q.ID = texts[r.IntN(len(texts))]
			}
			switch r.IntN(3) {
			case 0:
				q.Payload = []byte(texts[r.IntN(len(texts))])
			case 1:
				q.Payload = make([]byte, r.IntN(300))
				for j := range q.Payload {
					q.Payload[j] = byte(r.Uint32())
				}
			}
			switch r.IntN(3) {
			case 0:
				q.Headers = map[string]string{texts[r.IntN(len(texts))]: texts[r.IntN(len(texts))], "k": "v"}
			case 1:
				q.Headers = map[string]string{}
			}
			switch r.IntN(5) {
			case 0:
				q.When.Delay = time.Duration(r.Int64N(1e14) - 1e12)
			case 1:
				q.When.DeliverAt = time.Date(2030, 1, 2, 3, 4, 5, r.IntN(1e9), time.FixedZone("z", 3600*r.IntN(3)))
			case 2:
				q.When.Delay, q.When.DeliverAt = time.Second, time.Now() // invalid: both
			case 3:
				if r.IntN(10) == 0 {
					q.When.DeliverAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // json.Marshal refuses
				}
			}
			if r.IntN(2) == 0 {
				q.MaxAttempts = r.IntN(20) - 2
			}
		}
		got, gerr := EncodeSendBatch(reqs)
		want, werr := MarshalSendBatch(reqs)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("errors differ: %v / %v", gerr, werr)
		}
		if string(got) != string(want) {
			t.Fatalf("\ngot  %s\nwant %s", got, want)
		}
	}
	if _, err := EncodeSendBatch([]domain.SendRequest{{When: domain.When{DeliverAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}}); err == nil || !strings.Contains(err.Error(), "encode request") {
		t.Fatalf("year 10000: %v", err)
	}
}
