package bench

import (
	"fmt"
	"strings"
	"time"
)

// Scenario names.
const (
	ScenarioSend     = "send"
	ScenarioDrain    = "drain"
	ScenarioLateness = "lateness"
	ScenarioMixed    = "mixed"
	ScenarioPaced    = "paced"
	ScenarioBurst    = "burst"
	ScenarioPending  = "pending"
)

// Ways a consumer acknowledges (Config.Acks).
const (
	// AcksSerial: lease, ack the batch and wait for the answer, lease
	// again — a hand-rolled consumer loop.
	AcksSerial = "serial"
	// AcksPipelined: lease, hand the batch's acks to the consumer's
	// acker goroutine, lease again at once — what delayq's Worker does.
	// Targets whose client cannot (beanstalkd deletes a job only on the
	// connection that reserved it) stay serial; asynq and River ack
	// inside their own worker, as they always do.
	AcksPipelined = "pipelined"
)

// Scenarios lists every scenario in the order they are run.
var Scenarios = []string{ScenarioSend, ScenarioDrain, ScenarioLateness, ScenarioMixed, ScenarioPaced, ScenarioBurst, ScenarioPending}

// Config sizes one scenario. Zero fields take the scenario's default
// (see Defaults).
type Config struct {
	Scenario string
	// N is the number of messages (all but mixed).
	N int
	// Batch is messages per send call (1 = single sends).
	Batch int
	// Payload bytes per message (≥ 8).
	Payload int
	// Concurrency is the number of concurrent senders.
	Concurrency int
	// Rate is the target send rate in msgs/s; 0 = as fast as possible
	// (send, burst) — mixed and paced need a rate.
	Rate float64
	// Consumers is the number of concurrent consumers.
	Consumers int
	// LeaseMax is the largest batch one receive returns.
	LeaseMax int
	// Wait is the consumers' long-poll wait.
	Wait time.Duration
	// Acks is how a consumer acknowledges what it received: AcksSerial
	// (ack, then lease again) or AcksPipelined (queue the acks for a
	// goroutine that sends them in batches, lease again at once). Empty
	// takes the scenario's default.
	Acks string
	// Delay of the messages of the send scenario (far enough that none
	// comes due during the run).
	Delay time.Duration
	// Window over which the lateness scenario's messages come due.
	Window time.Duration
	// Lead is how far after the start of the lateness fill the first
	// message is due; 0 = auto (2 s + max(0, N/5000 s − Window)). Paced:
	// how long before its due time each message is sent.
	Lead time.Duration
	// Duration of the mixed scenario's sending.
	Duration time.Duration
	// MaxDelay of the mixed and burst scenarios: delays are uniform in
	// [0, MaxDelay].
	MaxDelay time.Duration
	// Grace is how long consumers go on after the last message is due
	// (mixed), and the stall timeout of drain and lateness: a run ends
	// when no new message arrived for Grace after everything was due.
	Grace time.Duration
	// MaxInFlight is the forward scenario's deliver.max_in_flight.
	MaxInFlight int
	// Durable asks targets to fsync every accepted send (default true).
	Durable bool
	// Seed of the payload filler and the mixed scenario's delays.
	Seed uint64
	// LateTrace, when set, writes a trace around the first late release
	// of the lateness and mixed scenarios.
	LateTrace *LateTrace
}

