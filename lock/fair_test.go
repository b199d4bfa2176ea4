package lock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// queued returns how many waiters hold a place in the fair lock's queue.
func queued(t *testing.T, b *redistest.Backend, l *Lease) int64 {
	t.Helper()
	n, err := b.Client(t).ZCard(context.Background(), l.key+queueSuffix).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFairWaitersGetTheLockInArrivalOrder(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := redistest.Key(t)
		holder, err := newClient(t, b.Client(t)).TryLock(ctx, name, time.Minute, Fair(0))
		if err != nil {
			t.Fatal(err)
		}
		// Sixteen waiters, each its own Client (a process), arriving one
		// after the other: each is queued before the next starts.
		const waiters = 16
		faults := redistest.NewFaults()
		attempts := faults.On(redistest.Script(fairAcquireScript.Hash()))
		var mu sync.Mutex
		var order []int
		errs := make(chan error, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			c := newClient(t, b.Client(t, faults))
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.Lock(ctx, name, time.Minute, Fair(0))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				errs <- l.Unlock(ctx)
			}()
			redistest.WaitFor(t, 10*time.Second, "the waiter to take its place", func() bool { return queued(t, b, holder) == int64(i+1) })
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("acquired in order %v, want arrival order", order)
			}
		}
		if len(order) != waiters {
			t.Fatalf("%d of %d waiters got the lock", len(order), waiters)
		}
		// Each release names the next in line, so only its process tries:
		// a handful of attempts per waiter, not one per waiting process
		// per release (which would be over a hundred here).
		if n := attempts.Hits(); n > 4*waiters {
			t.Fatalf("%d fair acquire attempts for %d waiters", n, waiters)
		}
		t.Logf("%d attempts for %d waiters", attempts.Hits(), waiters)
	})
}

func TestADeadFairWaiterDelaysTheQueueByOnePlaceTimeoutAtMost(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := redistest.Key(t)
		const place = time.Second
		holder, err := newClient(t, b.Client(t)).TryLock(ctx, name, time.Minute, Fair(place))
		if err != nil {
			t.Fatal(err)
		}
		// Waiter 1 dies in the queue: its process stops talking to Redis
		// (every command fails), so it neither renews nor leaves its place.
		dying := redistest.NewFaults()
		doomed, kill := context.WithCancel(ctx)
		defer kill()
		results := make(chan int, 4)
		errs := make(chan error, 4)
		for i := range 4 {
			rdb := b.Client(t)
			wctx := ctx
			if i == 1 {
				rdb, wctx = b.Client(t, dying), doomed
			}
			c := newClient(t, rdb)
			go func() {
				l, err := c.Lock(wctx, name, time.Minute, Fair(place))
				if err != nil {
					errs <- err
					return
				}
				results <- i
				errs <- l.Unlock(ctx)
			}()
			redistest.WaitFor(t, 10*time.Second, "the waiter to take its place", func() bool { return queued(t, b, holder) == int64(i+1) })
		}
		// Waiter 1's process dies: every command it sends fails, so its
		// Lock ends (with the failure or its context) and leaving fails
		// too; its place stays until it expires.
		dying.On(redistest.Any()).Fail(errors.New("process killed"))
		kill()
		if err := <-errs; err == nil {
			t.Fatal("the dead waiter got the lock")
		}
		start := time.Now()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		var order []int
		for range 3 {
			order = append(order, <-results)
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if order[0] != 0 || order[1] != 2 || order[2] != 3 {
			t.Fatalf("order %v, want [0 2 3]", order)
		}
		// Waiter 2 waited at most for the dead one's place to expire.
		if waited := time.Since(start); waited > place+2*time.Second {
			t.Fatalf("the queue took %v to get past a dead waiter with a %v place", waited, place)
		}
	})
}

func TestAFairTryLockDoesNotJumpTheQueue(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := redistest.Key(t)
		c := newClient(t, b.Client(t))
		holder, err := c.TryLock(ctx, name, time.Minute, Fair(0))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := newClient(t, b.Client(t)).Lock(ctx, name, time.Minute, Fair(0))
			if err == nil {
				err = l.Unlock(ctx)
			}
			got <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the waiter to queue", func() bool { return queued(t, b, holder) == 1 })
		if _, err := c.TryLock(ctx, name, time.Minute, Fair(0)); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("TryLock while held: %v", err)
		}
		if queued(t, b, holder) != 1 {
			t.Fatal("a single attempt took a place in the queue")
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryLock(ctx, name, time.Minute, Fair(0), Reentrant("")); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Fair and Reentrant: %v", err)
		}
	})
}

