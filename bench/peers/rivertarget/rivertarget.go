// Package rivertarget benchmarks River (github.com/riverqueue/river, a
// PostgreSQL job queue) through its pgx v5 driver on a PostgreSQL the
// caller names, in a schema of its own per run (rivermigrate installs
// River's tables there; Close drops it).
//
// Sends are Insert (one job, its own implicit transaction) or
// InsertManyFast (a batch, COPY); with :tx every send call opens a
// transaction of the application's own and calls InsertTx (one job) or
// InsertManyFastTx in it, as an application enqueuing with its own writes
// would. Due times are InsertOpts.ScheduledAt, exactly as asked.
//
// River is push-style: "consumers" is the queue's MaxWorkers (workers=N
// overrides it) and lease-max does not apply. A job's completion (River's
// ack) is recorded by River's batching completer after Work returns.
// Scheduled jobs are made available by River's scheduler (every 5 s,
// looking 5 s ahead) and fetched on LISTEN/NOTIFY or every
// FetchPollInterval (1 s), at most every FetchCooldown (100 ms);
// poll=DURATION sets both fetch settings.
package rivertarget

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/delayq/delayq/internal/bench"
)

// Spec is a parsed "river:URL[:tx][:poll=DURATION][:workers=N]".
type Spec struct {
	URL     string
	Tx      bool
	Poll    time.Duration
	Workers int
}

// Parse reads a river target word; ok is false when it is not one.
func Parse(spec string) (s Spec, ok bool, err error) {
	rest, ok := strings.CutPrefix(spec, "river:")
	if !ok {
		if spec == "river" {
			return s, true, errors.New("want river:postgres://…[:tx][:poll=DURATION][:workers=N]")
		}
		return s, false, nil
	}
	for {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			break
		}
		opt := rest[i+1:]
		switch {
		case opt == "tx":
			s.Tx = true
		case strings.HasPrefix(opt, "poll="):
			d, err := time.ParseDuration(strings.TrimPrefix(opt, "poll="))
			if err != nil || d < time.Millisecond {
				return s, true, fmt.Errorf("river: bad poll %q (a duration ≥ 1ms)", opt)
			}
			s.Poll = d
		case strings.HasPrefix(opt, "workers="):
			n, err := strconv.Atoi(strings.TrimPrefix(opt, "workers="))
			if err != nil || n < 1 {
				return s, true, fmt.Errorf("river: bad workers %q (an integer ≥ 1)", opt)
			}
			s.Workers = n
		default:
			s.URL = rest
			return s, true, s.check()
		}
		rest = rest[:i]
	}
	s.URL = rest
	return s, true, s.check()
}

func (s Spec) check() error {
	if !strings.HasPrefix(s.URL, "postgres://") && !strings.HasPrefix(s.URL, "postgresql://") {
		return fmt.Errorf("river: want a postgres:// URL, not %q", s.URL)
	}
	_, err := pgxpool.ParseConfig(s.URL)
	return err
}

// Name labels the target without the URL (it may hold a password).
func (s Spec) Name() string {
	n := "river"
	if s.Tx {
		n += ":tx"
	}
	if s.Poll > 0 {
		n += ":poll=" + s.Poll.String()
	}
	if s.Workers > 0 {
		n += ":workers=" + strconv.Itoa(s.Workers)
	}
	return n
}

// Resolve maps a river target word to its factory.
func Resolve(spec string) (bench.Factory, bool, error) {
	return bench.ResolveParsed(spec, Parse, Open)
}

// jobArgs is the benchmark's job: the payload (JSON, so base64).
type jobArgs struct {
	P []byte `json:"p"`
}

func (jobArgs) Kind() string { return "delayq_bench" }

// worker hands every job to the current Consume's handler.
type worker struct {
	river.WorkerDefaults[jobArgs]
	handle atomic.Pointer[func([]bench.Delivery)]
	bad    atomic.Pointer[error]
}

func (w *worker) Work(_ context.Context, job *river.Job[jobArgs]) error {
	now := time.Now()
	seq, err := bench.SeqOf(job.Args.P)
	if err != nil {
		w.bad.CompareAndSwap(nil, &err)
		return nil
	}
	if h := w.handle.Load(); h != nil {
		(*h)([]bench.Delivery{{Seq: seq, At: now}})
	}
	return nil
}

