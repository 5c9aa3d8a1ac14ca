package mysqlstore

import "context"

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
