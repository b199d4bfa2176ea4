package stock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

func newCounter(t *testing.T, rdb RedisClient, opts ...Option) *Counter {
	t.Helper()
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// faultyCounter returns a Counter on b whose client goes through the
// returned faults, and that client.
func faultyCounter(t *testing.T, b *redistest.Backend, opts ...Option) (*redistest.Faults, redis.UniversalClient, *Counter) {
	t.Helper()
	f := redistest.NewFaults()
	rdb := b.Client(t, f)
	return f, rdb, newCounter(t, rdb, opts...)
}

// newItem creates a fresh item and returns its name.
func newItem(t *testing.T, c *Counter, spec Item) string {
	t.Helper()
	item := redistest.Key(t)
	created, err := c.Create(context.Background(), item, spec)
	if err != nil || !created {
		t.Fatalf("Create: %v %v", created, err)
	}
	return item
}

func order(id, buyer string) Order {
	return Order{ID: id, Buyer: buyer, Quantity: 1, Hold: time.Minute}
}

// mustAudit fails the test unless the item's books hold, and returns them.
func mustAudit(t *testing.T, c *Counter, item string) Audit {
	t.Helper()
	a, err := c.Audit(context.Background(), item)
	if err != nil {
		t.Fatal(err)
	}
	if !a.OK() {
		t.Fatalf("audit of %q failed: %v", item, a.Problems)
	}
	return a
}

func wantLevels(t *testing.T, c *Counter, item string, want Levels) {
	t.Helper()
	if got := mustAudit(t, c, item).Levels; got != want {
		t.Fatalf("levels = %+v, want %+v", got, want)
	}
}

func TestCreateIsIdempotentAndKeepsTheStock(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		item := newItem(t, c, Item{Total: 10, PerBuyer: 2})
		if _, err := c.Reserve(ctx, item, order("o1", "alice")); err != nil {
			t.Fatal(err)
		}
		created, err := c.Create(ctx, item, Item{Total: 10, PerBuyer: 2})
		if err != nil || created {
			t.Fatalf("second Create: created=%v err=%v, want false, nil", created, err)
		}
		wantLevels(t, c, item, Levels{Total: 10, Available: 9, Held: 1})
		if _, err := c.Create(ctx, item, Item{Total: 10, PerBuyer: 3}); !errors.Is(err, ErrItemConflict) {
			t.Fatalf("Create with another limit: %v, want ErrItemConflict", err)
		}
		if _, err := c.Create(ctx, item, Item{Total: 10, PerBuyer: 2, Buckets: 4}); !errors.Is(err, ErrItemConflict) {
			t.Fatalf("Create with other buckets: %v, want ErrItemConflict", err)
		}
	})
}

func TestItemKeysAreBornWithTheirTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item := newItem(t, c, Item{Total: 5, PerBuyer: 1, Buckets: 3, TTL: time.Hour})
		if _, err := c.Reserve(ctx, item, order("o1", "alice")); err != nil {
			t.Fatal(err)
		}
		l := c.layoutFor(item, 3)
		for _, bk := range l.buckets {
			for _, key := range bk.keys {
				pttl, err := rdb.PTTL(ctx, key.(string)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if pttl <= 0 || pttl > time.Hour {
					t.Errorf("%s: PTTL %v, want within (0, 1h]", key, pttl)
				}
			}
		}
	})
}

