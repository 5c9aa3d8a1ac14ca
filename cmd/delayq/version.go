package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/delayq/delayq/internal/buildinfo"
)

func init() {
	register("version", "print the version, VCS revision and Go version of this binary", runVersion)
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print as JSON")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(stdout, "Usage: delayq version [--json]\n\nFlags:")
		printFlags(stdout, fs)
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "delayq version: %v (run 'delayq version -h')\n", err)
		return exitUsage
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "delayq version: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	i := buildinfo.Get()
	if *asJSON {
		b, _ := json.Marshal(i) // plain data: cannot fail
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprintln(stdout, i.String())
	return 0
}
