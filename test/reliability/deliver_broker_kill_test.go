package reliability

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

type s32Results struct {
	Messages   int     `json:"messages"`
	AckedSends int     `json:"acked_sends"`
	Kills      int     `json:"broker_kills"`
	Entries    int     `json:"stream_entries"`
	Lost       int     `json:"lost"`
	Early      int     `json:"early"`
	Unexpected int     `json:"unexpected"`
	Duplicated int     `json:"duplicated"`
	Dead       int64   `json:"dead"`
	DrainMS    float64 `json:"drain_after_last_restart_ms"`
}

// TestS32DeliverBrokerKill: a topic delivered into a Redis stream (the
// broker; AOF appendfsync always, so what it confirmed survives its
// kill -9) while `delayq serve` runs: messages with delays of 0–2 s are
// sent under load, and the broker is killed and restarted several
// times. Every acked send must end up in the stream (lost 0), none
// before its due time (early 0, by the entry id's millisecond clock on
// this machine), and delayq must drain (everything acked, nothing dead).
// Duplicates are allowed (at least once) and counted.
func TestS32DeliverBrokerKill(t *testing.T) {
	ctx := context.Background()
	broker := startRedis(t, "always")
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 5*time.Second)
	const topic = "s32"
	if _, err := c.SetTopicSettings(ctx, topic, delayq.TopicSettings{
		MaxAttempts: 1000,
		Backoff:     delayq.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2, Jitter: 0.2},
		Deliver: &delayq.DeliverSettings{Redis: &delayq.RedisTarget{Addr: broker.Addr(), Stream: "s32"},
			Timeout: time.Second, MaxInFlight: 64},
	}); err != nil {
		t.Fatal(err)
	}
	rng := newRand(seed(t))
	n := pick(2000, 20_000)
	kills := pick(3, 10)
	sendFor := pick(8*time.Second, 40*time.Second)

	var mu sync.Mutex
	due := make(map[string]time.Time, n)
	var wg sync.WaitGroup
	const senders = 4
	start := time.Now()
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += senders {
				// Paced over sendFor, so the kills hit live load.
				if d := time.Until(start.Add(sendFor * time.Duration(i) / time.Duration(n))); d > 0 {
					time.Sleep(d)
				}
				id := "m-" + strconv.Itoa(i)
				delay := rng.Dur(0, 2*time.Second)
				for try := 0; ; try++ {
					m, err := c.Send(ctx, topic, delayq.NewSendRequest([]byte(id), delayq.WithID(id), delayq.After(delay)))
					if err == nil {
						mu.Lock()
						due[id] = m.DeliverAt
						mu.Unlock()
						break
					}
					if try > 50 {
						t.Errorf("send %s: %v", id, err)
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	var lastRestart time.Time
	for range kills {
		time.Sleep(rng.Dur(500*time.Millisecond, 3*time.Second))
		broker.Kill()
		time.Sleep(rng.Dur(300*time.Millisecond, 1500*time.Millisecond))
		broker.Restart()
		lastRestart = time.Now()
	}
	wg.Wait()

	res := s32Results{Messages: n, AckedSends: len(due), Kills: kills}
	deadline := time.Now().Add(90 * time.Second)
	for {
		ti, err := c.Topic(ctx, topic)
		if err == nil && ti.Counts.Scheduled+ti.Counts.Ready+ti.Counts.Inflight == 0 {
			res.Dead = ti.Counts.Dead
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("delayq did not drain into the broker: %+v %v", ti, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.DrainMS = ms(time.Since(lastRestart))

	entries, err := rdb(t, broker.Addr()).XRange(ctx, "s32", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	res.Entries = len(entries)
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		id, _ := e.Values["id"].(string)
		d, ok := due[id]
		switch {
		case !ok:
			res.Unexpected++
			continue
		case seen[id]:
			res.Duplicated++
		}
		seen[id] = true
		at, _ := strconv.ParseInt(strings.SplitN(e.ID, "-", 2)[0], 10, 64)
		if at < d.UnixMilli() {
			res.Early++
		}
	}
	for id := range due {
		if !seen[id] {
			res.Lost++
		}
	}
	writeResults(t, "S32-deliver-broker-kill", res)
	if res.AckedSends == 0 || res.Entries == 0 {
		t.Fatalf("nothing checked: %+v", res)
	}
	if res.Lost != 0 || res.Early != 0 || res.Unexpected != 0 || res.Dead != 0 {
		t.Errorf("guarantees violated: %+v", res)
	}
}
