package pebblestore

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// backupTmpPrefix names the checkpoint directories Backup makes inside the
// data directory (hard links need the same file system, and the data
// directory is the one place a hardened service may write). Open removes
// any a crash left behind.
const backupTmpPrefix = "backup-tmp-"

// BackupInfo describes a finished backup.
type BackupInfo struct {
	Files int
	Bytes int64
}

// Backup writes an online, consistent copy of the store to w as a tar
// archive: a Pebble checkpoint (hard links to the immutable tables, a copy
// of the WAL flushed first), so every write acknowledged before the call
// is in it, and the store keeps serving meanwhile. Restore by extracting
// the archive into an empty data directory. The checkpoint is removed
// when Backup returns; until then it pins tables a compaction would free.
func (s *Store) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	if s.fs != vfs.Default {
		return BackupInfo{}, errors.New("pebblestore: backup: only a store on the OS file system can be backed up")
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := filepath.Join(s.dir, backupTmpPrefix+hex.EncodeToString(b[:]))
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := s.checkpoint(tmp); err != nil {
		return BackupInfo{}, err
	}
	// The checkpoint's files are its own (links and copies): streaming
	// them needs no lock, and a Close meanwhile does not wait for it.
	return writeTar(ctx, w, tmp)
}

func (s *Store) checkpoint(dir string) error {
	end, err := s.begin()
	if err != nil {
		return err
	}
	defer end()
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("pebblestore: backup: checkpoint: %w", err)
	}
	return nil
}

// writeTar archives the regular files of dir (flat: a checkpoint has no
// subdirectories) with their names only.
func writeTar(ctx context.Context, w io.Writer, dir string) (BackupInfo, error) {
	var info BackupInfo
	entries, err := os.ReadDir(dir)
	if err != nil {
		return info, fmt.Errorf("pebblestore: backup: %w", err)
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return info, err
		}
		if !e.Type().IsRegular() {
			continue
		}
		n, err := addFile(tw, filepath.Join(dir, e.Name()))
		if err != nil {
			return info, fmt.Errorf("pebblestore: backup: %s: %w", e.Name(), err)
		}
		info.Files++
		info.Bytes += n
	}
	if err := tw.Close(); err != nil {
		return info, fmt.Errorf("pebblestore: backup: %w", err)
	}
	return info, nil
}

func addFile(tw *tar.Writer, path string) (int64, error) {
	f, err := os.Open(path) // #nosec G304 -- a file of the checkpoint Backup just made
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	hdr := &tar.Header{Name: filepath.Base(path), Mode: 0o600, Size: st.Size(), ModTime: st.ModTime().UTC().Truncate(time.Second), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return 0, err
	}
	// The size was read from the open file and the tables are immutable;
	// the copied WAL and MANIFEST are the checkpoint's own.
	return io.CopyN(tw, f, st.Size())
}

// removeBackupLeftovers deletes checkpoints an interrupted Backup left in
// dir.
func removeBackupLeftovers(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), backupTmpPrefix) {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// Restore extracts a Backup archive into dir, which must be missing or
// empty, and opens the result once to check it is a store. Only flat
// regular files are accepted: an entry with a path, a link or anything
// else is refused (an archive is never trusted to write outside dir).
func Restore(r io.Reader, dir string) (BackupInfo, error) {
	var info BackupInfo
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return info, fmt.Errorf("pebblestore: restore: %s is not empty", dir)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return info, fmt.Errorf("pebblestore: restore: %w", err)
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return info, fmt.Errorf("pebblestore: restore: archive: %w", err)
		}
		name := hdr.Name
		if hdr.Typeflag != tar.TypeReg || name != filepath.Base(name) || name == "." || name == ".." || strings.HasPrefix(name, backupTmpPrefix) {
			return info, fmt.Errorf("pebblestore: restore: archive entry %q is not a file of a delayq backup", name)
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) // #nosec G304 G305 -- a bare file name, checked above
		if err != nil {
			return info, fmt.Errorf("pebblestore: restore: %w", err)
		}
		n, err := io.CopyN(f, tr, hdr.Size)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return info, fmt.Errorf("pebblestore: restore: %s: %w", name, err)
		}
		info.Files++
		info.Bytes += n
	}
	if info.Files == 0 {
		return info, errors.New("pebblestore: restore: the archive holds no files")
	}
	s, err := Open(dir, Options{})
	if err != nil {
		return info, fmt.Errorf("pebblestore: restore: the extracted files do not open as a store: %w", err)
	}
	return info, s.Close()
}
