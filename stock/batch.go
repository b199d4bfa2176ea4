package stock

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// maxBatch bounds the orders sent in one reserve script call.
const maxBatch = 64

// maxInFlight bounds the reserve script calls in flight at once for one
// bucket from one Counter. One would give the biggest batches, but then
// every order waits for a whole round trip plus the batch before it: a
// second call in flight keeps the connection and the server busy while the
// first one's reply travels back.
const maxInFlight = 2

// A batcher gathers concurrent Reserve calls whose buyers have their home
// on one bucket and sends them in few script calls (reserve.lua decides
// each order in turn, as if it had come alone). Nothing waits to fill a
// batch: a caller that finds fewer than maxInFlight batches in flight sends
// its order at once, and the orders that arrive while the batches are in
// flight queue and go together in the next one, sent by the first of them.
// A lone caller pays a mutex; a crowd pays one round trip and a handful of
// Redis commands per batch instead of per order, which is what keeps a hot
// item's node from saturating.
type batcher struct {
	key string // the bucket's hash key, its name in Counter.batchers

	mu       sync.Mutex
	pending  []*pending // queued calls, FIFO
	inFlight int        // leaders: batches in flight or about to be sent
	dead     bool       // removed from Counter.batchers: join another
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
			c.send(item, l, b, p)
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

// join queues p on key's batcher, creating it if needed. p leads a batch
// of its own if fewer than maxInFlight are in flight.
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
		if b.inFlight < maxInFlight {
			b.inFlight++
			p.state = leading
		} else {
			b.pending = append(b.pending, p)
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
		// Led to a batch not sent yet: its place goes to the next in line.
		b.handOver()
	default:
		b.pending = slices.DeleteFunc(b.pending, func(q *pending) bool { return q == p })
	}
	return fmt.Errorf("stock: order %q: %w", p.order.ID, p.ctx.Err())
}

// handOver gives up a leader's place: the first queued call, if any, leads
// the next batch. The caller holds b.mu.
func (b *batcher) handOver() {
	if len(b.pending) > 0 {
		next := b.pending[0]
		b.pending = slices.Delete(b.pending, 0, 1)
		next.state = leading
		next.done <- struct{}{}
		return
	}
	b.inFlight--
}

// send sends lead's order and the calls queued behind it as one batch,
// finishes every call in it, and hands the lead on.
func (c *Counter) send(item string, l *layout, b *batcher, lead *pending) {
	b.mu.Lock()
	size := 0
	for size < len(b.pending) && size < maxBatch-1 && b.pending[size].n == lead.n {
		size++
	}
	batch := make([]*pending, 0, 1+size)
	batch = append(append(batch, lead), b.pending[:size]...)
	rest := copy(b.pending, b.pending[size:])
	clear(b.pending[rest:])
	b.pending = b.pending[:rest]
	for _, p := range batch {
		p.state = sent
	}
	size = len(batch)
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
	if b.inFlight == 0 {
		b.dead = true
		c.batchers.CompareAndDelete(b.key, b)
	}
}