func TestReserveDeductsOnceAndReplaysRetries(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		item := newItem(t, c, Item{Total: 3})
		o := Order{ID: "o1", Buyer: "alice", Quantity: 2, Hold: time.Minute}
		first, err := c.Reserve(ctx, item, o)
		if err != nil {
			t.Fatal(err)
		}
		if first.Replayed || first.State != Held || first.Quantity != 2 {
			t.Fatalf("first reservation %+v", first)
		}
		for range 3 {
			again, err := c.Reserve(ctx, item, o)
			if err != nil {
				t.Fatal(err)
			}
			if !again.Replayed || !again.Deadline.Equal(first.Deadline) || again.State != Held {
				t.Fatalf("retry %+v, want the first reservation %+v replayed", again, first)
			}
		}
		wantLevels(t, c, item, Levels{Total: 3, Available: 1, Held: 2})

		if _, err := c.Reserve(ctx, item, Order{ID: "o1", Buyer: "bob", Quantity: 2, Hold: time.Minute}); !errors.Is(err, ErrOrderConflict) {
			t.Fatalf("same id, other buyer: %v, want ErrOrderConflict", err)
		}
		if _, err := c.Reserve(ctx, item, Order{ID: "o1", Buyer: "alice", Quantity: 1, Hold: time.Minute}); !errors.Is(err, ErrOrderConflict) {
			t.Fatalf("same id, other quantity: %v, want ErrOrderConflict", err)
		}
		// A retry after the item sold out still gets its reservation.
		if _, err := c.Reserve(ctx, item, order("o2", "bob")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("o3", "carol")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("over the stock: %v, want ErrSoldOut", err)
		}
		if r, err := c.Reserve(ctx, item, o); err != nil || !r.Replayed {
			t.Fatalf("retry after sell-out: %+v %v", r, err)
		}
		wantLevels(t, c, item, Levels{Total: 3, Available: 0, Held: 3})
	})
}

func TestPerBuyerLimit(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		item := newItem(t, c, Item{Total: 10, PerBuyer: 1})
		if _, err := c.Reserve(ctx, item, order("o1", "alice")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("o2", "alice")); !errors.Is(err, ErrBuyerLimit) {
			t.Fatalf("second bottle for alice: %v, want ErrBuyerLimit", err)
		}
		if _, err := c.Reserve(ctx, item, Order{ID: "o3", Buyer: "bob", Quantity: 2, Hold: time.Minute}); !errors.Is(err, ErrBuyerLimit) {
			t.Fatalf("two bottles at once: %v, want ErrBuyerLimit", err)
		}
		// Returned units no longer count.
		if err := c.Cancel(ctx, item, "o1", "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("o4", "alice")); err != nil {
			t.Fatalf("after cancelling, alice buys again: %v", err)
		}
		// Sold units do.
		if err := c.Confirm(ctx, item, "o4", "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("o5", "alice")); !errors.Is(err, ErrBuyerLimit) {
			t.Fatalf("after buying one: %v, want ErrBuyerLimit", err)
		}
		mustAudit(t, c, item)
	})
}

func TestConfirmCancelAndTheirRetries(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		item := newItem(t, c, Item{Total: 5})
		for _, id := range []string{"paid", "dropped"} {
			if _, err := c.Reserve(ctx, item, order(id, "alice")); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := c.Confirm(ctx, item, "paid", "alice"); err != nil {
				t.Fatalf("Confirm: %v", err)
			}
			if err := c.Cancel(ctx, item, "dropped", "alice"); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
		}
		if err := c.Cancel(ctx, item, "paid", "alice"); !errors.Is(err, ErrSold) {
			t.Fatalf("Cancel of a sold order: %v, want ErrSold", err)
		}
		if err := c.Confirm(ctx, item, "dropped", "alice"); !errors.Is(err, ErrReturned) {
			t.Fatalf("Confirm of a returned order: %v, want ErrReturned", err)
		}
		if err := c.Confirm(ctx, item, "nope", "alice"); !errors.Is(err, ErrUnknownOrder) {
			t.Fatalf("Confirm of an unknown order: %v, want ErrUnknownOrder", err)
		}
		if err := c.Confirm(ctx, item, "paid", "mallory"); !errors.Is(err, ErrUnknownOrder) {
			t.Fatalf("Confirm of another buyer's order: %v, want ErrUnknownOrder", err)
		}
		if r, err := c.Reserve(ctx, item, order("dropped", "alice")); err != nil || !r.Replayed || r.State != Returned {
			t.Fatalf("retry of a returned order: %+v %v, want it replayed as returned", r, err)
		}
		wantLevels(t, c, item, Levels{Total: 5, Available: 4, Sold: 1})
	})
}

