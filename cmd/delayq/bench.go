package main

import (
	"context"
	"io"
	"os"

	"github.com/delayq/delayq/bench/dqtarget"
	"github.com/delayq/delayq/internal/bench"
)

func init() {
	register("bench", "load generator: send, drain, lateness, mixed, paced, burst, pending, forward (see docs/benchmarks.md)", runBench)
}

// benchCLI is `delayq bench`: the scenario runner of internal/bench with
// delayq's own targets. The peers (asynq, beanstalkd) are in the separate
// bench/peers module's peerbench, which runs the same scenarios.
var benchCLI = bench.CLI{
	Name:          "delayq bench",
	Resolve:       dqtarget.Resolve,
	Targets:       dqtarget.Targets + "; peers: see bench/peers (peerbench)",
	DefaultTarget: "embedded",
	Forward:       dqtarget.ForwardFactories,
	Stderr:        os.Stderr,
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return benchCLI.Main(ctx, args, stdout, stderr)
}
