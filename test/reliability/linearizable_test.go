package reliability

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// TestS12Linearizable records concurrent send / cancel / lease / ack /
// nack / extend on a few hot ids against the real server and checks the
// history with porcupine, per id. It also feeds the checker the same
// history with one impossible operation added, which must be refused.
func TestS12Linearizable(t *testing.T) {
	p := newProc(t)
	p.start()
	runS12(t, "S12-linearizability", "one embedded server", client(t, p.url(), 10*time.Second))
}

// TestS12LinearizableShared is S12 as a deployment runs it: three
// servers on one store, their clocks 50 ms behind, 50 ms ahead and 2 s
// ahead of the store's, every request sent to the next server in turn,
// so one id's send, lease, ack and nack go through different servers.
// On Redis, PostgreSQL and MySQL/MariaDB, each started by the test.
func TestS12LinearizableShared(t *testing.T) {
	offsets := []string{"-50ms", "50ms", "2s"}
	deploy := func(t *testing.T, serveArgs ...string) *delayq.Client {
		var procs []*proc
		for _, off := range offsets {
			p := newProc(t, append(append([]string(nil), serveArgs...), "--clock-offset="+off)...)
			p.start()
			procs = append(procs, p)
		}
		return spreadClient(t, procs, 10*time.Second)
	}
	t.Run("redis", func(t *testing.T) {
		rs := startRedis(t, "everysec")
		runS12(t, "S12-linearizability-redis", "three servers on Redis, clocks -50 ms, +50 ms, +2 s", deploy(t, "--redis", rs.URL()))
	})
	for _, e := range sqlEngines {
		t.Run(e.name, func(t *testing.T) {
			db := e.start(t)
			runS12(t, "S12-linearizability-"+e.name, "three servers on "+e.name+", clocks -50 ms, +50 ms, +2 s", deploy(t, db.serveArgs...))
		})
	}
}

// runS12 is S12 through client c (one server or several); name names
// its results file, deployment describes what c reaches.
func runS12(t *testing.T, name, deployment string, c *delayq.Client) {
	s := seed(t)
	rng := newRand(s)
	const (
		topic       = "s12lin"
		maxAttempts = 3
	)
	ids := 20
	clients := 8
	opsPer := pick(400, 2000)
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }

	var mu sync.Mutex
	var ops []history.LinOp
	receipts := map[string][]string{} // every receipt seen per id (stale ones too)
	add := func(op history.LinOp) {
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
	}
	status := func(err error, okStatus int) history.LinOutput {
		if err == nil {
			return history.LinOutput{Status: okStatus}
		}
		var ae *delayq.APIError
		if errors.As(err, &ae) {
			return history.LinOutput{Status: ae.StatusCode}
		}
		return history.LinOutput{Unknown: true}
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for cl := 0; cl < clients; cl++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < opsPer; i++ {
				// Ids rotate every 40 ops so acked and dead ones (final
				// states) give way to fresh ones.
				id := fmt.Sprintf("h%d-%d", rng.IntN(ids), i/40)
				in := history.LinInput{ID: id}
				call := now()
				var out history.LinOutput
				switch r := rng.IntN(100); {
				case r < 25:
					in.Kind = history.LinSend
					m, err := c.Send(ctx, topic, delayq.SendRequest{ID: id, Payload: []byte("x"), MaxAttempts: maxAttempts})
					out = status(err, 201)
					if err == nil && m.Duplicate {
						out = history.LinOutput{Status: 200, Duplicate: true}
					}
				case r < 35:
					in.Kind = history.LinCancel
					m, err := c.Cancel(ctx, topic, id)
					out = status(err, 200)
					if err == nil {
						out.State = string(m.State)
					}
				case r < 60:
					msgs, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 1, Lease: time.Minute})
					ret := now()
					if err != nil {
						t.Errorf("lease: %v", err)
						continue
					}
					for _, m := range msgs {
						mu.Lock()
						receipts[m.ID] = append(receipts[m.ID], m.Receipt)
						mu.Unlock()
						add(history.LinOp{Client: cl, In: history.LinInput{Kind: history.LinLease, ID: m.ID},
							Out: history.LinOutput{Status: 200, Receipt: m.Receipt}, Call: call, Return: ret})
					}
					continue
				default:
					mu.Lock()
					rs := receipts[id]
					mu.Unlock()
					if len(rs) == 0 {
						continue
					}
					// Mostly the newest receipt, sometimes a stale one.
					in.Receipt = rs[len(rs)-1]
					if rng.IntN(4) == 0 {
						in.Receipt = rs[rng.IntN(len(rs))]
					}
					switch k := rng.IntN(10); {
					case k < 5:
						in.Kind = history.LinAck
						out = status(c.Ack(ctx, topic, id, in.Receipt), 200)
					case k < 8:
						in.Kind = history.LinNack
						m, err := c.Nack(ctx, topic, id, in.Receipt, delayq.NackRequest{HasDelay: true, Delay: 0, Reason: "x"})
						out = status(err, 200)
						if err == nil {
							out.State = string(m.State)
						}
					default:
						in.Kind = history.LinExtend
						_, err := c.Extend(ctx, topic, id, in.Receipt, time.Minute)
						out = status(err, 200)
					}
				}
				add(history.LinOp{Client: cl, In: in, Out: out, Call: call, Return: now()})
			}
		}()
	}
	wg.Wait()
	res, info := history.CheckLinearizable(ops, maxAttempts, time.Minute)
	counts := map[string]int{}
	unknown := 0
	for _, op := range ops {
		k := op.In.Kind.String() + fmt.Sprint("_", op.Out.Status)
		if op.Out.Unknown {
			unknown++
			k = op.In.Kind.String() + "_unknown"
		}
		counts[k]++
	}
	viz := ""
	if res != porcupine.Ok {
		viz = filepath.Join(resultsDir(t), name+".html")
		if err := history.VisualizeLinearization(maxAttempts, info, viz); err != nil {
			t.Logf("visualize: %v", err)
		}
	}

	// Negative control on real data: an extra lease of an id that was
	// inflight and never released by anyone (a second live lease) must
	// make the same history illegal.
	mutant := append([]history.LinOp(nil), ops...)
	var last int64
	for _, op := range ops {
		last = max(last, op.Return)
	}
	inj := history.LinOp{Client: clients, In: history.LinInput{Kind: history.LinLease, ID: ops[0].In.ID},
		Out: history.LinOutput{Status: 200, Receipt: "forged"}, Call: last + 10, Return: last + 20}
	inj2 := inj
	inj2.Out.Receipt, inj2.Call, inj2.Return = "forged2", last+30, last+40
	mutant = append(mutant, inj, inj2)
	mres, _ := history.CheckLinearizable(mutant, maxAttempts, time.Minute)

	writeResults(t, name, map[string]any{
		"scenario": "S12/S16 per-id linearizability (porcupine)", "deployment": deployment, "tier": tier(), "seed": s, "date": time.Now().UTC().Format(time.RFC3339),
		"config": map[string]int{"ids": ids, "clients": clients, "ops_per_client": opsPer, "max_attempts": maxAttempts},
		"ops":    len(ops), "op_counts": counts, "unknown": unknown, "result": res, "visualization": viz,
		"negative_control_result": mres, "duration_s": time.Since(start).Seconds(),
	})
	if res != porcupine.Ok {
		t.Errorf("porcupine: %s (visualization %s)", res, viz)
	}
	if mres != porcupine.Illegal {
		t.Errorf("negative control: porcupine says %s for a history with two back-to-back forged leases, want Illegal", mres)
	}
}
