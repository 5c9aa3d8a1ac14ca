// Package upgrade is scenario S29 of docs/reliability.md: data directories written by
// earlier versions of delayq, kept under testdata/stores/<version>, must
// open with the current code and read back as they were written.
// TestUpgrade checks every fixture directory there, so a release's
// fixture is checked by every later build without a new test.
//
// A fixture is written by this test with -update, through the same
// engine and Pebble store the `delayq serve` binary runs, on a simulated
// clock so that what the fixture holds (a lease that has not expired, an
// ack still inside its dedup window) stays true whenever the check runs:
//
//	make fixtures VERSION=v0.2.0   # at a release: testdata/stores/v0.2.0
//	make fixtures                  # before the first release: rewrites v0
//
// A released version's directory is frozen: -update refuses to rewrite
// it. v0 (the layout before the first release) may be rewritten only
// while it is the only fixture. write must keep writing the same content
// (the checks expect it of every fixture).
package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

var (
	update         = flag.Bool("update", false, "write the fixture of -fixture-version with the current code")
	fixtureVersion = flag.String("fixture-version", "v0", "the version -update writes a fixture for: testdata/stores/<version>")
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	storesDir    = "../../testdata/stores"
	dataSubdir   = "data"          // the Pebble directory, as --data
	manifestName = "manifest.json" // what the writer read back, to compare
)

// genTime is the simulated time the fixture is written at; the check runs
// a minute later, well inside the 1 h lease and the 24 h dedup window.
var (
	genTime   = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	checkTime = genTime.Add(time.Minute)
)

