package counter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// benchUsers is how many users the benchmarks' counts go round.
const benchUsers = 1000

// benchCap is out of reach, so that every call is counted.
const benchCap = 1 << 50

// benchClient returns a Client on the spawned redis-server.
func benchClient(b *testing.B) *Client {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SingleAddr(b)})
	b.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchLoop runs call serially and from parallel goroutines, over
// benchUsers users.
func benchLoop(b *testing.B, call func(ctx context.Context, u int) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		u := 0
		for b.Loop() {
			if err := call(ctx, u); err != nil {
				b.Fatal(err)
			}
			u = (u + 1) % benchUsers
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var seq atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(ctx, int(seq.Add(1)%benchUsers)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkIncr measures a capped increment of a daily count on a real
// redis-server: one round trip.
func BenchmarkIncr(b *testing.B) {
	c := benchClient(b)
	base := fmt.Sprintf("bench:incr:%d", time.Now().UnixNano())
	day := Daily(time.UTC)
	limits := make([]Limit, benchUsers)
	for i := range limits {
		limits[i] = Limit{Key: fmt.Sprintf("%s:%d", base, i), Cap: benchCap, Window: day}
	}
	benchLoop(b, func(ctx context.Context, u int) error {
		ct, err := c.Incr(ctx, limits[u], 1)
		if err == nil && !ct.Counted {
			err = fmt.Errorf("refused under an unreachable cap: %+v", ct)
		}
		return err
	})
}

// BenchmarkTake measures the lottery check: one Take of a user's draw
// against a daily cap and, optionally, of a win against a lifetime cap.
func BenchmarkTake(b *testing.B) {
	c := benchClient(b)
	base := fmt.Sprintf("bench:take:%d", time.Now().UnixNano())
	day := Daily(time.UTC)
	ops := make([][2]Op, benchUsers)
	for i := range ops {
		tag := fmt.Sprintf("{%s:%d}", base, i)
		ops[i] = [2]Op{
			{Limit: Limit{Key: tag + ":draws", Cap: benchCap, Window: day}, N: 1},
			{Limit: Limit{Key: tag + ":wins", Cap: benchCap, TTL: time.Hour}, N: 1, Optional: true},
		}
	}
	benchLoop(b, func(ctx context.Context, u int) error {
		out, err := c.Take(ctx, ops[u][0], ops[u][1])
		if err == nil && (!out.Allowed || !out.Counts[1].Counted) {
			err = fmt.Errorf("refused under unreachable caps: %+v", out)
		}
		return err
	})
}
