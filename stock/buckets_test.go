package stock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/redistest"
)

// buyerHomedAt returns a buyer name whose home bucket is k of n.
func buyerHomedAt(k, n int, salt string) string {
	for i := 0; ; i++ {
		b := fmt.Sprintf("%s-%d", salt, i)
		if home(b, n) == k {
			return b
		}
	}
}

func TestBucketsAreTriedBeforeSoldOut(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		const n = 4
		item := newItem(t, c, Item{Total: 8, Buckets: n})
		// Every buyer lives in bucket 0, which has two units: the other six
		// come from the other buckets.
		for i := range 8 {
			buyer := buyerHomedAt(0, n, fmt.Sprint(i))
			r, err := c.Reserve(ctx, item, order(fmt.Sprintf("o%d", i), buyer))
			if err != nil {
				t.Fatalf("order %d: %v, while stock remained", i, err)
			}
			if i < 2 && r.Bucket != 0 {
				t.Fatalf("order %d came from bucket %d while the home bucket had stock", i, r.Bucket)
			}
		}
		if _, err := c.Reserve(ctx, item, order("o9", buyerHomedAt(0, n, "late"))); !errors.Is(err, ErrSoldOut) {
			t.Fatalf("%v, want ErrSoldOut", err)
		}
		a := mustAudit(t, c, item)
		for _, bk := range a.Buckets {
			if bk.Held != 2 || bk.Available != 0 {
				t.Fatalf("bucket %d: %+v, want 2 held", bk.Index, bk.Levels)
			}
		}
	})
}

func TestACounterThatDidNotCreateTheItemLearnsItsBuckets(t *testing.T) {
	// An admin process creates the item; app servers, with Counters of
	// their own, reserve, confirm and read it. They learn the number of
	// buckets from bucket 0's answer.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		const n = 3
		item := newItem(t, newCounter(t, b.Client(t)), Item{Total: 3 * n, Buckets: n})
		for k := range n {
			c := newCounter(t, b.Client(t)) // a fresh process for each buyer
			buyer := buyerHomedAt(k, n, "app")
			r, err := c.Reserve(ctx, item, order("o"+buyer, buyer))
			if err != nil || r.Bucket != k {
				t.Fatalf("a fresh Counter's order for a buyer homed in %d: %+v %v", k, r, err)
			}
			if err := newCounter(t, b.Client(t)).Confirm(ctx, item, "o"+buyer, buyer); err != nil {
				t.Fatalf("a fresh Counter's Confirm: %v", err)
			}
		}
		wantLevels(t, newCounter(t, b.Client(t)), item, Levels{Total: 3 * n, Available: 2 * n, Sold: n})
	})
}

func TestPerBuyerLimitHoldsAcrossBuckets(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newCounter(t, b.Client(t))
		const n = 3
		item := newItem(t, c, Item{Total: 3, PerBuyer: 1, Buckets: n})
		alice := buyerHomedAt(0, n, "alice")
		if _, err := c.Reserve(ctx, item, order("f", buyerHomedAt(0, n, "filler"))); err != nil {
			t.Fatal(err)
		}
		r, err := c.Reserve(ctx, item, order("a1", alice))
		if err != nil || r.Bucket == 0 {
			t.Fatalf("alice's first bottle: %+v %v, want it from another bucket", r, err)
		}
		if _, err := c.Reserve(ctx, item, order("a2", alice)); !errors.Is(err, ErrBuyerLimit) {
			t.Fatalf("alice's second bottle: %v, want ErrBuyerLimit", err)
		}
		// Confirm and cancel reach the bucket holding the units.
		if err := c.Cancel(ctx, item, "a1", alice); err != nil {
			t.Fatal(err)
		}
		if err := c.Confirm(ctx, item, "a1", alice); !errors.Is(err, ErrReturned) {
			t.Fatalf("Confirm after Cancel: %v, want ErrReturned", err)
		}
		r, err = c.Reserve(ctx, item, order("a3", alice))
		if err != nil {
			t.Fatalf("after cancelling, alice buys again: %v", err)
		}
		if err := c.Confirm(ctx, item, "a3", alice); err != nil {
			t.Fatal(err)
		}
		if err := c.Cancel(ctx, item, "a3", alice); !errors.Is(err, ErrSold) {
			t.Fatalf("Cancel after Confirm: %v, want ErrSold", err)
		}
		if _, err := c.Reserve(ctx, item, order("a4", alice)); !errors.Is(err, ErrBuyerLimit) {
			t.Fatalf("after buying one: %v, want ErrBuyerLimit", err)
		}
		mustAudit(t, c, item)
	})
}

