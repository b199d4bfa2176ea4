package lock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// overlap counts the holders inside at once, and the most there were.
type overlap struct{ inside, most atomic.Int64 }

func (o *overlap) enter() {
	n := o.inside.Add(1)
	for {
		m := o.most.Load()
		if n <= m || o.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (o *overlap) leave() { o.inside.Add(-1) }

func newSemaphore(t *testing.T, c *Client, name string, limit int) *Semaphore {
	t.Helper()
	s, err := c.Semaphore(name, limit)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSemaphoreHandsOutItsLimitAndNoMore(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		s := newSemaphore(t, newClient(t, b.Client(t)), redistest.Key(t), 3)
		var held []*Lease
		for range 3 {
			p, err := s.TryAcquire(ctx, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if p.Fence() != 0 || p.Token() == "" {
				t.Fatalf("permit: fence %d, token %q", p.Fence(), p.Token())
			}
			held = append(held, p)
		}
		if _, err := s.TryAcquire(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a fourth permit of three: %v", err)
		}
		if left, err := held[0].TTL(ctx); err != nil || left <= 0 || left > time.Minute {
			t.Fatalf("TTL of a permit: %v %v", left, err)
		}
		if err := held[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := held[0].Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("a second Unlock: %v, want ErrNotHeld", err)
		}
		p, err := s.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatalf("after a release: %v", err)
		}
		for _, p := range append(held[1:], p) {
			if err := p.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestSemaphoreNeverAdmitsMoreThanItsLimit(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		rdb := b.Client(t)
		name := redistest.Key(t)
		const limit, workers, rounds = 5, 64, 4
		// Four Clients, as four processes would be: their waiters are woken
		// by each other's release messages, not only locally.
		var clients [4]*Semaphore
		for i := range clients {
			clients[i] = newSemaphore(t, newClient(t, rdb), name, limit)
		}
		var held overlap
		var done atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				s := clients[w%len(clients)]
				for range rounds {
					p, err := s.Acquire(ctx, 10*time.Second)
					if err != nil {
						errs <- err
						return
					}
					held.enter()
					time.Sleep(time.Millisecond) // the work done under the permit, so that holders overlap
					held.leave()
					if err := p.Unlock(ctx); err != nil {
						errs <- err
						return
					}
					done.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		m := held.most.Load()
		t.Logf("at most %d holders at once, limit %d", m, limit)
		if m > limit || m < 1 {
			t.Fatalf("%d holders at once, limit %d", m, limit)
		}
		if n := done.Load(); n != workers*rounds {
			t.Fatalf("%d acquisitions, want %d", n, workers*rounds)
		}
	})
}

func TestACrashedHoldersPermitComesBack(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Key(t)
		crashed := newSemaphore(t, newClient(t, rdb), name, 1)
		// Taken for 200 ms and never released nor renewed.
		if _, err := crashed.TryAcquire(ctx, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		other := newSemaphore(t, newClient(t, rdb), name, 1)
		if _, err := other.TryAcquire(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("while the crashed holder's lease runs: %v", err)
		}
		// No release message will come: the waiter retries when the lease
		// it was told of runs out.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p, err := other.Acquire(wctx, time.Minute)
		if err != nil {
			t.Fatalf("waiting out a crashed holder: %v", err)
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAReleaseWakesAWaiterInAnotherProcess(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		name := redistest.Key(t)
		holder := newSemaphore(t, newClient(t, b.Client(t)), name, 1)
		waiter := newSemaphore(t, newClient(t, b.Client(t)), name, 1)
		p, err := holder.TryAcquire(ctx, time.Minute) // a long lease: only a message can wake the waiter in time
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		go func() {
			q, err := waiter.Acquire(wctx, time.Minute)
			if err == nil {
				err = q.Unlock(ctx)
			}
			got <- err
		}()
		// Release once the waiter has asked to be told.
		redistest.WaitFor(t, 10*time.Second, "the waiter to flag the semaphore", func() bool {
			n, err := b.Client(t).Exists(ctx, waiter.wantedKeyArg.(string)).Result()
			return err == nil && n == 1
		})
		start := time.Now()
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		// Without the message it would have waited out the minute's lease.
		if waited := time.Since(start); waited > 5*time.Second {
			t.Fatalf("the waiter took %v after the release", waited)
		}
	})
}

func TestRaisingTheLimitAdmitsWaiters(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Key(t)
		admin := newSemaphore(t, newClient(t, rdb), name, 1)
		p, err := admin.TryAcquire(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		waiter := newSemaphore(t, newClient(t, rdb), name, 1)
		got := make(chan error, 1)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		go func() {
			q, err := waiter.Acquire(wctx, time.Minute)
			if err == nil {
				err = q.Unlock(ctx)
			}
			got <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the waiter to flag the semaphore", func() bool {
			n, err := rdb.Exists(ctx, waiter.wantedKeyArg.(string)).Result()
			return err == nil && n == 1
		})
		// Another process raises the limit while the first permit is held.
		if err := admin.SetLimit(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter after the limit was raised: %v", err)
		}
		// A Semaphore made with a different limit uses the stored one.
		late := newSemaphore(t, newClient(t, rdb), name, 10)
		var more []*Lease
		for {
			q, err := late.TryAcquire(ctx, time.Minute)
			if errors.Is(err, ErrNotObtained) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			more = append(more, q)
		}
		if len(more) != 1 { // 2 in all, one of them p
			t.Fatalf("%d more permits under a limit of 2 with one held", len(more))
		}
		// Lowering it takes nothing back, and admits no one until below it.
		if err := admin.SetLimit(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := late.TryAcquire(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("one held under a lowered limit of 1: %v", err)
		}
		if err := more[0].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestARenewedPermitOutlivesItsTTLAndALostOneSaysSo(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		s := newSemaphore(t, newClient(t, rdb), redistest.Key(t), 1)
		p, err := s.TryAcquire(ctx, 150*time.Millisecond, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		// Wait for three lease lengths of renewals, as Redis counts them.
		deadline := time.Now().Add(450 * time.Millisecond)
		redistest.WaitFor(t, 10*time.Second, "three leases to pass", func() bool { return time.Now().After(deadline) })
		if left, err := p.TTL(ctx); err != nil || left <= 0 {
			t.Fatalf("a renewed permit after three leases: %v %v", left, err)
		}
		if _, err := s.TryAcquire(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a second permit of one while renewed: %v", err)
		}
		// Someone deletes the permits: renewal finds it gone and says so.
		if err := rdb.Del(ctx, s.keyArg.(string)).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the permit's context was not cancelled after it was lost")
		}
		if cause := context.Cause(p.Context()); !errors.Is(cause, ErrLost) {
			t.Fatalf("cause %v, want ErrLost", cause)
		}
		if err := p.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Unlock of a lost permit: %v", err)
		}
	})
}

func TestAPermitShortenedUnderAutoRenewIsRenewedAtTheNewTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		extends := f.On(redistest.Script(semExtendScript.Hash()))
		s := newSemaphore(t, newClient(t, b.Client(t, f)), redistest.Key(t), 1)
		p, err := s.TryAcquire(ctx, 6*time.Second, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		const short = 900 * time.Millisecond
		extended := time.Now()
		if err := p.Extend(ctx, short); err != nil {
			t.Fatal(err)
		}
		after := extends.Hits()
		redistest.WaitFor(t, 10*time.Second, "four renewals or the permit's end", func() bool {
			return extends.Hits() >= after+4 || p.Context().Err() != nil
		})
		if err := p.Context().Err(); err != nil {
			t.Fatalf("the permit ended after Extend(%v): %v", short, context.Cause(p.Context()))
		}
		if since := time.Since(extended); since <= short {
			t.Fatalf("four renewals within %v of Extend(%v)", since, short)
		}
		if _, err := s.TryAcquire(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a second permit of one after the shortened lease's time: %v", err)
		}
		if left, err := p.TTL(ctx); err != nil || left > short {
			t.Fatalf("TTL after renewals at the new ttl: %v %v, want at most %v", left, err, short)
		}
		if err := p.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSemaphoreBadArguments(t *testing.T) {
	b := redistest.Open(t, redistest.Mini)
	c := newClient(t, b.Client(t))
	for _, bad := range []struct {
		name  string
		limit int
	}{{"", 1}, {"s", 0}, {"s", -1}} {
		if _, err := c.Semaphore(bad.name, bad.limit); !errors.Is(err, ErrInvalid) {
			t.Errorf("Semaphore(%q, %d): %v", bad.name, bad.limit, err)
		}
	}
	s := newSemaphore(t, c, "s", 1)
	if _, err := s.TryAcquire(context.Background(), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("TryAcquire with ttl 0: %v", err)
	}
	if err := s.SetLimit(context.Background(), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetLimit(0): %v", err)
	}
}
