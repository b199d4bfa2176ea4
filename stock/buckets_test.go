package stock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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
		r, err := c.Reserve(ctx, item, Order{ID: "a1", Buyer: alice, Quantity: 1, Hold: 50 * time.Millisecond})
		if err != nil || r.Bucket != 1 {
			t.Fatalf("%+v %v", r, err)
		}
		waitFor(t, 5*time.Second, "Redis's clock to pass the deadline", func() bool {
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

func TestAClaimNeverSettledEndsAtItsDeadline(t *testing.T) {
	// A process that claims units in the buyer's home bucket and dies
	// before another bucket holds them leaves a claim: retries are told to
	// wait, and the claim ends at its deadline.
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
		l := c.layoutFor(item, n)
		args := append(reserveScript.Args(3, 8), l.buckets[0].keys[:]...)
		res, err := reserveScript.Ints(ctx, rdb, append(args, "a1", alice, 1, 50, n))
		if err != nil || len(res) != 2 || res[0] != codeClaimed {
			t.Fatalf("claim: %v %v", res, err)
		}
		if _, err := c.Reserve(ctx, item, order("a1", alice)); !errors.Is(err, ErrPending) {
			t.Fatalf("retry during the claim: %v, want ErrPending", err)
		}
		waitFor(t, 5*time.Second, "Redis's clock to pass the claim's deadline", func() bool {
			now, err := rdb.Time(ctx).Result()
			return err == nil && now.UnixMilli() > res[1]
		})
		if _, err := c.Sweep(ctx, item, 10); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Reserve(ctx, item, order("a2", alice)); err != nil {
			t.Fatalf("after the claim ended alice buys: %v", err)
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
