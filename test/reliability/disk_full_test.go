package reliability

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// mountTmpfs mounts a tmpfs of size (e.g. "160m") on a new directory and
// unmounts it in Cleanup; it skips the test when mounting is not allowed.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("S5 needs a tmpfs (root): mount -t tmpfs -o size=%s: %v %s", size, err, bytes.TrimSpace(out))
	}
	// Cleanups run last-registered first: the caller makes its server
	// after this, so the server is killed before the umount.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s; lazy umount", dir, err, bytes.TrimSpace(out))
			_ = exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

func fsUsage(t *testing.T, dir string) (used, total uint64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	total = st.Blocks * uint64(st.Bsize)
	return total - st.Bavail*uint64(st.Bsize), total
}

const mib = 1 << 20

type s5Results struct {
	Scenario           string      `json:"scenario"`
	Date               string      `json:"date"`
	TmpfsSize          string      `json:"tmpfs_size"`
	FillerMiB          int         `json:"filler_mib"`
	SentOKBeforeFull   int         `json:"sends_ok_before_first_rejection"`
	PayloadMiBAcked    float64     `json:"payload_mib_acked"`
	FirstRejection     string      `json:"first_rejection"`
	RetryAfter         string      `json:"retry_after_header"`
	FillPctAtReject    float64     `json:"fill_pct_at_first_rejection"`
	UsedMiBAtReject    float64     `json:"used_mib_at_first_rejection"`
	SendsWhileFull     int         `json:"sends_tried_while_full"`
	SendsOKWhileFull   int         `json:"sends_ok_while_full"`
	Rejections         []string    `json:"rejection_statuses"`
	AcksWhileFull      int         `json:"acks_ok_while_full"`
	AckLatency         latencyJSON `json:"ack_latency_while_full"`
	CancelsWhileFull   int         `json:"cancels_ok_while_full"`
	ResumeAfterMS      float64     `json:"resume_after_free_ms"`
	ServerStarts       int         `json:"server_starts"`
	Check              checkJSON   `json:"check"`
	FillPctAfterResume float64     `json:"fill_pct_after_resume"`
}