func TestSweepTellsTheHomeBucketAboutExpiredHoldsElsewhere(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		const n = 2
		item := newItem(t, c, Item{Total: 2, PerBuyer: 1, Buckets: n})
		if _, err := c.Reserve(ctx, item, order("f", buyerHomedAt(0, n, "filler"))); err != nil {
			t.Fatal(err)
		}
		alice := buyerHomedAt(0, n, "alice")
		// The hold outlasts the three scripts of a reservation from another
		// bucket on a loaded machine: one settled after its deadline is
		// returned.
		r, err := c.Reserve(ctx, item, Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: 500 * time.Millisecond})
		if err != nil || r.Bucket != 1 {
			t.Fatalf("%+v %v", r, err)
		}
		redistest.WaitFor(t, 5*time.Second, "Redis's clock to pass the deadline", func() bool {
			now, err := rdb.Time(ctx).Result()
			return err == nil && now.After(r.Deadline)
		})
		units, err := c.Sweep(ctx, item, 10)
		if err != nil || units != 1 {
			t.Fatalf("Sweep: %d units, %v; want 1", units, err)
		}
		a := mustAudit(t, c, item)
		if a.Buckets[1].Outbox != 0 {
			t.Fatalf("the home was not told: outbox %d", a.Buckets[1].Outbox)
		}
		// The home released alice's allowance.
		if _, err := c.Reserve(ctx, item, order("a2", alice)); err != nil {
			t.Fatalf("alice after her hold ran out: %v", err)
		}
	})
}

// abandonClaim makes the claim a process makes in alice's home bucket when
// the home is empty, for an order held for hold, and stops there, as if it
// died before any other bucket held the units. It returns alice and the
// claim's deadline.
func abandonClaim(t *testing.T, c *Counter, rdb RedisClient, item string, n int, orderID string, hold time.Duration) (string, int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Reserve(ctx, item, order("f"+orderID, buyerHomedAt(0, n, "filler"+orderID))); err != nil {
		t.Fatal(err)
	}
	alice := buyerHomedAt(0, n, "alice")
	l := c.layoutFor(item, n)
	args := append(reserveScript.Args(3, 8), l.buckets[0].keys[:]...)
	res, err := reserveScript.Ints(ctx, rdb, append(args, n, orderID, alice, 1, hold.Milliseconds()))
	if err != nil || len(res) != 4 || res[0] != codeClaimed {
		t.Fatalf("claim: %v %v", res, err)
	}
	return alice, res[1]
}

func TestARetryResumesAnAbandonedClaim(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		const n = 2
		item := newItem(t, c, Item{Total: 2, PerBuyer: 1, Buckets: n})
		alice, _ := abandonClaim(t, c, rdb, item, n, "a1", time.Minute)
		if err := c.Confirm(ctx, item, "a1", alice); !errors.Is(err, ErrPending) {
			t.Fatalf("Confirm of a claimed order: %v, want ErrPending", err)
		}
		r, err := c.Reserve(ctx, item, Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute})
		if err != nil || !r.Replayed || r.Bucket != 1 {
			t.Fatalf("retry: %+v %v; want the claim resumed and held in bucket 1", r, err)
		}
		if err := c.Confirm(ctx, item, "a1", alice); err != nil {
			t.Fatal(err)
		}
		wantLevels(t, c, item, Levels{Total: 2, Held: 1, Sold: 1})
	})
}

func TestAnAbandonedClaimEndsAtItsDeadline(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		const n = 2
		item := newItem(t, c, Item{Total: 2, PerBuyer: 1, Buckets: n})
		alice, deadline := abandonClaim(t, c, rdb, item, n, "a1", 50*time.Millisecond)
		redistest.WaitFor(t, 5*time.Second, "Redis's clock to pass the claim's deadline", func() bool {
			now, err := b.Client(t).Time(ctx).Result()
			return err == nil && now.UnixMilli() > deadline
		})
		if _, err := c.Sweep(ctx, item, 10); err != nil {
			t.Fatal(err)
		}
		// The claim ended: its buyer may buy with a new order.
		if _, err := c.Reserve(ctx, item, order("a2", alice)); err != nil {
			t.Fatalf("after the claim ended alice buys: %v", err)
		}
		mustAudit(t, c, item)
	})
}

