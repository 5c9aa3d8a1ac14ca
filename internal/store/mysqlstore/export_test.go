package mysqlstore

// LeasePickSQL is the lease's scan (arguments: topic, now, max), for the
// churn test's probe.
func LeasePickSQL(s *Store) string { return s.leasePickSQL() }

// SetAfterLookup makes MessageInsertMany run f between its lookup of the
// batch's ids and its insert (nil: nothing).
func SetAfterLookup(s *Store, f func()) { s.afterLookup = f }
