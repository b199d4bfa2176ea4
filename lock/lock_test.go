package lock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/surgekit/surge/internal/redistest"
)

func newClient(t *testing.T, rdb RedisClient, opts ...Option) *Client {
	t.Helper()
	c, err := New(rdb, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// lockAndUnlock takes the lock in the background (giving up after 30 s)
// and releases it at once; the channel reports the outcome.
func lockAndUnlock(c *Client, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := c.Lock(ctx, name, time.Minute)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// expire makes Redis drop the lock as if its lease ran out.
func expire(t *testing.T, rdb redis.UniversalClient, key string) {
	t.Helper()
	ctx := context.Background()
	if err := rdb.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 5*time.Second, "the lock key to expire", func() bool {
		n, err := rdb.Exists(ctx, key).Result()
		return err == nil && n == 0
	})
}

func TestTryLockIsExclusiveAndUnlockFreesIt(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		name := redistest.Key(t)

		first, err := c.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("first TryLock: %v", err)
		}
		if _, err := c.TryLock(ctx, name, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("second TryLock: got %v, want ErrNotObtained", err)
		}
		if err := first.Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		second, err := c.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("TryLock after Unlock: %v", err)
		}
		if second.Token() == first.Token() {
			t.Fatal("two acquisitions share an owner token")
		}
		if err := second.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLockKeysAreBornWithTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		l, err := c.TryLock(ctx, name, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{l.key, l.key + fenceSuffix} {
			pttl, err := rdb.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if pttl <= 0 {
				t.Errorf("%s has PTTL %v, want a positive TTL", key, pttl)
			}
		}
		if pttl, _ := rdb.PTTL(ctx, l.key).Result(); pttl > 30*time.Second {
			t.Errorf("lock PTTL %v exceeds the lease", pttl)
		}
	})
}

func TestUnlockNeverFreesAnotherOwnersLock(t *testing.T) {
	// The Moutai sequence: A's lease expires while A is still working, B takes
	// the lock, A finishes and releases. A must get ErrNotHeld and B must
	// still hold the lock.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)

		a, err := c.TryLock(ctx, name, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		// A's lease runs out, as A sees it and as Redis does.
		<-a.Context().Done()
		redistest.WaitFor(t, 5*time.Second, "the lock key to expire", func() bool {
			n, err := rdb.Exists(ctx, a.key).Result()
			return err == nil && n == 0
		})
		bLease, err := c.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("B could not take the expired lock: %v", err)
		}
		if err := a.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("A's late Unlock: got %v, want ErrNotHeld", err)
		}
		if err := a.Extend(ctx, time.Minute); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("A's late Extend: got %v, want ErrNotHeld", err)
		}
		if _, err := a.TTL(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("A's late TTL: got %v, want ErrNotHeld", err)
		}
		if _, err := c.TryLock(ctx, name, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("after A's late Unlock the lock is free (got %v): A freed B's lock", err)
		}
		if err := bLease.Unlock(ctx); err != nil {
			t.Fatalf("B's Unlock: %v", err)
		}
		if err := bLease.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second Unlock: got %v, want ErrNotHeld", err)
		}
	})
}

func TestExtendAndTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		l, err := c.TryLock(ctx, redistest.Key(t), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		left, err := l.TTL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left <= 0 || left > 10*time.Second {
			t.Fatalf("TTL = %v, want in (0, 10s]", left)
		}
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		left, err = l.TTL(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left <= 10*time.Second || left > time.Minute {
			t.Fatalf("TTL after Extend(1m) = %v, want in (10s, 1m]", left)
		}
		if err := l.Extend(ctx, 0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Extend(0): got %v, want ErrInvalid", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestFencesStrictlyIncrease(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)

		var last int64
		take := func(step string) *Lease {
			t.Helper()
			l, err := c.TryLock(ctx, name, time.Minute)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if l.Fence() <= last {
				t.Fatalf("%s: fence %d is not above the previous %d", step, l.Fence(), last)
			}
			last = l.Fence()
			return l
		}
		for i := range 5 {
			if err := take(fmt.Sprintf("acquisition %d", i)).Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// A lease that ran out instead of being released.
		l := take("after releases")
		expire(t, rdb, l.key)
		l = take("after the lock key expired")
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The fence counter itself expiring (an hour after its creation).
		if err := rdb.Del(ctx, l.key+fenceSuffix).Err(); err != nil {
			t.Fatal(err)
		}
		take("after the fence counter expired")
	})
}

// fencedStore is storage that accepts a write only with a fence at least as
// high as any it accepted before: what the package doc tells users to build.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	value   string
}

