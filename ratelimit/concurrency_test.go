package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

func mustAcquire(t *testing.T, l *Limiter, key string, limit int64, lease time.Duration) *Slot {
	t.Helper()
	s, err := l.TryAcquire(context.Background(), key, limit, lease)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return s
}

// mustBeLimited checks that a TryAcquire is refused and returns its
// error's details.
func mustBeLimited(t *testing.T, l *Limiter, key string, limit int64, lease time.Duration) *LimitedError {
	t.Helper()
	s, err := l.TryAcquire(context.Background(), key, limit, lease)
	var le *LimitedError
	if s != nil || !errors.Is(err, ErrLimited) || !errors.As(err, &le) {
		t.Fatalf("TryAcquire over the limit: %v %v, want a *LimitedError", s, err)
	}
	return le
}

func slotsKey(t *testing.T, l *Limiter, key string) string {
	t.Helper()
	k, err := l.tagged(key, ":c")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestConcurrencyNeverExceedsTheLimit(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		const limit = 5
		var holding, peak, acquired, refused atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 20 {
					s, err := l.TryAcquire(ctx, key, limit, time.Minute)
					if errors.Is(err, ErrLimited) {
						refused.Add(1)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					acquired.Add(1)
					n := holding.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					// Hold the slot across a round trip, so that holders
					// overlap.
					if err := rdb.Ping(ctx).Err(); err != nil {
						t.Error(err)
					}
					// Count the slot as free before it is: the counter may
					// undercount the holders, never overcount them.
					holding.Add(-1)
					if err := s.Release(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if p := peak.Load(); p > limit {
			t.Fatalf("%d requests held a slot at once, limit %d", p, limit)
		}
		if acquired.Load() == 0 || refused.Load() == 0 {
			t.Fatalf("acquired %d, refused %d of %d attempts: want both", acquired.Load(), refused.Load(), 64*20)
		}
		t.Logf("acquired %d, refused %d, peak %d holders", acquired.Load(), refused.Load(), peak.Load())
		// Every slot was released: the set is gone, not left behind.
		if n := rdb.Exists(ctx, slotsKey(t, l, key)).Val(); n != 0 {
			t.Fatalf("the slots key outlived its last slot")
		}
	})
}

func TestCrashedHolderFreesItsSlotWhenItsLeaseEnds(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l, clock := newPinned(t, b)
		key := redistest.Key(t)
		crashed := mustAcquire(t, l, key, 2, time.Second)
		clock.add(300 * time.Millisecond)
		mustAcquire(t, l, key, 2, time.Second) // crashes too
		le := mustBeLimited(t, l, key, 2, time.Second)
		if le.RetryAfter != 700*time.Millisecond || le.InFlight != 2 || le.Limit != 2 || le.Key != key {
			t.Fatalf("refused: %+v, want 2 of 2 in flight, retry after 700ms", le)
		}
		clock.add(le.RetryAfter - time.Millisecond)
		if le := mustBeLimited(t, l, key, 2, time.Second); le.RetryAfter != time.Millisecond {
			t.Fatalf("a millisecond before the lease ends: retry after %v, want 1ms", le.RetryAfter)
		}
		clock.add(time.Millisecond)
		mustAcquire(t, l, key, 2, time.Second)
		// The second crashed holder's lease ends 300ms later.
		if le := mustBeLimited(t, l, key, 2, time.Second); le.RetryAfter != 300*time.Millisecond {
			t.Fatalf("retry after %v, want 300ms", le.RetryAfter)
		}
		if err := crashed.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Release after the lease ended: %v, want ErrSlotLost", err)
		}
	})
}

