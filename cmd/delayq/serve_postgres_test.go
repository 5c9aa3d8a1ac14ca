package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestServePostgres: `delayq migrate` creates the schema; two servers on
// one database (--postgres-migrate=false: they only check the version)
// share the queue: a send on one is leased from the other.
func TestServePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts postgres")
	}
	pg := pgtest.Start(t)
	var out, errs bytes.Buffer
	if code := runMigrate(context.Background(), []string{"--postgres", pg.URL(), "--postgres-schema", "q1"}, &out, &errs); code != 0 ||
		!strings.Contains(out.String(), "from version 0 to 1") {
		t.Fatalf("migrate: exit %d, %q %q", code, out.String(), errs.String())
	}
	out.Reset()
	if code := runMigrate(context.Background(), []string{"--postgres", pg.URL(), "--postgres-schema", "q1"}, &out, &errs); code != 0 ||
		!strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("migrate again: exit %d, %q %q", code, out.String(), errs.String())
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var bases []string
	for range 2 {
		line, _ := startServe(t, []string{"--addr", "127.0.0.1:0", "--postgres", pg.URL(), "--postgres-schema", "q1",
			"--postgres-migrate=false", "--log-level", "error", "--no-dashboard"})
		if !strings.Contains(line, "postgres ") || !strings.Contains(line, "schema q1") {
			t.Fatalf("startup line %q does not name postgres and the schema", line)
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

func TestServePostgresBadInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts postgres")
	}
	pg := pgtest.Start(t)
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unreachable, password hidden", []string{"--postgres", "postgres://u:hunter2@127.0.0.1:1/db"}, "open postgres postgres://u:xxxxx@127.0.0.1:1/db"},
		{"both engines", []string{"--postgres", pg.URL(), "--redis", "redis://127.0.0.1:1/0"}, "give one of"},
		{"not migrated", []string{"--postgres", pg.URL(), "--postgres-schema", "never", "--postgres-migrate=false"}, "delayq migrate"},
		{"bad schema", []string{"--postgres", pg.URL(), "--postgres-schema", "Bad-Name"}, "invalid schema"},
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
	if code := runMigrate(context.Background(), []string{"--postgres", "postgres://u:hunter2@127.0.0.1:1/db", "--timeout", "1s"}, &stdout, &stderr); code != exitRequest ||
		strings.Contains(stderr.String(), "hunter2") || !strings.Contains(stderr.String(), "xxxxx") {
		t.Fatalf("migrate, unreachable: exit %d, stderr %q", code, stderr.String())
	}
	if code := runMigrate(context.Background(), nil, &stdout, &stderr); code != exitUsage {
		t.Fatalf("migrate without --postgres: exit %d", code)
	}
}
