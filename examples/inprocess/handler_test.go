package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/delayqtest"
)

// testPlaceOrder places an order and schedules its payment timeout, as the
// shop does, on a fresh order store and an in-memory queue whose clock the
// test moves.
func testPlaceOrder(t *testing.T, id string) *delayqtest.Queue {
	t.Helper()
	orders = newOrderStore()
	q := delayqtest.NewQueue(t)
	orders.place(id)
	if _, err := q.Send(context.Background(), "order-timeouts", delayq.NewSendRequest([]byte(id),
		delayq.After(30*time.Minute), delayq.WithID("timeout-"+id))); err != nil {
		t.Fatal(err)
	}
	return q
}

// testWork runs closeUnpaidOrder on the timeouts that are due and returns
// what it returned for each.
func testWork(q *delayqtest.Queue) []delayqtest.Result {
	return q.Work(context.Background(), "order-timeouts", delayq.HandlerFunc(closeUnpaidOrder))
}

func TestUnpaidOrderIsClosedAfter30Minutes(t *testing.T) {
	q := testPlaceOrder(t, "order-42")

	q.Advance(29 * time.Minute)
	if res := testWork(q); len(res) != 0 {
		t.Fatalf("after 29 minutes %d timeouts were handled, want none", len(res))
	}
	if s := orders.get("order-42"); s != statusUnpaid {
		t.Fatalf("after 29 minutes the order is %s, want unpaid", s)
	}

	q.Advance(time.Minute)
	res := testWork(q)
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("after 30 minutes: %+v, want one timeout handled without error", res)
	}
	if s := orders.get("order-42"); s != statusClosed {
		t.Fatalf("after 30 minutes the order is %s, want closed", s)
	}
}

func TestPaidOrderIsLeftAlone(t *testing.T) {
	q := testPlaceOrder(t, "order-43")
	q.Advance(10 * time.Minute)
	if !orders.pay("order-43") {
		t.Fatal("paying an unpaid order failed")
	}

	q.Advance(20 * time.Minute)
	res := testWork(q)
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("after 30 minutes: %+v, want one timeout handled without error", res)
	}
	if s := orders.get("order-43"); s != statusPaid {
		t.Fatalf("the paid order is %s, want paid", s)
	}
}

func TestHandlerErrorRetriesAfterBackoff(t *testing.T) {
	q := testPlaceOrder(t, "order-44")
	ctx := context.Background()
	if _, err := q.SetTopicSettings(ctx, "order-timeouts", delayq.TopicSettings{
		Backoff: delayq.Backoff{Initial: time.Minute, Max: time.Hour, Multiplier: 2},
	}); err != nil {
		t.Fatal(err)
	}
	orders.setDown(true)

	q.Advance(30 * time.Minute)
	res := testWork(q)
	if len(res) != 1 || !errors.Is(res[0].Err, errOrdersUnavailable) {
		t.Fatalf("with the order store down: %+v, want one timeout failing with %v", res, errOrdersUnavailable)
	}
	m, err := q.Get(ctx, "order-timeouts", "timeout-order-44")
	if err != nil {
		t.Fatal(err)
	}
	if m.State != delayq.StateScheduled {
		t.Fatalf("the failed timeout is %s, want scheduled for a retry", m.State)
	}
	orders.setDown(false)

	// The retry is due after the backoff (a minute, ±20 % jitter): not a
	// millisecond before.
	q.AdvanceTo(m.DeliverAt.Add(-time.Millisecond))
	if res := testWork(q); len(res) != 0 {
		t.Fatalf("before the backoff was over %d timeouts were handled", len(res))
	}
	q.AdvanceTo(m.DeliverAt)
	res = testWork(q)
	if len(res) != 1 || res[0].Err != nil || res[0].Message.Attempt != 2 {
		t.Fatalf("after the backoff: %+v, want the second attempt handled without error", res)
	}
	if s := orders.get("order-44"); s != statusClosed {
		t.Fatalf("after the retry the order is %s, want closed", s)
	}
}
