// Package dqtarget holds delayq's own benchmark targets for internal/bench:
//
//   - embedded: the engine on pebblestore in a temp dir, in-process (the
//     default deployment; every accepted send fsync'd with group commit);
//   - memory: the engine on memstore, in-process (a ceiling: no disk);
//   - http://host:port: a running delayq server through the Go client;
//   - serve[:/path/to/delayq]: a `delayq serve` subprocess the benchmark
//     starts on a free loopback port with a temp data dir (so the pending
//     scenario can read its RSS and restart it);
//   - serve-redis[:nopersist][:/path/to/delayq]: a `delayq serve --redis`
//     subprocess on a redis-server subprocess, both on free loopback ports;
//   - serve-postgres:URL[:tx], serve-mysql:URL[:tx]: a `delayq serve
//     --postgres|--mysql` subprocess on the given database, in a schema or
//     table prefix of its own that Close drops; with :tx every Send is one
//     transaction of the application's own straight on the database
//     (pgtx / mysqltx), while consumers lease over HTTP.
//
// The serve targets report the server processes' CPU per message.
package dqtarget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

// Targets documents the --target words Resolve accepts.
const Targets = "delayq targets: embedded (engine + Pebble in a temp dir), memory (engine + memstore: a ceiling), http://host:port (a running server), serve[:/path/to/delayq] (a delayq serve subprocess), serve-redis[:nopersist][:/path/to/delayq] (delayq serve --redis on a redis-server subprocess: appendfsync always, or no persistence with nopersist or --durable=false), serve-postgres:URL[:tx] and serve-mysql:URL[:tx] (delayq serve on that database in a fresh schema / table prefix; :tx sends one application transaction per send call through pgtx / mysqltx); json+ before any HTTP target (json+serve:…, json+http://…) sends, leases and acks through a plain net/http + encoding/json client instead of the SDK"

// Resolve maps a --target word to a delayq target.
func Resolve(spec string) (bench.Factory, bool, error) {
	switch {
	case strings.HasPrefix(spec, PlainPrefix):
		return resolvePlain(spec)
	case spec == "embedded":
		return bench.Factory{Name: "embedded", Open: openEmbedded}, true, nil
	case spec == "memory":
		return bench.Factory{Name: "memory", Open: openMemory}, true, nil
	case strings.HasPrefix(spec, "http://"), strings.HasPrefix(spec, "https://"):
		if _, err := delayq.NewClient(spec); err != nil {
			return bench.Factory{}, true, err
		}
		return bench.Factory{Name: "delayq@" + strings.TrimPrefix(strings.TrimPrefix(spec, "http://"), "https://"),
			Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) { return openHTTP(ctx, spec, o) }}, true, nil
	case strings.HasPrefix(spec, "serve-postgres"), strings.HasPrefix(spec, "serve-mysql"):
		s, ok, err := parseSQLServe(spec)
		if !ok || err != nil {
			return bench.Factory{}, ok, err
		}
		return bench.Factory{Name: s.name(),
			Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) { return openSQLServe(ctx, s, o) }}, true, nil
	case spec == "serve-redis" || strings.HasPrefix(spec, "serve-redis:"):
		bin, noPersist, err := parseServeRedis(spec)
		if err != nil {
			return bench.Factory{}, true, err
		}
		name := "serve-redis"
		if noPersist {
			name += ":nopersist"
		}
		if bin != "" { // two builds side by side get two columns
			name += ":" + filepath.Base(bin)
		}
		return bench.Factory{Name: name,
			Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
				return openServeRedis(ctx, bin, noPersist, o)
			}}, true, nil
	case spec == "serve" || strings.HasPrefix(spec, "serve:"):
		bin := strings.TrimPrefix(strings.TrimPrefix(spec, "serve"), ":")
		name := "serve"
		if bin != "" {
			name += ":" + filepath.Base(bin)
		}
		return bench.Factory{Name: name,
			Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) { return openServe(ctx, bin, o) }}, true, nil
	}
	return bench.Factory{}, false, nil
}

// quietLogger keeps Pebble's and the engine's info lines off the
// benchmark's output; warnings and errors still show.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func topicName(o bench.OpenOptions) string {
	return fmt.Sprintf("bench-%d-r%d", time.Now().UnixNano(), o.Run)
}

// QueueTarget drives any domain.Queue: SendBatch (or Send for one
// message), Lease with long-poll, AckBatch.
type QueueTarget struct {
	mu    sync.RWMutex
	q     queueAPI
	Topic string
	// Lease is the lease duration asked for (default 60 s).
	Lease time.Duration
}

func (t *QueueTarget) queue() queueAPI {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.q
}

func (t *QueueTarget) setQueue(q queueAPI) {
	t.mu.Lock()
	t.q = q
	t.mu.Unlock()
}

