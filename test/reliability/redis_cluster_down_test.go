package reliability

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/test/internal/history"
)

// clusterDownPartitions is --redis-partitions of the scenario.
const clusterDownPartitions = 4

type clusterDownJSON struct {
	Scenario  string     `json:"scenario"`
	Tier      string     `json:"tier"`
	Seed      uint64     `json:"seed"`
	Date      string     `json:"date"`
	Config    loadConfig `json:"config"`
	Check     checkJSON  `json:"check"`
	Topic     string     `json:"topic"`
	Victim    string     `json:"victim"`
	DownParts []int      `json:"down_partitions"`
	DownMS    float64    `json:"master_down_ms"` // kill until every node reports cluster_state:ok
	// DeliveredWhileDown counts first deliveries, during the outage, of
	// messages on the partitions whose masters stayed up.
	DeliveredWhileDown int `json:"delivered_while_down"`
	// DueWhileDown counts the messages on those partitions that came due
	// during the outage at least downMargin before its end; LateWhileDown
	// those of them not delivered before the master was back.
	DueWhileDown  int      `json:"due_while_down"`
	LateWhileDown []string `json:"late_while_down,omitempty"`
	// Unseen counts leases no consumer received (Attempt numbers skipped),
	// on the partitions that stayed up and on the stopped master's.
	UnseenUp     int   `json:"unseen_leases_up"`
	UnseenDown   int   `json:"unseen_leases_down"`
	InflightEnd  int64 `json:"inflight_at_end"`
	AckInfo      int   `json:"acks_info"`
	AckRejected  int   `json:"acks_rejected_409"`
	DrainMissing int   `json:"drain_missing"`
}

// downMargin: a message on a healthy partition that came due this long
// before the master returned must have been delivered by then.
const downMargin = 2 * time.Second

