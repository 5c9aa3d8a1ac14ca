package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"

	"go.uber.org/goleak"
)

func TestServeFlagPrecedence(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "delayq.json")
	os.WriteFile(cfg, []byte(`{"addr":"127.0.0.1:1","data":"/from/file","max-payload":2048,"insecure":true,"log-format":"json","token":["a:0123456789abcdef0:admin:*"]}`), 0o600)
	env := map[string]string{
		"DELAYQ_CONFIG":    cfg,
		"DELAYQ_DATA":      "/from/env",
		"DELAYQ_MAX_DELAY": "48h",
		"DELAYQ_ADDR":      "127.0.0.1:2",
		"DELAYQ_TOKEN":     "a-cli-secret-not-a-spec", // the CLI's variable: ignored by serve
	}
	o, err := parseServe([]string{"--addr", "127.0.0.1:3"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ name, got, want string }{
		{"addr (flag beats env and file)", o.addr, "127.0.0.1:3"},
		{"data (env beats file)", o.data, "/from/env"},
		{"max-delay (env)", o.maxDelay.String(), "48h0m0s"},
		{"max-payload (file)", strconv.Itoa(o.maxPayload), "2048"},
		{"log-format (file)", o.logFormat, "json"},
		{"log-level (default)", o.logLevel, "info"},
		{"dedup-window (default)", o.dedupWindow.String(), "24h0m0s"},
		{"sql-timeout (default)", o.sqlTimeout.String(), "2s"},
		{"tokens (file)", strings.Join(o.tokens, " "), "a:0123456789abcdef0:admin:*"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if !o.insecure {
		t.Error("insecure from the file was not applied")
	}
	env["DELAYQ_DASHBOARD_SESSION_KEY"] = "new-key-0123456789abcdef0123456789,old-key-0123456789abcdef0123456789"
	if o, err = parseServe(nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if keys := serveConfig(o, nil).DashboardSessionKeys; len(keys) != 2 || keys[0] != "new-key-0123456789abcdef0123456789" {
		t.Errorf("DELAYQ_DASHBOARD_SESSION_KEY: keys %q, want the two, new first", keys)
	}
	env["DELAYQ_SQL_TIMEOUT"] = "7s"
	if o, err = parseServe(nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if got := serveConfig(o, nil).SQLTimeout; got != 7*time.Second {
		t.Errorf("DELAYQ_SQL_TIMEOUT=7s: Config.SQLTimeout %s", got)
	}
	env["DELAYQ_SERVE_TOKENS"] = "b:0123456789abcdef1:produce:x c:0123456789abcdef2:consume:y"
	if o, err = parseServe(nil, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if len(o.tokens) != 2 || !strings.HasPrefix(o.tokens[0], "b:") {
		t.Errorf("DELAYQ_SERVE_TOKENS did not replace the file's tokens: %q", o.tokens)
	}
}

func TestServeBadInputs(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		msg  string
	}{
		{"unknown flag", []string{"--nope"}, nil, 2, "flag provided but not defined: --nope"},
		{"bad duration", []string{"--max-delay", "soon"}, nil, 2, "invalid value"},
		{"bad env", nil, map[string]string{"DELAYQ_MAX_CONNS": "many"}, 2, "DELAYQ_MAX_CONNS"},
		{"stray argument", []string{"extra"}, nil, 2, "unexpected argument"},
		{"unknown config key", []string{"--config", writeFile(t, dir, "c.json", `{"adress":"x"}`)}, nil, 2, `unknown key "adress"`},
		{"redis unreachable", []string{"--redis", "redis://:hunter2@127.0.0.1:1/0", "--store-wait", "0"}, nil, 1, "open redis redis://:xxxxx@127.0.0.1:1/0"},
		{"negative store wait", []string{"--store-wait", "-1s", "--data", filepath.Join(dir, "never")}, nil, 1, "--store-wait -1s: must be 0 (fail at once) or more"},
		{"non-loopback without tokens", []string{"--addr", "0.0.0.0:0", "--data", filepath.Join(dir, "never")}, nil, 1, "--insecure"},
		{"bad token", []string{"--token", "name:short:admin:*"}, nil, 1, "secret of name"},
		{"bad log level", []string{"--log-level", "loud"}, nil, 1, "--log-level"},
		{"zero sql timeout", []string{"--sql-timeout", "0s", "--data", filepath.Join(dir, "never")}, nil, 1, "--sql-timeout 0s: must be more than 0"},
		{"debug listener not on loopback", []string{"--debug-addr", "0.0.0.0:6060", "--data", filepath.Join(dir, "never")}, nil, 1, "--debug-addr \"0.0.0.0:6060\": must be a loopback address"},
		{"debug listener without port", []string{"--debug-addr", "127.0.0.1", "--data", filepath.Join(dir, "never")}, nil, 1, "--debug-addr \"127.0.0.1\""},
		{"bad allowed host", []string{"--allowed-hosts", "queue.example,http://x", "--data", filepath.Join(dir, "never")}, nil, 1, `--allowed-hosts: allowed host "http://x"`},
		{"short dashboard session key", []string{"--data", filepath.Join(dir, "never")}, map[string]string{"DELAYQ_DASHBOARD_SESSION_KEY": "0123456789abcdef0123456789abcdef0,short"}, 1, "dashboard session key 2 of 2 is 5 bytes; want at least 32"},
		{"bad allowed host in env", []string{"--data", filepath.Join(dir, "never")}, map[string]string{"DELAYQ_ALLOWED_HOSTS": "a/b"}, 1, `--allowed-hosts: allowed host "a/b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := runServe(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.msg) || strings.Count(stderr.String(), "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit %d and one line with %q", code, stderr.String(), tc.code, tc.msg)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "never")); err == nil {
		t.Error("the refused server created its data directory")
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServeEndToEnd starts the real server on a data directory, sends a
// message, shuts down with ctx (as SIGTERM does), restarts on the same
// directory and finds the message; with a token configured, a request
// without it is 401.
func TestServeEndToEnd(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	data := filepath.Join(t.TempDir(), "data")
	secret := "e2e-secret-0123456789"
	args := []string{"--addr", "127.0.0.1:0", "--data", data, "--token", "ops:" + secret + ":admin:*", "--log-level", "info"}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	do := func(method, url, body string, withToken bool) int {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if withToken {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for round := 0; round < 2; round++ {
		line, stop := startServe(t, args)
		if !strings.Contains(line, data) || !strings.Contains(line, "auth=on") || !strings.Contains(line, "version=") || !strings.Contains(line, "tracing=off") {
			t.Fatalf("startup record %q lacks the data dir, auth state, version or tracing state", line)
		}
		base := serveURL(t, line)
		if c := do("GET", base+"/healthz", "", false); c != 200 {
			t.Fatalf("healthz %d", c)
		}
		if c := do("GET", base+"/v1/topics", "", false); c != 401 {
			t.Fatalf("no token: %d, want 401", c)
		}
		if round == 0 {
			if c := do("POST", base+"/v1/topics/t/messages", `{"id":"kept","payload":"x","delay":"1h"}`, true); c != 201 {
				t.Fatalf("send %d", c)
			}
		} else if c := do("GET", base+"/v1/topics/t/messages/kept", "", true); c != 200 {
			t.Fatalf("after restart, get %d", c)
		}
		if c := do("GET", base+"/metrics", "", true); c != 200 {
			t.Fatalf("metrics %d", c)
		}
		client.CloseIdleConnections()
		if code, stderr := stop(); code != 0 {
			t.Fatalf("exit %d; stderr %s", code, stderr)
		}
	}
}

// startServe runs `delayq serve args` in-process and returns its startup
// log record (msg="delayq serving" url=… store=… auth=…; args must leave
// the log level at info) once it is listening, and stop, which cancels it
// as SIGTERM does and returns its exit code and stderr (it also runs at
// cleanup if the test did not call it).
func startServe(t *testing.T, args []string) (line string, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	exit := make(chan int, 1)
	go func() { exit <- runServe(ctx, args, io.Discard, pw); pw.Close() }()
	started := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			stderr.write(sc.Text() + "\n")
			if strings.Contains(sc.Text(), `msg="delayq serving"`) {
				select {
				case started <- sc.Text():
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
		close(started)
	}()
	var once sync.Once
	var code int
	stop = func() (int, string) {
		once.Do(func() { cancel(); code = <-exit; <-copied })
		return code, stderr.String()
	}
	t.Cleanup(func() { stop() })
	// The record is logged at info: a test that sets a quieter level would
	// otherwise wait here until the package's timeout.
	select {
	case line, ok := <-started:
		if !ok {
			code, errs := stop()
			t.Fatalf("no startup record; exit %d, stderr %s", code, errs)
		}
		return line, stop
	case <-time.After(time.Minute):
		code, errs := stop()
		t.Fatalf("no startup record within a minute (is --log-level above info?); exit %d, stderr %s", code, errs)
	}
	return "", stop
}

// serveURL is the url of a startup record.
func serveURL(t *testing.T, line string) string {
	t.Helper()
	m := regexp.MustCompile(` url=(https?://\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("startup record %q has no url", line)
	}
	return m[1]
}

// lockedBuffer collects a server's stderr while tests read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) write(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeRedis runs the server on the Redis engine: two servers on one
// Redis share the queue (a send on one is leased from the other).
func TestServeRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	rs := redistest.Start(t)
	var bases []string
	for range 2 {
		line, _ := startServe(t, []string{"--addr", "127.0.0.1:0", "--redis", rs.URL(), "--log-level", "info", "--no-dashboard"})
		if !strings.Contains(line, "redis ") {
			t.Fatalf("startup line %q does not name redis", line)
		}
		bases = append(bases, serveURL(t, line))
	}
	sendHereLeaseThere(t, bases)
}

// TestServeDebugAddr: --debug-addr serves the profiling endpoints on their
// own loopback listener, and the API's address does not serve them.
func TestServeDebugAddr(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := ln.Addr().String()
	ln.Close()
	t.Setenv("DELAYQ_ALLOWED_HOSTS", "queue.test, *.dq.test")
	args := []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data"), "--debug-addr", debugAddr, "--log-level", "info"}
	line, stop := startServe(t, args)
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	get := func(url string, host ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		if len(host) > 0 {
			req.Host = host[0]
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := get("http://" + debugAddr + "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("debug listener /debug/pprof/: %d %.200q", code, body)
	}
	if code, body := get("http://" + debugAddr + "/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Errorf("goroutine dump: %d %.200q", code, body)
	}
	base := serveURL(t, line)
	if code, _ := get(base + "/debug/pprof/"); code == 200 {
		t.Errorf("the API address serves /debug/pprof/ (%d); it must not", code)
	}
	// A foreign Host (a DNS-rebound page) is refused on both listeners;
	// DELAYQ_ALLOWED_HOSTS' names are answered.
	for _, u := range []string{"http://" + debugAddr + "/debug/pprof/cmdline", base + "/healthz"} {
		if code, body := get(u, "rebind.attacker.example"); code != 403 || !strings.Contains(body, `is not allowed; add it with --allowed-hosts`) {
			t.Errorf("%s with a foreign Host: %d %.200q", u, code, body)
		}
		for _, h := range []string{"queue.test", "a.dq.test:7070"} {
			if code, body := get(u, h); code != 200 {
				t.Errorf("%s with allowed Host %s: %d %.200q", u, h, code, body)
			}
		}
	}
	client.CloseIdleConnections()
	if code, stderr := stop(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr)
	}
	if _, err := net.DialTimeout("tcp", debugAddr, time.Second); err == nil {
		t.Error("the debug listener is still open after shutdown")
	}
}

// TestServeRedisURLHidesPassword: a --redis URL (or DELAYQ_REDIS) that
// does not parse is reported without its password, also when the password
// has an unescaped '%', '/' or '?' (the parser then splits it anywhere).
func TestServeRedisURLHidesPassword(t *testing.T) {
	for _, u := range []string{
		"redis://:s3kr1t@127.0.0.1:bad/0",
		"redis://:s3k%r1t@127.0.0.1:6379/0",
		"redis://:s3kr1t@[::1:6379/0",
		"redis://:s3kr1t/x@127.0.0.1:6379/0",
		"redis://:s3kr1t?x@127.0.0.1:6379/0",
		"redis+cluster://:s3kr1t@a:bad,b:2",
		"redis+sentinel://:s3kr1t@a:bad/m/0",
	} {
		for _, viaEnv := range []bool{false, true} {
			args := []string{"--redis", u}
			if viaEnv {
				args = nil
				t.Setenv("DELAYQ_REDIS", u)
			}
			var stdout, stderr bytes.Buffer
			code := runServe(context.Background(), args, &stdout, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), "bad URL") || strings.Contains(stderr.String(), "kr1t") {
				t.Errorf("%s (env %v): exit %d, stderr %q; want 1, a bad URL message and no password", u, viaEnv, code, stderr.String())
			}
		}
	}
}

// TestServeTracingFromEnv: the OTEL_* environment turns tracing on (the
// start-up record names the exporter), and /healthz names the build.
func TestServeTracingFromEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	line, stop := startServe(t, []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data"), "--no-dashboard"})
	if !strings.Contains(line, "tracing=console") {
		t.Fatalf("startup record %q does not say tracing is on", line)
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	res, err := client.Get(serveURL(t, line) + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `"version":"`) || res.Header.Get("X-Request-Id") == "" {
		t.Fatalf("healthz: %d %s %v", res.StatusCode, body, res.Header)
	}
	client.CloseIdleConnections()
	if code, stderr := stop(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr)
	}
}
