package mysqlstore

// LeasePickSQL is the lease's scan (arguments: topic, now, max), for the
// churn test's probe.
func LeasePickSQL(s *Store) string { return s.leasePickSQL() }
