package reliability

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

type failoverResults struct {
	Scenario         string     `json:"scenario"`
	Tier             string     `json:"tier"`
	Seed             uint64     `json:"seed"`
	Date             string     `json:"date"`
	Mode             string     `json:"mode"`
	Config           loadConfig `json:"config"`
	Check            checkJSON  `json:"check"`
	LostAfterFail    int        `json:"lost_after_failover"`
	AckInfo          int        `json:"acks_info"`
	AckRejected      int        `json:"acks_rejected_409"`
	FailoverMS       float64    `json:"failover_ms"`    // fault → replica is master and the proxy points at it
	UnavailableMS    float64    `json:"unavailable_ms"` // fault → first ok probe send
	ReplOffsetBehind int64      `json:"repl_offset_behind_at_kill"`
	DrainMissing     int        `json:"drain_missing"`
	DurationS        float64    `json:"duration_s"`
}

// TestS8RedisReplicaFailover: delayq reaches Redis through a proxy (a
// virtual IP); Redis has one replica (replicaof). Under S1-style load
// the primary is replaced by the replica, and the proxy is switched to
// it, as an operator or a VIP failover would:
//
//   - coordinated: FAILOVER on the primary (writes pause until the
//     replica has caught up, then roles swap). Pass: the checker passes
//     (lost 0).
//   - kill: kill -9 the primary, REPLICAOF NO ONE on the replica.
//     Replication is asynchronous, so writes acknowledged by the old
//     primary and not yet replicated are lost: measured and reported as
//     lost_after_failover (and acks lost as resurrected), not asserted.
//     Pass: unexpected 0, early 0.
//
// Sentinel itself is not exercised: `delayq serve --redis` takes a
// redis:// URL, and a Sentinel client is only reachable through the Go
// API (redisstore.Options.Client).
func TestS8RedisReplicaFailover(t *testing.T) {
	for _, mode := range []string{"coordinated", "kill"} {
		t.Run(mode, func(t *testing.T) { runFailover(t, mode) })
	}
}

func runFailover(t *testing.T, mode string) {
	s := seed(t)
	t.Logf("tier %s seed %d mode %s", tier(), s, mode)
	primary := startRedis(t, "always")
	replica := startRedis(t, "always", "--replicaof", "127.0.0.1", strings.TrimPrefix(primary.Addr(), "127.0.0.1:"))
	pc, rc := rdb(t, primary.Addr()), rdb(t, replica.Addr())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, ok := waitUntil(15*time.Second, func() bool {
		v, _ := infoField(ctx, rc, "replication", "master_link_status")
		return v == "up"
	}); !ok {
		t.Fatal("replica never linked to the primary")
	}
	px := newFaultProxy(t, primary.Addr())
	p := newRedisProc(t, px.URL(), "--default-lease", "3s", "--default-max-attempts", "1000")
	p.start()

	cfg := loadConfig{
		Topic: "s8", Messages: pick(1200, 10_000), Producers: 4, Consumers: 4,
		MaxDelay: 3 * time.Second, Lease: 3 * time.Second, MaxWork: 20 * time.Millisecond,
		SendSpan: pick(4*time.Second, 20*time.Second), LeaseMax: 16,
	}
	l := newLoad(t, cfg, client(t, p.url(), 10*time.Second), s)
	t0 := time.Now()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()
	sleepCtx(ctx, cfg.SendSpan/2)

	faultAt := l.rec.Now()
	var behind int64
	switch mode {
	case "coordinated":
		if err := pc.Do(ctx, "FAILOVER", "TIMEOUT", "5000").Err(); err != nil {
			t.Fatalf("FAILOVER: %v", err)
		}
	case "kill":
		// Replica first: the primary's offset read after it is ≥ it.
		ro, _ := infoField(ctx, rc, "replication", "slave_repl_offset")
		po, _ := infoField(ctx, pc, "replication", "master_repl_offset")
		a, _ := strconv.ParseInt(po, 10, 64)
		b, _ := strconv.ParseInt(ro, 10, 64)
		behind = a - b // a moment before the kill: indicative only
		primary.Kill()
		if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			t.Fatalf("REPLICAOF NO ONE: %v", err)
		}
	}
	if _, ok := waitUntil(10*time.Second, func() bool {
		v, _ := infoField(ctx, rc, "replication", "role")
		return v == "master"
	}); !ok {
		t.Fatal("the replica did not become master")
	}
	px.setTarget(replica.Addr())
	switched := l.rec.Now()
	// Unavailability as a producer sees it: fault → first ok send.
	probe := client(t, p.url(), 5*time.Second)
	var upAt time.Duration
	for i := 0; ; i++ {
		if _, err := probe.Send(ctx, "probe", delayq.SendRequest{ID: "f" + strconv.Itoa(i), Payload: []byte("x")}); err == nil {
			upAt = l.rec.Now()
			break
		}
		if l.rec.Now()-faultAt > 30*time.Second {
			t.Fatalf("no send succeeded within 30 s of the failover")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.rec.Down(faultAt, upAt)
	t.Logf("%s failover: replica master and proxy switched after %v; first ok send after %v", mode, (switched - faultAt).Round(time.Millisecond), (upAt - faultAt).Round(time.Millisecond))

	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+20*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second)
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: l.outstandingAt(faultAt) + info + rejected, Slack: 2 * time.Millisecond})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, first(append(res.Lost, res.Early...), 3))
	out := failoverResults{
		Scenario: "S8 redis replica failover", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Mode: mode,
		Config: l.cfg, Check: toCheckJSON(res, len(l.deliveries)), LostAfterFail: len(res.Lost), AckInfo: info, AckRejected: rejected,
		FailoverMS: ms(switched - faultAt), UnavailableMS: ms(upAt - faultAt), ReplOffsetBehind: behind,
		DrainMissing: missing, DurationS: time.Since(t0).Seconds(),
	}
	writeResults(t, "S8-redis-failover-"+mode, out)
	if len(res.Unexpected) > 0 || len(res.Early) > 0 {
		t.Errorf("unexpected %d, early %d", len(res.Unexpected), len(res.Early))
	}
	if mode == "coordinated" && !res.Valid() {
		t.Errorf("coordinated failover: guarantees violated: %v", res)
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
}
