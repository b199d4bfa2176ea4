package bloom

import (
	"context"
	"errors"
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
