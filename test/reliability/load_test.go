package reliability

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// loadConfig shapes the producer/consumer load shared by S1, S14 and S28.
type loadConfig struct {
	Topic       string        `json:"topic"`
	Messages    int           `json:"messages"`
	Producers   int           `json:"producers"`
	Consumers   int           `json:"consumers"`
	MaxDelay    time.Duration `json:"-"`
	MaxDelayMS  int64         `json:"max_delay_ms"`
	Lease       time.Duration `json:"-"`
	LeaseMS     int64         `json:"lease_ms"`
	MaxWork     time.Duration `json:"-"`
	MaxWorkMS   int64         `json:"max_work_ms"`
	SendSpan    time.Duration `json:"-"` // sends are paced over this span
	SendSpanMS  int64         `json:"send_span_ms"`
	LeaseMax    int           `json:"lease_max"`
	MaxAttempts int           `json:"max_attempts,omitempty"`
}

func (c *loadConfig) fill() {
	c.MaxDelayMS, c.LeaseMS, c.MaxWorkMS, c.SendSpanMS = c.MaxDelay.Milliseconds(), c.Lease.Milliseconds(), c.MaxWork.Milliseconds(), c.SendSpan.Milliseconds()
}

// delivery is one lease of one message as a consumer saw it.
type delivery struct {
	id, receipt string
	leaseInvoke time.Duration
	ackOK       time.Duration // completion of the ok ack; -1 while none
	ackInfo     bool          // the last ack attempt ended info
	ackRejected bool          // 409/404: the lease was gone
	nacked      bool
}

// load runs producers and consumers against one server address through
// kills and restarts, recording everything.
type load struct {
	t   *testing.T
	cfg loadConfig
	c   *delayq.Client
	rec *history.Recorder
	rng *lockedRand

	// handle decides what a consumer does with a message: ack (true) or
	// nack (false). Default: ack.
	handle func(m *delayq.Message) bool
	// hold, when it returns true, makes the consumer keep the lease and
	// never answer (S28's consumers caught by the shutdown).
	hold func(m *delayq.Message) bool

	mu         sync.Mutex
	deliveries []*delivery
	firstSeen  map[string]bool
	sentOK     map[string]bool
	nackResp   []*delayq.Message // answers of ok nacks
	sendErrs   []string

	sendsDone    atomic.Bool
	sendStart    time.Time
	sendEnd      time.Time
	consumersWG  sync.WaitGroup
	workWG       sync.WaitGroup
	stopConsumer context.CancelFunc
}

func newLoad(t *testing.T, cfg loadConfig, c *delayq.Client, s uint64) *load {
	cfg.fill()
	return &load{t: t, cfg: cfg, c: c, rec: history.NewRecorder(), rng: newRand(s),
		firstSeen: map[string]bool{}, sentOK: map[string]bool{}}
}

func msgID(w, k int) string { return "p" + strconv.Itoa(w) + "-" + strconv.Itoa(k) }

func parseMsgID(id string) (string, int, bool) {
	w, n, ok := strings.Cut(id, "-")
	k, err := strconv.Atoi(n)
	return w, k, ok && err == nil
}

// produce sends cfg.Messages messages from cfg.Producers writers, each
// retrying a failed send with the same id until it is answered ok. It
// returns when all are sent.
func (l *load) produce(ctx context.Context) {
	per := l.cfg.Messages / l.cfg.Producers
	interval := l.cfg.SendSpan / time.Duration(max(per, 1))
	l.sendStart = time.Now()
	var wg sync.WaitGroup
	for w := 0; w < l.cfg.Producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per && ctx.Err() == nil; k++ {
				if next := l.sendStart.Add(time.Duration(k) * interval); time.Until(next) > 0 {
					sleepCtx(ctx, time.Until(next))
				}
				l.sendOne(ctx, msgID(w, k), l.rng.Dur(0, l.cfg.MaxDelay))
			}
		}()
	}
	wg.Wait()
	l.sendEnd = time.Now()
	l.sendsDone.Store(true)
}

