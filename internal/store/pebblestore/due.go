package pebblestore

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

// DueCounts counts a topic's scheduled messages per bucket: element i is
// how many are due in [from+i·bucket, from+(i+1)·bucket). It reads index
// keys only (no records, no payloads) from a point-in-time iterator, so it
// takes no lock; its cost is the number of scheduled messages in range.
func (s *Store) DueCounts(ctx context.Context, topic string, fromMS, bucketMS int64, n int) ([]int64, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	out := make([]int64, n)
	if n <= 0 || bucketMS <= 0 {
		return out, nil
	}
	pre := topicPrefix(ixPrefix[ixScheduled], topic)
	lo := appendTimeSeq(append([]byte(nil), pre...), fromMS, 0)
	hi := appendTimeSeq(append([]byte(nil), pre...), fromMS+bucketMS*int64(n), 0)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi, KeyTypes: pebble.IterKeyTypePointsOnly})
	if err != nil {
		return nil, classify("scan scheduled", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		if due, _, ok := parseIndexSuffix(it.Key()); ok {
			if i := (due - fromMS) / bucketMS; i >= 0 && i < int64(n) {
				out[i]++
			}
		}
	}
	if err := it.Close(); err != nil {
		return nil, classify("scan scheduled", err)
	}
	return out, nil
}