// heldTwice makes alice's order a1, on a new item of three buckets, held
// by two calls, in buckets 1 and 2 (walks "walk1" and "walk2"), for one
// claim in her home bucket 0 that neither has settled. It returns the
// item, alice, the layout, the order and its claim's deadline.
func heldTwice(t *testing.T, c *Counter, rdb RedisClient) (item, alice string, l *layout, o Order, deadline int64) {
	t.Helper()
	const n = 3
	item = newItem(t, c, Item{Total: 3, PerBuyer: 1, Buckets: n})
	alice, deadline = abandonClaim(t, c, rdb, item, n, "a1", time.Minute)
	l = c.layoutFor(item, n)
	o = Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: time.Minute}
	for _, k := range []int{1, 2} {
		if res, err := takeScript.Ints(context.Background(), rdb, takeArgs(l, k, 0, o, deadline, fmt.Sprint("walk", k))); err != nil || res[0] != codeReserved {
			t.Fatalf("take in %d: %v %v", k, res, err)
		}
	}
	return item, alice, l, o, deadline
}

// raceToSettle makes alice's order a1 the prize of heldTwice's two
// calls: bucket 2 settles first, and bucket 1's call, settling second,
// finds the winner's reservation and gives its unit back. It returns
// heldTwice's values.
func raceToSettle(t *testing.T, c *Counter, rdb RedisClient) (item, alice string, l *layout, o Order, deadline int64) {
	t.Helper()
	ctx := context.Background()
	item, alice, l, o, deadline = heldTwice(t, c, rdb)
	if r, err := c.settle(ctx, item, l, 0, 2, o, deadline, false, "walk2"); err != nil || r.Bucket != 2 {
		t.Fatalf("first settle: %+v %v", r, err)
	}
	r, err := c.settle(ctx, item, l, 0, 1, o, deadline, true, "walk1")
	if err != nil || r.Bucket != 2 || !r.Replayed {
		t.Fatalf("losing settle: %+v %v; want the winner's reservation", r, err)
	}
	return item, alice, l, o, deadline
}

func TestOnlyTheHoldingBucketIsHeeded(t *testing.T) {
	// Two calls for one order can hold units in two buckets; the one that
	// loses the race to settle gives its units back, and that news must
	// not end the winner's order in the home.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, alice, _, _, _ := raceToSettle(t, c, rdb)
		if _, err := c.Sweep(ctx, item, 10); err != nil { // delivers bucket 1's news to the home
			t.Fatal(err)
		}
		if err := c.Confirm(ctx, item, "a1", alice); err != nil {
			t.Fatalf("Confirm of the winner's hold: %v", err)
		}
		a := mustAudit(t, c, item)
		if a.Sold != 1 || a.Buckets[1].Available != 1 || a.Buckets[2].Sold != 1 {
			t.Fatalf("after the race: %+v", a)
		}
	})
}

func TestACallThatSettlesOntoAHoldThatEndedIsToldItWasReturned(t *testing.T) {
	// Two calls for alice's order found it held in bucket 2 (one took the
	// unit, the other was told it was there); the first settled the claim
	// and the order was cancelled. The second, settling late onto the same
	// bucket, must not report the order reserved.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newCounter(t, rdb)
		item, alice, l, o, deadline := raceToSettle(t, c, rdb)
		if err := c.Cancel(ctx, item, o.ID, alice); err != nil {
			t.Fatal(err)
		}
		if r, err := c.settle(ctx, item, l, 0, 2, o, deadline, true, "late"); !errors.Is(err, ErrReturned) {
			t.Fatalf("the late settle: %+v %v, want ErrReturned", r, err)
		}
		mustAudit(t, c, item)
	})
}

func TestBucketsSpreadEvenlyOverClusterMasters(t *testing.T) {
	b := redistest.Open(t, redistest.ClusterB)
	ctx := context.Background()
	rdb := b.Client(t)
	c := newCounter(t, rdb)
	nodeOf := clusterSlotOwners(t, b)
	masters := map[string]bool{}
	for _, m := range nodeOf {
		masters[m] = true
	}
	for _, n := range []int{len(masters), 2 * len(masters), 4 * len(masters)} {
		for i := range 20 {
			item := fmt.Sprintf("sku-%d-%d", n, i)
			l := c.layoutFor(item, n)
			per := map[string]int{}
			for _, bk := range l.buckets {
				per[nodeOf[hashtag.Slot(bk.keys[0].(string))]]++
			}
			for m := range masters {
				if per[m] != n/len(masters) {
					t.Fatalf("item %q with %d buckets: %v per master, want %d each", item, n, per, n/len(masters))
				}
			}
		}
	}
	// And the slots are what the cluster computes.
	l := c.layoutFor("sku-check", 3)
	for _, bk := range l.buckets {
		want, err := rdb.ClusterKeySlot(ctx, bk.keys[0].(string)).Result()
		if err != nil || int64(hashtag.Slot(bk.keys[0].(string))) != want {
			t.Fatalf("slot of %v: %d vs %d (%v)", bk.keys[0], hashtag.Slot(bk.keys[0].(string)), want, err)
		}
	}
}

