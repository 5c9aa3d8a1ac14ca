package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestServeMySQL: `delayq migrate --mysql` creates the tables; two servers
// on one database (--mysql-migrate=false: they only check the version)
// share the queue: a send on one is leased from the other, whose
// long-poll the change-counter poll wakes.
func TestServeMySQL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mariadbd")
	}
	my := mysqltest.Start(t)
	var out, errs bytes.Buffer
	if code := runMigrate(context.Background(), []string{"--mysql", my.URL(), "--mysql-prefix", "q1_"}, &out, &errs); code != 0 ||
		!strings.Contains(out.String(), "from version 0 to 2") {
		t.Fatalf("migrate: exit %d, %q %q", code, out.String(), errs.String())
	}
	out.Reset()
	if code := runMigrate(context.Background(), []string{"--mysql", my.URL(), "--mysql-prefix", "q1_"}, &out, &errs); code != 0 ||
		!strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("migrate again: exit %d, %q %q", code, out.String(), errs.String())
	}
	if strings.Contains(out.String()+errs.String(), mysqltest.Password) {
		t.Fatal("migrate printed the password")
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var bases []string
	for range 2 {
		line, _ := startServe(t, []string{"--addr", "127.0.0.1:0", "--mysql", my.URL(), "--mysql-prefix", "q1_",
			"--mysql-migrate=false", "--log-level", "error", "--no-dashboard"})
		if !strings.Contains(line, "mysql ") || !strings.Contains(line, "prefix q1_") || strings.Contains(line, mysqltest.Password) {
			t.Fatalf("startup line %q does not name mysql and the prefix, or shows the password", line)
		}
		bases = append(bases, strings.Fields(line)[2])
	}
	t.Cleanup(client.CloseIdleConnections)
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

func TestServeMySQLBadInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mariadbd")
	}
	my := mysqltest.Start(t)
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unreachable, password hidden", []string{"--mysql", "mysql://u:hunter2@127.0.0.1:1/db"}, "open mysql mysql://u:xxxxx@127.0.0.1:1/db"},
		{"two engines", []string{"--mysql", my.URL(), "--redis", "redis://127.0.0.1:1/0"}, "give one of"},
		{"not migrated", []string{"--mysql", my.URL(), "--mysql-prefix", "never_", "--mysql-migrate=false"}, "delayq migrate"},
		{"bad prefix", []string{"--mysql", my.URL(), "--mysql-prefix", "Bad-Name"}, "invalid table prefix"},
		{"no database", []string{"--mysql", "mysql://u:hunter2@127.0.0.1:1"}, "names no database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runServe(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, tc.args...), &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), tc.msg) || strings.Count(stderr.String(), "\n") != 1 || strings.Contains(stderr.String(), "hunter2") {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one line with %q", code, stderr.String(), tc.msg)
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if code := runMigrate(context.Background(), []string{"--mysql", "mysql://u:hunter2@127.0.0.1:1/db", "--timeout", "1s"}, &stdout, &stderr); code != exitRequest ||
		strings.Contains(stderr.String(), "hunter2") || !strings.Contains(stderr.String(), "xxxxx") {
		t.Fatalf("migrate, unreachable: exit %d, stderr %q", code, stderr.String())
	}
}
