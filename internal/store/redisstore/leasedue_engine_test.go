package redisstore_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/engine/enginetest"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// TestEngineReleasesWithoutPromotion: through the engine (Redis TIME, one
// server), a message coming due while a long-poll waits is leased by that
// long-poll's lease script straight from scheduled: between its send and
// its delivery Redis ran one ZADD (to the lease index), where a promotion
// first adds a second (to the ready index), as every release did before
// the store was a store.DueLeaser. The engine still promotes a message
// its long-polls leave for longer than a 50 ms grace, so on a loaded
// machine a release may be promoted; the test asks that most are not.
func TestEngineReleasesWithoutPromotion(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: uniquePrefix(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e := enginetest.Open(t, s, engine.Config{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	zadds := func() int64 {
		t.Helper()
		info, err := rc.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_zadd:calls="); ok {
				var n int64
				fmt.Sscanf(rest, "%d", &n)
				return n
			}
		}
		return 0
	}
	const rounds = 6
	direct := 0
	var perRelease []int64
	for i := range rounds {
		got := make(chan []*domain.Message, 1)
		go func() {
			ms, err := e.Lease(ctx, "rel", domain.LeaseRequest{Max: 1, Wait: 10 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- ms
		}()
		time.Sleep(50 * time.Millisecond) // the long-poll is waiting
		if _, err := e.Send(ctx, "rel", domain.SendRequest{ID: fmt.Sprint("m", i), Payload: []byte("x"), When: domain.When{Delay: 200 * time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
		before := zadds()
		ms := <-got
		if len(ms) != 1 || ms[0].ID != fmt.Sprint("m", i) {
			t.Fatalf("round %d: leased %v", i, ms)
		}
		n := zadds() - before
		perRelease = append(perRelease, n)
		if n == 1 {
			direct++
		}
		if err := e.Ack(ctx, "rel", ms[0].ID, ms[0].Receipt); err != nil {
			t.Fatal(err)
		}
	}
	if direct < rounds/2 {
		t.Errorf("%d of %d releases leased without a promotion (ZADDs per release %v; 1: lease only, 2: promotion and lease)", direct, rounds, perRelease)
	}
}
