package mysqlstore

import (
	"context"
	"net"
	"sync/atomic"
)

// LeasePickSQL is the lease's scan (arguments: topic, now, max), for the
// churn test's probe.
func LeasePickSQL(s *Store) string { return s.leasePickSQL() }

// SetAfterLookup makes MessageInsertMany run f between its lookup of the
// batch's ids and its insert (nil: nothing).
func SetAfterLookup(s *Store, f func()) { s.afterLookup = f }

// SetReadBackSeq makes multi-row inserts read their rows' seq back, as on
// a server whose AUTO_INCREMENT values may not be consecutive.
func SetReadBackSeq(s *Store) { s.consecutiveSeq = false }

// SessionSettings reports what Open found of the sessions: READ COMMITTED
// from their start, consecutive AUTO_INCREMENT values.
func SessionSettings(s *Store) (rc, consecutive bool) { return s.sessionRC, s.consecutiveSeq }

// Prefix is the store's table prefix.
func Prefix(s *Store) string { return s.p }

// FoldCounts folds topic's send-procedure count rows (see foldCounts).
func FoldCounts(s *Store, topic string) (int, error) {
	return s.foldCounts(context.Background(), topic)
}

// PollVers runs one poll of the topics' change counters, folding count
// rows as a subscribed server does.
func PollVers(s *Store) error {
	_, err := s.pollVers(context.Background(), map[string]int64{}, true)
	return err
}

// CountWrites makes the stores opened from now on count the writes to
// their connections in n (each command the driver sends is one write: a
// round trip), until the test ends.
func CountWrites(t interface{ Cleanup(func()) }, n *atomic.Int64) { countConns(t, n, nil) }

// CountReadBytes makes the stores opened from now on add the bytes read
// from their connections to n, until the test ends.
func CountReadBytes(t interface{ Cleanup(func()) }, n *atomic.Int64) { countConns(t, nil, n) }

func countConns(t interface{ Cleanup(func()) }, writes, readBytes *atomic.Int64) {
	testDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, writes, readBytes}, nil
	}
	t.Cleanup(func() { testDial = nil })
}

// countingConn counts the writes and the bytes read of a connection (a
// nil counter: not counted).
type countingConn struct {
	net.Conn
	writes, readBytes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	if c.writes != nil {
		c.writes.Add(1)
	}
	return c.Conn.Write(b)
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.readBytes != nil {
		c.readBytes.Add(int64(n))
	}
	return n, err
}