func TestExpiredHoldsComeBack(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item := newItem(t, c, Item{Total: 3, PerBuyer: 1})
		short := func(id, buyer string) Order {
			return Order{ID: id, Buyer: buyer, Quantity: 1, Hold: 100 * time.Millisecond}
		}
		var deadline time.Time
		for _, o := range []Order{short("late-payer", "alice"), short("no-payer", "bob"), short("swept", "carol")} {
			r, err := c.Reserve(ctx, item, o)
			if err != nil {
				t.Fatal(err)
			}
			deadline = r.Deadline
		}
		if _, err := c.Reserve(ctx, item, order("d", "dave")); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("%v, want ErrSoldOut while all is held", err)
		}
		// Wait for Redis's clock to pass the deadlines.
		redistest.WaitFor(t, 5*time.Second, "Redis's clock to pass the deadlines", func() bool {
			now, err := rdb.Time(ctx).Result()
			return err == nil && now.After(deadline)
		})
		if err := c.Confirm(ctx, item, "late-payer", "alice"); !errors.Is(err, ErrReturned) {
			t.Fatalf("Confirm after the deadline: %v, want ErrReturned", err)
		}
		n, err := c.Sweep(ctx, item, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n != 2 {
			t.Fatalf("Sweep returned %d units, want 2 (one was returned by the late Confirm)", n)
		}
		if n, _ := c.Sweep(ctx, item, 10); n != 0 {
			t.Fatalf("a second Sweep returned %d units", n)
		}
		wantLevels(t, c, item, Levels{Total: 3, Available: 3})
		// Their buyers may buy again.
		if _, err := c.Reserve(ctx, item, order("again", "bob")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestReserveReturnsExpiredHoldsItFinds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		item := newItem(t, c, Item{Total: 1})
		if _, err := c.Reserve(ctx, item, Order{ID: "o1", Buyer: "alice", Quantity: 1, Hold: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		// No Sweep runs: the next reservation after the deadline gets the unit.
		redistest.WaitFor(t, 5*time.Second, "the hold to expire", func() bool {
			_, err := c.Reserve(ctx, item, order("o2", "bob"))
			if err != nil && !errors.Is(err, ErrSoldOut) {
				t.Fatal(err)
			}
			return err == nil
		})
		wantLevels(t, c, item, Levels{Total: 1, Available: 0, Held: 1})
	})
}

func TestRestockAndDelete(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		for _, buckets := range []int{1, 3} {
			item := newItem(t, c, Item{Total: 1, Buckets: buckets})
			if err := c.Restock(ctx, item, 7); err != nil {
				t.Fatal(err)
			}
			wantLevels(t, c, item, Levels{Total: 8, Available: 8})
			if err := c.Delete(ctx, item); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Levels(ctx, item); !errors.Is(err, ErrUnknownItem) {
				t.Fatalf("Levels after Delete: %v, want ErrUnknownItem", err)
			}
			if _, err := c.Reserve(ctx, item, order("o", "alice")); !errors.Is(err, ErrUnknownItem) {
				t.Fatalf("Reserve after Delete: %v, want ErrUnknownItem", err)
			}
			if _, err := c.Sweep(ctx, item, 10); !errors.Is(err, ErrUnknownItem) {
				t.Fatalf("Sweep after Delete: %v, want ErrUnknownItem", err)
			}
		}
	})
}

func TestADeleteThatFailsPartWayCanBeRetried(t *testing.T) {
	// Deleting bucket 1 of two fails. The retry must still find the item
	// and delete every bucket; a Create after it starts afresh, with none
	// of the old stock or orders.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		const n = 2
		item := newItem(t, c, Item{Total: 10, Buckets: n})
		bob := buyerHomedAt(1, n, "bob")
		if _, err := c.Reserve(ctx, item, order("old", bob)); err != nil {
			t.Fatal(err)
		}
		bucket1 := c.layoutFor(item, n).buckets[1].keys[0]
		f.On(func(cmd redis.Cmder) bool { return cmd.Name() == "del" && cmd.Args()[1] == bucket1 }).Fail(errDied).Times(1)
		if err := c.Delete(ctx, item); !errors.Is(err, errDied) {
			t.Fatalf("Delete: %v, want it to fail on bucket 1", err)
		}
		if err := c.Delete(ctx, item); err != nil {
			t.Fatalf("retried Delete: %v", err)
		}
		if _, err := c.Create(ctx, item, Item{Total: 4, Buckets: n}); err != nil {
			t.Fatal(err)
		}
		wantLevels(t, c, item, Levels{Total: 4, Available: 4})
		if r, err := c.Reserve(ctx, item, order("old", bob)); err != nil || r.Replayed {
			t.Fatalf("the deleted item's order in the new one: %+v %v, want a new reservation", r, err)
		}
	})
}

