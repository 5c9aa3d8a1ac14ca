package mysqlstore

import (
	"math/bits"
	"math/rand/v2"
	"sync"
)

// stripePool gives the transactions of one store distinct count stripes
// (0 to countStripes-1), the lowest free first, so that a flush of the
// counts is one upsert of a stripe no other transaction of this store
// holds. Picking a free stripe in the database instead (SELECT … FOR
// UPDATE SKIP LOCKED, then the UPDATE) cost every lease, ack, send and
// promotion a round trip more. Stores of other processes use the same
// numbers shifted by a random offset, and a stripe another server holds
// is waited for (its holder commits right after its flush); the send
// procedure's rows (stripe >= countStripes) are never taken.
type stripePool struct {
	mu     sync.Mutex
	used   uint64 // bit i: stripe (i + offset) % countStripes is held
	offset int
}

func newStripePool() stripePool {
	return stripePool{offset: rand.IntN(countStripes)} // #nosec G404 -- spreads servers over stripes; nothing depends on it being unpredictable
}

// take answers a free slot, or false when all are held (more concurrent
// transactions than stripes: the caller picks one in the database).
func (p *stripePool) take() (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == ^uint64(0) {
		return 0, false
	}
	slot := bits.TrailingZeros64(^p.used)
	p.used |= 1 << slot
	return slot, true
}

func (p *stripePool) release(slot int) {
	p.mu.Lock()
	p.used &^= 1 << slot
	p.mu.Unlock()
}

func (p *stripePool) stripe(slot int) int { return (slot + p.offset) % countStripes }

// ownStripe is the stripe tx flushes its counts to: taken from the pool
// at the transaction's first flush and held to its end (releaseStripe).
// False when tx is not one of txnRun's or the pool is exhausted.
func (s *Store) ownStripe(tx *conntx) (int, bool) {
	v, ok := s.txStripe.Load(tx)
	if !ok {
		return 0, false
	}
	slot := v.(int)
	if slot < 0 {
		if slot, ok = s.stripes.take(); !ok {
			return 0, false
		}
		s.txStripe.Store(tx, slot)
	}
	return s.stripes.stripe(slot), true
}

// releaseStripe returns the stripe tx held, once it has committed or
// rolled back.
func (s *Store) releaseStripe(tx *conntx) {
	if v, ok := s.txStripe.LoadAndDelete(tx); ok {
		if slot := v.(int); slot >= 0 {
			s.stripes.release(slot)
		}
	}
}
