package main

import (
	"context"
	"fmt"
	"io"

	"github.com/delayq/delayq/internal/wire"
)

func init() {
	register("cancel", "remove a pending message: cancel TOPIC ID", runCancel)
}

func runCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("cancel", "cancel TOPIC ID [--json]", stdout, stderr)
	pos, code, ok := c.parse(args, 2, 2)
	if !ok {
		return code
	}
	c.subject = "message " + pos[0] + "/" + pos[1]
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	m, err := cl.Cancel(ctx, pos[0], pos[1])
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(wire.CancelResponse{Cancelled: true, PriorState: string(m.State), Message: toWireMessage(m)})
	}
	fmt.Fprintf(stdout, "cancelled %s/%s (was %s, due %s)\n", pos[0], pos[1], m.State, when(m.DeliverAt))
	return exitOK
}