func TestAHoldEndsWithItsItemIfTheItemExpiresFirst(t *testing.T) {
	// An item whose keys expire in a second, and an order held for an
	// hour: its deadline must be the item's expiry, not a time at which
	// Confirm would find no item.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item := newItem(t, c, Item{Total: 2, TTL: time.Second})
		r, err := c.Reserve(ctx, item, Order{ID: "o1", Buyer: "ann", Quantity: 1, Hold: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		key := c.layoutFor(item, 1).buckets[0].keys[0].(string)
		expiry, err := rdb.PExpireTime(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		// miniredis keeps a TTL from its clock, and may give the instant
		// back a millisecond off.
		var slack time.Duration
		if b.Miniredis() != nil {
			slack = 5 * time.Millisecond
		}
		if want := time.UnixMilli(expiry.Milliseconds()); r.Deadline.Before(want.Add(-slack)) || r.Deadline.After(want.Add(slack)) {
			t.Fatalf("deadline %v, want the item's expiry %v", r.Deadline, want)
		}
		if r, err := c.Reserve(ctx, item, Order{ID: "o2", Buyer: "bob", Quantity: 1, Hold: time.Millisecond}); err != nil || !r.Deadline.Before(time.UnixMilli(expiry.Milliseconds())) {
			t.Fatalf("a short hold: %+v %v, want it to end before the item", r, err)
		}
	})
}

func TestCountsStayExactUpToMaxUnits(t *testing.T) {
	// The scripts count in doubles: every count up to MaxUnits must come
	// out to the unit, and no restock may take a bucket past it.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		item := newItem(t, c, Item{Total: MaxUnits - 1})
		big := Order{ID: "big", Buyer: "b", Quantity: MaxUnits - 2, Hold: time.Minute}
		if _, err := c.Reserve(ctx, item, big); err != nil {
			t.Fatal(err)
		}
		wantLevels(t, c, item, Levels{Total: MaxUnits - 1, Available: 1, Held: MaxUnits - 2})
		if err := c.Restock(ctx, item, 1); err != nil {
			t.Fatal(err)
		}
		if err := c.Restock(ctx, item, 1); !errors.Is(err, ErrTooManyUnits) {
			t.Fatalf("a restock past MaxUnits: %v, want ErrTooManyUnits", err)
		}
		if err := c.Cancel(ctx, item, big.ID, big.Buyer); err != nil {
			t.Fatal(err)
		}
		wantLevels(t, c, item, Levels{Total: MaxUnits, Available: MaxUnits})
	})
}

