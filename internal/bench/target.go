// Package bench is the load generator behind `delayq bench` and the
// peer comparison tool (bench/peers, cmd peerbench): the Target seam that
// every system under test implements, the scenarios (send, drain,
// lateness, mixed, pending), log-bucketed latency histograms, the
// lateness checker, and table / JSON / SVG output.
//
// It imports only the standard library, so targets for other systems
// (asynq, beanstalkd) live in the separate bench/peers module and the
// product's go.mod never depends on their clients. delayq's own targets
// live in bench/dqtarget.
//
// Every message carries its benchmark sequence number in the first 8
// bytes of its payload (the rest is incompressible filler), so the checker
// identifies deliveries the same way on every system whatever ids it uses.
package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Msg is one message to schedule.
type Msg struct {
	// Seq is the benchmark's number for the message; Payload starts with it.
	Seq     uint64
	Payload []byte
	// DeliverAt is the requested due time (zero: due now). A target whose
	// API cannot express it exactly (beanstalkd's delays are whole seconds,
	// relative to the put) overwrites it in Send with the due time the
	// system was actually given, so lateness is measured against what the
	// system promised, never against something it could not be told.
	DeliverAt time.Time
}

// Delivery is one message handed to a consumer.
type Delivery struct {
	Seq uint64
	// At is when the consumer received it (before the ack).
	At time.Time
}

// ConsumeOptions configure a consumer run.
type ConsumeOptions struct {
	// Consumers is the number of concurrent consumers (long-polling
	// connections, or worker goroutines for push-style systems).
	Consumers int
	// Max is the largest batch one receive may return (lease max); systems
	// without batch receive ignore it.
	Max int
	// Wait is the long-poll wait of one receive.
	Wait time.Duration
	// PipelineAcks asks each consumer to lease again while its acks are
	// sent (Config.Acks); targets that cannot ack that way ignore it.
	PipelineAcks bool
}

// Target is a system under test. Send may be called from many goroutines
// at once. A target is opened fresh for every run and closed after it.
type Target interface {
	// Send schedules msgs durably (as durable as the target was configured
	// to be) as one batch, or one by one when the system has no batch send;
	// it returns when every message is accepted.
	Send(ctx context.Context, msgs []Msg) error
	// Consume receives messages with opts.Consumers concurrent consumers
	// until ctx is done, calling handle (from any goroutine) with every
	// batch received and acknowledging the batch after handle returns.
	// It returns nil when ctx ends.
	Consume(ctx context.Context, opts ConsumeOptions, handle func([]Delivery)) error
	// Close releases everything the target started (processes, temp dirs).
	Close() error
}

// MemReporter is implemented by targets that can tell the resident memory
// of the process that holds the queue state.
type MemReporter interface {
	// RSS returns resident bytes and what was measured (e.g. "redis-server VmRSS").
	RSS() (int64, string, error)
}

// Restarter is implemented by targets that can stop and start the process
// (or the in-process engine) that holds the queue, keeping its data.
type Restarter interface {
	// Restart stops the system and starts it again; it returns the time
	// the start began. The pending scenario measures from then until the
	// first due message is received.
	Restart(ctx context.Context) (time.Time, error)
}

// Factory opens a fresh target for one run.
type Factory struct {
	// Name labels the target in tables, JSON and plots.
	Name string
	// Open starts the target. durable asks for every accepted send to be
	// fsync'd (or the system's equivalent); false is for ceilings only.
	Open func(ctx context.Context, o OpenOptions) (Target, error)
}

// OpenOptions are passed to Factory.Open.
type OpenOptions struct {
	Durable bool
	// Run is 1-based, for unique topic / queue names.
	Run int
}

// Resolver maps a --target word to a factory; ok is false when the word is
// not this resolver's.
type Resolver func(spec string) (f Factory, ok bool, err error)

// ChainResolvers tries each resolver in turn.
func ChainResolvers(rs ...Resolver) Resolver {
	return func(spec string) (Factory, bool, error) {
		for _, r := range rs {
			if f, ok, err := r(spec); ok || err != nil {
				return f, ok, err
			}
		}
		return Factory{}, false, nil
	}
}

// SeqLen is the number of payload bytes that carry the sequence number.
const SeqLen = 8

// ErrShortPayload is returned by SeqOf for a payload without a sequence number.
var ErrShortPayload = errors.New("bench: payload shorter than a sequence number")

// SeqOf reads the sequence number at the start of a payload.
func SeqOf(payload []byte) (uint64, error) {
	if len(payload) < SeqLen {
		return 0, ErrShortPayload
	}
	return binary.BigEndian.Uint64(payload), nil
}

// payloadMaker makes payloads of a fixed size: the sequence number and then
// pseudo-random (incompressible) filler shared by all messages of a run.
type payloadMaker struct {
	filler []byte
}

func newPayloadMaker(size int, seed uint64) *payloadMaker {
	size = max(size, SeqLen)
	f := make([]byte, size-SeqLen)
	x := seed | 1
	for i := range f {
		// xorshift64*: cheap, deterministic, incompressible enough.
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		f[i] = byte((x * 2685821657736338717) >> 56)
	}
	return &payloadMaker{filler: f}
}

func (p *payloadMaker) make(seq uint64) []byte {
	b := make([]byte, SeqLen+len(p.filler))
	binary.BigEndian.PutUint64(b, seq)
	copy(b[SeqLen:], p.filler)
	return b
}

// CPUReporter is implemented by targets whose queue runs in processes the
// benchmark started (delayq serve, redis-server, beanstalkd): the CPU they
// spend per message is read from /proc around a run. In-process targets
// report the benchmark process itself (their own work counts too, and
// they say so).
type CPUReporter interface {
	// ServerCPU returns the user + system CPU time the server processes
	// have used so far, and which processes were measured.
	ServerCPU() (time.Duration, string, error)
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (the kernel's ABI,
// whatever its internal HZ).
const clockTicks = 100

// ProcCPU returns the user + system CPU time of process pid (all its
// threads, live and exited) from /proc/<pid>/stat, at 10 ms resolution.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(b, pid)
}

func parseStatCPU(b []byte, pid int) (time.Duration, error) {
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// ResolveParsed is a target word's factory for targets that parse their
// word into a spec (parse's ok says the word names this kind of target)
// and open a run from it.
func ResolveParsed[S interface{ Name() string }, T Target](spec string, parse func(string) (S, bool, error), open func(context.Context, S, OpenOptions) (T, error)) (Factory, bool, error) {
	s, ok, err := parse(spec)
	if !ok || err != nil {
		return Factory{}, ok, err
	}
	return Factory{Name: s.Name(), Open: func(ctx context.Context, o OpenOptions) (Target, error) {
		t, err := open(ctx, s, o)
		if err != nil {
			// not t: a nil *T in a Target is not a nil Target
			return nil, err
		}
		return t, nil
	}}, true, nil
}
