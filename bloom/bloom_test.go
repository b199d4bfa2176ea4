package bloom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/hashtag"
	"github.com/surgekit/surge/internal/redistest"
)

func mustNew(t *testing.T, rdb RedisClient, name string, capacity int64, rate float64, opts ...Option) *Filter {
	t.Helper()
	f, err := New(rdb, name, capacity, rate, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustScalable(t *testing.T, rdb RedisClient, name string, capacity int64, rate float64, opts ...Option) *Filter {
	t.Helper()
	f, err := NewScalable(rdb, name, capacity, rate, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func items(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// inBatches runs fn on batches of 1000 of all, four at a time (Redis
// works on one while the test hashes the next), and fails on an error.
func inBatches(t *testing.T, all []string, fn func(batch []string) error) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 4)
	)
	const size = 1000
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := int(next.Add(size)) - size
				if from >= len(all) {
					return
				}
				if err := fn(all[from:min(from+size, len(all))]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// falsePositives counts the probes, none of them added, that the filter
// claims.
func falsePositives(t *testing.T, f *Filter, probes []string) int {
	t.Helper()
	var n atomic.Int64
	inBatches(t, probes, func(batch []string) error {
		got, err := f.ExistsMany(context.Background(), batch)
		for _, yes := range got {
			if yes {
				n.Add(1)
			}
		}
		return err
	})
	return int(n.Load())
}

// addAll adds every item.
func addAll(t *testing.T, f *Filter, all []string) {
	t.Helper()
	inBatches(t, all, func(batch []string) error {
		_, err := f.AddMany(context.Background(), batch)
		return err
	})
}

// addNew adds items in one AddMany and returns how many were new.
func addNew(t *testing.T, f *Filter, items []string) int {
	t.Helper()
	got, err := f.AddMany(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, isNew := range got {
		if isNew {
			n++
		}
	}
	return n
}

// mustContainAll fails on any false negative.
func mustContainAll(t *testing.T, f *Filter, all []string) {
	t.Helper()
	inBatches(t, all, func(batch []string) error {
		got, err := f.ExistsMany(context.Background(), batch)
		for i, yes := range got {
			if !yes {
				return fmt.Errorf("false negative: %q was added but Exists says no", batch[i])
			}
		}
		return err
	})
}

func TestSizingFollowsTheFormulas(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	f := mustNew(t, rdb, "users", 100_000, 0.01)
	p := f.Params()
	// m = ceil(100000·ln 100 / ln²2) = 958506, k = round(9.585·ln 2) = 7.
	if p.Bits != 958_506 || p.Hashes != 7 || p.Shards != 1 || p.Growth != 0 || p.Capacity != 100_000 {
		t.Fatalf("params %+v", p)
	}
	if r := p.ExpectedRate(100_000); math.Abs(r-0.01) > 0.0002 {
		t.Fatalf("expected rate at capacity %.5f, want about 0.01", r)
	}

	s := mustNew(t, rdb, "users", 100_000, 0.01, WithShards(8))
	if p := s.Params(); p.Shards != 8 || p.Bits != 8*119_814 || p.Hashes != 7 {
		t.Fatalf("8 shards: %+v", p)
	}

	// Ten billion ids at 1% need about 9.6e10 bits: 23 shards of < 2^32.
	huge := mustNew(t, rdb, "huge", 10_000_000_000, 0.01)
	if p := huge.Params(); p.Shards != 23 || p.Bits/uint64(p.Shards) > MaxShardBits {
		t.Fatalf("huge filter: %+v", p)
	}

	sc := mustScalable(t, rdb, "grow", 1000, 0.01)
	if p := sc.Params(); p.Growth != DefaultGrowth || p.Rate != 0.01 {
		t.Fatalf("scalable: %+v", p)
	}
	// Layer j holds 1000·2^j items at 0.01/2^(j+1), and the layers' rates
	// sum to less than the target however many there are.
	kept := 1.0 // the chance an absent item passes every layer
	for j, l := range sc.layers {
		if want := int64(1000) << j; l.capacity != want {
			t.Fatalf("layer %d capacity %d, want %d", j, l.capacity, want)
		}
		if l.bits > MaxShardBits {
			t.Fatalf("layer %d has %d bits", j, l.bits)
		}
		kept *= 1 - math.Pow(-math.Expm1(-float64(l.hashes)*float64(l.capacity)/float64(l.bits)), float64(l.hashes))
	}
	if rate := 1 - kept; rate >= 0.01 {
		t.Fatalf("every layer full: rate %.5f, want under 0.01", rate)
	}
	if len(sc.layers) < 10 {
		t.Fatalf("only %d layers fit", len(sc.layers))
	}
}

func TestBadArgumentsNeverReachRedis(t *testing.T) {
	faults := redistest.NewFaults()
	calls := faults.On(redistest.Any())
	b := redistest.Open(t, redistest.Mini)
	rdb := b.Client(t, faults)
	before := calls.Hits()

	bad := []struct {
		name string
		make func() (*Filter, error)
	}{
		{"capacity 0", func() (*Filter, error) { return New(rdb, "f", 0, 0.01) }},
		{"capacity -1", func() (*Filter, error) { return NewScalable(rdb, "f", -1, 0.01) }},
		{"rate 0", func() (*Filter, error) { return New(rdb, "f", 10, 0) }},
		{"rate 1", func() (*Filter, error) { return New(rdb, "f", 10, 1) }},
		{"rate NaN", func() (*Filter, error) { return New(rdb, "f", 10, math.NaN()) }},
		{"rate -0.5", func() (*Filter, error) { return NewScalable(rdb, "f", 10, -0.5) }},
		{"empty name", func() (*Filter, error) { return New(rdb, "", 10, 0.01) }},
		{"braces", func() (*Filter, error) { return New(rdb, "a{b}", 10, 0.01) }},
		{"nil client", func() (*Filter, error) { return New(nil, "f", 10, 0.01) }},
		{"nil *redis.Client", func() (*Filter, error) { return New((*redis.Client)(nil), "f", 10, 0.01) }},
		{"shards 0", func() (*Filter, error) { return New(rdb, "f", 10, 0.01, WithShards(0)) }},
		{"shards too many", func() (*Filter, error) { return New(rdb, "f", 10, 0.01, WithShards(MaxShards+1)) }},
		{"shard over 2^32 bits", func() (*Filter, error) { return New(rdb, "f", 1_000_000_000, 0.001, WithShards(2)) }},
		{"beyond every shard", func() (*Filter, error) { return New(rdb, "f", math.MaxInt64, 0.01) }},
		{"growth on fixed", func() (*Filter, error) { return New(rdb, "f", 10, 0.01, WithGrowth(2)) }},
		{"growth 0", func() (*Filter, error) { return NewScalable(rdb, "f", 10, 0.01, WithGrowth(0)) }},
		{"prefix with brace", func() (*Filter, error) { return New(rdb, "f", 10, 0.01, WithPrefix("a{")) }},
	}
	for _, c := range bad {
		if f, err := c.make(); !errors.Is(err, ErrInvalid) || f != nil {
			t.Errorf("%s: %v, %v; want ErrInvalid", c.name, f, err)
		}
	}
	f := mustNew(t, rdb, "f", 10, 0.01)
	ctx := context.Background()
	if _, err := f.AddMany(ctx, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddMany(nil): %v", err)
	}
	if _, err := f.ExistsMany(ctx, []string{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("ExistsMany(empty): %v", err)
	}
	if after := calls.Hits(); after != before {
		t.Fatalf("bad arguments sent %d commands to Redis", after-before)
	}
}

func TestAddReportsNewAndExistsFindsEveryItem(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := mustNew(t, b.Client(t), redistest.Key(t), 1000, 0.01)
		if ok, err := f.Exists(ctx, "alice"); err != nil || ok {
			t.Fatalf("Exists on an empty filter: %v %v", ok, err)
		}
		if isNew, err := f.Add(ctx, "alice"); err != nil || !isNew {
			t.Fatalf("first Add: %v %v, want new", isNew, err)
		}
		if isNew, err := f.Add(ctx, "alice"); err != nil || isNew {
			t.Fatalf("second Add: %v %v, want not new", isNew, err)
		}
		if ok, err := f.Exists(ctx, "alice"); err != nil || !ok {
			t.Fatalf("Exists after Add: %v %v", ok, err)
		}
		if isNew, err := f.Add(ctx, ""); err != nil || !isNew {
			t.Fatalf("the empty item is an item: %v %v", isNew, err)
		}

		added := items("user", 500)
		// At most a few of 500 collide with everything before them.
		if fresh := addNew(t, f, added); fresh < 495 {
			t.Fatalf("%d of 500 distinct items were new", fresh)
		}
		again, err := f.AddMany(ctx, added)
		if err != nil {
			t.Fatal(err)
		}
		for i, isNew := range again {
			if isNew {
				t.Fatalf("%q new on its second Add", added[i])
			}
		}
		mustContainAll(t, f, added)
		if fp := falsePositives(t, f, items("absent", 2000)); fp > 60 {
			t.Fatalf("%d of 2000 absent items found in a 1%% filter half full", fp)
		}
	})
}

func TestShardsSpreadOverSlotsAndAnswerLikeOneFilter(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		f := mustNew(t, rdb, redistest.Key(t), 2000, 0.01, WithShards(4))
		slots := map[int]bool{}
		for i := range f.shards {
			slots[hashtag.Slot(f.shards[i].keys[0].(string))] = true
		}
		if len(slots) != 4 {
			t.Fatalf("4 shards in %d slots", len(slots))
		}
		all := items("id", 1500)
		if fresh := addNew(t, f, all); fresh < 1480 {
			t.Fatalf("%d of 1500 new", fresh)
		}
		mustContainAll(t, f, all)
		for _, id := range all[:20] {
			if ok, err := f.Exists(ctx, id); err != nil || !ok {
				t.Fatalf("Exists(%q): %v %v", id, ok, err)
			}
		}
		// Every shard got a share, each in its own bitmap.
		for i := range f.shards {
			n, err := rdb.BitCount(ctx, f.shards[i].keys[1].(string), nil).Result()
			if err != nil || n == 0 {
				t.Fatalf("shard %d: %d bits set, %v", i, n, err)
			}
		}
		if fp := falsePositives(t, f, items("nobody", 3000)); fp > 90 {
			t.Fatalf("%d of 3000 absent items found", fp)
		}
	})
}

func TestConcurrentAddsOfOneItemSeeNewExactlyOnce(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Key(t)
		const workers, perItem = 16, 40
		all := items("ticket", perItem)
		var newCount [perItem]atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each worker its own Filter, as separate processes would be.
				f, err := NewScalable(rdb, name, 10, 0.01, WithShards(2))
				if err != nil {
					errs <- err
					return
				}
				for i := range all {
					i := (i + w) % perItem
					isNew, err := f.Add(ctx, all[i])
					if err != nil {
						errs <- err
						return
					}
					if isNew {
						newCount[i].Add(1)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// The scalable filter grew past its first layer of 5 per shard
		// while the workers raced, and still no item was new twice.
		twice := 0
		for i := range newCount {
			switch n := newCount[i].Load(); {
			case n > 1:
				t.Fatalf("%q reported new %d times", all[i], n)
			case n == 0:
				twice++ // a false positive at its first Add: allowed, rare
			}
		}
		if twice > 2 {
			t.Fatalf("%d of %d items never reported new", twice, perItem)
		}
	})
}

func TestOtherParametersAreRefusedNotMixed(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Key(t)
		a := mustNew(t, rdb, name, 1000, 0.01)
		if err := a.Create(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Add(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		// Creating it again with the same parameters changes nothing.
		again := mustNew(t, rdb, name, 1000, 0.01)
		if err := again.Create(ctx); err != nil {
			t.Fatalf("Create with the same parameters: %v", err)
		}
		if ok, err := again.Exists(ctx, "x"); err != nil || !ok {
			t.Fatalf("x after a second Create: %v %v", ok, err)
		}

		others := map[string]*Filter{
			"rate":     mustNew(t, rdb, name, 1000, 0.001),
			"capacity": mustNew(t, rdb, name, 2000, 0.01),
			"shards":   mustNew(t, rdb, name, 1000, 0.01, WithShards(3)),
			"scalable": mustScalable(t, rdb, name, 1000, 0.01),
		}
		for what, o := range others {
			if _, err := o.Add(ctx, "y"); !errors.Is(err, ErrMismatch) {
				t.Errorf("Add with another %s: %v, want ErrMismatch", what, err)
			}
			if _, err := o.ExistsMany(ctx, []string{"x", "y", "z"}); !errors.Is(err, ErrMismatch) {
				t.Errorf("ExistsMany with another %s: %v, want ErrMismatch", what, err)
			}
			if err := o.Create(ctx); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "m=9586") {
				t.Errorf("Create with another %s: %v, want ErrMismatch naming the stored m", what, err)
			}
			if err := o.Drop(ctx); !errors.Is(err, ErrMismatch) {
				t.Errorf("Drop with another %s: %v, want ErrMismatch", what, err)
			}
		}
		// Nothing the others did touched a's bits.
		if ok, err := a.Exists(ctx, "y"); err != nil || ok {
			t.Fatalf("y leaked into the filter: %v %v", ok, err)
		}
	})
}

func TestScalableFilterGrowsAndStaysUnderItsRate(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		name := redistest.Key(t)
		f := mustScalable(t, rdb, name, 100, 0.02)
		// One batch far past the first layer: the call grows the filter
		// layer by layer as it goes.
		first := items("early", 700)
		if _, err := f.AddMany(ctx, first); err != nil {
			t.Fatal(err)
		}
		layers, err := rdb.HGet(ctx, f.shards[0].keys[0].(string), "layers").Int()
		if err != nil || layers != 3 { // 100 + 200 + 400 >= 700
			t.Fatalf("after 700 items: %d layers, %v; want 3", layers, err)
		}
		// A second Filter that has not seen the growth catches up.
		late := mustScalable(t, rdb, name, 100, 0.02)
		more := items("late", 300)
		for _, id := range more {
			if _, err := late.Add(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if got := late.shards[0].known.Load(); got != 4 {
			t.Fatalf("late filter knows %d layers, want 4", got)
		}
		mustContainAll(t, f, append(first, more...))
		mustContainAll(t, late, first)
		// Theory for these layers: 1.74%.
		if fp := falsePositives(t, f, items("never", 20_000)); fp >= 400 {
			t.Fatalf("%d of 20000 absent items found, not under the 2%% target", fp)
		}
		n, err := f.Count(ctx)
		if err != nil || n < 950 || n > 1050 {
			t.Fatalf("Count after 1000 items: %d, %v", n, err)
		}
	})
}

func TestAScalableFilterThatCannotGrowSaysSo(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		// Growth 1 keeps every layer at one item: MaxLayers items fill it.
		f := mustScalable(t, b.Client(t), redistest.Key(t), 1, 0.1, WithGrowth(1))
		if len(f.layers) != MaxLayers {
			t.Fatalf("%d layers planned, want %d", len(f.layers), MaxLayers)
		}
		// Tiny layers: many items are false positives and fill nothing.
		all := items("x", 1000)
		var err error
		for _, item := range all {
			if _, err = f.Add(ctx, item); err != nil {
				break
			}
		}
		if !errors.Is(err, ErrFull) {
			t.Fatalf("Add past the last layer: %v, want ErrFull", err)
		}
		// What went in before the error stays in.
		if ok, err := f.Exists(ctx, all[0]); err != nil || !ok {
			t.Fatalf("first item after ErrFull: %v %v", ok, err)
		}
	})
}

