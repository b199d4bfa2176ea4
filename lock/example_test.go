package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/lock"
)

// An in-process Redis for the examples; use your own client in real code.
func exampleClient() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

func Example() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()

	locker, err := lock.New(rdb)
	if err != nil {
		panic(err)
	}
	lease, err := locker.TryLock(ctx, "order:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = locker.TryLock(ctx, "order:42", 10*time.Second)
	fmt.Println("second attempt:", err)

	if err := lease.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("second unlock:", lease.Unlock(ctx))
	// Output:
	// second attempt: lock: not obtained
	// second unlock: lock: not held: "order:42"
}

func ExampleClient_Lock() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()
	locker, _ := lock.New(rdb)

	holder, _ := locker.TryLock(ctx, "report", time.Minute)
	obtained := make(chan *lock.Lease)
	go func() {
		// Waits without polling until the holder releases.
		lease, err := locker.Lock(ctx, "report", time.Minute)
		if err != nil {
			panic(err)
		}
		obtained <- lease
	}()
	_ = holder.Unlock(ctx)
	lease := <-obtained
	fmt.Println("fence grew:", lease.Fence() > holder.Fence())
	_ = lease.Unlock(ctx)

	// A waiter gives up when its context ends.
	holder, _ = locker.TryLock(ctx, "report", time.Minute)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := locker.Lock(short, "report", time.Minute)
	fmt.Println(errors.Is(err, lock.ErrNotObtained), errors.Is(err, context.DeadlineExceeded))
	_ = holder.Unlock(ctx)
	// Output:
	// fence grew: true
	// true true
}

func ExampleAutoRenew() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()
	locker, _ := lock.New(rdb)

	// The lease is renewed every TTL/3 while the work runs, however long.
	lease, err := locker.Lock(ctx, "nightly-export", 3*time.Second, lock.AutoRenew())
	if err != nil {
		panic(err)
	}
	defer lease.Unlock(context.WithoutCancel(ctx))

	// Run the work under the lease's context: it is cancelled if the lock is
	// lost, with a cause that says why.
	work := lease.Context()
	select {
	case <-work.Done():
		fmt.Println("lost:", context.Cause(work))
	default:
		fmt.Println("still held")
	}
	// Output:
	// still held
}

// fencedStore accepts a write only if its fence is at least the highest it
// has seen, as a SQL "WHERE fence < $1" condition would.
type fencedStore struct{ highest int64 }

func (s *fencedStore) write(fence int64) error {
	if fence < s.highest {
		return errors.New("rejected: stale fence")
	}
	s.highest = fence
	return nil
}

func ExampleLease_Fence() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	locker, _ := lock.New(rdb)
	store := &fencedStore{}

	slow, _ := locker.TryLock(ctx, "sku:moutai", time.Second)
	mr.FastForward(2 * time.Second) // slow stalls past its lease
	fast, _ := locker.TryLock(ctx, "sku:moutai", time.Second)

	fmt.Println("fast writes:", store.write(fast.Fence()))
	fmt.Println("slow writes late:", store.write(slow.Fence()))
	// Output:
	// fast writes: <nil>
	// slow writes late: rejected: stale fence
}

// Nested locks, a group's and then a dorm's: the work runs under a context
// that ends as soon as either lock is lost or released.
func ExampleLease_Guard() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()
	locker, err := lock.New(rdb)
	if err != nil {
		panic(err)
	}

	group, err := locker.Lock(ctx, "group:17", 10*time.Second, lock.AutoRenew())
	if err != nil {
		panic(err)
	}
	defer group.Unlock(context.WithoutCancel(ctx))
	// Waiting for the dorm stops if the group's lock is lost meanwhile.
	dorm, err := locker.Lock(group.Context(), "dorm:b1-d007", 10*time.Second, lock.AutoRenew())
	if err != nil {
		panic(err)
	}
	work, cancel := dorm.Guard(group.Context())
	defer cancel()
	fmt.Println("working under both locks:", work.Err() == nil)

	_ = dorm.Unlock(ctx)
	<-work.Done()
	fmt.Println("dorm released, work stopped:", context.Cause(work))
	// Output:
	// working under both locks: true
	// dorm released, work stopped: context canceled
}