func TestBucketsKeepToTheirMastersSlotRanges(t *testing.T) {
	// For clusters of m equal masters, m dividing n, split as redis-cli
	// --cluster create splits (float32 arithmetic, rounded) and by floor
	// division (as this repository's test cluster is), every master gets
	// n/m buckets. The exception is bucket 0 near a cell's edge: its tag
	// is the item's name, and a split that rounds otherwise may give its
	// slot to the neighbouring master.
	c := newCounter(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	redisCLI := func(m int) []int {
		per := float32(hashtag.Slots) / float32(m)
		starts, first, cursor := []int{}, 0, float32(0)
		for i := range m {
			starts = append(starts, first)
			last := int(math.Round(float64(cursor + per - 1)))
			if last > hashtag.Slots || i == m-1 {
				last = hashtag.Slots - 1
			}
			first = max(last, first) + 1
			cursor += per
		}
		return starts
	}
	floor := func(m int) []int {
		starts := make([]int, m)
		for i := range m {
			starts[i] = i * (hashtag.Slots / m)
		}
		return starts
	}
	masterOf := func(starts []int, slot int) int {
		i := len(starts) - 1
		for starts[i] > slot {
			i--
		}
		return i
	}
	const items = 1000
	for _, n := range []int{2, 3, 4, 6, 8, 9, 12, 16, 64} {
		for m := 2; m <= n; m++ {
			if n%m != 0 {
				continue
			}
			for name, split := range map[string]func(int) []int{"redis-cli": redisCLI, "floor": floor} {
				starts, edges := split(m), 0
				for i := range items {
					item := fmt.Sprintf("sku-%d", i)
					l := c.layoutFor(item, n)
					per := make([]int, m)
					for _, bk := range l.buckets {
						per[masterOf(starts, hashtag.Slot(bk.keys[0].(string)))]++
					}
					if slices.ContainsFunc(per, func(got int) bool { return got != n/m }) {
						// Fine only if the split gives bucket 0's slot to
						// another master than the middle of its cell.
						s0 := hashtag.Slot(l.buckets[0].keys[0].(string))
						c0 := cellOf(s0, n)
						if masterOf(starts, s0) == masterOf(starts, (cellStart(c0, n)+cellStart(c0+1, n))/2) {
							t.Fatalf("%d buckets over %d masters split by %s: %q has %v per master", n, m, name, item, per)
						}
						edges++
					}
				}
				if edges > items/100 {
					t.Fatalf("%d buckets over %d masters split by %s: %d of %d items uneven", n, m, name, edges, items)
				}
			}
		}
	}
}

// clusterSlotOwners maps every slot to the address of the master owning it.
func clusterSlotOwners(t *testing.T, b *redistest.Backend) map[int]string {
	t.Helper()
	ranges, err := b.Client(t).ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	owners := map[int]string{}
	for _, r := range ranges {
		for s := r.Start; s <= r.End; s++ {
			owners[s] = r.Nodes[0].Addr
		}
	}
	if len(owners) != hashtag.Slots {
		t.Fatalf("the cluster covers %d slots", len(owners))
	}
	return owners
}

func TestEveryItemGetsItsOwnKeysFromTheLayoutCache(t *testing.T) {
	c, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	if err != nil {
		t.Fatal(err)
	}
	// More items than the cache holds, twice over: each must still get
	// its own keys after the cache empties.
	for range 2 {
		for i := range maxSingles + maxSingles/2 {
			item := fmt.Sprint("item", i)
			l := c.layoutFor(item, 1)
			if got, want := l.buckets[0].keys[0], c.bucketKeys(item)[0]; got != want || l.item != item || l.n != 1 {
				t.Fatalf("layout of %q: item %q, n %d, key %v; want key %v", item, l.item, l.n, got, want)
			}
		}
	}
	if a, b := c.layoutFor("hot", 1), c.layoutFor("hot", 1); a != b {
		t.Fatal("an item reserved from twice in a row got its layout built twice")
	}
	if n := c.nsingles.Load(); n > maxSingles {
		t.Fatalf("the cache holds %d layouts, more than %d", n, maxSingles)
	}
}

func TestACounterWithAStaleLayoutFollowsARecreatedItem(t *testing.T) {
	// app knows the item with four buckets; admin deletes it and creates
	// it again with two. bob's home in app's layout, bucket 3, no longer
	// exists: app must route again, not report the item unknown.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		app, admin := newCounter(t, rdb), newCounter(t, rdb)
		item := newItem(t, admin, Item{Total: 10, Buckets: 4})
		bob := buyerHomedAt(3, 4, "bob")
		if _, err := app.Reserve(ctx, item, order("o1", bob)); err != nil {
			t.Fatal(err)
		}
		if err := admin.Delete(ctx, item); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Create(ctx, item, Item{Total: 10, Buckets: 2}); err != nil {
			t.Fatal(err)
		}
		if err := app.Confirm(ctx, item, "o1", bob); !errors.Is(err, ErrUnknownOrder) {
			t.Fatalf("Confirm of the deleted item's order: %v, want ErrUnknownOrder", err)
		}
		app.layoutFor(item, 4) // stale again
		if r, err := app.Reserve(ctx, item, order("o2", bob)); err != nil || r.Bucket != home(bob, 2) {
			t.Fatalf("Reserve on the recreated item: %+v %v, want bob's new home, bucket %d", r, err, home(bob, 2))
		}
		if err := admin.Delete(ctx, item); err != nil {
			t.Fatal(err)
		}
		app.layoutFor(item, 4)
		if _, err := app.Reserve(ctx, item, order("o3", bob)); !errors.Is(err, ErrUnknownItem) {
			t.Fatalf("Reserve on the deleted item: %v, want ErrUnknownItem", err)
		}
	})
}