func (l *load) sendOne(ctx context.Context, id string, delay time.Duration) {
	req := delayq.SendRequest{ID: id, Payload: []byte(id), When: delayq.When{Delay: delay}, MaxAttempts: l.cfg.MaxAttempts}
	for ctx.Err() == nil {
		p := l.rec.Invoke(history.Send, id).WithDelay(delay)
		m, err := l.c.Send(ctx, l.cfg.Topic, req)
		o := outcome(err)
		if o == history.OK {
			p.WithDue(m.DeliverAt)
		}
		finish(p, o)
		if o == history.OK {
			l.mu.Lock()
			l.sentOK[id] = true
			l.mu.Unlock()
			return
		}
		var ae *delayq.APIError
		if errors.As(err, &ae) && ae.StatusCode < 500 {
			l.mu.Lock()
			l.sendErrs = append(l.sendErrs, fmt.Sprintf("%s: %v", id, err))
			l.mu.Unlock()
			return
		}
		sleepCtx(ctx, l.rng.Dur(20*time.Millisecond, 60*time.Millisecond))
	}
}

// consume starts cfg.Consumers consumers; stopConsumers ends them.
func (l *load) consume() {
	ctx, cancel := context.WithCancel(context.Background())
	l.stopConsumer = cancel
	for i := 0; i < l.cfg.Consumers; i++ {
		l.consumersWG.Add(1)
		go func() {
			defer l.consumersWG.Done()
			for ctx.Err() == nil {
				inv := l.rec.Now()
				msgs, err := l.c.Lease(ctx, l.cfg.Topic, delayq.LeaseRequest{Max: l.cfg.LeaseMax, Wait: time.Second})
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				got := l.rec.Now()
				for _, m := range msgs {
					l.rec.Record(history.Op{Kind: history.Lease, ID: m.ID, Outcome: history.OK, Invoke: inv, Complete: got, DueAt: m.DeliverAt, At: m.UpdatedAt})
					d := &delivery{id: m.ID, receipt: m.Receipt, leaseInvoke: inv, ackOK: -1}
					l.mu.Lock()
					l.deliveries = append(l.deliveries, d)
					l.firstSeen[m.ID] = true
					l.mu.Unlock()
					if l.hold != nil && l.hold(m) {
						continue
					}
					l.workWG.Add(1)
					go l.work(ctx, m, d)
				}
			}
		}()
	}
}

