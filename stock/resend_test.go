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

// bob's walk (A) made its hold in bucket 1 with a take that go-redis sent
// twice after a lost reply; meanwhile his retry (B) was answered sold out
// and dropped the claim. A's settle loses and must give the hold back: the
// second run of its own take found its own hold, which is no take-over.
func TestAWalksResentTakeDoesNotKeepItsOwnHoldFromAGiveBack(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		admin := newCounter(t, b.Client(t))
		item, _, bob := soldOutPair(t, admin, 1)
		l := admin.layoutFor(item, 2)
		x := Order{ID: "x", Buyer: bob, Quantity: 1, Hold: time.Minute}
		rdb := b.Client(t)
		args := append(reserveScript.Args(3, 8), l.buckets[0].keys[:]...)
		res, err := reserveScript.Ints(ctx, rdb, append(args, 2, x.ID, bob, 1, x.Hold.Milliseconds()))
		if err != nil || res[0] != codeClaimed {
			t.Fatalf("A's claim: %v %v", res, err)
		}
		deadline := res[1]
		if _, err := newCounter(t, b.Client(t)).Reserve(ctx, item, x); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("B: %v, want ErrSoldOut", err)
		}
		if err := admin.Cancel(ctx, item, "b1", buyerHomedAt(1, 2, "ben")); err != nil {
			t.Fatal(err)
		}
		fA, _, cA := faultyCounter(t, b)
		resent := resendOnce(t, b, fA, takeScript)
		if _, err := cA.reserveElsewhere(ctx, item, cA.layoutFor(item, 2), 0, x, deadline, false, new(bool)); !errors.Is(err, errClaimDropped) || resent.Hits() != 1 {
			t.Fatalf("A (take resent %d times): %v, want its claim found dropped", resent.Hits(), err)
		}
		if a := mustAudit(t, admin, item); a.Buckets[1].Held != 0 || a.Buckets[1].Available != 1 {
			t.Fatalf("bucket 1: %+v, want A's hold given back", a.Buckets[1])
		}
	})
}
