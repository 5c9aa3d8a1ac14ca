// Command peerbench runs the delayq benchmark scenarios (internal/bench)
// on delayq and its peers side by side:
//
//	cd bench/peers && go run ./cmd/peerbench lateness --target embedded,asynq,beanstalkd --runs 3
//
// The first target is the one the others are compared with. See
// docs/benchmarks.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/delayq/delayq/bench/dqtarget"
	"github.com/delayq/delayq/bench/peers"
	"github.com/delayq/delayq/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cli := bench.CLI{
		Name:          "peerbench",
		Resolve:       bench.ChainResolvers(dqtarget.Resolve, peers.Resolve),
		Targets:       dqtarget.Targets + "; " + peers.Targets,
		DefaultTarget: "embedded,asynq,beanstalkd",
		Stderr:        os.Stderr,
	}
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
