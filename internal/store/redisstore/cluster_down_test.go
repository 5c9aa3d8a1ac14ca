package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// downCluster is a 3-master Cluster that keeps serving the slots of the
// masters that are up when one is down (cluster-require-full-coverage
// no; with the default, every node refuses every key once the others
// agree the master failed).
func downCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("cluster: skipped in -short")
	}
	return redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
}

// openCluster opens a store on cl with its own prefix, TimeCaller (the
// test drives time), the given Timeout, and its log in logs.
func openCluster(t *testing.T, cl *redistest.Cluster, prefix string, timeout time.Duration) (*Store, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	s, err := Open(context.Background(), Options{URL: cl.URL(), Prefix: prefix, TimeSource: TimeCaller, Timeout: timeout,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, logs
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// masters maps each partition of topic to the index in cl.Nodes of the
// master that serves its slot.
func masters(t *testing.T, cl *redistest.Cluster, ks keyspace, topic string) []int {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	out := make([]int, ks.parts)
	for p := range out {
		c, err := cc.MasterForKey(context.Background(), ks.part(topic, p).ready)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = slices.Index(cl.Addrs(), c.Options().Addr)
		if out[p] < 0 {
			t.Fatalf("partition %d: master %s is not a node of the cluster", p, c.Options().Addr)
		}
	}
	return out
}

// spreadTopic finds a topic whose partitions 0, 1 and 2 are on three
// different masters, and returns it with each partition's master.
func spreadTopic(t *testing.T, cl *redistest.Cluster, ks keyspace, base string) (string, []int) {
	t.Helper()
	for i := range 1000 {
		topic := base + strconv.Itoa(i)
		m := masters(t, cl, ks, topic)
		if m[0] != m[1] && m[1] != m[2] && m[0] != m[2] {
			return topic, m
		}
	}
	t.Fatal("no topic with partitions 0-2 on three masters")
	return "", nil
}

// idIn returns the next id "<base>-<n>" (n from *next on) in partition p.
func idIn(ks keyspace, p int, base string, next *int) string {
	for {
		id := base + "-" + strconv.Itoa(*next)
		*next++
		if ks.partitionOf(id) == p {
			return id
		}
	}
}

func insertAt(t *testing.T, s *Store, topic string, now int64, msgs ...store.InsertMessage) {
	t.Helper()
	if _, err := s.MessageInsertMany(context.Background(), &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs}); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

func idsOf(recs []*store.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	slices.Sort(out)
	return out
}

// TestClusterMasterDown: a topic with partitions on all three masters;
// one master is killed (refuses connections) or paused (SIGSTOP: accepts
// them and never answers). Lease, promote and lease expiry still serve
// the partitions of the other masters, promote asks to be called again
// within partRetry for the missing ones, and a lease that finds nothing
// while a partition is missing fails rather than answering "nothing
// ready". Once the master is back, its messages are served too. Before
// partitions were independent, every one of these calls failed while
// the master was down.
func TestClusterMasterDown(t *testing.T) {
	t.Parallel()
	cl := downCluster(t)
	for _, mode := range []string{"pause", "kill"} {
		t.Run(mode, func(t *testing.T) { masterDown(t, cl, mode) })
	}
}

func masterDown(t *testing.T, cl *redistest.Cluster, mode string) {
	ctx := context.Background()
	// Generous: a paused master takes half of it from every call (the
	// peek), and a loaded CI machine must still fit the healthy work in the
	// other half.
	const timeout = 2 * time.Second
	s, logs := openCluster(t, cl, "down"+mode, timeout)
	topic, master := spreadTopic(t, cl, s.keys, "t")
	victim := master[0]
	var up, down []int // partitions by whether their master stays up
	for p, m := range master {
		if m == victim {
			down = append(down, p)
		} else {
			up = append(up, p)
		}
	}
	t.Logf("topic %s: partition masters %v, stopping node %d (partitions %v)", topic, master, victim, down)

	// Per partition: 3 ready, 2 due at T0+1000, 1 due at T0+60000.
	const t0 = int64(1_000_000)
	next := 0
	inPart := map[string]int{}
	all := map[string]bool{}
	var msgs []store.InsertMessage
	for p := range master {
		for k, due := range []int64{t0 - 30, t0 - 20, t0 - 10, t0 + 1000, t0 + 1000, t0 + 60_000} {
			id := idIn(s.keys, p, fmt.Sprintf("p%d.%d", p, k), &next)
			inPart[id], all[id] = p, true
			msgs = append(msgs, store.InsertMessage{ID: id, Payload: []byte(id), DueAt: due, MaxAttempts: 100})
		}
	}
	insertAt(t, s, topic, t0, msgs...)
	want := func(ps []int, ks ...int) []string { // ids of the k-th messages of partitions ps
		var out []string
		for id, p := range inPart {
			var k int
			_, _ = fmt.Sscanf(id, "p%d.%d", new(int), &k)
			if slices.Contains(ps, p) && slices.Contains(ks, k) {
				out = append(out, id)
			}
		}
		slices.Sort(out)
		return out
	}
	lease := func(now int64, token string) ([]*store.Record, error) {
		return s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: 100, LeaseFor: 30_000, Token: token})
	}
	seen := map[string]bool{}
	node := cl.Nodes[victim]
	switch mode {
	case "pause":
		node.Pause()
	case "kill":
		node.Kill()
	}
	stopped := true
	defer func() {
		if stopped && mode == "pause" {
			node.Resume()
		}
	}()

	// Lease: the ready messages of the partitions that are up, in order.
	start := time.Now()
	recs, err := lease(t0, "a")
	if err != nil {
		t.Fatalf("lease with a master stopped (%s): %v", mode, err)
	}
	if got, w := idsOf(recs), want(up, 0, 1, 2); !slices.Equal(got, w) {
		t.Fatalf("lease with a master stopped (%s): got %v, want %v", mode, got, w)
	}
	if !slices.IsSortedFunc(recs, func(a, b *store.Record) int { return int(a.DueAt - b.DueAt) }) {
		t.Errorf("lease: not in DueAt order: %v", idsOf(recs))
	}
	t.Logf("lease with a master stopped (%s): %d records after %v", mode, len(recs), time.Since(start).Round(time.Millisecond))
	for _, r := range recs {
		seen[r.ID] = true
	}

	// Promote: the due messages of the partitions that are up; NextDue
	// asks for a retry within partRetry (the healthy head is at T0+60000).
	now := t0 + 2000
	res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: now, Max: 100})
	if err != nil {
		t.Fatalf("promote with a master stopped (%s): %v", mode, err)
	}
	if res.Promoted != 2*len(up) {
		t.Errorf("promote with a master stopped (%s): promoted %d, want %d", mode, res.Promoted, 2*len(up))
	}
	if res.NextDue != now+partRetry.Milliseconds() || res.Now != 0 {
		t.Errorf("promote with a master stopped (%s): NextDue %d Now %d, want %d (Params.Now + partRetry) and 0", mode, res.NextDue, res.Now, now+partRetry.Milliseconds())
	}
	recs, err = lease(now, "b")
	if err != nil {
		t.Fatalf("lease of the promoted: %v", err)
	}
	if got, w := idsOf(recs), want(up, 3, 4); !slices.Equal(got, w) {
		t.Fatalf("lease of the promoted: got %v, want %v", got, w)
	}
	for _, r := range recs {
		seen[r.ID] = true
	}

	// Nothing left where the masters are up: the missing partitions make
	// that an error, not "nothing ready".
	if recs, err := lease(now, "c"); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("lease with only the stopped master's partitions left: %d records, %v; want ErrUnavailable", len(recs), err)
	}

	// Lease expiry sweeps the partitions that are up.
	now = t0 + 40_000
	exp, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: 100})
	if err != nil {
		t.Fatalf("lease expire with a master stopped (%s): %v", mode, err)
	}
	if got, w := idsOf(exp), want(up, 0, 1, 2, 3, 4); !slices.Equal(got, w) {
		t.Errorf("lease expire with a master stopped (%s): got %v, want %v", mode, got, w)
	}
	if _, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: 100}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("second lease expire: %v, want ErrUnavailable (nothing expired, a partition missing)", err)
	}

	// Logged (once: at most one line per skipLogEvery) and counted.
	if n := strings.Count(logs.String(), "a partition failed and was left out"); n != 1 || s.skips.Load() < 4 {
		t.Errorf("%d warnings logged, %d partitions counted as skipped; want 1 and >= 4:\n%s", n, s.skips.Load(), logs)
	}

	// Readiness pings every master: a stopped one fails it.
	if err := s.Ping(ctx); err == nil {
		t.Errorf("Ping with a master stopped (%s): nil, want an error", mode)
	}

	switch mode {
	case "pause":
		node.Resume()
	case "kill":
		node.Restart()
	}
	stopped = false
	cl.WaitOK(t, 30*time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := s.Ping(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping after the master came back: %v", err)
		}
	}

	// Everything is served again: promote all, then lease until empty.
	now = t0 + 100_000
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err = s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: now, Max: 100})
		if err == nil && res.NextDue == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("promote after the master came back: %+v, %v", res, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		recs, err := lease(now, "d")
		if err == nil && len(recs) == 0 {
			break
		}
		for _, r := range recs {
			seen[r.ID] = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease after the master came back: %d records, %v", len(recs), err)
		}
	}
	for id := range all {
		if !seen[id] {
			t.Errorf("%s (partition %d) never leased", id, inPart[id])
		}
	}
}

