package redisstore

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// DueCounts counts a topic's scheduled messages per bucket: element i is
// how many are due in [from+i·bucket, from+(i+1)·bucket). One pipelined
// ZCOUNT per bucket and partition (O(log n) each); the sum over partitions
// is not one atomic snapshot, which a chart does not need.
func (s *Store) DueCounts(ctx context.Context, topic string, fromMS, bucketMS int64, n int) ([]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := checkTopic(topic); err != nil {
		return nil, err
	}
	out := make([]int64, max(n, 0))
	if n <= 0 || bucketMS <= 0 {
		return out, nil
	}
	for _, k := range s.keys.allParts(topic) {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, n)
		for i := range cmds {
			lo := fromMS + int64(i)*bucketMS
			cmds[i] = pipe.ZCount(ctx, k.sched, strconv.FormatInt(lo, 10), "("+strconv.FormatInt(lo+bucketMS, 10))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, s.fail("count due", err)
		}
		for i, c := range cmds {
			out[i] += c.Val()
		}
	}
	return out, nil
}
