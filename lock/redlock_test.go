package lock

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// fiveNodes spawns five independent redis-servers and returns a client
// for each, with reconnection kept short so a stopped node fails fast.
func fiveNodes(t *testing.T) ([]*redistest.Server, []*redis.Client) {
	t.Helper()
	servers := redistest.Servers(t, 5)
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	return servers, clients
}

func newRedlock(t *testing.T, clients []*redis.Client) *Redlock {
	t.Helper()
	nodes := make([]RedisClient, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	r, err := NewRedlock(nodes)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// holders counts the nodes whose key for name holds a value.
func holders(t *testing.T, clients []*redis.Client, key string) int {
	t.Helper()
	n := 0
	for _, c := range clients {
		if v, err := c.Exists(context.Background(), key).Result(); err == nil && v == 1 {
			n++
		}
	}
	return n
}

// TestRedlockOnFiveServers runs the tests that leave every server up on
// one set of five, to spare the machine four more sets.
func TestRedlockOnFiveServers(t *testing.T) {
	_, clients := fiveNodes(t)
	t.Run("exclusive on a majority", func(t *testing.T) { redlockIsExclusiveOnAMajority(t, clients) })
	t.Run("never two holders", func(t *testing.T) { redlockNeverHasTwoHolders(t, clients) })
	t.Run("lost when a majority loses it", func(t *testing.T) { redlockLeaseIsLostWhenAMajorityLosesIt(t, clients) })
	t.Run("a failed TryLock returns no lease", func(t *testing.T) { aFailedRedlockTryLockReturnsNoLease(t, clients) })
	t.Run("taken at a majority, released after every SET", func(t *testing.T) { redlockIsTakenAtAMajorityAndReleasedAfterEverySET(t, clients) })
}

// A Redlock attempt returns once a majority granted the lock, without
// waiting for the slowest node; its release waits for that node's SET, so
// the SET cannot land after the release and leave the lock behind.
func redlockIsTakenAtAMajorityAndReleasedAfterEverySET(t *testing.T, clients []*redis.Client) {
	ctx := context.Background()
	faults := redistest.NewFaults()
	slow := redis.NewClient(&redis.Options{Addr: clients[4].Options().Addr})
	t.Cleanup(func() { _ = slow.Close() })
	slow.AddHook(faults)
	r := newRedlock(t, append(clients[:4:4], slow))
	held := faults.On(redistest.Command("set")).Hold().Times(1)
	t.Cleanup(held.Release)

	l, err := r.TryLock(ctx, "order:late", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// TryLock returned at a majority: the fifth SET may not have reached
	// the hook that holds it yet.
	redistest.WaitFor(t, 10*time.Second, "the fifth SET to be on its way, held", func() bool { return held.Hits() == 1 })
	redistest.WaitFor(t, 10*time.Second, "the other four nodes to grant the lock", func() bool { return holders(t, clients, l.key) == 4 })
	// While the fifth SET is on its way, a release cannot go out.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := l.Unlock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock with a SET on its way: %v, want it to wait (and its context to end)", err)
	}
	if n := holders(t, clients, l.key); n != 4 {
		t.Fatalf("held on %d nodes after a release that had to wait, want 4", n)
	}
	held.Release()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holders(t, clients, l.key); n != 0 {
		t.Fatalf("held on %d nodes after Unlock", n)
	}
}

func redlockIsExclusiveOnAMajority(t *testing.T, clients []*redis.Client) {
	ctx := context.Background()
	a, b := newRedlock(t, clients), newRedlock(t, clients)
	l, err := a.TryLock(ctx, "order:1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	<-l.settled // TryLock returns once a majority granted it; the rest follow
	if n := holders(t, clients, l.key); n != 5 {
		t.Fatalf("held on %d of 5 nodes", n)
	}
	if l.Fence() != 0 {
		t.Fatalf("fence %d, want 0", l.Fence())
	}
	if left, err := l.TTL(ctx); err != nil || left <= 50*time.Second || left > time.Minute {
		t.Fatalf("TTL: %v %v", left, err)
	}
	if _, err := b.TryLock(ctx, "order:1", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("a second holder: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := holders(t, clients, l.key); n != 0 {
		t.Fatalf("held on %d nodes after Unlock", n)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock twice: %v", err)
	}
	l2, err := b.TryLock(ctx, "order:1", time.Minute)
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	_ = l2.Unlock(ctx)
}

func TestRedlockSurvivesAMinorityOfNodesDown(t *testing.T) {
	ctx := context.Background()
	servers, clients := fiveNodes(t)
	r := newRedlock(t, clients)
	l, err := r.TryLock(ctx, "job", time.Minute, AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	<-l.settled // every node answered: all five hold it
	// One node stops while the lock is held: extending still reaches a
	// majority, and nobody else can take it.
	servers[0].Stop()
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend with a node down: %v", err)
	}
	other := newRedlock(t, clients)
	if _, err := other.TryLock(ctx, "job", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("with one node down: %v", err)
	}
	// Another node restarts empty: one free node of four live is no majority.
	if err := servers[1].Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryLock(ctx, "job", time.Minute); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("after a restart that lost the key: %v", err)
	}
	// What a failed attempt took on the restarted node it gave back.
	if n := holders(t, clients[1:2], l.key); n != 0 {
		t.Fatalf("the failed attempt left its key on the restarted node")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Four live nodes: a majority of five can still be had.
	l2, err := other.TryLock(ctx, "job", time.Minute)
	if err != nil {
		t.Fatalf("with four of five nodes up: %v", err)
	}
	_ = l2.Unlock(ctx)

	// Three down: no majority, and nothing is left held.
	servers[1].Stop()
	servers[2].Stop()
	_, err = other.TryLock(ctx, "job", time.Minute)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("with three of five nodes down: %v", err)
	}
	if n := holders(t, clients[3:], l.key); n != 0 {
		t.Fatalf("a failed attempt left the lock on %d live nodes", n)
	}
}

// A node that hangs (no reply, connection open) must not hold up renewal
// until the lease has run out on the others (another process would take
// the lock while the first lease still looked held), nor Unlock.
func TestRedlockRenewsPastAHungMinorityNode(t *testing.T) {
	ctx := context.Background()
	servers, clients := fiveNodes(t)
	r := newRedlock(t, clients)
	const ttl = 900 * time.Millisecond
	l, err := r.TryLock(ctx, "hung", ttl, AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	<-l.settled
	if err := servers[4].Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = servers[4].Resume() }()

	// Another process, whose client for the hung node gives up quickly,
	// tries for the lock over three leases.
	others := make([]RedisClient, 5)
	for i := range 4 {
		others[i] = clients[i]
	}
	fast := redis.NewClient(&redis.Options{Addr: servers[4].Addr, ReadTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = fast.Close() })
	others[4] = fast
	other, err := NewRedlock(others)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); <-tick.C {
		if _, err := other.TryLock(ctx, "hung", time.Minute); err == nil {
			t.Fatalf("another process took the lock while the renewed lease was held (its context: %v)", context.Cause(l.Context()))
		} else if !errors.Is(err, ErrNotObtained) {
			t.Fatal(err)
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the lease was lost with a majority up: %v", context.Cause(l.Context()))
		}
	}
	// Unlock returns once a majority released it, not when the hung node
	// times out.
	start := time.Now()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Unlock took %v with one node of five hung", took)
	}
	// The last healthy node's release may still be on its way.
	redistest.WaitFor(t, 5*time.Second, "the answering nodes to let the lock go", func() bool { return holders(t, clients[:4], l.key) == 0 })
	if err := servers[4].Resume(); err != nil {
		t.Fatal(err)
	}
}

// Unlock must not report success, or "not held", while a majority may
// still hold the lock: the caller could not know to try again.
func TestRedlockUnlockFailsWhileAMajorityMayStillHoldIt(t *testing.T) {
	ctx := context.Background()
	_, clients := fiveNodes(t)
	faults := redistest.NewFaults()
	nodes := make([]RedisClient, 5)
	for i, c := range clients {
		nodes[i] = c
		if i < 3 {
			fc := redis.NewClient(&redis.Options{Addr: c.Options().Addr, MaxRetries: -1})
			fc.AddHook(faults)
			t.Cleanup(func() { _ = fc.Close() })
			nodes[i] = fc
		}
	}
	r, err := NewRedlock(nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, healthyHold := range []bool{true, false} {
		l, err := r.TryLock(ctx, "unlock", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		<-l.settled
		if !healthyHold {
			// The two nodes that answer lost the key (restarted empty).
			for _, c := range clients[3:] {
				c.Del(ctx, l.key)
			}
		}
		fail := faults.On(redistest.Script(releaseScript.Hash())).Fail(io.ErrUnexpectedEOF)
		err = l.Unlock(ctx)
		if err == nil || errors.Is(err, ErrNotHeld) {
			t.Fatalf("Unlock with the release failing on 3 of 5 nodes (the other two holding it: %v): %v, want an error saying it may still be held", healthyHold, err)
		}
		if n := holders(t, clients, l.key); n != 3 {
			t.Fatalf("%d nodes hold the lock, want the 3 whose release failed", n)
		}
		fail.Off()
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock again once the nodes answer: %v", err)
		}
		if n := holders(t, clients, l.key); n != 0 {
			t.Fatalf("%d nodes hold the lock after the second Unlock", n)
		}
	}
}

func redlockNeverHasTwoHolders(t *testing.T, clients []*redis.Client) {
	var held overlap
	var taken atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newRedlock(t, clients)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for range 10 {
				l, err := r.Lock(ctx, "contended", 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				held.enter()
				time.Sleep(time.Millisecond) // the work under the lock, so that holders would overlap
				held.leave()
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if held.most.Load() != 1 || taken.Load() != 160 {
		t.Fatalf("%d holders at once, %d acquisitions; want 1 and 160", held.most.Load(), taken.Load())
	}
}

func redlockLeaseIsLostWhenAMajorityLosesIt(t *testing.T, clients []*redis.Client) {
	ctx := context.Background()
	r := newRedlock(t, clients)
	l, err := r.TryLock(ctx, "renewed", 300*time.Millisecond, AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	<-l.settled // every node answered: all five hold it
	for _, c := range clients[:3] {
		if err := c.Del(ctx, l.key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-l.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease's context did not end")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, ErrLost) {
		t.Fatalf("cause %v, want ErrLost", cause)
	}
	_ = l.Unlock(ctx)
}

func TestRedlockBadArguments(t *testing.T) {
	if _, err := NewRedlock(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("no nodes: %v", err)
	}
	if _, err := NewRedlock([]RedisClient{(*redis.Client)(nil)}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a nil node: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	r, err := NewRedlock([]RedisClient{rdb})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.TryLock(ctx, "", time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty name: %v", err)
	}
	if _, err := r.TryLock(ctx, "x", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("ttl 0: %v", err)
	}
	if _, err := r.TryLock(ctx, "x", time.Second, Reentrant("")); !errors.Is(err, ErrInvalid) {
		t.Errorf("reentrant: %v", err)
	}
}

func aFailedRedlockTryLockReturnsNoLease(t *testing.T, clients []*redis.Client) {
	ctx := context.Background()
	r := newRedlock(t, clients)
	l, err := r.TryLock(ctx, "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if other, err := r.TryLock(ctx, "x", time.Minute); !errors.Is(err, ErrNotObtained) || other != nil {
		t.Fatalf("a failed TryLock: %v, %v; want nil and ErrNotObtained", other, err)
	}
}

// An attempt's done ends its context once every node has answered; the
// answers still in the channel then must count, not be taken for nodes
// that never answered.
func TestGatherCountsTheAnswersThatCameBeforeItsContextEnded(t *testing.T) {
	r := &Redlock{nodes: make([]RedisClient, 5), quorum: 3}
	for range 1000 {
		ctx, cancel := context.WithCancel(context.Background())
		got := r.gather(ctx, nil, 0, cancel, func(context.Context, RedisClient) (bool, error) { return true, nil })
		if got.yes != 5 || got.failed != 0 {
			t.Fatalf("gather: %+v, want five answers of yes", got)
		}
	}
}
