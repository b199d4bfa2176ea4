// Package coalesce sends concurrent calls bound for one place (a Redis key,
// a shard) together, in few round trips: group commit for scripts.
//
// Nothing waits to fill a batch. A call that finds fewer than MaxInFlight
// batches in flight leads a batch at once; calls that arrive while the
// flight is full queue, and the next free leader takes them along. A lone
// caller pays a mutex and goes alone; a crowd pays one round trip and the
// script's fixed costs (the EVALSHA dispatch, its checks, the network
// syscalls) per batch instead of per call, which is what keeps a busy
// node from saturating.
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrOutcomeUnknown is joined with the context's error when a call's
// context ends while its request is in a batch in flight: the request may
// or may not have taken effect.
var ErrOutcomeUnknown = errors.New("the request was in flight: its outcome is unknown")

// ErrOrphaned is joined with ErrOutcomeUnknown when the request was in a
// detached batch: the batch lands without its caller, and the Batcher's
// Orphan is handed the request's outcome then.
var ErrOrphaned = errors.New("the request lands without its caller")

// Ended returns why ctx has ended: ctx.Err(), or
// context.DeadlineExceeded once its deadline has passed though its timer
// has not fired yet (go-redis's socket deadline, with
// ContextTimeoutEnabled, fires a moment before it); nil while it runs.
func Ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// Answered reports whether err is a reply the server sent (go-redis's
// redis.Error has RedisError): an outcome known however late it came, not
// a request lost in flight.
func Answered(err error) bool {
	var reply interface {
		error
		RedisError()
	}
	return errors.As(err, &reply)
}

// Unknown returns err, the failure of a request that was in flight when
// its context ended for cause (see Ended), joined with cause and
// ErrOutcomeUnknown, each unless err wraps it already.
func Unknown(err, cause error) error {
	if !errors.Is(err, cause) {
		err = errors.Join(err, cause)
	}
	if !errors.Is(err, ErrOutcomeUnknown) {
		err = errors.Join(err, ErrOutcomeUnknown)
	}
	return err
}

// Send sends reqs, the leader's first, in one batch and returns one result
// per request, in order, or an error for all of them. It runs under the
// leader's context.
type Send[Q, R any] func(ctx context.Context, reqs []Q) ([]R, error)

// A Batcher coalesces calls. The zero value is not ready: set MaxInFlight
// and MaxBatch (both at least 1) before the first Do; then it is safe for
// concurrent use.
type Batcher[Q, R any] struct {
	// MaxInFlight bounds the batches in flight at once. One gives the
	// biggest batches, but then every call waits a whole round trip plus
	// the batch before it; two keep the connection and the server busy
	// while one reply travels back.
	MaxInFlight int
	// MaxBatch bounds the requests in one batch.
	MaxBatch int
	// Detach is for requests that must not run twice. By default, a batch
	// that fails because its leader's context ended is sent again for the
	// others, as it may not have run. With Detach, a batch of more than
	// one request runs on a goroutine of its own under a context the
	// leader's cancellation does not end: a leader that gives up returns
	// at once (with ErrOutcomeUnknown), the batch lands for the others, and
	// nothing is sent again. The client's own timeouts bound the batch.
	// (A leader whose context cannot end, such as context.Background(),
	// sends on its own goroutine: it cannot give up.)
	Detach bool
	// Orphan, if set, is handed the request and the result (or the
	// batch's error) of every call whose caller gave up while its
	// detached batch was in flight, once the batch lands, so that what
	// the caller never learnt (a lock granted after it left, say) can be
	// put right. It runs on the batch's goroutine, after the batch's
	// other calls have their results.
	Orphan func(req Q, res R, err error)

	mu       sync.Mutex
	queue    []*call[Q, R] // FIFO
	inFlight int           // leaders: batches in flight or about to be sent
}