var errStaleFence = errors.New("stale fence")

func (s *fencedStore) write(fence int64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return errStaleFence
	}
	s.highest, s.value = fence, v
	return nil
}

func TestFenceRejectsTheWriteOfAHolderThatPausedPastItsLease(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		store := &fencedStore{}

		slow, err := c.TryLock(ctx, name, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		// slow pauses: its lease runs out and its context says so.
		select {
		case <-slow.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the lease's context was not cancelled after its TTL")
		}
		if cause := context.Cause(slow.Context()); !errors.Is(cause, ErrLost) {
			t.Fatalf("cause = %v, want ErrLost", cause)
		}
		var fast *Lease
		redistest.WaitFor(t, 5*time.Second, "the expired lock to be free", func() bool {
			fast, err = c.TryLock(ctx, name, time.Minute)
			return err == nil
		})
		if err := store.write(fast.Fence(), "fast"); err != nil {
			t.Fatalf("the current holder's write was rejected: %v", err)
		}
		if err := store.write(slow.Fence(), "slow"); !errors.Is(err, errStaleFence) {
			t.Fatalf("the stale holder's late write: got %v, want it rejected", err)
		}
		if store.value != "fast" {
			t.Fatalf("store holds %q, want the current holder's write", store.value)
		}
		if err := fast.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLockIsWokenByAnotherProcessRelease(t *testing.T) {
	// Two Clients stand for two processes. The holder's lease is an hour, so
	// only the release message can wake the waiter in time.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		holder := newClient(t, b.Client(t))
		counts := redistest.NewFaults()
		attempts := counts.On(redistest.Script(acquireScript.Hash()))
		waiter := newClient(t, b.Client(t, counts))
		name := redistest.Key(t)

		held, err := holder.TryLock(ctx, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got := lockAndUnlock(waiter, name)
		// The waiter has subscribed and flagged the holder once it made its
		// second attempt; after that it sleeps.
		observer := b.Client(t)
		redistest.WaitFor(t, 10*time.Second, "the waiter to flag the holder", func() bool {
			v, _ := observer.Get(ctx, held.key).Result()
			return v == held.Token()+"+"
		})
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v", err)
		}
		if n := attempts.Hits(); n != 3 {
			t.Errorf("waiter made %d attempts, want 3 (try, try after subscribing, try after the release)", n)
		}
	})
}

func TestLockGivesUpWhenTheContextEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		held, err := c.TryLock(ctx, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = c.Lock(short, name, time.Minute)
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrNotObtained joined with context.DeadlineExceeded", err)
		}
		cancelled, cancel2 := context.WithCancel(ctx)
		cancel2()
		if _, err := c.Lock(cancelled, name, time.Minute); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
			t.Fatalf("Lock with a cancelled context: got %v", err)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		queues, sub := len(c.queues), c.sub
		c.mu.Unlock()
		if queues != 0 || sub != nil {
			t.Fatalf("after the waiter gave up: %d queues, subscription %v; want none", queues, sub)
		}
		_ = rdb.Close()
	})
}

func TestWaitersOfOneClientGetTheLockInArrivalOrder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		name := redistest.Key(t)
		held, err := c.TryLock(ctx, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		queued := func() int {
			c.mu.Lock()
			defer c.mu.Unlock()
			if q := c.queues[held.key]; q != nil {
				return len(q.waiters)
			}
			return 0
		}
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.Lock(ctx, name, time.Hour)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
			}()
			redistest.WaitFor(t, 10*time.Second, fmt.Sprintf("waiter %d to queue", i), func() bool { return queued() == i+1 })
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("acquisition order %v, want 0..%d", order, n-1)
			}
		}
		if len(order) != n {
			t.Fatalf("%d of %d waiters got the lock", len(order), n)
		}
	})
}