func TestInvalidInputNeverReachesRedis(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		seen := f.On(redistest.Any())
		ok := Order{ID: "o", Buyer: "b", Quantity: 1, Hold: time.Second}
		for name, o := range map[string]Order{
			"empty id":      {Buyer: "b", Quantity: 1, Hold: time.Second},
			"empty buyer":   {ID: "o", Quantity: 1, Hold: time.Second},
			"zero quantity": {ID: "o", Buyer: "b", Hold: time.Second},
			"negative qty":  {ID: "o", Buyer: "b", Quantity: -1, Hold: time.Second},
			"zero hold":     {ID: "o", Buyer: "b", Quantity: 1},
			"tiny hold":     {ID: "o", Buyer: "b", Quantity: 1, Hold: time.Microsecond},
			"huge quantity": {ID: "o", Buyer: "b", Quantity: MaxUnits + 1, Hold: time.Second},
			"NUL in the id": {ID: "o\x00p", Buyer: "b", Quantity: 1, Hold: time.Second},
		} {
			if _, err := c.Reserve(ctx, "item", o); !errors.Is(err, ErrInvalid) {
				t.Errorf("Reserve with %s: %v, want ErrInvalid", name, err)
			}
		}
		for _, item := range []string{"", "}x", "a{b}", "sku#1.2"} {
			if _, err := c.Reserve(ctx, item, ok); !errors.Is(err, ErrInvalid) {
				t.Errorf("Reserve on item %q: %v, want ErrInvalid", item, err)
			}
		}
		for name, spec := range map[string]Item{
			"negative total": {Total: -1},
			"negative limit": {Total: 1, PerBuyer: -1},
			"too many":       {Total: 1, Buckets: MaxBuckets + 1},
			"negative ttl":   {Total: 1, TTL: -time.Second},
			"huge total":     {Total: MaxUnits + 1},
			"huge limit":     {Total: 1, PerBuyer: MaxUnits + 1},
		} {
			if _, err := c.Create(ctx, "item", spec); !errors.Is(err, ErrInvalid) {
				t.Errorf("Create with %s: %v, want ErrInvalid", name, err)
			}
		}
		if err := c.Confirm(ctx, "item", "", "b"); !errors.Is(err, ErrInvalid) {
			t.Errorf("Confirm with empty id: %v", err)
		}
		if err := c.Cancel(ctx, "item", "o", ""); !errors.Is(err, ErrInvalid) {
			t.Errorf("Cancel with empty buyer: %v", err)
		}
		for _, units := range []int64{0, MaxUnits + 1} {
			if err := c.Restock(ctx, "item", units); !errors.Is(err, ErrInvalid) {
				t.Errorf("Restock of %d: %v", units, err)
			}
		}
		for _, max := range []int{0, -1, MaxSweep + 1, math.MaxInt} {
			if _, err := c.Sweep(ctx, "item", max); !errors.Is(err, ErrInvalid) {
				t.Errorf("Sweep of %d: %v", max, err)
			}
		}
		if n := seen.Hits(); n != 0 {
			t.Fatalf("%d commands reached Redis for invalid input", n)
		}
	})
}

// The largest batch Sweep takes runs: the script's bounds (4*max ids
// looked at, max outbox entries) stay integers Redis accepts.
func TestSweepTakesBatchesUpToMaxSweep(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item := newItem(t, c, Item{Total: 1})
		r, err := c.Reserve(ctx, item, Order{ID: "a", Buyer: "alice", Quantity: 1, Hold: shortHold})
		if err != nil {
			t.Fatal(err)
		}
		waitPast(t, rdb, r.Deadline)
		if units, err := c.Sweep(ctx, item, MaxSweep); err != nil || units != 1 {
			t.Fatalf("Sweep(MaxSweep): %d %v, want the expired hold's unit back", units, err)
		}
	})
}

func TestNeverOversellsUnderContention(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, buckets := range []int{1, 4} {
			t.Run(fmt.Sprintf("buckets=%d", buckets), func(t *testing.T) {
				ctx := context.Background()
				c := newCounter(t, b.Client(t))
				const total, buyers = 100, 1000
				item := newItem(t, c, Item{Total: total, PerBuyer: 1, Buckets: buckets})
				var got, soldOut atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i := range buyers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						_, err := c.Reserve(ctx, item, order(fmt.Sprintf("o%d", i), fmt.Sprintf("buyer%d", i)))
						switch {
						case err == nil:
							got.Add(1)
						case errors.Is(err, ErrSoldOut):
							soldOut.Add(1)
						default:
							t.Error(err)
						}
					}()
				}
				close(start)
				wg.Wait()
				if got.Load() != total || soldOut.Load() != buyers-total {
					t.Fatalf("%d reserved, %d sold out; want exactly %d and %d", got.Load(), soldOut.Load(), total, buyers-total)
				}
				wantLevels(t, c, item, Levels{Total: total, Held: total})
			})
		}
	})
}

