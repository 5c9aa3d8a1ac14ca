package delayqtest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/delayqtest"
)

var ctx = context.Background()

func send(t *testing.T, q *delayqtest.Queue, topic, id string, opts ...delayq.SendOption) *delayq.Message {
	t.Helper()
	m, err := q.Send(ctx, topic, delayq.NewSendRequest([]byte("p-"+id), append(opts, delayq.WithID(id))...))
	if err != nil {
		t.Fatalf("send %s: %v", id, err)
	}
	return m
}

// leaseNow leases every message of topic that is ready, without waiting.
func leaseNow(t *testing.T, q *delayqtest.Queue, topic string, lease time.Duration) []*delayq.Message {
	t.Helper()
	ms, err := q.Lease(ctx, topic, delayq.LeaseRequest{Max: delayq.MaxBatch, Lease: lease})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	return ms
}

// take leases every message of topic that is ready and acks them.
func take(t *testing.T, q *delayqtest.Queue, topic string) []*delayq.Message {
	t.Helper()
	ms := leaseNow(t, q, topic, 0)
	for _, m := range ms {
		if err := q.Ack(ctx, topic, m.ID, m.Receipt); err != nil {
			t.Fatalf("ack %s: %v", m.ID, err)
		}
	}
	return ms
}

func ids(ms []*delayq.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	slices.Sort(out)
	return out
}

func state(t *testing.T, q *delayqtest.Queue, topic, id string) delayq.State {
	t.Helper()
	m, err := q.Get(ctx, topic, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return m.State
}

func TestWithStartSetsTheClock(t *testing.T) {
	start := time.Date(2030, 1, 1, 12, 0, 0, 123456789, time.UTC)
	q := delayqtest.NewQueue(t, delayqtest.WithStart(start))
	if want := start.Truncate(time.Millisecond); !q.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v", q.Now(), want)
	}
	m := send(t, q, "t", "a", delayq.After(time.Hour))
	if want := q.Now().Add(time.Hour); !m.DeliverAt.Equal(want) {
		t.Fatalf("DeliverAt = %v, want %v (an hour on the queue's clock)", m.DeliverAt, want)
	}
	q.Advance(90 * time.Minute)
	if want := start.Truncate(time.Millisecond).Add(90 * time.Minute); !q.Now().Equal(want) {
		t.Fatalf("after Advance, Now = %v, want %v", q.Now(), want)
	}
}

// Each Advance releases exactly the messages due by the new time, at once
// (a Lease without Wait right after it finds them), and none due later.
func TestAdvanceReleasesExactlyWhatIsDue(t *testing.T) {
	q := delayqtest.NewQueue(t)
	delays := map[string]time.Duration{
		"m1": time.Minute, "m5": 5 * time.Minute, "m30": 30 * time.Minute,
		"m30b": 30 * time.Minute, "h2": 2 * time.Hour, "d1": 24 * time.Hour,
	}
	for id, d := range delays {
		send(t, q, "t", id, delay(d))
	}
	if got := leaseNow(t, q, "t", 0); len(got) != 0 {
		t.Fatalf("before any Advance leased %v", ids(got))
	}
	elapsed := time.Duration(0)
	steps := []time.Duration{59 * time.Second, time.Second, 4 * time.Minute, 25*time.Minute - time.Millisecond,
		time.Millisecond, 89 * time.Minute, time.Hour, 21*time.Hour + time.Minute, 48 * time.Hour}
	released := map[string]bool{}
	for _, step := range steps {
		q.Advance(step)
		elapsed += step
		var want []string
		for id, d := range delays {
			if d <= elapsed && !released[id] {
				want = append(want, id)
				released[id] = true
			}
		}
		slices.Sort(want)
		got := take(t, q, "t")
		if !slices.Equal(ids(got), want) {
			t.Fatalf("after %v: leased %v, want %v", elapsed, ids(got), want)
		}
		for id, d := range delays {
			if d > elapsed {
				if s := state(t, q, "t", id); s != delayq.StateScheduled {
					t.Fatalf("after %v: %s (due at %v) is %s, want scheduled", elapsed, id, d, s)
				}
			}
		}
	}
	if len(released) != len(delays) {
		t.Fatalf("released %d of %d messages", len(released), len(delays))
	}
}