func TestReleaseAndExtendOfALostSlot(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l, clock := newPinned(t, b)
		key := redistest.Key(t)

		// Lost while still in the set: no acquire has swept it yet.
		s := mustAcquire(t, l, key, 1, time.Second)
		clock.add(time.Second)
		if err := s.Extend(ctx, time.Minute); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Extend after the lease ended: %v, want ErrSlotLost", err)
		}
		if err := s.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Release after the lease ended: %v, want ErrSlotLost", err)
		}

		// Lost and taken by another request.
		s = mustAcquire(t, l, key, 1, time.Second)
		clock.add(time.Second)
		other := mustAcquire(t, l, key, 1, time.Second)
		if err := s.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Release of a slot taken over: %v, want ErrSlotLost", err)
		}
		// The lost slot's Release did not free the new holder's slot.
		mustBeLimited(t, l, key, 1, time.Second)

		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := other.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("second Release: %v, want ErrSlotLost", err)
		}
		mustAcquire(t, l, key, 1, time.Second)
	})
}

func TestExtendKeepsTheSlot(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l, clock := newPinned(t, b)
		rdb := b.Client(t)
		key := redistest.Key(t)
		s := mustAcquire(t, l, key, 1, time.Second)
		clock.add(900 * time.Millisecond)
		if err := s.Extend(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// The set lives as long as the extended lease.
		if ttl := rdb.PTTL(ctx, slotsKey(t, l, key)).Val(); ttl <= 4*time.Second || ttl > 5*time.Second {
			t.Fatalf("the slots key has TTL %v after Extend(5s)", ttl)
		}
		clock.add(time.Second) // past the first lease
		if le := mustBeLimited(t, l, key, 1, time.Second); le.RetryAfter != 4*time.Second {
			t.Fatalf("retry after %v, want 4s", le.RetryAfter)
		}
		// A shorter lease shortens the set's TTL too.
		if err := s.Extend(ctx, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if ttl := rdb.PTTL(ctx, slotsKey(t, l, key)).Val(); ttl <= time.Second || ttl > 2*time.Second {
			t.Fatalf("the slots key has TTL %v after Extend(2s)", ttl)
		}
		if err := s.Release(ctx); err != nil {
			t.Fatalf("Release of an extended slot: %v", err)
		}
		mustAcquire(t, l, key, 1, time.Second)
	})
}

func TestSlotsKeyAlwaysHasATTL(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		k := slotsKey(t, l, key)
		mustAcquire(t, l, key, 2, 10*time.Second)
		mustAcquire(t, l, key, 2, 20*time.Second)
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 19*time.Second || ttl > 20*time.Second {
			t.Fatalf("the slots key has TTL %v, want the latest lease, 20s", ttl)
		}
		// Someone removed the TTL: a refused request gives it back.
		rdb.Persist(ctx, k)
		mustBeLimited(t, l, key, 2, time.Second)
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 19*time.Second || ttl > 20*time.Second {
			t.Fatalf("a slots key without TTL was left with TTL %v, want 20s", ttl)
		}
	})
}

func TestSlotLeaseEndsOnRedisTime(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		l := newLimiter(t, b.Client(t))
		key := redistest.Key(t)
		mustAcquire(t, l, key, 1, 200*time.Millisecond) // never released
		le := mustBeLimited(t, l, key, 1, time.Second)
		if le.RetryAfter <= 0 || le.RetryAfter > 200*time.Millisecond {
			t.Fatalf("retry after %v, want up to 200ms", le.RetryAfter)
		}
		// miniredis's TIME follows the wall clock (FastForward does not
		// move it), so the lease ends in real time on every backend.
		redistest.WaitFor(t, 5*time.Second, "the crashed holder's lease to end", func() bool {
			s, err := l.TryAcquire(context.Background(), key, 1, time.Second)
			if err != nil && !errors.Is(err, ErrLimited) {
				t.Fatal(err)
			}
			return s != nil
		})
	})
}