// Two processes create one bucketed item at once, with other totals. The
// first makes bucket 0 and stalls; the second finds bucket 0 and makes
// bucket 1. Only the first created the item, and the item holds its
// total: bucket 1 has the first's share, not the second's (which would
// put units on sale that neither asked for).
func TestConcurrentCreatesReportOneCreatorAndSplitItsTotal(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		first := newCounter(t, b.Client(t, f))
		second := newCounter(t, b.Client(t))
		item := redistest.Key(t)
		if err := b.Client(t).ScriptLoad(ctx, createScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		bucket1 := first.layoutFor(item, 2).buckets[1].keys[0].(string)
		isCreate := redistest.Script(createScript.Hash())
		hold := f.On(func(cmd redis.Cmder) bool { return isCreate(cmd) && redistest.HasArg(bucket1)(cmd) }).Hold().Times(1)
		type result struct {
			created bool
			err     error
		}
		done := make(chan result, 1)
		go func() {
			created, err := first.Create(ctx, item, Item{Total: 10, Buckets: 2})
			done <- result{created, err}
		}()
		redistest.WaitFor(t, 10*time.Second, "the first Create to stall before bucket 1", func() bool { return hold.Hits() == 1 })
		created, err := second.Create(ctx, item, Item{Total: 1000, Buckets: 2})
		if err != nil || created {
			t.Fatalf("the second Create, which found bucket 0 made: %v %v, want not created", created, err)
		}
		hold.Release()
		if r := <-done; r.err != nil || !r.created {
			t.Fatalf("the first Create, which made bucket 0: %v %v, want created", r.created, r.err)
		}
		if a := mustAudit(t, first, item); a.Total != 10 {
			t.Fatalf("total %d after both Creates, want the first's 10", a.Total)
		}
	})
}