func delay(d time.Duration) delayq.SendOption { return delayq.After(d) }

func TestAdvanceToReleasesAnAbsoluteDueTime(t *testing.T) {
	q := delayqtest.NewQueue(t)
	at := q.Now().Add(3 * time.Hour)
	send(t, q, "t", "a", delayq.At(at))
	q.AdvanceTo(at.Add(-time.Millisecond))
	if got := leaseNow(t, q, "t", 0); len(got) != 0 {
		t.Fatalf("a millisecond early leased %v", ids(got))
	}
	q.AdvanceTo(at.Add(-time.Hour)) // the past: the clock stays
	if !q.Now().Equal(at.Add(-time.Millisecond)) {
		t.Fatalf("AdvanceTo a past time moved the clock to %v", q.Now())
	}
	q.AdvanceTo(at)
	if got := leaseNow(t, q, "t", 0); !slices.Equal(ids(got), []string{"a"}) {
		t.Fatalf("at the due time leased %v, want [a]", ids(got))
	}
}

// A nack reschedules after the topic's backoff on the queue's clock; the
// retry is released when the clock reaches it, not before; the last
// attempt goes dead.
func TestNackRetriesAfterBackoff(t *testing.T) {
	q := delayqtest.NewQueue(t)
	if _, err := q.SetTopicSettings(ctx, "t", delayq.TopicSettings{
		MaxAttempts: 3,
		Backoff:     delayq.Backoff{Initial: time.Minute, Max: time.Hour, Multiplier: 2},
	}); err != nil {
		t.Fatal(err)
	}
	send(t, q, "t", "a")
	for attempt, base := range []time.Duration{time.Minute, 2 * time.Minute} {
		got := leaseNow(t, q, "t", 0)
		if len(got) != 1 || got[0].Attempt != attempt+1 {
			t.Fatalf("attempt %d: leased %+v", attempt+1, got)
		}
		nacked := q.Now()
		m, err := q.Nack(ctx, "t", "a", got[0].Receipt, delayq.NackRequest{Reason: "boom"})
		if err != nil {
			t.Fatal(err)
		}
		wait := m.DeliverAt.Sub(nacked)
		if m.State != delayq.StateScheduled || wait < base*8/10 || wait > base*12/10 {
			t.Fatalf("after nack %d: %s due in %v, want scheduled in %v ±20%%", attempt+1, m.State, wait, base)
		}
		q.Advance(wait - time.Millisecond)
		if got := leaseNow(t, q, "t", 0); len(got) != 0 {
			t.Fatalf("a millisecond before the retry leased %v", ids(got))
		}
		q.Advance(time.Millisecond)
	}
	got := leaseNow(t, q, "t", 0)
	if len(got) != 1 || got[0].Attempt != 3 {
		t.Fatalf("attempt 3: leased %+v", got)
	}
	m, err := q.Nack(ctx, "t", "a", got[0].Receipt, delayq.NackRequest{Reason: "boom"})
	if err != nil || m.State != delayq.StateDead {
		t.Fatalf("last nack: %v, %v; want dead", m, err)
	}
	page, err := q.DeadList(ctx, "t", delayq.DeadListRequest{})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].LastError != "boom" {
		t.Fatalf("dead list: %+v, %v", page, err)
	}
}

// A lease ends on the queue's clock: Advance past it redelivers the
// message, and the first receipt is stale.
func TestLeaseExpiresUnderAdvance(t *testing.T) {
	q := delayqtest.NewQueue(t)
	send(t, q, "t", "a")
	first := leaseNow(t, q, "t", 10*time.Second)
	if len(first) != 1 {
		t.Fatalf("leased %v", ids(first))
	}
	q.Advance(10*time.Second - time.Millisecond)
	if got := leaseNow(t, q, "t", 0); len(got) != 0 {
		t.Fatalf("before the lease ended leased %v", ids(got))
	}
	if s := state(t, q, "t", "a"); s != delayq.StateInflight {
		t.Fatalf("before the lease ended: %s, want inflight", s)
	}
	q.Advance(time.Millisecond)
	again := leaseNow(t, q, "t", 10*time.Second)
	if len(again) != 1 || again[0].Attempt != 2 || again[0].LastError == "" {
		t.Fatalf("after the lease ended leased %+v, want a's second delivery with its last error", again)
	}
	if err := q.Ack(ctx, "t", "a", first[0].Receipt); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("ack with the expired receipt: %v, want ErrConflict", err)
	}
	if err := q.Ack(ctx, "t", "a", again[0].Receipt); err != nil {
		t.Fatalf("ack with the current receipt: %v", err)
	}
}

