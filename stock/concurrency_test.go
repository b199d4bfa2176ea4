package stock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// TestBooksHoldUnderMixedTraffic runs reservations (with retries),
// confirms, cancels, holds that run out and concurrent sweeps against one
// item, audits it atomically bucket by bucket all along, and checks the
// final counts against what the callers were told.
func TestBooksHoldUnderMixedTraffic(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, buckets := range []int{1, 4} {
			t.Run(fmt.Sprintf("buckets=%d", buckets), func(t *testing.T) {
				testMixedTraffic(t, b, buckets)
			})
		}
	})
}

func testMixedTraffic(t *testing.T, b *redistest.Backend, buckets int) {
	ctx := context.Background()
	c := newCounter(t, b.Client(t))
	const total, perBuyer, workers, rounds, buyers = 120, 2, 24, 40, 60
	item := newItem(t, c, Item{Total: total, PerBuyer: perBuyer, Buckets: buckets})

	var (
		confirmed   atomic.Int64 // orders whose Confirm returned nil (counted once each)
		lastHold    atomic.Int64 // latest deadline handed out, ms
		mu          sync.Mutex
		soldByBuyer = map[string]int64{}
		done        = make(chan struct{})
		background  sync.WaitGroup
	)
	// Sweepers and an auditor run while the workers do.
	for range 2 {
		background.Add(1)
		go func() {
			defer background.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := c.Sweep(ctx, item, 8); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	background.Add(1)
	go func() {
		defer background.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			a, err := c.Audit(ctx, item)
			if err != nil {
				t.Error(err)
				return
			}
			if !a.OK() {
				t.Errorf("audit during traffic: %v", a.Problems)
				return
			}
		}
	}()

	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range rounds {
				buyer := fmt.Sprintf("buyer%d", rng.IntN(buyers))
				o := Order{
					ID:       fmt.Sprintf("w%d-%d", w, i),
					Buyer:    buyer,
					Quantity: int64(1 + rng.IntN(2)),
					Hold:     time.Duration(5+rng.IntN(80)) * time.Millisecond,
				}
				r, err := c.Reserve(ctx, item, o)
				if errors.Is(err, ErrSoldOut) || errors.Is(err, ErrBuyerLimit) || errors.Is(err, ErrReturned) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if d := r.Deadline.UnixMilli(); d > lastHold.Load() {
					lastHold.Store(d)
				}
				if rng.IntN(4) == 0 { // a client retry
					again, err := c.Reserve(ctx, item, o)
					if err != nil {
						t.Error(err)
						return
					}
					if !again.Replayed {
						t.Errorf("retry of %s deducted again", o.ID)
						return
					}
				}
				switch rng.IntN(3) {
				case 0:
					err := c.Confirm(ctx, item, o.ID, buyer)
					if err == nil {
						confirmed.Add(o.Quantity)
						mu.Lock()
						soldByBuyer[buyer] += o.Quantity
						mu.Unlock()
					} else if !errors.Is(err, ErrReturned) {
						t.Error(err)
						return
					}
				case 1:
					if err := c.Cancel(ctx, item, o.ID, buyer); err != nil {
						t.Error(err)
						return
					}
				default: // never paid: the hold runs out
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	background.Wait()

	// Let every hold run out by Redis's clock, then sweep until nothing is
	// left.
	rdb := b.Client(t)
	redistest.WaitFor(t, 10*time.Second, "the last hold's deadline", func() bool {
		now, err := rdb.Time(ctx).Result()
		return err == nil && now.UnixMilli() > lastHold.Load()
	})
	for {
		n, err := c.Sweep(ctx, item, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	a := mustAudit(t, c, item)
	t.Logf("after the sale: %+v, %d units confirmed by %d buyers", a.Levels, confirmed.Load(), len(soldByBuyer))
	if a.Held != 0 || a.Sold != confirmed.Load() || a.Available+a.Sold != total {
		t.Fatalf("after the sale: %+v; want held 0, sold %d (the confirmed units), available %d", a.Levels, confirmed.Load(), total-confirmed.Load())
	}
	for buyer, units := range soldByBuyer {
		if units > perBuyer {
			t.Errorf("%s bought %d units, over the limit of %d", buyer, units, perBuyer)
		}
	}
	for _, bk := range a.Buckets {
		if bk.Outbox != 0 {
			t.Errorf("bucket %d: %d outbox entries left after sweeping", bk.Index, bk.Outbox)
		}
	}
}

// TestExactlyOneOfConfirmCancelAndExpiryWins races Confirm and Cancel for
// each order, with holds short enough that some run out during the race
// and concurrent Sweeps return them.
func TestExactlyOneOfConfirmCancelAndExpiryWins(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		for _, buckets := range []int{1, 2} {
			t.Run(fmt.Sprintf("buckets=%d", buckets), func(t *testing.T) {
				ctx := context.Background()
				c := newCounter(t, b.Client(t))
				const orders = 60
				item := newItem(t, c, Item{Total: orders, Buckets: buckets})
				var sold, returned atomic.Int64
				var wg sync.WaitGroup
				for i := range orders {
					o := Order{ID: fmt.Sprintf("o%d", i), Buyer: fmt.Sprintf("b%d", i%7), Quantity: 1,
						Hold: time.Duration(1+i%10) * time.Millisecond}
					if _, err := c.Reserve(ctx, item, o); err != nil {
						t.Fatal(err)
					}
					wg.Add(3)
					var confirmErr, cancelErr error
					var race sync.WaitGroup
					race.Add(2)
					go func() {
						defer wg.Done()
						defer race.Done()
						confirmErr = c.Confirm(ctx, item, o.ID, o.Buyer)
					}()
					go func() {
						defer wg.Done()
						defer race.Done()
						cancelErr = c.Cancel(ctx, item, o.ID, o.Buyer)
					}()
					go func() {
						defer wg.Done()
						if _, err := c.Sweep(ctx, item, 4); err != nil {
							t.Error(err)
						}
						race.Wait()
						switch {
						case confirmErr == nil && errors.Is(cancelErr, ErrSold):
							sold.Add(1)
						case cancelErr == nil && errors.Is(confirmErr, ErrReturned):
							returned.Add(1)
						default:
							t.Errorf("%s: confirm %v, cancel %v: want exactly one to win", o.ID, confirmErr, cancelErr)
						}
					}()
				}
				wg.Wait()
				a := mustAudit(t, c, item)
				if a.Sold != sold.Load() || a.Available != returned.Load() || a.Held != 0 {
					t.Fatalf("levels %+v; the callers saw %d sold and %d returned", a.Levels, sold.Load(), returned.Load())
				}
			})
		}
	})
}
