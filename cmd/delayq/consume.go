package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq"
)

func init() {
	register("consume", "lease messages as they come due, print and ack them: consume TOPIC [--count N]", runConsume)
}

type consumeOpts struct {
	max, count int
	lease      time.Duration
	wait       time.Duration
	noAck      bool
	exec       string
}

// runConsume leases messages of a topic and prints each as it comes: one
// line "ID  attempt N  PAYLOAD" (or one JSON message per line with --json).
// Each is acked after printing unless --no-ack (the lease then expires and
// the message is redelivered): the acks go with the next lease, or in a
// batch ack after waiting 100 ms (a slow --exec), at --count and on an
// interrupt. With --exec CMD, CMD runs per message under
// sh -c with the payload on standard input and DELAYQ_TOPIC, DELAYQ_ID,
// DELAYQ_ATTEMPT set; exit status 0 acks, anything else nacks. It runs until
// interrupted, or until --count messages were handled.
func runConsume(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("consume", "consume TOPIC [--max N] [--lease 30s] [--wait 30s] [--count N] [--no-ack] [--exec CMD] [--json]", stdout, stderr)
	var o consumeOpts
	c.fs.IntVar(&o.max, "max", 10, "messages per lease request (1-1000)")
	c.fs.DurationVar(&o.lease, "lease", 0, "lease per message (default: the topic's)")
	c.fs.DurationVar(&o.wait, "wait", delayq.MaxWait, "long-poll per request when nothing is due (max 30s)")
	c.fs.IntVar(&o.count, "count", 0, "stop after N messages (0: run until interrupted)")
	c.fs.BoolVar(&o.noAck, "no-ack", false, "do not ack: the messages are redelivered when their leases expire")
	c.fs.StringVar(&o.exec, "exec", "", "run `command` (sh -c) per message, payload on stdin; exit 0 acks, else nacks")
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	switch {
	case o.max < 1 || o.max > delayq.MaxBatch:
		return c.usageErr("--max must be between 1 and %d", delayq.MaxBatch)
	case o.count < 0:
		return c.usageErr("--count must not be negative")
	case o.wait < 0 || o.wait > delayq.MaxWait:
		return c.usageErr("--wait must be between 0 and %s", delayq.MaxWait)
	case o.lease < 0:
		return c.usageErr("--lease must not be negative")
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	topic := pos[0]
	acks := &pendingAcks{cl: cl, topic: topic, wait: consumeAckWait}
	if o.lease > 0 {
		acks.wait = min(acks.wait, o.lease/10)
	}
	for handled := 0; o.count == 0 || handled < o.count; {
		n := o.max
		if o.count > 0 {
			n = min(n, o.count-handled)
		}
		msgs, err := acks.lease(ctx, delayq.LeaseRequest{Max: n, Lease: o.lease, Wait: o.wait})
		if ctx.Err() != nil {
			// Interrupted: leases we may hold simply expire; the acks of
			// what we handled must still land.
			return c.sendAcks(ctx, acks)
		}
		if err != nil {
			return c.fail(errors.Join(err, acks.sendDetached(ctx, c.timeout)))
		}
		for _, m := range msgs {
			if code := c.consumeOne(ctx, cl, m, &o, acks); code != exitOK {
				return code
			}
			handled++
		}
	}
	return c.sendAcks(ctx, acks)
}

// consumeAckWait bounds how long a handled message's ack waits to go with
// the next lease (the Go Worker's AckFlush): with a slow --exec the acks
// go in calls of their own rather than let their leases run out.
const consumeAckWait = 100 * time.Millisecond

// pendingAcks are the acks of handled messages waiting for the next
// lease, which carries them (one call where an ack and a lease made two).
type pendingAcks struct {
	cl    *delayq.Client
	topic string
	wait  time.Duration

	items []delayq.AckRequest
	ids   []string // message ids of items, for error messages
	since time.Time
	// noLease: the server refused acks with a lease (older than the
	// field); acks go in calls of their own from then on.
	noLease bool
}

func (p *pendingAcks) add(m *delayq.Message) {
	if len(p.items) == 0 {
		p.since = time.Now()
	}
	p.items = append(p.items, delayq.AckRequest{ID: m.ID, Receipt: m.Receipt})
	p.ids = append(p.ids, m.ID)
}

// lease leases with the waiting acks; its error is also the first of them
// the server refused. A lease that fails leaves them waiting: carried out
// or not, nobody can tell, and an ack repeated with its receipt answers ok.
func (p *pendingAcks) lease(ctx context.Context, req delayq.LeaseRequest) ([]*delayq.Message, error) {
	if len(p.items) > 0 && !p.noLease {
		msgs, errs, err := p.cl.AckAndLease(ctx, p.topic, p.items, req)
		if !errors.Is(err, delayq.ErrAcksWithLeaseUnsupported) {
			if err == nil {
				err = p.done(errs)
			}
			return msgs, err
		}
		p.noLease = true
	}
	if err := p.send(ctx); err != nil {
		return nil, err
	}
	return p.cl.Lease(ctx, p.topic, req)
}

// send sends the waiting acks in a batch ack.
func (p *pendingAcks) send(ctx context.Context) error {
	if len(p.items) == 0 {
		return nil
	}
	errs, err := p.cl.AckBatch(ctx, p.topic, p.items)
	if err != nil {
		return fmt.Errorf("ack %s: %w", strings.Join(p.ids, ", "), err)
	}
	return p.done(errs)
}

// done empties the wait after the acks were sent, errs being their
// per-item results, and returns the first the server refused.
func (p *pendingAcks) done(errs []error) error {
	var first error
	for i, err := range errs {
		if err != nil {
			first = fmt.Errorf("ack %s: %w", p.ids[i], err)
			break
		}
	}
	p.items, p.ids = p.items[:0], p.ids[:0]
	return first
}

// sendDetached sends the waiting acks within timeout, even when ctx was
// cancelled meanwhile.
func (p *pendingAcks) sendDetached(ctx context.Context, timeout time.Duration) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	return p.send(actx)
}