// Defaults returns the default configuration of a scenario.
func Defaults(scenario string) Config {
	c := Config{Scenario: scenario, Payload: 256, Wait: 5 * time.Second, Durable: true, Seed: 1, Grace: 30 * time.Second, LeaseMax: 100, Consumers: 4, Acks: AcksSerial}
	switch scenario {
	case ScenarioSend:
		c.N, c.Batch, c.Concurrency, c.Delay = 200_000, 100, 8, time.Hour
	case ScenarioDrain:
		c.N, c.Batch, c.Concurrency = 50_000, 1000, 4
	case ScenarioLateness:
		c.N, c.Batch, c.Concurrency, c.Window = 100_000, 100, 8, 10*time.Second
	case ScenarioMixed:
		c.Rate, c.Duration, c.MaxDelay, c.Batch, c.Concurrency, c.Grace = 2000, 60*time.Second, 60*time.Second, 10, 4, 10*time.Second
		// The load shapes model production consumers, which use the
		// Worker: acks pipelined. drain and lateness keep the serial loop.
		c.Acks = AcksPipelined
	case ScenarioPaced:
		// Production's shape: producers keep sending single messages while
		// earlier ones come due and consumers lease and ack.
		c.N, c.Rate, c.Lead, c.Batch, c.Concurrency, c.Payload, c.Consumers = 20_000, 1000, 2*time.Second, 1, 4, 1024, 2
		c.Acks = AcksPipelined
	case ScenarioBurst:
		// Everyone sends at once, as fast as they can, with delays that
		// start coming due while the burst is still going on.
		c.N, c.MaxDelay, c.Batch, c.Concurrency, c.Payload, c.Consumers = 20_000, 10*time.Second, 1, 32, 1024, 4
		c.Acks = AcksPipelined
	case ScenarioPending:
		c.N, c.Batch, c.Concurrency, c.Delay = 200_000, 1000, 4, 24*time.Hour
	case ScenarioForward:
		// A due backlog of N, then single sends paced at Rate for Duration,
		// each due Lead after it is sent, with 1 KiB payloads.
		c.N, c.Batch, c.Concurrency, c.Payload, c.MaxInFlight = 50_000, 1000, 16, 1024, 1000
		c.Rate, c.Duration, c.Lead = 2000, 10*time.Second, 2*time.Second
	}
	return c
}

