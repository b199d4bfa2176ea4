package benchmarks

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/bloom"
)

// Every Bloom benchmark uses a filter sized for a million items at 1%
// (m = 9,585,059 bits, k = 7), filled with bloomPrefill items before the
// timer starts: a service's filter a tenth full, about 7% of its bits
// set, so lookups meet a realistic bitmap rather than an empty one.
const (
	bloomCapacity = 1_000_000
	bloomRate     = 0.01
	bloomPrefill  = 100_000
	// bloomFillBatch is the items per call that fill a filter.
	bloomFillBatch = 1000
	// bloomBatch is the items per call of the batch benchmarks.
	bloomBatch = 100
	// bloomProbes is the number of lookups the Exists benchmarks cycle
	// through; one in bloomPresentEvery is an item that was added.
	bloomProbes       = 100_000
	bloomPresentEvery = 10
)

// A bloomer keeps a Bloom filter in Redis, each way. new creates an empty
// filter (surge's geometry every way), adds fill to it and returns its
// calls. A call reports, per item, whether it was new (add) or may be
// present (exists); a batch call that computes no answers (raw-evalsha)
// returns nil.
type bloomer struct {
	name string
	new  func(b *testing.B, rdb *redis.Client, fill []string) bloomCalls
}

type bloomCalls struct {
	add, exists         func(ctx context.Context, item string) (bool, error)
	addMany, existsMany func(ctx context.Context, items []string) ([]bool, error)
}

var bloomers = []bloomer{
	{"surge", func(b *testing.B, rdb *redis.Client, fill []string) bloomCalls {
		f, err := bloom.New(rdb, uniqueKey("surge-bloom"), bloomCapacity, bloomRate)
		if err != nil {
			b.Fatal(err)
		}
		// Each run's filter is 1.2 MB and compare starts many runs on
		// one server: give the memory back.
		b.Cleanup(func() {
			if err := f.Drop(context.Background()); err != nil {
				b.Error(err)
			}
		})
		fillBloom(b, fill, f.AddMany)
		return bloomCalls{add: f.Add, exists: f.Exists, addMany: f.AddMany, existsMany: f.ExistsMany}
	}},
	{"raw-bits", func(b *testing.B, rdb *redis.Client, fill []string) bloomCalls {
		// The same m and k as surge's filter. New does not touch Redis;
		// this Filter is never used.
		geometry, err := bloom.New(rdb, "geometry", bloomCapacity, bloomRate)
		if err != nil {
			b.Fatal(err)
		}
		p := geometry.Params()
		r := &rawBits{rdb: rdb, key: uniqueKey("raw-bits"), m: p.Bits, k: p.Hashes}
		b.Cleanup(func() {
			if err := rdb.Del(context.Background(), r.key).Err(); err != nil {
				b.Error(err)
			}
		})
		fillBloom(b, fill, func(ctx context.Context, items []string) ([]bool, error) {
			out := make([]bool, len(items))
			return out, r.do(ctx, true, items, out)
		})
		one := func(set bool) func(context.Context, string) (bool, error) {
			return func(ctx context.Context, item string) (bool, error) {
				var out [1]bool
				err := r.do(ctx, set, []string{item}, out[:])
				return out[0], err
			}
		}
		many := func(set bool) func(context.Context, []string) ([]bool, error) {
			return func(ctx context.Context, items []string) ([]bool, error) {
				out := make([]bool, len(items))
				return out, r.do(ctx, set, items, out)
			}
		}
		return bloomCalls{add: one(true), exists: one(false), addMany: many(true), existsMany: many(false)}
	}},
	{"raw-evalsha", func(b *testing.B, rdb *redis.Client, _ []string) bloomCalls {
		// The floor of a filter kept by a script: one EVALSHA round trip of
		// a script that does nothing, with the filter's key and, for a
		// batch, the items as arguments (the least a script must be
		// sent). Nothing to fill: it never reads a bit.
		key := uniqueKey("bloom-evalsha")
		one := func(ctx context.Context, _ string) (bool, error) {
			return true, trivialScript.Run(ctx, rdb, []string{key}).Err()
		}
		many := func(ctx context.Context, items []string) ([]bool, error) {
			args := make([]any, len(items))
			for i, item := range items {
				args[i] = item
			}
			return nil, trivialScript.Run(ctx, rdb, []string{key}, args...).Err()
		}
		return bloomCalls{add: one, exists: one, addMany: many, existsMany: many}
	}},
}

