package pebblestore

import "errors"

// ErrDiskFull is wrapped (together with store.ErrUnavailable) by inserts
// refused because the disk filled up. Acks, cancels and other writes that do
// not add messages keep working on the space freed by the ballast file.
var ErrDiskFull = errors.New("disk full")

// errFatal is the panic value of pebbleLogger.Fatalf, recovered around our
// own calls into Pebble and turned into store.ErrUnavailable.
type errFatal struct{ msg string }

func (e errFatal) Error() string { return "pebble fatal: " + e.msg }
