package bloom

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/surgekit/surge/internal/redistest"
)

// wantNew checks AddMany's answers: new for the items of fresh, not new
// for the others, and every item present afterwards.
func wantNew(t *testing.T, f *Filter, all []string, got []bool, fresh func(item string) bool) {
	t.Helper()
	for i, isNew := range got {
		if want := fresh(all[i]); isNew != want {
			t.Fatalf("%q: new = %v, want %v (all answers: %v)", all[i], isNew, want, got)
		}
	}
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

// go-redis sends a script call again when its reply is lost, and a
// pipeline as a whole: the second run finds the items the first added.
func TestAnAddSentTwiceStillReportsItsItemsNew(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		rdb := b.Client(t, faults)
		for _, c := range []struct {
			name string
			f    *Filter
			sha  string
		}{
			{"fixed", mustNew(t, rdb, redistest.Key(t), 1000, 0.001), addFixedScript.Hash()},
			{"fixed, 4 shards", mustNew(t, rdb, redistest.Key(t), 1000, 0.001, WithShards(4)), addFixedScript.Hash()},
			{"scalable", mustScalable(t, rdb, redistest.Key(t), 1000, 0.001), addScript.Hash()},
			{"scalable, 4 shards", mustScalable(t, rdb, redistest.Key(t), 1000, 0.001, WithShards(4)), addScript.Hash()},
		} {
			t.Run(c.name, func(t *testing.T) {
				// Every shard's node has the script: a call that meets
				// NOSCRIPT did not run, and is sent again as EVAL.
				if _, err := c.f.AddMany(ctx, append(items("warm", 40), "old")); err != nil {
					t.Fatal(err)
				}
				resend := faults.On(redistest.Script(c.sha)).Resend().Times(1)
				if isNew, err := c.f.Add(ctx, "one"); err != nil || !isNew {
					t.Fatalf("Add sent twice: %v %v, want new", isNew, err)
				}
				if n := resend.Hits(); n != 1 {
					t.Fatalf("the rule saw %d calls, want 1", n)
				}
				if isNew, err := c.f.Add(ctx, "one"); err != nil || isNew {
					t.Fatalf("Add(one) again: %v %v, want not new", isNew, err)
				}
				// A batch over every shard, one old item in it: with
				// several shards, one pipeline, sent twice as a whole.
				all := append(items("many", 12), "old")
				resend.Times(1)
				got, err := c.f.AddMany(ctx, all)
				if err != nil {
					t.Fatal(err)
				}
				wantNew(t, c.f, all, got, func(item string) bool { return item != "old" })
			})
		}
	})
}

// The callers of a coalesced Add share one script call, and so one lost
// reply: each must still be told its own item was new.
func TestAddsCoalescedInACallSentTwiceAreEachNew(t *testing.T) {
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
		// The held calls have their fate; the batch behind them is sent twice.
		resend := faults.On(redistest.Script(addFixedScript.Hash())).Resend().Times(1)
		queued := append(items("queued", 8), "old")
		results := queueAdds(t, ctx, f, held, inFlight, queued)
		got := make([]bool, len(queued))
		for i := range queued {
			o := <-results[i]
			if o.err != nil {
				t.Fatal(o.err)
			}
			got[i] = o.isNew
		}
		wantNew(t, f, queued, got, func(item string) bool { return item != "old" })
		if n := resend.Hits(); n != 1 {
			t.Fatalf("%d script calls for the queued adds, want 1", n)
		}
	})
}

// Under load, other calls land on the shard between a run whose reply is
// lost and its resend: the resend still gets the first run's reply. A
// scalable shard may even have grown in between, so that the resend
// finds more layers than it was sent for.
func TestASecondRunAnswersLikeTheFirstWhateverLandedInBetween(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		for _, c := range []struct {
			name string
			f    *Filter
		}{
			{"fixed", mustNew(t, rdb, redistest.Key(t), 1000, 0.001)},
			{"scalable", mustScalable(t, rdb, redistest.Key(t), 4, 0.01)},
		} {
			t.Run(c.name, func(t *testing.T) {
				f := c.f
				if _, err := f.Add(ctx, "old"); err != nil {
					t.Fatal(err)
				}
				g := &group{items: []string{"a", "old", "b"}}
				s, args := addFixedScript, []any(nil)
				if f.scalable {
					s, args = addScript, f.args(true, g)
				} else {
					args = f.fixedArgs(s, true, g)
				}
				first, err := s.Ints(ctx, rdb, args)
				if err != nil {
					t.Fatal(err)
				}
				// The reply is kept under the call's own key, the last of
				// its keys, and is born with its expiry.
				key := args[2+args[2].(int)].(string)
				if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > replyTTL {
					t.Fatalf("the kept reply's TTL: %v %v, want in (0, %v]", ttl, err, replyTTL)
				}
				// Time passes; other batches land; the scalable shard
				// outgrows its layer.
				if err := rdb.PExpire(ctx, key, replyTTL/2).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := f.AddMany(ctx, items("between", 40)); err != nil {
					t.Fatal(err)
				}
				if f.scalable && f.shards[0].known.Load() < 2 {
					t.Fatal("the shard did not grow")
				}
				second, err := s.Ints(ctx, rdb, args)
				if err != nil {
					t.Fatal(err)
				}
				want := []int64{1, 0, 1}
				if f.scalable {
					want = []int64{0, 1, 1, 0, 1}
				}
				if !slices.Equal(first, want) || !slices.Equal(second, first) {
					t.Fatalf("replies %v then %v, want %v twice", first, second, want)
				}
				// The resend found it, and keeps it for a further one.
				if ttl, err := rdb.PTTL(ctx, key).Result(); err != nil || ttl <= replyTTL/2 || ttl > replyTTL {
					t.Fatalf("the kept reply's TTL after the resend: %v %v, want in (%v, %v]", ttl, err, replyTTL/2, replyTTL)
				}
				// A call of its own, for the same items, finds them present.
				again, err := f.AddMany(ctx, g.items)
				if err != nil || slices.Contains(again, true) {
					t.Fatalf("AddMany of the items again: %v %v, want none new", again, err)
				}
			})
		}
	})
}

// A scalable batch that fills a layer goes in several calls, the rest
// sent again with one more layer: each is a call of its own, so with
// every call sent twice, none is answered with another's reply.
func TestABatchThatFillsLayersWithEveryCallSentTwiceAnswersEachItem(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		f := mustScalable(t, b.Client(t, faults), redistest.Key(t), 10, 1e-6)
		resend := faults.On(redistest.Script(addScript.Hash())).Resend()
		all := append(items("fill", 60), "fill-0")
		got, err := f.AddMany(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		resend.Off()
		if n := f.shards[0].known.Load(); n < 3 {
			t.Fatalf("%d layers after 60 items in layers of 10, 20, ...: the batch did not fill two", n)
		}
		seen := map[string]bool{}
		wantNew(t, f, all, got, func(item string) bool {
			first := !seen[item]
			seen[item] = true
			return first
		})
		if n := resend.Hits(); n < 3 {
			t.Fatalf("%d script calls for a batch that filled two layers", n)
		}
	})
}
