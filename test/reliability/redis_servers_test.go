package reliability

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

type heldJSON struct {
	Held              int         `json:"held_leases"`
	Redelivered       int         `json:"redelivered"`
	EarlyRedelivered  int         `json:"redelivered_before_expiry"`
	AfterExpiry       latencyJSON `json:"redelivery_after_expiry"` // redelivery − (first lease call + lease)
	ServerKilledAfter float64     `json:"server_killed_after_lease_ms"`
}

type raceResults struct {
	Scenario          string      `json:"scenario"`
	Tier              string      `json:"tier"`
	Seed              uint64      `json:"seed"`
	Date              string      `json:"date"`
	Servers           int         `json:"servers"`
	Config            loadConfig  `json:"config"`
	Check             checkJSON   `json:"check"`
	Held              int         `json:"leases_held_by_consumers"`
	AckInfo           int         `json:"acks_info"`
	AckRejected       int         `json:"acks_rejected_409"`
	DoubleLeases      int         `json:"double_leases"`
	DoubleLeaseIDs    []string    `json:"double_lease_ids,omitempty"`
	DoubleByServer    int         `json:"double_leases_by_server_stamps"`
	DoubleByServerIDs []string    `json:"double_leases_by_server_stamps_ids,omitempty"`
	HeldRedelivery    latencyJSON `json:"held_redelivered_after_lease_expires_at"`
	ServerKillAtMS    float64     `json:"server_kill_at_ms"`
	ServerRestartMS   float64     `json:"server_restart_ms"`
	SendsPerSec       float64     `json:"sends_per_sec"`
	DurationS         float64     `json:"duration_s"`
	DrainMissing      int         `json:"drain_missing"`
	KilledServerLease heldJSON    `json:"killed_server_leases"`
	SendErrors        []string    `json:"send_errors,omitempty"`
}

// TestRedisServersRace: two, then three delayq servers on one Redis
// (appendfsync always), with every request of the producers and
// consumers spread round robin over the servers (a lease from one, its
// ack to another). 2% of first deliveries are held without an answer so
// that lease expiry — swept by every server — races with the others'
// leases. One server is killed -9 mid-run and restarted. Pass: no
// message handed out while an earlier lease of it was live, lost 0,
// unexpected 0, early 0, resurrected 0, duplicates within the bound.
// Then a server's leases are stranded by killing it: the survivors
// redeliver them after expiry, not before.
func TestRedisServersRace(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(strconv.Itoa(n)+"servers", func(t *testing.T) { runServersRace(t, n) })
	}
}

