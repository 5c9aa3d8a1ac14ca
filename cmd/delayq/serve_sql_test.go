package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// sqlEngine is how `delayq serve` and `delayq migrate` address one SQL
// database, for the tests that run the same steps on each.
type sqlEngine struct {
	name       string // in the startup line ("postgres …")
	start      func(t *testing.T) (url, password string)
	flag       string // --postgres, --mysql
	nsFlag     string // the schema or table-prefix flag
	ns         string
	nsLine     string // how the startup line names ns
	migrateOff string // the flag that makes serve only check the version
	migrated   string // what the first migrate prints
	badInputs  []badServeInput
}

type badServeInput struct {
	name string
	args []string
	msg  string
}

func sqlEngines() []sqlEngine {
	return []sqlEngine{
		{
			name:  "postgres",
			start: func(t *testing.T) (string, string) { return pgtest.Start(t).URL(), "" },
			flag:  "--postgres", nsFlag: "--postgres-schema", ns: "q1", nsLine: "schema q1",
			migrateOff: "--postgres-migrate=false", migrated: fmt.Sprintf("from version 0 to %d", pgstore.SchemaVersion()),
			badInputs: []badServeInput{
				{"not migrated", []string{"--postgres-schema", "never", "--postgres-migrate=false"}, "delayq migrate"},
				{"bad schema", []string{"--postgres-schema", "Bad-Name"}, "invalid schema"},
			},
		},
		{
			name:  "mysql",
			start: func(t *testing.T) (string, string) { return mysqltest.Start(t).URL(), mysqltest.Password },
			flag:  "--mysql", nsFlag: "--mysql-prefix", ns: "q1_", nsLine: "prefix q1_",
			migrateOff: "--mysql-migrate=false", migrated: fmt.Sprintf("from version 0 to %d", mysqlstore.SchemaVersion()),
			badInputs: []badServeInput{
				{"not migrated", []string{"--mysql-prefix", "never_", "--mysql-migrate=false"}, "delayq migrate"},
				{"bad prefix", []string{"--mysql-prefix", "Bad-Name"}, "invalid table prefix"},
			},
		},
	}
}

// TestServeSQL: `delayq migrate` creates the schema (and a second run has
// nothing to do); two servers on one database (migration off: they only
// check the version) share the queue: a send on one is leased from the
// other, woken by NOTIFY on PostgreSQL and the change-counter poll on MySQL.
func TestServeSQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	for _, e := range sqlEngines() {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			url, password := e.start(t)
			migrate := []string{e.flag, url, e.nsFlag, e.ns}
			for _, want := range []string{e.migrated, "nothing to do"} {
				var out, errs bytes.Buffer
				code := runMigrate(context.Background(), migrate, &out, &errs)
				if code != 0 || !strings.Contains(out.String(), want) {
					t.Fatalf("migrate: exit %d, %q %q; want %q", code, out.String(), errs.String(), want)
				}
				if password != "" && strings.Contains(out.String()+errs.String(), password) {
					t.Fatal("migrate printed the password")
				}
			}
			var bases []string
			for range 2 {
				line, _ := startServe(t, []string{"--addr", "127.0.0.1:0", e.flag, url, e.nsFlag, e.ns, e.migrateOff,
					"--log-level", "info", "--no-dashboard"})
				if !strings.Contains(line, e.name+" ") || !strings.Contains(line, e.nsLine) ||
					(password != "" && strings.Contains(line, password)) {
					t.Fatalf("startup line %q does not name %s and %q, or shows the password", line, e.name, e.nsLine)
				}
				bases = append(bases, serveURL(t, line))
			}
			sendHereLeaseThere(t, bases)
		})
	}
}

