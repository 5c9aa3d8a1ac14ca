package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/delayq/delayq"
)

// The statuses of an order.
const (
	statusUnpaid = "unpaid"
	statusPaid   = "paid"
	statusClosed = "closed"
)

// errOrdersUnavailable is what the order store answers while it is down.
var errOrdersUnavailable = errors.New("order store unavailable")

// orderStore is the shop's order database, a map of order id → status
// here. It is safe for concurrent use: a Worker runs handlers in parallel.
type orderStore struct {
	mu     sync.Mutex
	status map[string]string
	down   bool // answers errOrdersUnavailable, to test retries
}

func newOrderStore() *orderStore { return &orderStore{status: map[string]string{}} }

// place records a new, unpaid order.
func (s *orderStore) place(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status[id] = statusUnpaid
}

// pay marks an unpaid order paid; it reports false if the order was not
// unpaid (already closed: too late).
func (s *orderStore) pay(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status[id] != statusUnpaid {
		return false
	}
	s.status[id] = statusPaid
	return true
}

// get returns the order's status, "" if there is no such order.
func (s *orderStore) get(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[id]
}

// setDown makes the store fail (true) or work again (false).
func (s *orderStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// closeIfUnpaid closes the order if it is still unpaid and reports
// whether it did.
func (s *orderStore) closeIfUnpaid(id string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.down:
		return false, errOrdersUnavailable
	case s.status[id] == "":
		return false, fmt.Errorf("no order %q", id)
	case s.status[id] != statusUnpaid:
		return false, nil
	}
	s.status[id] = statusClosed
	return true, nil
}

// orders is the store closeUnpaidOrder works on. Tests give each test a
// fresh one.
var orders = newOrderStore()

// closeUnpaidOrder handles an order's payment timeout, a message whose
// payload is the order id, sent 30 minutes ahead when the order is placed:
// an order still unpaid is closed, a paid one is left alone. Running it
// twice for one order changes nothing, so a redelivery (delivery is at
// least once) is harmless. An error makes delayq retry the message after
// the topic's backoff.
func closeUnpaidOrder(ctx context.Context, m *delayq.Message) error {
	id := string(m.Payload)
	closed, err := orders.closeIfUnpaid(id)
	if err != nil {
		return fmt.Errorf("close unpaid order %s: %w", id, err)
	}
	if closed {
		fmt.Printf("order %s: unpaid after the payment window, closed\n", id)
	}
	return nil
}
