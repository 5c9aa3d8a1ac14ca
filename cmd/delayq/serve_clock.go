package main

import (
	"flag"
	"io"
	"log/slog"

	"github.com/delayq/delayq/internal/clock"
)

// clockOffsetFlag shifts the engine's clock: the reliability scenarios run
// several servers on one Redis with clocks that disagree, as real machines'
// do, and check that Redis's clock alone decides. Hidden from -h and the
// README: no deployment has a reason to set it.
const clockOffsetFlag = "clock-offset"

// serveClock is the engine's clock: the system's, or shifted by
// --clock-offset.
func serveClock(o *serveOpts, log *slog.Logger) clock.Clock {
	if o.clockOffset == 0 {
		return nil // the engine's default, clock.Real
	}
	log.Warn("this server's clock is shifted (--clock-offset, testing only)", "offset", o.clockOffset)
	return clock.Offset{By: o.clockOffset}
}

// printServeDefaults prints the flags' help without the hidden ones.
func printServeDefaults(w io.Writer) {
	all := serveFlags(&serveOpts{})
	shown := flag.NewFlagSet(all.Name(), flag.ContinueOnError)
	all.VisitAll(func(f *flag.Flag) {
		if f.Name != clockOffsetFlag {
			shown.Var(f.Value, f.Name, f.Usage)
		}
	})
	printFlags(w, shown)
}
