// Package asynqtarget benchmarks github.com/hibiken/asynq on a Redis the
// benchmark starts itself (/usr/bin/redis-server on a free loopback port,
// data in a temp dir). Durable runs use appendonly yes + appendfsync
// always, Redis's "every write fsync'd" (group-committed per event-loop
// turn); non-durable runs (--durable=false) write the AOF but never fsync
// it (appendfsync no), like delayq's NoSync and beanstalkd's -F.
//
// asynq has no batch enqueue: a batch is sent task by task. Its server is
// push-style (worker goroutines call a handler; returning nil acks), so
// "consumers" is its Concurrency and lease-max does not apply. Scheduled
// tasks are moved to the queue by a forwarder that polls every
// DelayedTaskCheckInterval (5 s by default) and idle workers poll every
// TaskCheckInterval (1 s); the target keeps asynq's defaults unless the
// spec says asynq:poll=DURATION, which sets both.
package asynqtarget

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/bench/peers/internal/proc"
	"github.com/delayq/delayq/internal/bench"
)

// Resolve accepts "asynq" and "asynq:poll=DURATION".
func Resolve(spec string) (bench.Factory, bool, error) {
	if spec != "asynq" && !strings.HasPrefix(spec, "asynq:") {
		return bench.Factory{}, false, nil
	}
	var poll time.Duration
	if rest, ok := strings.CutPrefix(spec, "asynq:"); ok {
		v, ok := strings.CutPrefix(rest, "poll=")
		if !ok {
			return bench.Factory{}, true, fmt.Errorf("want asynq or asynq:poll=DURATION, not %q", spec)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bench.Factory{}, true, fmt.Errorf("bad poll interval %q", v)
		}
		poll = d
	}
	return bench.Factory{Name: spec, Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
		return open(ctx, o, poll)
	}}, true, nil
}

// Target is asynq on its own redis-server.
type Target struct {
	redis  proc.Process
	dir    string
	addr   string
	queue  string
	poll   time.Duration
	client *asynq.Client
	rdb    *redis.Client
	// usedEmpty is Redis's used_memory right after start, so RSS can
	// report what the data itself takes (used_memory is exact and
	// deterministic; VmRSS includes allocator slack).
	usedEmpty int64
}

func open(ctx context.Context, o bench.OpenOptions, poll time.Duration) (*Target, error) {
	bin, err := proc.Find("redis-server", "apt-get install redis-server", "/usr/bin/redis-server")
	if err != nil {
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "delayq-bench-redis-")
	if err != nil {
		return nil, err
	}
	t := &Target{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), queue: fmt.Sprintf("bench%d", o.Run), poll: poll}
	args := []string{"--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--dir", dir, "--save", "", "--daemonize", "no", "--logfile", ""}
	if o.Durable {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "yes", "--appendfsync", "no")
	}
	t.redis = proc.Process{Name: "redis-server", Path: bin, Args: args}
	t.rdb = redis.NewClient(&redis.Options{Addr: t.addr})
	if _, err := t.redis.Start(ctx, t.ping, 30*time.Second); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	t.client = asynq.NewClient(asynq.RedisClientOpt{Addr: t.addr, PoolSize: 64})
	t.usedEmpty, _ = t.usedMemory(ctx)
	return t, nil
}

func (t *Target) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return t.rdb.Ping(ctx).Err()
}

// Send enqueues every message (asynq has no batch enqueue).
func (t *Target) Send(ctx context.Context, msgs []bench.Msg) error {
	for _, m := range msgs {
		opts := []asynq.Option{asynq.Queue(t.queue), asynq.MaxRetry(3)}
		if !m.DeliverAt.IsZero() {
			opts = append(opts, asynq.ProcessAt(m.DeliverAt))
		}
		if _, err := t.client.EnqueueContext(ctx, asynq.NewTask("bench", m.Payload), opts...); err != nil {
			return err
		}
	}
	return nil
}

// Consume runs an asynq server with Concurrency = consumers until ctx ends.
func (t *Target) Consume(ctx context.Context, o bench.ConsumeOptions, handle func([]bench.Delivery)) error {
	cfg := asynq.Config{
		Concurrency: max(o.Consumers, 1),
		Queues:      map[string]int{t.queue: 1},
		LogLevel:    asynq.ErrorLevel,
	}
	if t.poll > 0 {
		cfg.DelayedTaskCheckInterval, cfg.TaskCheckInterval = t.poll, t.poll
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: t.addr}, cfg)
	var bad sync.Once
	var badErr error
	err := srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		now := time.Now()
		seq, err := bench.SeqOf(task.Payload())
		if err != nil {
			bad.Do(func() { badErr = err })
			return nil
		}
		handle([]bench.Delivery{{Seq: seq, At: now}})
		return nil
	}))
	if err != nil {
		return err
	}
	<-ctx.Done()
	srv.Shutdown()
	return badErr
}

// ServerCPU implements bench.CPUReporter: redis-server only; asynq's
// forwarder and workers run inside the benchmark process.
func (t *Target) ServerCPU() (time.Duration, string, error) {
	cpu, err := bench.ProcCPU(t.redis.Pid())
	return cpu, "redis-server only (asynq's forwarder and workers run in the benchmark process)", err
}

// RSS implements bench.MemReporter. The note adds Redis's own used_memory
// delta since start, the figure to compare per message with delayq's
// Redis engine (docs/benchmarks.md, "Redis memory per pending message").
func (t *Target) RSS() (int64, string, error) {
	n, err := t.redis.RSS()
	note := "VmRSS of redis-server"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if used, uerr := t.usedMemory(ctx); uerr == nil {
		note += fmt.Sprintf("; used_memory %d B (%d B at start)", used, t.usedEmpty)
	}
	return n, note, err
}

// usedMemory reads used_memory from INFO memory.
func (t *Target) usedMemory(ctx context.Context) (int64, error) {
	info, err := t.rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	var n int64
	_, err = fmt.Sscan(info["Memory"]["used_memory"], &n)
	return n, err
}

// Restart implements bench.Restarter: SIGTERM redis-server, start it again
// on the same data dir (it replays its AOF).
func (t *Target) Restart(ctx context.Context) (time.Time, error) {
	t.redis.Stop()
	return t.redis.Start(ctx, t.ping, 5*time.Minute)
}

// Close stops redis-server and removes its data.
func (t *Target) Close() error {
	_ = t.client.Close()
	_ = t.rdb.Close()
	t.redis.Stop()
	return os.RemoveAll(t.dir)
}