func runServersRace(t *testing.T, n int) {
	s := seed(t)
	t.Logf("tier %s seed %d servers %d", tier(), s, n)
	rs := startRedis(t, "always")
	const lease = 2 * time.Second
	var procs []*proc
	for i := 0; i < n; i++ {
		p := newRedisProc(t, rs.URL(), "--default-lease", lease.String(), "--default-max-attempts", "1000")
		p.start()
		procs = append(procs, p)
	}
	cfg := loadConfig{
		Topic: "race", Messages: pick(1500, 20_000), Producers: 6, Consumers: 6,
		MaxDelay: 3 * time.Second, Lease: lease, MaxWork: 50 * time.Millisecond,
		SendSpan: pick(4*time.Second, 30*time.Second), LeaseMax: 16,
	}
	c := spreadClient(t, procs, 10*time.Second)
	l := newLoad(t, cfg, c, s)
	var heldMu sync.Mutex
	heldUntil := map[string]time.Time{} // the held lease's LeaseExpiresAt
	l.hold = func(m *delayq.Message) bool {
		_, k, _ := parseMsgID(m.ID)
		if m.Attempt == 1 && k%50 == 7 {
			heldMu.Lock()
			heldUntil[m.ID] = m.LeaseExpiresAt
			heldMu.Unlock()
			return true
		}
		return false
	}
	krng := newRand(s + 1)
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()

	// Kill one server in the middle of the sends; the others carry on.
	sleepCtx(ctx, krng.Dur(cfg.SendSpan/4, cfg.SendSpan*3/4))
	victim := procs[krng.IntN(n)]
	killAt := l.rec.Now()
	victim.kill9()
	sleepCtx(ctx, 500*time.Millisecond)
	restart := victim.start()
	t.Logf("server %s killed at %v, ready again %v after restart", victim.addr, killAt.Round(time.Millisecond), restart.Round(time.Millisecond))

	<-prodDone
	missing := l.drain(cfg.MaxDelay+2*lease+30*time.Second, nil)
	time.Sleep(lease + 5500*time.Millisecond) // held leases expire; a sweep (≤ 5 s) on any server redelivers
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	held := len(heldUntil)
	dupBound := held + info + rejected
	res := history.Check(l.rec.Ops(), nil, history.Options{DupBound: dupBound, Slack: 2 * time.Millisecond})
	dbl := doubleLeases(l.rec, lease)
	// By the servers' own record: a held message's next lease is stamped
	// (Redis TIME) no earlier than the LeaseExpiresAt its first lease
	// answered.
	var dblServer []string
	var margins []time.Duration
	heldLeases := map[string][]history.Op{}
	for _, op := range l.rec.Ops() {
		if _, ok := heldUntil[op.ID]; ok && op.Kind == history.Lease && op.Outcome == history.OK {
			heldLeases[op.ID] = append(heldLeases[op.ID], op)
		}
	}
	for id, ds := range heldLeases {
		slices.SortFunc(ds, func(a, b history.Op) int { return int(a.Invoke - b.Invoke) })
		if len(ds) < 2 || ds[1].At.IsZero() {
			continue // not redelivered: the checker counts it lost
		}
		if d := ds[1].At.Sub(heldUntil[id]); d < 0 {
			dblServer = append(dblServer, id)
		} else {
			margins = append(margins, d)
		}
	}
	t.Logf("checker: %v; held %d; double leases %d (by server stamps %d); held redelivered after LeaseExpiresAt by %+v", res, held, len(dbl), len(dblServer), quantiles(margins))
	logOpsOf(t, l.rec, first(append(append(append(dbl, res.Lost...), res.Early...), dblServer...), 3))

	hj := killedServerLeases(t, procs, lease)
	out := raceResults{
		Scenario: "Redis servers race", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Servers: n,
		Config: l.cfg, Check: toCheckJSON(res, len(l.deliveries)), Held: held, AckInfo: info, AckRejected: rejected,
		DoubleLeases: len(dbl), DoubleLeaseIDs: first(dbl, 20), DoubleByServer: len(dblServer), DoubleByServerIDs: first(dblServer, 20), HeldRedelivery: quantiles(margins),
		ServerKillAtMS: ms(killAt), ServerRestartMS: ms(restart),
		SendsPerSec: float64(res.Acked) / l.sendEnd.Sub(l.sendStart).Seconds(), DurationS: time.Since(t0).Seconds(),
		DrainMissing: missing, KilledServerLease: hj, SendErrors: first(l.sendErrs, 20),
	}
	writeResults(t, fmt.Sprintf("redis-servers-race-%d", n), out)
	if !res.Valid() {
		t.Errorf("guarantees violated: %v", res)
	}
	if len(dbl) > 0 {
		t.Errorf("%d messages were handed out while an earlier lease was live: %v", len(dbl), first(dbl, 10))
	}
	if len(dblServer) > 0 {
		t.Errorf("%d held messages were leased again before their LeaseExpiresAt (server stamps): %v", len(dblServer), first(dblServer, 10))
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
}

// killedServerLeases leases K messages through the last server, kills it
// -9, and waits for the survivors to redeliver them: not before the
// lease ends, and within the lease + the 5 s safety sweep that finds
// another server's leases + slack.
func killedServerLeases(t *testing.T, procs []*proc, lease time.Duration) heldJSON {
	const topic, k = "race-held", 40
	ctx := context.Background()
	victim, survivor := procs[len(procs)-1], procs[0]
	cv, cs := client(t, victim.url(), 10*time.Second), client(t, survivor.url(), 10*time.Second)
	for i := 0; i < k; i++ {
		if _, err := cs.Send(ctx, topic, delayq.SendRequest{ID: "h" + strconv.Itoa(i), Payload: []byte("x")}); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	t0 := time.Now()
	first := map[string]time.Time{} // lease call invoke
	for len(first) < k && time.Since(t0) < 10*time.Second {
		inv := time.Now()
		msgs, err := cv.Lease(ctx, topic, delayq.LeaseRequest{Max: k, Wait: time.Second})
		if err != nil {
			t.Fatalf("lease from the victim: %v", err)
		}
		for _, m := range msgs {
			first[m.ID] = inv
		}
	}
	if len(first) < k {
		t.Fatalf("leased %d of %d from the victim", len(first), k)
	}
	killAfter := time.Since(t0)
	victim.kill9()
	var after []time.Duration
	early := 0
	deadline := time.Now().Add(lease + 10*time.Second)
	got := map[string]bool{}
	for len(got) < k && time.Now().Before(deadline) {
		msgs, err := cs.Lease(ctx, topic, delayq.LeaseRequest{Max: k, Wait: time.Second})
		if err != nil {
			t.Fatalf("lease from the survivor: %v", err)
		}
		now := time.Now()
		for _, m := range msgs {
			got[m.ID] = true
			d := now.Sub(first[m.ID].Add(lease))
			if d < 0 {
				early++
			}
			after = append(after, d)
			if err := cs.Ack(ctx, topic, m.ID, m.Receipt); err != nil {
				t.Errorf("ack %s: %v", m.ID, err)
			}
		}
	}
	hj := heldJSON{Held: k, Redelivered: len(got), EarlyRedelivered: early, AfterExpiry: quantiles(after), ServerKilledAfter: ms(killAfter)}
	t.Logf("killed server's leases: %d held, %d redelivered by the survivor, %d before expiry; after expiry %+v", k, len(got), early, hj.AfterExpiry)
	if len(got) < k || early > 0 {
		t.Errorf("killed server's leases: %d of %d redelivered, %d before their lease ended", len(got), k, early)
	}
	if hj.AfterExpiry.Max > ms(6*time.Second) {
		t.Errorf("killed server's leases redelivered up to %.0f ms after expiry, want ≤ 6 s (5 s sweep)", hj.AfterExpiry.Max)
	}
	return hj
}
