package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

// offsetClock is the real clock (fake inside a synctest bubble) shifted by
// an adjustable offset, to simulate wall-clock steps.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (c *offsetClock) Step(d time.Duration) { c.off.Add(int64(d)) }

type bundle struct {
	e   *engine.Engine
	clk *offsetClock
	ctx context.Context
}

// setup opens an engine on a fresh memstore; call it inside synctest.Test.
func setup(t *testing.T, cfg engine.Config) *bundle {
	t.Helper()
	clk := &offsetClock{}
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	cfg.Clock = clk
	e, err := engine.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return &bundle{e: e, clk: clk, ctx: context.Background()}
}

func send(t *testing.T, b *bundle, topic, id string, delay time.Duration) *domain.Message {
	t.Helper()
	m, err := b.e.Send(b.ctx, topic, domain.SendRequest{ID: id, Payload: []byte("p-" + id), When: domain.When{Delay: delay}})
	if err != nil {
		t.Fatalf("send %s: %v", id, err)
	}
	return m
}

func lease(t *testing.T, b *bundle, topic string, max int, wait time.Duration) []*domain.Message {
	t.Helper()
	ms, err := b.e.Lease(b.ctx, topic, domain.LeaseRequest{Max: max, Wait: wait, Lease: 10 * time.Second})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	return ms
}

func ids(ms []*domain.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func TestNeverEarlyAndOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		m := send(t, b, "orders", "o1", 30*time.Minute)
		if m.State != domain.StateScheduled {
			t.Fatalf("state = %s, want scheduled", m.State)
		}
		if got := lease(t, b, "orders", 10, 0); len(got) != 0 {
			t.Fatalf("leased %v before due", ids(got))
		}
		// Long-poll across the due time: it must return the message, and
		// not before its due time.
		start := time.Now()
		var got []*domain.Message
		for len(got) == 0 {
			got = lease(t, b, "orders", 10, 30*time.Second)
		}
		if now := time.Now(); now.Before(m.DeliverAt) {
			t.Fatalf("delivered at %v, before due %v", now, m.DeliverAt)
		}
		if el := time.Since(start); el < 30*time.Minute-time.Millisecond {
			t.Fatalf("delivered after %v, want ≥ 30m", el)
		}
		if got[0].ID != "o1" || got[0].Attempt != 1 || got[0].Receipt == "" || string(got[0].Payload) != "p-o1" {
			t.Fatalf("got %+v", got[0])
		}
	})
}

func TestOrderByDueThenSendOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		send(t, b, "t", "c", 3*time.Second)
		send(t, b, "t", "a1", time.Second)
		send(t, b, "t", "b", 2*time.Second)
		send(t, b, "t", "a2", time.Second)
		time.Sleep(5 * time.Second)
		got := ids(lease(t, b, "t", 10, 0))
		want := []string{"a1", "a2", "b", "c"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("order %v, want %v", got, want)
		}
	})
}

func TestLongPollWakesOnSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		done := make(chan []*domain.Message)
		go func() { done <- lease(t, b, "t", 1, 20*time.Second) }()
		synctest.Wait() // the long-poll is parked
		sent := time.Now()
		send(t, b, "t", "now", 0)
		got := <-done
		if len(got) != 1 || got[0].ID != "now" {
			t.Fatalf("got %v", ids(got))
		}
		if el := time.Since(sent); el != 0 {
			t.Fatalf("woke %v after the send, want at once", el)
		}
	})
}

func TestIdempotentSendAndDedupWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{DedupWindow: time.Hour})
		first := send(t, b, "t", "x", 0)
		dup := send(t, b, "t", "x", time.Hour)
		if !dup.Duplicate || !dup.DeliverAt.Equal(first.DeliverAt) {
			t.Fatalf("second send = %+v, want the first as duplicate", dup)
		}
		m := lease(t, b, "t", 1, 0)[0]
		if err := b.e.Ack(b.ctx, "t", "x", m.Receipt); err != nil {
			t.Fatal(err)
		}
		if again := send(t, b, "t", "x", 0); !again.Duplicate || again.State != domain.StateAcked {
			t.Fatalf("send after ack within window = %+v, want duplicate acked", again)
		}
		time.Sleep(time.Hour + 2*time.Minute) // past the window and a janitor run
		if fresh := send(t, b, "t", "x", 0); fresh.Duplicate {
			t.Fatalf("send after window is a duplicate")
		}
	})
}

