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

func newRWLock(t *testing.T, c *Client, name string) *RWLock {
	t.Helper()
	rw, err := c.RWLock(name)
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

func TestReadersShareAndAWriterExcludesThem(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		name := redistest.Key(t)
		rw := newRWLock(t, newClient(t, b.Client(t)), name)
		w, err := rw.TryLock(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rw.TryRLock(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a reader while a writer holds it: %v", err)
		}
		if _, err := rw.TryLock(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a second writer: %v", err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		var readers []*Lease
		for range 3 {
			r, err := rw.TryRLock(ctx, time.Minute)
			if err != nil {
				t.Fatalf("readers together: %v", err)
			}
			if r.Fence() != w.Fence() {
				t.Fatalf("a reader's fence %d, want the last writer's %d", r.Fence(), w.Fence())
			}
			readers = append(readers, r)
		}
		if left, err := readers[0].TTL(ctx); err != nil || left <= 0 {
			t.Fatalf("a share's TTL: %v %v", left, err)
		}
		if _, err := rw.TryLock(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a writer while readers hold it: %v", err)
		}
		for _, r := range readers {
			if err := r.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := readers[0].Unlock(ctx); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("a share released twice: %v", err)
		}
		w2, err := rw.TryLock(ctx, time.Minute)
		if err != nil {
			t.Fatalf("a writer after the readers: %v", err)
		}
		if w2.Fence() <= w.Fence() {
			t.Fatalf("writer fences %d then %d", w.Fence(), w2.Fence())
		}
		_ = w2.Unlock(ctx)
	})
}

func TestAStreamOfReadersDoesNotStarveAWriter(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		name := redistest.Key(t)
		// Eight readers, each with a Client of its own as a process would
		// have, taking a share again as soon as it gave one back: there
		// is never a moment without one.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var reads atomic.Int64
		errs := make(chan error, 8)
		for range 8 {
			rw := newRWLock(t, newClient(t, b.Client(t)), name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					r, err := rw.RLock(ctx, 10*time.Second)
					if err != nil {
						errs <- err
						return
					}
					reads.Add(1)
					time.Sleep(5 * time.Millisecond) // the read
					if err := r.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		redistest.WaitFor(t, 10*time.Second, "the readers to get going", func() bool { return reads.Load() >= 16 })
		writer := newRWLock(t, newClient(t, b.Client(t)), name)
		start := time.Now()
		w, err := writer.Lock(ctx, 10*time.Second)
		if err != nil {
			t.Fatalf("the writer: %v", err)
		}
		waited := time.Since(start)
		// Readers hold 5 ms: a writer that is let in waits a few of those
		// (7-16 ms measured), not for the stream to dry up (it never does
		// here). The bound leaves room for a loaded CI machine.
		if waited > time.Second {
			t.Fatalf("the writer waited %v behind the readers", waited)
		}
		before := reads.Load()
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, 10*time.Second, "the readers to go on after the writer", func() bool { return reads.Load() > before+8 })
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		t.Logf("the writer waited %v among %d reads", waited, reads.Load())
	})
}

func TestACrashedReadersShareRunsOut(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		name := redistest.Key(t)
		crashed := newRWLock(t, newClient(t, b.Client(t)), name)
		if _, err := crashed.TryRLock(ctx, 200*time.Millisecond); err != nil { // never released
			t.Fatal(err)
		}
		writer := newRWLock(t, newClient(t, b.Client(t)), name)
		w, err := writer.Lock(ctx, time.Minute)
		if err != nil {
			t.Fatalf("the writer after a crashed reader: %v", err)
		}
		// A renewed share outlives its TTL; a writer waits for it.
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Renewed every third of 400 ms: one renewal may be late by up to
		// 260 ms (a loaded CI machine) before the share runs out.
		r, err := crashed.TryRLock(ctx, 400*time.Millisecond, AutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(1200 * time.Millisecond)
		redistest.WaitFor(t, 10*time.Second, "three leases to pass", func() bool { return time.Now().After(deadline) })
		if _, err := writer.TryLock(ctx, time.Minute); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("a writer while a renewed share is held: %v", err)
		}
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := newRWLock(t, newClient(t, b.Client(t)), name).TryLock(ctx, time.Minute, Fair(0)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Fair on a read-write lock: %v", err)
		}
	})
}

// A writer that sleeps while readers hold their shares leaves a marker
// that keeps new readers out for its wait plus a second. Its sleep, with
// the jitter, must end inside that second, however long the readers'
// leases: past it, new readers get in ahead of it, and the last one's
// release, seeing no marker, wakes nobody.
func TestAWaitersSleepEndsBeforeItsMarker(t *testing.T) {
	const margin = time.Second // the scripts' PX wait + 1000
	for _, wait := range []time.Duration{time.Millisecond, time.Second, 40 * time.Second, time.Hour} {
		for range 1000 {
			if got := jitter(wait); got < wait || got >= wait+margin {
				t.Fatalf("jitter(%v) = %v, want from %v to under %v", wait, got, wait, wait+margin)
			}
		}
	}
}
