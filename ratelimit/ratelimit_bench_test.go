package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// benchKeys is how many keys the benchmarks go round: a service limits
// many clients, not one.
const benchKeys = 1000

// benchLimiter returns a Limiter on the spawned redis-server, and that
// server's client for reading its statistics.
func benchLimiter(b *testing.B) (*Limiter, *redis.Client) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SingleAddr(b)})
	b.Cleanup(func() { _ = rdb.Close() })
	l, err := New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	return l, rdb
}

// benchKeyNames returns benchKeys keys unique to this run.
func benchKeyNames(name string) []string {
	base := fmt.Sprintf("bench:%s:%d", name, time.Now().UnixNano())
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = base + ":" + strconv.Itoa(i)
	}
	return keys
}

// benchLoop runs call serially and from parallel goroutines over benchKeys
// keys. Besides the round trip it reports the server's own time per script
// run (server-µs/op, from INFO commandstats), which the client's noise
// does not blur: what a change to a script costs Redis.
func benchLoop(b *testing.B, rdb *redis.Client, call func(ctx context.Context, k int) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		k := 0
		resetServerStats(b, rdb)
		for b.Loop() {
			if err := call(ctx, k); err != nil {
				b.Fatal(err)
			}
			k = (k + 1) % benchKeys
		}
		reportServerTime(b, rdb)
	})
	b.Run("parallel", func(b *testing.B) {
		var seq atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		resetServerStats(b, rdb)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(ctx, int(seq.Add(1)%benchKeys)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		reportServerTime(b, rdb)
	})
}

func resetServerStats(b *testing.B, rdb *redis.Client) {
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
}

// reportServerTime reports the server's microseconds per EVALSHA since
// resetServerStats.
func reportServerTime(b *testing.B, rdb *redis.Client) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
				us, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(us, "server-µs/op")
			}
		}
	}
}

// BenchmarkGCRA measures single GCRA decisions under a generous limit, so
// that every one admits: the hot path (TIME, GET, SET).
func BenchmarkGCRA(b *testing.B) {
	l, rdb := benchLimiter(b)
	keys := benchKeyNames("gcra")
	limit := Per(100_000, time.Second)
	benchLoop(b, rdb, func(ctx context.Context, k int) error {
		r, err := l.Allow(ctx, keys[k], limit)
		if err == nil && !r.Allowed {
			err = fmt.Errorf("refused under a generous limit: %+v", r)
		}
		return err
	})
}

// BenchmarkFixedWindow is BenchmarkGCRA for a fixed window (INCRBY, PTTL).
func BenchmarkFixedWindow(b *testing.B) {
	l, rdb := benchLimiter(b)
	keys := benchKeyNames("fixed")
	limit := Per(100_000, time.Second).Using(FixedWindow)
	benchLoop(b, rdb, func(ctx context.Context, k int) error {
		r, err := l.Allow(ctx, keys[k], limit)
		if err == nil && !r.Allowed {
			err = fmt.Errorf("refused under a generous limit: %+v", r)
		}
		return err
	})
}

// BenchmarkPenaltyHit measures hits that are counted, under a threshold
// out of reach.
func BenchmarkPenaltyHit(b *testing.B) {
	l, rdb := benchLimiter(b)
	keys := benchKeyNames("hit")
	p := Penalty{Threshold: 1 << 40, Window: time.Hour, Ban: time.Hour}
	benchLoop(b, rdb, func(ctx context.Context, k int) error {
		v, err := l.Hit(ctx, keys[k], p)
		if err == nil && v.Banned {
			err = fmt.Errorf("banned under an unreachable threshold: %+v", v)
		}
		return err
	})
}

// BenchmarkPenaltyBanned measures hits during a ban: a banned client that
// keeps hammering.
func BenchmarkPenaltyBanned(b *testing.B) {
	l, rdb := benchLimiter(b)
	keys := benchKeyNames("banned")
	p := Penalty{Threshold: 1, Window: time.Hour, Ban: time.Hour}
	for _, k := range keys {
		for range 2 {
			if _, err := l.Hit(context.Background(), k, p); err != nil {
				b.Fatal(err)
			}
		}
	}
	benchLoop(b, rdb, func(ctx context.Context, k int) error {
		v, err := l.Hit(ctx, keys[k], p)
		if err == nil && !v.Banned {
			err = fmt.Errorf("not banned: %+v", v)
		}
		return err
	})
}

// BenchmarkSlot measures a concurrency slot taken and given back.
func BenchmarkSlot(b *testing.B) {
	l, rdb := benchLimiter(b)
	keys := benchKeyNames("slot")
	benchLoop(b, rdb, func(ctx context.Context, k int) error {
		s, err := l.TryAcquire(ctx, keys[k], 1<<20, time.Minute)
		if err != nil {
			return err
		}
		return s.Release(ctx)
	})
}
