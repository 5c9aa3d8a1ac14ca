package pebblestore

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"
)

// orderedReader reads one topic's state records (m/) and bodies (b/)
// through one iterator per prefix instead of a DB.Get per key. A lease
// or a batch ack reads ids in the order it was given them, which is
// their key order as often as ids are made in order (ULIDs): a seek to a
// key after the previous one then steps forward from where the iterator
// stands (Pebble's TrySeekUsingNext) instead of searching every memtable
// and level from scratch, as each Get does. Keys out of order are read
// correctly, by a full seek.
//
// Each iterator sees the store as of its first read: the caller holds
// the topic's lock, under which every write to the topic's records is
// applied, so that is the state a Get would read.
type orderedReader struct {
	db    *pebble.DB
	its   [2]*pebble.Iterator // records, bodies
	found int                 // reads that found their key (tests)
}

const (
	readRecords = iota
	readBodies
)

// get returns the value of key, which starts with prefix (m/{topic}\x00
// or b/{topic}\x00), or ok false if it has none. The value is valid until
// the next get of the same kind.
func (o *orderedReader) get(kind int, prefix, key []byte) (val []byte, ok bool, err error) {
	it := o.its[kind]
	if it == nil {
		lo := bytes.Clone(prefix)
		it, err = o.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
		if err != nil {
			return nil, false, err
		}
		o.its[kind] = it
	}
	if !it.SeekGE(key) {
		return nil, false, it.Error()
	}
	if !bytes.Equal(it.Key(), key) {
		return nil, false, nil
	}
	val, err = it.ValueAndErr()
	if err != nil {
		return nil, false, err
	}
	o.found++
	return val, true, nil
}

func (o *orderedReader) close() {
	for i, it := range o.its {
		if it != nil {
			_ = it.Close()
			o.its[i] = nil
		}
	}
}
