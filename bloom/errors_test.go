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
		f := mustNew(t, b.Client(t, faults), redistest.Key(t), 100, 0.01, WithShards(2))
		if _, err := f.Add(ctx, "before"); err != nil {
			t.Fatal(err)
		}
		broken := errors.New("connection reset")
		for name, sha := range map[string]string{"add": addScript.Hash(), "exists": existsScript.Hash(), "info": infoScript.Hash()} {
			rule := faults.On(redistest.Script(sha)).Fail(broken)
			var err error
			switch name {
			case "add":
				_, err = f.AddMany(ctx, items("a", 10)) // both shards, one pipeline
			case "exists":
				_, err = f.Exists(ctx, "before")
			case "info":
				_, err = f.Count(ctx)
			}
			rule.Off()
			if !errors.Is(err, broken) {
				t.Errorf("%s with the script failing: %v, want the Redis error", name, err)
			}
		}
		// A cancelled context is the caller's error, not a filter answer.
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if ok, err := f.Exists(cancelled, "before"); !errors.Is(err, context.Canceled) || ok {
			t.Fatalf("Exists with a cancelled context: %v %v", ok, err)
		}
		if ok, err := f.Exists(ctx, "before"); err != nil || !ok {
			t.Fatalf("after the faults: %v %v", ok, err)
		}
	})
}

func TestAFlushedScriptCacheIsRefilled(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		f := mustNew(t, rdb, redistest.Key(t), 100, 0.01, WithShards(3))
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
