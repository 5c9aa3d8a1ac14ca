package pebblestore

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/delayq/delayq/internal/store"
)

// Counters are stored under c/{topic} as five little-endian int64 deltas
// (scheduled, ready, inflight, dead, acked) and combined by a Pebble merge
// operator that adds them. Every batch that changes a message's state also
// merges the matching delta, so counters and records commit atomically and
// commute: two batches merging deltas into the same key can never lose one
// another's update (no read-modify-write on the counter key).
const countersLen = 5 * 8

// mergerName is stored in Pebble's OPTIONS file: never change it.
const mergerName = "delayq.counters.v1"

var countersMerger = &pebble.Merger{
	Name: mergerName,
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		m := &countersMerge{}
		if err := m.add(value); err != nil {
			return nil, err
		}
		return m, nil
	},
}

type countersMerge struct{ sum [5]int64 }

func (m *countersMerge) add(v []byte) error {
	if len(v) != countersLen {
		return fmt.Errorf("pebblestore: counters operand of %d bytes, want %d: %w", len(v), countersLen, store.ErrCorrupt)
	}
	for i := range m.sum {
		m.sum[i] += int64(binary.LittleEndian.Uint64(v[i*8:])) // #nosec G115 -- two's-complement delta written by encodeCounts: bit reinterpretation for the on-disk encoding, no arithmetic on the result
	}
	return nil
}

func (m *countersMerge) MergeNewer(v []byte) error { return m.add(v) }
func (m *countersMerge) MergeOlder(v []byte) error { return m.add(v) }
func (m *countersMerge) Finish(bool) ([]byte, io.Closer, error) {
	return encodeCounts(countsFromArray(m.sum)), nil, nil
}

func countsArray(c store.Counts) [5]int64 {
	return [5]int64{c.Scheduled, c.Ready, c.Inflight, c.Dead, c.Acked}
}

func countsFromArray(a [5]int64) store.Counts {
	return store.Counts{Scheduled: a[0], Ready: a[1], Inflight: a[2], Dead: a[3], Acked: a[4]}
}

func encodeCounts(c store.Counts) []byte {
	b := make([]byte, 0, countersLen)
	for _, v := range countsArray(c) {
		b = binary.LittleEndian.AppendUint64(b, uint64(v)) // #nosec G115 -- signed delta as two's complement: bit reinterpretation for the on-disk encoding, no arithmetic on the result
	}
	return b
}

func decodeCounts(b []byte) (store.Counts, error) {
	var m countersMerge
	if err := m.add(b); err != nil {
		return store.Counts{}, err
	}
	return countsFromArray(m.sum), nil
}

// delta accumulates per-state count changes of one batch.
type delta [5]int64

func stateIndex(s store.State) int {
	switch s {
	case store.StateScheduled:
		return 0
	case store.StateReady:
		return 1
	case store.StateInflight:
		return 2
	case store.StateDead:
		return 3
	case store.StateAcked:
		return 4
	}
	return -1
}

// move records that one message went from state "from" to "to"; 0 means
// "did not exist" / "no longer exists".
func (d *delta) move(from, to store.State) {
	if i := stateIndex(from); i >= 0 {
		d[i]--
	}
	if i := stateIndex(to); i >= 0 {
		d[i]++
	}
}

func (d *delta) zero() bool { return *d == delta{} }

func (d *delta) apply(c *store.Counts) {
	a := countsArray(*c)
	for i := range a {
		a[i] += d[i]
	}
	*c = countsFromArray(a)
}
