package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cockroachdb/pebble/v2"
	"github.com/delayq/delayq/internal/store"
)

// Schedule value format (version 1), under k/{name}:
//
//	+---------+----------+-----------+-----------+------+--------+
//	| version | lastTick | createdAt | updatedAt | spec | crc32c |
//	|  1 byte |  8 B BE  |   8 B BE  |   8 B BE  |  …   | 4 B LE |
//	+---------+----------+-----------+-----------+------+--------+
//
// spec is the engine's blob, to the end of the value minus the CRC32C
// (Castagnoli), which covers every byte before it. Schedules are few and
// small; each write is one fsync'd Set, its read-modify-write serialised
// by schedMu.
const scheduleVersion = 1

func encodeSchedule(sc *store.Schedule) []byte {
	b := make([]byte, 0, 1+24+len(sc.Spec)+4)
	b = append(b, scheduleVersion)
	for _, v := range [...]int64{sc.LastTick, sc.CreatedAt, sc.UpdatedAt} {
		b = binary.BigEndian.AppendUint64(b, uint64(v)) // #nosec G115 -- bit reinterpretation for the on-disk encoding, no arithmetic on the result
	}
	b = append(b, sc.Spec...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func decodeSchedule(name string, v []byte) (*store.Schedule, error) {
	if len(v) < 1+24+4 || v[0] != scheduleVersion {
		return nil, fmt.Errorf("pebblestore: schedule %q: %w: bad length or version", name, store.ErrCorrupt)
	}
	body, sum := v[:len(v)-4], binary.LittleEndian.Uint32(v[len(v)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, fmt.Errorf("pebblestore: schedule %q: %w: checksum mismatch", name, store.ErrCorrupt)
	}
	be := func(i int) int64 { return int64(binary.BigEndian.Uint64(body[1+8*i:])) } // #nosec G115 -- inverse of encodeSchedule: bit reinterpretation for the on-disk encoding, no arithmetic on the result
	return &store.Schedule{
		Name: name, LastTick: be(0), CreatedAt: be(1), UpdatedAt: be(2),
		Spec: bytes.Clone(body[25:]),
	}, nil
}

func (s *Store) scheduleGet(name string) (*store.Schedule, error) {
	v, err := s.get(topicKey(pfxSchedule, name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("pebblestore: schedule %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decodeSchedule(name, v)
}

func (s *Store) schedulePut(sc *store.Schedule) error {
	b := s.db.NewBatch()
	_ = b.Set(topicKey(pfxSchedule, sc.Name), encodeSchedule(sc), nil)
	return s.commit(b, true)
}

// scheduleWrite runs a read-modify-write of one schedule under schedMu.
func (s *Store) scheduleWrite(ctx context.Context, fn func() (*store.Schedule, error)) (*store.Schedule, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	s.schedMu.Lock()
	defer s.schedMu.Unlock()
	return fn()
}

// ScheduleUpsert implements store.Store. Durable on nil error.
func (s *Store) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	return s.scheduleWrite(ctx, func() (*store.Schedule, error) {
		sc, err := s.scheduleGet(p.Name)
		switch {
		case errors.Is(err, store.ErrNotFound):
			sc = &store.Schedule{Name: p.Name, CreatedAt: p.Now, LastTick: p.LastTick}
		case err != nil:
			return nil, err
		}
		sc.Spec = bytes.Clone(p.Spec)
		sc.LastTick = max(sc.LastTick, p.LastTick)
		sc.UpdatedAt = p.Now
		if err := s.schedulePut(sc); err != nil {
			return nil, err
		}
		return sc, nil
	})
}

// ScheduleTick implements store.Store. Durable on nil error.
func (s *Store) ScheduleTick(ctx context.Context, p *store.ScheduleTickParams) (*store.Schedule, error) {
	return s.scheduleWrite(ctx, func() (*store.Schedule, error) {
		sc, err := s.scheduleGet(p.Name)
		if err != nil {
			return nil, err
		}
		if p.Tick <= sc.LastTick {
			return sc, nil
		}
		sc.LastTick = p.Tick
		return sc, s.schedulePut(sc)
	})
}

// ScheduleDelete implements store.Store. Durable on nil error.
func (s *Store) ScheduleDelete(ctx context.Context, name string) error {
	_, err := s.scheduleWrite(ctx, func() (*store.Schedule, error) {
		if _, err := s.scheduleGet(name); err != nil {
			return nil, err
		}
		b := s.db.NewBatch()
		_ = b.Delete(topicKey(pfxSchedule, name), nil)
		return nil, s.commit(b, true)
	})
	return err
}

// ScheduleGet implements store.Store.
func (s *Store) ScheduleGet(ctx context.Context, name string) (*store.Schedule, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.scheduleGet(name)
}

// ScheduleList implements store.Store: a scan of k/, in name order.
func (s *Store) ScheduleList(ctx context.Context) ([]*store.Schedule, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	lo := []byte{pfxSchedule, '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
	if err != nil {
		return nil, classify("list schedules", err)
	}
	var out []*store.Schedule
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, classify("list schedules", err)
		}
		sc, err := decodeSchedule(string(it.Key()[2:]), v)
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		out = append(out, sc)
	}
	if err := it.Close(); err != nil {
		return nil, classify("list schedules", err)
	}
	return out, nil
}
