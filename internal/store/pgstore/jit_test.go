package pgstore

import (
	"context"
	"testing"

	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestConnectionsRunWithoutJIT: the store's connections have JIT off
// unless the URL asks for it. topic_info, read by every server's safety
// sweep, cannot turn JIT off itself (it is a view), and compiling it cost
// 45-53 ms of a CPU per call under load for under 1 ms of work.
func TestConnectionsRunWithoutJIT(t *testing.T) {
	srv := pgtest.Shared(t)
	for _, c := range []struct{ query, want string }{
		{"", "off"},
		{"&jit=on", "on"}, // the operator's choice is kept
	} {
		s, err := Open(context.Background(), Options{URL: srv.URL() + c.query, Schema: srv.NewSchema()})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := s.pool.QueryRow(context.Background(), "SHOW jit").Scan(&got); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if got != c.want {
			t.Errorf("URL %q: jit = %s, want %s", srv.URL()+c.query, got, c.want)
		}
	}
}
