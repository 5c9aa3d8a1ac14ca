package delayq

import "github.com/delayq/delayq/internal/wire"

// EncodeSendBatchForTest exposes the batch encoder the Client uses to the
// benchmarks of package delayq_test.
func EncodeSendBatchForTest(reqs []SendRequest) ([]byte, error) { return wire.EncodeSendBatch(reqs) }

// EncodeSendBatchJSONForTest is the reference encoding (encoding/json).
func EncodeSendBatchJSONForTest(reqs []SendRequest) ([]byte, error) {
	return wire.MarshalSendBatch(reqs)
}
