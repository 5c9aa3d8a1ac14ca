// Package beanstalktarget benchmarks beanstalkd (Debian package
// beanstalkd) through github.com/beanstalkd/go-beanstalk. The benchmark
// starts beanstalkd itself on a free loopback port; durable runs keep a
// binlog in a temp dir with -f0 (fsync every write); non-durable runs
// (--durable=false) write the binlog but never fsync it (-F), like
// delayq's NoSync and Redis's appendfsync no.
//
// beanstalkd has neither batch put nor batch reserve: a batch is put job
// by job and lease-max does not apply. Its delays are whole seconds
// relative to the put, so Send rounds the requested delay up to whole
// seconds and reports the due time it actually asked for (see bench.Msg).
package beanstalktarget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/delayq/delayq/bench/peers/internal/proc"
	"github.com/delayq/delayq/internal/bench"
)

// Resolve accepts "beanstalkd" and "beanstalkd:fsync=DURATION" (a
// durable run's binlog fsync'd at most every DURATION, beanstalkd -f MS,
// instead of after every write).
func Resolve(spec string) (bench.Factory, bool, error) {
	if spec != "beanstalkd" && !strings.HasPrefix(spec, "beanstalkd:") {
		return bench.Factory{}, false, nil
	}
	fsync := time.Duration(0)
	if rest, ok := strings.CutPrefix(spec, "beanstalkd:"); ok {
		v, ok := strings.CutPrefix(rest, "fsync=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d < time.Millisecond {
			return bench.Factory{}, true, fmt.Errorf("want beanstalkd or beanstalkd:fsync=DURATION (≥ 1ms), not %q", spec)
		}
		fsync = d
	}
	return bench.Factory{Name: spec, Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
		return open(ctx, o, fsync)
	}}, true, nil
}

// Target is a beanstalkd process and a pool of connections.
type Target struct {
	bs   proc.Process
	dir  string
	addr string
	tube string

	mu   sync.Mutex
	pool []*beanstalk.Conn
}

const ttr = time.Minute

func open(ctx context.Context, o bench.OpenOptions, fsync time.Duration) (bench.Target, error) {
	bin, err := proc.Find("beanstalkd", "apt-get install beanstalkd", "/usr/bin/beanstalkd")
	if err != nil {
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "delayq-bench-beanstalkd-")
	if err != nil {
		return nil, err
	}
	t := &Target{dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port), tube: fmt.Sprintf("bench%d", o.Run)}
	args := []string{"-l", "127.0.0.1", "-p", fmt.Sprint(port)}
	args = append(args, "-b", dir)
	if o.Durable {
		args = append(args, "-f", fmt.Sprint(fsync.Milliseconds()))
	} else {
		args = append(args, "-F")
	}
	t.bs = proc.Process{Name: "beanstalkd", Path: bin, Args: args}
	if _, err := t.bs.Start(ctx, t.ping, 30*time.Second); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

func (t *Target) ping() error {
	c, err := beanstalk.DialTimeout("tcp", t.addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func (t *Target) get() (*beanstalk.Conn, error) {
	t.mu.Lock()
	if n := len(t.pool); n > 0 {
		c := t.pool[n-1]
		t.pool = t.pool[:n-1]
		t.mu.Unlock()
		return c, nil
	}
	t.mu.Unlock()
	return beanstalk.DialTimeout("tcp", t.addr, 5*time.Second)
}

func (t *Target) put(c *beanstalk.Conn) {
	t.mu.Lock()
	t.pool = append(t.pool, c)
	t.mu.Unlock()
}

// Send puts every message on one pooled connection.
func (t *Target) Send(ctx context.Context, msgs []bench.Msg) error {
	c, err := t.get()
	if err != nil {
		return err
	}
	tube := beanstalk.NewTube(c, t.tube)
	for i := range msgs {
		m := &msgs[i]
		var delay time.Duration
		now := time.Now()
		if !m.DeliverAt.IsZero() {
			if d := m.DeliverAt.Sub(now); d > 0 {
				delay = time.Duration(math.Ceil(d.Seconds())) * time.Second
				m.DeliverAt = now.Add(delay) // what beanstalkd was told
			}
		}
		if _, err := tube.Put(m.Payload, 1024, delay, ttr); err != nil {
			_ = c.Close() // the Put error is the one to report
			return err
		}
		if ctx.Err() != nil {
			t.put(c)
			return ctx.Err()
		}
	}
	t.put(c)
	return nil
}

// Consume runs one connection per consumer: reserve-with-timeout, then
// delete. Cancelling ctx closes the connections. Deletes are always
// serial (opts.PipelineAcks is ignored): beanstalkd deletes a reserved
// job only on the connection that reserved it, and a waiting reserve
// holds that connection.
func (t *Target) Consume(ctx context.Context, o bench.ConsumeOptions, handle func([]bench.Delivery)) error {
	var wg sync.WaitGroup
	errc := make(chan error, max(o.Consumers, 1))
	wait := max(time.Second, min(o.Wait, 5*time.Second))
	for range max(o.Consumers, 1) {
		c, err := beanstalk.DialTimeout("tcp", t.addr, 5*time.Second)
		if err != nil {
			return err
		}
		stop := context.AfterFunc(ctx, func() { _ = c.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			ts := beanstalk.NewTubeSet(c, t.tube)
			for ctx.Err() == nil {
				id, body, err := ts.Reserve(wait)
				if ctx.Err() != nil {
					return
				}
				if errors.Is(err, beanstalk.ErrTimeout) {
					continue
				}
				if err != nil {
					errc <- fmt.Errorf("reserve: %w", err)
					return
				}
				now := time.Now()
				seq, err := bench.SeqOf(body)
				if err != nil {
					errc <- err
					return
				}
				handle([]bench.Delivery{{Seq: seq, At: now}})
				if err := c.Delete(id); err != nil && ctx.Err() == nil {
					errc <- fmt.Errorf("delete: %w", err)
					return
				}
			}
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

// ServerCPU implements bench.CPUReporter.
func (t *Target) ServerCPU() (time.Duration, string, error) {
	cpu, err := bench.ProcCPU(t.bs.Pid())
	return cpu, "beanstalkd", err
}

// RSS implements bench.MemReporter.
func (t *Target) RSS() (int64, string, error) {
	n, err := t.bs.RSS()
	return n, "VmRSS of beanstalkd", err
}

// Restart implements bench.Restarter: SIGTERM beanstalkd, start it again
// on the same binlog dir.
func (t *Target) Restart(ctx context.Context) (time.Time, error) {
	t.dropPool()
	t.bs.Stop()
	return t.bs.Start(ctx, t.ping, 5*time.Minute)
}

func (t *Target) dropPool() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.pool {
		_ = c.Close()
	}
	t.pool = nil
}

// Close stops beanstalkd and removes its binlog.
func (t *Target) Close() error {
	t.dropPool()
	t.bs.Stop()
	return os.RemoveAll(t.dir)
}
