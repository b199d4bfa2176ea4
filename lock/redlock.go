package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/script"
)

// Redlock is a lock over several independent Redis servers (not replicas
// of one another, not one cluster): the Redlock algorithm. A lock is held
// when a majority of the servers granted it within its lease, so it
// survives the loss of a minority of them. See the package documentation
// for what that does and does not protect against.
//
// Its Leases work as a Client's: Unlock releases the lock on every server,
// Extend and AutoRenew extend it on a majority, Context ends when it is
// lost. They have no fence (Fence is 0): independent servers share no
// counter. A Redlock is safe for concurrent use.
type Redlock struct {
	nodes  []RedisClient
	prefix string
	quorum int
}

// NewRedlock returns a Redlock over nodes, one client per independent
// server; an odd number (3 or 5) is usual. The quorum is len(nodes)/2+1.
func NewRedlock(nodes []RedisClient, opts ...Option) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalid)
	}
	for i, n := range nodes {
		if script.IsNil(n) {
			return nil, fmt.Errorf("%w: node %d is a nil client", ErrInvalid, i)
		}
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Redlock{nodes: slices.Clone(nodes), prefix: cfg.prefix, quorum: len(nodes)/2 + 1}, nil
}

// drift is the clock-drift allowance subtracted from a lease's validity:
// 1% of the lease plus 2 ms, as the algorithm's description suggests.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// TryLock makes one attempt to take the lock called name for ttl on a
// majority of the servers. It returns ErrNotObtained if it could not
// (held elsewhere, servers down, or the attempt took so long that no
// lease was left); the servers it did lock are released at once.
//
// The Lease is valid for ttl minus the time the attempt took minus the
// drift allowance; its Context ends then, unless it is extended.
// Reentrant is not supported.
func (r *Redlock) TryLock(ctx context.Context, name string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, err := r.newLease(ctx, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	if err := r.attempt(ctx, l); err != nil {
		return nil, err
	}
	return l, nil
}

// Lock takes the lock, retrying after a jittered, growing delay (5 ms to
// 250 ms) until it succeeds or ctx ends; then the error matches both
// ErrNotObtained and ctx.Err(). Waiters poll: a release would have to be
// announced by a majority of servers, and each is independent.
func (r *Redlock) Lock(ctx context.Context, name string, ttl time.Duration, opts ...LockOption) (*Lease, error) {
	l, err := r.newLease(ctx, name, ttl, opts)
	if err != nil {
		return nil, err
	}
	var backoff time.Duration
	for {
		err := r.attempt(ctx, l)
		if !errors.Is(err, ErrNotObtained) {
			if err != nil {
				return nil, err
			}
			return l, nil
		}
		if ctx.Err() != nil {
			return nil, notObtained(ctx.Err())
		}
		backoff = nextBackoff(backoff)
		t := time.NewTimer(jitter(backoff))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, notObtained(ctx.Err())
		}
	}
}

func (r *Redlock) newLease(ctx context.Context, name string, ttl time.Duration, opts []LockOption) (*Lease, error) {
	if err := hashtag.CheckName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	lc, token, err := plainLease(ctx, ttl, opts, "a Redlock lock")
	if err != nil {
		return nil, err
	}
	key := hashtag.Key(r.prefix, name, "")
	l := baseLease(ctx, token, ttl, lc)
	l.red, l.name, l.key, l.keyArg, l.drift = r, name, key, key, drift(l.ttl)
	return l, nil
}

// tally counts the answers of the nodes to one call.
type tally struct {
	yes, no int   // answered true, answered false
	failed  int   // failed, or had not answered when the context ended
	err     error // the first failure
}

// each runs call on every node at once and counts every answer.
func (r *Redlock) each(ctx context.Context, call func(ctx context.Context, node RedisClient) (bool, error)) tally {
	return r.gather(ctx, nil, 0, nil, call)
}

// straggle is how long extend and release wait for the other nodes once
// a majority answered. Healthy nodes answer within it, so no call is left
// running (or cancelled mid-way, which costs go-redis the connection);
// a hung node does not hold the caller up for more than it.
const straggle = 50 * time.Millisecond

// gather runs call on every node at once and counts the answers as they
// come. With enough, once enough(the count so far) is true, it waits at
// most grace more for the other answers; the calls still running then run
// on. It also returns when ctx ends, counting the nodes that have not
// answered as failed. done, if not nil, runs once all calls have returned.
func (r *Redlock) gather(ctx context.Context, enough func(tally) bool, grace time.Duration, done func(), call func(ctx context.Context, node RedisClient) (bool, error)) tally {
	type answer struct {
		yes bool
		err error
	}
	answers := make(chan answer, len(r.nodes)) // late answers never block
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			yes, err := call(ctx, n)
			answers <- answer{yes, err}
		}()
	}
	if done != nil {
		go func() {
			wg.Wait()
			done()
		}()
	}
	var t tally
	var graceOver <-chan time.Time // set once enough answered
	for left := len(r.nodes); left > 0; left-- {
		var a answer
		select {
		case a = <-answers:
		case <-graceOver:
			return t
		case <-ctx.Done():
			select {
			case a = <-answers:
				// An answer that came in meanwhile still counts (done may
				// end ctx once every call has answered).
			default:
				// A node's client may not heed the context (go-redis
				// reads until its ReadTimeout unless
				// ContextTimeoutEnabled): the nodes that have not
				// answered count as failed.
				if t.err == nil {
					t.err = ctx.Err()
				}
				t.failed += left
				return t
			}
		}
		switch {
		case a.err != nil:
			t.failed++
			if t.err == nil {
				t.err = a.err
			}
		case a.yes:
			t.yes++
		default:
			t.no++
		}
		if graceOver == nil && enough != nil && enough(t) {
			if grace <= 0 {
				return t
			}
			timer := time.NewTimer(grace)
			defer timer.Stop()
			graceOver = timer.C
		}
	}
	return t
}

