package lock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

func TestAReentrantOwnerTakesTheLockAgainAndReleasesItHoldByHold(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		outer, err := c.TryLock(ctx, name, time.Minute, Reentrant(""))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.TryLock(ctx, name, time.Second, Reentrant(outer.Token()))
		if err != nil {
			t.Fatalf("re-entry: %v", err)
		}
		if inner.Token() != outer.Token() || inner.Fence() != outer.Fence() {
			t.Fatalf("re-entry: token %q fence %d, want the outer hold's %q %d", inner.Token(), inner.Fence(), outer.Token(), outer.Fence())
		}
		// The shorter re-entry does not shorten the lock.
		if left, err := outer.TTL(ctx); err != nil || left < 50*time.Second {
			t.Fatalf("TTL after a one-second re-entry: %v %v", left, err)
		}
		other := newClient(t, rdb)
		if _, err := other.TryLock(ctx, name, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another owner while held twice: %v", err)
		}
		if _, err := other.TryLock(ctx, name, time.Minute, Reentrant("someone-else")); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another reentrant owner: %v", err)
		}

		// Released in any order: the first Unlock keeps the lock.
		if err := outer.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := outer.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("the same hold released twice: %v, want ErrNotHeld", err)
		}
		if _, err := other.TryLock(ctx, name, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another owner with one hold left: %v", err)
		}
		if err := inner.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{inner.key, inner.key + holdsSuffix} {
			if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("%s after the last hold: exists %d %v", key, n, err)
			}
		}
		l, err := other.TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatalf("another owner after the last hold: %v", err)
		}
		if l.Fence() <= outer.Fence() {
			t.Fatalf("fence %d after %d", l.Fence(), outer.Fence())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTheOwnerTokenCarriesTheLockToAnotherProcess(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		name := redistest.Key(t)
		first := newClient(t, b.Client(t))
		held, err := first.Lock(ctx, name, time.Minute, Reentrant(""), AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		// Another process, given the token, re-enters; a waiter of a third
		// gets the lock only when both holds are released.
		second := newClient(t, b.Client(t))
		again, err := second.Lock(ctx, name, time.Minute, Reentrant(held.Token()))
		if err != nil {
			t.Fatalf("re-entry from another client: %v", err)
		}
		got := make(chan error, 1)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		go func() {
			l, err := newClient(t, b.Client(t)).Lock(wctx, name, time.Minute)
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		waiterAfterLastHold(t, again, held, got)
	})
}

func TestAReentrantOwnerWhoseLockExpiredStartsAfresh(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		old, err := c.TryLock(ctx, name, time.Minute, Reentrant(""))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, name, time.Minute, Reentrant(old.Token())); err != nil {
			t.Fatal(err)
		}
		expire(t, rdb, old.key)
		expire(t, rdb, old.key+holdsSuffix)
		fresh, err := c.TryLock(ctx, name, time.Minute, Reentrant(old.Token()))
		if err != nil {
			t.Fatal(err)
		}
		if fresh.Fence() <= old.Fence() {
			t.Fatalf("fence %d after the lock expired, want above %d", fresh.Fence(), old.Fence())
		}
		// One hold now, not three: one Unlock frees the lock.
		if err := fresh.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := rdb.Exists(ctx, old.key).Result(); err != nil || n != 0 {
			t.Fatalf("lock after its only hold was released: %d %v", n, err)
		}
		if _, err := c.TryLock(ctx, name, time.Minute, Reentrant("a+b")); !errors.Is(err, ErrInvalid) {
			t.Fatalf("an owner with '+': %v", err)
		}
	})
}

