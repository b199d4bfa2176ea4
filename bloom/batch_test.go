package bloom

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/coalesce"
	"github.com/surgekit/surge/internal/redistest"
)

// flight is maxInFlight calls whose script calls fillFlight paused at the
// client, so that the calls after them queue.
type flight struct {
	calls *redistest.Rule   // counts the script's calls from the start
	held  []*redistest.Rule // one per paused call
}

// fillFlight starts maxInFlight calls of call and pauses their script
// (sha) calls. Every rule that matches a call spends one of its Times, so
// each pausing rule is added only once the call before it is paused.
func fillFlight(t *testing.T, faults *redistest.Faults, sha string, call func(i int)) *flight {
	t.Helper()
	fl := &flight{calls: faults.On(redistest.Script(sha))}
	for i := range maxInFlight {
		h := faults.On(redistest.Script(sha)).Hold().Times(1)
		t.Cleanup(h.Release)
		fl.held = append(fl.held, h)
		go call(i)
		redistest.WaitFor(t, 10*time.Second, "a call to be in flight", func() bool { return h.Hits() == 1 })
	}
	return fl
}

// land lets the paused calls go one at a time. Before the next goes, the
// calls queued on b have left in one batch: two landing together would
// each hand the queue a sender, and the queue could split between them.
func land(t *testing.T, fl *flight, b *coalesce.Batcher[string, answer]) {
	t.Helper()
	for _, h := range fl.held {
		h.Release()
		redistest.WaitFor(t, 10*time.Second, "the queued calls to be sent", func() bool { return b.Queued() == 0 })
	}
}

// addResult is what one Add returned.
type addResult struct {
	isNew bool
	err   error
}

// queueAdds starts an Add of each item in turn, each once the one before
// is queued behind the calls fillFlight holds, then lands those and checks
// that they succeeded (inFlight has their errors). It returns each Add's
// result, in the order of items.
func queueAdds(t *testing.T, ctx context.Context, f *Filter, fl *flight, inFlight <-chan error, items []string) []chan addResult {
	t.Helper()
	results := make([]chan addResult, len(items))
	for i, item := range items {
		results[i] = make(chan addResult, 1)
		go func() {
			isNew, err := f.Add(ctx, item)
			results[i] <- addResult{isNew, err}
		}()
		redistest.WaitFor(t, 10*time.Second, "the adds to queue", func() bool { return f.shards[0].adds.Queued() == i+1 })
	}
	land(t, fl, &f.shards[0].adds)
	for range maxInFlight {
		if err := <-inFlight; err != nil {
			t.Fatal(err)
		}
	}
	return results
}

// heldAdds makes a fixed filter whose add script is loaded and fills its
// flight with maxInFlight Adds held in flight (see fillFlight), whose
// errors arrive on first once they land.
func heldAdds(t *testing.T, b *redistest.Backend) (f *Filter, faults *redistest.Faults, held *flight, first chan error) {
	t.Helper()
	ctx := context.Background()
	faults = redistest.NewFaults()
	f = mustNew(t, b.Client(t, faults), redistest.Key(t), 1000, 0.01)
	if _, err := f.Add(ctx, "warm"); err != nil { // loads the script
		t.Fatal(err)
	}
	first = make(chan error, maxInFlight)
	held = fillFlight(t, faults, addFixedScript.Hash(), func(i int) {
		_, err := f.Add(ctx, fmt.Sprint("first-", i))
		first <- err
	})
	return f, faults, held, first
}

func TestConcurrentAddsShareScriptCalls(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, _, held, first := heldAdds(t, b)

		// Ten Adds queue behind them, five of one item: in one script
		// call, decided one after the other, exactly one of the five is new.
		queued := []string{"same", "same", "same", "same", "same", "a", "b", "c", "d", "e"}
		results := queueAdds(t, ctx, f, held, first, queued)
		fresh := map[string]int{}
		for i, item := range queued {
			o := <-results[i]
			if o.err != nil {
				t.Fatal(o.err)
			}
			if o.isNew {
				fresh[item]++
			}
		}
		if fresh["same"] != 1 || len(fresh) != 6 {
			t.Fatalf("new: %v; want each item new exactly once", fresh)
		}
		if n := held.calls.Hits(); n != maxInFlight+1 {
			t.Fatalf("%d script calls for %d held adds and ten behind them, want %d", n, maxInFlight, maxInFlight+1)
		}
	})
}