// Send implements bench.Target.
func (t *QueueTarget) Send(ctx context.Context, msgs []bench.Msg) error {
	q := t.queue()
	if len(msgs) == 1 {
		_, err := q.Send(ctx, t.Topic, domain.SendRequest{Payload: msgs[0].Payload, When: domain.When{DeliverAt: msgs[0].DeliverAt}})
		return err
	}
	reqs := make([]domain.SendRequest, len(msgs))
	for i, m := range msgs {
		reqs[i] = domain.SendRequest{Payload: m.Payload, When: domain.When{DeliverAt: m.DeliverAt}}
	}
	res, err := q.SendBatch(ctx, t.Topic, reqs)
	if err != nil {
		return err
	}
	for i, r := range res {
		if r.Err != nil {
			return fmt.Errorf("message %d of the batch: %w", i, r.Err)
		}
	}
	return nil
}

// Consume implements bench.Target.
func (t *QueueTarget) Consume(ctx context.Context, o bench.ConsumeOptions, handle func([]bench.Delivery)) error {
	q := t.queue()
	lease := t.Lease
	if lease == 0 {
		lease = time.Minute
	}
	req := domain.LeaseRequest{Max: max(o.Max, 1), Lease: lease, Wait: min(o.Wait, domain.MaxWait)}
	errc := make(chan error, o.Consumers)
	var wg sync.WaitGroup
	for range max(o.Consumers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- t.consumeLoop(ctx, q, req, o.PipelineAcks, handle)
		}()
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (t *QueueTarget) consumeLoop(ctx context.Context, q queueAPI, req domain.LeaseRequest, pipeline bool, handle func([]bench.Delivery)) error {
	ack := func(acks []domain.AckRequest) error { return t.ack(ctx, q, acks) }
	var p *ackPipeline
	if pipeline {
		p = startAckPipeline(ctx, q, t)
		defer p.stop()
		ack = p.queue
	}
	leaser, _ := q.(delayq.AckLeaser)
	acks := make([]domain.AckRequest, 0, req.Max)
	ds := make([]bench.Delivery, 0, req.Max)
	for ctx.Err() == nil {
		var msgs []*domain.Message
		var err error
		if carried := p.takeAcks(leaser != nil); len(carried) > 0 {
			// As the Worker does: the acks waiting for their batch go
			// with the lease.
			var errs []error
			msgs, errs, err = leaser.AckAndLease(ctx, t.Topic, carried, req)
			if err == nil {
				err = errors.Join(errs...)
			}
		} else {
			msgs, err = q.Lease(ctx, t.Topic, req)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		if len(msgs) == 0 {
			continue
		}
		now := time.Now()
		ds, acks = ds[:0], acks[:0]
		for _, m := range msgs {
			seq, err := bench.SeqOf(m.Payload)
			if err != nil {
				return fmt.Errorf("message %s: %w", m.ID, err)
			}
			ds = append(ds, bench.Delivery{Seq: seq, At: now})
			acks = append(acks, domain.AckRequest{ID: m.ID, Receipt: m.Receipt})
		}
		handle(ds)
		if err := ack(acks); err != nil {
			return err
		}
	}
	return nil
}

// ack acknowledges acks in one call (Ack for one, AckBatch for more). An
// error after ctx ended is not one: the run is over.
func (t *QueueTarget) ack(ctx context.Context, q queueAPI, acks []domain.AckRequest) error {
	var res []error
	if len(acks) == 1 {
		res = []error{q.Ack(ctx, t.Topic, acks[0].ID, acks[0].Receipt)}
	} else {
		var err error
		if res, err = q.AckBatch(ctx, t.Topic, acks); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ack batch: %w", err)
		}
	}
	for i, e := range res {
		if e != nil && ctx.Err() == nil {
			return fmt.Errorf("ack %s: %w", acks[i].ID, e)
		}
	}
	return nil
}

// ackPipeline is one consumer's acker when acks are pipelined: the
// consumer queues a batch's acks and leases again at once, and the acker
// keeps them up to ackFlush for a batch of up to domain.MaxBatch, as
// delayq's Worker does (its ackLoop with the default AckFlush); the
// consumer's next lease takes what waits when the queue acks with a lease
// (delayq.AckLeaser: the SDK's Client), as the Worker's does. A durable
// ack waits for an fsync; a consumer that waited for it before its next
// lease would hold back every message coming due meanwhile.
type ackPipeline struct {
	in    chan []domain.AckRequest
	take  chan chan []domain.AckRequest
	taken chan []domain.AckRequest
	done  chan struct{}
	err   atomic.Pointer[error] // the first failed ack, reported by queue
}

// ackFlush is the Worker's default AckFlush for the bench's lease (1 min).
const ackFlush = 100 * time.Millisecond

func startAckPipeline(ctx context.Context, q queueAPI, t *QueueTarget) *ackPipeline {
	p := &ackPipeline{in: make(chan []domain.AckRequest, 64), take: make(chan chan []domain.AckRequest),
		taken: make(chan []domain.AckRequest, 1), done: make(chan struct{})}
	send := func(batch []domain.AckRequest) {
		for len(batch) > 0 {
			n := min(len(batch), domain.MaxBatch)
			if err := t.ack(ctx, q, batch[:n]); err != nil {
				p.err.CompareAndSwap(nil, &err)
			}
			batch = batch[n:]
		}
	}
	go func() {
		defer close(p.done)
		var batch []domain.AckRequest
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for {
			select {
			case acks, ok := <-p.in:
				if !ok {
					send(batch)
					return
				}
				if len(batch) == 0 {
					timer.Reset(ackFlush)
				}
				batch = append(batch, acks...)
				if len(batch) >= domain.MaxBatch {
					timer.Stop()
					send(batch)
					batch = nil
				}
			case <-timer.C:
				send(batch)
				batch = nil
			case reply := <-p.take:
				timer.Stop()
				reply <- batch
				batch = nil
			}
		}
	}()
	return p
}

// takeAcks takes the acks waiting for their batch, when asked and the
// acker is free to hand them over now; nil otherwise (and on a nil p).
func (p *ackPipeline) takeAcks(want bool) []domain.AckRequest {
	if p == nil || !want {
		return nil
	}
	select {
	case p.take <- p.taken:
		return <-p.taken
	default:
		return nil
	}
}

// queue hands acks (copied) to the acker; it reports an earlier ack that
// failed.
func (p *ackPipeline) queue(acks []domain.AckRequest) error {
	if err := p.err.Load(); err != nil {
		return *err
	}
	p.in <- slices.Clone(acks)
	return nil
}

// stop sends what is queued and waits for the acker.
func (p *ackPipeline) stop() {
	close(p.in)
	<-p.done
}

// engineTarget is the engine in-process on a store.
type engineTarget struct {
	QueueTarget
	eng     *engine.Engine
	st      store.Store
	dir     string // pebble only
	durable bool
}

func openMemory(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
	st := memstore.New()
	eng, err := engine.Open(ctx, engine.Config{Store: st, Logger: quietLogger(), PreciseTimers: true})
	if err != nil {
		return nil, err
	}
	t := &engineTarget{eng: eng, st: st}
	t.Topic = topicName(o)
	t.setQueue(eng)
	return memoryTarget{t}, nil
}

func openEmbedded(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
	dir, err := os.MkdirTemp("", "delayq-bench-")
	if err != nil {
		return nil, err
	}
	t := &engineTarget{dir: dir, durable: o.Durable}
	t.Topic = topicName(o)
	if err := t.openPebble(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

func (t *engineTarget) openPebble(ctx context.Context) error {
	st, err := pebblestore.Open(t.dir, pebblestore.Options{NoSync: !t.durable, Logger: quietLogger()})
	if err != nil {
		return err
	}
	eng, err := engine.Open(ctx, engine.Config{Store: st, Logger: quietLogger(), PreciseTimers: true})
	if err != nil {
		_ = st.Close()
		return err
	}
	t.st, t.eng = st, eng
	t.setQueue(eng)
	return nil
}

func (t *engineTarget) closeEngine() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := t.eng.Close(ctx)
	if c, ok := t.st.(interface{ Close() error }); ok {
		err = errors.Join(err, c.Close())
	}
	return err
}

// Close implements bench.Target.
func (t *engineTarget) Close() error {
	err := t.closeEngine()
	if t.dir != "" {
		err = errors.Join(err, os.RemoveAll(t.dir))
	}
	return err
}

// RSS implements bench.MemReporter: the whole benchmark process, which
// holds the engine, after a forced GC.
func (t *engineTarget) RSS() (int64, string, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss, err := ProcRSS(os.Getpid())
	return rss, fmt.Sprintf("VmRSS of the benchmark process itself (in-process engine; includes the benchmark; Go heap in use %.1f MiB)", float64(ms.HeapInuse)/(1<<20)), err
}

// ServerCPU implements bench.CPUReporter for the in-process targets: the
// CPU of the whole benchmark process, so the engine's share plus the
// benchmark's own producers, consumers and checker (direct calls, no
// codec) — an upper bound of what the engine spends.
func (t *engineTarget) ServerCPU() (time.Duration, string, error) {
	cpu, err := bench.ProcCPU(os.Getpid())
	return cpu, "the benchmark process itself (in-process engine; includes the benchmark's producers and consumers)", err
}

// Restart implements bench.Restarter for the embedded target: close the
// engine and Pebble, then open both again on the same directory.
func (t *engineTarget) Restart(ctx context.Context) (time.Time, error) {
	if err := t.closeEngine(); err != nil {
		return time.Time{}, err
	}
	runtime.GC()
	began := time.Now()
	return began, t.openPebble(ctx)
}

// memoryTarget is the engine on memstore: no Restart (nothing survives one).
type memoryTarget struct{ et *engineTarget }

func (m memoryTarget) Send(ctx context.Context, msgs []bench.Msg) error { return m.et.Send(ctx, msgs) }
func (m memoryTarget) Consume(ctx context.Context, o bench.ConsumeOptions, h func([]bench.Delivery)) error {
	return m.et.Consume(ctx, o, h)
}
func (m memoryTarget) Close() error                { return m.et.Close() }
func (m memoryTarget) RSS() (int64, string, error) { return m.et.RSS() }
func (m memoryTarget) ServerCPU() (time.Duration, string, error) {
	return m.et.ServerCPU()
}

// ProcRSS reads VmRSS of a process from /proc/<pid>/status, in bytes.
func ProcRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("parse VmRSS %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS line")
}
