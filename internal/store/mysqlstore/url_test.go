package mysqlstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

func TestParseURL(t *testing.T) {
	c, err := ParseURL("mysql://u:s%40cret@db.example:3307/queue?timeout=5s&charset=utf8mb4")
	if err != nil {
		t.Fatal(err)
	}
	if c.User != "u" || c.Passwd != "s@cret" || c.Addr != "db.example:3307" || c.DBName != "queue" || c.Timeout.String() != "5s" || !c.ClientFoundRows {
		t.Fatalf("parsed %+v", c)
	}
	if c, err := ParseURL("mysql://u@h/db"); err != nil || c.Addr != "h:3306" || !c.InterpolateParams {
		t.Fatalf("default port, interpolated parameters: %+v %v", c, err)
	}
	if !c.InterpolateParams {
		t.Fatal("parameters not interpolated by default")
	}
	if c, err := ParseURL("mysql://u@h/db?interpolateParams=false"); err != nil || c.InterpolateParams {
		t.Fatalf("interpolateParams=false not kept: %+v %v", c, err)
	}
	for _, bad := range []string{"", "postgres://u:pw@h/db", "mysql://u:topsecret@h:1", "mysql://u:topsecret@h:1/db?timeout=nope"} {
		_, err := ParseURL(bad)
		if err == nil {
			t.Errorf("%q: no error", bad)
		} else if strings.Contains(err.Error(), "topsecret") {
			t.Errorf("%q: error shows the password: %v", bad, err)
		}
	}
}

// An unreachable server fails Open with ErrUnavailable and an error that
// does not show the password.
func TestOpenRedacts(t *testing.T) {
	_, err := Open(context.Background(), Options{URL: "mysql://u:topsecret@127.0.0.1:1/db", Timeout: 500_000_000})
	if !errors.Is(err, store.ErrUnavailable) || strings.Contains(err.Error(), "topsecret") {
		t.Fatalf("Open: %v", err)
	}
	if got := RedactURL("mysql://u:topsecret@h:1/db"); got != "mysql://u:xxxxx@h:1/db" {
		t.Fatalf("RedactURL: %q", got)
	}
}
