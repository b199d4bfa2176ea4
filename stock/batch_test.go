package stock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/surgekit/surge/internal/redistest"
)

// waiting returns how many Reserve calls wait on the batcher of item's
// single bucket.
func waiting(c *Counter, item string) int {
	b := c.layoutFor(item, 1).buckets[0].batcher.Load()
	if b == nil {
		return 0
	}
	return b.Queued()
}

// flight is maxInFlight Reserve calls whose script calls fillFlight
// paused at the client.
type flight struct {
	calls *redistest.Rule   // counts every reserve script call from the start
	held  []*redistest.Rule // one per paused call
	done  chan error        // each paused call's error
}

// fillFlight starts maxInFlight Reserve calls and pauses their script
// calls at the client, so that the calls after them queue.
func fillFlight(t *testing.T, f *redistest.Faults, c *Counter, item string) *flight {
	t.Helper()
	fl := &flight{calls: f.On(redistest.Script(reserveScript.Hash())), done: make(chan error, maxInFlight)}
	// Every rule that matches a call spends one of its Times, so each
	// pausing rule is added only once the call before it is paused.
	for i := range maxInFlight {
		h := f.On(redistest.Script(reserveScript.Hash())).Hold().Times(1)
		t.Cleanup(h.Release)
		fl.held = append(fl.held, h)
		go func() {
			_, err := c.Reserve(context.Background(), item, order(fmt.Sprint("first", i), fmt.Sprint("ann", i)))
			fl.done <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "a first reserve to be in flight", func() bool { return h.Hits() == 1 })
	}
	return fl
}

// land lets the paused calls go one at a time, and waits for them. Before
// the next goes, the calls queued behind have left the queue in one batch:
// two landing together would each hand the queue a sender, and the queue
// could split between them.
func land(t *testing.T, c *Counter, item string, fl *flight) {
	t.Helper()
	for _, h := range fl.held {
		h.Release()
		redistest.WaitFor(t, 10*time.Second, "the queued calls to be sent", func() bool { return waiting(c, item) == 0 })
	}
	for range maxInFlight {
		if err := <-fl.done; err != nil {
			t.Fatal(err)
		}
	}
}

// warm loads the scripts, so that every later reserve is one EVALSHA.
func warm(t *testing.T, c *Counter, item string) {
	t.Helper()
	if _, err := c.Reserve(context.Background(), item, order("warm", "warm")); err != nil {
		t.Fatal(err)
	}
}

type outcome struct {
	r   Reservation
	err error
}

// reserveAsync starts c.Reserve(ctx, item, o) and returns where its
// outcome arrives.
func reserveAsync(ctx context.Context, c *Counter, item string, o Order) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		r, err := c.Reserve(ctx, item, o)
		done <- outcome{r, err}
	}()
	return done
}

func TestCallsThatArriveWhileTheFlightIsFullGoTogetherInTheNext(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: 100, PerBuyer: 1})
		warm(t, c, item)
		fl := fillFlight(t, f, c, item)

		// Ten calls queue behind it: two of one buyer, and one order sent
		// twice. Decided one after the other in one script call, exactly
		// one of each pair may win.
		orders := []Order{order("dup", "bob"), order("dup", "bob"), order("c1", "cat"), order("c2", "cat")}
		for i := range 6 {
			orders = append(orders, order(fmt.Sprint("o", i), fmt.Sprint("buyer", i)))
		}
		results := make(chan outcome, len(orders))
		for i, o := range orders {
			go func() {
				r, err := c.Reserve(context.Background(), item, o)
				results <- outcome{r, err}
			}()
			redistest.WaitFor(t, 10*time.Second, "the calls to queue", func() bool { return waiting(c, item) == i+1 })
		}
		land(t, c, item, fl)
		var reserved, replayed, overLimit int
		for range orders {
			o := <-results
			switch {
			case o.err == nil && o.r.Replayed:
				replayed++
			case o.err == nil:
				reserved++
			case errors.Is(o.err, ErrBuyerLimit):
				overLimit++
			default:
				t.Errorf("Reserve: %v", o.err)
			}
		}
		if reserved != 8 || replayed != 1 || overLimit != 1 {
			t.Fatalf("reserved %d, replayed %d, over the limit %d; want 8, 1, 1", reserved, replayed, overLimit)
		}
		if calls := fl.calls.Hits(); calls != maxInFlight+1 {
			t.Fatalf("%d reserve script calls for the %d held and the ten behind them, want %d", calls, maxInFlight, maxInFlight+1)
		}
		held := int64(1 + maxInFlight + 8)
		wantLevels(t, c, item, Levels{Total: 100, Available: 100 - held, Held: held})
	})
}