func TestMutualExclusionUnderContention(t *testing.T) {
	// Many goroutines in several "processes" (Clients) do a read-modify-write
	// of a Redis counter in two round trips under the lock. Without mutual
	// exclusion updates are lost; with it the count is exact and no two
	// holders ever overlap.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		name := redistest.Key(t)
		counter := redistest.Key(t)
		const clients, perClient, rounds = 4, 8, 10
		var inside, overlaps atomic.Int32
		var wg sync.WaitGroup
		for range clients {
			rdb := b.Client(t)
			c := newClient(t, rdb)
			for range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range rounds {
						l, err := c.Lock(ctx, name, 10*time.Second)
						if err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) > 1 {
							overlaps.Add(1)
						}
						n, err := rdb.Get(ctx, counter).Int()
						if err != nil && !errors.Is(err, redis.Nil) {
							t.Error(err)
						}
						if err := rdb.Set(ctx, counter, n+1, time.Minute).Err(); err != nil {
							t.Error(err)
						}
						inside.Add(-1)
						if err := l.Unlock(ctx); err != nil {
							t.Error(err)
						}
					}
				}()
			}
		}
		wg.Wait()
		if n := overlaps.Load(); n > 0 {
			t.Fatalf("%d times two goroutines held the lock at once", n)
		}
		got, err := b.Client(t).Get(ctx, counter).Int()
		if err != nil {
			t.Fatal(err)
		}
		if want := clients * perClient * rounds; got != want {
			t.Fatalf("counter = %d, want %d: updates were lost", got, want)
		}
	})
}

func TestAutoRenewKeepsTheLockPastItsTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		ctx := context.Background()
		f := redistest.NewFaults()
		renewals := f.On(redistest.Script(extendScript.Hash()))
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		// A renewal may come 400 ms late (a loaded CI machine) before the
		// lease runs out.
		const ttl = 600 * time.Millisecond
		start := time.Now()
		l, err := c.TryLock(ctx, name, ttl, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 10*time.Second, "five renewals", func() bool { return renewals.Hits() >= 5 })
		if elapsed := time.Since(start); elapsed < ttl {
			t.Fatalf("five renewals within %v: renewing faster than every TTL/3", elapsed)
		}
		if time.Since(start) > ttl {
			if _, err := c.TryLock(ctx, name, ttl); !errors.Is(err, ErrNotObtained) {
				t.Fatalf("after %v the renewed lock could be taken by another: %v", time.Since(start), err)
			}
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("context of a renewed lease ended: %v", context.Cause(l.Context()))
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		after := renewals.Hits()
		if !errors.Is(context.Cause(l.Context()), context.Canceled) {
			t.Fatalf("after Unlock, cause = %v, want context.Canceled", context.Cause(l.Context()))
		}
		if _, err := c.TryLock(ctx, name, ttl); err != nil {
			t.Fatalf("after Unlock the lock is not free: %v", err)
		}
		if got := renewals.Hits(); got != after {
			t.Fatalf("%d renewals ran after Unlock returned", got-after)
		}
		_ = rdb.Close()
	})
}

func TestAutoRenewSignalsALostLock(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		l, err := c.TryLock(ctx, redistest.Key(t), 300*time.Millisecond, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		// Someone else's lock now sits under the key (an operator, a bug, a
		// failover that lost it and a new owner took it).
		if err := rdb.Set(ctx, l.key, "someone-else", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the lease's context was not cancelled after the lock was taken over")
		}
		cause := context.Cause(l.Context())
		if !errors.Is(cause, ErrLost) || !errors.Is(cause, ErrNotHeld) {
			t.Fatalf("cause = %v, want ErrLost and ErrNotHeld", cause)
		}
		if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Unlock of a lost lease: got %v, want ErrNotHeld", err)
		}
		if v, _ := rdb.Get(ctx, l.key).Result(); v != "someone-else" {
			t.Fatalf("the other owner's lock was touched: %q", v)
		}
	})
}

func TestAutoRenewGivesUpWhenRedisIsUnreachable(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		const ttl = 300 * time.Millisecond
		l, err := c.TryLock(ctx, redistest.Key(t), ttl, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		failing := f.On(redistest.Script(extendScript.Hash())).Fail(io.ErrUnexpectedEOF)
		select {
		case <-l.Context().Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the lease's context was not cancelled while renewal kept failing")
		}
		cause := context.Cause(l.Context())
		if !errors.Is(cause, ErrLost) || !errors.Is(cause, io.ErrUnexpectedEOF) {
			t.Fatalf("cause = %v, want ErrLost wrapping the renewal error", cause)
		}
		if failing.Hits() < 2 {
			t.Fatalf("renewal gave up after %d attempts; it should retry until the lease runs out", failing.Hits())
		}
	})
}

