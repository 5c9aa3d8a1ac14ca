package redisstore

// ForgetRedisClock drops the Redis TIME s keeps (runby.go), so that its
// next lease peeks first.
func ForgetRedisClock(s *Store) { s.clock.Store(nil) }

// KeepsRedisClock reports whether s keeps a Redis TIME (runby.go), which
// its next lease within a second uses instead of a peek.
func KeepsRedisClock(s *Store) bool { return s.clock.Load() != nil }
