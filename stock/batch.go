package stock

import (
	"context"
	"errors"
	"fmt"

	"github.com/surgekit/surge/internal/coalesce"
)

// maxBatch bounds the orders sent in one reserve script call.
const maxBatch = 64

// maxInFlight bounds the reserve script calls in flight at once for one
// bucket from one Counter. One would give the biggest batches, but then
// every order waits for a whole round trip plus the batch before it; more
// keep the connection and the server busy while a reply travels back and
// its callers come round with their next orders. From sixteen goroutines
// three measured 6% more reservations per second than two (median of 8
// paired runs, 2026-11-26), and four no more than three.
const maxInFlight = 3

// Concurrent Reserve calls whose buyers have their home on one bucket go
// to Redis together (internal/coalesce): reserve.lua decides each order in
// turn, as if it had come alone. Nothing waits to fill a batch: a caller
// that finds fewer than maxInFlight batches in flight sends its order at
// once, and the orders that arrive meanwhile go together in the next one.
// A lone caller pays a mutex; a crowd pays one round trip and a handful of
// Redis commands per batch instead of per order, which is what keeps a hot
// item's node from saturating.
//
// Each bucket of a layout has its batcher, made on the bucket's first
// Reserve and kept as long as the layout is (buckets.go): one layout is
// one bucket count, and a batch carries one count. Should two layouts of
// an item be in use at once (one just evicted from the cache), their
// batches only coalesce apart.
type batcher struct {
	coalesce.Batcher[Order, [4]int64]
	send coalesce.Send[Order, [4]int64]
}

// batcherFor returns the batcher of l's bucket h, making it if needed.
func (c *Counter) batcherFor(l *layout, h int) *batcher {
	bk := &l.buckets[h]
	if b := bk.batcher.Load(); b != nil {
		return b
	}
	b := &batcher{}
	b.MaxInFlight, b.MaxBatch = maxInFlight, maxBatch
	b.send = func(ctx context.Context, orders []Order) ([][4]int64, error) {
		args := append(reserveScript.Args(3, 4+4*len(orders)), bk.keys[:]...)
		args = append(args, l.n)
		for _, o := range orders {
			args = append(args, o.ID, o.Buyer, o.Quantity, o.Hold.Milliseconds())
		}
		res, err := c.call(ctx, l.item, reserveScript, args)
		if err != nil {
			return nil, err
		}
		if len(res) != 4*len(orders) {
			return nil, fmt.Errorf("stock: reserve %q: %d integers in reply to %d orders", l.item, len(res), len(orders))
		}
		out := make([][4]int64, len(orders))
		for i := range out {
			copy(out[i][:], res[4*i:])
		}
		return out, nil
	}
	if bk.batcher.CompareAndSwap(nil, b) {
		return b
	}
	return bk.batcher.Load()
}

// reserveHome runs o on the buyer's home bucket h, batched with the
// concurrent calls for that bucket, and returns reserve.lua's four-integer
// answer for it. A batch that failed only because its sender's context
// ended is sent again for the others: a reserved order is replayed, not
// reserved twice.
func (c *Counter) reserveHome(ctx context.Context, l *layout, h int, o Order) ([4]int64, error) {
	b := c.batcherFor(l, h)
	res, err := b.Do(ctx, o, b.send)
	switch {
	case errors.Is(err, coalesce.ErrOutcomeUnknown):
		// The context's end says why (its deadline may have passed a
		// moment before its timer fires: coalesce.Ended).
		cause := coalesce.Ended(ctx)
		if cause == nil {
			cause = err
		}
		return res, mayBeReserved(o, cause)
	case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return res, fmt.Errorf("stock: order %q: %w", o.ID, err)
	}
	return res, err
}