// TestS5DiskFull: the data dir is on a small tmpfs next to a filler file;
// sends of 64 KiB payloads fill it. Pass: sends are refused with 507, or
// 503 with Retry-After, before any acknowledged data is at risk; acks and
// cancels succeed while the disk is full; after the filler is removed,
// sends resume with no restart; every acknowledged send is delivered
// (lost 0) and nothing else is (unexpected 0).
//
// Size: the store's ballast is 32 MiB and it accepts inserts again once
// more than twice that is free, so the disk must be larger than 64 MiB
// for sends ever to resume: tmpfs 160 MiB with an 80 MiB filler (see
// docs/reliability.md for the 64 MiB case).
func TestS5DiskFull(t *testing.T) {
	// DELAYQ_S5_TMPFS_MIB / DELAYQ_S5_FILLER_MIB override the sizes; at 64
	// MiB or less sends cannot resume (see above), so that phase is skipped.
	sizeMiB, fillerMiB := envInt(t, "DELAYQ_S5_TMPFS_MIB", 160), envInt(t, "DELAYQ_S5_FILLER_MIB", 80)
	size := fmt.Sprintf("%dm", sizeMiB)
	resumable := sizeMiB > 2*32
	mnt := mountTmpfs(t, size)
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, fillerMiB*mib), 0o644); err != nil {
		t.Fatal(err)
	}
	p := newProc(t)
	p.data = filepath.Join(mnt, "data")
	p.start()
	c := client(t, p.url(), 30*time.Second)
	ctx := context.Background()
	rec := history.NewRecorder()
	const topic = "s5"
	out := s5Results{Scenario: "S5 disk full", Date: time.Now().UTC().Format(time.RFC3339), TmpfsSize: size, FillerMiB: fillerMiB}

	send := func(id string, payload []byte, delay time.Duration) error {
		pd := rec.Invoke(history.Send, id).WithDelay(delay)
		m, err := c.Send(ctx, topic, delayq.SendRequest{ID: id, Payload: payload, When: delayq.When{Delay: delay}})
		o := outcome(err)
		if o == history.OK {
			pd.WithDue(m.DeliverAt)
		}
		finish(pd, o)
		return err
	}
	// Messages to ack and to cancel while the disk is full.
	const nAck, nCancel = 300, 100
	for k := range nAck {
		if err := send(fmt.Sprint("a-", k), []byte("ack me"), 0); err != nil {
			t.Fatal(err)
		}
	}
	for k := range nCancel {
		if err := send(fmt.Sprint("c-", k), []byte("cancel me"), time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var held []*delayq.Message
	for len(held) < nAck {
		inv := rec.Now()
		ms, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 100, Lease: 10 * time.Minute, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			rec.Record(history.Op{Kind: history.Lease, ID: m.ID, Outcome: history.OK, Invoke: inv, Complete: rec.Now(), DueAt: m.DeliverAt, At: m.UpdatedAt})
		}
		held = append(held, ms...)
	}

	// Fill with 64 KiB payloads until the first refusal.
	payload := bytes.Repeat([]byte("x"), 64<<10)
	k := 0
	var firstErr error
	for k < 10_000 {
		id := fmt.Sprint("f-", k)
		k++
		if err := send(id, payload, 0); err != nil {
			firstErr = err
			break
		}
		out.SentOKBeforeFull++
	}
	used, total := fsUsage(t, mnt)
	out.UsedMiBAtReject, out.FillPctAtReject = float64(used)/mib, 100*float64(used)/float64(total)
	out.PayloadMiBAcked = float64(out.SentOKBeforeFull) * 64 / 1024
	var ae *delayq.APIError
	if !errors.As(firstErr, &ae) || (ae.StatusCode != http.StatusInsufficientStorage && ae.StatusCode != http.StatusServiceUnavailable) {
		t.Fatalf("first failed send after %d ok: %v, want 507 or 503", out.SentOKBeforeFull, firstErr)
	}
	out.FirstRejection = fmt.Sprintf("%d %s", ae.StatusCode, ae.Message)
	t.Logf("first refusal after %d sends (%.1f MiB of payload): %s; tmpfs %.1f of %.0f MiB used (%.1f%%)",
		out.SentOKBeforeFull, out.PayloadMiBAcked, out.FirstRejection, float64(used)/mib, float64(total)/mib, out.FillPctAtReject)
	// The raw answer, for the Retry-After header.
	res, err := http.Post(p.url()+"/v1/topics/"+topic+"/messages", "application/json", strings.NewReader(`{"id":"raw-probe","payload":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	out.RetryAfter = res.Header.Get("Retry-After")
	if res.StatusCode == http.StatusServiceUnavailable && out.RetryAfter == "" {
		t.Errorf("503 without Retry-After")
	}
	if res.StatusCode/100 == 2 {
		rec.Record(history.Op{Kind: history.Send, ID: "raw-probe", Outcome: history.OK, Invoke: rec.Now(), Complete: rec.Now(), DueAt: time.Now()})
	}

	// While full: more sends (refused), then every ack and cancel must work.
	for i := range 20 {
		out.SendsWhileFull++
		err := send(fmt.Sprint("f-", k), payload, 0)
		k++
		if err == nil {
			out.SendsOKWhileFull++
		} else if errors.As(err, &ae) {
			out.Rejections = append(out.Rejections, fmt.Sprint(ae.StatusCode))
		} else {
			out.Rejections = append(out.Rejections, err.Error())
		}
		if i%5 == 4 {
			time.Sleep(300 * time.Millisecond) // across the store's 1 s free-space probe
		}
	}
	var ackLat []time.Duration
	for _, m := range held {
		pa := rec.Invoke(history.Ack, m.ID)
		t1 := time.Now()
		err := c.Ack(ctx, topic, m.ID, m.Receipt)
		ackLat = append(ackLat, time.Since(t1))
		finish(pa, outcome(err))
		if err != nil {
			t.Errorf("ack %s while full: %v", m.ID, err)
			continue
		}
		out.AcksWhileFull++
	}
	out.AckLatency = quantiles(ackLat)
	for k := range nCancel {
		id := fmt.Sprint("c-", k)
		if _, err := c.Cancel(ctx, topic, id); err != nil {
			t.Errorf("cancel %s while full: %v", id, err)
			continue
		}
		out.CancelsWhileFull++
	}
	t.Logf("while full: %d/%d sends ok (%v), %d/%d acks ok (p50 %.1f ms, p99 %.1f ms), %d/%d cancels ok",
		out.SendsOKWhileFull, out.SendsWhileFull, out.Rejections, out.AcksWhileFull, nAck, out.AckLatency.P50, out.AckLatency.P99, out.CancelsWhileFull, nCancel)

	// Free space: remove the filler; sends must resume, no restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for resumable {
		err := send(fmt.Sprint("r-", k), []byte("resume"), 0)
		k++
		if err == nil {
			break
		}
		if time.Since(freed) > 30*time.Second {
			t.Fatalf("sends did not resume within 30s of freeing %d MiB: %v", fillerMiB, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resumable {
		out.ResumeAfterMS = ms(time.Since(freed))
		used, total = fsUsage(t, mnt)
		out.FillPctAfterResume = 100 * float64(used) / float64(total)
		t.Logf("sends resumed %.0f ms after the filler was removed", out.ResumeAfterMS)
	} else {
		t.Logf("tmpfs of %d MiB: sends cannot resume (the store wants more than 64 MiB free); resume not tested", sizeMiB)
	}

	// Drain: every acknowledged send must come out, nothing else.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		inv := rec.Now()
		ms, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 100, Wait: 500 * time.Millisecond})
		if err != nil {
			t.Fatalf("drain lease: %v", err)
		}
		if len(ms) == 0 {
			break
		}
		var acks []delayq.AckRequest
		for _, m := range ms {
			rec.Record(history.Op{Kind: history.Lease, ID: m.ID, Outcome: history.OK, Invoke: inv, Complete: rec.Now(), DueAt: m.DeliverAt, At: m.UpdatedAt})
			acks = append(acks, delayq.AckRequest{ID: m.ID, Receipt: m.Receipt})
		}
		if _, err := c.AckBatch(ctx, topic, acks); err != nil {
			t.Fatalf("drain ack: %v", err)
		}
	}
	// Cancelled messages count as delivered for the checker: their sends
	// were acked and a cancel that answered ok removed them.
	cancelled := map[string]bool{}
	for k := range nCancel {
		cancelled[fmt.Sprint("c-", k)] = true
	}
	r := history.Check(rec.Ops(), nil, history.Options{Dead: cancelled, Slack: 2 * time.Millisecond})
	out.Check = toCheckJSON(r, 0)
	p.mu.Lock()
	out.ServerStarts = p.starts
	p.mu.Unlock()
	writeResults(t, "S5-disk-full", out)
	if out.ServerStarts != 1 {
		t.Errorf("server started %d times", out.ServerStarts)
	}
	if out.SendsOKWhileFull > 0 {
		t.Logf("%d sends were accepted while full (room freed by the ballast)", out.SendsOKWhileFull)
	}
	if !r.Valid() {
		t.Errorf("guarantees violated: %v (lost %v, unexpected %v)", r, first(r.Lost, 10), first(r.Unexpected, 10))
	}
	t.Logf("checker: %v", r)
}

// envInt reads a positive integer knob, or returns def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
