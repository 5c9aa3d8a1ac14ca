package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchCommand(t *testing.T) {
	var out, errb bytes.Buffer
	code := runMain(context.Background(), []string{"bench", "send", "--target", "memory", "--n", "200", "--batch", "20", "--progress", "off"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "### send (n=200 batch=20") || !strings.Contains(out.String(), "send throughput (msgs/s)") {
		t.Fatalf("output:\n%s", out.String())
	}
	out.Reset()
	code = runMain(context.Background(), []string{"bench", "drain", "--target", "memory", "--n", "100", "--json", "--progress", "off"}, &out, &errb)
	if code != 0 {
		t.Fatalf("json exit %d: %s", code, errb.String())
	}
	var rep struct {
		Scenarios []struct {
			Scenario string
			Results  []struct {
				Target  string
				Summary map[string]struct{ Sum, Median float64 }
			}
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	s := rep.Scenarios[0].Results[0].Summary
	if s["missing"].Sum != 0 || s["duplicates"].Sum != 0 || s["msgs_per_s"].Median <= 0 {
		t.Fatalf("drain summary %+v", s)
	}
	if code := runMain(context.Background(), []string{"bench", "send", "--target", "nosuch"}, &out, &errb); code != 2 {
		t.Fatalf("unknown target: exit %d", code)
	}
}
