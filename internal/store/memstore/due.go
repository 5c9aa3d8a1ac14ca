package memstore

import "context"

// DueCounts counts a topic's scheduled messages per bucket: element i is
// how many are due in [from+i·bucket, from+(i+1)·bucket).
func (s *Store) DueCounts(_ context.Context, topic string, fromMS, bucketMS int64, n int) ([]int64, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]int64, max(n, 0))
	t := s.topics[topic]
	if t == nil || bucketMS <= 0 {
		return out, nil
	}
	for _, e := range t.scheduled.es {
		if i := (e.rec.DueAt - fromMS) / bucketMS; e.rec.DueAt >= fromMS && i < int64(n) {
			out[i]++
		}
	}
	return out, nil
}