func TestALookupThatGivesUpInTheQueueReturnsAtOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		f := mustNew(t, b.Client(t, faults), redistest.Key(t), 1000, 0.01)
		if _, err := f.Exists(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
		first := make(chan error, maxInFlight)
		held := fillFlight(t, faults, existsFixedScript.Hash(), func(int) {
			_, err := f.Exists(ctx, "x")
			first <- err
		})
		quit, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := f.Exists(quit, "y")
			done <- err
		}()
		redistest.WaitFor(t, 10*time.Second, "the lookup to queue", func() bool { return f.shards[0].lookups.Queued() == 1 })
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("a cancelled lookup in the queue: %v", err)
		}
		land(t, held, &f.shards[0].lookups)
		for range maxInFlight {
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		}
		if n := held.calls.Hits(); n != maxInFlight {
			t.Fatalf("%d lookups sent, want %d: the cancelled one must not be", n, maxInFlight)
		}
	})
}

func TestAnAddThatGivesUpInFlightLeavesTheOthersTheirTrues(t *testing.T) {
	// Three Adds queue behind a full flight and go in one script call,
	// the first of them sending it. Its reply is held at the client, after
	// the script ran, while the sender gives up. The other two must still
	// hear that their items were new: a call sent again for them would
	// find the items present.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f, faults, held, first := heldAdds(t, b)
		batch := faults.On(redistest.Script(addFixedScript.Hash())).HoldReply().Times(1)
		t.Cleanup(batch.Release)

		quit, cancel := context.WithCancel(ctx)
		defer cancel()
		items := []string{"leader", "b", "c"}
		results := make([]chan addResult, len(items))
		for i, item := range items {
			results[i] = make(chan addResult, 1)
			addCtx := ctx
			if i == 0 {
				addCtx = quit
			}
			go func() {
				isNew, err := f.Add(addCtx, item)
				results[i] <- addResult{isNew, err}
			}()
			redistest.WaitFor(t, 10*time.Second, "the adds to queue", func() bool { return f.shards[0].adds.Queued() == i+1 })
		}
		// One place opens: the leader sends the three, and the script
		// runs; its reply waits.
		held.held[0].Release()
		redistest.WaitFor(t, 10*time.Second, "the batch to run", func() bool { return batch.Hits() == 1 })
		cancel()
		if o := <-results[0]; !errors.Is(o.err, context.Canceled) {
			t.Fatalf("the Add that gave up: %+v, want its context's error", o)
		}
		batch.Release()
		for i := 1; i < len(items); i++ {
			if o := <-results[i]; o.err != nil || !o.isNew {
				t.Errorf("Add(%q) = %v, %v; want new: its batch ran once, and added it", items[i], o.isNew, o.err)
			}
		}
		for _, h := range held.held[1:] {
			h.Release()
		}
		for range maxInFlight {
			if err := <-first; err != nil {
				t.Fatal(err)
			}
		}
		if n := held.calls.Hits(); n != maxInFlight+1 {
			t.Errorf("%d add script calls, want %d: the batch must not be sent again", n, maxInFlight+1)
		}
	})
}