func TestLeaseExpiryRedeliversAndFencesStaleReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		send(t, b, "t", "m", 0)
		first, err := b.e.Lease(b.ctx, "t", domain.LeaseRequest{Lease: time.Second})
		if err != nil || len(first) != 1 {
			t.Fatalf("lease: %v %v", first, err)
		}
		second, err := b.e.Lease(b.ctx, "t", domain.LeaseRequest{Wait: 5 * time.Second, Lease: time.Minute})
		if err != nil || len(second) != 1 {
			t.Fatalf("re-lease after expiry: %v %v", second, err)
		}
		if second[0].Receipt == first[0].Receipt || second[0].Attempt != 2 || second[0].Failures != 1 {
			t.Fatalf("redelivery = %+v", second[0])
		}
		if err := b.e.Ack(b.ctx, "t", "m", first[0].Receipt); !errors.Is(err, domain.ErrConflict) {
			t.Fatalf("stale ack err = %v, want ErrConflict", err)
		}
		if _, err := b.e.Extend(b.ctx, "t", "m", first[0].Receipt, time.Minute); !errors.Is(err, domain.ErrConflict) {
			t.Fatalf("stale extend err = %v, want ErrConflict", err)
		}
		if err := b.e.Ack(b.ctx, "t", "m", second[0].Receipt); err != nil {
			t.Fatalf("current ack: %v", err)
		}
	})
}

func TestNackBackoffThenDeadAndReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		_, err := b.e.SetTopicSettings(b.ctx, "t", domain.TopicSettings{MaxAttempts: 3,
			Backoff: domain.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.0001}})
		if err != nil {
			t.Fatal(err)
		}
		send(t, b, "t", "p", 0)
		wantDelay := []time.Duration{time.Second, 2 * time.Second}
		for i := 0; i < 3; i++ {
			m := lease(t, b, "t", 1, 30*time.Second)
			if len(m) != 1 {
				t.Fatalf("attempt %d: no delivery", i+1)
			}
			at := time.Now()
			n, err := b.e.Nack(b.ctx, "t", "p", m[0].Receipt, domain.NackRequest{Reason: fmt.Sprintf("boom %d", i+1)})
			if err != nil {
				t.Fatal(err)
			}
			if i < 2 {
				d := n.DeliverAt.Sub(at)
				if n.State != domain.StateScheduled || d < wantDelay[i] || d > wantDelay[i]+time.Millisecond+wantDelay[i]/1000 {
					t.Fatalf("after nack %d: state %s, retry in %v, want %v", i+1, n.State, d, wantDelay[i])
				}
			} else if n.State != domain.StateDead || n.Failures != 3 || n.LastError != "boom 3" {
				t.Fatalf("after last nack: %+v", n)
			}
		}
		page, err := b.e.DeadList(b.ctx, "t", domain.DeadListRequest{})
		if err != nil || len(page.Messages) != 1 || page.Messages[0].ID != "p" {
			t.Fatalf("dead list = %+v, %v", page, err)
		}
		if _, err := b.e.DeadReplay(b.ctx, "t", "p"); err != nil {
			t.Fatal(err)
		}
		m := lease(t, b, "t", 1, 0)
		if len(m) != 1 || m[0].Failures != 0 {
			t.Fatalf("after replay: %v", m)
		}
	})
}

func TestClockStepBackNeverEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		m := send(t, b, "t", "m", 10*time.Second)
		b.clk.Step(-time.Hour)
		time.Sleep(20 * time.Second) // by the stepped clock, m is due in ~59m40s
		got := lease(t, b, "t", 1, 0)
		// Engine time held at the pre-step reading plus nothing: the wall
		// clock is now 59m40s behind it, so m must not be handed out early
		// by the engine's own (non-decreasing) time — and it is not due
		// by it either.
		if len(got) != 0 {
			t.Fatalf("delivered %v although engine time has not reached %v", ids(got), m.DeliverAt)
		}
		b.clk.Step(time.Hour)
		if got := lease(t, b, "t", 1, 2*time.Second); len(got) != 1 {
			t.Fatalf("not delivered within 2s after the clock caught up")
		}
	})
}

func TestCancelAndReschedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		send(t, b, "t", "c", time.Hour)
		send(t, b, "t", "r", time.Hour)
		c, err := b.e.Cancel(b.ctx, "t", "c")
		if err != nil || c.State != domain.StateScheduled {
			t.Fatalf("cancel: %+v %v", c, err)
		}
		if _, err := b.e.Get(b.ctx, "t", "c"); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("get after cancel: %v", err)
		}
		r, err := b.e.Reschedule(b.ctx, "t", "r", domain.When{Delay: time.Second})
		if err != nil || r.State != domain.StateScheduled {
			t.Fatalf("reschedule: %+v %v", r, err)
		}
		got := lease(t, b, "t", 1, 5*time.Second)
		if len(got) != 1 || got[0].ID != "r" {
			t.Fatalf("rescheduled message not delivered: %v", ids(got))
		}
		if _, err := b.e.Reschedule(b.ctx, "t", "r", domain.When{Delay: time.Second}); !errors.Is(err, domain.ErrConflict) {
			t.Fatalf("reschedule inflight: %v, want conflict", err)
		}
	})
}