// manifest is what the writing version read back after writing: every
// live message as Get answered it, the dead letters, the topics and the
// schedule, plus the receipt of the leased message and the acked ids.
type manifest struct {
	Version   string                          `json:"version"`
	Written   time.Time                       `json:"written"`
	Messages  []*delayq.Message               `json:"messages"`
	Dead      []*delayq.Message               `json:"dead"`
	Topics    []delayq.TopicInfo              `json:"topics"`
	Schedules []delayq.Schedule               `json:"schedules"`
	Receipts  map[string]string               `json:"receipts"` // topic/id → receipt of a live lease
	Acked     map[string][]string             `json:"acked"`    // topic → ids acked within the dedup window
	Settings  map[string]delayq.TopicSettings `json:"settings"`
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openEngine(t *testing.T, dir string, clk clock.Clock, opts pebblestore.Options) (*engine.Engine, func()) {
	t.Helper()
	opts.Logger = quiet
	st, err := pebblestore.Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	eng, err := engine.Open(context.Background(), engine.Config{Store: st, Clock: clk, Logger: quiet})
	if err != nil {
		st.Close()
		t.Fatalf("engine on %s: %v", dir, err)
	}
	return eng, func() {
		if err := eng.Close(context.Background()); err != nil {
			t.Errorf("close engine: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	}
}

// The two topics and what goes in them. Payloads include bytes that are
// not UTF-8 and headers, so both encodings are exercised.
var (
	topics   = []string{"orders.close", "mail:outbox"}
	settings = map[string]delayq.TopicSettings{
		"orders.close": {MaxAttempts: 3, Lease: 5 * time.Minute,
			Backoff: delayq.Backoff{Initial: 2 * time.Second, Max: time.Hour, Multiplier: 3, Jitter: 0.1}},
		"mail:outbox": {MaxAttempts: 2, Lease: 45 * time.Second,
			RateLimit: &delayq.RateLimit{PerSecond: 50, Burst: 100}},
	}
)

// write fills dir the way a user of this version would, at genTime.
func write(t *testing.T, dir, version string) manifest {
	ctx := context.Background()
	clk := clock.NewSim(genTime)
	// No ballast file in the fixture; a tiny memtable so that most of the
	// data is flushed to sstables and the rest stays in the WAL, and the
	// check reads both.
	eng, closeAll := openEngine(t, dir, clk, pebblestore.Options{BallastSize: -1, MemTableSize: 4 << 10})
	defer closeAll()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	man := manifest{Version: version, Written: genTime, Receipts: map[string]string{}, Acked: map[string][]string{}, Settings: settings}
	send := func(topic, id string, payload []byte, hdr map[string]string, w delayq.When, maxAttempts int) {
		t.Helper()
		_, err := eng.Send(ctx, topic, delayq.SendRequest{ID: id, Payload: payload, Headers: hdr, When: w, MaxAttempts: maxAttempts})
		must(err)
		clk.Advance(time.Millisecond) // distinct created/updated times
	}
	// leaseOne sends id due now and leases it: the only ready message.
	leaseOne := func(topic, id string, lease time.Duration) *delayq.Message {
		t.Helper()
		send(topic, id, []byte("payload of "+id), map[string]string{"step": id}, delayq.When{}, 0)
		ms, err := eng.Lease(ctx, topic, delayq.LeaseRequest{Max: 1, Lease: lease})
		must(err)
		if len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("lease %s/%s: got %v", topic, id, ms)
		}
		clk.Advance(time.Millisecond)
		return ms[0]
	}
	for _, topic := range topics {
		_, err := eng.SetTopicSettings(ctx, topic, settings[topic])
		must(err)

		// acked within the dedup window: only a tombstone remains
		m := leaseOne(topic, "acked-1", 0)
		must(eng.Ack(ctx, topic, m.ID, m.Receipt))
		man.Acked[topic] = append(man.Acked[topic], m.ID)

		// dead: its max_attempts (1) used up by a nack
		send(topic, "dead-1", []byte("poison \x00\xff"), map[string]string{"kind": "poison"}, delayq.When{}, 1)
		ms, err := eng.Lease(ctx, topic, delayq.LeaseRequest{Max: 1})
		must(err)
		if len(ms) != 1 || ms[0].ID != "dead-1" {
			t.Fatalf("lease dead-1: %v", ms)
		}
		_, err = eng.Nack(ctx, topic, "dead-1", ms[0].Receipt, delayq.NackRequest{Reason: "handler: boom"})
		must(err)
		clk.Advance(time.Millisecond)

		// scheduled again after a failure: attempt 1, failures 1, due in 2 h
		m = leaseOne(topic, "retry-1", 0)
		_, err = eng.Nack(ctx, topic, m.ID, m.Receipt, delayq.NackRequest{Delay: 2 * time.Hour, HasDelay: true, Reason: "try later"})
		must(err)
		clk.Advance(time.Millisecond)

		// leased for an hour: still inflight when the check runs
		m = leaseOne(topic, "leased-1", time.Hour)
		man.Receipts[topic+"/"+m.ID] = m.Receipt

		// ready
		send(topic, "ready-1", []byte(`{"order":42}`), map[string]string{"content-type": "application/json", "trace": "abc-123"}, delayq.When{}, 0)
		send(topic, "ready-2", []byte{0, 1, 2, 0xfe, 0xff}, nil, delayq.When{}, 0)

		// scheduled: by delay, and at a time far ahead
		send(topic, "sched-1", []byte("in 30 minutes"), map[string]string{"a": "1", "b": "2"}, delayq.When{Delay: 30 * time.Minute}, 0)
		send(topic, "sched-2", []byte("next year"), nil, delayq.When{DeliverAt: genTime.AddDate(1, 0, 0)}, 5)
	}
	// A recurring schedule, paused so it sends nothing while the fixture
	// is written or checked.
	_, err := eng.ScheduleSet(ctx, delayq.Schedule{Name: "nightly-report", Topic: "orders.close", Cron: "30 2 * * *",
		Timezone: "Europe/Paris", Payload: []byte("{}"), Headers: map[string]string{"from": "schedule"}, Paused: true})
	must(err)

	for _, topic := range topics {
		for _, id := range []string{"retry-1", "leased-1", "ready-1", "ready-2", "sched-1", "sched-2"} {
			m, err := eng.Get(ctx, topic, id)
			must(err)
			man.Messages = append(man.Messages, m)
		}
		page, err := eng.DeadList(ctx, topic, delayq.DeadListRequest{Limit: 100})
		must(err)
		man.Dead = append(man.Dead, page.Messages...)
	}
	man.Topics, err = eng.Topics(ctx)
	must(err)
	man.Schedules, err = eng.ScheduleList(ctx)
	must(err)
	return man
}

// fixtureVersionRe is what a fixture directory may be called: v0, or a
// release tag.
var fixtureVersionRe = regexp.MustCompile(`^v[0-9]+(\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)?$`)

// regenerate writes the fixture of version with the current code.
// Released versions' fixtures are frozen; v0 may be rewritten only while
// no release has one.
func regenerate(t *testing.T, version string) {
	if !fixtureVersionRe.MatchString(version) {
		t.Fatalf("-fixture-version %q: want v0 or a release tag such as v0.2.0", version)
	}
	dir := filepath.Join(storesDir, version)
	existing, err := fixtureVersions()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case version != "v0" && slices.Contains(existing, version):
		t.Fatalf("%s exists: a released version's fixture is frozen (remove it by hand only if that release never shipped)", dir)
	case version == "v0" && slices.ContainsFunc(existing, func(v string) bool { return v != "v0" }):
		t.Fatalf("v0 is frozen once a release has a fixture (%v): write one for the new release instead (-fixture-version)", existing)
	}
	tmp := filepath.Join(t.TempDir(), version)
	man := write(t, filepath.Join(tmp, dataSubdir), version)
	b, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestName), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(storesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, os.DirFS(tmp)); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", dir)
}

// fixtureVersions lists the fixture directories (those with a manifest).
func fixtureVersions() ([]string, error) {
	ms, err := filepath.Glob(filepath.Join(storesDir, "*", manifestName))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		out = append(out, filepath.Base(filepath.Dir(m)))
	}
	return out, nil
}