func TestConcurrentRetriesOfOneOrderDeductOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, buckets := range []int{1, 3} {
			t.Run(fmt.Sprintf("buckets=%d", buckets), func(t *testing.T) {
				ctx := context.Background()
				c := newCounter(t, b.Client(t))
				item := newItem(t, c, Item{Total: 6, PerBuyer: 2, Buckets: buckets})
				// Empty the buyer's home bucket (two units each) so that the
				// order must come from another one, the two-step path, when
				// there are buckets.
				h := home("alice", buckets)
				for i, filled := 0, 0; buckets > 1 && filled < 2; i++ {
					buyer := fmt.Sprintf("filler%d", i)
					if home(buyer, buckets) != h {
						continue
					}
					if _, err := c.Reserve(ctx, item, order("f"+buyer, buyer)); err != nil {
						t.Fatal(err)
					}
					filled++
				}
				before := mustAudit(t, c, item)
				o := Order{ID: "retried", Buyer: "alice", Quantity: 2, Hold: time.Minute}
				var reserved, replayed atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						r, err := c.Reserve(ctx, item, o)
						switch {
						case err == nil && r.Replayed:
							replayed.Add(1)
						case err == nil:
							reserved.Add(1)
						default:
							t.Error(err)
						}
					}()
				}
				close(start)
				wg.Wait()
				if reserved.Load() != 1 {
					t.Fatalf("%d calls reserved the order (%d replayed); want exactly 1", reserved.Load(), replayed.Load())
				}
				after := mustAudit(t, c, item)
				if after.Held-before.Held != 2 {
					t.Fatalf("held went from %d to %d: the order deducted %d units, want 2", before.Held, after.Held, after.Held-before.Held)
				}
			})
		}
	})
}

func TestSoldOutCacheSparesRedis(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newCounter(t, rdb, WithSoldOutCache(time.Hour))
		item := newItem(t, c, Item{Total: 1})
		if _, err := c.Reserve(ctx, item, order("o1", "alice")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("o2", "bob")); !errors.Is(err, ErrSoldOut) {
			t.Fatal(err)
		}
		calls := f.On(redistest.Any())
		for range 100 {
			if _, err := c.Reserve(ctx, item, order("o3", "carol")); !errors.Is(err, ErrSoldOut) {
				t.Fatal(err)
			}
		}
		if n := calls.Hits(); n != 0 {
			t.Fatalf("%d commands sent while the item was known to be sold out", n)
		}
		// A unit coming back through this Counter is offered at once.
		if err := c.Cancel(ctx, item, "o1", "alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("o3", "carol")); err != nil {
			t.Fatalf("after a cancel: %v", err)
		}
	})
}

// A retry after the hold ran out, before any sweep, is told the order
// was returned, as Confirm would be: not that it is still held.
func TestARetryAfterTheHoldRanOutIsToldItWasReturned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item := newItem(t, c, Item{Total: 1})
		o := Order{ID: "x", Buyer: "alice", Quantity: 1, Hold: shortHold}
		first, err := c.Reserve(ctx, item, o)
		if err != nil {
			t.Fatal(err)
		}
		waitPast(t, rdb, first.Deadline)
		again, err := c.Reserve(ctx, item, o)
		if err != nil || !again.Replayed || again.State != Returned || !again.Deadline.Equal(first.Deadline) {
			t.Fatalf("retry past the deadline: %+v %v, want replayed as returned at %v", again, err, first.Deadline)
		}
		if err := c.Confirm(ctx, item, o.ID, o.Buyer); !errors.Is(err, ErrReturned) {
			t.Fatalf("Confirm after: %v, want ErrReturned", err)
		}
		wantLevels(t, c, item, Levels{Total: 1, Available: 1})
	})
}

func TestARetryAfterALostReplyDeductsNothing(t *testing.T) {
	// The incident behind idempotency: the reservation went through, the
	// reply was lost, the client retried.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: 5, PerBuyer: 1})
		if _, err := c.Reserve(ctx, item, order("warm", "w")); err != nil { // loads the script
			t.Fatal(err)
		}
		f.On(redistest.Script(reserveScript.Hash())).LoseReply(errors.New("i/o timeout")).Times(1)
		if _, err := c.Reserve(ctx, item, order("o1", "alice")); err == nil {
			t.Fatal("the lost reply was not reported")
		}
		r, err := c.Reserve(ctx, item, order("o1", "alice"))
		if err != nil || !r.Replayed {
			t.Fatalf("retry: %+v %v, want the first reservation replayed", r, err)
		}
		wantLevels(t, c, item, Levels{Total: 5, Available: 3, Held: 2})
	})
}

