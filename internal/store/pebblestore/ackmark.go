package pebblestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// The ack marker closes a gap in Pebble's WAL recovery: damage inside the
// newest WAL is replayed like the torn tail of a power loss (replay stops
// there and Open succeeds), which would silently drop acknowledged writes.
// So the store keeps, outside Pebble, the Pebble sequence number up to
// which writes were fsync'd, and Open refuses a database whose recovered
// state is behind it.
//
// Cost: no fsync is added to any operation, and none to the commit path.
// Store.wait records the sequence number of each batch whose WAL fsync
// succeeded (an atomic max). A background goroutine writes it to the
// "fast" slot of the marker file with one pwrite and NO fsync, coalescing
// every commit group synced meanwhile; about once a second
// (ackMarkSyncEvery), and at Close, it also writes one of two "synced"
// slots and fsyncs. A fsync per commit would halve group-commit
// throughput when the device's flushes are the bottleneck (measured:
// BenchmarkSendBatch100Senders8 at about half); an unsynced pwrite costs
// microseconds.
//
// Coverage: after a process crash (kill -9) the page cache keeps the fast
// slot, so the marker trails the WAL only by the goroutine's wake-up
// (microseconds). After a power loss it trails by at most
// ackMarkSyncEvery. After Close it covers everything.
//
// No false positive after any crash: every slot only ever holds a value
// whose WAL fsync had already returned, and the WAL is recovered in order,
// so recovery reaches at least that far unless the WAL was damaged. A
// slot that lost its latest write just holds an earlier value.
//
// File: three 512-byte slots (separate sectors), each a magic, the value
// and a CRC32C: synced slots 0 and 1, written alternately and fsync'd, so
// a torn write damages at most one of them; fast slot 2, which may be torn
// or stale after a power loss. Open takes the largest valid slot; a file
// where neither synced slot is valid is reported as corruption.
const (
	ackMarkName = "delayq.ackmark"
	ackMarkSlot = 512
	ackMarkLen  = 20 // magic 4 | version 1 | pad 3 | seq 8 | crc 4
	ackMarkVer  = 1
)

// ackMarkSyncEvery bounds how far the marker on disk may trail after a
// power loss. A var for tests.
var ackMarkSyncEvery = time.Second

var ackMarkMagic = [4]byte{'D', 'Q', 'A', 'M'}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ackMark is the marker file of an open store.
type ackMark struct {
	fs   vfs.FS
	path string
	log  *slog.Logger

	// durable is the highest visible sequence number (batch seq + count)
	// whose WAL fsync is known to have succeeded.
	durable atomic.Uint64

	mu      sync.Mutex // guards the fields below
	f       vfs.File
	written uint64 // in the fast slot (maybe only in the page cache)
	synced  uint64 // in a synced slot, fsync'd
	slot    int    // the synced slot written last
	failed  bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// readAckMark reads the marker in dir: found is false if there is none.
// A file without a valid slot is store.ErrCorrupt naming it.
func readAckMark(fs vfs.FS, dir string) (seq uint64, found bool, err error) {
	seq, _, found, err = readAckMarkSlots(fs, dir)
	return seq, found, err
}

// readAckMarkSlots is readAckMark that also returns which synced slot
// holds the newer value (the next synced write goes to the other one).
func readAckMarkSlots(fs vfs.FS, dir string) (seq uint64, newest int, found bool, err error) {
	path := fs.PathJoin(dir, ackMarkName)
	f, err := fs.Open(path)
	if err != nil {
		if oserrorIsNotExist(err) {
			return 0, 0, false, nil
		}
		return 0, 0, false, fmt.Errorf("pebblestore: open %s: %w: %w", path, store.ErrUnavailable, err)
	}
	defer f.Close()
	buf := make([]byte, 3*ackMarkSlot)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, false, fmt.Errorf("pebblestore: read %s: %w: %w", path, store.ErrUnavailable, err)
	}
	buf = buf[:n]
	valid, best := false, uint64(0)
	for i := range 3 {
		if v, ok := decodeAckSlot(buf, i); ok {
			if i < 2 && (!valid || v > best) {
				valid, best, newest = true, v, i
			}
			seq = max(seq, v)
		}
	}
	if !valid {
		return 0, 0, false, fmt.Errorf("pebblestore: %s: %w: no valid acknowledged-sequence record (%d bytes); "+
			"remove the file to open without the check", path, store.ErrCorrupt, n)
	}
	return seq, newest, true, nil
}

func decodeAckSlot(buf []byte, i int) (uint64, bool) {
	off := i * ackMarkSlot
	if len(buf) < off+ackMarkLen {
		return 0, false
	}
	b := buf[off : off+ackMarkLen]
	if [4]byte(b[:4]) != ackMarkMagic || b[4] != ackMarkVer ||
		crc32.Checksum(b[:16], crcTable) != binary.BigEndian.Uint32(b[16:]) {
		return 0, false
	}
	return binary.BigEndian.Uint64(b[8:16]), true
}

func encodeAckSlot(seq uint64) []byte {
	b := make([]byte, ackMarkLen)
	copy(b, ackMarkMagic[:])
	b[4] = ackMarkVer
	binary.BigEndian.PutUint64(b[8:16], seq)
	binary.BigEndian.PutUint32(b[16:], crc32.Checksum(b[:16], crcTable))
	return b
}

// visibleSeqNum is the sequence number up to which db's writes are
// visible (Pebble has no direct accessor: a snapshot takes it, and
// Metrics reports the earliest open snapshot's). Called at Open, before
// anything else uses db.
func visibleSeqNum(db *pebble.DB) uint64 {
	snap := db.NewSnapshot()
	defer snap.Close()
	return uint64(db.Metrics().Snapshots.EarliestSeqNum)
}

