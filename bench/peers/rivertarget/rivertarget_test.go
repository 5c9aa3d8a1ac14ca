package rivertarget

import (
	"testing"

	"github.com/delayq/delayq/bench/peers/internal/sqlcheck"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestRiverDelivers runs River, plain and :tx, on a PostgreSQL of the
// test's own.
func TestRiverDelivers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	srv := pgtest.Start(t)
	// poll=100ms keeps the run short; workers=20 so a fetch takes more than two.
	sqlcheck.Run(t, Resolve, "river:"+srv.URL()+":poll=100ms:workers=20", "river:"+srv.URL()+":tx:poll=100ms:workers=20")
}

func TestParse(t *testing.T) {
	s, ok, err := Parse("river:postgres://u@h:5432/db?sslmode=disable:tx:poll=50ms:workers=8")
	if !ok || err != nil || s.URL != "postgres://u@h:5432/db?sslmode=disable" || !s.Tx || s.Poll.Milliseconds() != 50 || s.Workers != 8 {
		t.Fatalf("Parse = %+v, %v, %v", s, ok, err)
	}
	if s.Name() != "river:tx:poll=50ms:workers=8" {
		t.Errorf("Name = %q", s.Name())
	}
	for _, bad := range []string{"river", "river:mysql://x/y", "river:postgres://h/db:poll=0s", "river:postgres://h/db:workers=0"} {
		if _, ok, err := Parse(bad); !ok || err == nil {
			t.Errorf("Parse(%q) = %v, %v; want an error", bad, ok, err)
		}
	}
	if _, ok, _ := Parse("asynq"); ok {
		t.Error("Parse(asynq) claimed it")
	}
}