func TestExtendShorterUnderAutoRenewMovesRenewalsToTheNewTTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		ctx := context.Background()
		f := redistest.NewFaults()
		extends := f.On(redistest.Script(extendScript.Hash()))
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		l, err := c.TryLock(ctx, name, 6*time.Second, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		// The first renewal of the 6 s lease is due two seconds from now,
		// long after a 900 ms lease has run out: the watchdog must
		// reschedule.
		const short = 900 * time.Millisecond
		extended := time.Now()
		if err := l.Extend(ctx, short); err != nil {
			t.Fatal(err)
		}
		after := extends.Hits()
		redistest.WaitFor(t, 10*time.Second, "four renewals or the lease's end", func() bool {
			return extends.Hits() >= after+4 || l.Context().Err() != nil
		})
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the lease ended after Extend(%v): %v", short, context.Cause(l.Context()))
		}
		if since := time.Since(extended); since <= short {
			t.Fatalf("four renewals within %v of Extend(%v): renewing faster than every TTL/3", since, short)
		}
		if _, err := newClient(t, rdb).TryLock(ctx, name, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another owner after the shortened lease's time: %v", err)
		}
		if left, err := l.TTL(ctx); err != nil || left > short {
			t.Fatalf("TTL after renewals at the new ttl: %v %v, want at most %v", left, err, short)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		stopped := extends.Hits()
		if _, err := newClient(t, rdb).TryLock(ctx, name, time.Minute); err != nil {
			t.Fatalf("after Unlock the lock is not free: %v", err)
		}
		if got := extends.Hits(); got != stopped {
			t.Fatalf("%d renewals ran after Unlock returned", got-stopped)
		}
		_ = rdb.Close()
	})
}

func TestInvalidArgumentsNeverReachRedis(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		seen := f.On(redistest.Any())
		c := newClient(t, rdb)

		cases := []struct {
			name string
			ttl  time.Duration
		}{
			{"", time.Second},
			{"}starts-with-a-brace", time.Second},
			{"ok", 0},
			{"ok", -time.Second},
			{"ok", 999 * time.Microsecond},
		}
		for _, tc := range cases {
			if _, err := c.TryLock(ctx, tc.name, tc.ttl); !errors.Is(err, ErrInvalid) {
				t.Errorf("TryLock(%q, %v): got %v, want ErrInvalid", tc.name, tc.ttl, err)
			}
			if _, err := c.Lock(ctx, tc.name, tc.ttl); !errors.Is(err, ErrInvalid) {
				t.Errorf("Lock(%q, %v): got %v, want ErrInvalid", tc.name, tc.ttl, err)
			}
		}
		if n := seen.Hits(); n != 0 {
			t.Fatalf("%d commands reached Redis for invalid arguments", n)
		}
	})
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	var nilClient *redis.Client
	for name, rdb := range map[string]RedisClient{"nil": nil, "typed nil": nilClient} {
		if _, err := New(rdb); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%s client): got %v, want ErrInvalid", name, err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, p := range []string{"a{b:", "a}b:"} {
		if _, err := New(rdb, WithPrefix(p)); !errors.Is(err, ErrInvalid) {
			t.Errorf("WithPrefix(%q): got %v, want ErrInvalid", p, err)
		}
	}
	if _, err := New(rdb, WithPrefix("app:")); err != nil {
		t.Errorf("WithPrefix(app:): %v", err)
	}
}

func TestPrefixSeparatesLocks(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		one := newClient(t, rdb, WithPrefix("one:"))
		two := newClient(t, rdb, WithPrefix("two:"))
		name := redistest.Key(t)
		if _, err := one.TryLock(ctx, name, time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := two.TryLock(ctx, name, time.Minute); err != nil {
			t.Fatalf("same name under another prefix: %v", err)
		}
		if n, _ := rdb.Exists(ctx, "one:{"+name+"}").Result(); n != 1 {
			t.Fatal("the lock key does not carry the prefix")
		}
	})
}

func TestBrokenConnectionReturnsErrorsAndLeaksNothing(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		held, err := c.TryLock(ctx, name, time.Minute, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		f.On(redistest.Any()).Fail(io.EOF)

		if _, err := c.TryLock(ctx, name, time.Minute); err == nil || errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock on a broken connection: got %v, want the connection error", err)
		}
		if _, err := c.Lock(ctx, redistest.Key(t), time.Minute); !errors.Is(err, io.EOF) {
			t.Fatalf("Lock on a broken connection: got %v, want io.EOF", err)
		}
		if err := held.Extend(ctx, time.Minute); !errors.Is(err, io.EOF) {
			t.Fatalf("Extend: got %v", err)
		}
		if _, err := held.TTL(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("TTL: got %v", err)
		}
		if err := held.Unlock(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("Unlock: got %v", err)
		}
		_ = rdb.Close()
	})
}