func TestInvalidInputNamesTheField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{MaxPayload: 10, MaxDelay: time.Hour})
		cases := []struct {
			topic string
			req   domain.SendRequest
			field string
			is    error
		}{
			{"bad topic", domain.SendRequest{}, "topic", domain.ErrInvalid},
			{"t", domain.SendRequest{ID: "a{b}"}, "id", domain.ErrInvalid},
			{"t", domain.SendRequest{When: domain.When{Delay: -time.Second}}, "delay", domain.ErrInvalid},
			{"t", domain.SendRequest{When: domain.When{Delay: 2 * time.Hour}}, "delay", domain.ErrInvalid},
			{"t", domain.SendRequest{When: domain.When{Delay: time.Second, DeliverAt: time.Now()}}, "delay", domain.ErrInvalid},
			{"t", domain.SendRequest{When: domain.When{DeliverAt: time.Now().Add(2 * time.Hour)}}, "deliver_at", domain.ErrInvalid},
			{"t", domain.SendRequest{MaxAttempts: -1}, "max_attempts", domain.ErrInvalid},
			{"t", domain.SendRequest{Payload: make([]byte, 11)}, "", domain.ErrTooLarge},
		}
		for _, c := range cases {
			_, err := b.e.Send(b.ctx, c.topic, c.req)
			if !errors.Is(err, c.is) {
				t.Errorf("%q %+v: err %v, want %v", c.topic, c.req.When, err, c.is)
				continue
			}
			var ie *domain.InvalidError
			if c.field != "" && (!errors.As(err, &ie) || ie.Field != c.field) {
				t.Errorf("%+v: err %v does not name field %q", c.req.When, err, c.field)
			}
		}
		topics, err := b.e.Topics(b.ctx)
		if err != nil || len(topics) != 0 {
			t.Fatalf("rejected sends left topics %v (%v)", topics, err)
		}
	})
}

func TestBurstReleasedAndCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		const n = 5000 // several promotion batches due in the same millisecond
		reqs := make([]domain.SendRequest, 1000)
		for k := 0; k < n/1000; k++ {
			for i := range reqs {
				reqs[i] = domain.SendRequest{ID: fmt.Sprintf("m%05d", k*1000+i), Payload: []byte("x"), When: domain.When{Delay: time.Second}}
			}
			if _, err := b.e.SendBatch(b.ctx, "t", reqs); err != nil {
				t.Fatal(err)
			}
		}
		info, _ := b.e.Topic(b.ctx, "t")
		if info.Counts.Scheduled != n {
			t.Fatalf("scheduled = %d, want %d", info.Counts.Scheduled, n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		info, _ = b.e.Topic(b.ctx, "t")
		if info.Counts.Ready != n || info.Counts.Scheduled != 0 {
			t.Fatalf("after due: %+v, want all %d ready", info.Counts, n)
		}
		got := 0
		for got < n {
			got += len(lease(t, b, "t", 1000, 0))
		}
		info, _ = b.e.Topic(b.ctx, "t")
		if info.Counts.Inflight != n || info.Counts.Ready != 0 {
			t.Fatalf("after lease: %+v", info.Counts)
		}
	})
}

func TestRecoveryReleasesWhatCameDueWhileDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		b := setup(t, engine.Config{Store: st})
		send(t, b, "t", "m", time.Minute)
		if err := b.e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Minute) // "down"
		b2 := setup(t, engine.Config{Store: st})
		if got := lease(t, b2, "t", 1, time.Second); len(got) != 1 {
			t.Fatalf("message that came due while down not delivered after restart")
		}
	})
}

func TestCloseWakesLongPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		errc := make(chan error)
		go func() {
			_, err := b.e.Lease(b.ctx, "t", domain.LeaseRequest{Wait: 30 * time.Second})
			errc <- err
		}()
		synctest.Wait()
		_ = b.e.Close(context.Background())
		if err := <-errc; !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("long-poll after close: %v", err)
		}
	})
}

func TestDueCountsForUpcomingChart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		for i, d := range []time.Duration{30 * time.Second, 90 * time.Second, 100 * time.Second, 2 * time.Hour} {
			send(t, b, "t", fmt.Sprint("m", i), d)
		}
		got, err := b.e.DueCounts(b.ctx, "t", time.Now(), time.Minute, 3)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[1 2 0]" {
			t.Fatalf("per-minute counts %v, want [1 2 0]", got)
		}
		if _, err := b.e.DueCounts(b.ctx, "t", time.Now(), 0, 3); !errors.Is(err, domain.ErrInvalid) {
			t.Fatalf("zero bucket: %v, want ErrInvalid", err)
		}
	})
}
