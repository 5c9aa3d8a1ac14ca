package dashboard

import (
	"context"
	"slices"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// UpcomingSource counts scheduled messages by due time: the query the
// Upcoming page needs. The engine should implement it over a store method
// that counts its scheduled index by due time without reading payloads
// (Pebble: a key-only range scan; Redis: one ZCOUNT per bucket). Its
// arguments are plain types so *engine.Engine can implement it without
// importing this package; the dashboard finds it on Config.Queue by a
// type assertion, or takes Config.Upcoming.
type UpcomingSource interface {
	// DueCounts returns n counts: element i is the number of messages of
	// topic in state scheduled whose due time is in
	// [from + i·bucket, from + (i+1)·bucket). Ready, inflight and dead
	// messages are not counted.
	DueCounts(ctx context.Context, topic string, from time.Time, bucket time.Duration, n int) ([]int64, error)
}

// MessageBrowser pages a topic's messages in one state from the store's
// index (domain.TopicAdmin's ListMessages; the engine implements it). The
// Upcoming page lists the soonest scheduled messages with it, so every
// server's dashboard shows the whole queue, sends made before a restart
// or through another server included.
type MessageBrowser interface {
	ListMessages(ctx context.Context, topic string, req domain.ListRequest) (*domain.MessagePage, error)
}

// Upcoming list sizes: one page for a chosen topic; the soonest across
// all topics reads one page of each of at most maxListTopics topics.
const (
	upcomingListLen = 50
	maxListTopics   = 200
)

// soonest lists the next messages to come due: one page of topic (after
// cursor), or, with topic "", the soonest across topics that have
// scheduled messages. next is the cursor of topic's next page.
func soonest(ctx context.Context, b MessageBrowser, topic, cursor string, infos []domain.TopicInfo) (msgs []*domain.Message, next string, partial bool, err error) {
	req := domain.ListRequest{Filter: domain.MessageFilter{State: domain.StateScheduled}, Limit: upcomingListLen, Cursor: cursor}
	if topic != "" {
		p, err := b.ListMessages(ctx, topic, req)
		if err != nil {
			return nil, "", false, err
		}
		return p.Messages, p.Next, false, nil
	}
	read := 0
	for _, t := range infos {
		if t.Counts.Scheduled == 0 {
			continue
		}
		if read == maxListTopics {
			partial = true
			break
		}
		read++
		p, err := b.ListMessages(ctx, t.Name, req)
		if err != nil {
			return nil, "", false, err
		}
		msgs = append(msgs, p.Messages...)
	}
	slices.SortStableFunc(msgs, func(a, b *domain.Message) int { return a.DeliverAt.Compare(b.DeliverAt) })
	if len(msgs) > upcomingListLen {
		msgs = msgs[:upcomingListLen]
	}
	return msgs, "", partial, nil
}

// dueBuckets are the fallback counts of observed sends by due time: per
// minute for due times within a day of when they were recorded, per hour
// beyond. Memory is at most 1440 + Horizon/1h entries. Guarded by the
// owning topicRec's mutex.
type dueBuckets struct {
	minutes map[int64]int64 // unix minute → count
	hours   map[int64]int64 // unix hour → count
	pruned  int64           // unix minute of the last prune
}

const fineSpan = 24 * time.Hour

func (b *dueBuckets) add(now, due time.Time, n int64, horizon time.Duration) {
	if !due.After(now) || due.Sub(now) > horizon {
		return
	}
	if b.minutes == nil {
		b.minutes, b.hours = make(map[int64]int64), make(map[int64]int64)
	}
	b.prune(now)
	if due.Sub(now) <= fineSpan {
		b.minutes[due.Unix()/60] += n
		return
	}
	b.hours[due.Unix()/3600] += n
}

// remove undoes add for one message that is no longer scheduled at due
// (a no-op once due's bucket was pruned).
func (b *dueBuckets) remove(due time.Time) {
	if b.minutes == nil {
		return
	}
	if k := due.Unix() / 60; b.minutes[k] > 0 {
		if b.minutes[k]--; b.minutes[k] == 0 {
			delete(b.minutes, k)
		}
		return
	}
	if k := due.Unix() / 3600; b.hours[k] > 0 {
		if b.hours[k]--; b.hours[k] == 0 {
			delete(b.hours, k)
		}
	}
}

// prune drops buckets that are wholly in the past, at most once a minute
// (so a send costs O(1), not a walk of the buckets).
func (b *dueBuckets) prune(now time.Time) {
	m, h := now.Unix()/60, now.Unix()/3600
	if m == b.pruned {
		return
	}
	b.pruned = m
	for k := range b.minutes {
		if k < m {
			delete(b.minutes, k)
		}
	}
	for k := range b.hours {
		if k < h {
			delete(b.hours, k)
		}
	}
}

// counts fills n buckets from from. Hour entries are spread evenly over
// the minutes of their hour when the bucket is finer than an hour.
func (b *dueBuckets) counts(from time.Time, bucket time.Duration, n int) []int64 {
	out := make([]int64, n)
	put := func(t time.Time, c int64) {
		if i := int(t.Sub(from) / bucket); t.Sub(from) >= 0 && i < n {
			out[i] += c
		}
	}
	for k, c := range b.minutes {
		put(time.Unix(k*60, 0), c)
	}
	for k, c := range b.hours {
		start := time.Unix(k*3600, 0)
		if bucket >= time.Hour {
			put(start, c)
			continue
		}
		for i := int64(0); i < 60; i++ { // spread c over 60 minutes
			share := c / 60
			if i < c%60 {
				share++
			}
			if share > 0 {
				put(start.Add(time.Duration(i)*time.Minute), share)
			}
		}
	}
	return out
}

// recordDue moves one message's count in the fallback source from prev to
// due (either may be zero: not counted).
func (r *Recorder) recordDue(topic string, prev, due, now time.Time) {
	t := r.topic(topic)
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !prev.IsZero() {
		t.due.remove(prev)
	}
	if !due.IsZero() {
		t.due.add(now, due, 1, r.cfg.Horizon)
	}
}

// DueCounts implements UpcomingSource from the sends the Recorder saw
// since the server started: messages sent before are missing, and a
// message whose state changed without a message event (lease expiry
// retries, changes through other servers, evicted histories) may be
// counted at a stale due time.
func (r *Recorder) DueCounts(_ context.Context, topic string, from time.Time, bucket time.Duration, n int) ([]int64, error) {
	if err := domain.ValidateTopic(topic); err != nil {
		return nil, err
	}
	r.mu.RLock()
	t := r.topics[topic]
	r.mu.RUnlock()
	if t == nil || bucket <= 0 || n <= 0 {
		return make([]int64, max(n, 0)), nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.due.minutes != nil {
		t.due.prune(r.cfg.Now())
	}
	return t.due.counts(from, bucket, n), nil
}
