package pebblestore

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/delayq/delayq/internal/store"
)

// A deleted topic stays deleted across a reopen, and a send after the
// delete revives it durably.
func TestTopicDeleteSurvivesReopen(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	if err := s.TopicSettingsPut(ctx, "gone", []byte("s")); err != nil {
		t.Fatal(err)
	}
	if err := s.TopicSettingsPut(ctx, "back", []byte("s")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gone", "back"} {
		if err := s.TopicDelete(ctx, name); err != nil {
			t.Fatalf("TopicDelete %s: %v", name, err)
		}
	}
	insert(t, s, "back", 100, m("a", 200))
	mustVerify(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openMem(t, fs)
	defer func() { _ = s.Close() }()
	if _, err := s.TopicGet(ctx, "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted topic after reopen: %v, want ErrNotFound", err)
	}
	tr, err := s.TopicGet(ctx, "back")
	if err != nil || tr.Settings != nil || tr.Counts.Scheduled != 1 {
		t.Fatalf("revived topic after reopen: %+v %v", tr, err)
	}
	list, err := s.TopicList(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "back" {
		t.Errorf("TopicList after reopen: %d topics, %v", len(list), err)
	}
	mustVerify(t, s)
}
