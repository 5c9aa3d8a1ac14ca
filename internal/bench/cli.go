package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"
)

// CLI describes a program that runs benchmarks: `delayq bench` and
// `peerbench` share everything but their name and targets.
type CLI struct {
	// Name is the command as users type it ("delayq bench").
	Name string
	// Resolve maps --target words to targets.
	Resolve Resolver
	// Targets documents the accepted --target words for -h.
	Targets string
	// DefaultTarget is --target's default.
	DefaultTarget string
	// Forward makes the forward scenario's targets from the broker
	// flags; nil: this command has no forward scenario.
	Forward ForwardResolver
	// Stderr is where the progress goes when it is a terminal; Main's
	// stderr argument is used otherwise.
	Stderr *os.File
}

// Main parses args ("SCENARIO[,SCENARIO…] [flags]", flags may come first)
// and runs the benchmark, printing tables (or JSON) to stdout. It returns
// the exit code: 0, 1 if a target failed, 2 for bad usage.
func (c CLI) Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg      Config
		targets  = fs.String("target", c.DefaultTarget, "comma-separated targets; the first is the one the others are compared with. "+c.Targets)
		runs     = fs.Int("runs", 1, "repetitions per target (tables show median (min – max))")
		jsonOut  = fs.Bool("json", false, "print JSON instead of tables")
		plot     = fs.String("plot", "", "write an SVG plot of the lateness distributions to this file")
		progress = fs.String("progress", ProgressAuto, "progress on stderr: auto (bar on a terminal, a line every 10 s otherwise), bar, plain, off")
		scen     = fs.String("scenario", "", "scenarios, comma-separated ("+strings.Join(Scenarios, ", ")+", all); may also be the first argument")
		seed     = fs.Uint64("seed", 1, "seed of the payload filler and the mixed scenario's delays")
		trFile   = fs.String("trace", "", "lateness, mixed, paced, burst: write a runtime trace (go tool trace) of the seconds before the first message released --trace-late or more late to this file; an in-process target (embedded, memory) shows the engine, an HTTP target the client only")
		trLate   = fs.Duration("trace-late", 5*time.Millisecond, "with --trace: how late a release triggers the trace")
		cpuProf  = fs.String("cpuprofile", "", "write a CPU profile (go tool pprof) of the whole benchmark to this file; shows the engine for an in-process target (embedded, memory)")
	)
	var brokers Brokers
	fs.StringVar(&brokers.Redis, "redis-target", "", "forward: publish to a stream on this Redis (redis://[user:pass@]host:port[/db]); empty: skipped")
	fs.StringVar(&brokers.RabbitMQ, "rabbitmq", "", "forward: publish to a queue the benchmark declares on this RabbitMQ (amqp://user:pass@host:port/vhost); empty: skipped")
	fs.StringVar(&brokers.RabbitMQQueue, "rabbitmq-queue", "classic", "forward: type of the durable queue declared on --rabbitmq: classic, quorum, or both comma-separated (one target each)")
	fs.StringVar(&brokers.NATS, "nats", "", "forward: publish to a JetStream stream the benchmark creates on this NATS server (nats://host:port, -js); empty: skipped")
	fs.StringVar(&brokers.Kafka, "kafka", "", "forward: publish to a topic (3 partitions) the benchmark creates and deletes on these Kafka brokers (host:port,…); empty: skipped")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", 0, "forward: the topic's deliver.max_in_flight (default 1000)")
	fs.IntVar(&cfg.N, "n", 0, "messages (send 200000, drain 50000, lateness 100000, paced 20000, burst 20000, pending 200000, forward's backlog 50000)")
	fs.IntVar(&cfg.Batch, "batch", 0, "messages per send call (send 100, drain/pending fill 1000, lateness fill 100, mixed 10, paced/burst 1)")
	fs.IntVar(&cfg.Payload, "payload", 0, "payload bytes per message (paced/burst 1024, others 256)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "concurrent senders (send 8, lateness 8, burst 32, others 4)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "send rate in msgs/s, all senders together; 0 = as fast as possible (send, burst); mixed and forward default 2000, paced 1000")
	fs.IntVar(&cfg.Consumers, "consumers", 0, "concurrent consumers (paced 2, others 4)")
	fs.IntVar(&cfg.LeaseMax, "lease-max", 0, "largest batch per receive (default 100)")
	fs.StringVar(&cfg.Acks, "acks", "", "how consumers ack: serial (ack the batch, wait, lease again: a hand-rolled loop) or pipelined (lease again at once while a goroutine of the consumer's sends the acks in batches: delayq's Worker); default pipelined for paced, burst and mixed, serial for drain and lateness; the peers ack their own way (beanstalkd serially; asynq and River in their workers; delaytable in its poll's transaction)")
	fs.DurationVar(&cfg.Wait, "wait", 0, "consumers' long-poll wait (default 5s)")
	fs.DurationVar(&cfg.Delay, "delay", 0, "delay of sent messages (send 1h, pending 24h)")
	fs.DurationVar(&cfg.Window, "window", 0, "lateness: messages come due evenly over this window (default 10s)")
	fs.DurationVar(&cfg.Lead, "lead", 0, "lateness: first message due this long after the fill starts (default 2s + max(0, n/5000 s − window)); paced, forward: each message is sent this long before it is due (default 2s)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "mixed: how long to send (default 60s); forward: how long the paced phase sends (default 10s)")
	fs.DurationVar(&cfg.MaxDelay, "max-delay", 0, "mixed, burst: delays are uniform in [0, max-delay] (mixed 60s, burst 10s); pending: when set, delays are uniform in [delay, max-delay]")
	fs.DurationVar(&cfg.Grace, "grace", 0, "drain/lateness/paced/burst/pending: give up after no new message for this long once all are sent and due (default 30s); mixed: consume this long after sending ends (default 10s)")
	durable := fs.Bool("durable", true, "fsync every accepted write (delayq: Pebble sync with group commit; redis: appendfsync always; beanstalkd: -f0); false: logs written, never fsync'd (Pebble NoSync; appendfsync no; beanstalkd -F)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s SCENARIO[,SCENARIO…] [flags]\n\nScenarios:\n", c.Name)
		fmt.Fprintln(stderr, "  send      durable sends (batch, payload, concurrency, rate): msgs/s")
		fmt.Fprintln(stderr, "  drain     a due backlog of n consumed with lease(lease-max) + batch ack: msgs/s")
		fmt.Fprintln(stderr, "  lateness  n messages due evenly over window, consumers long-polling: receive − due percentiles, early, duplicates, missing")
		fmt.Fprintln(stderr, "  mixed     steady sends at rate with delays 0–max-delay while consuming: lateness of what came due")
		fmt.Fprintln(stderr, "  paced     n single sends at rate, each due lead after it is sent, while consumers lease + ack: lateness of every message, server CPU per message")
		fmt.Fprintln(stderr, "  burst     n single sends from concurrency callers as fast as they go, delays 0–max-delay, while consuming: lateness of every message, server CPU per message")
		fmt.Fprintln(stderr, "  pending   n far-future messages: RSS, and restart → first due message released")
		if c.Forward != nil {
			fmt.Fprintln(stderr, "  forward   (not in all) a delayq server forwarding to each broker given (--redis-target, --rabbitmq, --nats, --kafka): a due backlog of n → confirmed msgs/s, then rate msgs/s for duration → due-to-confirm percentiles, early, duplicates, missing")
		}
		fmt.Fprintln(stderr, "\nFlags (each also reads DELAYQ_<FLAG>, e.g. DELAYQ_TARGET):")
		// "--flag" as the docs write it (Go's flag package prints "-flag").
		var buf strings.Builder
		fs.SetOutput(&buf)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		fmt.Fprint(stderr, strings.ReplaceAll("\n"+buf.String(), "\n  -", "\n  --")[1:])
	}
	command := strings.Join(append([]string{c.Name}, args...), " ")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		*scen = args[0]
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := applyEnv(fs); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 2
	}
	if fs.NArg() > 0 && *scen == "" {
		*scen = fs.Arg(0)
	} else if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", c.Name, fs.Arg(0))
		return 2
	}
	if *scen == "" {
		fmt.Fprintf(stderr, "%s: name a scenario (%s, or all)\n", c.Name, strings.Join(Scenarios, ", "))
		return 2
	}
	if *runs < 1 {
		fmt.Fprintf(stderr, "%s: --runs must be ≥ 1\n", c.Name)
		return 2
	}
	var names []string
	if *scen == "all" {
		names = Scenarios
	} else {
		names = splitList(*scen)
	}
	cfg.Durable, cfg.Seed = *durable, *seed
	var cfgs []Config
	for _, n := range names {
		sc := cfg
		sc.Scenario = n
		sc = sc.Fill()
		if err := sc.Validate(); err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", c.Name, n, err)
			return 2
		}
		cfgs = append(cfgs, sc)
	}
	queueCfgs, brokerCfgs := splitBrokerScenarios(cfgs)
	var fwdFacs []Factory
	if len(brokerCfgs) > 0 {
		if c.Forward == nil {
			fmt.Fprintf(stderr, "%s: the forward scenario is delayq's (delayq bench forward)\n", c.Name)
			return 2
		}
		var skipped []string
		var err error
		fwdFacs, skipped, err = c.Forward(brokers, brokerCfgs[0].MaxInFlight)
		if err != nil {
			fmt.Fprintf(stderr, "%s: forward: %v\n", c.Name, err)
			return 2
		}
		for _, s := range skipped {
			fmt.Fprintf(stderr, "%s: forward: skipped %s\n", c.Name, s)
		}
		if len(fwdFacs) == 0 {
			fmt.Fprintf(stderr, "%s: forward: name at least one broker (--redis-target, --rabbitmq, --nats, --kafka)\n", c.Name)
			return 2
		}
	}
	var facs []Factory
	for _, t := range splitList(*targets) {
		if len(queueCfgs) == 0 {
			break // forward only: --target is not used
		}
		f, ok, err := c.Resolve(t)
		if err != nil {
			fmt.Fprintf(stderr, "%s: target %s: %v\n", c.Name, t, err)
			return 2
		}
		if !ok {
			fmt.Fprintf(stderr, "%s: unknown target %q (%s)\n", c.Name, t, c.Targets)
			return 2
		}
		facs = append(facs, f)
	}
	if len(facs) == 0 && len(queueCfgs) > 0 {
		fmt.Fprintf(stderr, "%s: name at least one --target\n", c.Name)
		return 2
	}
	if *trFile != "" {
		lt, err := StartLateTrace(*trLate, *trFile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
			return 2
		}
		for i := range cfgs {
			cfgs[i].LateTrace = lt
		}
		defer func() {
			msg, err := lt.Stop()
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
				return
			}
			fmt.Fprintf(stderr, "%s: %s\n", c.Name, msg)
		}()
	}
	var pw io.Writer = stderr
	if c.Stderr != nil && stderr == io.Writer(c.Stderr) {
		pw = c.Stderr
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: --cpuprofile: %v\n", c.Name, err)
			return 2
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "%s: --cpuprofile: %v\n", c.Name, err)
			}
		}()
	}
	p := NewProgress(pw, *progress)
	rep := &Report{Machine: ThisMachine(), Command: command, Started: time.Now().UTC(), Runs: *runs}
	queueCfgs, brokerCfgs = splitBrokerScenarios(cfgs) // again: --trace set LateTrace on cfgs
	rep.Scenarios = Run(ctx, queueCfgs, facs, *runs, p)
	rep.Scenarios = append(rep.Scenarios, Run(ctx, brokerCfgs, fwdFacs, *runs, p)...)
	rep.Machine.LoadEnd = LoadAvg()
	p.Close()
	if *jsonOut {
		if err := rep.WriteJSON(stdout); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
			return 1
		}
	} else {
		rep.WriteTable(stdout)
	}
	if *plot != "" {
		f, err := os.Create(*plot)
		if err == nil {
			err = WritePlot(f, c.Name+" — lateness", rep.Scenarios)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: plot: %v\n", c.Name, err)
			return 1
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s: interrupted; the tables hold the runs that finished\n", c.Name)
		return 1
	}
	for _, s := range rep.Scenarios {
		for _, r := range s.Results {
			if r.Error != "" {
				return 1
			}
		}
	}
	return 0
}

// applyEnv sets every flag not given on the command line from
// DELAYQ_<NAME> (dashes as underscores), like every delayq command.
func applyEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		key := "DELAYQ_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(key); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", key, v, e)
			}
		}
	})
	return err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// splitBrokerScenarios separates the scenarios run on --target from those
// run on the forward targets.
func splitBrokerScenarios(cfgs []Config) (queue, broker []Config) {
	for _, c := range cfgs {
		if c.Scenario == ScenarioForward {
			broker = append(broker, c)
		} else {
			queue = append(queue, c)
		}
	}
	return queue, broker
}
