// Command delayq is the delayq server (`delayq serve`) and its CLI.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand
// name and returns the process exit code; it writes errors as one line to
// stderr itself.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// register adds a subcommand; each subcommand's file calls it from init.
func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	global, rest, err := splitGlobal(args)
	if err != nil {
		fmt.Fprintf(stderr, "delayq: %v (run 'delayq help')\n", err)
		return exitUsage
	}
	if len(rest) == 0 {
		fmt.Fprintln(stderr, "delayq: no command after the flags (run 'delayq help')")
		return exitUsage
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "delayq: unknown command %q (run 'delayq help')\n", rest[0])
		return exitUsage
	}
	// The common flags given before the command go to the command, which
	// takes them anywhere: "delayq --json stats" is "delayq stats --json".
	return cmd.run(ctx, append(global, rest[1:]...), stdout, stderr)
}

// globalFlags are the flags every client command takes, and whether each
// takes a value.
var globalFlags = map[string]bool{"server": true, "token": true, "timeout": true, "json": false}

// splitGlobal splits the common flags before the command name off args.
func splitGlobal(args []string) (global, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") {
			return global, args[i:], nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		takesValue, ok := globalFlags[name]
		if !ok {
			return nil, nil, fmt.Errorf("flag %s before the command: only --server, --token, --timeout and --json may come first", a)
		}
		global = append(global, a)
		if takesValue && !hasValue {
			if i+1 == len(args) {
				return nil, nil, fmt.Errorf("flag %s needs a value", a)
			}
			i++
			global = append(global, args[i])
		}
	}
	return global, nil, nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "delayq — a durable delayed-message queue\n\nUsage: delayq <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'delayq <command> -h' for a command's flags. Every flag also reads DELAYQ_<FLAG> (e.g. DELAYQ_SERVER).")
	fmt.Fprintln(w, "The client commands' --server, --token, --timeout and --json may come before or after the command.")
	fmt.Fprintln(w, "\nExit codes: 0 done; 1 the request failed (the server refused it or could not be reached;")
	fmt.Fprintln(w, "serve: the server failed); 2 bad usage (flags, arguments), nothing was sent.")
}
