package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The Interleaved benchmarks measure the one-goroutine cases again with
// the libraries taking turns op by op, in one process over one client.
//
// From one goroutine an op is one round trip or two, and on a small VM a
// round trip's time depends mostly on how deeply the idle cores sleep
// between them, which drifts from one second to the next: one library
// measured 57 µs per lock pair and, in another process a moment later,
// 127 µs. Runs apart, even the interleaved rounds of cmd/compare, then
// compare machine states as much as libraries. Turn by turn, every
// library sees the same machine.
//
// Each b.N is one op of each library. The benchmark reports each
// library's mean time per op (<lib>-µs/<unit>) and surge's speed
// relative to each other library (surge/<lib>: the other's time per op
// over surge's; above 1, surge is faster).

// interleaved runs b.N rounds of one op of each library, in turn, in an
// order shuffled each round: an op can leave the machine in a state that
// helps or hinders the next (redsync's goroutines wake a core, say), so
// no library may always follow the same one. ops[i](ctx, n) runs library
// names[i]'s n-th op (n from 1); names[0] is surge.
func interleaved(b *testing.B, unit string, names []string, ops []func(ctx context.Context, n int64) error) {
	ctx := context.Background()
	spent := make([]time.Duration, len(ops))
	order := make([]int, len(ops))
	for i := range order {
		order[i] = i
	}
	shuffle := rand.New(rand.NewPCG(1, 2))
	var n int64
	round := func() {
		n++
		shuffle.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			start := time.Now()
			if err := ops[i](ctx, n); err != nil {
				b.Fatalf("%s: %v", names[i], err)
			}
			spent[i] += time.Since(start)
		}
	}
	for range 8 {
		round() // connections dialled, scripts loaded
	}
	clear(spent)
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	for i, name := range names {
		b.ReportMetric(float64(spent[i].Nanoseconds())/1e3/float64(b.N), name+"-µs/"+unit)
		if i > 0 {
			b.ReportMetric(float64(spent[i])/float64(spent[0]), "surge/"+name)
		}
	}
}

// pick returns the entries of all named names, in that order.
func pick[T any](b *testing.B, all []T, name func(T) string, names ...string) []T {
	var out []T
	for _, n := range names {
		i := slices.IndexFunc(all, func(t T) bool { return name(t) == n })
		if i < 0 {
			b.Fatalf("no library %q", n)
		}
		out = append(out, all[i])
	}
	return out
}

// BenchmarkLockPairInterleaved is BenchmarkLockPair, interleaved.
func BenchmarkLockPairInterleaved(b *testing.B) {
	rdb, _ := newClient(b)
	names := []string{"surge", "redsync", "redislock", "raw"}
	var ops []func(context.Context, int64) error
	for _, lk := range pick(b, lockers, func(l locker) string { return l.name }, names...) {
		f, key := lk.new(b, rdb), uniqueKey(lk.name)
		ops = append(ops, func(ctx context.Context, _ int64) error {
			release, err := f.try(ctx, key)
			if err != nil {
				return err
			}
			return release(ctx)
		})
	}
	interleaved(b, "pair", names, ops)
}

// BenchmarkReserveInterleaved is BenchmarkReserve, interleaved.
func BenchmarkReserveInterleaved(b *testing.B) {
	rdb, _ := newClient(b)
	names := []string{"surge", "raw-hincrby", "raw-evalsha"}
	var ops []func(context.Context, int64) error
	for _, r := range pick(b, reservers, func(r reserver) string { return r.name }, names...) {
		reserve, prefix := r.new(b, rdb), uniqueKey("o")
		ops = append(ops, func(ctx context.Context, n int64) error {
			return reserve(ctx, fmt.Sprint(prefix, n))
		})
	}
	interleaved(b, "reservation", names, ops)
}

// BenchmarkGCRAInterleaved is BenchmarkGCRA, interleaved.
func BenchmarkGCRAInterleaved(b *testing.B) {
	interleavedDecisions(b, gcraDeciders, "surge", "redis_rate", "raw-evalsha")
}

// BenchmarkFixedWindowInterleaved is BenchmarkFixedWindow, interleaved.
func BenchmarkFixedWindowInterleaved(b *testing.B) {
	interleavedDecisions(b, fixedWindowDeciders, "surge", "ulule", "raw-evalsha")
}

func interleavedDecisions(b *testing.B, deciders []decider, names ...string) {
	rdb, _ := newClient(b)
	var ops []func(context.Context, int64) error
	for _, d := range pick(b, deciders, func(d decider) string { return d.name }, names...) {
		decide, keys := d.new(b, rdb), roundRobinKeys(d.name)
		ops = append(ops, func(ctx context.Context, n int64) error {
			ok, err := decide(ctx, keys[n%rateKeys])
			if err == nil && !ok {
				err = fmt.Errorf("decision %d refused under a generous limit", n)
			}
			return err
		})
	}
	interleaved(b, "decision", names, ops)
}

// BenchmarkCappedIncrInterleaved is BenchmarkCappedIncr, interleaved.
func BenchmarkCappedIncrInterleaved(b *testing.B) { interleavedCounts(b, cappedIncrBenches) }

// BenchmarkCappedMultiLimitInterleaved is BenchmarkCappedMultiLimit,
// interleaved.
func BenchmarkCappedMultiLimitInterleaved(b *testing.B) {
	interleavedCounts(b, cappedMultiLimitBenches)
}

func interleavedCounts(b *testing.B, benches []counterBench) {
	rdb, _ := newClient(b)
	names := []string{"surge", "raw-incr", "raw-evalsha"}
	var ops []func(context.Context, int64) error
	for _, cb := range pick(b, benches, func(c counterBench) string { return c.name }, names...) {
		count := cb.new(b, rdb, roundRobinKeys("ct-"+cb.name))
		ops = append(ops, func(ctx context.Context, n int64) error {
			ok, err := count(ctx, int(n%rateKeys))
			if err == nil && !ok {
				err = fmt.Errorf("count %d refused under an unreachable cap", n)
			}
			return err
		})
	}
	interleaved(b, "count", names, ops)
}

// BenchmarkBloomAddInterleaved is BenchmarkBloomAdd, interleaved.
func BenchmarkBloomAddInterleaved(b *testing.B) { interleavedBloom(b, true) }

// BenchmarkBloomExistsInterleaved is BenchmarkBloomExists, interleaved;
// nine in ten lookups are of ids never added, as there.
func BenchmarkBloomExistsInterleaved(b *testing.B) { interleavedBloom(b, false) }

func interleavedBloom(b *testing.B, add bool) {
	rdb, _ := newClient(b)
	names := []string{"surge", "raw-bits", "raw-evalsha"}
	lookups := bloomLookups()
	var ops []func(context.Context, int64) error
	for _, bl := range pick(b, bloomers, func(bl bloomer) string { return bl.name }, names...) {
		calls := bl.new(b, rdb, bloomItems())
		prefix := uniqueKey("new") + ":"
		ops = append(ops, func(ctx context.Context, n int64) error {
			if add {
				// A new item each time: every add sets its k bits.
				_, err := calls.add(ctx, fmt.Sprint(prefix, n))
				return err
			}
			item := lookups[int((n-1)%bloomProbes)]
			ok, err := calls.exists(ctx, item)
			if err == nil && !ok && (n-1)%bloomProbes%bloomPresentEvery == 0 {
				err = fmt.Errorf("added item %s reported absent", item)
			}
			return err
		})
	}
	interleaved(b, map[bool]string{true: "add", false: "lookup"}[add], names, ops)
}