func TestACallThatGivesUpInTheQueueLeavesNoTrace(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: 10, PerBuyer: 1})
		warm(t, c, item)
		fl := fillFlight(t, f, c, item)

		ctx, cancel := context.WithCancel(context.Background())
		gaveUp := make(chan error, 1)
		go func() {
			_, err := c.Reserve(ctx, item, order("quitter", "bob"))
			gaveUp <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the call to queue", func() bool { return waiting(c, item) == 1 })
		cancel()
		if err := <-gaveUp; !errors.Is(err, context.Canceled) {
			t.Fatalf("Reserve whose context ended in the queue: %v, want context.Canceled", err)
		}
		if n := waiting(c, item); n != 0 {
			t.Fatalf("%d calls still queued", n)
		}
		land(t, c, item, fl)
		// The order never reached Redis: reserving it now is its first time.
		r, err := c.Reserve(context.Background(), item, order("quitter", "bob"))
		if err != nil || r.Replayed {
			t.Fatalf("Reserve after giving up: %+v %v, want a fresh reservation", r, err)
		}
		held := int64(1 + maxInFlight + 1)
		wantLevels(t, c, item, Levels{Total: 10, Available: 10 - held, Held: held})
	})
}

func TestABatchWhoseSenderGivesUpIsSentAgainByTheOthers(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		f := redistest.NewFaults()
		c := newCounter(t, b.Client(t, f))
		item := newItem(t, c, Item{Total: 10, PerBuyer: 1})
		warm(t, c, item)
		fl := fillFlight(t, f, c, item)
		second := f.On(redistest.Script(reserveScript.Hash())).Hold().Times(1)
		t.Cleanup(second.Release)

		// The next batch is sent by the first call queued, the sender, with
		// its own context; the other two ride along.
		ctx, cancel := context.WithCancel(context.Background())
		senderDone := make(chan error, 1)
		go func() {
			_, err := c.Reserve(ctx, item, order("sender", "bob"))
			senderDone <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the sender to queue", func() bool { return waiting(c, item) == 1 })
		riders := make(chan outcome, 2)
		for i := range 2 {
			go func() {
				r, err := c.Reserve(context.Background(), item, order(fmt.Sprint("rider", i), fmt.Sprint("rider", i)))
				riders <- outcome{r, err}
			}()
			redistest.WaitFor(t, 10*time.Second, "the riders to queue", func() bool { return waiting(c, item) == 2+i })
		}
		land(t, c, item, fl)
		redistest.WaitFor(t, 10*time.Second, "the second batch to be in flight", func() bool { return second.Hits() == 1 })
		cancel()
		if err := <-senderDone; !errors.Is(err, context.Canceled) {
			t.Fatalf("sender: %v, want context.Canceled", err)
		}
		for range 2 {
			if o := <-riders; o.err != nil || o.r.State != Held {
				t.Fatalf("rider: %+v %v, want reserved", o.r, o.err)
			}
		}
		held := int64(1 + maxInFlight + 2)
		wantLevels(t, c, item, Levels{Total: 10, Available: 10 - held, Held: held})
	})
}
