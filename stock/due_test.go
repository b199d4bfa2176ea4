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
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newCounter(t, rdb)
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
		const n = 2
		item := newItem(t, c, Item{Total: 2, Buckets: n})
		ann, ben, bob := buyerHomedAt(0, n, "ann"), buyerHomedAt(1, n, "ben"), buyerHomedAt(0, n, "bob")
		for _, o := range []Order{order("a0", ann), order("b1", ben)} {
			if _, err := c.Reserve(ctx, item, o); err != nil {
				t.Fatal(err)
			}
		}
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
		due := c.layoutFor(item, n).buckets[0].keys[1].(string)
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
