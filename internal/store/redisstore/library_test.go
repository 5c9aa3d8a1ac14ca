package redisstore

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestLibraryLoads: Redis compiles the library (a helper or a body that
// Lua refuses, e.g. past Lua 5.1's 60 upvalues per function, would fail
// FUNCTION LOAD, and the store would fall back to scripts with only a
// warning), and registers every script of the store as its function, with
// its script's flags.
func TestLibraryLoads(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	if err := rc.FunctionLoad(ctx, library.src).Err(); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
	libs, err := rc.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: library.name}).Result()
	if err != nil || len(libs) != 1 || libs[0].Name != library.name {
		t.Fatalf("FUNCTION LIST %s: %+v, %v", library.name, libs, err)
	}
	got := map[string][]string{}
	for _, f := range libs[0].Functions {
		got[f.Name] = f.Flags
	}
	if len(got) != len(libScripts) || len(libScripts) == 0 {
		t.Errorf("%d functions registered, %d scripts", len(got), len(libScripts))
	}
	want := map[string][]string{flagsGrow: nil, flagsState: {"allow-oom"}, flagsRead: {"no-writes"}}
	for _, sc := range libScripts {
		flags, ok := got[sc.fn]
		if !ok {
			t.Errorf("script %s: no function %s", sc.name, sc.fn)
			continue
		}
		if !slices.Equal(flags, want[sc.flags]) && !(len(flags) == 0 && len(want[sc.flags]) == 0) {
			t.Errorf("function %s: flags %q, want %q", sc.fn, flags, want[sc.flags])
		}
	}
}