func TestAnAddManyThatAFullFilterCutsShortNamesTheItemsLeftOut(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		// Two shards of one-item layers: fill shard 0 with Adds, then send
		// a batch of both shards' items, shard 0's first.
		f := mustScalable(t, b.Client(t), redistest.Key(t), 1, 0.1, WithGrowth(1), WithShards(2))
		var err error
		for i := 0; err == nil; i++ {
			if item := fmt.Sprint("fill-", i); shardOf(item, 2) == 0 {
				_, err = f.Add(ctx, item)
			}
		}
		if !errors.Is(err, ErrFull) {
			t.Fatalf("filling shard 0: %v, want ErrFull", err)
		}
		var batch []string
		for i := 0; len(batch) < 8; i++ {
			item := fmt.Sprint("b-", i)
			if len(batch) < 4 && shardOf(item, 2) == 0 || len(batch) >= 4 && shardOf(item, 2) == 1 {
				batch = append(batch, item)
			}
		}
		isNew, err := f.AddMany(ctx, batch)
		var be *BatchError
		if !errors.As(err, &be) || !errors.Is(err, ErrFull) {
			t.Fatalf("AddMany over a full shard and a free one: %v, want a BatchError wrapping ErrFull", err)
		}
		// Shard 0 takes nothing; a tiny layer of shard 1 may call an item
		// present (a false positive), but shard 1's call ran and its
		// answers must be in their places.
		if fmt.Sprint(be.Unknown) != "[0 1 2 3]" {
			t.Errorf("unknown %v, want shard 0's items [0 1 2 3]", be.Unknown)
		}
		newOnes := 0
		for i := 4; i < 8; i++ {
			if isNew[i] {
				newOnes++
			}
		}
		if newOnes == 0 {
			t.Errorf("answers %v: none of shard 1's items new, want their answers kept", isNew)
		}
		found, err := f.ExistsMany(ctx, batch[4:])
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range found {
			if !ok {
				t.Errorf("%s, added by the batch, not found", batch[4+i])
			}
		}
	})
}

