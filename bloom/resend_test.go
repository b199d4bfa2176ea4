package bloom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// mustExist fails unless every item is found.
func mustExist(t *testing.T, f *Filter, all []string) {
	t.Helper()
	found, err := f.ExistsMany(context.Background(), all)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range found {
		if !ok {
			t.Fatalf("%q missing after its Add", all[i])
		}
	}
}

// filters returns a fixed and a scalable filter, each with one shard and
// with four, on rdb, the scripts loaded on every node: a resend that met
// NOSCRIPT would be an EVALSHA that ran nothing.
func filters(t *testing.T, rdb redis.UniversalClient) []struct {
	name string
	f    *Filter
} {
	t.Helper()
	all := []struct {
		name string
		f    *Filter
	}{
		{"fixed", mustNew(t, rdb, redistest.Key(t), 1000, 0.001)},
		{"fixed, 4 shards", mustNew(t, rdb, redistest.Key(t), 1000, 0.001, WithShards(4))},
		{"scalable", mustScalable(t, rdb, redistest.Key(t), 1000, 0.001)},
		{"scalable, 4 shards", mustScalable(t, rdb, redistest.Key(t), 1000, 0.001, WithShards(4))},
	}
	for _, c := range all {
		if _, err := c.f.AddMany(context.Background(), append(items("warm", 40), "old")); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// addScriptHash is the hash of the script f's adds run.
func addScriptHash(f *Filter) string {
	if f.scalable {
		return addScript.Hash()
	}
	return addFixedScript.Hash()
}

// go-redis sends a script call again when its reply is lost, and a
// pipeline as a whole: the second run finds the items the first added,
// and the caller is told it cannot know whether they were new.
func TestAnAddSentTwiceSaysItCannotTellNew(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		rdb := b.Client(t, faults)
		for _, c := range filters(t, rdb) {
			t.Run(c.name, func(t *testing.T) {
				resend := faults.On(redistest.Script(addScriptHash(c.f))).Resend().Times(1)
				if isNew, err := c.f.Add(ctx, "one"); isNew || !errors.Is(err, ErrResent) {
					t.Fatalf("Add sent twice: %v %v, want false and ErrResent", isNew, err)
				}
				if n := resend.Hits(); n != 1 {
					t.Fatalf("the rule saw %d calls, want 1", n)
				}
				mustExist(t, c.f, []string{"one"})
				if isNew, err := c.f.Add(ctx, "one"); err != nil || isNew {
					t.Fatalf("Add(one) again, sent once: %v %v, want not new", isNew, err)
				}
				// A batch over every shard, one old item in it: with
				// several shards, one pipeline, sent twice as a whole. No
				// item has a sure answer, so the error is ErrResent itself.
				all := append(items("many", 12), "old")
				resend.Times(1)
				got, err := c.f.AddMany(ctx, all)
				var be *BatchError
				if !errors.Is(err, ErrResent) || errors.As(err, &be) || slices.Contains(got, true) {
					t.Fatalf("AddMany sent twice: %v %v, want no item new and ErrResent alone", got, err)
				}
				mustExist(t, c.f, all)
			})
		}
	})
}

// A write that never reached Redis, then a second that ran: the items the
// run added are new, sure; only those it found present are unknown.
func TestAnAddWrittenTwiceThatRanOnceTellsNewFromUnknown(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		rdb := b.Client(t, faults)
		for _, c := range filters(t, rdb) {
			t.Run(c.name, func(t *testing.T) {
				lost := faults.On(redistest.Script(addScriptHash(c.f))).LoseFirstWrite().Times(1)
				if isNew, err := c.f.Add(ctx, "one"); err != nil || !isNew {
					t.Fatalf("Add of a new item written twice: %v %v, want new", isNew, err)
				}
				lost.Times(1)
				if isNew, err := c.f.Add(ctx, "old"); isNew || !errors.Is(err, ErrResent) {
					t.Fatalf("Add of an old item written twice: %v %v, want false and ErrResent", isNew, err)
				}
				all := append(items("many", 12), "old", "one")
				lost.Times(1)
				got, err := c.f.AddMany(ctx, all)
				var be *BatchError
				if !errors.As(err, &be) || !errors.Is(err, ErrResent) || errors.Is(err, ErrFull) {
					t.Fatalf("AddMany written twice: %v, want a *BatchError of ErrResent", err)
				}
				if want := []int{12, 13}; !slices.Equal(be.Unknown, want) {
					t.Fatalf("Unknown = %v, want %v (the old items)", be.Unknown, want)
				}
				for i, isNew := range got {
					if want := i < 12; isNew != want {
						t.Fatalf("%q: new = %v, want %v", all[i], isNew, want)
					}
				}
				mustExist(t, c.f, all)
			})
		}
	})
}