func TestConcurrencyRedisErrorsAreReturned(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		key := redistest.Key(t)
		s := mustAcquire(t, l, key, 1, time.Minute)
		broken := errors.New("connection reset")
		rule := f.On(redistest.Any()).Fail(broken)
		if _, err := l.TryAcquire(ctx, key, 1, time.Minute); !errors.Is(err, broken) || errors.Is(err, ErrLimited) {
			t.Fatalf("TryAcquire over a broken connection: %v", err)
		}
		if err := s.Extend(ctx, time.Minute); !errors.Is(err, broken) || errors.Is(err, ErrSlotLost) {
			t.Fatalf("Extend over a broken connection: %v", err)
		}
		if err := s.Release(ctx); !errors.Is(err, broken) || errors.Is(err, ErrSlotLost) {
			t.Fatalf("Release over a broken connection: %v", err)
		}
		rule.Off()
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := l.TryAcquire(cancelled, key, 1, time.Minute); !errors.Is(err, context.Canceled) {
			t.Fatalf("TryAcquire with a cancelled context: %v", err)
		}
		// The failed calls changed nothing: the slot is still held.
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// An acquisition whose reply is lost may have taken its slot: it must not
// keep it for the whole lease, or a retry finds the key full.
func TestAnAcquisitionWhoseReplyIsLostLeavesNoSlotHeld(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		key := redistest.Key(t)
		if err := mustAcquire(t, l, key, 1, time.Hour).Release(ctx); err != nil { // loads the script
			t.Fatal(err)
		}
		broken := errors.New("connection reset")
		lost := f.On(redistest.Script(slotAcquireScript.Hash())).LoseReply(broken).Times(1)
		if _, err := l.TryAcquire(ctx, key, 1, time.Hour); !errors.Is(err, broken) {
			t.Fatalf("TryAcquire whose reply was lost: %v", err)
		}
		if lost.Hits() != 1 {
			t.Fatalf("%d acquisitions sent, want the one whose reply was lost", lost.Hits())
		}
		s, err := l.TryAcquire(ctx, key, 1, time.Hour)
		if err != nil {
			t.Fatalf("the retry: %v, want the slot", err)
		}
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConcurrencyInvalidInputNeverReachesRedis(t *testing.T) {
	f := redistest.NewFaults()
	b := redistest.Open(t, redistest.Mini)
	l := newLimiter(t, b.Client(t, f))
	ctx := context.Background()
	s := mustAcquire(t, l, "k", 1, time.Second)
	all := f.On(redistest.Any())
	var nilSlot *Slot
	cases := map[string]func() error{
		"zero limit":      func() error { _, err := l.TryAcquire(ctx, "k", 0, time.Second); return err },
		"negative limit":  func() error { _, err := l.TryAcquire(ctx, "k", -1, time.Second); return err },
		"zero lease":      func() error { _, err := l.TryAcquire(ctx, "k", 1, 0); return err },
		"short lease":     func() error { _, err := l.TryAcquire(ctx, "k", 1, 999*time.Microsecond); return err },
		"negative lease":  func() error { _, err := l.TryAcquire(ctx, "k", 1, -time.Second); return err },
		"empty key":       func() error { _, err := l.TryAcquire(ctx, "", 1, time.Second); return err },
		"empty tag":       func() error { _, err := l.TryAcquire(ctx, "a{}b", 1, time.Second); return err },
		"unclosed tag":    func() error { _, err := l.TryAcquire(ctx, "a{b", 1, time.Second); return err },
		"extend 0":        func() error { return s.Extend(ctx, 0) },
		"extend short":    func() error { return s.Extend(ctx, time.Microsecond) },
		"nil slot extend": func() error { return nilSlot.Extend(ctx, time.Second) },
		"nil slot":        func() error { return nilSlot.Release(ctx) },
	}
	wantInvalid(t, all, cases)
}

func TestMillisRoundsUp(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Millisecond:                      1,
		time.Millisecond + time.Nanosecond:    2,
		1500 * time.Microsecond:               2,
		time.Second:                           1000,
		time.Duration(1<<63 - 1):              9223372036855,
		15*time.Second - time.Nanosecond:      15000,
		15*time.Second + 999*time.Microsecond: 15001,
	} {
		if got := millis(d); got != want {
			t.Errorf("millis(%v) = %d, want %d", d, got, want)
		}
	}
}

// go-redis sends a script again when its reply is lost, and the caller
// sees the second run's reply: a Release run twice finds its slot gone. It
// must report the release, not a lost slot.
func TestAReleaseSentTwiceReleases(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		rdb := b.Client(t, f)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		if err := mustAcquire(t, l, key, 1, time.Minute).Release(ctx); err != nil { // loads the scripts
			t.Fatal(err)
		}
		s := mustAcquire(t, l, key, 1, time.Minute)
		resend := f.On(redistest.Script(slotReleaseScript.Hash())).Resend().Times(1)
		if err := s.Release(ctx); err != nil {
			t.Fatalf("Release run twice: %v, want nil", err)
		}
		if n := resend.Hits(); n != 1 {
			t.Fatalf("%d releases sent twice, want 1", n)
		}
		// The slot is free: the set went with its last slot.
		if n := rdb.Exists(ctx, slotsKey(t, l, key)).Val(); n != 0 {
			t.Fatal("the slots key outlived its last slot")
		}
		if err := s.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("second Release: %v, want ErrSlotLost", err)
		}
		if err := s.Extend(ctx, time.Minute); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Extend after Release: %v, want ErrSlotLost", err)
		}
		mustAcquire(t, l, key, 1, time.Minute)
	})
}

