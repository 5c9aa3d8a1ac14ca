package delaytable

import (
	"testing"
	"time"

	"github.com/delayq/delayq/bench/peers/internal/sqlcheck"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestDelaytableDelivers runs the polling table, autocommit and :tx, on a
// MariaDB of the test's own.
func TestDelaytableDelivers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB")
	}
	srv := mysqltest.Start(t)
	sqlcheck.Run(t, Resolve, "delaytable:"+srv.URL()+":poll=100ms", "delaytable:"+srv.URL()+":tx:poll=100ms")
}

func TestParse(t *testing.T) {
	s, ok, err := Parse("delaytable:mysql://root@127.0.0.1:3306/test:tx:poll=100ms")
	if !ok || err != nil || s.URL != "mysql://root@127.0.0.1:3306/test" || !s.Tx || s.Poll != 100*time.Millisecond {
		t.Fatalf("Parse = %+v, %v, %v", s, ok, err)
	}
	if s.Name() != "delaytable:tx:poll=100ms" {
		t.Errorf("Name = %q", s.Name())
	}
	if d, _, _ := Parse("delaytable:mysql://root@h:3306/test"); d.Poll != DefaultPoll || d.Name() != "delaytable" {
		t.Errorf("default = %+v", d)
	}
	for _, bad := range []string{"delaytable", "delaytable:postgres://h/db", "delaytable:mysql://h:3306/db:poll=x"} {
		if _, ok, err := Parse(bad); !ok || err == nil {
			t.Errorf("Parse(%q) = %v, %v; want an error", bad, ok, err)
		}
	}
}
