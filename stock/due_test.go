package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// dueMembers returns the members of bucket k's due index (records.lua),
// without its placeholder.
func dueMembers(t *testing.T, rdb redis.UniversalClient, c *Counter, item string, n, k int) []string {
	t.Helper()
	key := c.layoutFor(item, n).buckets[k].keys[1].(string)
	members, err := rdb.ZRange(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(members, func(m string) bool { return m == "" })
}

func TestABatchsHoldsComeBackFromOneDueMemberUpToMaxASweep(t *testing.T) {
	// Five orders queued behind a full flight go in one batch with one
	// deadline: one member of the due index. Of the five, one is confirmed
	// and one cancelled before the deadline; Sweeps of at most two then
	// return the other three, two and one, and leave nothing of the
	// member behind.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		item := newItem(t, c, Item{Total: 100})
		warm(t, c, item)
		fl := fillFlight(t, f, c, item)
		const hold = 300 * time.Millisecond
		var orders []Order
		results := make(chan outcome, 5)
		for i := range 5 {
			o := Order{ID: fmt.Sprint("q", i), Buyer: fmt.Sprint("buyer", i), Quantity: 1, Hold: hold}
			orders = append(orders, o)
			go func() {
				r, err := c.Reserve(ctx, item, o)
				results <- outcome{r, err}
			}()
			redistest.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return waiting(c, item) == i+1 })
		}
		land(t, c, item, fl)
		var deadline time.Time
		for range orders {
			o := <-results
			if o.err != nil {
				t.Fatal(o.err)
			}
			deadline = o.r.Deadline
		}
		var batch []string
		for _, m := range dueMembers(t, rdb, c, item, 1, 0) {
			if strings.Contains(m, "\x00") {
				batch = append(batch, m)
			}
		}
		if want := "q0\x00q1\x00q2\x00q3\x00q4"; len(batch) != 1 || batch[0] != want {
			t.Fatalf("due members of several ids: %q, want one: %q", batch, want)
		}
		if err := c.Confirm(ctx, item, "q1", "buyer1"); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, item, "q3", "buyer3"); err != nil {
			t.Fatal(err)
		}
		waitPast(t, rdb, deadline)
		for i, want := range []int64{2, 1, 0} {
			if n, err := c.Sweep(ctx, item, 2); err != nil || n != want {
				t.Fatalf("Sweep %d of at most 2: %d %v, want %d", i+1, n, err, want)
			}
		}
		for _, m := range dueMembers(t, rdb, c, item, 1, 0) {
			if strings.HasPrefix(m, "q") {
				t.Fatalf("due member %q left after the sweeps", m)
			}
		}
		held := int64(1 + maxInFlight)
		wantLevels(t, c, item, Levels{Total: 100, Available: 100 - held - 1, Held: held, Sold: 1})
		mustAudit(t, c, item)
	})
}

func TestAReusedOrderIdKeepsItsHoldWhenItsOldDueMemberFallsDue(t *testing.T) {
	// bob's order x finds both buckets sold out: its claim in his home
	// (with a short hold, and a member in due) is dropped, and with it the
	// order's record, so a retry is a new try. A unit comes back, and the
	// retry holds it for a minute. When the first try's member falls due,
	// the sweep must leave the new hold alone. Had the first try gone in a
	// batch, its member would hold other ids too and outlive the retry's
	// ZADD of x: the test adds such a member.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, ann, bob := soldOutPair(t, c, 0)
		first := Order{ID: "x", Buyer: bob, Quantity: 1, Hold: 200 * time.Millisecond}
		sent := redisNow(t, rdb)
		if _, err := c.Reserve(ctx, item, first); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("first try: %v, want ErrSoldOut", err)
		}
		if err := c.Cancel(ctx, item, "a0", ann); err != nil {
			t.Fatal(err)
		}
		retry := order("x", bob) // a minute's hold
		if r, err := c.Reserve(ctx, item, retry); err != nil || r.Bucket != 0 || r.Replayed {
			t.Fatalf("retry: %+v %v, want a new hold in bucket 0", r, err)
		}
		due := c.layoutFor(item, 2).buckets[0].keys[1].(string)
		batched := redis.Z{Score: float64(sent.Add(first.Hold).UnixMilli()), Member: "ghost\x00x"}
		if err := rdb.ZAdd(ctx, due, batched).Err(); err != nil {
			t.Fatal(err)
		}
		waitPast(t, rdb, sent.Add(first.Hold+50*time.Millisecond))
		if units, err := c.Sweep(ctx, item, 10); err != nil || units != 0 {
			t.Fatalf("Sweep: %d %v, want nothing: no hold has run out", units, err)
		}
		wantLevels(t, c, item, Levels{Total: 2, Held: 2})
		if err := c.Confirm(ctx, item, "x", bob); err != nil {
			t.Fatalf("Confirm of the retry's hold: %v", err)
		}
	})
}