func TestRedisErrorsAreReturned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: 5, Buckets: 2})
		if _, err := c.Reserve(ctx, item, order("o1", "alice")); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("connection reset")
		f.On(redistest.Any()).Fail(boom)
		if _, err := c.Reserve(ctx, item, order("o2", "bob")); !errors.Is(err, boom) {
			t.Errorf("Reserve: %v", err)
		}
		for name, err := range map[string]error{
			"Confirm": c.Confirm(ctx, item, "o1", "alice"),
			"Cancel":  c.Cancel(ctx, item, "o1", "alice"),
			"Restock": c.Restock(ctx, item, 1),
		} {
			if !errors.Is(err, boom) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if _, err := c.Sweep(ctx, item, 10); !errors.Is(err, boom) {
			t.Errorf("Sweep: %v", err)
		}
		if _, err := c.Audit(ctx, item); !errors.Is(err, boom) {
			t.Errorf("Audit: %v", err)
		}
		if _, err := c.Create(ctx, redistest.Key(t), Item{Total: 1}); !errors.Is(err, boom) {
			t.Errorf("Create: %v", err)
		}
	})
}

func TestWhatDecidesIsReadOnThePrimary(t *testing.T) {
	// A client with ReadOnly, RouteByLatency or RouteRandomly sends
	// read-only commands to replicas, which may lag: nothing that decides
	// (which buckets Delete and Restock touch, a reservation) may be one.
	// Levels and Audit are reports and may read a replica.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		item := newItem(t, newCounter(t, b.Client(t)), Item{Total: 9, PerBuyer: 1, Buckets: 3})
		var mu sync.Mutex
		var reads []string
		watch := redistest.Watch(func(cmd redis.Cmder) {
			switch name := cmd.Name(); name {
			case "get", "mget", "hget", "hmget", "hgetall", "exists", "pttl", "ttl", "lrange", "zrange", "zrangebyscore", "evalsha_ro", "eval_ro":
				mu.Lock()
				reads = append(reads, name)
				mu.Unlock()
			}
		})
		c := newCounter(t, b.Client(t, watch)) // a process that did not create the item
		if err := c.Restock(ctx, item, 3); err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			buyer := buyerHomedAt(k, 3, "reader")
			if _, err := c.Reserve(ctx, item, order("o"+buyer, buyer)); err != nil {
				t.Fatal(err)
			}
			if err := c.Confirm(ctx, item, "o"+buyer, buyer); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Sweep(ctx, item, 10); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, item); err != nil {
			t.Fatal(err)
		}
		if len(reads) > 0 {
			t.Fatalf("read-only commands sent: %v", reads)
		}
	})
}

func TestALoneReservationWhoseDeadlinePassesInFlightMayHaveBeenReserved(t *testing.T) {
	// With ContextTimeoutEnabled, go-redis ends the read at the context's
	// deadline with its own i/o timeout, a moment before the context is
	// done. The answer must still be "it may have been reserved", with
	// the deadline as its cause.
	srv := redistest.Servers(t, 1)[0]
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, PoolSize: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newCounter(t, rdb)
	item := newItem(t, c, Item{Total: 10, PerBuyer: 5})
	if _, err := c.Reserve(context.Background(), item, order("o1", "alice")); err != nil {
		t.Fatal(err) // connection open, script cached
	}
	if err := srv.Pause(); err != nil {
		t.Skip(err)
	}
	defer func() { _ = srv.Resume() }()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Reserve(ctx, item, order("o2", "alice"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "may have been reserved") || strings.Contains(err.Error(), "%!") {
		t.Fatalf("a lone reservation whose deadline passed in flight: %v, want it may have been reserved, wrapping %v", err, context.DeadlineExceeded)
	}
}
