package delayq

// EncodeSendBatchForTest exposes the batch encoder to the benchmarks of
// package delayq_test.
func EncodeSendBatchForTest(reqs []SendRequest) ([]byte, error) { return encodeSendBatch(reqs) }

// EncodeSendBatchJSONForTest is the reference encoding (encoding/json).
func EncodeSendBatchJSONForTest(reqs []SendRequest) ([]byte, error) { return encodeSendBatchJSON(reqs) }
