// Package reliability holds delayq's scenario tests (the S1–S29 list in docs/reliability.md):
// each drives the real `delayq serve` binary as a subprocess — built once
// in TestMain — through the Go client, records every operation with
// test/internal/history, and judges the record with its checker (and, for
// S12, with porcupine). See docs/reliability.md.
//
// Size knob: DELAYQ_RELIABILITY=short (default) or full. Results go to
// DELAYQ_RESULTS_DIR (default: a temporary directory), one JSON file per
// scenario. DELAYQ_SEED fixes the seed.
package reliability