// Target is River on its own schema.
type Target struct {
	spec    Spec
	schema  string
	pool    *pgxpool.Pool
	workers *river.Workers
	w       *worker
	client  *river.Client[pgx.Tx] // inserts only; Consume starts its own
	log     *slog.Logger
	mu      sync.Mutex
}

// Conns is the pool size: 64 transactional callers plus River's own
// connections (producer, notifier, completer, leader election).
const Conns = 80

// Open creates a fresh schema, migrates River into it and makes an
// insert-only client.
func Open(ctx context.Context, s Spec, o bench.OpenOptions) (*Target, error) {
	if !o.Durable {
		return nil, errors.New("river is as durable as its PostgreSQL is configured: run with --durable (default)")
	}
	pc, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = Conns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	t := &Target{spec: s, pool: pool, schema: fmt.Sprintf("river%xr%d", time.Now().UnixNano(), o.Run),
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	fail := func(err error) (*Target, error) {
		_ = t.Close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{t.schema}.Sanitize()); err != nil { // #nosec G202 -- a quoted identifier built here from a number
		pool.Close()
		return nil, fmt.Errorf("river: create schema: %w", err)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: t.schema, Logger: t.log})
	if err != nil {
		return fail(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fail(fmt.Errorf("river: migrate: %w", err))
	}
	t.w = &worker{}
	t.workers = river.NewWorkers()
	river.AddWorker(t.workers, t.w)
	t.client, err = river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: t.schema, Workers: t.workers, Logger: t.log})
	if err != nil {
		return fail(err)
	}
	return t, nil
}

func params(msgs []bench.Msg) []river.InsertManyParams {
	ps := make([]river.InsertManyParams, len(msgs))
	for i, m := range msgs {
		ps[i] = river.InsertManyParams{Args: jobArgs{P: m.Payload}, InsertOpts: &river.InsertOpts{ScheduledAt: m.DeliverAt}}
	}
	return ps
}

// Send implements bench.Target.
func (t *Target) Send(ctx context.Context, msgs []bench.Msg) error {
	if !t.spec.Tx {
		if len(msgs) == 1 {
			_, err := t.client.Insert(ctx, jobArgs{P: msgs[0].Payload}, &river.InsertOpts{ScheduledAt: msgs[0].DeliverAt})
			return err
		}
		_, err := t.client.InsertManyFast(ctx, params(msgs))
		return err
	}
	tx, err := t.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if len(msgs) == 1 {
		_, err = t.client.InsertTx(ctx, tx, jobArgs{P: msgs[0].Payload}, &river.InsertOpts{ScheduledAt: msgs[0].DeliverAt})
	} else {
		_, err = t.client.InsertManyFastTx(ctx, tx, params(msgs))
	}
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// Consume starts a working client with MaxWorkers = consumers (or
// workers=N) until ctx ends, then stops it (running jobs finish).
func (t *Target) Consume(ctx context.Context, o bench.ConsumeOptions, handle func([]bench.Delivery)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := max(o.Consumers, 1)
	if t.spec.Workers > 0 {
		n = t.spec.Workers
	}
	cfg := &river.Config{Schema: t.schema, Workers: t.workers, Logger: t.log,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: n}}}
	if t.spec.Poll > 0 {
		cfg.FetchCooldown, cfg.FetchPollInterval = t.spec.Poll, t.spec.Poll
	}
	c, err := river.NewClient(riverpgxv5.New(t.pool), cfg)
	if err != nil {
		return err
	}
	t.w.handle.Store(&handle)
	defer t.w.handle.Store(nil)
	if err := c.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Stop(sctx)
	if bad := t.w.bad.Load(); bad != nil {
		return *bad
	}
	return err
}

// Close drops the run's schema and closes the pool.
func (t *Target) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := t.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{t.schema}.Sanitize()+" CASCADE") // #nosec G202 -- a quoted identifier built in Open from a number
	t.pool.Close()
	return err
}