// reserveInOneBatch reserves orders, all homed in bucket k of l, in one
// reserve.lua call: it pauses maxInFlight calls of other buyers homed in
// k (orders "fl<i>", a unit each for a minute) after they ran, queues
// orders behind them, and lets the paused calls go one at a time, so the
// queue leaves as one batch. It returns the orders' outcomes, in order.
func reserveInOneBatch(t *testing.T, f *redistest.Faults, c *Counter, item string, l *layout, k int, orders []Order) []outcome {
	t.Helper()
	queued := func() int {
		if b := l.buckets[k].batcher.Load(); b != nil {
			return b.Queued()
		}
		return 0
	}
	done := make(chan error, maxInFlight)
	var held []*redistest.Rule
	for i := range maxInFlight {
		h := f.On(redistest.Script(reserveScript.Hash())).HoldReply().Times(1)
		t.Cleanup(h.Release)
		held = append(held, h)
		go func() {
			_, err := c.Reserve(context.Background(), item, order(fmt.Sprint("fl", i), buyerHomedAt(k, l.n, fmt.Sprint("flyer", i))))
			done <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "a reserve to be in flight", func() bool { return h.Hits() == 1 })
	}
	results := make([]chan outcome, len(orders))
	for i, o := range orders {
		results[i] = make(chan outcome, 1)
		go func() {
			r, err := c.Reserve(context.Background(), item, o)
			results[i] <- outcome{r, err}
		}()
		redistest.WaitFor(t, 10*time.Second, "the order to queue", func() bool { return queued() == i+1 })
	}
	for _, h := range held {
		h.Release()
		redistest.WaitFor(t, 10*time.Second, "the queue to be sent", func() bool { return queued() == 0 })
	}
	for range maxInFlight {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	out := make([]outcome, len(orders))
	for i := range orders {
		out[i] = <-results[i]
	}
	return out
}

func TestASweepCutShortLeavesAReusedIdsNewerMemberAlone(t *testing.T) {
	// One batch in bucket 0 leaves the member "y\x00g\x00x": y does not
	// fit, g takes the last unit, x is claimed, and y and x are refused
	// everywhere (their records go). A unit comes back, and x's retry, a
	// new try, holds it for longer under its own member "x". A Sweep of
	// one returns g's unit and puts back the rest of the batch's member,
	// "x" again: it must not move the retry's member back to the batch's
	// deadline, or a later sweep drops it and the retry's hold is never
	// returned.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, rdb, c := faultyCounter(t, b)
		const n = 2
		item := newItem(t, c, Item{Total: 8, Buckets: n})
		l := c.layoutFor(item, n)
		for i := range 4 { // bucket 1's units
			if _, err := c.Reserve(ctx, item, order(fmt.Sprint("b", i), buyerHomedAt(1, n, fmt.Sprint("ben", i)))); err != nil {
				t.Fatal(err)
			}
		}
		// The scripts loaded on bucket 0's node: the paused calls must be
		// the EVALSHAs that run.
		warmer := buyerHomedAt(0, n, "warm")
		if _, err := c.Reserve(ctx, item, order("w", warmer)); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, item, "w", warmer); err != nil {
			t.Fatal(err)
		}
		const short = 300 * time.Millisecond
		bob := buyerHomedAt(0, n, "bob")
		y := Order{ID: "y", Buyer: buyerHomedAt(0, n, "yan"), Quantity: 2, Hold: short}
		g := Order{ID: "g", Buyer: buyerHomedAt(0, n, "gus"), Quantity: 1, Hold: short}
		x := Order{ID: "x", Buyer: bob, Quantity: 1, Hold: short}
		out := reserveInOneBatch(t, f, c, item, l, 0, []Order{y, g, x})
		if !errors.Is(out[0].err, ErrSoldOut) || out[1].err != nil || !errors.Is(out[2].err, ErrSoldOut) {
			t.Fatalf("the batch: y %v, g %v, x %v; want y and x sold out, g held", out[0].err, out[1].err, out[2].err)
		}
		if err := c.Cancel(ctx, item, "fl0", buyerHomedAt(0, n, "flyer0")); err != nil {
			t.Fatal(err)
		}
		retry, err := c.Reserve(ctx, item, Order{ID: "x", Buyer: bob, Quantity: 1, Hold: 2 * time.Second})
		if err != nil || retry.Bucket != 0 || retry.Replayed {
			t.Fatalf("x's retry: %+v %v, want a new hold in bucket 0", retry, err)
		}
		waitPast(t, rdb, out[1].r.Deadline)
		if units, err := c.Sweep(ctx, item, 1); err != nil || units != 1 {
			t.Fatalf("Sweep of one: %d %v, want g's unit", units, err)
		}
		if _, err := c.Sweep(ctx, item, 1); err != nil {
			t.Fatal(err)
		}
		waitPast(t, rdb, retry.Deadline)
		if units, err := c.Sweep(ctx, item, 10); err != nil || units != 1 {
			t.Fatalf("Sweep after the retry's hold ran out: %d %v, want its unit; due %q", units, err, dueMembers(t, rdb, c, item, n, 0))
		}
		mustAudit(t, c, item)
	})
}

