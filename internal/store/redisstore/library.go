package redisstore

import (
	"cmp"
	"context"
	"crypto/sha1" // #nosec G505 -- names the library after its source, not a security hash
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The store's scripts are also one Redis function library (FUNCTION LOAD,
// Redis 7), sent as FCALL. As scripts, every call ran the whole prelude
// again, defining its two dozen helpers before any work: about half of
// what a short script costs Redis (BenchmarkScriptPreludeRedisCPU). In
// the library they are defined once, when it loads, and a call only sets
// the per-call state (preludeCall). Functions are also kept by Redis's
// RDB and AOF and copied to replicas, so a restarted or promoted server
// still has them, where its script cache starts empty.
//
// The library is named after its source (delayq_ and 12 hex digits of its
// SHA-1), and so are its functions, so servers of different versions
// share a Redis without replacing each other's. A call that finds its
// function missing (a server restarted without persistence, FUNCTION
// FLUSH) did not run: the library is loaded on that server and the call
// sent again (rerunMissing). A server that refuses FUNCTION or FCALL (an
// ACL without them, a proxy that does not know them) gets the same
// scripts by EVALSHA, from then on (Store.scriptsOnly). Libraries of
// earlier versions stay on the server until deleted (FUNCTION DELETE).

// libScripts are the scripts of the library, registered by libScript as
// the package's variables are initialized.
var libScripts []*script

// libScript is newScript(flags, body) that is also the function name in
// delayq's library (the package's init names it with the library's
// prefix).
func libScript(name, flags, body string) *script {
	sc := newScript(flags, body)
	sc.name = name
	libScripts = append(libScripts, sc)
	return sc
}

// library is delayq's function library: its name and source.
var library struct{ name, src string }

func init() {
	library.name, library.src = buildLibrary("delayq", libScripts)
}

// buildLibrary builds the library of scripts, named prefix_ and a hash of
// its source, and sets each script's fn to its function's name.
func buildLibrary(prefix string, scripts []*script) (name, src string) {
	scripts = slices.Clone(scripts)
	slices.SortFunc(scripts, func(a, b *script) int { return cmp.Compare(a.name, b.name) })
	var body strings.Builder
	body.WriteString("local KEYS, ARGV\n" + preludeState + preludeHelpers)
	body.WriteString("local function begin(keys, args)\nKEYS, ARGV = keys, args\n" + preludeCall + "end\n")
	for _, sc := range scripts {
		fmt.Fprintf(&body, "redis.register_function{function_name = FN .. '_%s', flags = {%s}, callback = function(keys, args)\nbegin(keys, args)\n%s\nend}\n",
			sc.name, functionFlags(sc.flags), sc.body)
	}
	h := sha1.Sum([]byte(body.String())) // #nosec G401 -- a name for this source, not a security hash
	name = prefix + "_" + hex.EncodeToString(h[:6])
	for _, sc := range scripts {
		sc.fn = name + "_" + sc.name
	}
	return name, "#!lua name=" + name + "\nlocal FN = '" + name + "'\n" + body.String()
}

// functionFlags are a script's shebang flags as a function's.
func functionFlags(shebang string) string {
	switch shebang {
	case flagsState:
		return "'allow-oom'"
	case flagsRead:
		return "'no-writes'"
	case flagsGrow:
		return ""
	}
	panic("redisstore: unknown script flags " + shebang)
}

// libraryHost is where a call on keys finds its functions, named and as
// a client to load the library through: on a Cluster the master serving
// keys (named by its address), else the store's client (""); err when the
// Cluster's map does not say.
func (s *Store) libraryHost(ctx context.Context, keys []string) (string, redis.Cmdable, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || len(keys) == 0 {
		return "", s.rdb, nil
	}
	node, err := cc.MasterForKey(ctx, keys[0])
	if err != nil {
		return "", nil, err
	}
	return node.Options().Addr, node, nil
}

// loadLibrary loads the library through host (libraryHost). nil when it
// is there now (loaded, or another delayq loaded it first) or when the
// server refuses functions (then scriptsOnly is set: the caller sends
// scripts); else why it could not be loaded.
func (s *Store) loadLibrary(ctx context.Context, host redis.Cmdable) error {
	err := host.FunctionLoad(ctx, library.src).Err()
	switch {
	case err == nil || strings.Contains(err.Error(), "already exists"):
		return nil
	case isFunctionRefused(err):
		s.refuseFunctions(err)
		return nil
	}
	return fmt.Errorf("loading the function library %s: %w", library.name, err)
}

// refuseFunctions makes every later call a script (EVALSHA): the server
// refused FUNCTION or FCALL.
func (s *Store) refuseFunctions(err error) {
	if s.scriptsOnly.CompareAndSwap(false, true) {
		s.log.Warn("redisstore: Redis refuses functions (FUNCTION, FCALL); running delayq's Lua as scripts (EVALSHA), which costs Redis about 10 µs more per call",
			"err", err)
	}
}

// isNoFunction: FCALL of a function the server does not have (it did not
// run).
func isNoFunction(err error) bool {
	return err != nil && err.Error() == "ERR Function not found"
}

// isFunctionRefused: the server refused FCALL or FUNCTION itself, by ACL
// or as an unknown command (so the call did not run).
func isFunctionRefused(err error) bool {
	if err == nil {
		return false
	}
	m := err.Error()
	if strings.HasPrefix(m, "NOPERM") {
		return strings.Contains(m, "'fcall'") || strings.Contains(m, "'function|")
	}
	return strings.HasPrefix(m, "ERR unknown command 'fcall'") || strings.HasPrefix(m, "ERR unknown command 'function'")
}