type call[Q, R any] struct {
	req  Q
	done chan struct{} // one send: the call leads, or its result is in

	// Guarded by the Batcher's mu until finished.
	state state
	res   R
	err   error
	retry bool // the batch failed because the leader's context ended
	// orphaned: its caller gave up while its detached batch was in
	// flight.
	orphaned bool
}

type state uint8

const (
	queued state = iota
	leading
	sent
	finished
)

// Do sends req, alone or with others, through send, and returns its
// result. If the caller's context ends first, Do returns an error wrapping
// the context's: before req was sent, req never is; once it is in flight,
// the error also wraps ErrOutcomeUnknown. A batch that failed only
// because its leader's context ended is sent again for the others (see
// Detach).
func (b *Batcher[Q, R]) Do(ctx context.Context, req Q, send Send[Q, R]) (R, error) {
	if err := ctx.Err(); err != nil {
		var zero R
		return zero, err
	}
	for {
		if b.TryAlone() {
			return b.alone(ctx, req, send)
		}
		c := &call[Q, R]{req: req}
		b.mu.Lock()
		if b.inFlight < b.MaxInFlight {
			b.inFlight++
			c.state = leading
			b.mu.Unlock()
		} else {
			c.done = make(chan struct{}, 1)
			b.queue = append(b.queue, c)
			b.mu.Unlock()
			if err := b.wait(ctx, c); err != nil {
				var zero R
				return zero, err
			}
		}
		if c.state == leading {
			if err := b.lead(ctx, c, send); err != nil {
				var zero R
				return zero, err
			}
		}
		// c is finished: nothing writes its fields any more.
		if c.retry {
			if ctx.Err() == nil {
				continue
			}
			// Its own context ended too: the batch was sent, and may
			// have run.
			var zero R
			return zero, errors.Join(ctx.Err(), ErrOutcomeUnknown)
		}
		return c.res, c.err
	}
}

// Queued returns how many calls wait for a place in a batch.
func (b *Batcher[Q, R]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// wait blocks until c leads or is finished, or ctx ends.
func (b *Batcher[Q, R]) wait(ctx context.Context, c *call[Q, R]) error {
	select {
	case <-c.done:
		if ctx.Err() == nil {
			return nil
		}
		// Its caller gave up as it was handed the lead (or its result):
		// decide as if ctx had ended first, or a select that picked this
		// case would send a request whose caller has left.
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch c.state {
	case finished:
		return nil
	case sent:
		if b.Detach {
			// Batches of more than one are detached, and a call that
			// waits is never alone in its batch.
			c.orphaned = true
			return errors.Join(ctx.Err(), ErrOutcomeUnknown, ErrOrphaned)
		}
		return errors.Join(ctx.Err(), ErrOutcomeUnknown)
	case leading:
		// Chosen to lead a batch not sent yet: the next in line leads.
		b.handOver()
	default:
		b.queue = slices.DeleteFunc(b.queue, func(q *call[Q, R]) bool { return q == c })
	}
	return ctx.Err()
}

// handOver gives up a leader's place: the first queued call, if any,
// leads the next batch. The caller holds b.mu.
func (b *Batcher[Q, R]) handOver() {
	if len(b.queue) == 0 {
		b.inFlight--
		return
	}
	next := b.queue[0]
	b.queue = slices.Delete(b.queue, 0, 1)
	next.state = leading
	next.done <- struct{}{}
}

// TryAlone takes a place in flight for a request its caller sends itself,
// alone, if a place is free and no call is queued (nobody to take along):
// the common case of a lone caller, which then needs none of a batch's
// bookkeeping or allocations. It reports whether it took one; if so, the
// caller must call AloneDone once its request has landed (or failed), so
// that calls queued behind it meanwhile get the place.
func (b *Batcher[Q, R]) TryAlone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inFlight < b.MaxInFlight && len(b.queue) == 0 {
		b.inFlight++
		return true
	}
	return false
}

// AloneDone gives back the place TryAlone took.
func (b *Batcher[Q, R]) AloneDone() {
	b.mu.Lock()
	b.handOver()
	b.mu.Unlock()
}

// alone sends req through send as a batch of its own, with the place
// TryAlone took.
func (b *Batcher[Q, R]) alone(ctx context.Context, req Q, send Send[Q, R]) (R, error) {
	res, err := send(ctx, []Q{req})
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("coalesce: %d results for 1 request", len(res))
	}
	b.AloneDone()
	if err != nil {
		var zero R
		if cause := Ended(ctx); cause != nil && !Answered(err) {
			// It gave up with its request in flight.
			err = Unknown(err, cause)
		}
		return zero, err
	}
	return res[0], nil
}