// A batch that fills a layer is finished with the next: the answers of
// the items sent again must land in their own places, not the first ones.
func TestABatchThatFillsALayerAnswersEveryItemInItsPlace(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := mustScalable(t, b.Client(t), redistest.Key(t), 10, 1e-6)
		all := items("fill", 30)
		got, err := f.AddMany(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		for i, isNew := range got {
			if !isNew {
				t.Errorf("item %d of 30, all fresh, reported not new: %v", i, got)
				break
			}
		}
		if n := f.shards[0].known.Load(); n < 2 {
			t.Fatalf("%d layer after 30 items in layers of 10 and more: the batch did not fill one", n)
		}
		again, err := f.AddMany(ctx, append(all[15:], items("fresh", 5)...))
		if err != nil {
			t.Fatal(err)
		}
		for i, isNew := range again {
			if want := i >= 15; isNew != want {
				t.Fatalf("second batch, item %d: new = %v, want %v: %v", i, isNew, want, again)
			}
		}
	})
}

func TestCountEstimatesDistinctItems(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		f := mustNew(t, b.Client(t), redistest.Key(t), 5000, 0.01, WithShards(2))
		if n, err := f.Count(ctx); err != nil || n != 0 {
			t.Fatalf("Count of an empty filter: %d %v", n, err)
		}
		all := items("c", 4000)
		addAll(t, f, all)
		addAll(t, f, all[:1000]) // duplicates do not count
		n, err := f.Count(ctx)
		if err != nil || n < 3880 || n > 4120 {
			t.Fatalf("Count after 4000 distinct items: %d, %v", n, err)
		}
	})
}

