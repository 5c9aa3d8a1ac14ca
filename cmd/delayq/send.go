package main

import (
	"context"
	"fmt"
	"io"

	"github.com/delayq/delayq"
)

func init() {
	register("send", "schedule a message: send TOPIC [PAYLOAD|-] [--delay 30m | --at TIME] [--id ID]", runSend)
}

// runSend: delayq send TOPIC [PAYLOAD|-] [--delay D | --at T] [--id ID]
// [--header k=v]... [--max-attempts N] [--priority N]. No PAYLOAD sends an empty one;
// "-" reads it from standard input.
func runSend(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("send", "send TOPIC [PAYLOAD|-] [--delay 30m | --at RFC3339] [--id ID] [--header k=v]... [--max-attempts N] [--priority N]", stdout, stderr)
	var wf whenFlags
	wf.register(c.fs)
	id := c.fs.String("id", "", "message `id`; makes the send idempotent (default: a new time-sortable id)")
	headers := headerFlag{}
	c.fs.Var(headers, "header", "header `key=value` (repeatable)")
	maxAttempts := c.fs.Int("max-attempts", 0, "failures before the message goes dead (default: the topic's)")
	priority := c.fs.Int("priority", 0, "0 (the most urgent) to 255: among the topic's due messages, lower is leased first")
	pos, code, ok := c.parse(args, 1, 2)
	if !ok {
		return code
	}
	w, err := wf.when(false)
	if err != nil {
		return c.usageErr("%v", err)
	}
	var payload []byte
	if len(pos) == 2 {
		payload = []byte(pos[1])
		if pos[1] == "-" {
			if payload, err = io.ReadAll(io.LimitReader(stdin, 64<<20)); err != nil {
				return c.usageErr("read payload from standard input: %v", err)
			}
		}
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	req := delayq.SendRequest{ID: *id, Payload: payload, When: w, MaxAttempts: *maxAttempts, Priority: *priority}
	if len(headers) > 0 {
		req.Headers = headers
	}
	m, err := cl.Send(ctx, pos[0], req)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(toWireMessage(m))
	}
	if m.Duplicate {
		fmt.Fprintf(stdout, "duplicate %s/%s: already %s, due %s; nothing new was created\n", m.Topic, m.ID, m.State, when(m.DeliverAt))
		return exitOK
	}
	fmt.Fprintf(stdout, "sent %s/%s: %s, due %s\n", m.Topic, m.ID, m.State, when(m.DeliverAt))
	return exitOK
}