// heldFair returns a Client whose commands pass through faults and a lease
// it holds on a new fair lock (place timeout place), with a context that
// ends with the test or after a minute.
func heldFair(t *testing.T, b *redistest.Backend, place time.Duration) (context.Context, *Client, *redistest.Faults, *Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	faults := redistest.NewFaults()
	c := newClient(t, b.Client(t, faults))
	holder, err := c.TryLock(ctx, redistest.Key(t), time.Minute, Fair(place))
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, faults, holder
}

// localWaiters returns how many goroutines of c wait for the lock l is a
// lease of.
func localWaiters(c *Client, l *Lease) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[l.key]; q != nil {
		return len(q.waiters)
	}
	return 0
}

// Goroutines of one Client queue for a fair lock: each release hands the
// lock to the next of them (fair_release.lua) and gives the one after it
// its place in the lock's queue, so only the first waiter ever tries.
func TestAFairReleaseHandsTheLockToTheNextWaiterOfItsClient(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, c, faults, holder := heldFair(t, b, 0)
		name := holder.Name()
		attempts := faults.On(redistest.Script(fairAcquireScript.Hash()))
		const waiters = 8
		type turn struct {
			i     int
			fence int64
		}
		turns := make(chan turn, waiters)
		errs := make(chan error, waiters)
		for i := range waiters {
			go func() {
				l, err := c.Lock(ctx, name, time.Minute, Fair(0))
				if err != nil {
					errs <- err
					return
				}
				turns <- turn{i, l.Fence()}
				// Hold on until the next waiter has its place in the
				// lock's queue, so that this release can hand it the lock.
				if i < waiters-1 {
					redistest.WaitFor(t, 10*time.Second, "the next waiter's place", func() bool { return queued(t, b, l) == 1 })
				}
				errs <- l.Unlock(ctx)
			}()
			redistest.WaitFor(t, 10*time.Second, "the waiter to queue", func() bool { return localWaiters(c, holder) == i+1 })
		}
		redistest.WaitFor(t, 10*time.Second, "the first waiter's place", func() bool { return queued(t, b, holder) == 1 })
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		last := holder.Fence()
		for want := range waiters {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			got := <-turns
			if got.i != want || got.fence <= last {
				t.Fatalf("turn %d went to waiter %d with fence %d (previous %d): want arrival order, rising fences", want, got.i, got.fence, last)
			}
			last = got.fence
		}
		// Without handing over, each waiter would try twice (once for its
		// place, once on hearing of the release): 16 attempts. Only the
		// first tries at all (once, and once more flagging the holder when
		// subscribed): each handover gives the next waiter its place.
		if n := attempts.Hits(); n != 2 {
			t.Fatalf("%d fair acquire attempts for %d waiters, want 2 (the first waiter's)", n, waiters)
		}
	})
}

// A waiter that gives up while a release is handing it the lock leaves
// nothing held: the releaser releases what it handed.
func TestAHandoverToAWaiterThatGaveUpIsReleased(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, c, faults, holder := heldFair(t, b, 0)
		name := holder.Name()
		wctx, giveUp := context.WithCancel(ctx)
		defer giveUp()
		waited := make(chan error, 1)
		go func() {
			_, err := c.Lock(wctx, name, time.Minute, Fair(0))
			waited <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the waiter's place", func() bool { return queued(t, b, holder) == 1 })

		// The release is on its way, handing the lock to the waiter, when
		// the waiter gives up; its leaving the queue comes after.
		release := faults.On(redistest.Script(fairReleaseScript.Hash())).Hold().Times(1)
		leave := faults.On(redistest.Script(fairLeaveScript.Hash())).Hold().Times(1)
		t.Cleanup(release.Release)
		t.Cleanup(leave.Release)
		unlocked := make(chan error, 1)
		go func() { unlocked <- holder.Unlock(ctx) }()
		redistest.WaitFor(t, 10*time.Second, "the release to be sent", func() bool { return release.Hits() == 1 })
		giveUp()
		redistest.WaitFor(t, 10*time.Second, "the waiter to leave", func() bool { return leave.Hits() == 1 })
		release.Release()
		if err := <-unlocked; err != nil {
			t.Fatal(err)
		}
		leave.Release()
		if err := <-waited; !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: %v, want ErrNotObtained and context.Canceled", err)
		}
		if n := b.Client(t).Exists(ctx, holder.key).Val(); n != 0 {
			t.Fatal("the lock handed to a waiter that gave up is still held")
		}
	})
}

