package store

import "errors"

var (
	// ErrNotFound: no such message or topic.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the message's state forbids the operation, or the
	// receipt is not the current lease's.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable wraps storage faults (I/O, sync, full disk, network):
	// the operation did not take effect durably and may be retried later.
	ErrUnavailable = errors.New("store unavailable")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrCorrupt: the stored data failed a check; the store refuses to open.
	ErrCorrupt = errors.New("store corrupt")
	// ErrNewerFormat: the store was written in a format (or schema
	// version) newer than this build reads, by a newer delayq; Open
	// refuses it before writing anything. Run the newer delayq, or restore
	// the backup taken before the upgrade.
	ErrNewerFormat = errors.New("written by a newer delayq")
	// ErrBadCursor: a paging cursor this store did not make (the caller's
	// input is wrong, not the store).
	ErrBadCursor = errors.New("invalid cursor")
)
