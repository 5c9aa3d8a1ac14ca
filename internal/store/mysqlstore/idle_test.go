package mysqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// TestIdleNotifyCost measures what the notification poll costs an idle
// database (queries/s and mariadbd's CPU over 30 s, from /proc), for
// docs/mysql.md. It asserts no timing; it runs only when
// DELAYQ_MEASURE_IDLE=1, as it takes 30 s.
func TestIdleNotifyCost(t *testing.T) {
	if os.Getenv("DELAYQ_MEASURE_IDLE") != "1" {
		t.Skip("set DELAYQ_MEASURE_IDLE=1 to measure")
	}
	srv := mysqltest.Shared(t)
	s := open(t, mysqlstore.TimeDB)
	for i := range 10 {
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t" + strconv.Itoa(i), Messages: []store.InsertMessage{{ID: "x", Relative: true, Delay: 3_600_000, MaxAttempts: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("mysql", srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pid, err := srv.PID()
	if err != nil {
		t.Fatal(err)
	}
	questions := func() int64 {
		var name string
		var v int64
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	cpu := func() int64 { // utime+stime, clock ticks
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		k, _ := strconv.ParseInt(f[12], 10, 64)
		return u + k
	}
	measure := func(label string, d time.Duration) {
		q0, c0 := questions(), cpu()
		time.Sleep(d)
		q1, c1 := questions(), cpu()
		t.Logf("%s: %.1f queries/s, mariadbd CPU %.2f%% of one core over %v", label, float64(q1-q0-1)/d.Seconds(), float64(c1-c0)/100/d.Seconds()*100, d)
	}
	measure("no subscriber", 30*time.Second)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Subscribe(sctx, nil, func(string, int64) {})
	}()
	measure("one subscriber, 10 topics", 30*time.Second)
	cancel()
	<-done
}