// Other calls land between a lost run and its resend; a scalable shard
// may even grow, so that the resend finds more layers than it was sent
// for and is sent once more with them. The answers of every later run of
// the call stay unsure.
func TestAnAddResentAfterOtherCallsLandedStillCannotTellNew(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		rdb := b.Client(t, faults)
		for _, c := range []struct {
			name     string
			scalable bool
		}{{"fixed", false}, {"scalable", true}} {
			t.Run(c.name, func(t *testing.T) {
				// Two Filters on one filter, as in two processes: this one
				// does not know of the layers the other's calls add.
				name := redistest.Key(t)
				f, other := mustNew(t, rdb, name, 1000, 0.001), mustNew(t, rdb, name, 1000, 0.001)
				if c.scalable {
					f, other = mustScalable(t, rdb, name, 4, 0.01), mustScalable(t, rdb, name, 4, 0.01)
				}
				if _, err := f.Add(ctx, "old"); err != nil {
					t.Fatal(err)
				}
				faults.On(redistest.Script(addScriptHash(f))).Resend().Between(func() {
					if _, err := other.AddMany(ctx, items("between", 40)); err != nil {
						t.Error(err)
					}
				}).Times(1)
				all := []string{"a", "old", "b"}
				got, err := f.AddMany(ctx, all)
				if !errors.Is(err, ErrResent) || slices.Contains(got, true) {
					t.Fatalf("AddMany resent: %v %v, want no item new and ErrResent", got, err)
				}
				if f.scalable && f.shards[0].known.Load() < 2 {
					t.Fatal("the shard did not grow between the two runs")
				}
				mustExist(t, f, all)
				// Sent once, a call for the same items finds them present.
				again, err := f.AddMany(ctx, all)
				if err != nil || slices.Contains(again, true) {
					t.Fatalf("AddMany of the items again: %v %v, want none new", again, err)
				}
				// Nothing was kept for a resend to find: the shard has its
				// meta hash and its bitmaps, no other key.
				meta := f.shards[0].keys[0].(string)
				tag := meta[strings.Index(meta, "{") : strings.Index(meta, "}")+1]
				if keys := redistest.KeysContaining(t, rdb, tag); len(keys) != 1+int(f.shards[0].known.Load()) {
					t.Fatalf("the shard's keys: %v, want the meta hash and one bitmap per layer", keys)
				}
			})
		}
	})
}

// A scalable batch that fills layers goes in several calls, the rest sent
// again with one more layer. When the first call was written twice, an
// item it left for a later call and that call finds present is unsure
// too; the items the calls set bits for are new.
func TestABatchThatFillsLayersAfterAResendKeepsItsAnswersUnsure(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		f := mustScalable(t, b.Client(t, faults), redistest.Key(t), 10, 1e-6)
		if _, err := f.Add(ctx, "warm"); err != nil { // loads the script
			t.Fatal(err)
		}
		faults.On(redistest.Script(addScript.Hash())).LoseFirstWrite().Times(1) // the first call only
		all := append(items("fill", 60), "fill-0")
		got, err := f.AddMany(ctx, all)
		var be *BatchError
		if !errors.As(err, &be) || !errors.Is(err, ErrResent) {
			t.Fatalf("AddMany: %v, want a *BatchError of ErrResent", err)
		}
		if n := f.shards[0].known.Load(); n < 3 {
			t.Fatalf("%d layers after 60 items in layers of 10, 20, ...: the batch did not fill two", n)
		}
		// fill-0 again, last, is answered by a later call than the one
		// written twice, and still unsure.
		if want := []int{60}; !slices.Equal(be.Unknown, want) {
			t.Fatalf("Unknown = %v, want %v", be.Unknown, want)
		}
		for i, isNew := range got[:60] {
			if !isNew {
				t.Fatalf("%q: not new", all[i])
			}
		}
		mustExist(t, f, all)
	})
}

// The callers of a coalesced Add share one script call, and so one lost
// reply: each is told its own answer, new for sure or unknown.
func TestAddsCoalescedInACallWrittenTwiceEachGetTheirOwnAnswer(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		f := mustNew(t, b.Client(t, faults), redistest.Key(t), 1000, 0.001)
		if _, err := f.Add(ctx, "old"); err != nil { // loads the script
			t.Fatal(err)
		}
		inFlight := make(chan error, maxInFlight)
		held := fillFlight(t, faults, addFixedScript.Hash(), func(i int) {
			_, err := f.Add(ctx, fmt.Sprint("held-", i))
			inFlight <- err
		})
		// The held calls were matched on arrival and go once; the batch
		// behind them is written twice.
		faults.On(redistest.Script(addFixedScript.Hash())).LoseFirstWrite().Times(1)
		queued := append(items("queued", 8), "old")
		results := queueAdds(t, ctx, f, held, inFlight, queued)
		for i, item := range queued {
			o := <-results[i]
			if item == "old" {
				if o.isNew || !errors.Is(o.err, ErrResent) {
					t.Fatalf("Add(old): %v %v, want false and ErrResent", o.isNew, o.err)
				}
				continue
			}
			if o.err != nil || !o.isNew {
				t.Fatalf("Add(%s): %v %v, want new", item, o.isNew, o.err)
			}
		}
		if n := held.calls.Hits(); n != maxInFlight+1 {
			t.Fatalf("%d script calls for the held adds and the queued ones, want %d", n, maxInFlight+1)
		}
	})
}
