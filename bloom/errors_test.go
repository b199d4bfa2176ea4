package bloom

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/surgekit/surge/internal/redistest"
)

func TestRedisErrorsReachTheCaller(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		faults := redistest.NewFaults()
		rdb := b.Client(t, faults)
		fixed := mustNew(t, rdb, redistest.Key(t), 100, 0.01, WithShards(2))
		scalable := mustScalable(t, rdb, redistest.Key(t), 100, 0.01, WithShards(2))
		broken := errors.New("connection reset")
		for _, c := range []struct {
			name string
			sha  string
			call func() error
		}{
			{"fixed add", addFixedScript.Hash(), func() error { _, err := fixed.AddMany(ctx, items("a", 10)); return err }},
			{"fixed exists", existsFixedScript.Hash(), func() error { _, err := fixed.Exists(ctx, "a-1"); return err }},
			{"scalable add", addScript.Hash(), func() error { _, err := scalable.Add(ctx, "a-1"); return err }},
			{"scalable exists", existsScript.Hash(), func() error { _, err := scalable.ExistsMany(ctx, items("a", 10)); return err }},
			{"count", infoScript.Hash(), func() error { _, err := fixed.Count(ctx); return err }},
			{"drop", dropScript.Hash(), func() error { return scalable.Drop(ctx) }},
		} {
			rule := faults.On(redistest.Script(c.sha)).Fail(broken)
			err := c.call()
			rule.Off()
			if !errors.Is(err, broken) {
				t.Errorf("%s with the script failing: %v, want the Redis error", c.name, err)
			}
		}
		// A cancelled context is the caller's error, not a filter answer.
		if _, err := fixed.Add(ctx, "before"); err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if ok, err := fixed.Exists(cancelled, "before"); !errors.Is(err, context.Canceled) || ok {
			t.Fatalf("Exists with a cancelled context: %v %v", ok, err)
		}
		if ok, err := fixed.Exists(ctx, "before"); err != nil || !ok {
			t.Fatalf("after the faults: %v %v", ok, err)
		}
	})
}

func TestABatchWhoseShardFailsStillAnswersTheOtherShardsItems(t *testing.T) {
	// One shard's script call fails (its meta key holds a string, so its
	// script meets WRONGTYPE before writing anything) while the others
	// run: their items were added and must be reported new, and the
	// failed shard's items named as unknown.
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		for _, f := range []*Filter{
			mustNew(t, rdb, redistest.Key(t), 100, 0.01, WithShards(4)),
			mustScalable(t, rdb, redistest.Key(t), 100, 0.01, WithShards(4)),
		} {
			if err := f.Create(ctx); err != nil {
				t.Fatal(err)
			}
			const broken = 2
			if err := rdb.Set(ctx, f.shards[broken].keys[0].(string), "not a hash", 0).Err(); err != nil {
				t.Fatal(err)
			}
			batch := items("p", 40)
			var want []int
			for i, item := range batch {
				if shardOf(item, 4) == broken {
					want = append(want, i)
				}
			}
			if len(want) == 0 || len(want) == len(batch) {
				t.Fatalf("%d of %d items on the broken shard: the test needs some and not all", len(want), len(batch))
			}
			for _, call := range []struct {
				name string
				run  func(context.Context, []string) ([]bool, error)
			}{{"AddMany", f.AddMany}, {"ExistsMany", f.ExistsMany}} {
				got, err := call.run(ctx, batch)
				var be *BatchError
				if !errors.As(err, &be) || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Fatalf("%s: %v, want a BatchError wrapping the shard's WRONGTYPE", call.name, err)
				}
				if fmt.Sprint(be.Unknown) != fmt.Sprint(want) {
					t.Errorf("%s: unknown %v, want the broken shard's items %v", call.name, be.Unknown, want)
				}
				for i, ok := range got {
					if shardOf(batch[i], 4) != broken && !ok {
						t.Errorf("%s: item %d of a working shard answered false, want true (new, then present)", call.name, i)
					}
				}
			}
			// Every shard failing is that failure, not a BatchError.
			one := []string{batch[want[0]]}
			if _, err := f.AddMany(ctx, one); err == nil || errors.As(err, new(*BatchError)) {
				t.Errorf("AddMany on the broken shard alone: %v, want its plain error", err)
			}
		}
	})
}

func TestAFlushedScriptCacheIsRefilled(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		for _, f := range []*Filter{
			mustNew(t, rdb, redistest.Key(t), 100, 0.01, WithShards(3)),
			mustScalable(t, rdb, redistest.Key(t), 100, 0.01, WithShards(3)),
		} {
			all := items("s", 30)
			if _, err := f.AddMany(ctx, all); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			// The pipelined path, every shard meeting NOSCRIPT at once.
			mustContainAll(t, f, all)
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if isNew, err := f.Add(ctx, all[0]); err != nil || isNew {
				t.Fatalf("Add after a flush: %v %v", isNew, err)
			}
		}
	})
}

func TestAFilterReplacedUnderneathIsRefused(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Key(t)
		mine := mustNew(t, rdb, name, 100, 0.01)
		if _, err := mine.Add(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		// Another service drops it and creates its own under the name.
		theirs := mustNew(t, rdb, name, 100, 0.05)
		if err := mine.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := theirs.Create(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := mine.Add(ctx, "y"); !errors.Is(err, ErrMismatch) {
			t.Fatalf("Add to a filter replaced with other parameters: %v", err)
		}
	})
}