// TestServeSQLBadInputs: each bad configuration ends serve with exit 1 and
// one line naming the cause, never the password.
func TestServeSQLBadInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts database servers")
	}
	for _, e := range sqlEngines() {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			url, _ := e.start(t)
			unreachable := strings.TrimPrefix(e.flag, "--") + "://u:hunter2@127.0.0.1:1/db"
			cases := append([]badServeInput{
				{"unreachable, password hidden", []string{e.flag, unreachable, "--store-wait", "0"}, "open " + e.name + " " + strings.TrimPrefix(e.flag, "--") + "://u:xxxxx@127.0.0.1:1/db"},
				{"two engines", []string{e.flag, url, "--redis", "redis://127.0.0.1:1/0"}, "give one of"},
			}, e.badInputs...)
			if e.name == "mysql" {
				cases = append(cases, badServeInput{"no database", []string{"--mysql", "mysql://u:hunter2@127.0.0.1:1"}, "names no database"})
			}
			for _, tc := range cases {
				args := tc.args
				if args[0] != e.flag {
					args = append([]string{e.flag, url}, args...)
				}
				var stdout, stderr bytes.Buffer
				code := runServe(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, args...), &stdout, &stderr)
				if code != 1 || !strings.Contains(stderr.String(), tc.msg) || strings.Count(stderr.String(), "\n") != 1 || strings.Contains(stderr.String(), "hunter2") {
					t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line with %q", tc.name, code, stderr.String(), tc.msg)
				}
			}
			var stdout, stderr bytes.Buffer
			if code := runMigrate(context.Background(), []string{e.flag, unreachable, "--timeout", "1s"}, &stdout, &stderr); code != exitRequest ||
				strings.Contains(stderr.String(), "hunter2") || !strings.Contains(stderr.String(), "xxxxx") {
				t.Fatalf("migrate, unreachable: exit %d, stderr %q", code, stderr.String())
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := runMigrate(context.Background(), nil, &stdout, &stderr); code != exitUsage {
		t.Fatalf("migrate without a database: exit %d", code)
	}
}

// sendHereLeaseThere sends a message on the first server and leases it
// from the second: the servers share one queue.
func sendHereLeaseThere(t *testing.T, bases []string) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	post := func(url, body string) (int, string) {
		t.Helper()
		res, err := client.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if c, b := post(bases[0]+"/v1/topics/t/messages", `{"id":"shared","payload":"x","delay":"200ms"}`); c != 201 {
		t.Fatalf("send on server 0: %d %s", c, b)
	}
	c, b := post(bases[1]+"/v1/topics/t/lease", `{"wait":"10s"}`)
	if c != 200 || !strings.Contains(b, `"id":"shared"`) {
		t.Fatalf("lease on server 1: %d %s", c, b)
	}
}

// TestServeSQLTimeout: --sql-timeout reaches the store. With PostgreSQL
// stopped (SIGSTOP) for 3 s, a send on a server given 8 s waits it out
// and is stored; under the 2 s default it would have answered 503. A
// second server given 300 ms answers 503 while the database is stopped.
func TestServeSQLTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a database server")
	}
	pg := pgtest.Start(t)
	base := func(timeout string) string {
		line, _ := startServe(t, []string{"--addr", "127.0.0.1:0", "--postgres", pg.URL(), "--postgres-schema", "q1",
			"--sql-timeout", timeout, "--no-dashboard"})
		return serveURL(t, line)
	}
	patient, hasty := base("8s"), base("300ms")
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	send := func(base, id string) (int, string) {
		res, err := client.Post(base+"/v1/topics/t/messages", "application/json", strings.NewReader(`{"id":"`+id+`","payload":"x","delay":"1h"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, b := range []string{patient, hasty} { // both pools connected before the pause
		if c, body := send(b, "warm-"+strings.TrimPrefix(b, "http://")); c != 201 {
			t.Fatalf("send before the pause: %d %s", c, body)
		}
	}

	pg.Pause(t)
	resumed := make(chan struct{})
	go func() {
		time.Sleep(3 * time.Second)
		pg.Resume(t)
		close(resumed)
	}()
	if c, body := send(hasty, "hasty"); c != http.StatusServiceUnavailable {
		t.Errorf("send with --sql-timeout 300ms while the database is stopped: %d %s, want 503", c, body)
	}
	start := time.Now()
	c, body := send(patient, "patient")
	waited := time.Since(start)
	<-resumed
	if c != 201 {
		t.Fatalf("send with --sql-timeout 8s across a 3 s stop: %d %s (after %v), want 201", c, body, waited)
	}
	if waited < 2*time.Second {
		t.Fatalf("send answered after %v while the database was stopped for 3 s: it did not wait", waited)
	}
}
