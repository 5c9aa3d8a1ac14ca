package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// BenchmarkScriptPreludeRedisCPU reports the Redis time of a call's
// fixed part, per call (commandstats usec): EVALSHA of "return 1" alone
// and after luaPrelude (a script pays the prelude's definitions, some 25
// local functions, at each call), and FCALL of a bare function and of
// "return 1" in a library built as the store's is (buildLibrary: the
// helpers defined once, a call setting the per-call state). What the
// store saves by calling functions (library.go).
//
//	go test -run XXX -bench ScriptPreludeRedisCPU -benchtime 3x ./internal/store/redisstore
func BenchmarkScriptPreludeRedisCPU(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	bare := scriptOf(flagsState + "return 1") // without the prelude
	prelude := newScript(flagsState, "return 1")
	fn := newScript(flagsState, "return 1")
	fn.name = "one"
	_, lib := buildLibrary("zzprelude", []*script{fn})
	if err := rc.FunctionLoadReplace(ctx, lib).Err(); err != nil {
		b.Fatal(err)
	}
	const bareLib = "#!lua name=zzbare\nredis.register_function{function_name = 'zz_bare', callback = function() return 1 end}"
	if err := rc.FunctionLoadReplace(ctx, bareLib).Err(); err != nil {
		b.Fatal(err)
	}
	const calls = 5000
	keys := []string{"{t#0}:sched", "{t#0}:ready", "{t#0}:lease", "{t#0}:dead", "{t#0}:acked"}
	// perCall runs call calls times and returns the Redis time per call
	// of the command it sends (cmdstat name).
	perCall := func(name string, call func() error) float64 {
		if err := rc.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		for range calls {
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
		k, u := commandStat(ctx, rc, name)
		if k < calls {
			b.Fatalf("%s: %d calls counted, %d made", name, k, calls)
		}
		return float64(u) / float64(k)
	}
	evalsha := func(sc *script) func() error {
		if err := rc.ScriptLoad(ctx, sc.src).Err(); err != nil {
			b.Fatal(err)
		}
		return func() error { return rc.EvalSha(ctx, sc.sha, keys, "", "{t#0}:m:").Err() }
	}
	fcall := func(name string) func() error {
		return func() error { return rc.FCall(ctx, name, keys, "", "{t#0}:m:").Err() }
	}
	// A due lease that finds nothing (the store's leaseDueScript on an
	// empty partition), as a script and as the store's function.
	if err := rc.FunctionLoadReplace(ctx, library.src).Err(); err != nil {
		b.Fatal(err)
	}
	k := keyspace{prefix: "bp", parts: 1}.part("t", 0)
	leaseArgs := []any{"", k.msgPrefix, 1, k.msgPrefix, 1, after(60_000), "0123456789abcdef", ""}
	emptyLease := func(as sendAs) func() error {
		if err := rc.ScriptLoad(ctx, leaseDueScript.src).Err(); err != nil {
			b.Fatal(err)
		}
		return func() error { return rc.Process(ctx, leaseDueScript.cmd(ctx, as, k.all(), leaseArgs)) }
	}
	var eBare, ePrelude, fBare, fPrelude, eLease, fLease float64
	for b.Loop() {
		eBare += perCall("evalsha", evalsha(bare))
		ePrelude += perCall("evalsha", evalsha(prelude))
		fBare += perCall("fcall", fcall("zz_bare"))
		fPrelude += perCall("fcall", fcall(fn.fn))
		eLease += perCall("evalsha", emptyLease(asSHA))
		fLease += perCall("fcall", emptyLease(asFunction))
	}
	n := float64(b.N)
	b.ReportMetric(eBare/n, "evalsha-bare-µs")
	b.ReportMetric(ePrelude/n, "evalsha-prelude-µs")
	b.ReportMetric(fBare/n, "fcall-bare-µs")
	b.ReportMetric(fPrelude/n, "fcall-prelude-µs")
	b.ReportMetric(eLease/n, "evalsha-lease-none-µs")
	b.ReportMetric(fLease/n, "fcall-lease-none-µs")
}

// commandStat reads one command's calls and usec from commandstats.
func commandStat(ctx context.Context, rc *redis.Client, name string) (calls, usec int64) {
	st := commandStats(ctx, rc)[name]
	return st.calls, st.usec
}

// cmdStat is one command's line of commandstats.
type cmdStat struct{ calls, usec int64 }

// commandStats reads commandstats: each command's calls and usec.
func commandStats(ctx context.Context, rc *redis.Client) map[string]cmdStat {
	out := map[string]cmdStat{}
	for line := range strings.SplitSeq(rc.Info(ctx, "commandstats").Val(), "\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		name, rest, found := strings.Cut(rest, ":")
		if !ok || !found {
			continue
		}
		var st cmdStat
		fmt.Sscanf(rest, "calls=%d,usec=%d", &st.calls, &st.usec)
		out[name] = st
	}
	return out
}
