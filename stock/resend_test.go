package stock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// resendOnce makes go-redis's resend after a lost reply happen to the
// next run of s: it runs twice, and the caller sees the second reply.
func resendOnce(t *testing.T, b *redistest.Backend, f *redistest.Faults, s *script.Script) *redistest.Rule {
	t.Helper()
	return redistest.ResendOnce(t, b.Client(t), f, s.Hash(), s.Source())
}

// A resent restock must not add its units twice: phantom stock is an
// oversell waiting to happen.
func TestAResentRestockAddsItsUnitsOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, n := range []int{1, 3} {
			t.Run(fmt.Sprint(n, " buckets"), func(t *testing.T) {
				ctx := context.Background()
				f := redistest.NewFaults()
				c := newCounter(t, b.Client(t, f))
				item := newItem(t, c, Item{Total: 10, Buckets: n})
				resent := resendOnce(t, b, f, restockScript)
				if err := c.Restock(ctx, item, 5); err != nil {
					t.Fatal(err)
				}
				if resent.Hits() == 0 {
					t.Fatal("no restock was resent")
				}
				lv, err := c.Levels(ctx, item)
				if err != nil {
					t.Fatal(err)
				}
				if lv.Total != 15 || lv.Available != 15 {
					t.Fatalf("after 10 and a resent restock of 5: %+v, want 15 in all", lv)
				}
				// A second Restock is a new one.
				if err := c.Restock(ctx, item, 5); err != nil {
					t.Fatal(err)
				}
				if lv, _ := c.Levels(ctx, item); lv.Total != 20 {
					t.Fatalf("after another restock of 5: %+v, want 20", lv)
				}
				mustAudit(t, c, item)
			})
		}
	})
}

// The Create that made the item says so even when its reply was lost and
// resent; another Create of the same item still says it did not.
func TestAResentCreateStillReportsTheItemCreated(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := redistest.Key(t)
		resendOnce(t, b, f, createScript)
		created, err := c.Create(ctx, item, Item{Total: 10})
		if err != nil || !created {
			t.Fatalf("Create, resent: %v %v, want created", created, err)
		}
		if created, err := c.Create(ctx, item, Item{Total: 10}); err != nil || created {
			t.Fatalf("Create again: %v %v, want not created", created, err)
		}
	})
}

// A sweep whose first run returned a hold's unit and whose resend found
// nothing due must still clear the sold-out mark, or the process turns
// buyers away from memory while the unit is there.
func TestAResentSweepStillClearsTheSoldOutMark(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newCounter(t, rdb, WithSoldOutCache(time.Hour))
		item := newItem(t, c, Item{Total: 1})
		r, err := c.Reserve(ctx, item, Order{ID: "a", Buyer: "alice", Quantity: 1, Hold: shortHold})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("b", "bob")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("bob, within alice's hold: %v, want ErrSoldOut", err)
		}
		waitPast(t, rdb, r.Deadline)
		resendOnce(t, b, f, sweepScript)
		if _, err := c.Sweep(ctx, item, 10); err != nil {
			t.Fatal(err)
		}
		if lv, err := c.Levels(ctx, item); err != nil || lv.Available != 1 {
			t.Fatalf("after the sweep: %+v %v, want 1 available", lv, err)
		}
		if _, err := c.Reserve(ctx, item, order("c", "cat")); err != nil {
			t.Fatalf("the unit the sweep returned: %v", err)
		}
	})
}

// bob's Reserve of a bucketed item that sold out ends with his home's last
// look, which drops the claim and forgets the order. go-redis resends it
// after a lost reply, and the second run finds no record. That is no
// claim that ran out (ErrReturned); nor can the call tell its own drop
// from an overlapping attempt's, which may reserve the order again
// (TestARetryAnsweredSoldOutIsNotThenReservedByTheSlowFirstAttempt): the
// outcome is unknown, and a retry is answered sold out.
func TestAResentLastLookOfASoldOutOrderIsNotAnsweredReturned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item, _, bob := soldOutPair(t, c, 1)
		resent := resendOnce(t, b, f, settleScript)
		if _, err := c.Reserve(ctx, item, order("x", bob)); !errors.Is(err, errClaimDropped) || resent.Hits() != 1 {
			t.Fatalf("bob, whose last look was resent (%d times): %v, want the outcome unknown", resent.Hits(), err)
		}
		if _, err := c.Reserve(ctx, item, order("x", bob)); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("bob again: %v, want ErrSoldOut", err)
		}
		wantLevels(t, c, item, Levels{Total: 2, Held: 2})
	})
}
