package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/engine"
)

// TestServeMaxTopics: --max-topics bounds the topics sends and settings
// create (default 10000); beyond it the answer is a JSON 409 naming the
// limit, and existing topics keep working.
func TestServeMaxTopics(t *testing.T) {
	o, err := parseServe(nil, func(string) string { return "" })
	if err != nil || o.maxTopics != engine.DefaultMaxTopics || engine.DefaultMaxTopics != 10000 {
		t.Fatalf("default --max-topics %d (%v), want 10000", o.maxTopics, err)
	}
	args := []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data"), "--log-level", "info", "--max-topics", "2"}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	line, stop := startServe(t, args)
	base := serveURL(t, line)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(raw)
	}
	for _, topic := range []string{"a", "b", "a"} {
		if code, body := do("POST", "/v1/topics/"+topic+"/messages", `{"payload":"x","delay":"1h"}`); code != 201 {
			t.Fatalf("send to %s: %d %s", topic, code, body)
		}
	}
	for _, req := range [][3]string{
		{"POST", "/v1/topics/c/messages", `{"payload":"x"}`},
		{"PUT", "/v1/topics/c", `{"max_attempts":3}`},
	} {
		code, body := do(req[0], req[1], req[2])
		var e struct {
			Error struct{ Code, Message string }
		}
		if code != http.StatusConflict || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "conflict" || !strings.Contains(e.Error.Message, "limit of 2 topics") {
			t.Fatalf("%s %s beyond the limit: %d %s, want a JSON 409 naming the limit", req[0], req[1], code, body)
		}
	}
	if code, body := do("PUT", "/v1/topics/b", `{"max_attempts":3}`); code != 200 {
		t.Fatalf("settings of an existing topic: %d %s", code, body)
	}
	client.CloseIdleConnections()
	if code, stderr := stop(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr)
	}
}
