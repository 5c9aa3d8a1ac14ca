package redisstore

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestOpenRefusesNewerFormat is a rollback: a keyspace whose config hash
// says a newer format (as a later delayq would write it) is refused at
// Open with an error naming both formats and wrapping
// store.ErrNewerFormat, and no key changes.
func TestOpenRefusesNewerFormat(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(ctx, Options{URL: srv.URL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t",
		Messages: []store.InsertMessage{{ID: "a", Relative: true, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ours, _ := strconv.Atoi(formatVersion)
	future := strconv.Itoa(ours + 1)
	cfgKey := keyspace{prefix: DefaultPrefix}.config()
	if err := rdb.HSet(ctx, cfgKey, "format", future).Err(); err != nil {
		t.Fatal(err)
	}
	dump := func() map[string]string {
		keys, err := rdb.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, k := range keys {
			out[k] = rdb.Dump(ctx, k).Val()
		}
		return out
	}
	before := dump()
	if len(before) < 2 {
		t.Fatalf("the keyspace holds %d keys; want the config and the message's", len(before))
	}

	_, err = Open(ctx, Options{URL: srv.URL(), Logger: quiet})
	if !errors.Is(err, store.ErrNewerFormat) {
		t.Fatalf("Open of a format-%s keyspace: %v; want store.ErrNewerFormat", future, err)
	}
	for _, want := range []string{"store format " + future, "reads format " + formatVersion, cfgKey} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if after := dump(); !maps.Equal(before, after) {
		t.Errorf("the refused Open changed the keyspace: %d keys before, %d after", len(before), len(after))
	}
	// A format that is no number is damage, not a newer build.
	if err := rdb.HSet(ctx, cfgKey, "format", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, Options{URL: srv.URL(), Logger: quiet}); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("format \"x\": %v; want store.ErrCorrupt", err)
	}
}