func TestACoalescedAddThatWentInIsNotReportedFullWithTheOnesThatDidNot(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		f := mustScalable(t, b.Client(t, faults), redistest.Key(t), 1, 0.1, WithGrowth(1))
		// Growth 1 keeps every layer at one item: fill all but the last.
		var first string
		for i := 0; f.shards[0].known.Load() < MaxLayers-1 || first == ""; i++ {
			item := fmt.Sprint("fill-", i)
			if _, err := f.Add(ctx, item); err != nil {
				t.Fatal(err)
			}
			if first == "" {
				first = item
			}
		}
		// Two items not in the filter queue behind adds held in flight, and
		// go in one script call: the first takes the last layer's one
		// place, the second finds no room.
		var fresh []string
		for i := 0; len(fresh) < 2; i++ {
			item := fmt.Sprint("fresh-", i)
			if ok, err := f.Exists(ctx, item); err != nil {
				t.Fatal(err)
			} else if !ok {
				fresh = append(fresh, item)
			}
		}
		inFlight := make(chan error, maxInFlight)
		held := fillFlight(t, faults, addScript.Hash(), func(int) {
			_, err := f.Add(ctx, first) // present: takes no room
			inFlight <- err
		})
		results := queueAdds(t, ctx, f, held, inFlight, fresh)
		if o := <-results[0]; o.err != nil || !o.isNew {
			t.Fatalf("Add(%s), which took the last place: %v %v, want new", fresh[0], o.isNew, o.err)
		}
		if o := <-results[1]; !errors.Is(o.err, ErrFull) {
			t.Fatalf("Add(%s), which found no room: %v %v, want ErrFull", fresh[1], o.isNew, o.err)
		}
		if ok, err := f.Exists(ctx, fresh[0]); err != nil || !ok {
			t.Fatalf("Exists(%s) after it was added: %v %v", fresh[0], ok, err)
		}
		if isNew, err := f.Add(ctx, fresh[1]); !errors.Is(err, ErrFull) {
			t.Fatalf("Add(%s) again: %v %v, want ErrFull", fresh[1], isNew, err)
		}
	})
}

// Concurrent Adds travel in batches, and with layers of a few items most
// batches fill one: each caller must still get its own item's answer.
func TestConcurrentAddsToAGrowingFilterEachGetTheirOwnAnswer(t *testing.T) {
	redistest.RunReal(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := mustScalable(t, b.Client(t), redistest.Key(t), 8, 1e-6, WithGrowth(1))
		all := items("crowd", 200) // 25 of the 32 layers
		var wg sync.WaitGroup
		var notNew atomic.Int64
		errs := make(chan error, len(all))
		for _, item := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				isNew, err := f.Add(ctx, item)
				if err != nil {
					errs <- err
				} else if !isNew {
					notNew.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := notNew.Load(); n > 0 {
			t.Fatalf("%d of %d fresh items reported not new", n, len(all))
		}
	})
}

// A coalesced batch on a scalable filter that fills a layer goes in two
// calls; if the second fails, the callers the first answered keep their
// answers and only the others get the error.
func TestCoalescedAddsAnsweredBeforeALaterCallFailedKeepTheirAnswers(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		f := mustScalable(t, b.Client(t, faults), redistest.Key(t), 10, 0.01)
		if _, err := f.Add(ctx, "warm"); err != nil { // loads the script
			t.Fatal(err)
		}
		inFlight := make(chan error, maxInFlight)
		// The held calls add warm again: present, it takes no place in the
		// layer, so however their landings interleave with the batch's,
		// the batch finds nine of the first layer's ten places free.
		held := fillFlight(t, faults, addScript.Hash(), func(int) {
			_, err := f.Add(ctx, "warm")
			inFlight <- err
		})
		// Nine of the batch fit; the call for the other three, sent with
		// two layers' keys, fails. (A held call that lands after the
		// growth is sent again with two layers too, for its one item: the
		// rule tells them apart by the batch's size.)
		boom := errors.New("boom")
		stride := f.layers[0].hashes + f.layers[1].hashes
		faults.On(func(cmd redis.Cmder) bool {
			args := cmd.Args()
			return redistest.Script(addScript.Hash())(cmd) && args[2] == 3 && len(args) > 14+stride
		}).Fail(boom).Times(1)
		queued := items("queued", 12)
		results := queueAdds(t, ctx, f, held, inFlight, queued)
		for i, item := range queued {
			o := <-results[i]
			if i < 9 {
				if o.err != nil || !o.isNew {
					t.Fatalf("Add(%s), answered by the first call: %v %v, want new", item, o.isNew, o.err)
				}
				continue
			}
			if !errors.Is(o.err, boom) {
				t.Fatalf("Add(%s), left for the call that failed: %v %v, want its error", item, o.isNew, o.err)
			}
		}
	})
}