// sendAcks sends the waiting acks (sendDetached); the exit code says how.
func (c *cliCmd) sendAcks(ctx context.Context, p *pendingAcks) int {
	if err := p.sendDetached(ctx, c.timeout); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// consumeOne prints or runs one message; its ack waits in acks for the
// next lease, or goes at once in a batch ack when the oldest waiting ack
// has waited acks.wait or the message took that long to handle; a failed
// --exec nacks it at once.
func (c *cliCmd) consumeOne(ctx context.Context, cl *delayq.Client, m *delayq.Message, o *consumeOpts, acks *pendingAcks) int {
	if c.json {
		c.printJSON(toWireMessage(m))
	} else if o.exec == "" {
		fmt.Fprintf(c.stdout, "%s  attempt %d  %s\n", m.ID, m.Attempt, payloadText(m.Payload))
	}
	var runErr error
	started := time.Now()
	if o.exec != "" {
		runErr = c.runExec(ctx, o.exec, m)
	}
	took := time.Since(started)
	if o.noAck {
		return exitOK
	}
	// The ack must land even if we were interrupted meanwhile.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	if runErr != nil {
		fmt.Fprintf(c.stderr, "delayq consume: %s/%s: %v; nacked\n", m.Topic, m.ID, runErr)
		if _, err := cl.Nack(actx, m.Topic, m.ID, m.Receipt, delayq.NackRequest{Reason: runErr.Error()}); err != nil {
			return c.fail(fmt.Errorf("nack %s: %w", m.ID, err))
		}
		return exitOK
	}
	acks.add(m)
	// A message that took the acks' longest wait predicts another as
	// slow: its ack goes now, not after the next one.
	if took >= acks.wait || time.Since(acks.since) >= acks.wait {
		if err := acks.send(actx); err != nil {
			return c.fail(err)
		}
	}
	return exitOK
}

// runExec runs command with the payload on stdin; its output goes to ours.
// The error says how it failed, with the tail of its stderr.
func (c *cliCmd) runExec(ctx context.Context, command string, m *delayq.Message) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", command) // #nosec G204 -- --exec is the operator's own shell command, run by design; message data goes to stdin/env, never into the command line
	cmd.Stdin = bytes.NewReader(m.Payload)
	cmd.Stdout = c.stdout
	var errBuf bytes.Buffer
	cmd.Stderr = io.MultiWriter(c.stderr, &errBuf)
	cmd.Env = append(os.Environ(), "DELAYQ_TOPIC="+m.Topic, "DELAYQ_ID="+m.ID, "DELAYQ_ATTEMPT="+strconv.Itoa(m.Attempt))
	if err := cmd.Run(); err != nil {
		tail := strings.TrimSpace(errBuf.String())
		if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
			tail = tail[i+1:]
		}
		if tail != "" {
			return fmt.Errorf("exec: %v: %s", err, truncate(tail, 200))
		}
		return fmt.Errorf("exec: %v", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