// attempt sets l's key with SET NX PX on every node, and keeps the lock if
// a majority granted it with lease to spare. Otherwise it releases what it
// took and returns ErrNotObtained.
func (r *Redlock) attempt(ctx context.Context, l *Lease) error {
	start := time.Now()
	// A node that does not answer within a tenth of the lease counts as
	// down: waiting longer would eat the lease the others granted. (The
	// deadline bounds a node's socket reads only if its client has
	// ContextTimeoutEnabled; otherwise its ReadTimeout does.)
	//
	// Once a majority granted it, the lock is taken: the other nodes'
	// answers are not waited for, though their SETs go on, so that every
	// node that can hold the lock does. A release waits for them
	// (settled), or a SET that came late could outlive it.
	actx, cancel := context.WithTimeout(ctx, max(l.ttl/10, time.Millisecond))
	settled := make(chan struct{})
	l.settled = settled
	set := []any{"set", l.keyArg, l.tokenArg, "nx", "px", l.ttlArg} // read-only: shared by the nodes
	t := r.gather(actx, func(t tally) bool { return t.yes >= r.quorum }, 0, func() { cancel(); close(settled) }, func(ctx context.Context, n RedisClient) (bool, error) {
		cmd := redis.NewStatusCmd(ctx, set...)
		err := n.Process(ctx, cmd)
		if errors.Is(err, redis.Nil) {
			return false, nil // held by someone else
		}
		return err == nil, err
	})
	granted, err := t.yes, t.err
	validity := l.ttl - time.Since(start) - l.drift
	if granted >= r.quorum && validity > 0 {
		l.start(0, start)
		return nil
	}
	r.abandon(ctx, l)
	if ctx.Err() != nil {
		return notObtained(ctx.Err())
	}
	if err != nil && granted < r.quorum {
		return errors.Join(ErrNotObtained, fmt.Errorf("lock: redlock %q: %d of %d servers granted it: %w", l.name, granted, len(r.nodes), err))
	}
	return ErrNotObtained
}

// abandon releases l on every node, best effort and bounded in time.
func (r *Redlock) abandon(ctx context.Context, l *Lease) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(l.ttl, time.Second))
	defer cancel()
	_, _ = r.release(ctx, l)
}

// release runs release.lua on every node. It reports 1 once a majority
// answered and some node released the lock (waiting for the others at
// most straggle: a hung node must not hold Unlock up), 0 (not held) when a majority
// answered and none held it, and an error when fewer than a majority
// answered: the nodes that did not may still hold the lock, and the
// caller may try again. A minority that does not answer (a node down) is
// no error: its copy cannot make a majority and expires with its lease.
func (r *Redlock) release(ctx context.Context, l *Lease) (int64, error) {
	if l.settled != nil {
		select {
		case <-l.settled:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	args := append(releaseScript.Args(1, 2), l.keyArg, l.tokenArg) // read-only: shared by the nodes
	done := func(t tally) bool { return t.yes > 0 && t.yes+t.no >= r.quorum }
	t := r.gather(ctx, done, straggle, nil, func(ctx context.Context, n RedisClient) (bool, error) {
		res, err := releaseScript.Int(ctx, n, args)
		return res > 0, err
	})
	switch {
	case t.yes+t.no < r.quorum:
		return 0, fmt.Errorf("%d of %d servers answered (%d released it), fewer than a majority: %w", t.yes+t.no, len(r.nodes), t.yes, t.err)
	case t.yes > 0:
		return 1, nil
	}
	return 0, nil
}

// extend runs extend.lua on every node. It reports whether a majority
// extended the lock once one has (waiting for the others at most
// straggle): a node that hangs must not hold up the answer until the
// lease has run out on the others. When too few
// did but the nodes that failed to answer could still make up a majority,
// it returns their error instead, so that renewal retries rather than
// declaring the lock lost.
func (r *Redlock) extend(ctx context.Context, l *Lease, ttl time.Duration) (bool, error) {
	args := append(extendScript.Args(1, 3), l.keyArg, l.tokenArg, ttl.Milliseconds())
	t := r.gather(ctx, func(t tally) bool { return t.yes >= r.quorum }, straggle, nil, func(ctx context.Context, n RedisClient) (bool, error) {
		res, err := extendScript.Int(ctx, n, args)
		return res == 1, err
	})
	switch {
	case t.yes >= r.quorum:
		return true, nil
	case t.yes+t.failed >= r.quorum:
		return false, t.err
	}
	return false, nil
}

// pttl returns the lease left as a majority sees it: the quorum-th
// largest PTTL among the nodes that hold l, less the drift allowance;
// false if fewer than a majority hold it.
func (r *Redlock) pttl(ctx context.Context, l *Lease) (time.Duration, bool, error) {
	var mu sync.Mutex
	var left []int64
	t := r.each(ctx, func(ctx context.Context, n RedisClient) (bool, error) {
		ms, err := pttlScript.Int(ctx, n, append(pttlScript.ArgsRO(1, 2), l.keyArg, l.tokenArg))
		if err == nil && ms >= 0 {
			mu.Lock()
			left = append(left, ms)
			mu.Unlock()
		}
		return err == nil, err
	})
	// Calls still running after ctx ended may append yet: take a copy.
	mu.Lock()
	held := slices.Clone(left)
	mu.Unlock()
	if len(held) < r.quorum {
		if len(held)+t.failed >= r.quorum {
			return 0, false, t.err
		}
		return 0, false, nil
	}
	slices.Sort(held)
	slices.Reverse(held)
	return max(time.Duration(held[r.quorum-1])*time.Millisecond-l.drift, 0), true, nil
}
