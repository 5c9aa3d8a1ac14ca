package pebblestore

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// An online backup taken while sends go on holds every write acknowledged
// before it began, opens as a store of its own, and leaves the live store
// serving.
func TestBackupOnlineWhileSending(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insert := func(id string) error {
		_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: 1,
			Messages: []store.InsertMessage{{ID: id, Payload: []byte("payload-" + id), DueAt: 1000, MaxAttempts: 3}}})
		return err
	}
	const before = 2000
	for i := range before {
		if err := insert(fmt.Sprintf("b%05d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: 2000, Max: 10}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: 2000, Max: 10, LeaseFor: 60_000, Token: "x"})
	if err != nil || len(recs) == 0 {
		t.Fatalf("lease: %d %v", len(recs), err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: recs[0].ID, Receipt: recs[0].Receipt, Now: 2001}); err != nil {
		t.Fatal(err)
	}

	leased := map[string]bool{}
	for _, r := range recs {
		leased[r.ID] = true
	}
	// Sends keep going during the backup.
	stop := make(chan struct{})
	var during atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := insert(fmt.Sprintf("d%06d", i)); err != nil {
				t.Error(err)
				return
			}
			during.Add(1)
		}
	})
	var buf bytes.Buffer
	info, err := s.Backup(ctx, &buf)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if info.Files == 0 || info.Bytes == 0 || int64(buf.Len()) < info.Bytes {
		t.Fatalf("backup info %+v, archive %d bytes", info, buf.Len())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, backupTmpPrefix+"*")); len(leftovers) != 0 {
		t.Fatalf("checkpoint left in the data directory: %v", leftovers)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	if got, err := Restore(&buf, restored); err != nil || got != info {
		t.Fatalf("restore: %+v %v, backup says %+v", got, err, info)
	}
	r, err := Open(restored, Options{})
	if err != nil {
		t.Fatalf("open the restored backup: %v", err)
	}
	defer r.Close()
	for i := range before {
		id := fmt.Sprintf("b%05d", i)
		got, err := r.MessageGet(ctx, "t", id)
		if err != nil {
			t.Fatalf("restored store lacks %s, acknowledged before the backup: %v", id, err)
		}
		want := store.StateScheduled
		if leased[id] {
			want = store.StateInflight
		}
		if id == recs[0].ID {
			want = store.StateAcked
		}
		if got.State != want || want != store.StateAcked && string(got.Payload) != "payload-"+id {
			t.Fatalf("restored %s: state %s payload %q, want state %s", id, got.State, got.Payload, want)
		}
	}
	if during.Load() == 0 {
		t.Fatal("no send ran during the backup: the test checked nothing about online backups")
	}
	// The live store still serves.
	if err := insert("after"); err != nil {
		t.Fatalf("send after the backup: %v", err)
	}
}

// Restore refuses a non-empty directory and archive entries that would
// write outside it or are not files.
func TestRestoreRefuses(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(bytes.NewReader(nil), full); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a non-empty directory: %v", err)
	}
	for _, hdr := range []*tar.Header{
		{Name: "../evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600},
		{Name: "sub/000001.sst", Typeflag: tar.TypeReg, Size: 1, Mode: 0o600},
		{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd", Mode: 0o600},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			_, _ = tw.Write([]byte("x"))
		}
		_ = tw.Close()
		dir := filepath.Join(t.TempDir(), "d")
		if _, err := Restore(&buf, dir); err == nil || !strings.Contains(err.Error(), "not a file of a delayq backup") {
			t.Fatalf("entry %q: %v", hdr.Name, err)
		}
	}
	if _, err := Restore(bytes.NewReader(make([]byte, 1024)), filepath.Join(t.TempDir(), "e")); err == nil {
		t.Fatal("an empty archive restored")
	}
}

func TestOpenRemovesInterruptedBackup(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, backupTmpPrefix+"deadbeef")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "000001.sst"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("an interrupted backup's checkpoint survived Open: %v", err)
	}
}