func TestAttemptWithALostReplyDoesNotLeaveTheLockHeld(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		name := redistest.Key(t)
		warm, err := c.TryLock(ctx, name, time.Minute) // loads the script: EVALSHA then succeeds
		if err != nil {
			t.Fatal(err)
		}
		if err := warm.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		f.On(redistest.Script(acquireScript.Hash())).LoseReply(io.ErrUnexpectedEOF).Times(1)
		if _, err := c.TryLock(ctx, name, time.Hour); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v, want the lost reply's error", err)
		}
		l, err := c.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("the lock taken by the attempt whose reply was lost is still held: %v", err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRepeatedAcquireWithTheSameTokenIsIdempotent(t *testing.T) {
	// go-redis may resend a command whose reply was lost; the acquire script
	// must then answer as it did the first time.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		l, _, err := c.newLease(ctx, redistest.Key(t), time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok, _, err := c.attempt(ctx, l, false)
		if err != nil || !ok {
			t.Fatalf("first attempt: %v %v", ok, err)
		}
		first := l.Fence()
		ok, _, err = c.attempt(ctx, l, true)
		if err != nil || !ok {
			t.Fatalf("repeated attempt: %v %v", ok, err)
		}
		if l.Fence() != first {
			t.Fatalf("repeated attempt got fence %d, first %d", l.Fence(), first)
		}
	})
}

func TestReleasePublishesOnlyWhenAWaiterAsked(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		release := func(l *Lease) int64 {
			t.Helper()
			n, err := l.release(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		l, err := c.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got := release(l); got != 1 {
			t.Fatalf("uncontended release replied %d, want 1 (no message)", got)
		}
		l, err = c.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		other, _, err := c.newLease(ctx, name, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := c.attempt(ctx, other, true); err != nil || ok {
			t.Fatalf("flagging attempt: %v %v", ok, err)
		}
		if got := release(l); got != 2 {
			t.Fatalf("release of a flagged lock replied %d, want 2 (message sent)", got)
		}
	})
}

// noPubSub is a client whose pub/sub connections go to a closed port, as
// when pub/sub is disabled or unreachable.
type noPubSub struct {
	redis.UniversalClient
	dead *redis.Client
}

func (n noPubSub) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return n.dead.Subscribe(ctx, channels...)
}

func TestWaitersFallBackToPollingWithoutPubSub(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		dead := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		defer dead.Close()

		holder := newClient(t, b.Client(t))
		waiter := newClient(t, noPubSub{UniversalClient: b.Client(t), dead: dead})
		name := redistest.Key(t)
		held, err := holder.TryLock(ctx, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got := lockAndUnlock(waiter, name)
		redistest.WaitFor(t, 10*time.Second, "the waiter to queue", func() bool {
			waiter.mu.Lock()
			defer waiter.mu.Unlock()
			q := waiter.queues[held.key]
			return q != nil && q.subErr != nil
		})
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter without pub/sub: %v", err)
		}
	})
}

func TestACrowdArrivingAtOnceSendsOneAttempt(t *testing.T) {
	// A thousand goroutines of one process calling Lock together must not
	// each send an attempt: that fills the connection pool and delays the
	// renewals of the locks already held.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		holder := newClient(t, b.Client(t))
		f := redistest.NewFaults()
		attempts := f.On(redistest.Script(acquireScript.Hash()))
		c := newClient(t, b.Client(t, f))
		name := redistest.Key(t)
		held, err := holder.TryLock(ctx, name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		const crowd = 100
		var wg sync.WaitGroup
		for range crowd {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := <-lockAndUnlock(c, name); err != nil {
					t.Error(err)
				}
			}()
		}
		redistest.WaitFor(t, 10*time.Second, "the crowd to queue", func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			q := c.queues[held.key]
			return q != nil && len(q.waiters) == crowd && q.isConfirmed
		})
		redistest.WaitFor(t, 10*time.Second, "the head's second attempt", func() bool { return attempts.Hits() >= 2 })
		if n := attempts.Hits(); n != 2 {
			t.Fatalf("%d attempts while the lock was held, want 2 (the head's plain and flagged tries)", n)
		}
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if n := attempts.Hits(); n > 2+crowd+crowd/10 {
			t.Fatalf("%d attempts for %d acquisitions", n, crowd)
		}
	})
}