func TestDropDeletesEveryKey(t *testing.T) {
	redistest.Run(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		rdb := b.Client(t)
		f := mustScalable(t, rdb, redistest.Key(t), 50, 0.01, WithShards(2))
		addAll(t, f, items("d", 400)) // grows every shard
		var keys []string
		for i := range f.shards {
			for _, k := range f.shards[i].keys {
				keys = append(keys, k.(string))
			}
		}
		existing := func() int64 {
			var n int64
			for _, k := range keys { // one by one: the keys span slots
				c, err := rdb.Exists(ctx, k).Result()
				if err != nil {
					t.Fatal(err)
				}
				n += c
			}
			return n
		}
		if n := existing(); n < 6 { // meta + at least 2 layers, per shard
			t.Fatalf("%d keys before Drop", n)
		}
		// A Filter that never learnt of the growth still drops it all.
		stale := mustScalable(t, rdb, f.shards[0].keys[0].(string)[len(DefaultPrefix)+1:strings.LastIndex(f.shards[0].keys[0].(string), ":0}")], 50, 0.01, WithShards(2))
		if err := stale.Drop(ctx); err != nil {
			t.Fatal(err)
		}
		if n := existing(); n != 0 {
			t.Fatalf("%d keys left after Drop", n)
		}
		if ok, err := f.Exists(ctx, "d-1"); err != nil || ok {
			t.Fatalf("Exists after Drop: %v %v", ok, err)
		}
		if isNew, err := f.Add(ctx, "d-1"); err != nil || !isNew {
			t.Fatalf("Add after Drop: %v %v", isNew, err)
		}
	})
}

// Each script call's arguments are built in one slice sized up front:
// a wrong size costs a reallocation of every call's arguments.
func TestScriptArgumentsFitTheirSlice(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	fixed := mustNew(t, rdb, "fit", 100, 0.01)
	scalable := mustScalable(t, rdb, "fit-scalable", 100, 0.01)
	scalable.shards[0].known.Store(3)
	items := []string{"a", "b", "c"}
	for _, add := range []bool{true, false} {
		g := group{items: items}
		if a := scalable.args(add, &g); len(a) != cap(a) {
			t.Errorf("scalable, add %v: %d arguments in a slice of %d", add, len(a), cap(a))
		}
		s := existsFixedScript
		if add {
			s = addFixedScript
		}
		if a := fixed.fixedArgs(s, add, &g); len(a) != cap(a) {
			t.Errorf("fixed, add %v: %d arguments in a slice of %d", add, len(a), cap(a))
		}
	}
}
