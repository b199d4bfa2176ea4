package stock

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// maxBatch bounds the orders sent in one reserve script call.
const maxBatch = 64

// A batcher gathers concurrent Reserve calls whose buyers have their home
// on one bucket and sends them in one script call (reserve.lua decides each
// order in turn, as if it had come alone). Nothing waits to fill a batch:
// a caller that finds no batch in flight sends its order at once, and the
// orders that arrive while a batch is in flight go together in the next
// one, sent by the first of them. A lone caller pays a mutex; a crowd pays
// one round trip and a handful of Redis commands per batch instead of per
// order, which is what keeps a hot item's node from saturating.
type batcher struct {
	key string // the bucket's hash key, its name in Counter.batchers

	mu      sync.Mutex
	pending []*pending // FIFO; pending[0] sends the next batch
	busy    bool       // a batch is in flight or about to be sent
	dead    bool       // removed from Counter.batchers: join another
}

// pending is one Reserve call's order in a batcher.
type pending struct {
	ctx   context.Context
	n     int // buckets the caller routed with: a batch shares it
	order Order
	done  chan struct{} // one send: the call leads the next batch, or its result is in

	// Guarded by the batcher's mu.
	state pendingState
	res   [4]int64
	err   error
	retry bool // the batch failed because of its sender's context, not this call's
}

type pendingState int

const (
	queued   pendingState = iota
	leading               // sends the next batch, its own order first
	sent                  // in a batch in flight
	finished              // res or err is set
)

// reserveHome runs o on the buyer's home bucket h, batched with the
// concurrent calls for that bucket, and returns reserve.lua's four-integer
// answer for it.
func (c *Counter) reserveHome(ctx context.Context, item string, l *layout, h int, o Order) ([4]int64, error) {
	key := l.buckets[h].keys[0].(string)
	for {
		p := &pending{ctx: ctx, n: l.n, order: o, done: make(chan struct{}, 1)}
		b := c.join(key, p)
		if err := b.wait(p); err != nil {
			return [4]int64{}, err
		}
		if p.state == leading {
			c.send(item, l, b)
		}
		// The batcher has finished p: nothing writes its fields any more.
		if p.retry && ctx.Err() == nil {
			// Another call's context ended its batch: the order may or may
			// not have gone through, and sending it again is safe (a
			// reserved order is replayed, not reserved twice).
			continue
		}
		return p.res, p.err
	}
}

// join queues p on key's batcher, creating it if needed. p leads if no
// batch is in flight.
func (c *Counter) join(key string, p *pending) *batcher {
	for {
		v, ok := c.batchers.Load(key)
		if !ok {
			v, _ = c.batchers.LoadOrStore(key, &batcher{key: key})
		}
		b := v.(*batcher)
		b.mu.Lock()
		if b.dead {
			b.mu.Unlock()
			continue
		}
		b.pending = append(b.pending, p)
		if !b.busy {
			b.busy, p.state = true, leading
		}
		b.mu.Unlock()
		return b
	}
}

// wait blocks until p leads or is finished, or its context ends. A call
// whose context ends before its order was sent leaves without a trace; one
// whose order is in flight cannot know the outcome (a retry of the order
// will tell).
func (b *batcher) wait(p *pending) error {
	b.mu.Lock()
	if p.state == leading || p.state == finished {
		b.mu.Unlock()
		return nil
	}
	b.mu.Unlock()
	select {
	case <-p.done:
		return nil
	case <-p.ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch p.state {
	case finished:
		return nil
	case sent:
		return fmt.Errorf("stock: order %q: %w (it may have been reserved: retry it with the same id to learn)", p.order.ID, p.ctx.Err())
	case leading:
		b.pending = slices.DeleteFunc(b.pending, func(q *pending) bool { return q == p })
		b.handOver()
	default:
		b.pending = slices.DeleteFunc(b.pending, func(q *pending) bool { return q == p })
	}
	return fmt.Errorf("stock: order %q: %w", p.order.ID, p.ctx.Err())
}

// handOver passes the lead to the first queued call, or retires the
// batcher when none is left. The caller holds b.mu.
func (b *batcher) handOver() {
	if len(b.pending) > 0 {
		next := b.pending[0]
		next.state = leading
		next.done <- struct{}{}
		return
	}
	b.busy = false
}

// send sends the batch led by the first pending call (whose own order it
// holds), finishes every call in it, and hands the lead on.
func (c *Counter) send(item string, l *layout, b *batcher) {
	b.mu.Lock()
	lead := b.pending[0]
	size := 1
	for size < len(b.pending) && size < maxBatch && b.pending[size].n == lead.n {
		size++
	}
	batch := slices.Clone(b.pending[:size])
	rest := copy(b.pending, b.pending[size:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	for _, p := range batch {
		p.state = sent
	}
	b.mu.Unlock()

	h := home(lead.order.Buyer, lead.n)
	args := append(reserveScript.Args(3, 4+4*size), l.buckets[h].keys[:]...)
	args = append(args, lead.n)
	for _, p := range batch {
		args = append(args, p.order.ID, p.order.Buyer, p.order.Quantity, p.order.Hold.Milliseconds())
	}
	res, err := c.call(lead.ctx, item, reserveScript, args)
	if err == nil && len(res) != 4*size {
		err = fmt.Errorf("stock: reserve %q: %d integers in reply to %d orders", item, len(res), size)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range batch {
		if err != nil {
			p.err = err
			p.retry = p != lead && lead.ctx.Err() != nil
		} else {
			copy(p.res[:], res[4*i:4*i+4])
		}
		p.state = finished
		if p != lead {
			p.done <- struct{}{}
		}
	}
	b.handOver()
	if !b.busy {
		b.dead = true
		c.batchers.CompareAndDelete(b.key, b)
	}
}