// work simulates 0..MaxWork of processing, then acks (or nacks), retrying
// an ack whose outcome is unknown or whose server is down until the
// lease would have expired.
func (l *load) work(ctx context.Context, m *delayq.Message, d *delivery) {
	defer l.workWG.Done()
	sleepCtx(ctx, l.rng.Dur(0, l.cfg.MaxWork))
	ack := l.handle == nil || l.handle(m)
	deadline := time.Now().Add(l.cfg.Lease)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		var err error
		if ack {
			p := l.rec.Invoke(history.Ack, m.ID)
			err = l.c.Ack(ctx, l.cfg.Topic, m.ID, m.Receipt)
			finish(p, outcome(err))
		} else {
			p := l.rec.Invoke(history.Nack, m.ID)
			var nm *delayq.Message
			nm, err = l.c.Nack(ctx, l.cfg.Topic, m.ID, m.Receipt, delayq.NackRequest{Reason: "poison"})
			finish(p, outcome(err))
			if err == nil {
				l.mu.Lock()
				l.nackResp = append(l.nackResp, nm)
				l.mu.Unlock()
			}
		}
		o := outcome(err)
		l.mu.Lock()
		switch o {
		case history.OK:
			if ack {
				d.ackOK = l.rec.Now()
			} else {
				d.nacked = true
			}
			d.ackInfo = false
		case history.Fail:
			var ae *delayq.APIError
			if errors.As(err, &ae) {
				d.ackRejected, d.ackInfo = true, false
			}
		default:
			d.ackInfo = true
		}
		l.mu.Unlock()
		if o == history.OK || d.ackRejected {
			return
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func (l *load) stopConsumers() {
	l.stopConsumer()
	l.consumersWG.Wait()
	l.workWG.Wait()
}

// drain waits until every id sent ok was delivered at least once (or
// dead-lettered, per isDead), or until limit.
func (l *load) drain(limit time.Duration, isDead func(id string) bool) (missing int) {
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		missing = 0
		for id := range l.sentOK {
			if !l.firstSeen[id] && (isDead == nil || !isDead(id)) {
				missing++
			}
		}
		l.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return missing
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outstandingAt counts deliveries leased before t and not acked (ok),
// nacked or rejected by then: the duplicates a crash at t may cause.
func (l *load) outstandingAt(t time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.deliveries {
		// Rejected acks are counted once, by ackUncertain.
		if d.leaseInvoke < t && (d.ackOK < 0 || d.ackOK > t) && !d.nacked && !d.ackRejected {
			n++
		}
	}
	return n
}

// ackUncertain counts deliveries whose ack never ended ok: the last
// attempt was info, or the server rejected it (the lease had expired).
func (l *load) ackUncertain() (info, rejected int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range l.deliveries {
		if d.ackOK >= 0 || d.nacked {
			continue
		}
		if d.ackInfo {
			info++
		}
		if d.ackRejected {
			rejected++
		}
	}
	return info, rejected
}

// checkJSON is the checker's verdict in results files.
type checkJSON struct {
	Sends            int         `json:"send_attempts"`
	AckedSends       int         `json:"acked_sends"`
	InfoSends        int         `json:"info_sends"`
	Delivered        int         `json:"delivered_ids"`
	Deliveries       int         `json:"deliveries"`
	Lost             int         `json:"lost"`
	LostPrefix       int         `json:"lost_prefix"`
	LostMiddle       int         `json:"lost_middle"`
	LostPostfix      int         `json:"lost_postfix"`
	LostIDs          []string    `json:"lost_ids,omitempty"`
	Unexpected       int         `json:"unexpected"`
	Duplicated       int         `json:"duplicated"`
	DupBound         int         `json:"dup_bound"`
	DupRatePct       float64     `json:"dup_rate_pct"`
	Recovered        int         `json:"recovered"`
	Early            int         `json:"early"`
	EarlyIDs         []string    `json:"early_ids,omitempty"`
	EarlyClient      int         `json:"early_by_client_clock"`
	Resurrected      int         `json:"resurrected"`
	ResurrectedIDs   []string    `json:"resurrected_ids,omitempty"`
	SlowAfterRestart int         `json:"slow_after_restart"`
	SlowIDs          []string    `json:"slow_after_restart_ids,omitempty"`
	Steady           latencyJSON `json:"lateness_steady"`
	CameDueWhileDown latencyJSON `json:"lateness_came_due_while_down"`
	Valid            bool        `json:"valid"`
}

func first(xs []string, n int) []string { return xs[:min(len(xs), n)] }

func toCheckJSON(r *history.Result, deliveries int) checkJSON {
	p, m, q := r.LostSplit(parseMsgID)
	c := checkJSON{
		Sends: r.Sends, AckedSends: r.Acked, InfoSends: r.InfoSends, Delivered: r.Delivered, Deliveries: deliveries,
		Lost: len(r.Lost), LostPrefix: p, LostMiddle: m, LostPostfix: q, LostIDs: first(r.Lost, 20),
		Unexpected: len(r.Unexpected), Duplicated: r.Duplicated, DupBound: r.DupBound, Recovered: r.Recovered,
		Early: len(r.Early), EarlyIDs: first(r.Early, 20), EarlyClient: len(r.EarlyClient), Resurrected: len(r.Resurrected), ResurrectedIDs: first(r.Resurrected, 20),
		SlowAfterRestart: len(r.SlowAfterRestart), SlowIDs: first(r.SlowAfterRestart, 20),
		Steady: latJSON(r.Steady), CameDueWhileDown: latJSON(r.CameDueWhileDown), Valid: r.Valid(),
	}
	if r.Delivered > 0 {
		c.DupRatePct = 100 * float64(r.Duplicated) / float64(r.Delivered)
	}
	return c
}

// logOpsOf logs the recorded operations on the given ids (to explain a
// checker finding).
func logOpsOf(t *testing.T, rec *history.Recorder, ids []string) {
	if len(ids) == 0 {
		return
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for _, op := range rec.Ops() {
		if want[op.ID] {
			t.Logf("%s %s %s invoke=%v complete=%v delay=%v due=%s at=%s", op.ID, op.Kind, op.Outcome, op.Invoke, op.Complete, op.Delay,
				op.DueAt.Format("15:04:05.000"), op.At.Format("15:04:05.000"))
		}
	}
	for _, w := range rec.Downtime() {
		t.Logf("down %v .. %v (wall %s .. %s)", w.From, w.To, rec.Wall(w.From).Format("15:04:05.000"), rec.Wall(w.To).Format("15:04:05.000"))
	}
}
