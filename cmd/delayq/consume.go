package main

import (
	"bytes"
	"context"
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
// the message is redelivered). With --exec CMD, CMD runs per message under
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
	for handled := 0; o.count == 0 || handled < o.count; {
		n := o.max
		if o.count > 0 {
			n = min(n, o.count-handled)
		}
		msgs, err := cl.Lease(ctx, topic, delayq.LeaseRequest{Max: n, Lease: o.lease, Wait: o.wait})
		if ctx.Err() != nil {
			return exitOK // interrupted: leases we may hold simply expire
		}
		if err != nil {
			return c.fail(err)
		}
		for _, m := range msgs {
			if code := c.consumeOne(ctx, cl, m, &o); code != exitOK {
				return code
			}
			handled++
		}
	}
	return exitOK
}

func (c *cliCmd) consumeOne(ctx context.Context, cl *delayq.Client, m *delayq.Message, o *consumeOpts) int {
	if c.json {
		c.printJSON(toWireMessage(m))
	} else if o.exec == "" {
		fmt.Fprintf(c.stdout, "%s  attempt %d  %s\n", m.ID, m.Attempt, payloadText(m.Payload))
	}
	var runErr error
	if o.exec != "" {
		runErr = c.runExec(ctx, o.exec, m)
	}
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
	if err := cl.Ack(actx, m.Topic, m.ID, m.Receipt); err != nil {
		return c.fail(fmt.Errorf("ack %s: %w", m.ID, err))
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
