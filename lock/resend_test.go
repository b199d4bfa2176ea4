package lock

import (
	"context"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
	"github.com/surgekit/surge/internal/script"
)

// go-redis resends a command whose reply was lost (Options.MaxRetries):
// a release's first run frees the lock, and the resend finds it gone.
// Unlock must still report success, and wake this Client's waiter, which
// would otherwise wait out the lease (a minute here).
func TestAResentReleaseStillUnlocksAndWakesTheWaiter(t *testing.T) {
	// take acquires name once (wait false) or waits for it (wait true).
	type take func(ctx context.Context, c *Client, name string, wait bool) (*Lease, error)
	kinds := []struct {
		name    string
		release *script.Script
		take    take
		other   bool // the waiter is in another Client: no handover, the release tells it
	}{
		{"plain", releaseScript, lockWith(), false},
		{"reentrant", releaseScript, lockWith(Reentrant("")), false},
		{"fair", fairReleaseScript, lockWith(Fair(time.Minute)), true},
		{"permit", semReleaseScript, func(ctx context.Context, c *Client, name string, wait bool) (*Lease, error) {
			s, err := c.Semaphore(name, 1)
			if err != nil {
				return nil, err
			}
			if wait {
				return s.Acquire(ctx, time.Minute)
			}
			return s.TryAcquire(ctx, time.Minute)
		}, false},
		{"write", releaseScript, rwWith(false), false},
		// The waiter is a writer: it waits for the last share.
		{"read share", rwReadReleaseScript, rwWith(true), false},
	}
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				ctx := context.Background()
				name := redistest.Key(t)
				faults := redistest.NewFaults()
				c := newClient(t, b.Client(t, faults))
				held, err := k.take(ctx, c, name, false)
				if err != nil {
					t.Fatal(err)
				}
				waiter := c
				if k.other {
					waiter = newClient(t, b.Client(t))
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				got := make(chan result, 1)
				go func() {
					l, err := k.take(wctx, waiter, name, true)
					got <- result{l, err}
				}()
				redistest.WaitFor(t, 10*time.Second, "the waiter to wait", func() bool { return waiting(waiter, held) })
				resent := redistest.ResendOnce(t, b.Client(t), faults, k.release.Hash(), k.release.Source())
				if err := held.Unlock(ctx); err != nil {
					t.Fatalf("Unlock with its reply lost and resent: %v", err)
				}
				if resent.Hits() != 1 {
					t.Fatalf("%d releases resent, want 1", resent.Hits())
				}
				// Woken by the release, well before the minute's lease.
				r := <-got
				if r.err != nil {
					t.Fatalf("the waiter: %v", r.err)
				}
				if err := r.l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// lockWith takes a lock with opts, once or waiting.
func lockWith(opts ...LockOption) func(ctx context.Context, c *Client, name string, wait bool) (*Lease, error) {
	return func(ctx context.Context, c *Client, name string, wait bool) (*Lease, error) {
		if wait {
			return c.Lock(ctx, name, time.Minute, opts...)
		}
		return c.TryLock(ctx, name, time.Minute, opts...)
	}
}

// rwWith takes a read share (reader) or the write lock once, and waits
// for the write lock.
func rwWith(reader bool) func(ctx context.Context, c *Client, name string, wait bool) (*Lease, error) {
	return func(ctx context.Context, c *Client, name string, wait bool) (*Lease, error) {
		rw, err := c.RWLock(name)
		switch {
		case err != nil:
			return nil, err
		case wait:
			return rw.Lock(ctx, time.Minute)
		case reader:
			return rw.TryRLock(ctx, time.Minute)
		}
		return rw.TryLock(ctx, time.Minute)
	}
}

// leaseWithinKey fails the test if l's local deadline is later than its
// key's expiry in Redis (PTTL rounds down to the millisecond).
func leaseWithinKey(t *testing.T, b *redistest.Backend, l *Lease) {
	t.Helper()
	pttl, err := b.Client(t).PTTL(context.Background(), l.key).Result()
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	left := time.Until(l.deadline)
	l.mu.Unlock()
	if left > pttl+time.Millisecond {
		t.Fatalf("the lease runs %v more, the key %v", left, pttl)
	}
}

// result is what a waiter's Lock returned.
type result struct {
	l   *Lease
	err error
}

// waiting reports whether c has a waiter queued for held's lock.
func waiting(c *Client, held *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[held.key]
	return q != nil && len(q.waiters) > 0 && q.isConfirmed
}

// A fair release that hands the lock to a waiter of its Client, resent
// after a lost reply, finds the lock already the waiter's: the waiter is
// still told at once, and its lease never outlasts the lock in Redis.
func TestAResentFairHandoverStillHandsTheLockOver(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		name := redistest.Key(t)
		faults := redistest.NewFaults()
		c := newClient(t, b.Client(t, faults))
		held, err := c.TryLock(ctx, name, time.Minute, Fair(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		got := make(chan result, 1)
		go func() {
			l, err := c.Lock(wctx, name, 2*time.Second, Fair(time.Minute))
			got <- result{l, err}
		}()
		redistest.WaitFor(t, 10*time.Second, "the waiter's place", func() bool { return queued(t, b, held) == 1 })
		resent := redistest.ResendOnce(t, b.Client(t), faults, fairReleaseScript.Hash(), fairReleaseScript.Source())
		if err := held.Unlock(ctx); err != nil {
			t.Fatalf("Unlock with its reply lost and resent: %v", err)
		}
		if resent.Hits() != 1 {
			t.Fatalf("%d releases resent, want 1", resent.Hits())
		}
		// Told at once: without it, the waiter would come back only when
		// its place needs renewing, 20 s from now.
		r := <-got
		if r.err != nil {
			t.Fatalf("the waiter: %v", r.err)
		}
		l := r.l
		if l.Fence() <= held.Fence() {
			t.Fatalf("fence %d after %d", l.Fence(), held.Fence())
		}
		leaseWithinKey(t, b, l)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// An attempt that finds the fair lock already its own (a handover whose
// reply was lost, or a resent attempt) starts the caller's lease from its
// own send time, later than when the key's lease began: the key's lease
// restarts with it, or the caller would count on a lock Redis has freed.
func TestAFairAttemptThatFindsTheLockItsOwnRestartsTheLease(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		l, err := c.TryLock(ctx, redistest.Key(t), time.Minute, Fair(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		// As if the key's lease had begun long before this attempt.
		if err := b.Client(t).PExpire(ctx, l.key, 200*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		ok, _, err := c.acquire(ctx, l, false, false)
		if err != nil || !ok {
			t.Fatalf("attempt on a lock it holds: %v %v", ok, err)
		}
		leaseWithinKey(t, b, l)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