// TestUpgrade opens a copy of every fixture with the current code.
func TestUpgrade(t *testing.T) {
	if *update {
		regenerate(t, *fixtureVersion)
	}
	versions, err := fixtureVersions()
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) == 0 {
		t.Fatalf("no fixture in %s (write one with: make fixtures)", storesDir)
	}
	for _, v := range versions {
		t.Run(v, func(t *testing.T) { checkFixture(t, filepath.Join(storesDir, v)) })
	}
}

// checkFixture checks, through the engine, that a copy of the fixture in
// fixtureDir holds what its version wrote: per-state counts, every
// message's fields, the dead letters, the settings and the schedule; that
// the live lease's receipt still acks; that the acked ids still dedup;
// and that ready messages are delivered.
func checkFixture(t *testing.T, fixtureDir string) {
	raw, err := os.ReadFile(filepath.Join(fixtureDir, manifestName))
	if err != nil {
		t.Fatal(err)
	}
	var man manifest
	if err := json.Unmarshal(raw, &man); err != nil {
		t.Fatal(err)
	}
	// The store writes to its directory on open: work on a copy.
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(fixtureDir, dataSubdir))); err != nil {
		t.Fatal(err)
	}
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			err = os.Chmod(p, 0o644) // CopyFS keeps the checked-out modes; the store needs to write
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clk := clock.NewSim(checkTime)
	eng, closeAll := openEngine(t, dir, clk, pebblestore.Options{}) // the binary's defaults, ballast included
	defer closeAll()

	// Counts per state, hard-coded (what the writer put in), and as the fixture's version read them.
	wantCounts := delayq.TopicCounts{Scheduled: 3, Ready: 2, Inflight: 1, Dead: 1}
	infos, err := eng.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != len(topics) {
		t.Fatalf("%d topics, want %d: %+v", len(infos), len(topics), infos)
	}
	for _, info := range infos {
		if info.Counts != wantCounts {
			t.Errorf("topic %s counts %+v, want %+v", info.Name, info.Counts, wantCounts)
		}
		if want := settings[info.Name]; !reflect.DeepEqual(info.Settings.RateLimit, want.RateLimit) ||
			info.Settings.MaxAttempts != want.MaxAttempts || info.Settings.Lease != want.Lease {
			t.Errorf("topic %s settings %+v, want %+v", info.Name, info.Settings, want)
		}
	}
	if !reflect.DeepEqual(normTopics(infos), normTopics(man.Topics)) {
		t.Errorf("topics now:\n%+v\n%s read:\n%+v", infos, man.Version, man.Topics)
	}

	// Every live message, field by field, as the fixture's version read it back.
	if len(man.Messages) != 12 {
		t.Fatalf("manifest has %d live messages, want 12", len(man.Messages))
	}
	for _, want := range man.Messages {
		got, err := eng.Get(ctx, want.Topic, want.ID)
		if err != nil {
			t.Errorf("get %s/%s: %v", want.Topic, want.ID, err)
			continue
		}
		if !sameMessage(got, want) {
			t.Errorf("%s/%s now:\n%+v\n%s read:\n%+v", want.Topic, want.ID, got, man.Version, want)
		}
	}
	// One message spelled out, so a change in the manifest itself shows.
	m, err := eng.Get(ctx, "orders.close", "ready-1")
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload) != `{"order":42}` || m.Headers["content-type"] != "application/json" || m.Headers["trace"] != "abc-123" ||
		m.State != delayq.StateReady || m.MaxAttempts != 3 || m.Attempt != 0 || !m.DeliverAt.Equal(m.CreatedAt) {
		t.Errorf("orders.close/ready-1 = %+v", m)
	}
	if m, err := eng.Get(ctx, "mail:outbox", "retry-1"); err != nil || m.State != delayq.StateScheduled ||
		m.Attempt != 1 || m.Failures != 1 || m.LastError != "try later" {
		t.Errorf("mail:outbox/retry-1 = %+v, %v; want scheduled, attempt 1, failures 1, last error", m, err)
	}

	// Dead letters.
	for _, topic := range topics {
		page, err := eng.DeadList(ctx, topic, delayq.DeadListRequest{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) != 1 || page.Messages[0].ID != "dead-1" || page.Messages[0].Failures != 1 ||
			page.Messages[0].LastError != "handler: boom" || !bytes.Equal(page.Messages[0].Payload, []byte("poison \x00\xff")) {
			t.Errorf("%s dead letters: %+v", topic, page.Messages)
		}
	}
	for _, want := range man.Dead {
		page, _ := eng.DeadList(ctx, want.Topic, delayq.DeadListRequest{Limit: 100})
		i := slices.IndexFunc(page.Messages, func(m *delayq.Message) bool { return m.ID == want.ID })
		if i < 0 || !sameMessage(page.Messages[i], want) {
			t.Errorf("dead %s/%s changed since %s", want.Topic, want.ID, man.Version)
		}
	}

	// The schedule.
	scheds, err := eng.ScheduleList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normSchedules(scheds), normSchedules(man.Schedules)) || len(scheds) != 1 || !scheds[0].Paused {
		t.Errorf("schedules now:\n%+v\n%s read:\n%+v", scheds, man.Version, man.Schedules)
	}

	// Acked ids still dedup: a resend is a duplicate and creates nothing.
	for topic, ids := range man.Acked {
		for _, id := range ids {
			m, err := eng.Send(ctx, topic, delayq.SendRequest{ID: id, Payload: []byte("again")})
			if err != nil || !m.Duplicate {
				t.Errorf("resend of acked %s/%s: %+v, %v; want a duplicate", topic, id, m, err)
			}
		}
	}
	// The lease the fixture's version handed out still fences: its receipt acks.
	for key, receipt := range man.Receipts {
		i := strings.LastIndexByte(key, '/')
		topic, id := key[:i], key[i+1:]
		if err := eng.Ack(ctx, topic, id, receipt); err != nil {
			t.Errorf("ack %s with the receipt %s handed out: %v", key, man.Version, err)
		}
	}
	// Ready messages are delivered, in order, with their payloads.
	for _, topic := range topics {
		ms, err := eng.Lease(ctx, topic, delayq.LeaseRequest{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		if !slices.Equal(ids, []string{"ready-1", "ready-2"}) || !bytes.Equal(ms[1].Payload, []byte{0, 1, 2, 0xfe, 0xff}) {
			t.Errorf("%s leased %v, want ready-1, ready-2", topic, ids)
		}
	}
	infos, _ = eng.Topics(ctx)
	for _, info := range infos {
		if want := (delayq.TopicCounts{Scheduled: 3, Inflight: 2, Dead: 1}); info.Counts != want {
			t.Errorf("after ack and lease, %s counts %+v, want %+v", info.Name, info.Counts, want)
		}
	}
}

// sameMessage compares what is stored (not Receipt or Duplicate, which
// belong to one answer).
func sameMessage(a, b *delayq.Message) bool {
	x, y := *a, *b
	x.Receipt, y.Receipt, x.Duplicate, y.Duplicate = "", "", false, false
	return reflect.DeepEqual(norm(&x), norm(&y))
}

// norm makes times comparable after a JSON round trip (location, monotonic
// reading) and nil/empty maps equal.
func norm(m *delayq.Message) *delayq.Message {
	for _, t := range []*time.Time{&m.DeliverAt, &m.CreatedAt, &m.UpdatedAt, &m.LeaseExpiresAt} {
		*t = t.UTC().Round(0)
	}
	if len(m.Headers) == 0 {
		m.Headers = nil
	}
	if len(m.Payload) == 0 {
		m.Payload = nil
	}
	return m
}

func normTopics(in []delayq.TopicInfo) []delayq.TopicInfo {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b delayq.TopicInfo) int { return strings.Compare(a.Name, b.Name) })
	for i := range out {
		out[i].NextDue = out[i].NextDue.UTC().Round(0)
		out[i].OldestReady = out[i].OldestReady.UTC().Round(0)
	}
	return out
}

func normSchedules(in []delayq.Schedule) []delayq.Schedule {
	out := slices.Clone(in)
	for i := range out {
		s := &out[i]
		for _, t := range []*time.Time{&s.LastTick, &s.NextTick, &s.CreatedAt, &s.UpdatedAt} {
			*t = t.UTC().Round(0)
		}
		if s.LastTick.Equal(s.CreatedAt) {
			// v0 showed a schedule that never fired with its creation time
			// as last tick; now it has none.
			s.LastTick = time.Time{}
		}
	}
	return out
}
