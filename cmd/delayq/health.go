package main

import (
	"context"
	"fmt"
	"io"
)

func init() {
	register("health", "exit 0 when the server is ready (GET /readyz), else 1 with the reason: for container and load-balancer probes", runHealth)
}

// runHealth is a probe that needs nothing but this binary (the container
// image has no curl): one request, no retries, bounded by --timeout.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("health", "health [--server URL] [--timeout 3s]", stdout, stderr)
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := cl.Ready(ctx); err != nil {
		fmt.Fprintf(stderr, "delayq health: not ready: %v\n", err)
		return exitRequest
	}
	fmt.Fprintln(stdout, "ready")
	return exitOK
}