// A release whose reply is lost may have handed the lock over: the waiter
// asks at once (its attempt finds it holds the lock) rather than at the
// end of its wait, a third of the place timeout.
func TestAWaiterAsksAtOnceWhenAHandoverMayHaveLanded(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const place = time.Minute // the wait without the wake-up: 20 s
		ctx, c, faults, holder := heldFair(t, b, place)
		name := holder.Name()
		wctx, stop := context.WithTimeout(ctx, 5*time.Second)
		defer stop()
		got := make(chan *Lease, 1)
		go func() {
			l, err := c.Lock(wctx, name, time.Minute, Fair(place))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		redistest.WaitFor(t, 10*time.Second, "the waiter's place", func() bool { return queued(t, b, holder) == 1 })
		// Loaded first: a lost NOSCRIPT reply would hide that it never ran.
		if err := b.Client(t).ScriptLoad(ctx, fairReleaseScript.Source()).Err(); err != nil {
			t.Fatal(err)
		}
		faults.On(redistest.Script(fairReleaseScript.Hash())).LoseReply(errors.New("connection lost")).Times(1)
		if err := holder.Unlock(ctx); err == nil {
			t.Fatal("Unlock succeeded without its reply")
		}
		l := <-got
		if l == nil {
			t.FailNow()
		}
		if l.Fence() <= holder.Fence() {
			t.Fatalf("fence %d after %d", l.Fence(), holder.Fence())
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Goroutines of two Clients take a fair lock in turns while some give up
// at random moments (handovers in flight among them): never two holders,
// every turn that did not give up is served, and nothing is left held.
func TestFairHandoversUnderContentionWithWaitersGivingUp(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		name := redistest.Key(t)
		clients := []*Client{newClient(t, b.Client(t)), newClient(t, b.Client(t))}
		var held overlap
		var taken, gaveUp atomic.Int64
		var wg sync.WaitGroup
		for g := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := clients[g%2]
				for i := range 15 {
					wctx, stop := ctx, context.CancelFunc(func() {})
					if (g+i)%4 == 0 {
						// Gives up soon: in the local queue, in Redis's, or
						// while a release hands it the lock.
						wctx, stop = context.WithTimeout(ctx, time.Duration(1+(g*7+i)%5)*time.Millisecond)
					}
					l, err := c.Lock(wctx, name, time.Minute, Fair(0))
					stop()
					if err != nil {
						if ctx.Err() != nil || !errors.Is(err, ErrNotObtained) {
							t.Error(err)
							return
						}
						gaveUp.Add(1)
						continue
					}
					held.enter()
					taken.Add(1)
					held.leave()
					if err := l.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if held.most.Load() != 1 {
			t.Fatalf("%d holders at once", held.most.Load())
		}
		if taken.Load()+gaveUp.Load() != 12*15 || taken.Load() < 12*15*3/4 {
			t.Fatalf("%d turns taken, %d given up, of %d (at most a quarter may give up)", taken.Load(), gaveUp.Load(), 12*15)
		}
		// Nothing is left held: a new owner gets the lock at once.
		l, err := newClient(t, b.Client(t)).TryLock(ctx, name, time.Minute, Fair(0))
		if err != nil {
			t.Fatalf("after the crowd: %v", err)
		}
		_ = l.Unlock(ctx)
	})
}

// A waiter of another process that queued while a Client's second waiter
// was still in that Client's own queue goes before it: the handover to
// the first gives the second a place behind it, and the second is told
// when it is its turn (it does not wait out a third of its place timeout).
func TestAHandoverQueuesTheNextWaiterBehindOtherProcesses(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		const place = time.Minute // a third of it would outlast the test
		ctx, c, _, holder := heldFair(t, b, place)
		name := holder.Name()
		order := make(chan string, 3)
		errs := make(chan error, 3)
		take := func(who string, c *Client) {
			wctx, stop := context.WithTimeout(ctx, 10*time.Second)
			defer stop()
			l, err := c.Lock(wctx, name, time.Minute, Fair(place))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
				return
			}
			order <- who
			errs <- l.Unlock(ctx)
		}
		go take("first of the holder's Client", c)
		redistest.WaitFor(t, 10*time.Second, "the first waiter's place", func() bool { return queued(t, b, holder) == 1 })
		go take("second of the holder's Client", c)
		redistest.WaitFor(t, 10*time.Second, "the second waiter to queue in its Client", func() bool { return localWaiters(c, holder) == 2 })
		go take("another process", newClient(t, b.Client(t)))
		redistest.WaitFor(t, 10*time.Second, "the other process's place", func() bool { return queued(t, b, holder) == 2 })
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			got = append(got, <-order)
		}
		want := []string{"first of the holder's Client", "another process", "second of the holder's Client"}
		if !slices.Equal(got, want) {
			t.Fatalf("order %q, want %q", got, want)
		}
	})
}