// rawBits is the Bloom filter people write by hand: k bit positions per
// item computed in Go, and k SETBIT (add) or GETBIT (exists) per item sent
// to a plain key in one go-redis pipeline, one round trip. It is a cost
// baseline, not a correct filter: its add is not atomic (two concurrent
// adds of a new item may both call it new), and a lookup always sends all
// k reads, where a script stops at the first clear bit.
type rawBits struct {
	rdb *redis.Client
	key string
	m   uint64
	k   int
}

// do sets (or reads) every item's bits and writes whether the item was new
// (or may be present) to out.
func (r *rawBits) do(ctx context.Context, set bool, items []string, out []bool) error {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, len(items)*r.k)
	var pos [16]int64
	for _, item := range items {
		for _, p := range r.positions(pos[:0], item) {
			if set {
				cmds = append(cmds, pipe.SetBit(ctx, r.key, p, 1))
			} else {
				cmds = append(cmds, pipe.GetBit(ctx, r.key, p))
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i := range items {
		bits := cmds[i*r.k : (i+1)*r.k]
		if set {
			// New if any bit was clear before.
			out[i] = false
			for _, c := range bits {
				out[i] = out[i] || c.Val() == 0
			}
		} else {
			// Present if every bit is set.
			out[i] = true
			for _, c := range bits {
				out[i] = out[i] && c.Val() == 1
			}
		}
	}
	return nil
}

// positions appends item's k positions: plain double hashing,
// h1 + i·h2 mod m, on the halves of a 64-bit FNV-1a.
func (r *rawBits) positions(dst []int64, item string) []int64 {
	h := fnv.New64a()
	h.Write([]byte(item))
	sum := h.Sum64()
	h1, h2 := sum&0xffffffff, sum>>32
	for i := range uint64(r.k) {
		dst = append(dst, int64((h1+i*h2)%r.m))
	}
	return dst
}

// fillBloom adds items to a filter in batches.
func fillBloom(b *testing.B, items []string, addMany func(context.Context, []string) ([]bool, error)) {
	b.Helper()
	ctx := context.Background()
	for start := 0; start < len(items); start += bloomFillBatch {
		if _, err := addMany(ctx, items[start:min(start+bloomFillBatch, len(items))]); err != nil {
			b.Fatal(err)
		}
	}
}

// bloomItems returns the ids the filters are filled with, user:0 to
// user:99999; bloomLookups returns the ids the Exists benchmarks look up.
// Nine in ten were never added: the cache-penetration case a filter is
// for, a flood of ids that exist nowhere, which a filter must turn away
// before they reach the database. They look like the added ids
// (user:100000 and up), so they hash no differently. The tenth is an
// added id, so the present path (all k bits read) is measured too. Both
// are made once, before any timer starts, so that allocs/op counts the
// library's allocations alone.
var (
	bloomItems = sync.OnceValue(func() []string {
		return itemNames("user:", 0, bloomPrefill)
	})
	bloomLookups = sync.OnceValue(func() []string {
		added := bloomItems()
		lookups := itemNames("user:", bloomPrefill, bloomProbes)
		for j := 0; j < bloomProbes; j += bloomPresentEvery {
			lookups[j] = added[j/bloomPresentEvery%len(added)]
		}
		return lookups
	})
)

// itemNames returns n names, prefix followed by from, from+1, ...
func itemNames(prefix string, from, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = prefix + strconv.Itoa(from+i)
	}
	return names
}

// BenchmarkBloomAdd measures adds of one new item per call from one
// goroutine: surge's Add against the hand-written pipeline of k SETBIT
// (raw-bits) and a do-nothing script (raw-evalsha, the floor of one
// atomic round trip). BenchmarkBloomAddParallel from sixteen goroutines.
func BenchmarkBloomAdd(b *testing.B)         { benchBloomAdds(b, 1, 1) }
func BenchmarkBloomAddParallel(b *testing.B) { benchBloomAdds(b, 16, 1) }

// BenchmarkBloomExists measures lookups of one item per call, nine in ten
// of them never added, against the pipeline of k GETBIT and the floor.
// BenchmarkBloomExistsParallel from sixteen goroutines.
func BenchmarkBloomExists(b *testing.B)         { benchBloomLookups(b, 1, 1) }
func BenchmarkBloomExistsParallel(b *testing.B) { benchBloomLookups(b, 16, 1) }

// BenchmarkBloomAddBatch measures AddMany of 100 new items per call: one
// script call for surge, 700 SETBIT in one pipeline for raw-bits, and for
// the floor one do-nothing script carrying the 100 items. It reports
// batches/s and items/s. BenchmarkBloomAddBatchParallel from sixteen
// goroutines.
func BenchmarkBloomAddBatch(b *testing.B)         { benchBloomAdds(b, 1, bloomBatch) }
func BenchmarkBloomAddBatchParallel(b *testing.B) { benchBloomAdds(b, 16, bloomBatch) }

// BenchmarkBloomExistsBatch measures ExistsMany of 100 items per call, 90
// of them never added, against 700 GETBIT in one pipeline and the floor.
// BenchmarkBloomExistsBatchParallel from sixteen goroutines.
func BenchmarkBloomExistsBatch(b *testing.B)         { benchBloomLookups(b, 1, bloomBatch) }
func BenchmarkBloomExistsBatchParallel(b *testing.B) { benchBloomLookups(b, 16, bloomBatch) }

// benchBloomAdds adds batch new items per call (Add when batch is 1).
func benchBloomAdds(b *testing.B, goroutines, batch int) {
	for _, bl := range bloomers {
		b.Run(bl.name, func(b *testing.B) {
			rdb, _ := newClient(b)
			sent := trackCommands(rdb)
			calls := bl.new(b, rdb, bloomItems())
			// Every call adds items no call added before, so every add
			// sets its k bits. (Whether an add reports an item new is not
			// checked: a rare false positive reports an item not new, yet
			// the add still does the same work.) The names cover the
			// warm-up's calls as well as b.N (see throughput).
			items := itemNames(uniqueKey("new")+":", 0, (8*goroutines+b.N)*batch)
			measureBloom(b, sent, goroutines, "adds", batch, func(ctx context.Context, i int64) error {
				if batch == 1 {
					_, err := calls.add(ctx, items[i-1])
					return err
				}
				_, err := calls.addMany(ctx, items[(i-1)*int64(batch):i*int64(batch)])
				return err
			})
		})
	}
}

// benchBloomLookups looks up batch items per call (Exists when batch is
// 1), cycling through bloomLookups, and fails if an added item is reported
// absent: a Bloom filter has no false negatives.
func benchBloomLookups(b *testing.B, goroutines, batch int) {
	lookups := bloomLookups()
	for _, bl := range bloomers {
		b.Run(bl.name, func(b *testing.B) {
			rdb, _ := newClient(b)
			sent := trackCommands(rdb)
			calls := bl.new(b, rdb, bloomItems())
			measureBloom(b, sent, goroutines, "lookups", batch, func(ctx context.Context, i int64) error {
				// bloomProbes is a multiple of batch: a batch never wraps.
				start := int((i - 1) * int64(batch) % bloomProbes)
				if batch == 1 {
					ok, err := calls.exists(ctx, lookups[start])
					if err == nil && !ok && start%bloomPresentEvery == 0 {
						err = fmt.Errorf("added item %s reported absent", lookups[start])
					}
					return err
				}
				found, err := calls.existsMany(ctx, lookups[start:start+batch])
				for j, ok := range found {
					if err == nil && !ok && (start+j)%bloomPresentEvery == 0 {
						err = fmt.Errorf("added item %s reported absent", lookups[start+j])
					}
				}
				return err
			})
		})
	}
}

// measureBloom is measure for the Bloom benchmarks: it reports calls per
// second (unit/s, or batches/s when a call carries several items, then
// items/s as well) and the microseconds Redis spent executing each call's
// commands.
func measureBloom(b *testing.B, sent *commandNames, goroutines int, unit string, batch int, call func(ctx context.Context, i int64) error) {
	if batch > 1 {
		unit = "batches"
	}
	throughput(b, goroutines, unit, func() {
		resetServerStats(b)
		sent.reset()
	}, func(ctx context.Context, _ int, i int64) error {
		return call(ctx, i)
	})
	if batch > 1 {
		b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "items/s")
	}
	b.ReportMetric(serverUsec(b, sent.names())/float64(b.N), "redis-us/op")
}
