package main

import (
	"context"
	"io"
)

func init() {
	register("get", "show a message and its state: get TOPIC ID", runGet)
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("get", "get TOPIC ID [--json]", stdout, stderr)
	pos, code, ok := c.parse(args, 2, 2)
	if !ok {
		return code
	}
	c.subject = "message " + pos[0] + "/" + pos[1]
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	m, err := cl.Get(ctx, pos[0], pos[1])
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(toWireMessage(m))
	}
	printMessage(stdout, m)
	return exitOK
}
