// Command wheelbench runs the timing-wheel side-by-side benchmark; see
// package wheelbench. Example quick run:
//
//	go run ./internal/bench/wheelbench/cmd/wheelbench -sizes 100000,1000000 -long 0
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/bench/wheelbench"
)

func main() {
	var cfg wheelbench.Config
	sizes := flag.String("sizes", "100000,1000000,10000000", "comma-separated pending counts for delays in [0,max]")
	flag.DurationVar(&cfg.MaxDelay, "max", 0, "maximum delay of the sized workloads (default 10s)")
	flag.IntVar(&cfg.LongSize, "long", 1_000_000, "pending count for the long-delay workload; 0 skips it")
	flag.DurationVar(&cfg.LongDelay, "longmax", 0, "maximum delay of the long workload (default 720h)")
	impls := flag.String("impls", "wheel,afterfunc,heap", "implementations to run (also: wheel-oneshot, cascading ahead off; wheel-precise, the runner on a timerfd as the server runs it)")
	flag.BoolVar(&cfg.NoFire, "nofire", false, "skip the real-time fire phase")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	flag.Parse()
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "wheelbench: bad size %q\n", s)
			os.Exit(2)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	if cfg.LongSize == 0 {
		cfg.LongSize = -1
	}
	cfg.Impls = strings.Split(*impls, ",")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := wheelbench.Run(ctx, os.Stdout, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "wheelbench:", err)
		os.Exit(1)
	}
}