// Fill returns c with zero fields taken from the scenario's defaults.
func (c Config) Fill() Config {
	d := Defaults(c.Scenario)
	pick := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	pickD := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	pick(&c.N, d.N)
	pick(&c.Batch, d.Batch)
	pick(&c.Payload, d.Payload)
	pick(&c.Concurrency, d.Concurrency)
	pick(&c.Consumers, d.Consumers)
	pick(&c.LeaseMax, d.LeaseMax)
	pick(&c.MaxInFlight, d.MaxInFlight)
	pickD(&c.Wait, d.Wait)
	pickD(&c.Delay, d.Delay)
	pickD(&c.Window, d.Window)
	pickD(&c.Duration, d.Duration)
	pickD(&c.MaxDelay, d.MaxDelay)
	pickD(&c.Grace, d.Grace)
	if c.Rate == 0 {
		c.Rate = d.Rate
	}
	if c.Acks == "" {
		c.Acks = d.Acks
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.Scenario == ScenarioPaced || c.Scenario == ScenarioForward {
		pickD(&c.Lead, d.Lead)
	}
	if c.Scenario == ScenarioLateness && c.Lead == 0 {
		c.Lead = 2*time.Second + max(0, time.Duration(float64(c.N)/5000*float64(time.Second))-c.Window)
	}
	return c
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	switch {
	case !isScenario(c.Scenario):
		return fmt.Errorf("unknown scenario %q (want one of %s)", c.Scenario, strings.Join(append(append([]string{}, Scenarios...), BrokerScenarios...), ", "))
	case c.Scenario == ScenarioForward && (c.MaxInFlight < 1 || c.MaxInFlight > 1000):
		return fmt.Errorf("--max-in-flight must be between 1 and 1000")
	case c.Scenario == ScenarioForward && c.Duration <= 0:
		return fmt.Errorf("forward needs --duration > 0 (the paced phase)")
	case c.N < 1 && c.Scenario != ScenarioMixed:
		return fmt.Errorf("--n must be ≥ 1")
	case c.Batch < 1 || c.Batch > 1000:
		return fmt.Errorf("--batch must be between 1 and 1000")
	case c.Payload < SeqLen:
		return fmt.Errorf("--payload must be ≥ %d bytes (the sequence number)", SeqLen)
	case c.Concurrency < 1 || c.Consumers < 1:
		return fmt.Errorf("--concurrency and --consumers must be ≥ 1")
	case c.LeaseMax < 1 || c.LeaseMax > 1000:
		return fmt.Errorf("--lease-max must be between 1 and 1000")
	case c.Acks != AcksSerial && c.Acks != AcksPipelined:
		return fmt.Errorf("--acks %q: want %s or %s", c.Acks, AcksSerial, AcksPipelined)
	case c.Rate < 0:
		return fmt.Errorf("--rate must be ≥ 0")
	case (c.Scenario == ScenarioMixed || c.Scenario == ScenarioPaced || c.Scenario == ScenarioForward) && c.Rate <= 0:
		return fmt.Errorf("%s needs --rate > 0", c.Scenario)
	case c.Scenario == ScenarioPending && c.MaxDelay != 0 && c.MaxDelay < c.Delay:
		return fmt.Errorf("pending: --max-delay %v is below --delay %v (delays are uniform in [delay, max-delay])", c.MaxDelay, c.Delay)
	case c.Window < 0 || c.Lead < 0 || c.Duration < 0 || c.MaxDelay < 0 || c.Grace <= 0 || c.Wait <= 0:
		return fmt.Errorf("durations must be positive")
	}
	return nil
}

func isScenario(s string) bool {
	for _, x := range append(append([]string{}, Scenarios...), BrokerScenarios...) {
		if x == s {
			return true
		}
	}
	return false
}

// Params describes the configuration for a table header, in a fixed order.
func (c Config) Params() []Param {
	p := []Param{}
	add := func(k, v string) { p = append(p, Param{k, v}) }
	rate := "max"
	if c.Rate > 0 {
		rate = fmt.Sprintf("%g/s", c.Rate)
	}
	switch c.Scenario {
	case ScenarioSend:
		add("n", fmt.Sprint(c.N))
		add("batch", fmt.Sprint(c.Batch))
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("concurrency", fmt.Sprint(c.Concurrency))
		add("rate", rate)
		add("delay", c.Delay.String())
	case ScenarioDrain:
		add("n", fmt.Sprint(c.N))
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("consumers", fmt.Sprint(c.Consumers))
		add("lease-max", fmt.Sprint(c.LeaseMax))
		add("acks", c.Acks)
	case ScenarioLateness:
		add("n", fmt.Sprint(c.N))
		add("window", c.Window.String())
		add("rate", fmt.Sprintf("%.0f/s", float64(c.N)/max(c.Window.Seconds(), 1e-3)))
		add("lead", c.Lead.String())
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("consumers", fmt.Sprint(c.Consumers))
		add("lease-max", fmt.Sprint(c.LeaseMax))
		add("acks", c.Acks)
	case ScenarioMixed:
		add("rate", rate)
		add("duration", c.Duration.String())
		add("delays", "0–"+c.MaxDelay.String())
		add("batch", fmt.Sprint(c.Batch))
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("consumers", fmt.Sprint(c.Consumers))
		add("lease-max", fmt.Sprint(c.LeaseMax))
		add("acks", c.Acks)
	case ScenarioPaced:
		add("n", fmt.Sprint(c.N))
		add("rate", rate)
		add("lead", c.Lead.String())
		add("batch", fmt.Sprint(c.Batch))
		add("concurrency", fmt.Sprint(c.Concurrency))
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("consumers", fmt.Sprint(c.Consumers))
		add("lease-max", fmt.Sprint(c.LeaseMax))
		add("acks", c.Acks)
	case ScenarioBurst:
		add("n", fmt.Sprint(c.N))
		add("rate", rate)
		add("delays", "0–"+c.MaxDelay.String())
		add("batch", fmt.Sprint(c.Batch))
		add("concurrency", fmt.Sprint(c.Concurrency))
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("consumers", fmt.Sprint(c.Consumers))
		add("lease-max", fmt.Sprint(c.LeaseMax))
		add("acks", c.Acks)
	case ScenarioForward:
		add("backlog n", fmt.Sprint(c.N))
		add("backlog due", "at once, held during the fill (else fill start + "+backlogLead(c.N).String()+")")
		add("paced rate", rate)
		add("paced duration", c.Duration.String())
		add("paced lead", c.Lead.String())
		add("payload", fmt.Sprintf("%dB", c.Payload))
		add("max_in_flight", fmt.Sprint(c.MaxInFlight))
	case ScenarioPending:
		add("n", fmt.Sprint(c.N))
		add("payload", fmt.Sprintf("%dB", c.Payload))
		if c.MaxDelay > c.Delay {
			add("delays", c.Delay.String()+"–"+c.MaxDelay.String())
		} else {
			add("delay", c.Delay.String())
		}
	}
	add("durable", fmt.Sprint(c.Durable))
	return p
}

// Param is one name=value of a configuration.
type Param struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// consumeOptions are the consumers c asks for.
func (c Config) consumeOptions() ConsumeOptions {
	return ConsumeOptions{Consumers: c.Consumers, Max: c.LeaseMax, Wait: c.Wait, PipelineAcks: c.Acks == AcksPipelined}
}