// Work under nested locks stops when either lock goes: Guard merges a
// lease into a context, and keeps the cause.
func TestGuardEndsWithTheLeaseOrTheContext(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		outer, err := c.TryLock(ctx, redistest.Key(t)+"-group", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.TryLock(ctx, redistest.Key(t)+"-dorm", 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		work, cancel := inner.Guard(outer.Context())
		defer cancel()
		select {
		case <-work.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the guarded context outlived the inner lease")
		}
		if cause := context.Cause(work); !errors.Is(cause, ErrLost) {
			t.Errorf("inner lease lost: cause %v, want ErrLost", cause)
		}
		if outer.Context().Err() != nil {
			t.Error("the outer lease's context ended with the inner lease")
		}

		// The outer context ending ends the guarded one, with its cause,
		// while the lease is still held.
		held, err := c.TryLock(ctx, redistest.Key(t)+"-held", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		parent, stop := context.WithCancelCause(ctx)
		work, cancel = held.Guard(parent)
		defer cancel()
		gone := errors.New("the request went away")
		stop(gone)
		<-work.Done()
		if cause := context.Cause(work); cause != gone || held.Context().Err() != nil {
			t.Errorf("parent ended: cause %v (want %v), lease context %v (want live)", cause, gone, held.Context().Err())
		}

		// Unlock ends it as Context does; cancel ends it too.
		work, cancel = held.Guard(ctx)
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		<-work.Done()
		if cause := context.Cause(work); cause != context.Canceled {
			t.Errorf("after Unlock: cause %v, want context.Canceled", cause)
		}
		cancel()
		again, err := c.TryLock(ctx, redistest.Key(t)+"-again", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer again.Unlock(ctx)
		work, cancel = again.Guard(ctx)
		cancel()
		if work.Err() == nil || again.Context().Err() != nil {
			t.Errorf("cancel: guarded %v (want done), lease context %v (want live)", work.Err(), again.Context().Err())
		}
	})
}

// splitClient runs commands on one client and subscribes on another, so
// that a test can slow down the dials of the subscription alone.
type splitClient struct {
	RedisClient
	subs RedisClient
}

func (s splitClient) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return s.subs.Subscribe(ctx, channels...)
}

// within runs f and fails the test if it has not returned after limit.
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.Fatalf("%s: still blocked after %v", what, limit)
	}
}

func TestASlowSubscribeHoldsNoOtherCallerOfTheClientPastItsContext(t *testing.T) {
	// One waiter's SUBSCRIBE cannot dial (a slow or partitioned network).
	// Another waiter, for another lock, must still give up when its
	// context ends, and an Unlock on the Client (which wakes local
	// waiters) must still return; once the network is back, the first
	// waiter misses no release.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		ctx := context.Background()
		faults := redistest.NewFaults()
		subs, cmds, others := b.Client(t, faults), b.Client(t), b.Client(t)
		dials := faults.OnDial().Hold()
		defer dials.Release()
		c := newClient(t, splitClient{cmds, subs})
		other := newClient(t, others)
		n1, n2 := redistest.Key(t), redistest.Key(t)
		var held []*Lease
		for _, name := range []string{n1, n2} {
			l, err := other.TryLock(ctx, name, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, l)
		}

		first := lockAndUnlock(c, n1)
		redistest.WaitFor(t, 10*time.Second, "the subscription to dial", func() bool { return dials.Hits() > 0 })

		within(t, 10*time.Second, "a waiter whose context ended", func() {
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err := c.Lock(short, n2, time.Minute)
			if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want ErrNotObtained joined with context.DeadlineExceeded", err)
			}
		})
		within(t, 10*time.Second, "an Unlock on the Client", func() {
			l, err := c.TryLock(ctx, redistest.Key(t), time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})

		dials.Release()
		for _, l := range held {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-first; err != nil {
			t.Fatalf("the waiter whose SUBSCRIBE was slow: %v", err)
		}
		for _, rdb := range []redis.UniversalClient{subs, cmds, others} {
			_ = rdb.Close()
		}
	})
}
