package engine

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// TestSafetySweepReleasesWhatNoTimerArmed: a message the engine was never
// told about (written to its single-engine store behind its back, as a
// lost wake-up would leave it) is still released, by the safety sweep,
// within a few periods. Before the sweep ran on stores without
// notifications, nothing would ever arm its topic and the long-poll
// would time out empty.
func TestSafetySweepReleasesWhatNoTimerArmed(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	ctx := context.Background()
	e, err := Open(ctx, Config{Store: st, SafetySweep: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)

	now := time.Now().UnixMilli()
	if _, err := st.MessageInsertMany(ctx, &store.MessageInsertManyParams{
		Topic: "orders", Now: now,
		Messages: []store.InsertMessage{{ID: "unarmed", Payload: []byte("x"), DueAt: now + 50, MaxAttempts: 3}},
	}); err != nil {
		t.Fatal(err)
	}
	msgs, err := e.Lease(ctx, "orders", domain.LeaseRequest{Max: 1, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || msgs[0].ID != "unarmed" {
		t.Fatalf("leased %v, want the message no timer was armed for", msgs)
	}
	if got := time.Since(msgs[0].DeliverAt); got < 0 {
		t.Errorf("released %v before it was due", -got)
	}
}

// pingStore is a memstore that can be pinged, counting its pings and
// topic lists.
type pingStore struct {
	*memstore.Store
	pingErr      error
	pings, lists atomic.Int32
}

func (s *pingStore) Ping(context.Context) error { s.pings.Add(1); return s.pingErr }

func (s *pingStore) TopicList(ctx context.Context) ([]*store.TopicRecord, error) {
	s.lists.Add(1)
	return s.Store.TopicList(ctx)
}

// TestReadyPings: readiness, which load balancers ask every few seconds,
// pings a store that can be pinged instead of listing every topic, and
// reports its failure as unavailable; a store without a ping is listed.
func TestReadyPings(t *testing.T) {
	ctx := context.Background()
	st := &pingStore{Store: memstore.New()}
	defer st.Close()
	e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	lists := st.lists.Load()
	if err := e.Ready(ctx); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if p, l := st.pings.Load(), st.lists.Load()-lists; p != 1 || l != 0 {
		t.Fatalf("Ready: %d pings and %d topic lists, want 1 and 0", p, l)
	}
	st.pingErr = errors.New("connection refused")
	if err := e.Ready(ctx); !errors.Is(err, domain.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Ready with the ping failing: %v, want ErrUnavailable naming the cause", err)
	}

	plain := memstore.New()
	defer plain.Close()
	e2, err := Open(ctx, Config{Store: plain, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close(ctx)
	if err := e2.Ready(ctx); err != nil {
		t.Fatalf("Ready on a store without a ping: %v", err)
	}
	_ = plain.Close()
	if err := e2.Ready(ctx); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("Ready on a closed store without a ping: %v, want ErrUnavailable", err)
	}
}

// settingsStore is a memstore that lists settings alone, counting calls.
type settingsStore struct {
	*memstore.Store
	settingsLists, lists atomic.Int32
}

func (s *settingsStore) TopicSettingsList(ctx context.Context) ([]*store.TopicRecord, error) {
	s.settingsLists.Add(1)
	recs, err := s.Store.TopicList(ctx)
	var out []*store.TopicRecord
	for _, r := range recs {
		if r.Settings != nil {
			out = append(out, &store.TopicRecord{Name: r.Name, Settings: r.Settings})
		}
	}
	return out, err
}

func (s *settingsStore) TopicList(ctx context.Context) ([]*store.TopicRecord, error) {
	s.lists.Add(1)
	return s.Store.TopicList(ctx)
}

// TestTopicSettingsListsSettingsAlone: what the push and delivery watches
// read (TopicSettings) comes from a store's settings-only listing where
// it has one, not from TopicList, with the settings decoded as Topics
// decodes them.
func TestTopicSettingsListsSettingsAlone(t *testing.T) {
	ctx := context.Background()
	st := &settingsStore{Store: memstore.New()}
	defer st.Close()
	e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if _, err := e.SetTopicSettings(ctx, "hooks", domain.TopicSettings{MaxAttempts: 7}); err != nil {
		t.Fatal(err)
	}
	full, err := e.Topics(ctx)
	if err != nil || len(full) != 1 {
		t.Fatalf("Topics: %v %v", full, err)
	}
	lists := st.lists.Load()
	got, err := e.TopicSettings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, l := st.settingsLists.Load(), st.lists.Load()-lists; n != 1 || l != 0 {
		t.Fatalf("TopicSettings: %d settings lists and %d topic lists, want 1 and 0", n, l)
	}
	if len(got) != 1 || got[0].Name != "hooks" || !reflect.DeepEqual(got[0].Settings, full[0].Settings) || got[0].Settings.MaxAttempts != 7 {
		t.Fatalf("TopicSettings: %+v, want hooks with %+v", got, full[0].Settings)
	}
}