func TestOrdersPaidEarlyDoNotHideAnExpiredHoldFromReserve(t *testing.T) {
	// 64 orders paid before their deadlines, then eve's hold runs out:
	// zoe's Reserve must find eve's unit, not spend its look at the due
	// index on the paid orders and answer sold out.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		const paid = 64
		item := newItem(t, c, Item{Total: paid + 1})
		for i := range paid {
			o := Order{ID: fmt.Sprintf("c%02d", i), Buyer: fmt.Sprint("p", i), Quantity: 1, Hold: 200 * time.Millisecond}
			if _, err := c.Reserve(ctx, item, o); err != nil {
				t.Fatal(err)
			}
			if err := c.Confirm(ctx, item, o.ID, o.Buyer); err != nil {
				t.Fatal(err)
			}
		}
		e, err := c.Reserve(ctx, item, Order{ID: "e", Buyer: "eve", Quantity: 1, Hold: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		waitPast(t, rdb, e.Deadline)
		if _, err := c.Reserve(ctx, item, order("z", "zoe")); err != nil {
			t.Fatalf("zoe, after eve's hold ran out: %v; levels %+v", err, mustAudit(t, c, item).Levels)
		}
	})
}

func TestAnOrderOfManyUnitsGetsThemBackFromManyExpiredHolds(t *testing.T) {
	// Forty holds of a unit each run out; an order of forty units must
	// find them all, not the first sixteen the in-line sweep ends at a
	// time, and for buckets, in the bucket it takes from too.
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprint(n, " buckets"), func(t *testing.T) {
			redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
				ctx := context.Background()
				rdb := b.Client(t)
				c := newCounter(t, rdb)
				const units = 40
				item := newItem(t, c, Item{Total: int64(units * n), Buckets: n})
				var last time.Time
				for k := range n {
					for i := range units {
						o := Order{ID: fmt.Sprint(k, "-", i), Buyer: buyerHomedAt(k, n, fmt.Sprint("b", i)), Quantity: 1, Hold: 200 * time.Millisecond}
						r, err := c.Reserve(ctx, item, o)
						if err != nil {
							t.Fatal(err)
						}
						last = r.Deadline
					}
				}
				waitPast(t, rdb, last)
				// With two buckets the big order's home (bucket 0) gets its
				// units back by itself; then a second big order, homed there
				// too, must take bucket 1's.
				for i := range n {
					big := Order{ID: fmt.Sprint("big", i), Buyer: buyerHomedAt(0, n, fmt.Sprint("bo", i)), Quantity: units, Hold: time.Minute}
					if r, err := c.Reserve(ctx, item, big); err != nil || r.Bucket != i {
						t.Fatalf("order %d of %d units: %+v %v, want them held in bucket %d", i, units, r, err, i)
					}
				}
				mustAudit(t, c, item)
			})
		})
	}
}