// A waiter that gives up while a release is giving it a place in the
// queue (it was second in its Client) does not keep that place: it would
// hold up everyone behind it until the place timed out.
func TestAWaiterThatGaveUpWhileBeingPlacedKeepsNoPlace(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, c, faults, holder := heldFair(t, b, 0)
		name := holder.Name()
		first := make(chan *Lease, 1)
		go func() {
			l, err := c.Lock(ctx, name, time.Minute, Fair(0))
			if err != nil {
				t.Error(err)
			}
			first <- l
		}()
		redistest.WaitFor(t, 10*time.Second, "the first waiter's place", func() bool { return queued(t, b, holder) == 1 })
		wctx, giveUp := context.WithCancel(ctx)
		defer giveUp()
		second := make(chan error, 1)
		go func() {
			_, err := c.Lock(wctx, name, time.Minute, Fair(0))
			second <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the second waiter to queue in its Client", func() bool { return localWaiters(c, holder) == 2 })

		release := faults.On(redistest.Script(fairReleaseScript.Hash())).Hold().Times(1)
		t.Cleanup(release.Release)
		unlocked := make(chan error, 1)
		go func() { unlocked <- holder.Unlock(ctx) }()
		redistest.WaitFor(t, 10*time.Second, "the release to be sent", func() bool { return release.Hits() == 1 })
		giveUp()
		if err := <-second; !errors.Is(err, context.Canceled) {
			t.Fatalf("second waiter: %v, want context.Canceled", err)
		}
		release.Release()
		if err := <-unlocked; err != nil {
			t.Fatal(err)
		}
		l := <-first
		if l == nil {
			t.FailNow()
		}
		if n := queued(t, b, holder); n != 0 {
			t.Fatalf("%d places left in the queue, want none (the second waiter gave up)", n)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAPlaceTimeoutBelowAMillisecondIsRefusedBeforeItEmptiesTheQueue(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := redistest.Key(t)
		holder, giveUp := queueFairWaiters(t, b, name, 0)

		// Redis counts the timeout in whole milliseconds: 500µs would
		// reach it as 0, and PEXPIRE queue 0 deletes every waiter's place.
		f := redistest.NewFaults()
		c := newClient(t, b.Client(t, f))
		seen := f.On(redistest.Any())
		for _, place := range []time.Duration{time.Nanosecond, 500 * time.Microsecond, time.Millisecond - 1} {
			if _, err := c.TryLock(ctx, name, time.Minute, Fair(place)); !errors.Is(err, ErrInvalid) {
				t.Errorf("TryLock with Fair(%v): %v, want ErrInvalid", place, err)
			}
			if _, err := c.Lock(ctx, name, time.Minute, Fair(place)); !errors.Is(err, ErrInvalid) {
				t.Errorf("Lock with Fair(%v): %v, want ErrInvalid", place, err)
			}
		}
		if n := seen.Hits(); n != 0 {
			t.Errorf("%d commands reached Redis for a sub-millisecond place timeout", n)
		}
		if n := queued(t, b, holder); n != 1 {
			t.Fatalf("%d queued after the refused calls, want the waiter's place", n)
		}
		giveUp()
	})
}

// A waiter with a short place timeout must not shorten the queue's life
// below what the waiters with long ones need: when it dies, they would
// lose their places with it.
func TestAShortPlaceTimeoutDoesNotCutTheQueueShort(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		holder, giveUp := queueFairWaiters(t, b, redistest.Key(t), time.Minute, 5*time.Millisecond)
		for _, k := range []string{holder.key + queueSuffix, holder.key + placesSuffix} {
			if ttl := b.Client(t).PTTL(ctx, k).Val(); ttl < time.Minute {
				t.Errorf("%s expires in %v, want at least the minute-long place's", k, ttl)
			}
		}
		giveUp()
	})
}

// queueFairWaiters takes name with a fair lock and queues behind it one
// waiter per place timeout, each with a Client of its own, in that order.
// giveUp makes the waiters give up, checks that they did, and releases
// the lock.
func queueFairWaiters(t *testing.T, b *redistest.Backend, name string, places ...time.Duration) (holder *Lease, giveUp func()) {
	t.Helper()
	ctx := context.Background()
	holder, err := newClient(t, b.Client(t)).TryLock(ctx, name, time.Minute, Fair(0))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	waiters := make(chan error, len(places))
	for i, place := range places {
		go func() {
			_, err := newClient(t, b.Client(t)).Lock(wctx, name, time.Minute, Fair(place))
			waiters <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "a waiter to take its place", func() bool { return queued(t, b, holder) == int64(i+1) })
	}
	return holder, func() {
		t.Helper()
		stop()
		for range places {
			if err := <-waiters; !errors.Is(err, ErrNotObtained) {
				t.Fatalf("a waiter: %v", err)
			}
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
