package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// preludeLibrary is luaPrelude as a Redis function library (FUNCTION
// LOAD, Redis 7): its helpers are defined once when the library loads,
// and a function's call only sets the per-call state (NOW, IDX, MPFX)
// that the script form computes at the top of every run. The per-call
// part is begin; zz_begin is a function that runs it and returns.
func preludeLibrary(tb testing.TB) string {
	// The prelude's per-call statements, moved into begin as they are.
	const (
		nowBlock = "local NOW\nif ARGV[1] ~= '' then\n  NOW = tonumber(ARGV[1])\nelse\n  local t = redis.call('TIME')\n  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\nend"
		nowDecl  = "local NOW\n"
	)
	lib := luaPrelude
	for _, r := range [][2]string{
		{nowBlock, "local NOW, KEYS, ARGV"},
		{"local NOW_S = istr(NOW)", "local NOW_S"},
		{"local IDX = KEYS", "local IDX"},
		{"local MPFX = ARGV[2]", "local MPFX"},
	} {
		if !strings.Contains(lib, r[0]) {
			tb.Fatalf("the prelude no longer has %q: update preludeLibrary", r[0])
		}
		lib = strings.Replace(lib, r[0], r[1], 1)
	}
	return "#!lua name=zzprelude\n" + lib + `
local function begin(keys, args)
  KEYS, ARGV = keys, args
` + strings.TrimPrefix(nowBlock, nowDecl) + `
  NOW_S, IDX, MPFX = istr(NOW), KEYS, ARGV[2]
end
redis.register_function{function_name = 'zz_begin', callback = function(keys, args) begin(keys, args) return 1 end, flags = {'allow-oom'}}
redis.register_function{function_name = 'zz_bare', callback = function() return 1 end}
`
}

// BenchmarkScriptPreludeRedisCPU reports the Redis time of a script's
// fixed part, per call (commandstats usec): EVALSHA of "return 1" alone
// and after luaPrelude, and FCALL of the same prelude loaded once as a
// function library. Every script the store runs pays the prelude's
// definitions (some 25 local functions) at each call, about as much as a
// lease's own work; as a library they would be defined once. A
// measurement for that change, not a test of the store.
//
//	go test -run XXX -bench ScriptPreludeRedisCPU -benchtime 3x ./internal/store/redisstore
func BenchmarkScriptPreludeRedisCPU(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	if err := rc.FunctionLoadReplace(ctx, preludeLibrary(b)).Err(); err != nil {
		b.Fatal(err)
	}
	bare := scriptOf(flagsState + "return 1") // without the prelude
	prelude := newScript(flagsState, "return 1")
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
	var eBare, ePrelude, fBare, fPrelude float64
	for b.Loop() {
		eBare += perCall("evalsha", evalsha(bare))
		ePrelude += perCall("evalsha", evalsha(prelude))
		fBare += perCall("fcall", func() error { return rc.FCall(ctx, "zz_bare", keys, "", "{t#0}:m:").Err() })
		fPrelude += perCall("fcall", func() error { return rc.FCall(ctx, "zz_begin", keys, "", "{t#0}:m:").Err() })
	}
	n := float64(b.N)
	b.ReportMetric(eBare/n, "evalsha-bare-µs")
	b.ReportMetric(ePrelude/n, "evalsha-prelude-µs")
	b.ReportMetric(fBare/n, "fcall-bare-µs")
	b.ReportMetric(fPrelude/n, "fcall-prelude-µs")
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