func TestCancelledIsNeverReleased(t *testing.T) {
	q := delayqtest.NewQueue(t)
	send(t, q, "t", "a", delay(time.Hour))
	send(t, q, "t", "b", delay(time.Hour))
	if _, err := q.Cancel(ctx, "t", "a"); err != nil {
		t.Fatal(err)
	}
	q.Advance(2 * time.Hour)
	if got := leaseNow(t, q, "t", 0); !slices.Equal(ids(got), []string{"b"}) {
		t.Fatalf("leased %v, want [b] (a was cancelled)", ids(got))
	}
	if _, err := q.Get(ctx, "t", "a"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("get the cancelled message: %v, want ErrNotFound", err)
	}
}

func TestWorkAcksNacksAndRecoversPanics(t *testing.T) {
	q := delayqtest.NewQueue(t)
	for _, id := range []string{"ok", "fail", "panic"} {
		send(t, q, "t", id)
	}
	send(t, q, "t", "later", delay(time.Minute))
	var followUps int
	h := delayq.HandlerFunc(func(ctx context.Context, m *delayq.Message) error {
		// A message the handler sends is not handled by the same Work.
		followUps++
		send(t, q, "t", fmt.Sprintf("follow-up-%d", followUps))
		switch m.ID {
		case "fail":
			return errors.New("boom")
		case "panic":
			panic("kaboom")
		}
		return nil
	})
	res := q.Work(ctx, "t", h)
	got := map[string]string{}
	for _, r := range res {
		got[r.Message.ID] = fmt.Sprint(r.Err)
	}
	want := map[string]string{"ok": "<nil>", "fail": "boom", "panic": "panic: kaboom"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Work handled %v, want %v", got, want)
	}
	for id, st := range map[string]delayq.State{"ok": delayq.StateAcked, "fail": delayq.StateScheduled, "panic": delayq.StateScheduled, "later": delayq.StateScheduled} {
		if s := state(t, q, "t", id); s != st {
			t.Fatalf("%s is %s, want %s", id, s, st)
		}
	}
	if m, _ := q.Get(ctx, "t", "panic"); m.LastError != "panic: kaboom" {
		t.Fatalf("the panicked message's last error is %q", m.LastError)
	}
	if res := q.Work(ctx, "t", delayq.HandlerFunc(func(context.Context, *delayq.Message) error { return nil })); len(res) != 3 {
		t.Fatalf("the next Work handled %d messages, want the 3 follow-ups", len(res))
	}
	if res := q.Work(ctx, "t", h); len(res) != 0 {
		t.Fatalf("with nothing ready Work handled %d messages", len(res))
	}
}

func TestWithTopicDefaults(t *testing.T) {
	q := delayqtest.NewQueue(t, delayqtest.WithTopicDefaults(delayq.TopicSettings{MaxAttempts: 1}))
	send(t, q, "t", "a")
	res := q.Work(ctx, "t", delayq.HandlerFunc(func(context.Context, *delayq.Message) error { return errors.New("no") }))
	if len(res) != 1 {
		t.Fatalf("Work handled %d messages", len(res))
	}
	if s := state(t, q, "t", "a"); s != delayq.StateDead {
		t.Fatalf("after its only attempt failed: %s, want dead", s)
	}
}

// A schedule ticks on the queue's clock; a jump over several ticks sends
// the latest one only.
func TestScheduleTicksOnAdvance(t *testing.T) {
	q := delayqtest.NewQueue(t, delayqtest.WithStart(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)))
	if _, err := q.ScheduleSet(ctx, delayq.Schedule{Name: "report", Topic: "reports", Cron: "@every 1m", Payload: []byte("r")}); err != nil {
		t.Fatal(err)
	}
	q.Advance(59 * time.Second)
	if got := leaseNow(t, q, "reports", 0); len(got) != 0 {
		t.Fatalf("before the first tick leased %v", ids(got))
	}
	q.Advance(time.Second)
	if got := take(t, q, "reports"); len(got) != 1 {
		t.Fatalf("at the first tick leased %v, want one message", ids(got))
	}
	q.Advance(10 * time.Minute)
	if got := take(t, q, "reports"); len(got) != 1 {
		t.Fatalf("after ten ticks in one jump leased %v, want one message (the latest tick)", ids(got))
	}
}