// lead sends lead's request and those queued behind it, finishes every
// call of the batch, and hands the lead on. It returns ctx's error if
// ctx ended before the batch was sent (nothing is: the next in line
// leads), and an error wrapping ErrOrphaned if it ended while a detached
// batch was in flight: the batch then finishes without the leader, and
// lead's fields are not its to read.
func (b *Batcher[Q, R]) lead(ctx context.Context, lead *call[Q, R], send Send[Q, R]) error {
	b.mu.Lock()
	if err := ctx.Err(); err != nil {
		b.handOver()
		b.mu.Unlock()
		return err
	}
	n := min(len(b.queue), b.MaxBatch-1)
	batch := make([]*call[Q, R], 0, 1+n)
	batch = append(append(batch, lead), b.queue[:n]...)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	for _, c := range batch {
		c.state = sent
	}
	b.mu.Unlock()

	reqs := make([]Q, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	// A leader whose context can never end never leaves its batch, so the
	// batch needs no goroutine of its own (which cost a crowd of lottery
	// draws about a tenth of their throughput).
	if !b.Detach || len(batch) == 1 || ctx.Done() == nil {
		res, err := send(ctx, reqs)
		b.finish(ctx, batch, res, err, false)
		return nil
	}
	landed := make(chan struct{})
	go func() {
		res, err := send(context.WithoutCancel(ctx), reqs)
		b.finish(ctx, batch, res, err, true)
		close(landed)
	}()
	select {
	case <-landed:
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if lead.state == finished {
		return nil // it landed as the leader left: its result is in
	}
	lead.orphaned = true
	return errors.Join(ctx.Err(), ErrOutcomeUnknown, ErrOrphaned)
}

// finish hands out the results of batch, whose first call is its leader,
// and hands the lead on. A batch that failed because the leader's context
// ended is marked to be sent again for the others, unless it was
// detached (it then did not fail for that reason).
func (b *Batcher[Q, R]) finish(ctx context.Context, batch []*call[Q, R], res []R, err error, detached bool) {
	if err == nil && len(res) != len(batch) {
		err = fmt.Errorf("coalesce: %d results for %d requests", len(res), len(batch))
	}
	lead := batch[0]
	// The leader's context has ended by its deadline even before its
	// timer fires: the batch then failed on it, not on the others'. A
	// reply of the server is the batch's answer, however late.
	cause := Ended(ctx)
	leaderQuit := !detached && cause != nil && !Answered(err)
	// A Detach batcher never sends a batch again: its requests must not
	// run twice. (Its batches of several are detached; this guards a
	// leader whose context has a deadline but no Done channel.)
	resend := leaderQuit && !b.Detach

	var orphans []*call[Q, R]
	b.mu.Lock()
	for i, c := range batch {
		if err != nil {
			c.err = err
			c.retry = c != lead && resend
			if c == lead && leaderQuit {
				// The leader gave up with its batch in flight.
				c.err = Unknown(err, cause)
			}
		} else {
			c.res = res[i]
		}
		if c.orphaned && b.Orphan != nil {
			orphans = append(orphans, c)
		}
		c.state = finished
		if c != lead {
			c.done <- struct{}{}
		}
	}
	b.handOver()
	b.mu.Unlock()
	// Nobody reads an orphan's fields any more.
	for _, c := range orphans {
		b.Orphan(c.req, c.res, c.err)
	}
}
