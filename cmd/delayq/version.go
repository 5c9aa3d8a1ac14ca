package main

import (
	"context"
	"encoding/json"
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
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
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
