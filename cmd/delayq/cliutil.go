package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/delayq/delayq"
)

// Exit codes of the CLI subcommands.
const (
	exitOK      = 0
	exitRequest = 1 // the request failed (server answered an error, or is unreachable)
	exitUsage   = 2 // bad flags or arguments; nothing was sent
)

// stdin is read by `send TOPIC -`; tests replace it.
var stdin io.Reader = os.Stdin

// cliCmd is the shared state of one CLI subcommand run: its flags,
// including the common ones, and where it writes.
type cliCmd struct {
	name, synopsis string
	stdout, stderr io.Writer
	fs             *flag.FlagSet

	server  string
	token   string
	json    bool
	timeout time.Duration
	envErr  error // a DELAYQ_* variable that does not parse

	// subject names what the command acts on ("message orders/42"), so a
	// not-found answer says what was not found.
	subject string
}

// newCLI makes the flag set of subcommand name with the common flags
// --server, --token, --json and --timeout, whose defaults come from
// DELAYQ_SERVER, DELAYQ_TOKEN, DELAYQ_JSON and DELAYQ_TIMEOUT.
func newCLI(name, synopsis string, stdout, stderr io.Writer) *cliCmd {
	c := &cliCmd{name: name, synopsis: synopsis, stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("delayq "+name, flag.ContinueOnError)
	c.fs.SetOutput(io.Discard) // errors are reported by parse, in one line
	c.fs.StringVar(&c.server, "server", envString("DELAYQ_SERVER", "http://127.0.0.1:7070"), "server base `URL` (env DELAYQ_SERVER)")
	c.fs.StringVar(&c.token, "token", os.Getenv("DELAYQ_TOKEN"), "bearer `token` (env DELAYQ_TOKEN)")
	jsonDefault, err := envBool("DELAYQ_JSON")
	c.setEnvErr(err)
	c.fs.BoolVar(&c.json, "json", jsonDefault, "print the API's JSON instead of text (env DELAYQ_JSON)")
	timeoutDefault, err := envDuration("DELAYQ_TIMEOUT", 30*time.Second)
	c.setEnvErr(err)
	durVar(c.fs, &c.timeout, "timeout", timeoutDefault, "time limit per request (env DELAYQ_TIMEOUT)")
	return c
}

func (c *cliCmd) setEnvErr(err error) {
	if err != nil && c.envErr == nil {
		c.envErr = err
	}
}

// parse parses args, allowing flags before, between and after the
// positional arguments ("delayq send orders hello --delay 30m"); "--" ends
// the flags. It checks the positional count against [min, max] (max < 0:
// no limit). On failure, or for -h, it has written the output and ok is
// false with the exit code to return.
func (c *cliCmd) parse(args []string, min, max int) (pos []string, code int, ok bool) {
	if c.envErr != nil {
		return nil, c.usageErr("%v", c.envErr), false
	}
	for {
		err := c.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.printHelp()
			return nil, exitOK, false
		}
		if err != nil {
			return nil, c.usageErr("%v", dashDash(err)), false
		}
		rest := c.fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < min:
		return nil, c.usageErr("missing arguments; usage: delayq %s", c.synopsis), false
	case max >= 0 && len(pos) > max:
		return nil, c.usageErr("too many arguments (%q); usage: delayq %s", pos[max:], c.synopsis), false
	}
	return pos, exitOK, true
}

func (c *cliCmd) printHelp() {
	fmt.Fprintf(c.stdout, "Usage: delayq %s\n\nFlags:\n", c.synopsis)
	printFlags(c.stdout, c.fs)
}

// usageErr reports a usage error in one line and returns exitUsage.
func (c *cliCmd) usageErr(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "delayq %s: %s\n", c.name, fmt.Sprintf(format, args...))
	return exitUsage
}

// fail reports a failed request in one line and returns exitRequest.
func (c *cliCmd) fail(err error) int {
	fmt.Fprintf(c.stderr, "delayq %s: %s\n", c.name, c.describe(err))
	return exitRequest
}

// describe turns a client error into one line for people.
func (c *cliCmd) describe(err error) string {
	var ae *delayq.APIError
	if errors.As(err, &ae) {
		if c.subject != "" && errors.Is(err, delayq.ErrNotFound) {
			return c.subject + " not found"
		}
		return ae.Error()
	}
	var ue *url.Error
	if errors.Is(err, delayq.ErrUnavailable) && errors.As(err, &ue) {
		return fmt.Sprintf("cannot reach the server at %s: %v", c.server, ue.Err)
	}
	s := strings.TrimPrefix(err.Error(), "delayq: ")
	return strings.ReplaceAll(s, "\n", " ")
}

// client makes the API client from the common flags; a bad --server is a
// usage error.
func (c *cliCmd) client() (*delayq.Client, int, bool) {
	opts := []delayq.ClientOption{delayq.WithTimeout(c.timeout)}
	if strings.Count(c.token, ":") >= 3 { // secrets hold no colon; specs three (auth.LooksLikeSpec)
		return nil, c.usageErr("--token (or DELAYQ_TOKEN) is a whole NAME:SECRET:SCOPES:PATTERNS spec: pass only the SECRET part"), false
	}
	if c.token != "" {
		opts = append(opts, delayq.WithToken(c.token))
	}
	cl, err := delayq.NewClient(c.server, opts...)
	if err != nil {
		return nil, c.usageErr("--server: %s", strings.TrimPrefix(err.Error(), "delayq: ")), false
	}
	return cl, exitOK, true
}

// printJSON writes v as one line of JSON.
func (c *cliCmd) printJSON(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.stdout, "%s\n", b)
	return exitOK
}

func envString(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envBool(name string) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a duration such as 30s", name, v)
	}
	return d, nil
}

// whenFlags are --delay and --at, shared by send and reschedule.
type whenFlags struct {
	delay, at string
}

func (w *whenFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.delay, "delay", "", "deliver after this `duration` (e.g. 30s, 30m, 2h30m)")
	fs.StringVar(&w.at, "at", "", "deliver at this RFC 3339 `time` (e.g. 2030-01-02T09:00:00Z)")
}

// when returns the due time, or a usage error message.
func (w *whenFlags) when(required bool) (delayq.When, error) {
	switch {
	case w.delay != "" && w.at != "":
		return delayq.When{}, errors.New("give --delay or --at, not both")
	case w.delay != "":
		d, err := time.ParseDuration(w.delay)
		if err != nil {
			return delayq.When{}, fmt.Errorf("invalid delay: %q is not a duration such as 30s, 30m or 2h30m", w.delay)
		}
		if d < 0 {
			return delayq.When{}, fmt.Errorf("invalid delay: %s is negative", w.delay)
		}
		return delayq.When{Delay: d}, nil
	case w.at != "":
		t, err := time.Parse(time.RFC3339Nano, w.at)
		if err != nil {
			return delayq.When{}, fmt.Errorf("invalid at: %q is not an RFC 3339 time such as 2030-01-02T09:00:00Z", w.at)
		}
		return delayq.When{DeliverAt: t}, nil
	case required:
		return delayq.When{}, errors.New("give --delay or --at")
	}
	return delayq.When{}, nil
}

// headerFlag collects repeated --header k=v.
type headerFlag map[string]string

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	h[k] = val
	return nil
}