// TestClusterLeaseKeepsEarlierRounds: a lease whose later round fails
// still returns what its earlier rounds leased. Round 1 picks four heads
// (one in partition 0, three in partition 1); another server takes
// partition 0's before the scripts run, so round 1 leases three and
// round 2 goes for partition 2's head — whose master is killed first.
// The call must return the three records of round 1, leased to it (their
// receipts ack), and leave partition 2's message ready. Before, the
// failed round failed the call and those three stayed inflight with
// nobody holding them until their lease expired.
func TestClusterLeaseKeepsEarlierRounds(t *testing.T) {
	// Not parallel: testHookLease is package-wide; the parallel tests
	// run only after the sequential ones.
	cl := downCluster(t)
	ctx := context.Background()
	s, _ := openCluster(t, cl, "rounds", time.Second)
	thief, _ := openCluster(t, cl, "rounds", time.Second)
	topic, master := spreadTopic(t, cl, s.keys, "r")
	const now = int64(2_000_000)
	next := 0
	var x, z, y []string
	var msgs []store.InsertMessage
	add := func(p int, due int64, to *[]string) {
		id := idIn(s.keys, p, "m", &next)
		*to = append(*to, id)
		msgs = append(msgs, store.InsertMessage{ID: id, Payload: []byte(id), DueAt: due, MaxAttempts: 5})
	}
	add(0, now-100, &x)
	for i := range 3 {
		add(1, now-90+int64(i), &z)
	}
	for i := range 2 {
		add(2, now-80+int64(i), &y)
	}
	insertAt(t, s, topic, now, msgs...)

	var rounds []int
	inThief := false
	testHookLease = func(round int) {
		if inThief {
			return
		}
		rounds = append(rounds, round)
		switch round {
		case 0:
			inThief = true
			stolen, err := thief.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: 1, LeaseFor: 60_000, Token: "thief"})
			inThief = false
			if err != nil || len(stolen) != 1 || stolen[0].ID != x[0] {
				t.Errorf("thief: %v, %v; want %s", idsOf(stolen), err, x[0])
			}
		case 1:
			cl.Nodes[master[2]].Kill()
		}
	}
	defer func() { testHookLease = nil }()

	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: 4, LeaseFor: 60_000, Token: "mine"})
	testHookLease = nil
	if !slices.Equal(rounds, []int{0, 1}) {
		t.Fatalf("lease ran rounds %v, want [0 1]: the setup did not force a second round", rounds)
	}
	if err != nil {
		t.Fatalf("lease whose second round failed: %v (round 1 leased %v; those stay inflight with nobody holding them)", err, z)
	}
	slices.Sort(z)
	if got := idsOf(recs); !slices.Equal(got, z) {
		t.Fatalf("lease whose second round failed: got %v, want round 1's %v", got, z)
	}
	for _, r := range recs {
		if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: now + 1}); err != nil {
			t.Errorf("ack %s with the receipt the lease returned: %v", r.ID, err)
		}
	}

	cl.Nodes[master[2]].Restart()
	cl.WaitOK(t, 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now + 2, Max: 10, LeaseFor: 60_000 - 2, Token: "after"})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease after restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(y)
	if got := idsOf(recs); !slices.Equal(got, y) {
		t.Errorf("after restart: leased %v, want partition 2's %v still ready", got, y)
	}
	for _, r := range recs {
		if r.Deliveries != 1 {
			t.Errorf("%s: Deliveries %d, want 1 (the failed round must not have leased it)", r.ID, r.Deliveries)
		}
	}
}