// A long-poll waiting when the clock moves is woken by Advance.
func TestAdvanceWakesLongPoll(t *testing.T) {
	q := delayqtest.NewQueue(t)
	send(t, q, "t", "a", delay(time.Hour))
	got := make(chan []*delayq.Message, 1)
	go func() {
		ms, _ := q.Lease(ctx, "t", delayq.LeaseRequest{Wait: 10 * time.Second})
		got <- ms
	}()
	q.Advance(time.Hour)
	if ms := <-got; !slices.Equal(ids(ms), []string{"a"}) {
		t.Fatalf("the long-poll got %v, want [a]", ids(ms))
	}
}

// Producers, consumers and Advance at once (for the race detector): every
// message is handled exactly once, never before it is due.
func TestConcurrentUse(t *testing.T) {
	q := delayqtest.NewQueue(t)
	const producers, perProducer, consumers = 4, 50, 3
	var mu sync.Mutex
	handled := map[string]int{}
	early := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Longer than all the Advances below (1 h 5 min): a lease
				// still unacked when the clock jumps must not expire, or
				// its message is rightly handed out again.
				ms, err := q.Lease(ctx, "t", delayq.LeaseRequest{Max: 10, Lease: 2 * time.Hour, Wait: 20 * time.Millisecond})
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				for _, m := range ms {
					now := q.Now()
					mu.Lock()
					handled[m.ID]++
					if m.DeliverAt.After(now) {
						early++
					}
					mu.Unlock()
					if err := q.Ack(ctx, "t", m.ID, m.Receipt); err != nil {
						t.Errorf("ack %s: %v", m.ID, err)
					}
				}
			}
		})
	}
	var prod sync.WaitGroup
	for p := range producers {
		prod.Go(func() {
			for i := range perProducer {
				d := time.Duration(rand.IntN(600)) * time.Second
				if _, err := q.Send(ctx, "t", delayq.NewSendRequest(nil, delayq.After(d), delayq.WithID(fmt.Sprintf("p%d-%d", p, i)))); err != nil {
					t.Errorf("send: %v", err)
				}
			}
		})
	}
	for range 10 {
		q.Advance(30 * time.Second)
	}
	prod.Wait()
	q.Advance(time.Hour) // past every due time
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		if n == producers*perProducer || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if len(handled) != producers*perProducer {
		t.Fatalf("handled %d of %d messages", len(handled), producers*perProducer)
	}
	for id, n := range handled {
		if n != 1 {
			t.Fatalf("%s handled %d times", id, n)
		}
	}
	if early != 0 {
		t.Fatalf("%d messages were leased before their due time", early)
	}
}

func TestClosedWhenTheTestEnds(t *testing.T) {
	var q *delayqtest.Queue
	t.Run("user", func(t *testing.T) {
		q = delayqtest.NewQueue(t)
		send(t, q, "t", "a")
	})
	if _, err := q.Send(ctx, "t", delayq.NewSendRequest(nil)); !errors.Is(err, delayq.ErrUnavailable) {
		t.Fatalf("send after the test ended: %v, want ErrUnavailable", err)
	}
}

// An acked id dedups sends for the dedup window (24 h), on the queue's
// clock.
func TestDedupWindowEndsOnAdvance(t *testing.T) {
	q := delayqtest.NewQueue(t)
	send(t, q, "t", "a")
	if got := take(t, q, "t"); len(got) != 1 {
		t.Fatalf("leased %v", ids(got))
	}
	q.Advance(24*time.Hour - time.Millisecond)
	if m := send(t, q, "t", "a"); !m.Duplicate {
		t.Fatalf("a send within the dedup window was not a duplicate: %+v", m)
	}
	q.Advance(time.Millisecond)
	if m := send(t, q, "t", "a"); m.Duplicate || m.State != delayq.StateReady {
		t.Fatalf("a send after the dedup window: duplicate=%v state=%s, want a new ready message", m.Duplicate, m.State)
	}
}
