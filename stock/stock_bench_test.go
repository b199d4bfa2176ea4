package stock

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// benchCounter returns a Counter on the spawned redis-server, and an item
// of it with stock out of reach, a per-buyer limit of one and buckets
// buckets.
func benchCounter(b *testing.B, buckets int) (*Counter, string) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SingleAddr(b)})
	b.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	item := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), buckets)
	if _, err := c.Create(context.Background(), item, Item{Total: 1 << 40, PerBuyer: 1, Buckets: buckets, TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	return c, item
}

// benchOrder is the n-th order of a run: a new order of a new buyer, so
// that the per-buyer limit is checked every time.
func benchOrder(prefix string, n int64) Order {
	id := prefix + strconv.FormatInt(n, 36)
	return Order{ID: id, Buyer: id, Quantity: 1, Hold: time.Minute}
}

// BenchmarkReserve measures reservations of one unit by a new buyer on a
// real redis-server, serially and from parallel goroutines (whose calls
// go to Redis in batches), on an item in one bucket and in four.
func BenchmarkReserve(b *testing.B) {
	for _, buckets := range []int{1, 4} {
		b.Run(fmt.Sprint("buckets=", buckets), func(b *testing.B) {
			benchLoop(b, buckets, func(ctx context.Context, c *Counter, item string, o Order) error {
				r, err := c.Reserve(ctx, item, o)
				if err == nil && r.State != Held {
					err = fmt.Errorf("order %s: %v, want held", o.ID, r.State)
				}
				return err
			})
		})
	}
}

// BenchmarkReserveConfirm measures an order's whole life when it is
// paid: a reservation and its confirmation, two round trips.
func BenchmarkReserveConfirm(b *testing.B) {
	benchLoop(b, 1, func(ctx context.Context, c *Counter, item string, o Order) error {
		if _, err := c.Reserve(ctx, item, o); err != nil {
			return err
		}
		return c.Confirm(ctx, item, o.ID, o.Buyer)
	})
}

// benchLoop runs call with a new order each time, serially and from
// parallel goroutines.
func benchLoop(b *testing.B, buckets int, call func(ctx context.Context, c *Counter, item string, o Order) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		c, item := benchCounter(b, buckets)
		b.ReportAllocs()
		var n int64
		for b.Loop() {
			n++
			if err := call(ctx, c, item, benchOrder("o", n)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		c, item := benchCounter(b, buckets)
		var seq atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(ctx, c, item, benchOrder("o", seq.Add(1))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