// A semaphore caps concurrent calls to a fragile service across every
// process: here two permits, three callers.
func ExampleSemaphore() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()

	locker, err := lock.New(rdb)
	if err != nil {
		panic(err)
	}
	reports, err := locker.Semaphore("report-service", 2)
	if err != nil {
		panic(err)
	}
	var permits []*lock.Lease
	for caller := 1; caller <= 3; caller++ {
		p, err := reports.TryAcquire(ctx, 30*time.Second, lock.AutoRenew())
		if errors.Is(err, lock.ErrNotObtained) {
			fmt.Printf("caller %d: busy, try later\n", caller)
			continue
		}
		if err != nil {
			panic(err)
		}
		fmt.Printf("caller %d: calling the service\n", caller)
		permits = append(permits, p)
	}
	for _, p := range permits {
		_ = p.Unlock(ctx)
	}
	// Output:
	// caller 1: calling the service
	// caller 2: calling the service
	// caller 3: busy, try later
}

// A reentrant lock: code that holds the lock calls code that takes it
// again, as the same owner, without deadlocking on itself.
func ExampleReentrant() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()

	locker, err := lock.New(rdb)
	if err != nil {
		panic(err)
	}
	outer, err := locker.Lock(ctx, "account:42", 10*time.Second, lock.Reentrant(""))
	if err != nil {
		panic(err)
	}
	// Deeper down, handed the owner token (a string: another goroutine or
	// process may take it too).
	inner, err := locker.TryLock(ctx, "account:42", 10*time.Second, lock.Reentrant(outer.Token()))
	fmt.Println("re-entered:", err == nil, "same fence:", inner.Fence() == outer.Fence())
	_ = inner.Unlock(ctx)

	_, err = locker.TryLock(ctx, "account:42", 10*time.Second)
	fmt.Println("others while one hold is left:", err)
	_ = outer.Unlock(ctx)

	other, err := locker.TryLock(ctx, "account:42", 10*time.Second)
	fmt.Println("others after the last hold:", err)
	_ = other.Unlock(ctx)
	// Output:
	// re-entered: true same fence: true
	// others while one hold is left: lock: not obtained
	// others after the last hold: <nil>
}

// Redlock over three independent servers (here three in-process ones):
// the lock is held while a majority of them hold it.
func ExampleNewRedlock() {
	var nodes []lock.RedisClient
	for range 3 {
		mr, err := miniredis.Run()
		if err != nil {
			panic(err)
		}
		defer mr.Close()
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	redlock, err := lock.NewRedlock(nodes)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	lease, err := redlock.TryLock(ctx, "nightly-report", 30*time.Second)
	if err != nil {
		panic(err)
	}
	_, err = redlock.TryLock(ctx, "nightly-report", 30*time.Second)
	fmt.Println("a second attempt:", err)
	fmt.Println("unlock:", lease.Unlock(ctx))
	// Output:
	// a second attempt: lock: not obtained
	// unlock: <nil>
}

// A fair lock hands itself on in arrival order, across processes; a
// waiter that dies loses its place after the place timeout.
func ExampleFair() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()

	locker, err := lock.New(rdb)
	if err != nil {
		panic(err)
	}
	lease, err := locker.Lock(ctx, "ticket-desk", 10*time.Second, lock.Fair(2*time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("fence:", lease.Fence() > 0)
	fmt.Println("unlock:", lease.Unlock(ctx))
	// Output:
	// fence: true
	// unlock: <nil>
}

// A read-write lock: readers share it, a writer has it alone.
func ExampleRWLock() {
	rdb, done := exampleClient()
	defer done()
	ctx := context.Background()

	locker, err := lock.New(rdb)
	if err != nil {
		panic(err)
	}
	prices, err := locker.RWLock("price-list")
	if err != nil {
		panic(err)
	}
	r1, _ := prices.TryRLock(ctx, 10*time.Second)
	r2, err := prices.TryRLock(ctx, 10*time.Second)
	fmt.Println("two readers at once:", err == nil)
	_, err = prices.TryLock(ctx, 10*time.Second)
	fmt.Println("a writer while they read:", err)
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)
	w, err := prices.TryLock(ctx, 10*time.Second)
	fmt.Println("a writer after them:", err == nil)
	_ = w.Unlock(ctx)
	// Output:
	// two readers at once: true
	// a writer while they read: lock: not obtained
	// a writer after them: true
}
