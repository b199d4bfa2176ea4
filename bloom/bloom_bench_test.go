package bloom

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/surgekit/surge/internal/redistest"
)

// benchFilter returns a filter for a million items at 1% (k = 7) on the
// spawned redis-server, holding 100,000 items already.
func benchFilter(b *testing.B, opts ...Option) *Filter {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.SingleAddr(b)})
	b.Cleanup(func() { _ = rdb.Close() })
	f, err := New(rdb, redistest.Key(b), 1_000_000, 0.01, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 100_000; i += 1000 {
		batch := make([]string, 1000)
		for j := range batch {
			batch[j] = "member:" + strconv.Itoa(i+j)
		}
		if _, err := f.AddMany(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { _ = f.Drop(context.Background()) })
	return f
}

// benchCalls runs call with a fresh sequence number, serially and from
// parallel goroutines.
func benchCalls(b *testing.B, call func(ctx context.Context, seq int64) error) {
	ctx := context.Background()
	var seq atomic.Int64
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := call(ctx, seq.Add(1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := call(ctx, seq.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkAdd(b *testing.B) {
	f := benchFilter(b)
	benchCalls(b, func(ctx context.Context, seq int64) error {
		_, err := f.Add(ctx, "new:"+strconv.FormatInt(seq, 10))
		return err
	})
}

// Exists of items never added: the cache-penetration case, where most
// lookups stop at the first clear bit.
func BenchmarkExists(b *testing.B) {
	f := benchFilter(b)
	benchCalls(b, func(ctx context.Context, seq int64) error {
		_, err := f.Exists(ctx, "absent:"+strconv.FormatInt(seq, 10))
		return err
	})
}

func BenchmarkExistsPresent(b *testing.B) {
	f := benchFilter(b)
	benchCalls(b, func(ctx context.Context, seq int64) error {
		_, err := f.Exists(ctx, "member:"+strconv.FormatInt(seq%100_000, 10))
		return err
	})
}

func benchBatch(prefix string, seq int64) []string {
	batch := make([]string, 100)
	base := seq * 100
	for i := range batch {
		batch[i] = prefix + strconv.FormatInt(base+int64(i), 10)
	}
	return batch
}

func BenchmarkAddMany100(b *testing.B) {
	f := benchFilter(b)
	benchCalls(b, func(ctx context.Context, seq int64) error {
		_, err := f.AddMany(ctx, benchBatch("new:", seq))
		return err
	})
}

func BenchmarkExistsMany100(b *testing.B) {
	f := benchFilter(b)
	benchCalls(b, func(ctx context.Context, seq int64) error {
		_, err := f.ExistsMany(ctx, benchBatch("absent:", seq))
		return err
	})
}

// Eight shards: a batch becomes eight calls in one pipeline.
func BenchmarkExistsMany100Sharded(b *testing.B) {
	f := benchFilter(b, WithShards(8))
	benchCalls(b, func(ctx context.Context, seq int64) error {
		_, err := f.ExistsMany(ctx, benchBatch("absent:", seq))
		return err
	})
}