// Levels, Audit and Sweep walk the buckets of the layout they learned.
// If the item is deleted and created again with another number of
// buckets while a walk is under way, the walk must start again on the new
// layout: not count bucket 0 twice, nor call the item unknown because a
// bucket it no longer has is gone.
func TestAWalkOverTheBucketsFollowsAnItemCreatedAgainMeanwhile(t *testing.T) {
	for _, again := range []int{3, 1} {
		redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
			ctx := context.Background()
			f := redistest.NewFaults()
			c := newCounter(t, b.Client(t, f))
			admin := newCounter(t, b.Client(t))
			item := newItem(t, admin, Item{Total: 10, Buckets: 2})
			bucket1 := c.layoutFor(item, 2).buckets[1].keys[0].(string)
			walks := []struct {
				name string
				walk func() (Levels, error)
			}{
				{"Levels", func() (Levels, error) { return c.Levels(ctx, item) }},
				{"Audit", func() (Levels, error) { a, err := c.Audit(ctx, item); return a.Levels, err }},
				{"Sweep", func() (Levels, error) {
					if _, err := c.Sweep(ctx, item, 10); err != nil {
						return Levels{}, err
					}
					return c.Levels(ctx, item)
				}},
			}
			total := int64(10)
			for _, w := range walks {
				paused := f.On(redistest.HasArg(bucket1)).Hold().Times(1)
				got := make(chan error, 1)
				var lv Levels
				go func() {
					var err error
					lv, err = w.walk()
					got <- err
				}()
				redistest.WaitFor(t, 10*time.Second, w.name+" to reach bucket 1", func() bool { return paused.Hits() == 1 })
				if err := admin.Delete(ctx, item); err != nil {
					t.Fatal(err)
				}
				total++
				if _, err := admin.Create(ctx, item, Item{Total: total, Buckets: again}); err != nil {
					t.Fatal(err)
				}
				paused.Release()
				if err := <-got; err != nil || lv.Total != total {
					t.Fatalf("%s, the item created again with %d buckets meanwhile: %+v %v, want the new item's total %d", w.name, again, lv, err, total)
				}
				// The next walk pauses at bucket 1 of the layout it learns.
				if err := admin.Delete(ctx, item); err != nil {
					t.Fatal(err)
				}
				if _, err := admin.Create(ctx, item, Item{Total: total, Buckets: 2}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A Delete that failed part-way leaves bucket 0 of a bucketed item and
// not the others. Levels, Audit and Sweep find a bucket gone however often
// they route again: they say so, not that the buckets keep changing, and
// not ErrUnknownItem (a Create under way looks the same, and bucket 0
// takes orders meanwhile).
func TestAHalfDeletedItemIsReportedMissingABucketToAWalk(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: 2, Buckets: 2})
		bucket0 := c.layoutFor(item, 2).buckets[0].keys[0]
		isDel := redistest.Command("del")
		f.On(func(cmd redis.Cmder) bool { return isDel(cmd) && cmd.Args()[1] == bucket0 }).Fail(errDied).Times(1)
		if err := c.Delete(ctx, item); !errors.Is(err, errDied) {
			t.Fatalf("Delete: %v, want it to die before bucket 0", err)
		}
		_, lerr := c.Levels(ctx, item)
		_, aerr := c.Audit(ctx, item)
		_, serr := c.Sweep(ctx, item, 10)
		for name, err := range map[string]error{"Levels": lerr, "Audit": aerr, "Sweep": serr} {
			if !errors.Is(err, ErrIncomplete) || errors.Is(err, ErrUnknownItem) {
				t.Errorf("%s: %v, want a bucket missing", name, err)
			}
		}
	})
}

// While a Create of a bucketed item is under way, bucket 0 exists and
// takes orders: a walk over the buckets must not call the item unknown.
func TestAnItemBeingCreatedIsNotUnknownToAWalk(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		const n = 2
		item := redistest.Key(t)
		bucket1 := c.layoutFor(item, n).buckets[1].keys[0]
		isCreate := redistest.Script(createScript.Hash())
		paused := f.On(func(cmd redis.Cmder) bool {
			args := cmd.Args()
			return isCreate(cmd) && len(args) > 3 && args[3] == bucket1
		}).Hold().Times(1)
		created := make(chan error, 1)
		go func() {
			_, err := c.Create(ctx, item, Item{Total: 4, Buckets: n})
			created <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "Create to pause before bucket 1", func() bool { return paused.Hits() == 1 })
		if r, err := c.Reserve(ctx, item, order("a", buyerHomedAt(0, n, "a"))); err != nil || r.Bucket != 0 {
			t.Fatalf("a, homed in bucket 0: %+v %v", r, err)
		}
		_, err := c.Levels(ctx, item)
		paused.Release()
		if cerr := <-created; cerr != nil {
			t.Fatal(cerr)
		}
		if errors.Is(err, ErrUnknownItem) {
			t.Fatalf("Levels during Create, after a reservation of it: %v, want anything but ErrUnknownItem", err)
		}
	})
}