// A Release that failed may still have run; called again, it finds the
// slot gone while its lease still held: released, not lost.
func TestAReleaseRepeatedAfterAnErrorReleases(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		key := redistest.Key(t)
		if err := mustAcquire(t, l, key, 1, time.Minute).Release(ctx); err != nil { // loads the scripts
			t.Fatal(err)
		}
		s := mustAcquire(t, l, key, 1, time.Minute)
		broken := errors.New("connection reset")
		f.On(redistest.Script(slotReleaseScript.Hash())).LoseReply(broken).Times(1)
		if err := s.Release(ctx); !errors.Is(err, broken) {
			t.Fatalf("Release whose reply was lost: %v", err)
		}
		if err := s.Release(ctx); err != nil {
			t.Fatalf("Release again: %v, want nil", err)
		}
		mustAcquire(t, l, key, 1, time.Minute)
	})
}

// The local estimate of a lease's end never runs past Redis's: an Extend
// to a shorter lease whose reply was lost may have shortened it, and a
// Release after that lease's end must report the slot lost.
func TestAReleaseAfterALostShorterExtendIsLost(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := redistest.NewFaults()
		l := newLimiter(t, b.Client(t, f))
		clock := &pinned{t: time.Now().Truncate(time.Second)}
		l.clock = clock.now
		key := redistest.Key(t)
		s := mustAcquire(t, l, key, 1, time.Hour)
		if err := s.Extend(ctx, time.Hour); err != nil { // loads the script
			t.Fatal(err)
		}
		broken := errors.New("connection reset")
		lost := f.On(redistest.Script(slotExtendScript.Hash())).LoseReply(broken).Times(1)
		if err := s.Extend(ctx, time.Second); !errors.Is(err, broken) {
			t.Fatalf("Extend whose reply was lost: %v", err)
		}
		if n := lost.Hits(); n != 1 {
			t.Fatalf("%d extensions lost, want 1", n)
		}
		clock.add(time.Second)
		// Another request took the slot once the shortened lease ended.
		other := mustAcquire(t, l, key, 1, time.Hour)
		if err := s.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("Release after the shortened lease ended: %v, want ErrSlotLost", err)
		}
		mustBeLimited(t, l, key, 1, time.Hour)
		if err := other.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Extends of one Slot from many goroutines take turns; the Slot's
// estimate of its lease stays consistent (the race detector watches), and
// the slot is released once.
func TestASlotExtendedFromManyGoroutines(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		l := newLimiter(t, rdb)
		key := redistest.Key(t)
		s := mustAcquire(t, l, key, 1, time.Minute)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 5 {
					if err := s.Extend(ctx, time.Minute+time.Duration(i)*time.Second); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx); !errors.Is(err, ErrSlotLost) {
			t.Fatalf("second Release: %v, want ErrSlotLost", err)
		}
		if n := rdb.Exists(ctx, slotsKey(t, l, key)).Val(); n != 0 {
			t.Fatal("the slots key outlived its last slot")
		}
	})
}