// checkAckMark compares the recovered database with the marker in dir and
// fails with store.ErrCorrupt when acknowledged writes are missing. wals
// are the WAL files found in dir before Pebble opened it (for the error).
func checkAckMark(fs vfs.FS, dir string, db *pebble.DB, wals []string) error {
	want, found, err := readAckMark(fs, dir)
	if err != nil || !found {
		return err
	}
	got := visibleSeqNum(db)
	if got >= want {
		return nil
	}
	newest := "none left"
	if len(wals) > 0 {
		newest = wals[len(wals)-1]
	}
	return fmt.Errorf("pebblestore: open %s: %w: acknowledged writes are missing: the write-ahead log "+
		"was recovered up to sequence %d but writes up to %d were fsync'd and acknowledged (%s); "+
		"the WAL (newest before open: %s) is damaged and was read as a torn tail. "+
		"Restore the data directory from a backup, or remove %s to open with what was recovered",
		dir, store.ErrCorrupt, got, want, fs.PathJoin(dir, ackMarkName), newest, ackMarkName)
}

// listWALs returns the paths of the WAL files in dir, oldest first.
func listWALs(fs vfs.FS, dir string) []string {
	names, err := fs.List(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if filepath.Ext(n) == ".log" {
			out = append(out, fs.PathJoin(dir, n))
		}
	}
	sort.Strings(out) // WAL names are zero-padded numbers
	return out
}

// openAckMark opens (creating if needed) the marker in dir for writing,
// starting at seq, and starts its writer. Called after the recovered state
// passed checkAckMark and is durable.
func openAckMark(fs vfs.FS, dir string, log *slog.Logger, seq uint64) (*ackMark, error) {
	m := &ackMark{fs: fs, path: fs.PathJoin(dir, ackMarkName), log: log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	old, newest, found, err := readAckMarkSlots(fs, dir)
	if errors.Is(err, store.ErrCorrupt) {
		// No valid synced slot, yet the database passed the check (it can
		// only get here if the check was skipped): start a fresh file.
		found = false
	} else if err != nil {
		return nil, err
	}
	seq = max(seq, old)
	if !found {
		if err := createAckMark(fs, dir, m.path, seq); err != nil {
			return nil, fmt.Errorf("pebblestore: write %s: %w: %w", m.path, store.ErrUnavailable, err)
		}
		old, newest = seq, 1
	}
	m.f, err = fs.OpenReadWrite(m.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("pebblestore: open %s: %w: %w", m.path, store.ErrUnavailable, err)
	}
	m.durable.Store(seq)
	m.slot = newest
	// The fast slot holds at most old; synced 0 makes the first tick fsync.
	m.written = old
	go m.run()
	m.kick <- struct{}{} // write the recovered value (durable: see Open)
	return m, nil
}

// createAckMark writes a marker holding seq in every slot to a temporary
// file, fsyncs it and renames it into place (then fsyncs dir), so a crash
// never leaves a marker without a valid synced slot.
func createAckMark(fs vfs.FS, dir, path string, seq uint64) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	for i := range 3 {
		if err == nil {
			_, err = f.WriteAt(encodeAckSlot(seq), int64(i*ackMarkSlot))
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	return err
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeSlot writes seq into slot i (no fsync).
func (m *ackMark) writeSlot(i int, seq uint64) error {
	_, err := m.f.WriteAt(encodeAckSlot(seq), int64(i*ackMarkSlot))
	return err
}

// advance records that the WAL is durable up to (not including) seq. It
// never blocks: the writer goroutine picks the value up.
func (m *ackMark) advance(seq uint64) {
	for {
		cur := m.durable.Load()
		if seq <= cur {
			return
		}
		if m.durable.CompareAndSwap(cur, seq) {
			break
		}
	}
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// advanceBatch is advance for a batch whose SyncWait returned nil.
func (m *ackMark) advanceBatch(b *pebble.Batch) {
	if m != nil {
		m.advance(uint64(b.SeqNum()) + uint64(b.Count()))
	}
}

func (m *ackMark) run() {
	defer close(m.done)
	tick := time.NewTicker(ackMarkSyncEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
			m.write()
		case <-tick.C:
			m.sync()
		}
	}
}

// write puts the durable value in the fast slot if it is ahead of it.
func (m *ackMark) write() {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.durable.Load()
	if v <= m.written || m.f == nil {
		return
	}
	if err := m.writeSlot(2, v); err != nil {
		m.writeFailed(err)
		return
	}
	m.written = v
}

// sync puts the durable value in the other synced slot and fsyncs, if it
// is ahead of the last synced value.
func (m *ackMark) sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.durable.Load()
	if v <= m.synced || m.f == nil {
		return
	}
	slot := m.slot ^ 1
	err := m.writeSlot(slot, v)
	if err == nil && v > m.written {
		err = m.writeSlot(2, v)
	}
	if err == nil {
		err = m.f.Sync()
	}
	if err != nil {
		m.writeFailed(err)
		return
	}
	m.slot, m.synced, m.written = slot, v, max(m.written, v)
}

// writeFailed logs a failed marker write once. It leaves detection
// behind, never ahead; the store keeps working (the marker only serves
// detection).
func (m *ackMark) writeFailed(err error) {
	if !m.failed {
		m.failed = true
		m.log.Error("pebblestore: cannot write the acknowledged-sequence marker; WAL damage may go undetected",
			"path", m.path, "err", err)
	}
}

// close stops the writer and, with final (the WAL was closed cleanly),
// writes and fsyncs the last value first.
func (m *ackMark) close(final bool) error {
	if m == nil {
		return nil
	}
	close(m.stop)
	<-m.done
	if final {
		m.sync()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.f.Close()
	m.f = nil
	return err
}

func oserrorIsNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
