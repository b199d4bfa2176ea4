package lock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

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

// BenchmarkTryLockUnlock measures one uncontended acquisition and release
// on a real redis-server: two round trips.
func BenchmarkTryLockUnlock(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	var seq atomic.Int64
	b.Run("serial", func(b *testing.B) {
		name := fmt.Sprintf("bench:%d", seq.Add(1))
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.TryLock(ctx, name, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			name := fmt.Sprintf("bench:%d", seq.Add(1))
			for pb.Next() {
				l, err := c.TryLock(ctx, name, 10*time.Second)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkLockContended has 16 goroutines take one lock in turn, each
// holding it for a millisecond, and reports the worst wait.
func BenchmarkLockContended(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	name := fmt.Sprintf("bench:contended:%d", time.Now().UnixNano())
	var worst atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			start := time.Now()
			l, err := c.Lock(ctx, name, 10*time.Second)
			if err != nil {
				b.Error(err)
				return
			}
			if w := int64(time.Since(start)); w > worst.Load() {
				worst.Store(w)
			}
			time.Sleep(time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(worst.Load())/1e6, "max-wait-ms")
}