// TestS9RedisClusterMasterDown: one master of a 3-master Cluster (no
// replicas, cluster-require-full-coverage no) is killed -9 under S7's
// load and kept down for a while, then restarted. The topic has
// partitions on every master; the killed one holds some of them, but not
// the topic's meta key or the registry (sends and sweeps need those: see
// docs/redis.md, "Failure behaviour").
// While it is down, only its partitions may stall: messages on the others
// are promoted and delivered (every one that came due downMargin before
// the master returned was delivered before that; judged outside the race
// detector). Afterwards: lost 0, unexpected 0, early 0, resurrected 0,
// duplicated ≤ bound, everything delivered, nothing inflight at the end,
// and no lease on the healthy partitions that no consumer received (a
// lease the store made but did not return). Leases on the killed master's
// partitions that no consumer saw are reported: a script the master ran
// just before dying, whose answer was lost.
func TestS9RedisClusterMasterDown(t *testing.T) {
	s := seed(t)
	cl := redistest.StartCluster(t, 3, "--cluster-require-full-coverage", "no")
	ctx := context.Background()
	topic, victim, downParts := clusterDownTopic(t, cl)
	t.Logf("tier %s seed %d: topic %s, killing %s (partitions %v of %d)", tier(), s, topic, cl.Nodes[victim].Addr(), downParts, clusterDownPartitions)

	outage := pick(5*time.Second, 15*time.Second)
	cfg := loadConfig{
		Topic: topic, Messages: pick(1600, 20_000), Producers: 8, Consumers: 8,
		MaxDelay: 2 * time.Second, Lease: 3 * time.Second, MaxWork: 20 * time.Millisecond,
		SendSpan: pick(8*time.Second, 40*time.Second), LeaseMax: 16,
	}
	p := newRedisProc(t, cl.URL(), "--redis-partitions", strconv.Itoa(clusterDownPartitions),
		"--default-lease", "3s", "--default-max-attempts", "1000")
	p.start()
	c := client(t, p.url(), 10*time.Second)
	l := newLoad(t, cfg, c, s)
	var attemptsMu sync.Mutex
	attempts := map[string][]int{} // Attempt of each delivery a consumer got
	l.handle = func(m *delayq.Message) bool {
		attemptsMu.Lock()
		attempts[m.ID] = append(attempts[m.ID], m.Attempt)
		attemptsMu.Unlock()
		return true
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(runCtx); close(prodDone) }()

	sleepCtx(runCtx, pick(2500*time.Millisecond, 10*time.Second))
	killAt := l.rec.Now()
	node := cl.Nodes[victim]
	node.Kill()
	out := l.outstandingAt(killAt)
	sleepCtx(runCtx, outage)
	backAt := l.rec.Now()
	node.Restart()
	cl.WaitOK(t, 30*time.Second)
	up := l.rec.Now()
	l.rec.Down(killAt, up)
	t.Logf("master killed at %v with %d leases out; restarted at %v, cluster ok after %v", killAt.Round(time.Millisecond), out, backAt.Round(time.Millisecond), (up - backAt).Round(time.Millisecond))

	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second) // let redeliveries of leases whose acks failed show
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: out + info + rejected, Slack: 2 * time.Millisecond, DownGrace: 2500 * time.Millisecond})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, first(append(res.Early, res.Lost...), 3))

	isDown := func(id string) bool { return slices.Contains(downParts, partitionOf(id)) }
	// Liveness of the healthy partitions during the outage.
	sentAt := map[string]time.Duration{} // completion of the ok send + its delay: the latest the message can be due
	firstLease := map[string]time.Duration{}
	for _, op := range l.rec.Ops() {
		switch {
		case op.Kind == history.Send && op.Outcome == history.OK:
			if _, ok := sentAt[op.ID]; !ok {
				sentAt[op.ID] = op.Complete + op.Delay
			}
		case op.Kind == history.Lease && op.Outcome == history.OK:
			if at, ok := firstLease[op.ID]; !ok || op.Complete < at {
				firstLease[op.ID] = op.Complete
			}
		}
	}
	whileDown, due := 0, 0
	var late []string
	for id, at := range firstLease {
		if !isDown(id) && at > killAt && at < backAt {
			whileDown++
		}
	}
	for id, dueBy := range sentAt {
		if isDown(id) || dueBy < killAt || dueBy > backAt-downMargin {
			continue
		}
		due++
		if at, ok := firstLease[id]; !ok || at > backAt {
			late = append(late, id)
		}
	}
	slices.Sort(late)

	// Leases nobody received: Attempt numbers no consumer saw.
	unseenUp, unseenDown := 0, 0
	attemptsMu.Lock()
	for id, as := range attempts {
		n := slices.Max(as) - len(as)
		if isDown(id) {
			unseenDown += n
		} else {
			unseenUp += n
			if n > 0 {
				t.Logf("%s: attempts seen %v", id, as)
			}
		}
	}
	attemptsMu.Unlock()

	ti, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatalf("topic stats after the run: %v", err)
	}

	r := clusterDownJSON{
		Scenario: "S9 redis cluster master down", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339),
		Config: l.cfg, Check: toCheckJSON(res, len(l.deliveries)), Topic: topic, Victim: node.Addr(), DownParts: downParts,
		DownMS: ms(up - killAt), DeliveredWhileDown: whileDown, DueWhileDown: due, LateWhileDown: first(late, 20),
		UnseenUp: unseenUp, UnseenDown: unseenDown, InflightEnd: ti.Counts.Inflight,
		AckInfo: info, AckRejected: rejected, DrainMissing: missing,
	}
	writeResults(t, "S9-redis-cluster-master-down", r)
	t.Logf("during the outage: %d first deliveries from the healthy partitions; %d of their messages came due ≥ %v before the master returned, %d of them not delivered by then; unseen leases %d (healthy) / %d (killed master's); inflight at the end %d",
		whileDown, due, downMargin, len(late), unseenUp, unseenDown, ti.Counts.Inflight)

	if !res.Valid() || res.Delivered == 0 {
		t.Errorf("guarantees violated (or nothing delivered): %v", res)
	}
	if missing != 0 {
		t.Errorf("%d messages sent ok were never delivered after the master came back", missing)
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages that came due while the master was down were delivered later than its return + 2.5 s: %v", len(res.SlowAfterRestart), first(res.SlowAfterRestart, 10))
	}
	if whileDown == 0 {
		t.Errorf("no message of the healthy partitions was delivered while one master was down: the down master blocked the whole topic")
	}
	if due == 0 {
		t.Errorf("no message of the healthy partitions came due during the outage: the scenario checked nothing")
	}
	if len(late) > 0 && !raceOn {
		t.Errorf("%d of %d messages on healthy partitions that came due during the outage were not delivered before the master returned: %v", len(late), due, first(late, 10))
	}
	if unseenUp != 0 {
		t.Errorf("%d leases on healthy partitions reached no consumer (a lease the store made and dropped)", unseenUp)
	}
	if ti.Counts.Inflight != 0 {
		t.Errorf("%d messages inflight after every consumer stopped and every message was acked", ti.Counts.Inflight)
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
}

// partitionOf is redisstore's partition of a message id: FNV-1a 32 of the
// id modulo the partition count (the redisstore package doc, "Key
// layout").
func partitionOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % clusterDownPartitions)
}

// clusterDownTopic picks a topic and a master to kill that holds some of
// the topic's partitions (not all) but none of the keys every call of
// the topic needs: the topic's meta hash ({topic}), the topic registry
// and the notification channel (prefix "dq").
func clusterDownTopic(t *testing.T, cl *redistest.Cluster) (topic string, victim int, down []int) {
	t.Helper()
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	master := func(key string) int {
		c, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.Index(cl.Addrs(), c.Options().Addr)
		if i < 0 {
			t.Fatalf("%s: master %s is not a node of the cluster", key, c.Options().Addr)
		}
		return i
	}
	shared := []int{master("dq:topics")}
	for n := range 1000 {
		topic = "s9down" + strconv.Itoa(n)
		need := append([]int{master("{" + topic + "}")}, shared...)
		parts := make([]int, clusterDownPartitions)
		for p := range parts {
			parts[p] = master("{" + topic + "#" + strconv.Itoa(p) + "}")
		}
		for v := range cl.Nodes {
			if slices.Contains(need, v) {
				continue
			}
			down = down[:0]
			for p, m := range parts {
				if m == v {
					down = append(down, p)
				}
			}
			if len(down) > 0 && len(down) < clusterDownPartitions {
				return topic, v, down
			}
		}
	}
	t.Fatal("no topic with a master holding some of its partitions and none of its shared keys")
	return "", 0, nil
}