func TestAReleasedHoldCanNeitherExtendNorReadTheLease(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		c := newClient(t, rdb)
		name := redistest.Key(t)
		outer, err := c.TryLock(ctx, name, time.Minute, Reentrant(""))
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.TryLock(ctx, name, time.Minute, Reentrant(outer.Token()))
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The owner still holds the lock through outer, but inner is over:
		// it must not stretch the lease the other holds share.
		if err := inner.Extend(ctx, time.Hour); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Extend of a released hold: %v, want ErrNotHeld", err)
		}
		if left, err := inner.TTL(ctx); !errors.Is(err, ErrNotHeld) {
			t.Errorf("TTL of a released hold: %v %v, want ErrNotHeld", left, err)
		}
		for _, key := range []string{outer.key, outer.key + holdsSuffix} {
			if left, err := rdb.PTTL(ctx, key).Result(); err != nil || left > time.Minute {
				t.Errorf("%s after the released hold's Extend: PTTL %v %v, want at most a minute", key, left, err)
			}
		}
		// The hold still held answers for the lock as before.
		if err := outer.Extend(ctx, 2*time.Minute); err != nil {
			t.Fatalf("Extend of the held hold: %v", err)
		}
		if left, err := outer.TTL(ctx); err != nil || left <= time.Minute {
			t.Fatalf("TTL of the held hold after Extend(2m): %v %v", left, err)
		}
		if err := outer.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := outer.Extend(ctx, time.Minute); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Extend after the last hold: %v, want ErrNotHeld", err)
		}
	})
}

func TestAReentrantOwnerReentersAtOnceWhileAnotherWaiterOfItsClientQueues(t *testing.T) {
	// The waiter waits for the owner's release; were the owner queued
	// behind it, each would wait for the other for ever.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		c := newClient(t, b.Client(t))
		name := redistest.Key(t)
		outer, err := c.Lock(ctx, name, time.Minute, Reentrant(""), AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		got := lockAndUnlock(c, name)
		observer := b.Client(t)
		redistest.WaitFor(t, 10*time.Second, "the other waiter to queue and flag the holder", func() bool {
			v, _ := observer.Get(ctx, outer.key).Result()
			return v == outer.Token()+"+" && localWaiters(c, outer) == 1
		})

		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		inner, err := c.Lock(rctx, name, time.Minute, Reentrant(outer.Token()))
		if err != nil {
			t.Fatalf("re-entry by the owner holding the lock: %v", err)
		}
		if inner.Fence() != outer.Fence() {
			t.Fatalf("re-entry fence %d, want the outer hold's %d", inner.Fence(), outer.Fence())
		}
		if n := localWaiters(c, outer); n != 1 {
			t.Fatalf("%d local waiters after the re-entry, want the other waiter alone", n)
		}

		// The other waiter gets the lock once both holds are released.
		waiterAfterLastHold(t, inner, outer, got)
	})
}

func TestAReentrantOwnerThatDoesNotHoldTheLockWaitsItsTurn(t *testing.T) {
	// The owner asks whether it holds the lock just as the lock is freed
	// for the waiter before it: it must not take the free lock first.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		c := newClient(t, b.Client(t, faults))
		name := redistest.Key(t)
		held, err := newClient(t, b.Client(t)).TryLock(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var (
			mu    sync.Mutex
			order []string
		)
		lockAs := func(who string, opts ...LockOption) <-chan error {
			got := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				l, err := c.Lock(wctx, name, time.Minute, opts...)
				if err == nil {
					mu.Lock()
					order = append(order, who)
					mu.Unlock()
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			return got
		}
		first := lockAs("first")
		observer := b.Client(t)
		redistest.WaitFor(t, 10*time.Second, "the first waiter to flag the holder", func() bool {
			v, _ := observer.Get(ctx, held.key).Result()
			return v == held.Token()+"+"
		})

		// The first waiter's attempt after the release is held; meanwhile
		// the owner arrives and asks.
		hold := faults.On(redistest.Script(acquireScript.Hash())).Hold().Times(1)
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 10*time.Second, "the first waiter's attempt after the release", func() bool { return hold.Hits() == 1 })
		owner := lockAs("owner", Reentrant("an-owner"))
		redistest.WaitFor(t, 10*time.Second, "the owner to ask and queue", func() bool {
			return hold.Hits() == 2 && localWaiters(c, held) == 2
		})
		hold.Release()
		for _, got := range []<-chan error{first, owner} {
			if err := <-got; err != nil {
				t.Fatal(err)
			}
		}
		if len(order) != 2 || order[0] != "first" {
			t.Fatalf("acquisition order %v, want the first waiter before the owner", order)
		}
	})
}

// waiterAfterLastHold releases first, checks that the waiter whose result
// got reports has not got through with a hold left, then releases last,
// the owner's last hold, and waits for the waiter.
func waiterAfterLastHold(t *testing.T, first, last *Lease, got <-chan error) {
	t.Helper()
	ctx := context.Background()
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter got through with a hold left: %v", err)
	default:
	}
	if err := last.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter after the last hold: %v", err)
	}
}
