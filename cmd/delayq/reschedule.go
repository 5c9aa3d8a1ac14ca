package main

import (
	"context"
	"fmt"
	"io"
)

func init() {
	register("reschedule", "move a pending message: reschedule TOPIC ID (--delay D | --at TIME)", runReschedule)
}

func runReschedule(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("reschedule", "reschedule TOPIC ID (--delay 30m | --at RFC3339) [--json]", stdout, stderr)
	var wf whenFlags
	wf.register(c.fs)
	pos, code, ok := c.parse(args, 2, 2)
	if !ok {
		return code
	}
	w, err := wf.when(true)
	if err != nil {
		return c.usageErr("%v", err)
	}
	c.subject = "message " + pos[0] + "/" + pos[1]
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	m, err := cl.Reschedule(ctx, pos[0], pos[1], w)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(toWireMessage(m))
	}
	fmt.Fprintf(stdout, "rescheduled %s/%s: %s, due %s\n", m.Topic, m.ID, m.State, when(m.DeliverAt))
	return exitOK
}
